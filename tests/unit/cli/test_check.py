"""``python -m kafkaops check`` as an Airflow component runs it before it starts: a subprocess with
its own AIRFLOW_HOME, Airflow's database setting and the store's connection in its environment,
against real SQLite files and a throw-away PostgreSQL (databases that answer, a closed port, a
server that accepts and never answers, store schemas older and newer than this kafkaops)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from kafkaops.cli import exits
from kafkaops.cli.check import METADATA_SETTING
from kafkaops.platform import migrations, provision
from kafkaops.platform import store as store_
from kafkaops.testing import postgres

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PASSWORD = "Pw-never-printed-71"  # in every URL; the servers (SQLite, trust auth) ignore it
HEAD = migrations.head()


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def check(*argv: str, metadata: str, home: Path, env: Mapping[str, str] | None = None) -> Result:
    """``python -m kafkaops check ARGV`` from this checkout, as a component runs it: its own
    AIRFLOW_HOME, ``metadata`` as Airflow's database setting, nothing else of this process'
    Airflow or kafkaops settings; ``env`` adds the store's connection."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "KAFKAOPS_", "_AIRFLOW"))}
    clean.update({"PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]), "AIRFLOW_HOME": str(home),
                  "AIRFLOW__CORE__LOAD_EXAMPLES": "False", METADATA_SETTING: metadata, **(env or {})})
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kafkaops", "check", *argv], capture_output=True, text=True,
                          env=clean, timeout=180)
    result = Result(done.returncode, done.stdout, done.stderr, time.monotonic() - started)
    assert PASSWORD not in result.out + result.err
    assert "Traceback" not in result.err, result.err
    return result


def with_password(url: str) -> str:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return url
    return parsed.set(password=PASSWORD).render_as_string(hide_password=False)


def shown(url: str) -> str:
    return sa.make_url(url).render_as_string(hide_password=True)


def revision(url: str) -> str | None:
    return store_.Store(url).revision()


def stamp(url: str, version: str) -> None:
    with store_.Store(url).engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {store_.VERSION_TABLE} SET version_num = :v"), {"v": version})


def closed_port_url(database: str) -> str:
    port = provision.free_ports(1)[0]  # nothing listens there
    return f"postgresql+psycopg2://ops:{PASSWORD}@127.0.0.1:{port}/{database}"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "airflow-home"
    path.mkdir()
    return path


@pytest.fixture
def sqlite_metadata(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'airflow.db'}"


@pytest.fixture
def scratch_postgres(postgres_url: str) -> Iterator[str]:
    with postgres.scratch_database(postgres_url) as url:
        yield url


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers: a database host that hangs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


# -- every check passes ------------------------------------------------------------------------------------

def test_ok_on_sqlite_with_the_default_store(home: Path, sqlite_metadata: str) -> None:
    default = f"sqlite:///{home / 'kafkaops.db'}"
    store_.open_store(default)
    result = check(metadata=sqlite_metadata, home=home)
    assert result.code == exits.EXIT_OK and result.err == "", result.err
    assert result.lines == [f"Airflow metadata database: ok: {sqlite_metadata} answers",
                            f"kafkaops store: ok: {default} at schema {HEAD}; the default kafkaops store (no Airflow "
                            "connection 'kafkaops_store')"]


def test_ok_on_postgres_with_the_store_as_an_airflow_connection(home: Path, postgres_url: str) -> None:
    with postgres.scratch_database(postgres_url) as metadata, postgres.scratch_database(postgres_url) as store_url:
        store_.open_store(store_url)
        target = sa.make_url(store_url)
        connection = {"conn_type": "postgres", "host": target.host, "port": target.port, "login": target.username,
                      "password": PASSWORD, "schema": target.database}
        result = check(metadata=with_password(metadata), home=home,
                       env={"AIRFLOW_CONN_KAFKAOPS_STORE": json.dumps(connection)})
    assert result.code == exits.EXIT_OK and result.err == "", result.err
    first, second = result.lines
    assert first == f"Airflow metadata database: ok: {shown(with_password(metadata))} answers"
    assert "***" in first
    assert second == (f"kafkaops store: ok: {shown(with_password(store_url))} at schema {HEAD}; Airflow connection "
                      "'kafkaops_store'")


