-- The kafkaops store's role and database on the deployment's one PostgreSQL server.
--
-- docker-compose.yml mounts this into the postgres image's /docker-entrypoint-initdb.d: it runs once, on an
-- empty data directory, as the superuser POSTGRES_USER, after the image created POSTGRES_DB (`airflow`,
-- Airflow's metadata database). The role's password is the container's $KAFKAOPS_STORE_PASSWORD (psql's
-- \getenv), never this file's. Running it again changes nothing but the password.
\set ON_ERROR_STOP on
\getenv store_password KAFKAOPS_STORE_PASSWORD
\if :{?store_password}
\else
DO $$ BEGIN RAISE EXCEPTION 'KAFKAOPS_STORE_PASSWORD is not set in the postgres container: set it (README, Deployment), remove the postgres-data volume and start again'; END $$;
\endif

SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kafkaops') AS role_missing \gset
\if :role_missing
CREATE ROLE kafkaops LOGIN;
\endif
ALTER ROLE kafkaops LOGIN PASSWORD :'store_password';

-- The store's owner creates its tables (kafkaops check --upgrade in airflow-init); PostgreSQL 15 lets a
-- database's owner create in its public schema.
SELECT NOT EXISTS (SELECT FROM pg_database WHERE datname = 'kafkaops') AS database_missing \gset
\if :database_missing
CREATE DATABASE kafkaops OWNER kafkaops;
\endif
