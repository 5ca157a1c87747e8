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
