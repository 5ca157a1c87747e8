"""The harness of the tests, the benchmarks and the demo: traffic that checks itself, the stand-in operator
of a rehearsal, temporary clusters and the integrity oracle of a backfill; and the servers the tests and
benchmarks start (lean JVMs, the watchdog that stops them should their process die, PostgreSQL, Spark
standalone, Airflow as operators deploy it, in-process DAG runs, a stateful Kafka Streams application).

No production module imports it (a lint-imports contract says so); ``kafkaops.cli.demo`` may, as the demo
is a rehearsal. It ships in the wheel so that the demo runs from an installed package. ``deployment`` and
``spark`` also need pytest (the ``test`` extra): they skip or fail the calling test as a fixture would.
"""
