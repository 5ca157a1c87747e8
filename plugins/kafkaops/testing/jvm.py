"""Lean JVMs for the tests' brokers and Spark drivers: the quick compiler, the serial collector and a
class-data-sharing archive of the classes a broker (a Spark driver) loads, made once per jar cache; and
server settings that cut what an idle test broker spends (:data:`BROKER_CONFIG`).

The suite is bound by the machine's two cores, and a third of its CPU went to JVMs starting up and
idling: measured on 2 cores, a 3-broker cluster took 26.8 s of CPU to come up with the role's default
options (G1, both compilers) and 10.8 s lean with the archive, and 8.2 s against 5.5 s per idle minute; a
small spark-submit job 21.7 s against 7.0 s (benchmarks/RESULTS.md). None of this is the product's
choice: production brokers keep the role's ``kafka_broker_jvm_opts`` and Spark jobs their cluster's
settings; the benchmarks start their own JVMs with those defaults.

``python -m kafkaops.testing.jvm`` (``make test`` runs it) writes the archives into ``<jar cache>/cds``: a broker's
from a one-node cluster started through the role and stopped (the JVM writes the classes it loaded when it
exits), a Spark driver's from a small local job. Without them the options are the same minus the archive.
An archive made by another JVM or for other jars is ignored by the JVM (``-Xlog:cds*=off`` keeps it
quiet): a Kafka 3.9 node runs without one."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

#: The quick compiler only and the serial collector: short-lived, small JVMs start on less CPU.
LEAN = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Server settings of the tests' brokers that cut what an idle broker spends (beside the JVM's options): 2
#: request handler and 2 network threads instead of 8 and 3 (each wakes every 300 ms), followers waiting up
#: to 2 s for new data instead of 0.5 s (new data still answers at once), the transaction log in 6
#: partitions instead of 50 (created by the first transactional producer: the backfill's), and a controller
#: that appends its no-op record to an idle metadata log every 5 s instead of every 0.5 s (each wakes every
#: broker to fetch and replay it): 3 idle brokers and their controller spent 4.8 s of CPU a minute, 3.9 s so.
BROKER_CONFIG: dict[str, int] = {"num.io.threads": 2, "num.network.threads": 2, "replica.fetch.wait.max.ms": 2000,
                                 "transaction.state.log.num.partitions": 6, "metadata.max.idle.interval.ms": 5000}
#: What the role's default ``kafka_broker_jvm_opts`` sets besides the collector, kept.
_BROKER_PROPERTIES = "-Djava.awt.headless=true"
#: The Spark job the driver's archive is taken from: a session, a DataFrame, a shuffle, SQL functions.
_SPARK_JOB = textwrap.dedent("""
    from pyspark.sql import SparkSession, functions as F
    spark = SparkSession.builder.appName("kafkaops-cds").config("spark.ui.enabled", "false").getOrCreate()
    df = spark.range(0, 100000).select((F.col("id") % 97).alias("k"), F.sha2(F.col("id").cast("string"), 256).alias("v"))
    print(df.groupBy("k").agg(F.count("*"), F.max("v")).orderBy("k").limit(3).collect())
    spark.stop()
""")


def archive_dir() -> Path:
    from kafkaops.platform import paths  # after KAFKAOPS_CACHE is set (tests/conftest.py, main)

    return paths.JARS / "cds"


def broker_archive() -> Path:
    return archive_dir() / "broker.jsa"


def spark_archive() -> Path:
    return archive_dir() / "spark-driver.jsa"


def opts(archive: Path) -> str:
    """:data:`LEAN`, with ``archive`` when it has been made."""
    if archive.is_file():
        return f"{LEAN} -XX:SharedArchiveFile={archive} -Xlog:cds*=off"
    return LEAN


def broker_opts(*, archive: bool = True) -> str:
    """The tests' brokers' ``kafka_broker_jvm_opts``; without the archive for brokers that run their
    own copy of the jars (the archive holds only for the classpath it was made with)."""
    return f"{opts(broker_archive()) if archive else LEAN} {_BROKER_PROPERTIES}"


def broker_vars(*, archive: bool = True) -> dict[str, str]:
    """Role variables of a test cluster whose inventory is not a ``ClusterSpec``'s, or whose brokers are
    also started where the session's ``provision.INVENTORY_DEFAULTS`` is not set (a deployment's worker,
    another process's home)."""
    return {"kafka_broker_jvm_opts": broker_opts(archive=archive)}


