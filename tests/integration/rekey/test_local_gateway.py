"""The JVM behind this process's in-process Spark sessions (pyspark's py4j gateway) is stopped by the test
harness at the session's end (tests/conftest.py, kafkaops.testing.spark.stop_local_gateway), not left to the
end of the interpreter, whose py4j finalizers logged into closed streams."""
from __future__ import annotations

import pytest

from kafkaops.testing import spark

pytestmark = pytest.mark.integration


def test_the_local_spark_gateway_is_stopped_and_a_later_session_starts_a_new_one() -> None:
    from pyspark import SparkContext

    from spark_apps import common

    session = common.spark_session("local[1]", driver_memory="512m")
    assert session.range(3).count() == 3
    proc = SparkContext._gateway.proc
    assert proc.poll() is None
    spark.stop_local_gateway()
    assert proc.poll() is not None, "the gateway's JVM still runs"
    assert SparkContext._gateway is None and SparkContext._active_spark_context is None
    spark.stop_local_gateway()  # nothing left to stop: a no-op
    again = common.spark_session("local[1]", driver_memory="512m")
    try:
        assert again.range(2).count() == 2 and SparkContext._gateway.proc is not proc
    finally:
        spark.stop_local_gateway()


def test_a_session_leaves_the_process_sigint_handler_as_it_was() -> None:
    """A new SparkContext puts its own SIGINT handler in and stop() leaves it; spark_session puts the
    process's back, so a later Ctrl-C in this process is not answered by a stopped context."""
    import signal

    from spark_apps import common

    def mine(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, mine)
    try:
        session = common.spark_session("local[1]", driver_memory="512m")
        try:
            assert session.range(2).count() == 2
            assert signal.getsignal(signal.SIGINT) is mine
        finally:
            spark.stop_local_gateway()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, old)