def test_a_store_connection_kept_in_the_metadata_database_is_the_one_checked(home: Path, tmp_path: Path,
                                                                              sqlite_metadata: str) -> None:
    from airflow.models.connection import Connection
    from sqlalchemy.orm import Session

    engine = sa.create_engine(sqlite_metadata)
    Connection.__table__.create(engine)  # as 'airflow connections add' leaves it, without the rest of the schema
    with Session(engine) as session:
        session.add(Connection(conn_id="kafkaops_store", conn_type="sqlite", host=str(tmp_path / "kept.db")))
        session.commit()
    engine.dispose()
    result = check("--upgrade", metadata=sqlite_metadata, home=home)
    assert result.code == exits.EXIT_OK, result.err
    assert result.lines[1] == (f"kafkaops store: ok: sqlite:///{tmp_path / 'kept.db'} upgraded from schema none to "
                               f"{HEAD}; Airflow connection 'kafkaops_store'")
    assert not (home / "kafkaops.db").exists()


# -- Airflow's metadata database -----------------------------------------------------------------------------

def test_an_unreachable_metadata_database_is_named_and_stops_the_check(home: Path) -> None:
    metadata = closed_port_url("airflow")
    result = check(metadata=metadata, home=home, env={"KAFKAOPS_STORE_URL": closed_port_url("kafkaops")})
    assert result.code == exits.EXIT_FAILED and result.out == ""
    [line] = result.err.splitlines()
    assert line.startswith(f"Airflow metadata database: FAILED: {shown(metadata)} did not answer"), line
    assert "OperationalError" in line and "Connection refused" in line
    assert line.endswith(f"set {METADATA_SETTING} (Airflow's [database] sql_alchemy_conn) to a database this host "
                         "can reach")


def test_a_metadata_database_that_hangs_fails_within_the_timeout(home: Path, silent_server: int) -> None:
    metadata = f"postgresql+psycopg2://airflow:{PASSWORD}@127.0.0.1:{silent_server}/airflow"
    result = check("--timeout", "2", metadata=metadata, home=home)
    assert result.code == exits.EXIT_FAILED
    line = result.err.strip()
    assert line.startswith(f"Airflow metadata database: FAILED: {shown(metadata)} did not answer (after "), line
    waited = float(line.split("(after ", 1)[1].split(" s)", 1)[0])
    assert 1.5 <= waited < 5, line  # the driver's connect timeout, not a hang
    assert "timeout" in line.lower()


def test_a_setting_airflow_cannot_read_fails_without_a_traceback(home: Path) -> None:
    result = check(metadata=f"not-a-url-{PASSWORD}", home=home)
    assert result.code == exits.EXIT_FAILED and result.out == ""
    assert result.err.startswith("Airflow metadata database: FAILED: Airflow cannot start with its database "
                                 "setting: ")
    assert METADATA_SETTING in result.err


# -- the kafkaops store --------------------------------------------------------------------------------------

@pytest.mark.parametrize("via", ["KAFKAOPS_STORE_URL", "connection"])
def test_an_unreachable_store_is_named_with_its_setting(home: Path, sqlite_metadata: str, via: str) -> None:
    url = closed_port_url("kafkaops")
    target = sa.make_url(url)
    env = ({"KAFKAOPS_STORE_URL": url} if via == "KAFKAOPS_STORE_URL" else
           {"AIRFLOW_CONN_KAFKAOPS_STORE": json.dumps({"conn_type": "postgres", "host": "127.0.0.1",
                                                       "port": target.port, "login": "ops", "password": PASSWORD,
                                                       "schema": "kafkaops"})})
    result = check(metadata=sqlite_metadata, home=home, env=env)
    assert result.code == exits.EXIT_FAILED
    assert result.lines == [f"Airflow metadata database: ok: {sqlite_metadata} answers"]
    line = result.err.strip()
    assert line.startswith(f"kafkaops store: FAILED: postgresql+psycopg2://ops:***@127.0.0.1:{target.port}/kafkaops: "
                           "the kafkaops store "), line
    assert "did not answer" in line and "Connection refused" in line
    if via == "KAFKAOPS_STORE_URL":
        assert line.endswith("fix $KAFKAOPS_STORE_URL, or point the Airflow connection 'kafkaops_store' at the store")
    else:
        assert "fix the Airflow connection 'kafkaops_store' (AIRFLOW_CONN_KAFKAOPS_STORE" in line


