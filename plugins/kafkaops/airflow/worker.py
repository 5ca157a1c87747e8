"""What a Celery worker imports once, when it starts, for every kafkaops task it will run.

Airflow's Celery worker forks a process for each task, which then parses the task's DAG file.
Without this module each of those processes imports kafkaops again, each gate pandas and Great
Expectations (together about 4 s of CPU, more than the gate itself), and each task the libraries
kafkaops imports where it uses them (kafka-python, the store's migrations, the Postgres driver);
with it they are in the worker's memory when it forks. Deployments name it in Celery's own
``imports`` setting (docker-compose.yml and kafkaops/testing/deployment.py)::

    AIRFLOW__CELERY__EXTRA_CELERY_CONFIG='{"imports": ["kafkaops.airflow.worker"]}'

Importing it touches no Kafka, store or connection, and starts no thread, so forking after it is safe.
"""
from __future__ import annotations

import importlib

from kafkaops.airflow import capacity_review, operation_dag, partition_increase  # noqa: F401 - what the DAG files import
from kafkaops.platform import gates, migrations

#: What kafkaops imports only where it is used, each from a tenth of a second to seconds.
DEFERRED_IMPORTS = ("kafkaops.reassign.frames", "kafka.admin", "kafka.errors", "kafka.structs", "ansible_runner",
                    "psycopg2", "sqlalchemy.dialects.postgresql", "airflow.providers.postgres.hooks.postgres",
                    "airflow.sdk.execution_time.task_runner")

for _name in DEFERRED_IMPORTS:
    importlib.import_module(_name)
gates.preload()
migrations.head()  # reads the store's revision files once
