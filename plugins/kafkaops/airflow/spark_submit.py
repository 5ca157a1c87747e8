"""Spark jobs through Airflow's Spark provider: the launcher of :func:`kafkaops.platform.spark.run_spark_app`.

:class:`SparkSubmitLauncher` submits with the provider's ``SparkSubmitHook`` on a ``spark``
connection, ``spark_default`` unless the DAG's ``spark_conn_id`` param names another. Its master
decides where the job runs: ``local[*]``, ``spark://host:7077``, ``yarn`` or ``k8s://https://...``
(the connection's ``deploy-mode`` extra too); kafkaops needs nothing else changed. A missing
``spark_default`` stands for ``local[*]`` (kafkaops supplies it); a missing connection of another
name is refused, naming it.

The hook reads spark-submit's output line by line (in client deploy mode the driver's own output): the
launcher writes every line to the run's Spark log file, where :func:`kafkaops.platform.spark.run_spark_app`
finds the app's result and the tail of a failure (and which the record links), and lets through to the task
log all but Spark's own INFO lines (:func:`task_log_wants`), so the task log keeps the warnings, errors,
the app's own lines and kafkaops' progress lines.

A ``spark://`` (standalone) connection names its cluster's authentication secret in the extra
``auth-secret-file`` (:data:`kafkaops.platform.spark.AUTH_SECRET_FILE_EXTRA`): the path, on the Airflow
worker, of the Spark properties file the Master and Workers start with. The launcher hands it to
:func:`~kafkaops.platform.spark.run_spark_app`, which puts the secret in spark-submit's private
``--properties-file`` (the provider's ``properties_file``): not in the command line the provider logs, not in
``env_vars`` (which it turns into ``--conf`` for YARN and Kubernetes), not in the connection's password field
(the provider would put it into the master URL).
"""
from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import Connection, Param
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from kafkaops.errors import ConfigError
from kafkaops.platform import spark

DEFAULT_CONN_ID = "spark_default"

#: The DAG param naming the Spark connection (partition increase, capacity review).
SPARK_CONN_PARAM = Param(None, type=["null", "string"], title="Spark connection",
                         description="Id of an Airflow connection of type 'spark' whose master runs the Spark job "
                                     "(local[*], spark://HOST:7077, yarn, k8s://https://HOST). Empty: "
                                     f"{DEFAULT_CONN_ID}, which is local[*] when Airflow has no such connection.")


#: A line of Spark's own log at INFO (log4j's default layout: ``25/11/28 07:53:13 INFO SparkContext: ...``).
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")
#: What the provider reads out of spark-submit's output to track or stop the job (YARN application, driver
#: id, Kubernetes pod, exit code): such lines reach it even at INFO.
TRACKED = re.compile(r"application[0-9_]+|driver-[0-9\-]+|pod name: |submission ID spark:|spark-app-selector -> |"
                     r"[eE]xit code: ")


def task_log_wants(line: str) -> bool:
    """Whether a line of spark-submit's output goes to the task log too: everything but Spark's own INFO
    lines (the Spark log has them all), and those the provider tracks the job by."""
    return not SPARK_INFO.match(line) or bool(TRACKED.search(line))


class KafkaOpsSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` whose missing ``spark_default`` is ``local[*]`` (the provider would take
    YARN), whose missing other connection is an error naming it, and which copies spark-submit's
    output to ``output_file`` as well as logging it."""

    def __init__(self, *args: Any, output_file: Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_file = output_file

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        # the provider reads spark-submit's merged stdout and stderr here, line by line, and logs each
        if self.output_file is None:
            return super()._process_spark_submit_log(itr)
        with self.output_file.open("a", encoding="utf-8", errors="replace") as copy:
            def tee() -> Iterator[Any]:
                for line in itr:
                    copy.write(line)
                    copy.flush()
                    if task_log_wants(line):
                        yield line
            self.log.info("Spark's INFO lines go to the run's Spark log (linked from its record), not here")
            return super()._process_spark_submit_log(tee())

    @classmethod
    def get_connection(cls, conn_id: str) -> Connection:
        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException as err:
            if conn_id != DEFAULT_CONN_ID:
                raise ConfigError(f"the spark_conn_id param names Spark connection {conn_id!r}, which Airflow does "
                                  f"not have; create it (type spark, host spark://HOST, port 7077, or local[*], yarn, "
                                  f"k8s://https://HOST) or leave the param empty for {DEFAULT_CONN_ID}; nothing was "
                                  "changed") from err
            return Connection(conn_id=conn_id, conn_type="spark", host=spark.LOCAL_MASTER)


class SparkSubmitLauncher:
    """A :class:`kafkaops.platform.spark.Launcher` on ``SparkSubmitHook``; ``conf`` adds Spark settings
    (``spark.executor.memory`` ...) to every submission."""

    def __init__(self, conn_id: str | None = None, *, conf: Mapping[str, str] | None = None) -> None:
        self.conn_id = conn_id or DEFAULT_CONN_ID
        self.conf = dict(conf or {})
        # what the provider resolved from the connection, exactly as it passes it to --master and --deploy-mode
        resolved = KafkaOpsSparkSubmitHook(conn_id=self.conn_id)._connection
        self.master: str = resolved["master"]
        self.deploy_mode: str | None = resolved.get("deploy_mode")
        extra = KafkaOpsSparkSubmitHook.get_connection(self.conn_id).extra_dejson
        self.auth_secret_file: str | None = extra.get(spark.AUTH_SECRET_FILE_EXTRA) or None

    def __repr__(self) -> str:
        return f"SparkSubmitLauncher({self.conn_id!r}, master {self.master})"

    def check(self) -> None:
        """Fail now, naming the master and the connection, when the master accepts no connection or a
        standalone master's secret is not there."""
        spark.check_master(self.master, self.conn_id)
        if spark.needs_shared_secret(self.master):
            spark.read_auth_secret(self.auth_secret_file, self.master, self.conn_id)

    def submit(self, submission: spark.Submission, *, env: Mapping[str, str], log_file: Path,
               timeout_s: float) -> int:
        hook = KafkaOpsSparkSubmitHook(
            conn_id=self.conn_id, conf={**self.conf, **submission.conf}, files=",".join(submission.files) or None,
            py_files=submission.py_files, jars=",".join(submission.jars), name=submission.name,
            properties_file=submission.properties_file,
            application_args=list(submission.args), driver_memory=submission.driver_memory, output_file=log_file)
        timed_out = threading.Event()

        def stop() -> None:
            timed_out.set()
            _stop(hook)

        timer = threading.Timer(timeout_s, stop)
        timer.daemon = True
        timer.start()
        try:
            # a session of its own: a timeout stops spark-submit and the driver it started together
            hook.submit(submission.application, env=dict(env), cwd=str(log_file.parent), start_new_session=True)
            code = 0
        except AirflowException:
            process = getattr(hook, "_submit_sp", None)  # the provider keeps its Popen there
            code = process.returncode if process is not None and process.returncode is not None else 1
        except BaseException:
            # the task stops (execution_timeout's AirflowTaskTimeout, SIGTERM): spark-submit runs in a session of
            # its own, so it would outlive the task and go on writing; stop it and the driver it started
            _stop(hook)
            raise
        finally:
            timer.cancel()
        if timed_out.is_set():
            raise TimeoutError(f"spark-submit of {submission.name} stopped after {timeout_s:.0f} s")
        return code


def _stop(hook: Any) -> None:
    process = getattr(hook, "_submit_sp", None)
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    hook.on_kill()


def launcher_of(context: Any) -> SparkSubmitLauncher:
    """The launcher of a task: the run's ``spark_conn_id`` param, else ``spark_default``."""
    return SparkSubmitLauncher(context["params"].get("spark_conn_id") or DEFAULT_CONN_ID)
