"""Is a reassignment done, and did it lose nothing? A value, not an exit code.

:func:`verify_reassignment` is pure over two snapshots; :func:`verify_live` takes the second
snapshot and the reassignments in flight from the live cluster. Done means: every planned
partition has exactly the planned replicas (order included), all of them in the ISR; nothing in
flight; no under-replicated or offline partition anywhere; no end offset went backwards.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafkaops.platform.kafka import connection, metadata, reassignments
from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster, TopicPartition



@dataclass(frozen=True)
class Failure:
    """One reason the reassignment is not done; ``partition`` is ``topic-N``."""

    partition: str
    reason: str

    def __str__(self) -> str:
        return f"{self.partition}: {self.reason}"


@dataclass(frozen=True)
class VerificationResult:
    ok: bool
    failures: tuple[Failure, ...] = ()

    def __str__(self) -> str:
        if self.ok:
            return "reassignment verified: as planned, nothing in flight, fully replicated, no offset went back"
        shown = "; ".join(str(f) for f in self.failures[:20])
        more = f"; and {len(self.failures) - 20} more" if len(self.failures) > 20 else ""
        return f"reassignment not verified, {len(self.failures)} failure(s): {shown}{more}"


def verify_reassignment(before: Cluster, after: Cluster, desired: Mapping[TopicPartition, Iterable[int]],
                        in_flight: Iterable[TopicPartition]) -> VerificationResult:
    """Check ``after`` against the plan ``desired``, the reassignments ``in_flight`` and ``before``."""
    failures: list[Failure] = []
    reported: set[TopicPartition] = set()
    for key, planned in sorted(desired.items()):
        planned = tuple(planned)
        name = f"{key[0]}-{key[1]}"
        try:
            p = after.partition(*key)
        except KafkaOpsError:
            failures.append(Failure(name, f"missing from the cluster; plan {list(planned)}"))
            continue
        if p.replicas != planned:
            failures.append(Failure(name, f"replicas {list(p.replicas)} but plan {list(planned)}"))
        missing = [r for r in p.replicas if r not in p.isr]
        if missing:
            failures.append(Failure(name, f"replicas {missing} not in ISR {list(p.isr)}"))
            reported.add(key)
    for key in sorted(set(in_flight)):
        failures.append(Failure(f"{key[0]}-{key[1]}", "reassignment still in flight"))
    for p in after.partitions:
        if p.offline:
            failures.append(Failure(p.name, f"offline: no leader among replicas {list(p.replicas)}"))
        elif p.under_replicated and p.topic_partition not in reported:
            failures.append(Failure(p.name, f"under-replicated: ISR {list(p.isr)} of replicas {list(p.replicas)}"))
    failures.extend(_offsets_gone_back(before, after))
    return VerificationResult(ok=not failures, failures=tuple(failures))


def _offsets_gone_back(before: Cluster, after: Cluster) -> list[Failure]:
    now = {p.topic_partition: p for p in after.partitions}
    failures = []
    for old in before.partitions:
        new = now.get(old.topic_partition)
        if new is None:
            failures.append(Failure(old.name, f"was in the cluster before (end offset {old.end_offset}), missing now"))
        elif old.end_offset is not None and new.end_offset is not None and new.end_offset < old.end_offset:
            failures.append(Failure(old.name, f"end offset went back from {old.end_offset} to {new.end_offset} "
                                              f"({old.end_offset - new.end_offset} records lost)"))
    return failures


def verify_live(conn: connection.KafkaConnection, desired: Mapping[TopicPartition, Iterable[int]], before: Cluster
                ) -> VerificationResult:
    """:func:`verify_reassignment` against a snapshot of the whole live cluster (internal topics
    included) and the reassignments in flight there."""
    after = metadata.snapshot(conn, include_internal=True, offsets=True, sizes=False, groups=False)
    return verify_reassignment(before, after, desired, reassignments.list_partition_reassignments(conn))
