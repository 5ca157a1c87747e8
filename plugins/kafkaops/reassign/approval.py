"""What an operator reads before approving a reassignment, as Markdown (Airflow's Required actions
page renders it): what the plan does in one sentence, the moves, the bytes each broker sends and
receives (a tiered topic's new replica copies the leader's local log only), the throttle and an ETA, replicas and leaders per broker before and after, and what
follows the approval. Pure: a plan and the run's params in, text out.

The ETA is the time the throttle allows: the engine submits the moves in batches
(:func:`kafkaops.reassign.engine.plan_batches`, capped per broker and in total) and waits for each
batch, and within a batch every broker sends at most the throttle as leader and receives at most
the throttle as follower. A cluster slower than the throttle takes longer.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kafkaops.model import TopicPartition, Move
from kafkaops.platform.render import human_bytes
from kafkaops.reassign.engine import clock, plan_batches, sole_in_sync
from kafkaops.reassign.planner.plan import ReassignmentPlan

#: Moves listed in full; the rest are counted.
MOVES_SHOWN = 30


class ApprovalParams(Protocol):
    """What the text needs of the run's params (:class:`kafkaops.reassign.steps.OperationParams`)."""

    @property
    def throttle_mb_per_s(self) -> float: ...

    @property
    def max_moves_per_broker(self) -> int: ...

    @property
    def max_moves_total(self) -> int: ...

    @property
    def stop_drained(self) -> bool: ...

    @property
    def keep_new_brokers(self) -> bool: ...


@dataclass(frozen=True)
class Traffic:
    """Bytes each broker receives (a new replica copies the partition) and sends (the partition's
    leader serves the copy), and how long the throttle makes it take."""

    bytes_in: Mapping[int, int]
    bytes_out: Mapping[int, int]
    batches: int
    eta_s: float


def _sender(move: Move, leaders: Mapping[TopicPartition, int | None]) -> int:
    leader = leaders.get(move.topic_partition)
    return leader if leader is not None and leader >= 0 and leader in move.before else move.before[0]


def _flows(moves: Iterable[Move], leaders: Mapping[TopicPartition, int | None]) -> tuple[dict[int, int], dict[int, int]]:
    bytes_in: dict[int, int] = {}
    bytes_out: dict[int, int] = {}
    for m in moves:
        size = m.size_bytes or 0
        for b in m.adding:
            bytes_in[b] = bytes_in.get(b, 0) + size
        if m.adding:
            sender = _sender(m, leaders)
            bytes_out[sender] = bytes_out.get(sender, 0) + m.bytes
    return bytes_in, bytes_out


def traffic(moves: Iterable[Move], *, throttle_bytes_per_s: float, max_moves_per_broker: int, max_moves_total: int,
            leaders: Mapping[TopicPartition, int | None] | None = None,
            first: Collection[TopicPartition] = ()) -> Traffic:
    """Bytes in and out per broker for ``moves`` and the ETA at the throttle: per batch of the
    engine's batching (``first`` before the others, as the engine orders them), the busiest broker's
    larger direction over the throttle, summed over the batches. ``leaders`` are the partitions'
    current leaders (default: the first replica)."""
    moves = tuple(moves)
    leaders = leaders or {}
    eta = 0.0
    batches = plan_batches(moves, max_moves_per_broker=max_moves_per_broker, max_moves_total=max_moves_total,
                           first=first)
    for batch in batches:
        bytes_in, bytes_out = _flows(batch.moves, leaders)
        busiest = max([*bytes_in.values(), *bytes_out.values(), 0])
        eta += busiest / throttle_bytes_per_s
    bytes_in, bytes_out = _flows(moves, leaders)
    return Traffic(bytes_in, bytes_out, len(batches), eta)


def plan_traffic(plan: ReassignmentPlan, params: ApprovalParams) -> Traffic:
    """:func:`traffic` of a plan under the run's throttle and concurrency caps."""
    leaders = {p.topic_partition: p.leader for p in plan.cluster.partitions} if plan.cluster is not None else {}
    return traffic(plan.moves, throttle_bytes_per_s=params.throttle_mb_per_s * 1_000_000,
                   max_moves_per_broker=params.max_moves_per_broker, max_moves_total=params.max_moves_total,
                   leaders=leaders, first=_sole_copies(plan))


def _sole_copies(plan: ReassignmentPlan) -> frozenset[TopicPartition]:
    return sole_in_sync(plan.moves, plan.cluster) if plan.cluster is not None else frozenset()


