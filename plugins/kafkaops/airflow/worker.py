"""What a Celery worker imports once, when it starts, for every kafkaops task it will run.

Airflow's Celery worker forks a process for each task, which then parses the task's DAG file.
Without this module each of those processes imports kafkaops again, and each gate pandas and
Great Expectations (together about 4 s of CPU, more than the gate itself); with it they are
already in the worker's memory when it forks. Deployments name it in Celery's own ``imports``
setting (docker-compose.yml and tests/deployment/harness.py)::

    AIRFLOW__CELERY__EXTRA_CELERY_CONFIG='{"imports": ["kafkaops.airflow.worker"]}'

Importing it touches no Kafka, store or connection, and starts no thread, so forking after it is safe.
"""
from __future__ import annotations

from kafkaops.airflow import capacity_review, lifecycle, partition_increase  # noqa: F401 - what the DAG files import
from kafkaops.platform import gates
from kafkaops.reassign import frames  # noqa: F401 - the gates' frames

gates.preload()
