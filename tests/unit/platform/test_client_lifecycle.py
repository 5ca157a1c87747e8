"""librdkafka clients are released by the code that made them, never by the garbage collector.

Each scenario runs in a child interpreter of its own (a crash must not take the test session with
it), against a loopback port where nothing listens, so requests stay in flight until they time out.
On 7567f58's adapter (error callback bound to the connection, close() leaving the admin client to
the cyclic collector) the background-thread scenario aborts the interpreter (SIGABRT: librdkafka's
"calling rd_kafka_destroy() from librdkafka owned thread is prohibited") and closed connections keep
their clients' threads until a collection.
"""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.kafka import connection
from kafkaops.platform.provision import free_ports
from tests.clients import client_threads

_REPO = Path(__file__).resolve().parents[3]


def _run(script: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``script`` in a child interpreter with this checkout's code; its exit status and output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_REPO / "plugins"), str(_REPO)])}
    prelude = textwrap.dedent(f"""
        import gc, os, sys, time
        from kafkaops.platform.kafka import connection
        NOBODY = "127.0.0.1:{free_ports(1)[0]}"
        def rdk_main():
            n = 0
            for t in os.listdir("/proc/self/task"):
                try:
                    n += open(f"/proc/self/task/{{t}}/comm").read().strip() == "rdk:main"
                except OSError:
                    pass
            return n
    """)
    try:
        return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], env=env, text=True,
                              capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the child hung for {timeout_s:.0f} s (a deadlock): {err.stdout!r} {err.stderr!r}")


def test_close_releases_the_admin_client_at_once_without_the_collector() -> None:
    gc.disable()  # nothing but close() may release them
    try:
        before = client_threads()
        connections = [connection.connect(f"127.0.0.1:{free_ports(1)[0]}", timeout_s=2) for _ in range(10)]
        deadline = time.monotonic() + 10  # a client's thread takes its name a moment after it starts
        while client_threads() < before + 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client_threads() == before + 10
        for conn in connections:
            conn.admin.describe_cluster(request_timeout=30)  # a request in flight when it closes
            conn.close()
            conn.close()  # idempotent
        assert client_threads() == before, "closed connections still hold librdkafka clients"
        assert all(conn.closed for conn in connections)
    finally:
        gc.enable()


def test_a_closed_connection_names_itself_when_used() -> None:
    with connection.connect("127.0.0.1:1", name="Airflow connection 'kafka_default'") as conn:
        pass
    with pytest.raises(KafkaOpsError, match=r"127\.0\.0\.1:1 \(Airflow connection 'kafka_default'\) is closed"):
        conn.admin.list_topics(timeout=1)


def test_a_collection_on_librdkafka_s_background_thread_does_not_abort() -> None:
    """An admin request's future completes on librdkafka's background thread; any allocation there may run
    a collection (forced here in the future's callback). A client the collector frees there is destroyed
    from its own thread: librdkafka aborts."""
    child = _run("""
        for _ in range(3):
            conn = connection.connect(NOBODY, timeout_s=2)
            future = conn.admin.describe_cluster(request_timeout=1)
            future.add_done_callback(lambda _f: gc.collect())
            conn.close()
            del conn, future
        time.sleep(3)  # every request has timed out: each callback ran its collection
        print("alive", rdk_main())
    """)
    assert child.returncode != -signal.SIGABRT, f"librdkafka aborted the process: {child.stderr[-600:]}"
    assert (child.returncode, child.stdout.split()) == (0, ["alive", "0"]), child.stderr[-2000:]


def test_a_collection_inside_consume_and_its_callbacks_neither_hangs_nor_finds_a_client() -> None:
    """The hang of issue 29: a collection inside ``consume`` (in building its messages, or in a callback it
    serves) destroying an orphaned admin client whose threads wait for the GIL. With every client closed
    by its owner there is nothing for the collector to destroy."""
    child = _run("""
        from confluent_kafka import Consumer
        for _ in range(5):
            conn = connection.connect(NOBODY, timeout_s=2)
            conn.admin.describe_cluster(request_timeout=1)
            conn.close()
        orphans = rdk_main()
        collections = []
        def on_error(err):
            collections.append(gc.collect())
        consumer = Consumer({"bootstrap.servers": NOBODY, "group.id": "g", "error_cb": on_error,
                             "logger": connection._QuietLibrdkafkaLog()})
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                consumer.consume(10, 0.2)
                gc.collect()
        finally:
            consumer.close()
        print("orphans", orphans, "callbacks", min(len(collections), 1), "alive", rdk_main())
    """)
    assert (child.returncode, child.stdout.split()) == (0, ["orphans", "0", "callbacks", "1", "alive", "0"]), \
        child.stderr[-2000:]


_GUARDED = """
import gc
import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

kept = []

def test_left_open():
    kept.append(AdminClient({"bootstrap.servers": "127.0.0.1:1"}))

def test_in_a_cycle():
    class Owner:
        pass
    owner = Owner()
    owner.client = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    owner.me = owner
    del owner
    gc.collect()

def test_closed():
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})
    consumer.close()
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:1"})
    del admin
"""


def test_the_guard_fails_a_test_that_leaves_a_client_or_lets_the_collector_free_one(tmp_path: Path) -> None:
    (tmp_path / "test_guarded.py").write_text(_GUARDED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_REPO / "plugins"), str(_REPO)])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.clients", "-p", "no:cacheprovider", "-q",
                          "-rE", "--rootdir", str(tmp_path), str(tmp_path / "test_guarded.py")],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run.stdout
    assert "3 passed, 2 errors" in out, out[-3000:]
    errors = {part.split(" ", 1)[0]: part for part in out.split("ERROR at teardown of ")[1:]}
    assert sorted(errors) == ["test_in_a_cycle", "test_left_open"], out[-3000:]
    assert "1 librdkafka client(s) still alive after the test (0 before, 1 after)" in errors["test_left_open"]
    assert "the cyclic garbage collector freed a Consumer made at test_guarded.py:16" in errors["test_in_a_cycle"]