def spark_opts() -> str:
    """The tests' ``SPARK_SUBMIT_OPTS``: the options of every spark-submit's JVM, a local driver's too."""
    return opts(spark_archive())


def use_lean_jvms() -> None:
    """This process's brokers (``provision.INVENTORY_DEFAULTS``: lean JVM options, the idle settings of
    :data:`BROKER_CONFIG`) and spark-submit JVMs (``SPARK_SUBMIT_OPTS``) lean. A cluster's own
    ``kafka_broker_jvm_opts`` wins, and so does ``SPARK_SUBMIT_OPTS`` set outside."""
    from kafkaops.platform import provision  # after KAFKAOPS_CACHE is set: the archives are under the jars

    provision.INVENTORY_DEFAULTS.setdefault("kafka_broker_jvm_opts", broker_opts())
    provision.INVENTORY_DEFAULTS.setdefault("kafka_broker_extra_config", dict(BROKER_CONFIG))
    os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_opts())


def make_broker_archive(target: Path) -> None:
    """Start a one-node cluster through the role with ``-XX:ArchiveClassesAtExit``, use it, stop it."""
    from kafkaops.cli import datagen
    from kafkaops.platform.kafka import connection, records, topics
    from kafkaops.testing.clusters import temporary_cluster

    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    vars_ = {"kafka_broker_jvm_opts": f"{LEAN} -XX:ArchiveClassesAtExit={partial} {_BROKER_PROPERTIES}"}
    with temporary_cluster("kafkaops-cds-", brokers=1, controllers=1, inventory_vars=vars_) as spec:
        with connection.connect(spec.bootstrap) as conn:  # a topic written and read: the classes of both paths
            topics.create_topic(conn, "cds", 3, 1)
            datagen.produce(conn.config, "cds", datagen.DatagenSpec(records=1000, keys=10, record_bytes=100))
        ends = records.end_offsets(conn.config, "cds")
        sum(1 for _ in records.read_ranges(conn.config, "cds", {p: (0, e) for p, (_, e) in ends.items()}))
    _publish(partial, target)


def make_spark_archive(target: Path) -> None:
    """Run a small local Spark job whose driver writes its classes when it exits."""
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafkaops-cds-") as folder:
        job = Path(folder) / "job.py"
        job.write_text(_SPARK_JOB)
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYSPARK_PYTHON": sys.executable, "SPARK_SUBMIT_OPTS": f"{LEAN} -XX:ArchiveClassesAtExit={partial}"}
        done = subprocess.run(["spark-submit", "--master", "local[2]", str(job)], cwd=folder, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"spark-submit exited with {done.returncode}: {done.stderr[-1500:]}")
    _publish(partial, target)


def _publish(partial: Path, target: Path) -> None:
    if not partial.is_file() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class-data archive at {partial}")
    os.replace(partial, target)


def main() -> int:
    # the checkout's jar cache (run from its root), as under make and pytest (tests/conftest.py)
    os.environ.setdefault("KAFKAOPS_CACHE", str(Path.cwd() / ".cache"))
    archive_dir().mkdir(parents=True, exist_ok=True)
    from concurrent.futures import ThreadPoolExecutor

    # side by side: the Spark job in a thread (a subprocess), the broker here (Ansible wants the main thread)
    failed: list[str] = []  # the tests run without an archive, only slower: say so, do not stop
    with ThreadPoolExecutor(1) as pool:
        spark = None if spark_archive().is_file() else pool.submit(make_spark_archive, spark_archive())
        try:
            if not broker_archive().is_file():
                make_broker_archive(broker_archive())
        except Exception as err:
            failed.append(f"{broker_archive().name}: {err}")
        try:
            if spark is not None:
                spark.result()
        except Exception as err:
            failed.append(f"{spark_archive().name}: {err}")
    for failure in failed:
        print(f"kafkaops.testing.jvm: warning: no class-data archive {failure}; the tests' JVMs start without it",
              flush=True)
    print(f"kafkaops.testing.jvm: class-data archives in {archive_dir()}: "
          f"{', '.join(p.name for p in sorted(archive_dir().glob('*.jsa'))) or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
