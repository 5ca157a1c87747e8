"""A drain's cordons (KIP-1066, Kafka 4.3+): while replicas leave the drained brokers, their log dirs are
cordoned, so Kafka places no new partition or replica there (a topic created or grown meanwhile lands on
the brokers that stay); the cordons are lifted at the end, on failure too, as the throttles are.

    plan_cordons   the brokers to cordon and the value each had, or why none is set (brokers too old)
    set_cordons    cordon every log dir of those brokers (``cordoned.log.dirs=*``)
    lift_cordons   give each broker back the value it had before the run, each broker apart

A cordon is the dynamic per-broker config ``cordoned.log.dirs`` (a list of the broker's ``log.dirs``, or
``*`` for all), set with IncrementalAlterConfigs through the adapter. The brokers take it from
``metadata.version`` 4.3-IV0 (feature level 30) on: below that, or on brokers that report no level, nothing
is set and the record says why. A broker an operator had cordoned whole before the run (``*``) is left
as it is, and a partial cordon of theirs is put back at the end: a run lifts only what it set.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkaops.errors import KafkaOpsError
from kafkaops.platform.kafka import configs, connection, metadata

log = logging.getLogger(__name__)

CORDON_KEY = "cordoned.log.dirs"
ALL_DIRS = "*"
#: The ``metadata.version`` feature level from which brokers take cordons: Kafka 4.3-IV0
#: (``MetadataVersion.isCordonedLogDirsSupported``).
CORDON_LEVEL = 30
CORDON_RELEASE = "4.3-IV0"


class CordonsLeft(KafkaOpsError):
    """Cordons a run set and could not lift (a broker down or not answering); ``lift`` says what stays."""

    def __init__(self, message: str, lift: CordonLift) -> None:
        super().__init__(message)
        self.lift = lift


@dataclass(frozen=True)
class CordonRecord:
    """The cordons of a run: ``prior`` names each broker it cordons with the dynamic value of
    ``cordoned.log.dirs`` it had before (None: none, so the run's is deleted at the end); ``kept`` the brokers
    an operator had cordoned whole before (left alone); ``down`` the brokers not registered (a broker that is
    down takes no new partition, and cannot be asked to change a config); ``skipped`` why no cordon is set
    (e.g. brokers older than Kafka 4.3), else None."""

    prior: tuple[tuple[int, str | None], ...] = ()
    kept: tuple[int, ...] = ()
    skipped: str | None = None
    down: tuple[int, ...] = ()

    @property
    def brokers(self) -> tuple[int, ...]:
        """The brokers the run cordons (and lifts at its end)."""
        return tuple(b for b, _ in self.prior)

    @property
    def empty(self) -> bool:
        return not self.prior

    def to_dict(self) -> dict[str, Any]:
        return {"prior": [[b, v] for b, v in self.prior], "kept": list(self.kept), "skipped": self.skipped,
                "down": list(self.down)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CordonRecord:
        try:
            return cls(prior=tuple((int(b), None if v is None else str(v)) for b, v in data.get("prior") or ()),
                       kept=tuple(int(b) for b in data.get("kept") or ()), skipped=data.get("skipped"),
                       down=tuple(int(b) for b in data.get("down") or ()))
        except (TypeError, ValueError) as err:
            raise KafkaOpsError(f"cannot read a cordon record from {str(dict(data))[:200]}: {err}; pass what "
                                "CordonRecord.to_dict() returned") from err


@dataclass(frozen=True)
class CordonLift:
    """What lifting a run's cordons did: brokers given back the value they had (``restored``), brokers
    whose cordon was deleted (they had none before), brokers whose cordon stays (``left``: they did not
    answer; ``commands`` lifts them by hand) and what failed."""

    restored: tuple[int, ...] = ()
    deleted: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    commands: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()

    @property
    def brokers(self) -> tuple[int, ...]:
        """The brokers whose cordon the run lifted."""
        return tuple(sorted(self.restored + self.deleted))

    def to_dict(self) -> dict[str, Any]:
        return {"restored": list(self.restored), "deleted": list(self.deleted), "left": list(self.left),
                "commands": list(self.commands), "failures": list(self.failures)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CordonLift:
        return cls(restored=tuple(int(b) for b in data.get("restored") or ()),
                   deleted=tuple(int(b) for b in data.get("deleted") or ()),
                   left=tuple(int(b) for b in data.get("left") or ()),
                   commands=tuple(str(c) for c in data.get("commands") or ()),
                   failures=tuple(str(f) for f in data.get("failures") or ()))


def too_old(level: int | None, brokers: Iterable[int]) -> str | None:
    """Why brokers at ``metadata.version`` feature ``level`` cannot be cordoned, else None (pure)."""
    if level is not None and level >= CORDON_LEVEL:
        return None
    found = "reports no metadata.version" if level is None else f"runs at metadata.version feature level {level}"
    return (f"log dirs not cordoned on broker(s) {sorted(set(brokers))}: the cluster {found}, below {CORDON_LEVEL} "
            f"(Kafka {CORDON_RELEASE}), from which brokers take {CORDON_KEY} (KIP-1066); new partitions may land "
            "on them while they drain")


def plan_from(brokers: Iterable[int], current: Mapping[str, Mapping[str, str]], down: Iterable[int] = ()
              ) -> CordonRecord:
    """The record of cordoning ``brokers`` given their dynamic configs ``current`` (broker id -> key -> value,
    as :func:`configs.describe_configs` gives them; pure): a broker cordoned whole already is kept, one
    ``down`` (not registered) left out."""
    prior, kept = [], []
    off = set(down)
    for broker in sorted(set(int(b) for b in brokers) - off):
        value = current.get(str(broker), {}).get(CORDON_KEY)
        if value is not None and value.strip() == ALL_DIRS:
            kept.append(broker)
        else:
            prior.append((broker, value))
    return CordonRecord(prior=tuple(prior), kept=tuple(kept), down=tuple(sorted(off)))


def plan_cordons(conn: connection.KafkaConnection, brokers: Iterable[int]) -> CordonRecord:
    """The cordons draining ``brokers`` sets, with the values to give back, read from the brokers; on a
    cluster below Kafka 4.3-IV0 none, and ``skipped`` says why; a broker that is not registered (down) is left
    out and named in ``down``. Changes nothing."""
    wanted = sorted(set(int(b) for b in brokers))
    if not wanted:
        return CordonRecord()
    reason = too_old(metadata.metadata_version(conn), wanted)
    if reason is not None:
        log.info("%s", reason)
        return CordonRecord(skipped=reason)
    registered = {b.id for b in metadata.describe_cluster(conn)[2]}
    down = [b for b in wanted if b not in registered]
    if down:
        log.info("broker(s) %s are not registered: not cordoned (a broker that is down takes no new partition)", down)
    up = [b for b in wanted if b in registered]
    return plan_from(wanted, configs.describe_configs(conn, "broker", up, keys=[CORDON_KEY]) if up else {}, down)


def set_cordons(conn: connection.KafkaConnection, record: CordonRecord) -> None:
    """Cordon every log dir of the record's brokers (each broker apart: the first that fails raises, and a
    lift of the record then gives every broker of it back its value, set or not)."""
    for broker in record.brokers:
        configs.incremental_alter_configs(conn, "broker", {broker: [configs.ConfigOp(CORDON_KEY, "SET", ALL_DIRS)]})
    if record.brokers:
        log.info("log dirs of broker(s) %s cordoned (%s=%s)", list(record.brokers), CORDON_KEY, ALL_DIRS)


def lift_command(bootstrap: str, broker: int, prior: str | None) -> str:
    """The kafka-configs.sh command that lifts the run's cordon of ``broker`` (of the cluster at ``bootstrap``)
    by hand: deletes it, or gives back the value ``prior`` it had before the run."""
    change = (f"--delete-config {CORDON_KEY}" if prior is None else f"--add-config '{CORDON_KEY}=[{prior}]'")
    return (f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type brokers "
            f"--entity-name {broker} {change}")


def lift_cordons(conn: connection.KafkaConnection, record: CordonRecord) -> CordonLift:
    """Give each broker of ``record`` back the value of ``cordoned.log.dirs`` it had before the run (delete
    the run's where it had none), each broker apart. Raises :class:`CordonsLeft` naming the brokers whose
    cordon stays and the command that lifts each."""
    restored: list[int] = []
    deleted: list[int] = []
    left: list[int] = []
    commands: list[str] = []
    failures: list[str] = []
    for broker, prior in record.prior:
        op = configs.ConfigOp(CORDON_KEY, "DELETE") if prior is None else configs.ConfigOp(CORDON_KEY, "SET", prior)
        try:
            configs.incremental_alter_configs(conn, "broker", {broker: [op]})
        except KafkaOpsError as err:
            left.append(broker)
            commands.append(lift_command(conn.bootstrap, broker, prior))
            failures.append(f"broker {broker}: {err}")
            continue
        (deleted if prior is None else restored).append(broker)
    lift = CordonLift(tuple(restored), tuple(deleted), tuple(left), tuple(commands), tuple(failures))
    if left:
        raise CordonsLeft(f"the log dirs of broker(s) {left} stay cordoned ({CORDON_KEY}={ALL_DIRS}): Kafka places "
                          f"no new partition there until it is lifted; what failed: {'; '.join(failures)[:1000]}; "
                          f"once the brokers answer, lift it: {'; '.join(commands)}", lift)
    if lift.brokers:
        log.info("cordons lifted from broker(s) %s (%d restored to their value before the run)", list(lift.brokers),
                 len(restored))
    return lift
