"""docker-compose.yml and the Dockerfile describe the deployment that kafkaops/testing/deployment.py runs.

No container engine runs in CI (a docker client at most), so nothing here builds or starts a container:
the compose file is held to the harness (the same components, each checked before it starts, the same
executor and settings, the kafkaops store on the same Postgres), to the Compose Specification's JSON
schema (the one ``docker compose`` validates with, ``compose-spec.json`` beside this file, from
compose-spec/compose-go v2.13, Apache-2.0), and to ``docker compose config`` when that plugin is
installed; the Dockerfile is read with dockerfile-parse; the inventory with ``ansible-inventory``; the
Postgres init script runs on a throw-away server.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import sqlalchemy as sa
import yaml
from dockerfile_parse import DockerfileParser

from kafkaops.testing import deployment as harness, postgres, prometheus

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
INVENTORY = REPO / "playbooks" / "inventory" / "compose.yml"
INIT_SQL = REPO / "deploy" / "postgres-init.sql"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus.yml"
SCHEMA = Path(__file__).with_name("compose-spec.json")
# ${NAME}, ${NAME:-default}, ${NAME:?message}: Compose's variable substitution
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:[?-])(?P<arg>[^}]*))?\}")
INIT = "airflow-init"


# -- what the files say ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def airflow(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Airflow services: the one-shot init and one per harness component."""
    return {name: service for name, service in services.items() if name.startswith("airflow-")}