def sole_copy_lines(plan: ReassignmentPlan) -> list[str]:
    """Partitions whose every in-sync replica the plan takes away (a drained broker as a partition's only
    in-sync copy), named, with what the run does about them."""
    sole = sorted(_sole_copies(plan))
    if not sole:
        return []
    assert plan.cluster is not None  # _sole_copies found some
    holders = sorted({b for tp in sole for b in plan.cluster.partition(*tp).isr})
    shown = ", ".join(f"{t}-{p}" for t, p in sole[:MOVES_SHOWN])
    more = f" and {len(sole) - MOVES_SHOWN:,} more" if len(sole) > MOVES_SHOWN else ""
    one = len(holders) == 1
    return [f"**Only in-sync copy** {_brokers_word(holders)} {'holds' if one else 'hold'} the only in-sync "
            f"replicas of {_count(len(sole), 'partition')} this plan moves away ({shown}{more}): they are "
            f"under-replicated now and their data is only there until the new replicas catch up. They move in "
            f"the first batches; keep {'it' if one else 'them'} running until the run has ended.", ""]


def _ids(brokers: Iterable[int]) -> str:
    ids = [str(b) for b in brokers]
    if len(ids) < 2:
        return "".join(ids)
    return f"{', '.join(ids[:-1])} and {ids[-1]}"


def _brokers_word(brokers: Iterable[int]) -> str:
    brokers = tuple(brokers)
    return f"{'broker' if len(brokers) == 1 else 'brokers'} {_ids(brokers)}"


def _replicas(replicas: Iterable[int]) -> str:
    return ", ".join(str(b) for b in replicas)


def moves_table(moves: Iterable[Move], *, shown: int = MOVES_SHOWN) -> list[str]:
    """The moves as a Markdown table, the first ``shown`` of them, then ``and N more``."""
    moves = tuple(moves)
    lines = ["| partition | replicas before | replicas after | to copy |", "|---|---|---|---:|"]
    lines += [f"| {m.name} | {_replicas(m.before)} | {_replicas(m.after)} | {human_bytes(m.bytes)}"
              f"{' (local log, tiered)' if m.tiered and m.adding else ''} |" for m in moves[:shown]]
    if len(moves) > shown:
        lines += ["", f"and {len(moves) - shown} more"]
    return lines


def brokers_table(plan: ReassignmentPlan, flows: Traffic) -> list[str]:
    """Replicas, leaders and data per broker before and after, and the bytes each copies in and out."""
    before, after = plan.stats_before, plan.stats_after
    lines = ["| broker | replicas | leaders | data | copies in | copies out |", "|---|---|---|---|---:|---:|"]
    for b in sorted(set(before.replicas) | set(after.replicas)):
        tag = " (new)" if b in plan.new_brokers else " (drained)" if b in plan.drained else \
            " (excluded)" if b in plan.excluded else ""
        lines.append(f"| {b}{tag} | {before.replicas.get(b, 0)} → {after.replicas.get(b, 0)} "
                     f"| {before.leaders.get(b, 0)} → {after.leaders.get(b, 0)} "
                     f"| {human_bytes(before.bytes.get(b, 0))} → {human_bytes(after.bytes.get(b, 0))} "
                     f"| {human_bytes(flows.bytes_in.get(b, 0))} | {human_bytes(flows.bytes_out.get(b, 0))} |")
    return lines


def what_follows(plan: ReassignmentPlan, params: ApprovalParams) -> list[str]:
    """The steps an approval starts, and what happens to new or drained brokers."""
    lines = []
    if plan.new_brokers:
        one = len(plan.new_brokers) == 1
        lines.append(f"- {_brokers_word(plan.new_brokers).capitalize()} {'is' if one else 'are'} new and not running "
                     f"yet: approving provisions {'it' if one else 'them'} with the kafka_broker role and waits until "
                     f"the controller registers {'it' if one else 'them'}; {'it holds' if one else 'they hold'} "
                     "replicas once these moves ran.")
        if params.keep_new_brokers:
            lines.append(f"- If the run fails after that, {'it keeps' if one else 'they keep'} running "
                         "(keep_new_brokers is on); the record names "
                         f"{'it' if one else 'them'}.")
        else:
            lines.append(f"- If the run fails after that, {'it is' if one else 'each one is'} stopped, removed and "
                         "unregistered unless it holds replicas by then; the record names any that stay.")
    lines.append("- Approving " + ("then " if plan.new_brokers else "") + "sets the throttle, moves the partitions in "
                 "batches, verifies them, removes the throttle (also on failure), elects the preferred leaders and "
                 "runs the post-move gate.")
    drained = plan.drained
    if drained:
        if params.stop_drained:
            lines.append(f"- Then {_brokers_word(drained)} **will be stopped** (stop_drained is set), once the "
                         "post-move gate passed.")
        else:
            lines.append(f"- {_brokers_word(drained).capitalize()} will hold no replicas and **keep running** "
                         "(stop_drained is off).")
    lines.append("- Rejecting changes nothing" + (": no broker is started, " if plan.new_brokers else ": ")
                 + "no partition moves. The run then ends failed in Airflow and its record says rejected.")
    return lines


