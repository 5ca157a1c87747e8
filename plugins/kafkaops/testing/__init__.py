"""The harness of the tests, the benchmarks and the demo: traffic that checks itself, the stand-in operator
of a rehearsal, temporary clusters and the integrity oracle of a backfill.

No production module imports it (a lint-imports contract says so); ``kafkaops.cli.demo`` may, as the demo
is a rehearsal. It ships in the wheel so that the demo runs from an installed package.
"""
