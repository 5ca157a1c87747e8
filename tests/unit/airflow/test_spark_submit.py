"""The Spark provider's hook as kafkaops' launcher: the connection's master, a missing connection,
and spark-submit's output, exit code and timeout (a stand-in spark-submit on PATH: no Spark here)."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from kafkaops.airflow import spark_submit as airflow_spark
from kafkaops.errors import ConfigError
from kafkaops.platform import spark

SPARK_SUBMIT = f"""#!{sys.executable}
import os, sys, time
args = sys.argv[1:]
print("spark-submit", " ".join(args), flush=True)
print("cwd", os.getcwd(), flush=True)
print("25/11/28 07:53:13 INFO SparkContext: Running Spark version 4.0.1", flush=True)
print("25/11/28 07:53:14 WARN NativeCodeLoader: Unable to load native-hadoop library", flush=True)
app_args = args[args.index(next(a for a in args if a.endswith(".py"))) + 1:]
if "--sleep" in app_args:
    open(os.path.join(os.getcwd(), "pid"), "w").write(str(os.getpid()))
    time.sleep(60)
print('kafkaops-result: {{"args": %s}}' % __import__("json").dumps(app_args), flush=True)
sys.exit(3 if "--exit3" in app_args else 0)
"""


@pytest.fixture
def fake_spark_submit(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text(SPARK_SUBMIT)
    (bin_dir / "spark-submit").chmod(0o755)
    return {**spark.submit_env(), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def submission(*args: str) -> spark.Submission:
    return spark.Submission("key_skew", spark.app_file("key_skew"), "/tmp/x.zip", ("/j/a.jar", "/j/b.jar"),
                            ("/private/kafka.properties",), args, "512m")


def test_a_missing_spark_default_is_local_and_another_missing_connection_is_named() -> None:
    assert airflow_spark.SparkSubmitLauncher().master == "local[*]"
    with pytest.raises(ConfigError, match="the spark_conn_id param names Spark connection 'spark_nowhere', which "
                                          "Airflow does not have"):
        airflow_spark.SparkSubmitLauncher("spark_nowhere")


@pytest.mark.parametrize(("connection", "master"), [
    ({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}, "spark://127.0.0.1:7077"),
    ({"conn_type": "spark", "host": "yarn"}, "yarn"),
    ({"conn_type": "spark", "host": "local[2]"}, "local[2]"),
])
def test_the_connection_gives_the_master(connection: dict, master: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_OTHER", json.dumps(connection))
    assert airflow_spark.SparkSubmitLauncher().master == master
    assert airflow_spark.SparkSubmitLauncher("spark_other").master == master


def test_a_standalone_connection_names_its_secret_file_and_the_hook_gets_the_properties_file(
        tmp_path: Path, fake_spark_submit: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_SA", json.dumps({
        "conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077,
        "extra": {"deploy-mode": "client", "auth-secret-file": "/etc/spark/auth.properties"}}))
    launcher = airflow_spark.SparkSubmitLauncher("spark_sa")
    assert (launcher.auth_secret_file, launcher.deploy_mode) == ("/etc/spark/auth.properties", "client")
    assert airflow_spark.SparkSubmitLauncher().auth_secret_file is None
    log_file = tmp_path / "spark.log"
    with_properties = spark.Submission("key_skew", spark.app_file("key_skew"), "/tmp/x.zip", ("/j/a.jar",), (),
                                       ("--topic", "t"), properties_file="/private/spark-submit.properties")
    airflow_spark.SparkSubmitLauncher().submit(with_properties, env=fake_spark_submit, log_file=log_file, timeout_s=30)
    [line] = [x for x in log_file.read_text().splitlines() if x.startswith("spark-submit ")]
    args = line.split()
    assert args[args.index("--properties-file") + 1] == "/private/spark-submit.properties"


def test_the_preflight_check_refuses_a_standalone_master_without_its_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_SA", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                                "port": master.getsockname()[1]}))
        with pytest.raises(ConfigError, match="needs its cluster's authentication secret: give connection 'spark_sa'"):
            airflow_spark.SparkSubmitLauncher("spark_sa").check()


def test_submit_passes_everything_through_the_hook_and_copies_its_output(tmp_path: Path,
                                                                         fake_spark_submit: dict[str, str]) -> None:
    log_file = tmp_path / "run" / "spark.log"
    log_file.parent.mkdir()
    code = airflow_spark.SparkSubmitLauncher(conf={"spark.executor.memory": "1g"}).submit(
        submission("--topic", "t"), env=fake_spark_submit, log_file=log_file, timeout_s=30)
    text = log_file.read_text()
    assert code == 0 and f"cwd {log_file.parent}" in text
    [line] = [x for x in text.splitlines() if x.startswith("spark-submit ")]
    assert line.split()[1:] == ["--master", "local[*]", "--conf", "spark.executor.memory=1g",
                                "--files", "/private/kafka.properties", "--py-files", "/tmp/x.zip",
                                "--jars", "/j/a.jar,/j/b.jar", "--driver-memory", "512m", "--name", "kafkaops-key-skew",
                                spark.app_file("key_skew"), "--topic", "t"]
    assert spark.result_of(log_file) == {"args": ["--topic", "t"]}


def test_the_task_log_gets_all_but_sparks_own_info_lines_which_stay_in_the_spark_log(
        tmp_path: Path, fake_spark_submit: dict[str, str], caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "spark.log"
    with caplog.at_level("INFO"):
        airflow_spark.SparkSubmitLauncher().submit(submission("--topic", "t"), env=fake_spark_submit,
                                                   log_file=log_file, timeout_s=30)
    assert "INFO SparkContext: Running Spark version" in log_file.read_text()
    assert "WARN NativeCodeLoader" in log_file.read_text()
    out, err = capfd.readouterr()
    logged = caplog.text + out + err  # the hook logs through Airflow's logging: captured or printed
    assert "WARN NativeCodeLoader" in logged and "kafkaops-result:" in logged
    assert "INFO SparkContext" not in logged and "Spark's INFO lines go to the run's Spark log" in logged


@pytest.mark.parametrize("line, wanted", [
    ("25/11/28 07:53:13 INFO SparkContext: Running Spark version 4.0.1\n", False),
    ("25/11/28 07:53:13 WARN TaskSetManager: Lost task 0.0\n", True),
    ("25/11/28 07:53:13 INFO ClientEndpoint: Driver successfully submitted as driver-20261128075313-0001\n", True),
    ("25/11/28 07:53:13 INFO Client: Application report for application_1700000000000_0001\n", True),
    ("kafkaops-result: {}\n", True),
    ("Traceback (most recent call last):\n", True),
])
def test_which_lines_the_task_log_gets(line: str, wanted: bool) -> None:
    assert airflow_spark.task_log_wants(line) is wanted


def test_submit_returns_spark_submits_exit_code(tmp_path: Path, fake_spark_submit: dict[str, str]) -> None:
    code = airflow_spark.SparkSubmitLauncher().submit(submission("--exit3"), env=fake_spark_submit,
                                                      log_file=tmp_path / "spark.log", timeout_s=30)
    assert code == 3 and spark.result_of(tmp_path / "spark.log") == {"args": ["--exit3"]}


def test_submit_stops_spark_submit_at_its_timeout(tmp_path: Path, fake_spark_submit: dict[str, str]) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="spark-submit of kafkaops-key-skew stopped after 2 s"):
        airflow_spark.SparkSubmitLauncher().submit(submission("--sleep"), env=fake_spark_submit,
                                                   log_file=tmp_path / "spark.log", timeout_s=2)
    assert time.monotonic() - started < 15
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
