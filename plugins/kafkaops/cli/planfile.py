"""Files in and out of the planner: Kafka's reassignment JSON, broker and rack lists, sizes.

Every error names the file (or option) and what is wrong with it, and raises
:class:`PlanInputError`.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kafkaops.model import Broker, Cluster, ModelError, PartitionAssignment
from kafkaops.reassign.planner.errors import PlanInputError
from kafkaops.reassign.planner.plan import ReassignmentPlan

log = logging.getLogger(__name__)

ASSIGNMENT_SHAPE = '{"topic","partition","replicas"}'
SIZES_SHAPE = '{"topic","partition","size"}'


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PlanInputError(f"{path}: cannot read it ({err.strerror or err})") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PlanInputError(f"{path.name}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from err


def _entries(path: Path, data: Any, shape: str) -> list[Mapping[str, Any]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("partitions"), list):
        raise PlanInputError(f'{path.name}: expected an object with a "partitions" list of {shape}')
    for n, entry in enumerate(data["partitions"]):
        if not isinstance(entry, Mapping):
            raise PlanInputError(f"{path.name}: partitions[{n}] is not an object; expected {shape}")
    return data["partitions"]


def _field(path: Path, n: int, entry: Mapping[str, Any], name: str, kind: type, shape: str) -> Any:
    if name not in entry:
        raise PlanInputError(f'{path.name}: partitions[{n}] has no "{name}"; expected {shape}')
    value = entry[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise PlanInputError(f'{path.name}: partitions[{n}] "{name}" is {value!r}; expected an integer >= 0')
    if kind is str and (not isinstance(value, str) or not value):
        raise PlanInputError(f'{path.name}: partitions[{n}] "{name}" is {value!r}; expected a topic name')
    return value


def _well_formed(entry: Any) -> bool:
    """Whether an assignment entry is a plain ``{"topic","partition","replicas"}`` with valid values:
    the fast path; anything else goes through the checks that name what is wrong."""
    try:
        topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
    except (KeyError, TypeError):
        return False
    return (type(topic) is str and topic != "" and type(partition) is int and partition >= 0
            and type(replicas) is list and len(replicas) > 0
            and all(type(b) is int and b >= 0 for b in replicas) and len(set(replicas)) == len(replicas))


def read_assignment(path: str | Path) -> list[tuple[str, int, tuple[int, ...]]]:
    """(topic, partition, replicas) rows of a ``{"version":1,"partitions":[...]}`` file."""
    path = Path(path)
    rows = []
    seen: dict[tuple[str, int], int] = {}
    for n, entry in enumerate(_entries(path, _load_json(path), ASSIGNMENT_SHAPE)):
        if _well_formed(entry):
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
        else:
            topic, partition, replicas = _checked_entry(path, n, entry)
        key = (topic, partition)
        if key in seen:
            raise PlanInputError(f"{path.name}: partitions[{n}] repeats {topic}-{partition} "
                                 f"(first at partitions[{seen[key]}]); list each partition once")
        seen[key] = n
        rows.append((topic, partition, tuple(replicas)))
    return rows


def _checked_entry(path: Path, n: int, entry: Mapping[str, Any]) -> tuple[str, int, list[int]]:
    topic = _field(path, n, entry, "topic", str, ASSIGNMENT_SHAPE)
    partition = _field(path, n, entry, "partition", int, ASSIGNMENT_SHAPE)
    replicas = _field(path, n, entry, "replicas", list, ASSIGNMENT_SHAPE)
    if not isinstance(replicas, list) or not replicas or not all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in replicas):
        raise PlanInputError(f'{path.name}: partitions[{n}] "replicas" is {replicas!r}; expected a non-empty '
                             "list of broker ids")
    if len(set(replicas)) != len(replicas):
        raise PlanInputError(f"{path.name}: partitions[{n}] ({topic}-{partition}) names a broker twice in "
                             f"{replicas}; each replica needs its own broker")
    return topic, partition, replicas


def read_sizes(path: str | Path) -> dict[tuple[str, int], int]:
    """Bytes per partition from ``{"partitions":[{"topic","partition","size"}]}``."""
    path = Path(path)
    sizes = {}
    for n, entry in enumerate(_entries(path, _load_json(path), SIZES_SHAPE)):
        key = (_field(path, n, entry, "topic", str, SIZES_SHAPE), _field(path, n, entry, "partition", int, SIZES_SHAPE))
        sizes[key] = _field(path, n, entry, "size", int, SIZES_SHAPE)
    return sizes


def parse_brokers(text: str, option: str = "--brokers") -> list[int]:
    """``1,2,3`` -> [1, 2, 3]; duplicates and non-integers are errors."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise PlanInputError(f"{option} {text!r}: expected broker ids separated by commas, e.g. 1,2,3") from err
    if not ids or any(i < 0 for i in ids):
        raise PlanInputError(f"{option} {text!r}: expected broker ids >= 0 separated by commas, e.g. 1,2,3")
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise PlanInputError(f"{option} {text!r} lists broker(s) {dupes} twice; list each broker once")
    return ids


