"""The Spark-app launcher: what a submission carries (no secret on its command line), the result
back from the driver's output, the log's tail on failure, a timeout, an unreachable master."""
from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kafkaops.platform import spark

PASSWORD = "Spark-Canary-55"
SECURED = {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.username": "ops", "sasl.password": PASSWORD, "ssl.ca.location": "/etc/kafka/ca.pem"}


class FakeLauncher:
    """Plays spark-submit: keeps what it was handed (and the shipped files' content and mode while the
    job runs), writes ``output`` lines to the log and exits with ``code``."""

    conn_id = "spark_test"
    master = "local[*]"
    deploy_mode: str | None = None
    auth_secret_file: str | None = None

    def __init__(self, output: str = "", code: int = 0, *, timeout: bool = False) -> None:
        self.output, self.code, self.timeout = output, code, timeout
        self.seen: dict[str, Any] = {}

    def submit(self, submission: spark.Submission, *, env: Mapping[str, str], log_file: Path,
               timeout_s: float) -> int:
        self.seen = {"submission": submission, "env": dict(env), "log_file": log_file, "timeout_s": timeout_s,
                     "files": {f: (Path(f).read_text(), stat.S_IMODE(os.stat(f).st_mode))
                               for f in (*submission.files, *submission.private_files,
                                         *filter(None, [submission.properties_file]))},
                     "zip": zipfile.ZipFile(submission.py_files).namelist()}
        log_file.write_text(self.output)
        if self.timeout:
            raise TimeoutError("stopped")
        return self.code


def launch(launcher: FakeLauncher, folder: Path, **kwargs: Any) -> dict[str, Any]:
    options = {"timeout_s": 60, "what": "fake app of orders", "on_timeout": "lower sample_records", **kwargs}
    return spark.run_spark_app("key_skew", ["--topic", "orders"], launcher=launcher, log_file=folder / "logs" / "app.log",
                               **options)


def test_the_result_comes_back_from_the_apps_result_line_and_the_log_stays(tmp_path: Path) -> None:
    launcher = FakeLauncher('starting\nkafkaops-result: {"records": 1}\n'
                            '12:00:01 INFO py4j kafkaops-result: {"records": 2, "keys": [1]}\nstopped\n')
    assert launch(launcher, tmp_path) == {"records": 2, "keys": [1]}  # the last one
    assert "starting" in (tmp_path / "logs" / "app.log").read_text()
    assert launcher.seen["log_file"] == tmp_path / "logs" / "app.log" and launcher.seen["timeout_s"] == 60


def test_a_submission_is_the_apps_file_the_packages_as_one_zip_and_the_spark_jars(tmp_path: Path) -> None:
    launcher, records = FakeLauncher('kafkaops-result: {}'), []
    launch(launcher, tmp_path, on_start=records.append, driver_memory="512m")
    sub: spark.Submission = launcher.seen["submission"]
    assert Path(sub.application).name == "key_skew.py" and Path(sub.application).parent.name == "spark_apps"
    assert {"kafkaops/platform/spark.py", "spark_apps/key_skew.py", "spark_apps/rekey_backfill.py",
            "kafkaops/resources/__init__.py"} <= set(launcher.seen["zip"])
    assert not [n for n in launcher.seen["zip"] if "__pycache__" in n or n.endswith(".pyc")]
    assert "kafkaops-spark-udf.jar" in {Path(j).name for j in sub.jars} and all(j.endswith(".jar") for j in sub.jars)
    assert sub.args == ("--topic", "orders") and sub.files == () and sub.name == "kafkaops-key-skew"
    conf = [x for k, v in sorted(spark.security_conf("local[*]").items()) for x in ("--conf", f"{k}={v}")]
    assert records == [["spark-submit", "--master", "local[*]", "--name", "kafkaops-key-skew", *conf,
                        "--driver-memory", "512m", "--jars", ",".join(sub.jars), "--py-files", sub.py_files,
                        sub.application, "--topic", "orders"]]
    # local: Spark's authentication (a secret of the application's own), encryption, the driver on loopback
    assert dict(sub.conf) == {"spark.authenticate": "true", "spark.network.crypto.enabled": "true",
                              "spark.network.crypto.saslFallback": "false", "spark.io.encryption.enabled": "true",
                              "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
    assert sub.properties_file is None
    assert not Path(sub.py_files).exists()  # the scratch folder went with the run


def test_spark_submit_runs_without_the_workers_secrets_and_finds_this_pyspark(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", "{}")
    monkeypatch.setenv("PYSPARK_PYTHON", "/somewhere/python")
    launcher = FakeLauncher('kafkaops-result: {}')
    launch(launcher, tmp_path)
    env = launcher.seen["env"]
    assert "AIRFLOW_CONN_KAFKA_DEFAULT" not in env and "PYSPARK_PYTHON" not in env
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert (Path(sys.executable).parent / "spark-submit").exists() and env["PYSPARK_DRIVER_PYTHON"] == sys.executable


def test_the_kafka_config_goes_as_a_private_properties_file_never_in_argv(tmp_path: Path) -> None:
    """The whole client config in a 0600 file of a 0700 folder that the driver (client deploy mode: this
    host) reads in place: never on the driver's file server (no --files); the argv names its path only
    and holds no secret; the file is gone when the job ends."""
    launcher, records = FakeLauncher('kafkaops-result: {}'), []
    launch(launcher, tmp_path, kafka_config={**SECURED, "ssl.ca.pem": "-----BEGIN\nA=B: C\n-----END\n"},
           on_start=records.append)
    sub: spark.Submission = launcher.seen["submission"]
    [(private, (body, mode))] = launcher.seen["files"].items()
    assert Path(private).name == "kafka.properties" and mode == 0o600 and sub.files == ()
    assert sub.private_files == (private,) and sub.args[-2:] == ("--kafka-config", private)
    assert "--files" not in records[0] and PASSWORD not in " ".join(records[0])
    assert not Path(private).exists() and not Path(private).parent.exists()
    copy = tmp_path / "kafka.properties"
    copy.write_text(body)
    assert spark.read_client_config(copy) == {**SECURED, "ssl.ca.pem": "-----BEGIN\nA=B: C\n-----END\n"}


def test_a_driver_in_cluster_deploy_mode_gets_the_secret_files_shipped_by_base_name(tmp_path: Path) -> None:
    launcher, records = FakeLauncher('kafkaops-result: {}'), []
    launcher.deploy_mode = "cluster"
    launch(launcher, tmp_path, kafka_config=SECURED, on_start=records.append)
    sub: spark.Submission = launcher.seen["submission"]
    assert [Path(f).name for f in sub.files] == ["kafka.properties"] and sub.private_files == ()
    assert sub.args[-2:] == ("--kafka-config", "kafka.properties")
    assert records[0][records[0].index("--files") + 1] == sub.files[0]


def standalone_secret(folder: Path, secret: str = "Cluster-Canary-77") -> Path:
    path = folder / "spark-auth.properties"
    path.write_text(f"spark.authenticate true\nspark.authenticate.secret {secret}\n")
    path.chmod(0o600)
    return path


def test_a_standalone_masters_secret_goes_in_a_private_properties_file_with_the_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """spark://: the cluster's shared secret, from the connection's file, in a 0600 --properties-file that
    also holds the spark-defaults.conf it replaces; never in argv, the environment or the log."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.shuffle.readHostLocalDisk false\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        launcher, records = FakeLauncher('kafkaops-result: {}'), []
        launcher.master = f"spark://127.0.0.1:{master.getsockname()[1]}"
        launcher.auth_secret_file = str(standalone_secret(tmp_path))
        launch(launcher, tmp_path, kafka_config=SECURED, on_start=records.append)
    sub: spark.Submission = launcher.seen["submission"]
    assert sub.properties_file is not None and Path(sub.properties_file).name == "spark-submit.properties"
    body, mode = launcher.seen["files"][sub.properties_file]
    assert mode == 0o600 and body.startswith("spark.shuffle.readHostLocalDisk false\n")
    assert "spark.authenticate.secret=Cluster-Canary-77" in body
    assert records[0][records[0].index("--properties-file") + 1] == sub.properties_file
    assert dict(sub.conf) == spark.SECURITY_CONF  # no loopback: the executors are elsewhere
    seen = " ".join(records[0]) + json.dumps(launcher.seen["env"]) + (tmp_path / "logs" / "app.log").read_text()
    assert "Cluster-Canary-77" not in seen
    assert not Path(sub.properties_file).exists()


@pytest.mark.parametrize("content", [None, "spark.authenticate true\n"])
def test_a_standalone_master_without_its_secret_is_refused_before_anything_is_submitted(
        tmp_path: Path, content: str | None) -> None:
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        launcher = FakeLauncher('kafkaops-result: {}')
        launcher.master = f"spark://127.0.0.1:{master.getsockname()[1]}"
        if content is not None:
            (tmp_path / "auth.properties").write_text(content)
            launcher.auth_secret_file = str(tmp_path / "auth.properties")
        with pytest.raises(spark.ConfigError, match=r"give connection 'spark_test' the extra 'auth-secret-file'"):
            launch(launcher, tmp_path)
    assert launcher.seen == {}


def test_a_crash_names_the_master_the_exit_code_and_ends_with_the_log(tmp_path: Path) -> None:
    with pytest.raises(spark.SparkAppFailed) as caught:
        launch(FakeLauncher("app started\nboom: the executor lost its mind\n", 1), tmp_path, kafka_config=SECURED,
               on_failure="it resumes safely when run again")
    message = str(caught.value)
    assert message.startswith("fake app of orders on Spark master local[*] failed (exit 1, no result); it resumes "
                              "safely when run again; log ")
    assert message.endswith("boom: the executor lost its mind\n") and "app.log ends: " in message


def test_an_unexpected_exit_code_fails_even_with_a_result(tmp_path: Path) -> None:
    with pytest.raises(spark.SparkAppFailed, match=r"failed \(exit 3, a result \(not used\)\); log "):
        launch(FakeLauncher('kafkaops-result: {"ok": false}', 3), tmp_path)
    assert launch(FakeLauncher('kafkaops-result: {"ok": false}', 3), tmp_path, ok_exit_codes=(0, 3)) == {"ok": False}
    assert launch(FakeLauncher('kafkaops-result: {"ok": false}', 3), tmp_path, ok_exit_codes=None) == {"ok": False}


def test_a_job_past_its_timeout_says_what_to_do_and_leaves_no_config(tmp_path: Path) -> None:
    launcher = FakeLauncher(timeout=True)
    with pytest.raises(spark.SparkAppFailed, match=r"^fake app of orders did not finish within 60 s and was stopped "
                                                   r"\(log .*app.log\); lower sample_records$"):
        launch(launcher, tmp_path, kafka_config=SECURED)
    assert not any(Path(f).exists() for f in launcher.seen["files"])


def test_an_unreachable_master_fails_at_once_naming_it_and_the_connection(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launcher = FakeLauncher('kafkaops-result: {}')
    launcher.master = f"spark://127.0.0.1:{port}"
    started = time.monotonic()
    with pytest.raises(spark.SparkMasterUnreachable) as caught:
        launch(launcher, tmp_path)
    assert time.monotonic() - started < spark.MASTER_CONNECT_TIMEOUT_S + 1 and launcher.seen == {}
    assert str(caught.value).startswith(f"Spark master spark://127.0.0.1:{port} of connection 'spark_test' is not "
                                        f"reachable (127.0.0.1:{port}: ")
    assert "nothing was submitted or created" in str(caught.value)


@pytest.mark.parametrize(("master", "addresses"), [
    ("local[*]", []), ("yarn", []), ("spark://m1:7077", [("m1", 7077)]), ("spark://m1", [("m1", 7077)]),
    ("spark://m1:7077,m2:7078", [("m1", 7077), ("m2", 7078)]),
    ("k8s://https://api.k8s:6443", [("api.k8s", 6443)]), ("k8s://api.k8s", [("api.k8s", 443)]),
])
def test_the_master_addresses_checked(master: str, addresses: list[tuple[str, int]]) -> None:
    assert spark.master_addresses(master) == addresses


def test_the_java_client_gets_the_same_security_settings(tmp_path: Path) -> None:
    key, chain = tmp_path / "client.key", tmp_path / "client.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n")
    chain.write_text("-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----\n")
    options = spark.spark_kafka_options({**SECURED, "security.protocol": "sasl_ssl", "sasl.password": 'p"w\\x',
                                         "ssl.certificate.location": str(chain), "ssl.key.location": str(key),
                                         "ssl.endpoint.identification.algorithm": "none", "linger.ms": "5"})
    assert options == {
        "kafka.bootstrap.servers": "k1:9093", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="ops" password="p\\"w\\\\x";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem",
        "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": chain.read_text(),
        "kafka.ssl.keystore.key": key.read_text(), "kafka.ssl.endpoint.identification.algorithm": ""}
    with pytest.raises(spark.ConfigError, match="sasl.oauthbearer.method"):
        spark.spark_kafka_options({**SECURED, "sasl.oauthbearer.method": "oidc"})


def test_a_secret_on_an_apps_command_line_is_refused() -> None:
    assert spark.tuning_options(["kafka.batch.size=2048"]) == {"kafka.batch.size": "2048"}
    with pytest.raises(spark.ConfigError, match="kafka.sasl.jaas.config would put a secret on the command line") as err:
        spark.tuning_options([f"kafka.sasl.jaas.config=x password={PASSWORD}"])
    assert PASSWORD not in str(err.value)


def test_an_encrypted_client_key_reaches_the_java_client_decrypted_as_pkcs8(tmp_path: Path) -> None:
    """Kafka's Java client on Java 17 cannot decrypt a PBES2 (AES) PKCS#8 key ("PBES2
    SecretKeyFactory not available"): the options carry the key decrypted, without its password."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = tmp_path / "client.key.pem"
    encrypted.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.BestAvailableEncryption(b"key-pw-123")))
    chain = tmp_path / "client.pem"
    chain.write_text("-----BEGIN CERTIFICATE-----\nCERT\n-----END CERTIFICATE-----\n")
    mtls = {"bootstrap.servers": "k1:9093", "security.protocol": "SSL", "ssl.certificate.location": str(chain),
            "ssl.key.location": str(encrypted), "ssl.key.password": "key-pw-123"}
    options = spark.spark_kafka_options(mtls)
    pem = options["kafka.ssl.keystore.key"]
    assert pem.startswith("-----BEGIN PRIVATE KEY-----") and "kafka.ssl.key.password" not in options
    decrypted = serialization.load_pem_private_key(pem.encode(), None)
    assert decrypted.private_numbers() == key.private_numbers()
    with pytest.raises(spark.ConfigError, match=f"client key {encrypted}: ssl.key.password does not decrypt") as bad:
        spark.spark_kafka_options({**mtls, "ssl.key.password": "not-the-key-pw"})
    assert "not-the-key-pw" not in str(bad.value)
    with pytest.raises(spark.ConfigError, match="encrypted and ssl.key.password is missing"):
        spark.spark_kafka_options({k: v for k, v in mtls.items() if k != "ssl.key.password"})


class AppPlayingLauncher(FakeLauncher):
    """Plays spark-submit and the app on the driver: parses the app's arguments as the apps do
    (:func:`spark.add_exchange_arguments`), reads its plan from the store, stores ``result(plan)`` and
    prints ``output`` (a result line the exchange must not take)."""

    def __init__(self, result: Any, output: str = 'kafkaops-result: {"from": "stdout"}') -> None:
        super().__init__(output)
        self.result = result
        self.plans: list[str] = []

    def submit(self, submission: spark.Submission, *, env: Mapping[str, str], log_file: Path,
               timeout_s: float) -> int:
        import argparse

        code = super().submit(submission, env=env, log_file=log_file, timeout_s=timeout_s)
        parser = argparse.ArgumentParser()
        parser.add_argument("command")
        parser.add_argument("--kafka-config")
        parser.add_argument("--verify", action="store_true")
        spark.add_exchange_arguments(parser, "plan")
        args = parser.parse_args(submission.args)
        assert args.store_config in submission.private_files  # the driver (client mode) reads it in place
        plan = spark.read_input(args, "plan")
        self.plans.append(plan)
        if self.result is not None:
            spark.deliver_result(args, self.result(plan))
        return code


def test_with_an_exchange_the_plan_and_the_result_travel_through_the_store(tmp_path: Path) -> None:
    """Nothing of the plan on the command line; the result is the one the app stored, not its output
    line; the store's URL went in a private file, gone with the run; each submission has a folder."""
    from kafkaops.platform import store as store_

    store = store_.open_store(f"sqlite:///{tmp_path / 'kafkaops.db'}")
    launcher, records = AppPlayingLauncher(lambda plan: {"copied": json.loads(plan)["topic"]}), []
    plan = json.dumps({"topic": "orders", "partitions": 12})
    options = {"timeout_s": 60, "what": "backfill of orders", "on_timeout": "run it again", "on_start": records.append,
               "exchange": spark.Exchange(store, "backfill/op-1/spark-try1"), "inputs": {"plan": plan}}
    result = spark.run_spark_app("rekey_backfill", ["run", "--verify"], launcher=launcher,
                                 log_file=tmp_path / "spark.log", kafka_config=SECURED, **options)
    assert result == {"copied": "orders"} and launcher.plans == [plan]
    argv = records[0]
    assert plan not in " ".join(argv) and "orders" not in " ".join(argv)
    path = argv[argv.index("--plan-artifact") + 1]
    assert path.startswith("backfill/op-1/spark-try1/") and path.endswith("/plan.json")
    assert argv[argv.index("--result-artifact") + 1] == path.replace("plan.json", "result.json")
    assert Path(argv[argv.index("--store-config") + 1]).name == "kafkaops-store.properties"
    (body, mode), = [v for f, v in launcher.seen["files"].items() if f.endswith("/kafkaops-store.properties")]
    sub: spark.Submission = launcher.seen["submission"]
    assert sub.files == () and sub.args[sub.args.index("--store-config") + 1] in sub.private_files
    assert mode == 0o600 and str(tmp_path / "kafkaops.db") in body
    assert not any(Path(f).exists() for f in launcher.seen["files"])
    spark.run_spark_app("rekey_backfill", ["run", "--verify"], launcher=launcher, log_file=tmp_path / "spark.log",
                        kafka_config=SECURED, **options)
    second = [p for p in store.artifact_paths("backfill/op-1/spark-try1/") if p.endswith("/plan.json")]
    assert len(second) == 2  # a folder per submission: a retry never reads an earlier try's result


def test_with_an_exchange_an_app_that_stores_no_result_failed_whatever_it_printed(tmp_path: Path) -> None:
    from kafkaops.platform import store as store_

    store = store_.open_store(f"sqlite:///{tmp_path / 'kafkaops.db'}")
    with pytest.raises(spark.SparkAppFailed, match=r"failed \(exit 0, no result\)"):
        spark.run_spark_app("rekey_backfill", ["run"], launcher=AppPlayingLauncher(None), log_file=tmp_path / "a.log",
                            timeout_s=60, what="backfill of orders", on_timeout="-",
                            exchange=spark.Exchange(store, "backfill/op-2"), inputs={"plan": "{}"})
    with pytest.raises(ValueError, match="inputs travel through the store"):
        spark.run_spark_app("rekey_backfill", ["run"], launcher=FakeLauncher(), log_file=tmp_path / "a.log",
                            timeout_s=60, what="-", on_timeout="-", inputs={"plan": "{}"})


class UrlOnlyStore:
    """A store as the launcher sees it (its URL, artifacts): a Postgres URL with a password, no server."""

    def __init__(self) -> None:
        import sqlalchemy as sa

        self.url = sa.make_url(f"postgresql://kafkaops:{PASSWORD}@db.internal:5432/kafkaops")
        self.stored: dict[str, bytes] = {}

    def put_artifact(self, path: str, body: bytes, content_type: str | None = None) -> str:
        self.stored[path] = body
        return path

    def artifact(self, path: str) -> None:
        return None


def test_the_stores_password_reaches_the_app_in_the_private_file_only(tmp_path: Path) -> None:
    launcher, records, store = FakeLauncher(), [], UrlOnlyStore()
    with pytest.raises(spark.SparkAppFailed, match="no result"):  # the fake app stored none
        spark.run_spark_app("rekey_backfill", ["run"], launcher=launcher, log_file=tmp_path / "a.log", timeout_s=60,
                            what="-", on_timeout="-", on_start=records.append, inputs={"plan": "{}"},
                            exchange=spark.Exchange(store, "backfill/op-3"))
    assert PASSWORD not in " ".join(records[0]) and PASSWORD not in json.dumps(launcher.seen["env"])
    (body, mode), = [v for f, v in launcher.seen["files"].items() if f.endswith("/kafkaops-store.properties")]
    assert mode == 0o600 and PASSWORD in body
    assert not any(PASSWORD.encode() in b for b in store.stored.values())


def test_progress_is_called_while_the_app_runs_and_its_thread_ends_with_it(caplog) -> None:
    import threading
    import time

    calls: list[float] = []

    def progress(elapsed_s: float) -> None:
        calls.append(elapsed_s)
        if len(calls) == 2:
            raise RuntimeError("the cluster did not answer")  # logged, never raised into the run

    with spark._progress_thread(progress, 0.05, "backfill orders -> orders.v2"):
        time.sleep(0.4)
    seen = len(calls)
    time.sleep(0.2)
    assert seen >= 3 and len(calls) == seen, calls  # called every 0.05 s, and not after the block
    assert calls == sorted(calls) and 0 < calls[0] < 0.4
    assert not [t for t in threading.enumerate() if t.name == "kafkaops-spark-progress"]
    assert "the progress of backfill orders -> orders.v2 could not be read: the cluster did not answer" in caplog.text
