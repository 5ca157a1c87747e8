"""The benchmarks, run from the checkout's root: ``.venv/bin/python -m benchmarks`` runs them all,
``.venv/bin/python -m benchmarks.bench_<name>`` one; each appends to benchmarks/RESULTS.md. They import the
installed kafkaops (the venv's editable install), its harness from :mod:`kafkaops.testing`, and nothing of
tests/."""
import os
from pathlib import Path

# The checkout's jar cache unless KAFKAOPS_CACHE says otherwise, as `make bench` sets it: here, before any
# benchmark imports kafkaops.platform.paths, which reads it once.
os.environ.setdefault("KAFKAOPS_CACHE", str(Path(__file__).resolve().parents[1] / ".cache"))

# A benchmark killed before its teardown leaves no broker behind: the tests' guard (tests/conftest.py), which stops
# every broker of a temporary cluster's folder, and removes the folder, once this process is gone.
from kafkaops.testing import clusters, watchdog  # noqa: E402  (after KAFKAOPS_CACHE is set)

if watchdog.kafka_folder not in clusters.TEMPORARY_CLUSTER_GUARDS:
    clusters.TEMPORARY_CLUSTER_GUARDS.append(watchdog.kafka_folder)