@pytest.fixture(scope="module")
def shared(compose: dict[str, Any]) -> dict[str, str]:
    """The environment of the ``x-airflow`` block."""
    return compose["x-airflow"]["environment"]


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    """The compose inventory as Ansible reads it: groups and each host's variables."""
    done = subprocess.run([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(INVENTORY), "--list"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert done.returncode == 0, f"ansible-inventory cannot read {INVENTORY}: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def stages() -> dict[str, list[dict[str, Any]]]:
    """The Dockerfile's instructions (dockerfile-parse), by build stage name."""
    found: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for instruction in DockerfileParser(path=str(DOCKERFILE)).structure:
        if instruction["instruction"] == "FROM":
            words = instruction["value"].split()
            assert len(words) == 3 and words[1].upper() == "AS", f"stage without a name: FROM {instruction['value']}"
            current = found.setdefault(words[2], [])
        current.append(instruction)
    return found


def instructions(stage: list[dict[str, Any]], kind: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == kind]


def env_of(stage: list[dict[str, Any]]) -> dict[str, str]:
    return dict(word.split("=", 1) for value in instructions(stage, "ENV") for word in shlex.split(value))


def substituted(value: str, **values: str) -> str:
    """``value`` with each variable replaced as Compose would, given ``values`` (others: their default)."""
    def one(match: re.Match[str]) -> str:
        if match["name"] in values:
            return values[match["name"]]
        assert match["op"] == ":-", f"{match[0]} in {value!r} has no default and no value in this test"
        return match["arg"]
    return VARIABLE.sub(one, value)


def variables(value: str) -> list[re.Match[str]]:
    return list(VARIABLE.finditer(value))


def command_parts(service: dict[str, Any]) -> list[list[str]]:
    """A service's ``sh -c`` command as its ``&&``-joined commands, each split into words."""
    command = service["command"]
    assert command[:2] == ["sh", "-c"] and len(command) == 3, f"expected ['sh', '-c', SCRIPT], got {command}"
    parts: list[list[str]] = [[]]
    for word in shlex.split(command[2]):
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    return parts


def harness_settings() -> tuple[dict[str, str], dict[str, set[str]]]:
    """:func:`harness.shared_settings` called with a marker for each parameter: the settings, and the
    settings each parameter feeds (an address, a secret, a path); the others are the same everywhere."""
    markers = {name: f"<{name}>" for name in inspect.signature(harness.shared_settings).parameters}
    settings = harness.shared_settings(**{**markers, "store": {"marker": markers["store"]},
                                          "prometheus": {"marker": markers["prometheus"]}})
    return settings, {name: {key for key, value in settings.items() if marker in value}
                      for name, marker in markers.items()}


def service_of_host(services: dict[str, dict[str, Any]], host: str) -> dict[str, Any]:
    assert host in services, f"{host} is named in a URL or the inventory but is no service of {COMPOSE.name}"
    return services[host]


def dummy_secrets() -> dict[str, str]:
    """A value for every required variable of the file (``${NAME:?...}``)."""
    names = {m["name"] for m in variables(COMPOSE.read_text()) if m["op"] == ":?"}
    return {name: f"dummy{name.lower().replace('_', '')}" for name in names}


# -- the file is a Compose file ---------------------------------------------------------------------------

def test_the_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, f"{COMPOSE.name} is not a valid Compose file: " + "; ".join(errors[:10])


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode:
        pytest.skip("no `docker compose` here (it needs no engine, only the client and its compose plugin); "
                    "the schema test above validates the file")
    env = {**os.environ, **dummy_secrets()}
    done = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "-q"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"docker compose config rejects {COMPOSE.name}: {done.stderr[-2000:]}"
    del env["AIRFLOW_JWT_SECRET"]
    unset = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "-q"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    assert unset.returncode != 0 and "AIRFLOW_JWT_SECRET" in unset.stderr, "a missing secret must stop compose"


# -- the same components, each checked first -----------------------------------------------------------------

def test_each_harness_component_is_a_service_that_runs_kafkaops_check_first(airflow: dict[str, Any]) -> None:
    expected = {INIT: ("db", "migrate"), **{f"airflow-{name}": args for name, args in harness.COMPONENTS.items()}}
    assert set(airflow) == set(expected), "the Airflow services are not the harness's components plus the init"
    for name, service in airflow.items():
        check, run = command_parts(service)
        options = ["--upgrade"] if name == INIT else []  # the one-shot init brings the store's schema up
        assert check == ["python", "-m", "kafkaops", "check", *options], f"{name} does not check first: {check}"
        assert run == ["exec", "airflow", *expected[name]], f"{name} runs {run}, not airflow {expected[name]}"


def test_the_components_wait_for_the_init_and_the_init_for_postgres(airflow: dict[str, Any]) -> None:
    assert airflow[INIT]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert airflow[INIT]["restart"] == "no"
    for name, service in airflow.items():
        if name != INIT:
            assert service["depends_on"][INIT] == {"condition": "service_completed_successfully"}, name
            assert service["depends_on"]["redis"] == {"condition": "service_healthy"}, name


# -- the same settings -----------------------------------------------------------------------------------

def test_every_component_gets_exactly_the_harness_settings(shared: dict[str, str], airflow: dict[str, Any]) -> None:
    settings, fed = harness_settings()
    assert set(shared) == set(settings), (f"x-airflow sets {sorted(set(shared) - set(settings))} beyond the harness "
                                          f"and lacks {sorted(set(settings) - set(shared))}")
    assert shared["AIRFLOW__CORE__EXECUTOR"] == harness.EXECUTOR
    varying = set().union(*fed.values())
    for key in set(settings) - varying:
        assert shared[key] == settings[key], f"{key} is {shared[key]!r} in compose, {settings[key]!r} in the harness"
    for name, service in airflow.items():  # one JWT secret, one Fernet key, one of everything
        assert service["environment"] == shared, f"{name} does not get exactly the x-airflow environment"


def test_the_users_are_the_harness_users(shared: dict[str, str]) -> None:
    _, fed = harness_settings()
    (key,) = fed["users"]
    assert dict(pair.split(":") for pair in shared[key].split(",")) == harness.USERS


def test_secrets_are_required_variables_never_values(shared: dict[str, str], services: dict[str, Any]) -> None:
    _, fed = harness_settings()
    keys = fed["jwt_secret"] | fed["secret_key"] | fed["fernet_key"]
    assert len(keys) == 3
    names = []
    for key in keys:
        (match,) = variables(shared[key])
        assert match[0] == shared[key] and match["op"] == ":?", f"{key} must be ${{NAME:?...}}, is {shared[key]!r}"
        names.append(match["name"])
    assert len(set(names)) == len(names), f"two secrets share a variable: {names}"
    for url_key in fed["metadata_url"] | fed["result_backend"]:
        assert urlsplit(substituted(shared[url_key], **dummy_secrets())).password == \
            "dummypostgrespassword", f"{url_key}'s password is not ${{POSTGRES_PASSWORD}}"
    store = json.loads(shared[next(iter(fed["store"]))])
    assert [m["op"] for m in variables(store["password"])] == [":?"], "the store's password must be a variable"
    assert [m["name"] for m in variables(services["postgres"]["environment"]["POSTGRES_PASSWORD"])] == \
        ["POSTGRES_PASSWORD"]


def test_the_addresses_are_the_compose_services(shared: dict[str, str], services: dict[str, Any]) -> None:
    settings, fed = harness_settings()
    secrets = dummy_secrets()
    (metadata_key,) = fed["metadata_url"]
    metadata = sa.make_url(substituted(shared[metadata_key], **secrets))
    assert service_of_host(services, metadata.host)["image"].startswith("postgres:")
    assert metadata.database == services[metadata.host]["environment"]["POSTGRES_DB"]
    (backend_key,) = fed["result_backend"]
    assert shared[backend_key] == "db+" + shared[metadata_key], "Celery's results go to Airflow's database"
    (broker_key,) = fed["broker_url"]
    assert service_of_host(services, urlsplit(shared[broker_key]).hostname)["image"].startswith("redis:")
    for key in fed["api_url"]:  # the execution API inside; the base URL is what browsers use
        path = settings[key].replace("<api_url>", "")
        url = urlsplit(substituted(shared[key]))
        assert url.path.rstrip("/") == path.rstrip("/"), f"{key} is {shared[key]}, the harness's path is {path!r}"
        published = {p.split(":")[-1] for p in services["airflow-api-server"]["ports"]}
        assert str(url.port) in published, f"{key} names port {url.port}; the api-server publishes {published}"
    (execution,) = [k for k in fed["api_url"] if settings[k].endswith("/execution/")]
    assert urlsplit(shared[execution]).hostname == "airflow-api-server"
    (kafka_key,) = fed["kafka_bootstrap"]
    kafka, expected = json.loads(shared[kafka_key]), json.loads(settings[kafka_key])
    assert kafka["conn_type"] == expected["conn_type"] and set(kafka["extra"]) == set(expected["extra"])
    for address in kafka["extra"]["bootstrap.servers"].split(","):
        host, port = address.rsplit(":", 1)
        assert service_of_host(services, host)["image"].startswith("apache/kafka:"), host


def test_postgres_and_redis_come_back_and_redis_keeps_celery_s_queue_as_the_harness_s_does(
        services: dict[str, Any]) -> None:
    """The servers the deployment's fault scenarios restart (tests/deployment/test_faults.py): each restarts on its
    own, and Redis runs with the harness's persistence (its queue on a volume) so a queued task outlives it."""
    for name in ("postgres", "redis"):
        assert services[name].get("restart") == "unless-stopped", f"{name} has no restart policy"
    command = services["redis"]["command"]
    assert command[0] == "redis-server" and command[1:] == list(harness.REDIS_PERSISTENCE), \
        f"redis runs {command}; the harness's runs {harness.REDIS_PERSISTENCE}"
    assert any(str(v).endswith(":/data") for v in services["redis"]["volumes"]), "redis keeps /data in no volume"


def test_spark_default_is_the_compose_spark_master_with_workers(shared: dict[str, str], services: dict[str, Any]) -> None:
    _, fed = harness_settings()
    (key,) = fed["spark_master"]
    assert key == "AIRFLOW_CONN_SPARK_DEFAULT"
    spark = json.loads(shared[key])
    assert spark["conn_type"] == "spark", spark
    master = urlsplit(spark["host"])
    assert master.scheme == "spark" and master.port, f"spark_default's master is {spark['host']!r}, not spark://HOST:PORT"
    server = service_of_host(services, master.hostname)
    assert server["image"] == services["airflow-worker"]["image"], "the Master runs the kafkaops image (its pyspark)"
    command = server["command"]
    assert command[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"], command
    assert command[command.index("--port") + 1] == str(master.port) and command[command.index("--host") + 1] == \
        master.hostname, command
    workers = [name for name, service in services.items()
               if service.get("command", [None, None])[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]]
    assert workers, "no Spark Worker service"
    for name in workers:
        assert services[name]["command"][-1] == spark["host"], f"{name} registers with {services[name]['command'][-1]}"
        assert services[name]["image"] == server["image"], name
    # Spark's authentication: one secret, which the Master, the Workers and spark_default's submitter read as a file
    secret_file = spark["extra"]["auth-secret-file"]
    for name in [master.hostname, *workers, "airflow-worker"]:
        mounted = {m["target"]: m["source"] for m in services[name]["secrets"]}
        assert mounted.get(secret_file) == "spark-auth", f"{name} does not get the secret spark-auth at {secret_file}"
    for name in [master.hostname, *workers]:
        command = services[name]["command"]
        assert command[command.index("--properties-file") + 1] == secret_file, command
        opts = services[name]["environment"]["SPARK_MASTER_OPTS" if name == master.hostname else "SPARK_WORKER_OPTS"]
        assert "-Dspark.authenticate=true" in opts and "-Dspark.network.crypto.enabled=true" in opts, opts


def test_prometheus_default_is_the_compose_prometheus_scraping_the_brokers_and_the_node_exporter(
        shared: dict[str, str], services: dict[str, Any]) -> None:
    _, fed = harness_settings()
    (key,) = fed["prometheus"]
    assert key == f"AIRFLOW_CONN_{harness.PROMETHEUS_CONN_ID.upper()}"
    connection = json.loads(shared[key])
    url = f"{connection['schema']}://{connection['host']}:{connection['port']}"
    assert connection == harness.prometheus_connection(url), connection  # the harness's form
    server = service_of_host(services, connection["host"])
    assert server["image"].startswith("prom/prometheus:v"), server["image"]
    assert connection["port"] == 9090 and "--web.listen-address" not in " ".join(server["command"])
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert f"./{PROMETHEUS_CONFIG.relative_to(REPO)}:/etc/prometheus/prometheus.yml:ro" in server["volumes"]
    jobs = {job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]] for job in config["scrape_configs"]}
    assert set(jobs) == {prometheus.JOB, prometheus.NODE_JOB}, jobs
    brokers = [name for name, service in services.items() if name.startswith("kafka-")]
    assert sorted(host for host, _ in (t.rsplit(":", 1) for t in jobs[prometheus.JOB])) == sorted(brokers), jobs
    (node,) = jobs[prometheus.NODE_JOB]
    host, port = node.rsplit(":", 1)
    exporter = service_of_host(services, host)
    assert exporter["image"].startswith("prom/node-exporter:v") and port == "9100", (node, exporter["image"])
    assert [f"--collector.{c}" for c in prometheus.NODE_COLLECTORS] == \
        [a for a in exporter["command"] if a.startswith("--collector.") and a != "--collector.disable-defaults"], \
        "compose's node exporter runs the tests' collectors"


def test_the_store_is_its_own_database_on_the_airflow_postgres(shared: dict[str, str], services: dict[str, Any]) -> None:
    _, fed = harness_settings()
    (store_key,), (metadata_key,) = fed["store"], fed["metadata_url"]
    assert store_key == f"AIRFLOW_CONN_{harness.STORE_CONN_ID.upper()}"
    store = json.loads(shared[store_key])
    metadata = sa.make_url(substituted(shared[metadata_key], **dummy_secrets()))
    assert store["conn_type"] == "postgres"
    assert (store["host"], store["port"]) == (metadata.host, metadata.port), "the store is not on Airflow's server"
    assert store["schema"] == "kafkaops" != metadata.database
    assert store["login"] == "kafkaops"
    # the password reaches the postgres container, whose init script gives it to the store's role
    (name,) = [m["name"] for m in variables(store["password"])]
    assert [m["name"] for m in variables(services["postgres"]["environment"][name])] == [name]
    mounts = services["postgres"]["volumes"]
    assert f"./{INIT_SQL.relative_to(REPO)}:/docker-entrypoint-initdb.d/kafkaops.sql:ro" in mounts


def test_the_dags_folder_is_the_installed_package_s(shared: dict[str, str]) -> None:
    _, fed = harness_settings()
    (key,) = fed["dags_folder"]
    runtime = stages()["runtime"]
    assert env_of(runtime)[key] == shared[key]
    links = [run for run in instructions(runtime, "RUN") if "r.dags_folder()" in run]
    assert links and f"print(r.dags_folder())')\" {shared[key]}" in links[0], \
        f"the image does not link {shared[key]} to the installed package's DAG files"


# -- the image ---------------------------------------------------------------------------------------------

def test_every_airflow_service_runs_the_image_built_from_the_dockerfile(airflow: dict[str, Any]) -> None:
    images = set()
    for name, service in airflow.items():
        assert service["build"] == {"context": ".", "dockerfile": DOCKERFILE.name, "target": "runtime"}, name
        images.add(service["image"])
        for volume in service.get("volumes", []):  # named volumes only: nothing of the checkout
            assert not volume.startswith((".", "/", "~")), f"{name} mounts {volume}"
    assert len(images) == 1, f"the Airflow services run different images: {images}"
    assert "runtime" in stages()


def test_the_runtime_stage_holds_the_wheel_and_the_jars_and_a_jre() -> None:
    found = stages()
    runtime = found["runtime"]
    assert not instructions(runtime, "ADD")
    copies = {value.split()[0]: value.split()[1:] for value in instructions(runtime, "COPY")}
    assert set(copies) == {"--from=jars", "--from=wheel"}, f"the runtime copies {copies} (only the jars and wheel)"
    jars = copies["--from=jars"][-1]
    assert env_of(runtime)["KAFKAOPS_JARS"] == jars
    assert any(f"-f jvm/pom.xml package -Djars.dir={jars}" in run for run in instructions(found["jars"], "RUN"))
    assert any("pip wheel" in run and "--no-deps" in run for run in instructions(found["wheel"], "RUN"))
    runs = " ".join(instructions(runtime, "RUN"))
    assert re.search(r"apt-get install [^&]*openjdk-17-jre-headless", runs), "the runtime installs no JRE 17"
    wheel_installs = [step for step in re.split(r"&&|\n", runs) if re.search(r"pip install .*kafkaops-\*\.whl", step)]
    assert wheel_installs, "the runtime never installs the kafkaops wheel"
    assert not any("--no-deps" in step for step in wheel_installs), \
        f"the wheel must be installed with its pinned dependencies: {wheel_installs}"
    # Airflow's Spark provider goes in without its dependencies (pyspark-client overlaps pyspark), as in the Makefile
    assert re.search(r"pip install [^&]*--no-deps [^&]*apache-airflow-providers-apache-spark==", runs), \
        "the runtime lacks Airflow's Spark provider (the Spark jobs' launcher)"
    assert instructions(found["broker-host"], "FROM") == ["runtime AS broker-host"]


# -- the brokers ---------------------------------------------------------------------------------------------

def test_the_inventory_names_the_compose_brokers(inventory: dict[str, Any], services: dict[str, Any],
                                                 shared: dict[str, str]) -> None:
    hostvars = inventory["_meta"]["hostvars"]
    controllers = inventory["kafka_controllers"]["hosts"]
    new = inventory["kafka_new_brokers"]["hosts"]
    assert set(controllers) | set(new) == set(hostvars)
    voters = ",".join(f"{hostvars[h]['kafka_broker_node_id']}@{hostvars[h]['kafka_broker_host']}:"
                      f"{hostvars[h]['kafka_broker_controller_port']}" for h in controllers)
    for host in controllers:
        variables_, service = hostvars[host], service_of_host(services, host)
        env = service["environment"]
        assert service["hostname"] == variables_["kafka_broker_host"] == host
        assert env["KAFKA_NODE_ID"] == str(variables_["kafka_broker_node_id"]), host
        assert env["KAFKA_BROKER_RACK"] == variables_["kafka_broker_rack"], host
        assert env["CLUSTER_ID"] == variables_["kafka_broker_cluster_id"], host
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == voters, host
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{host}:{variables_['kafka_broker_port']}"
    bootstrap = json.loads(shared["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]["bootstrap.servers"]
    assert bootstrap == ",".join(f"{h}:{hostvars[h]['kafka_broker_port']}" for h in controllers)
    worker_mounts = dict(v.split(":")[:2][::-1] for v in services["airflow-worker"]["volumes"])
    for host in new:  # the scale-out's DAG provisions kafka-<id> over SSH from the worker
        variables_, service = hostvars[host], service_of_host(services, host)
        assert host == f"kafka-{variables_['kafka_broker_node_id']}"
        assert service["build"]["target"] == "broker-host" and service["hostname"] == host
        assert variables_["kafka_broker_process_roles"] == ["broker"], "the quorum stays kafka-1..3"
        assert variables_["kafka_broker_cluster_id"] == hostvars[controllers[0]]["kafka_broker_cluster_id"]
        key_folder = str(Path(variables_["ansible_ssh_private_key_file"]).parent)
        assert key_folder in worker_mounts, f"the worker has no {key_folder} holding the SSH key for {host}"
        data = [v for v in service["volumes"] if v.split(":")[1] == variables_["kafka_broker_base_dir"]]
        assert data, f"{host} keeps no volume at {variables_['kafka_broker_base_dir']}"


# -- the store's database ------------------------------------------------------------------------------------

def test_the_postgres_init_script_creates_the_store_s_role_and_database() -> None:
    from kafkaops.platform import store

    psql = postgres.find_bindir() / "psql"
    with postgres.temporary_postgres(database="airflow", prefix="kafkaops-pg-compose-") as url:
        server = sa.make_url(url)
        target = server.set(drivername="postgresql").render_as_string(hide_password=False)
        command = [str(psql), "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-q", "-d", target, "-f", str(INIT_SQL)]
        unset = subprocess.run(command, capture_output=True, text=True, timeout=60,
                               env={k: v for k, v in os.environ.items() if k != "KAFKAOPS_STORE_PASSWORD"})
        assert unset.returncode != 0 and "KAFKAOPS_STORE_PASSWORD is not set" in unset.stderr, unset.stderr
        for _ in range(2):  # a second run changes nothing
            done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "KAFKAOPS_STORE_PASSWORD": "s3cret-store"})
            assert done.returncode == 0, f"{INIT_SQL.name} failed: {done.stdout}{done.stderr}"
            assert "s3cret-store" not in done.stdout + done.stderr
        engine = sa.create_engine(server.set(database="postgres"))
        with engine.connect() as conn:
            owner = conn.execute(sa.text("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'kafkaops'"))
            assert owner.scalar_one() == "kafkaops"
            hashed = conn.execute(sa.text("SELECT rolpassword FROM pg_authid WHERE rolname = 'kafkaops'")).scalar_one()
            assert hashed.startswith("SCRAM-SHA-256$")
        engine.dispose()
        opened = store.open_store(server.set(database="kafkaops", username="kafkaops"), upgrade=True)
        assert opened.revision() is not None