def test_a_store_newer_than_this_kafkaops_is_refused(home: Path, sqlite_metadata: str, store_url: str) -> None:
    store_.Store(store_url).prepare()
    stamp(store_url, "9999")
    for argv in ([], ["--upgrade"]):
        result = check(*argv, metadata=sqlite_metadata, home=home, env={"KAFKAOPS_STORE_URL": store_url})
        assert result.code == exits.EXIT_FAILED, argv
        line = result.err.strip()
        assert line.startswith(f"kafkaops store: FAILED: {shown(store_url)}: "), line
        assert f"is at schema revision 9999, which this kafkaops does not know (its newest is {HEAD})" in line
        assert line.endswith("upgrade kafkaops on this host")
    assert revision(store_url) == "9999"  # untouched


@pytest.mark.parametrize("start, backend", [("0001", "sqlite"), ("empty", "postgres")])
def test_an_older_store_is_refused_with_the_upgrade_command_or_upgraded(
        home: Path, sqlite_metadata: str, tmp_path: Path, request: pytest.FixtureRequest, start: str,
        backend: str) -> None:
    if backend == "sqlite":
        store_url = f"sqlite:///{tmp_path / 'kafkaops.db'}"
    else:
        store_url = request.getfixturevalue("scratch_postgres")
    if start == "0001":
        with store_.Store(store_url).engine.begin() as conn:
            migrations.upgrade(conn, "0001")
    env = {"KAFKAOPS_STORE_URL": store_url}
    refused = check(metadata=sqlite_metadata, home=home, env=env)
    assert refused.code == exits.EXIT_FAILED
    line = refused.err.strip()
    old = "0001" if start == "0001" else "none"
    assert f"is at schema revision {old}, this kafkaops needs {HEAD}: run 'python -m kafkaops store upgrade'" in line
    assert line.endswith("or here: python -m kafkaops check --upgrade"), line
    assert revision(store_url) == (None if start == "empty" else "0001")

    upgraded = check("--upgrade", metadata=sqlite_metadata, home=home, env=env)
    assert upgraded.code == exits.EXIT_OK and upgraded.err == "", upgraded.err
    assert upgraded.lines[1] == (f"kafkaops store: ok: {shown(store_url)} upgraded from schema {old} to {HEAD}; the "
                                 "default kafkaops store (no Airflow connection 'kafkaops_store')")
    assert revision(store_url) == HEAD


def test_a_missing_sqlite_store_is_not_created_without_upgrade(home: Path, sqlite_metadata: str) -> None:
    result = check(metadata=sqlite_metadata, home=home)
    assert result.code == exits.EXIT_FAILED
    assert result.err.strip().endswith(f"the file {home / 'kafkaops.db'} does not exist yet; create it: python -m "
                                       "kafkaops check --upgrade, or python -m kafkaops store upgrade")
    assert not (home / "kafkaops.db").exists()
    assert check("--upgrade", metadata=sqlite_metadata, home=home).code == exits.EXIT_OK
    assert revision(f"sqlite:///{home / 'kafkaops.db'}") == HEAD


def test_a_store_in_airflows_own_database_is_refused(home: Path, sqlite_metadata: str) -> None:
    result = check("--upgrade", metadata=sqlite_metadata, home=home, env={"KAFKAOPS_STORE_URL": sqlite_metadata})
    assert result.code == exits.EXIT_FAILED
    assert result.err.startswith("kafkaops store: FAILED: the default kafkaops store (no Airflow connection "
                                 f"'kafkaops_store') points at Airflow's own metadata database ({sqlite_metadata})")


# -- Kafka (the real cluster's case is tests/integration/cli/test_check.py) ----------------------------------

def test_kafka_that_does_not_answer_or_is_not_defined(home: Path, sqlite_metadata: str) -> None:
    store_.open_store(f"sqlite:///{home / 'kafkaops.db'}")
    port = provision.free_ports(1)[0]
    env = {"AIRFLOW_CONN_KAFKA_DOWN": json.dumps({"conn_type": "kafka",
                                                  "extra": {"bootstrap.servers": f"127.0.0.1:{port}"}})}
    down = check("--kafka", "kafka_down", "--timeout", "2", metadata=sqlite_metadata, home=home, env=env)
    assert down.code == exits.EXIT_FAILED and len(down.lines) == 2
    assert down.err.startswith(f"Kafka connection 'kafka_down': FAILED: cannot reach Kafka at 127.0.0.1:{port} "
                               "(Airflow connection 'kafka_down') within 2 s"), down.err
    missing = check("--kafka", "nope", metadata=sqlite_metadata, home=home)
    assert missing.code == exits.EXIT_BAD_INPUT
    assert missing.err.startswith("Kafka connection 'nope': FAILED: there is no Airflow connection 'nope'")