def parse_racks(text: str) -> dict[int, str]:
    """``1:a,2:b`` -> {1: "a", 2: "b"}."""
    racks: dict[int, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        broker, sep, rack = part.partition(":")
        try:
            broker_id = int(broker)
        except ValueError as err:
            raise PlanInputError(f"--racks {part!r}: expected BROKER:RACK, e.g. 1:eu-west-1a") from err
        if not sep or not rack.strip():
            raise PlanInputError(f"--racks {part!r}: expected BROKER:RACK, e.g. 1:eu-west-1a")
        if broker_id in racks:
            raise PlanInputError(f"--racks gives broker {broker_id} two racks; give each broker one")
        racks[broker_id] = rack.strip()
    return racks


def build_cluster(rows: Sequence[tuple[str, int, tuple[int, ...]]], brokers: Sequence[int],
                  racks: Mapping[int, str] | None = None, sizes: Mapping[tuple[str, int], int] | None = None,
                  source: str = "current assignment") -> Cluster:
    """The cluster that ``rows`` describe on ``brokers``. Every replica must name a listed broker."""
    racks = dict(racks or {})
    sizes = dict(sizes or {})
    listed = set(brokers)
    stray_racks = sorted(set(racks) - listed)
    if stray_racks:
        raise PlanInputError(f"--racks names broker(s) {stray_racks}, which --brokers does not list; "
                             f"add them to --brokers or drop them from --racks")
    for topic, partition, replicas in rows:
        unknown = [b for b in replicas if b not in listed]
        if unknown:
            raise PlanInputError(f"{source}: {topic}-{partition} has replicas on broker(s) {unknown}, which "
                                 f"--brokers does not list; add them to --brokers")
    keys = {(t, p) for t, p, _ in rows}
    stray_sizes = sorted(k for k in sizes if k not in keys)
    if stray_sizes:
        log.warning("sizes name %d partitions that the current assignment does not have (e.g. %s-%d); "
                    "ignoring them", len(stray_sizes), *stray_sizes[0])
    try:
        return Cluster(brokers=tuple(Broker(b, rack=racks.get(b)) for b in brokers),
                       partitions=tuple(PartitionAssignment(t, p, r, leader=r[0], isr=r, size_bytes=sizes.get((t, p)))
                                        for t, p, r in rows))
    except ModelError as err:
        raise PlanInputError(f"{source}: {err}") from err


def load_cluster(current: str | Path, brokers: Sequence[int], racks: Mapping[int, str] | None = None,
                 sizes: str | Path | None = None) -> Cluster:
    """Read CURRENT.json (and SIZES.json) into a :class:`Cluster` over ``brokers``."""
    return build_cluster(read_assignment(current), brokers, racks, read_sizes(sizes) if sizes else None,
                         source=Path(current).name)


def kafka_json_text(data: Mapping[str, Any]) -> str:
    """Kafka's reassignment JSON with one partition a line: as readable as an indented file and
    written by the C encoder (``indent`` falls back to the pure-Python one, minutes at 1M partitions)."""
    head = {k: v for k, v in data.items() if k != "partitions"}
    lines = ",\n".join(json.dumps(entry) for entry in data["partitions"])
    return json.dumps(head)[:-1] + (", " if head else "") + f'"partitions": [\n{lines}\n]}}\n'


def write_plan(plan: ReassignmentPlan, path: str | Path) -> None:
    """Write the plan's changed partitions as ``kafka-reassign-partitions --execute`` input."""
    path = Path(path)
    try:
        path.write_text(kafka_json_text(plan.to_kafka_json()), encoding="utf-8")
    except OSError as err:
        raise PlanInputError(f"{path}: cannot write the plan ({err.strerror or err})") from err
