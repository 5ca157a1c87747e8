"""One operation per cluster at a time: a lock file per cluster, shared by every kafkaops DAG.

Taking the lock is atomic (O_CREAT|O_EXCL). A refused run is told which run holds the
cluster and since when. Releasing checks the holder, so a run never frees another's lock.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from kafkaops.errors import KafkaOpsError
from kafkaops.paths import state_dir


class ClusterBusy(KafkaOpsError):
    """Another operation holds the cluster."""


@dataclass(frozen=True)
class LockHolder:
    cluster: str
    holder: str
    since: float


def _path(cluster: str, root: Path | None) -> Path:
    return (root or state_dir() / "locks") / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', cluster)}.lock"


def holder_of(cluster: str, root: Path | None = None) -> LockHolder | None:
    path = _path(cluster, root)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise KafkaOpsError(f"lock file {path} is unreadable ({err}); if no kafkaops run is active on "
                            f"{cluster}, delete it") from err
    return LockHolder(cluster, data["holder"], data["since"])


def acquire(cluster: str, holder: str, root: Path | None = None) -> LockHolder:
    """Take the cluster for ``holder`` (e.g. ``kafka_scale_out/manual__2026-...``); idempotent for
    the same holder, so a retried task does not lock itself out."""
    path = _path(cluster, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = LockHolder(cluster, holder, time.time())
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError as err:
        current = holder_of(cluster, root)
        if current is not None and current.holder == holder:
            return current
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(current.since)) if current else "?"
        raise ClusterBusy(f"cluster {cluster} is busy: run {current.holder if current else '?'} holds it since "
                          f"{since}; wait for that run to finish (its teardown releases the lock) or, if it is "
                          f"dead, delete {path}") from err
    with os.fdopen(fd, "w") as f:
        json.dump({"holder": holder, "since": record.since}, f)
    return record


def release(cluster: str, holder: str, root: Path | None = None) -> bool:
    """Free the cluster if ``holder`` holds it; False when it held nothing."""
    current = holder_of(cluster, root)
    if current is None or current.holder != holder:
        return False
    _path(cluster, root).unlink(missing_ok=True)
    return True
