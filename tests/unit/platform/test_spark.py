"""The Spark-app launcher: the app's JSON back, the log's tail on failure, a timeout that stops it."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kafkaops.platform import spark

APP = """
import json, os, sys, time
import kafkaops  # installed, as spark_apps is: the launcher adds nothing to the path
action, output = sys.argv[1], sys.argv[2]
print("app started with", action, flush=True)
if action == "where":
    open(output, "w").write(json.dumps({"cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH")}))
if action == "kafka-config":  # what the launcher handed over: the file's path, content and mode
    path = sys.argv[sys.argv.index("--kafka-config") + 1]
    open(output, "w").write(json.dumps({"path": path, "config": json.load(open(path)),
                                        "mode": oct(os.stat(path).st_mode & 0o777)}))
if action == "sleep":
    time.sleep(60)
if action in ("ok", "exit3"):
    open(output, "w").write(json.dumps({"action": action}))
if action == "crash":
    raise SystemExit("boom: the executor lost its mind")
sys.exit(3 if action == "exit3" else 0)
"""


@pytest.fixture
def fake_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "fake_app.py"
    script.write_text(APP)
    monkeypatch.setattr(spark, "spark_command", lambda app, args: [sys.executable, str(script), *args])
    return tmp_path


def launch(folder: Path, action: str, **kwargs: object) -> dict:
    output = folder / "out.json"
    options = {"timeout_s": 60, "what": "fake app of orders", "on_timeout": "lower sample_records", **kwargs}
    return spark.run_spark_app("fake", [action, str(output)], output=output, log_file=folder / "logs" / "app.log",
                               **options)


def test_the_command_runs_an_app_of_spark_apps_as_a_module() -> None:
    assert spark.spark_command("key_skew", ["--topic", "t"]) == [sys.executable, "-m", "spark_apps.key_skew",
                                                                   "--topic", "t"]


def test_the_app_runs_in_its_log_folder_with_the_callers_environment(fake_app: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No checkout is assumed: the app's scratch files go next to its log, and its import path is the
    caller's (an installed kafkaops and spark_apps), not a repository added by the launcher."""
    monkeypatch.chdir("/")
    callers = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(fake_app / "callers-own")]))
    monkeypatch.setenv("PYTHONPATH", callers)
    assert launch(fake_app, "where") == {"cwd": str(fake_app / "logs"), "pythonpath": callers}


def test_a_run_returns_the_json_the_app_wrote_and_keeps_its_log(fake_app: Path) -> None:
    assert launch(fake_app, "ok") == {"action": "ok"}
    assert "app started with ok" in (fake_app / "logs" / "app.log").read_text()


def test_a_crash_names_the_exit_code_and_ends_with_the_log(fake_app: Path) -> None:
    (fake_app / "out.json").write_text(json.dumps({"stale": True}))  # an earlier run's result is not this run's
    with pytest.raises(spark.SparkAppFailed) as caught:
        launch(fake_app, "crash", on_failure="it resumes safely when run again")
    message = str(caught.value)
    assert message.startswith("fake app of orders failed (exit 1, no result); it resumes safely when run again; log ")
    assert message.endswith("boom: the executor lost its mind\n") and "app.log ends: " in message
    assert not (fake_app / "out.json").exists()


def test_an_unexpected_exit_code_fails_even_with_a_result(fake_app: Path) -> None:
    with pytest.raises(spark.SparkAppFailed, match=r"failed \(exit 3, result .*out.json \(not used\)\); log "):
        launch(fake_app, "exit3")
    assert launch(fake_app, "exit3", ok_exit_codes=(0, 3)) == {"action": "exit3"}
    assert launch(fake_app, "exit3", ok_exit_codes=None) == {"action": "exit3"}


def test_a_run_past_its_timeout_is_stopped_and_says_what_to_do(fake_app: Path) -> None:
    with pytest.raises(spark.SparkAppFailed, match=r"^fake app of orders did not finish within 1 s and was stopped "
                                                   r"\(log .*app.log\); lower sample_records$"):
        launch(fake_app, "sleep", timeout_s=1)


PASSWORD = "Spark-Canary-55"
SECURED = {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
           "sasl.username": "ops", "sasl.password": PASSWORD, "ssl.ca.location": "/etc/kafka/ca.pem"}


def test_the_kafka_config_reaches_the_app_in_a_private_file_never_in_argv(fake_app: Path) -> None:
    """The whole client config in a 0600 file the argv names; the argv (which the audit records)
    holds no secret, and the file is gone when the app ends."""
    argvs: list[list[str]] = []
    got = launch(fake_app, "kafka-config", kafka_config=SECURED, on_start=argvs.append)
    assert got["config"] == SECURED and got["mode"] == "0o600"
    assert len(argvs) == 1 and PASSWORD not in " ".join(argvs[0]) and got["path"] in argvs[0]
    assert not Path(got["path"]).exists() and not Path(got["path"]).parent.exists()


def test_the_kafka_config_file_is_removed_when_the_app_fails(fake_app: Path) -> None:
    argvs: list[list[str]] = []
    with pytest.raises(spark.SparkAppFailed):
        launch(fake_app, "crash", kafka_config=SECURED, on_start=argvs.append)
    path = argvs[0][argvs[0].index("--kafka-config") + 1]
    assert not Path(path).exists()


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