def drain_parts(plan: ReassignmentPlan) -> list[str]:
    """A drain's parts as the approval shows them: what the drained brokers hold, and apart from it the
    rebalance after (when asked for), or the spread the brokers that stay keep (when not)."""
    parts = dict(plan.part_moves)
    if plan.kind != "drain" or "drain" not in parts:
        return []
    holds = "holds" if len(plan.drained) == 1 else "hold"
    extra = parts["drain"] - plan.lower_bound
    short = f", and {_count(extra, 'replica')} more to give partitions whose racks were short their racks" \
        if extra > 0 else ""
    lines = [f"**Drain** {_count(parts['drain'], 'replica move')}: {_brokers_word(plan.drained)} {holds} "
             f"{_count(plan.lower_bound, 'replica')}, each moved to the broker furthest below its share that keeps "
             f"the partition's racks{short}.", ""]
    if "rebalance after" in parts:
        lines.append(f"**Rebalance after** {_count(parts['rebalance after'], 'replica move')} more, to even out "
                     "the brokers that stay (asked for with rebalance_after).")
    else:
        lines.append(f"Nothing else moves: the brokers that stay keep their replica spread "
                     f"({plan.stats_after.replica_spread} after). Set rebalance_after to even them out too.")
    return [*lines, ""]


def leader_part(plan: ReassignmentPlan) -> list[str]:
    """The leader changes as the approval shows them, apart from the replica moves: how many partitions only
    change their preferred leader (no data moves), and how to leave leaders alone."""
    if not plan.leader_changes:
        return []
    only, moved = plan.leader_only, plan.leader_changes - plan.leader_only
    text = f"**Leaders** {_count(plan.leader_changes, 'preferred leader change')}, elected once the moves ran"
    if not only:
        return [text + ", all with the partitions' moves (no leader-only change).", ""]
    return [f"{text}: {only:,} leader-only (the partition keeps its replicas in a new order: no data moves), "
            f"{moved:,} with the partitions' moves. Set balance_leaders off to leave the other partitions' "
            "leaders as they are.", ""]


def _retention(value: int, unit: str) -> str:
    if value == -2:
        return f"its retention.{unit}"
    if value < 0:
        return "unlimited"
    return human_bytes(value) if unit == "bytes" else f"{value:,} ms"


def tiered_part(plan: ReassignmentPlan) -> list[str]:
    """The moves of tiered topics (remote storage on) as the approval shows them: how many, that their new
    replicas copy the leader's local log only (what the bytes and the ETA count), and the topics' local
    retention; nothing when none moves."""
    tiered = plan.tiered_moves
    if not tiered:
        return []
    moving = sum(1 for m in plan.moves if m.adding)
    topics = sorted({m.topic for m in tiered})
    storage = {s.topic: s for s in plan.storage}
    kept = "; ".join(f"{t}: {_retention(storage[t].local_retention_bytes, 'bytes')}, "
                     f"{_retention(storage[t].local_retention_ms, 'ms')}" for t in topics[:5] if t in storage)
    more = f"; and {len(topics) - 5} more topics" if len(topics) > 5 else ""
    return [f"**Tiered storage** {len(tiered):,} of the {_count(moving, 'moving partition')} "
            f"{'is' if len(tiered) == 1 else 'are'} of {_count(len(topics), 'topic')} with remote storage on "
            f"(remote.storage.enable): a new replica copies only the leader's local log, "
            f"{human_bytes(sum(m.bytes for m in tiered))} of the {human_bytes(plan.bytes_to_move)} to copy, and "
            "the bytes and the ETA count that; their segments in remote storage are not copied. Local retention "
            f"(local.retention.bytes, local.retention.ms): {kept}{more}.", ""]


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def approval_markdown(plan: ReassignmentPlan, params: ApprovalParams, *, shown: int = MOVES_SHOWN) -> str:
    """The approval body: summary, throttle and ETA, moves, brokers before and after, what follows."""
    flows = plan_traffic(plan, params)
    lines = [plan.summary(notes=False) + ".", ""]
    lines += [f"- {note[:1].upper()}{note[1:]}." for note in plan.notes] + ([""] if plan.notes else [])
    lines += drain_parts(plan)
    lines += sole_copy_lines(plan)
    lines += leader_part(plan)
    lines += tiered_part(plan)
    if plan.moves:
        batches = f"{flows.batches} {'batch' if flows.batches == 1 else 'batches'}"
        lines += [f"**Throttle** {params.throttle_mb_per_s:g} MB/s per broker, in and out. "
                  f"**ETA** {clock(flows.eta_s)} at the throttle: {human_bytes(plan.bytes_to_move)} to copy in "
                  f"{batches} of at most {params.max_moves_per_broker} moves per broker and "
                  f"{params.max_moves_total} in total, each as long as its busiest broker's copy.", ""]
        lines += ["#### Moves", *moves_table(plan.moves, shown=shown), ""]
    else:
        lines += ["Nothing to move: the cluster already is as planned.", ""]
    lines += ["#### Brokers before → after", *brokers_table(plan, flows), ""]
    lines += ["#### What follows", *what_follows(plan, params)]
    return "\n".join(lines)
