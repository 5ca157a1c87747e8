"""The Spark apps of ``spark_apps/`` as local subprocesses: one launcher for every capability.

:func:`run_spark_app` runs ``python -m spark_apps.<app> ...`` (``spark_apps`` is a package of the
kafkaops wheel; local Spark: the app starts its own session) in the log file's folder, so Spark's
scratch files stay with the run, writes its stdout and stderr to that log file, enforces a
timeout, and returns the JSON the app wrote. A run that times out, fails or writes nothing raises
:class:`SparkAppFailed` with the log's last lines. Callers pass absolute paths.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from kafkaops.errors import KafkaOpsError

LOG_TAIL_CHARS = 1500


class SparkAppFailed(KafkaOpsError):
    """A Spark app that timed out, exited with an unexpected code, or wrote no result."""


def spark_command(app: str, args: Sequence[str]) -> list[str]:
    """The command line of ``spark_apps/<app>.py`` with ``args``."""
    return [sys.executable, "-m", f"spark_apps.{app}", *args]


def log_tail(log_file: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return log_file.read_text(errors="replace")[-chars:]
    except OSError as err:
        return f"(log unreadable: {err})"


def run_spark_app(app: str, args: Sequence[str], *, output: Path, log_file: Path, timeout_s: float, what: str,
                  on_timeout: str, on_failure: str = "", ok_exit_codes: Collection[int] | None = (0,)
                  ) -> dict[str, Any]:
    """Run ``spark_apps/<app>.py`` with ``args`` and return the JSON it wrote to ``output``.

    ``what`` names the run in errors (``"key skew of orders"``); ``on_timeout`` and ``on_failure``
    say what to do next. ``output`` is removed first, so a result is always this run's. The run
    failed when it exits with a code outside ``ok_exit_codes`` (``None``: any code, the result
    file alone decides) or leaves no ``output``.
    """
    output, log_file = output.absolute(), log_file.absolute()
    output.unlink(missing_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("w") as out:
        try:
            done = subprocess.run(spark_command(app, args), cwd=log_file.parent, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as err:
            raise SparkAppFailed(f"{what} did not finish within {timeout_s:.0f} s and was stopped (log {log_file}); "
                                 f"{on_timeout}") from err
    bad_exit = ok_exit_codes is not None and done.returncode not in ok_exit_codes
    if bad_exit or not output.exists():
        found = "no result" if not output.exists() else f"result {output} (not used)"
        next_step = f"{on_failure}; " if on_failure else ""
        raise SparkAppFailed(f"{what} failed (exit {done.returncode}, {found}); {next_step}log {log_file} ends: "
                             f"{log_tail(log_file)}")
    return json.loads(output.read_text())
