"""Room on the receiving brokers' disks (pure): a reassignment plan held to each receiving broker's free log-dir
bytes before anything changes, as Cruise Control's disk capacity goal holds a proposal to its brokers' capacity.

A broker receives, for every move that adds it, what the new replica copies (:attr:`kafkaops.model.Move.size_bytes`:
the partition's largest replica, or the leader's local log of a tiered topic). What leaves a broker is not
credited: Kafka deletes a moved replica only after its new replicas have caught up, so while the copies run a
broker holds what it had and what it receives. After the copies it must keep :data:`MIN_FREE_FRACTION` of its log
dirs free: producers go on writing while replicas move, and a broker whose only log dir fills stops.

No I/O: brokers (with the log-dir bytes a snapshot read, :class:`kafkaops.model.Broker`) and moves in, a
:class:`RoomCheck` out; :func:`require_room` raises :class:`NotEnoughRoom`, naming each broker short of room.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafkaops.errors import KafkaOpsError
from kafkaops.model import Broker, Move
from kafkaops.reassign.planner.plan import _human

#: The share of a receiving broker's log-dir bytes that must stay free once the plan's copies have landed on it.
#: 10 %: room for the writes that go on during the copy and after it, and for Kafka's segment rolls and index
#: files, while a broker at 85 % full can still take a move. (Cruise Control's DiskCapacityGoal balances to 80 %,
#: ``disk.capacity.threshold``; this is a floor that refuses a run, not a goal a plan balances to.)
MIN_FREE_FRACTION = 0.10


def _ids(brokers: Iterable[int]) -> str:
    return "[" + ", ".join(map(str, brokers)) + "]"


@dataclass(frozen=True)
class BrokerRoom:
    """One receiving broker: the bytes the plan copies onto it (``incoming_bytes``; ``unsized`` moves onto it of
    unknown size count 0) and its log dirs' bytes as last read (``usable_bytes`` free to Kafka, ``total_bytes``;
    None, or a total of 0 as DescribeLogDirs of Kafka before 3.3 gives it, when unknown)."""

    broker: int
    incoming_bytes: int
    usable_bytes: int | None = None
    total_bytes: int | None = None
    min_free_fraction: float = MIN_FREE_FRACTION
    unsized: int = 0

    @property
    def known(self) -> bool:
        """Whether its free bytes are known: its log dirs answered with their sizes."""
        return self.usable_bytes is not None and self.total_bytes is not None and self.total_bytes > 0

    @property
    def keep_bytes(self) -> int:
        """The bytes it must keep free after the copies (0 when its disk is unknown)."""
        return math.ceil((self.total_bytes or 0) * self.min_free_fraction) if self.known else 0

    @property
    def room_bytes(self) -> int | None:
        """What it may receive: its free bytes less those it must keep free (never below 0); None when unknown."""
        return max((self.usable_bytes or 0) - self.keep_bytes, 0) if self.known else None

    @property
    def short(self) -> bool:
        """It receives bytes, and more than its :attr:`room_bytes`."""
        return self.known and self.incoming_bytes > 0 and self.incoming_bytes > (self.room_bytes or 0)

    @property
    def free_after_fraction(self) -> float | None:
        """The share of its log dirs free once the copies landed (below 0 when they do not fit); None when unknown."""
        if not self.known:
            return None
        return ((self.usable_bytes or 0) - self.incoming_bytes) / (self.total_bytes or 1)

    def __str__(self) -> str:
        """E.g. ``broker 5: 1.2 MiB free of 64.0 MiB, would receive 9.6 MiB; it must keep 6.4 MiB (10 %) free,
        so it has room for 0 B``."""
        receives = f"would receive {_human(self.incoming_bytes)}" + (
            f" (and {self.unsized} move(s) of unknown size)" if self.unsized else "")
        if not self.known:
            return f"broker {self.broker}: free bytes unknown, {receives}"
        return (f"broker {self.broker}: {_human(self.usable_bytes or 0)} free of {_human(self.total_bytes or 0)}, "
                f"{receives}; it must keep {_human(self.keep_bytes)} ({self.min_free_fraction:.0%}) free, so it has "
                f"room for {_human(self.room_bytes or 0)}")


@dataclass(frozen=True)
class RoomCheck:
    """Every broker a plan copies onto, by id, and what its room says. ``new``: the plan's new brokers (a
    scale-out's, not running while it plans: their room is checked once they are provisioned)."""

    brokers: tuple[BrokerRoom, ...] = ()
    new: tuple[int, ...] = ()
    min_free_fraction: float = MIN_FREE_FRACTION

    @property
    def ok(self) -> bool:
        return not self.short

    @property
    def short(self) -> tuple[BrokerRoom, ...]:
        return tuple(b for b in self.brokers if b.short)

    @property
    def unchecked(self) -> tuple[BrokerRoom, ...]:
        """Receiving brokers whose free bytes are unknown: not refused, and said so."""
        return tuple(b for b in self.brokers if not b.known)

    @property
    def checked(self) -> tuple[BrokerRoom, ...]:
        return tuple(b for b in self.brokers if b.known)

    def note(self) -> str:
        """What the plan's notes (and so its summary and approval) say of the room: the brokers checked and the
        least free share any is left with; those not checked and why. Empty when the plan copies nothing."""
        if not self.brokers:
            return ""
        parts = []
        if self.checked:
            least = min(self.checked, key=lambda b: (b.free_after_fraction or 0.0, b.broker))
            parts.append(f"disk room checked on receiving broker(s) {_ids(b.broker for b in self.checked)}: each "
                         f"keeps at least {self.min_free_fraction:.0%} of its log dirs free after its copies "
                         f"(the least: broker {least.broker}, {(least.free_after_fraction or 0.0):.0%} free after "
                         f"receiving {_human(least.incoming_bytes)})")
        new = [b.broker for b in self.unchecked if b.broker in self.new]
        if new:
            parts.append(f"the room of new broker(s) {_ids(new)} is checked once they are provisioned, before any "
                         "replica moves")
        unknown = [b.broker for b in self.unchecked if b.broker not in self.new]
        if unknown:
            parts.append(f"disk room NOT checked on receiving broker(s) {_ids(unknown)}: their log dirs gave no "
                         "free bytes; check they have room for what the moves table shows")
        unsized = sum(b.unsized for b in self.brokers)
        if unsized:
            parts.append(f"{unsized} copy(ies) of unknown size counted as 0 B in the room checked")
        return "; ".join(parts)

    def refusal(self, what: str, state: str = "nothing was changed", then: str = "") -> str:
        """The error of a plan (``what``, e.g. "the scale-out plan") some broker lacks room for: each such broker
        with its numbers, what is not counted, the ``state`` the run leaves and what to do (``then``, else: free
        space, add brokers, or keep those brokers out of the plan)."""
        short = self.short
        ids = _ids(b.broker for b in short)
        then = then or (f"free space on the log dirs of broker(s) {ids} (or give them larger disks), add brokers "
                        f"(kafka_scale_out), or keep broker(s) {ids} out of the plan (exclude_brokers={ids}, or "
                        "fewer topics), then trigger the run again")
        return (f"not enough room on the log dirs of broker(s) {ids} for {what}; {state}: "
                + "; ".join(map(str, short))
                + f". Bytes leaving a broker are not counted: Kafka frees them only after the copies complete. "
                f"What to do: {then}")


class NotEnoughRoom(KafkaOpsError):
    """A plan whose copies would leave a receiving broker with less than :data:`MIN_FREE_FRACTION` of its log dirs
    free. Final: the disks, the brokers or the plan must change first. ``room`` is the check that refused it."""

    final = True

    def __init__(self, message: str, room: RoomCheck) -> None:
        super().__init__(message)
        self.room = room


def check_room(moves: Iterable[Move], brokers: Iterable[Broker], *, new: Sequence[int] = (),
               min_free_fraction: float = MIN_FREE_FRACTION) -> RoomCheck:
    """How the receiving brokers' free log-dir bytes hold the copies of ``moves`` (pure).

    Invariant: a broker is in :attr:`RoomCheck.brokers` exactly when some move adds it (a move that only reorders
    replicas or removes them adds none), with ``incoming_bytes`` the sum of :attr:`Move.size_bytes` of the moves
    that add it (unknown sizes count 0 and are counted in ``unsized``); it is :attr:`~BrokerRoom.short` exactly when
    its free bytes are known (``brokers`` gives it ``disk_usable_bytes`` and a ``disk_total_bytes`` above 0),
    ``incoming_bytes`` > 0 and ``disk_usable_bytes - incoming_bytes < ceil(min_free_fraction * disk_total_bytes)``.
    Bytes a broker gives away are never subtracted (they are freed only after the copies). A broker whose free bytes
    are unknown, or that ``brokers`` lacks (a scale-out's new broker, listed in ``new``), is never short: it is
    :attr:`~RoomCheck.unchecked`. Log dirs of one broker (JBOD) are summed: one of them may fill first.
    """
    if not 0 <= min_free_fraction < 1:
        raise ValueError(f"min_free_fraction {min_free_fraction} is not a share of a disk in [0, 1)")
    incoming: dict[int, int] = {}
    unsized: dict[int, int] = {}
    for move in moves:
        for broker in move.adding:
            incoming[broker] = incoming.get(broker, 0) + (move.size_bytes or 0)
            if move.size_bytes is None:
                unsized[broker] = unsized.get(broker, 0) + 1
    known = {b.id: b for b in brokers}
    rooms = []
    for broker_id in sorted(incoming):
        disk = known.get(broker_id)
        rooms.append(BrokerRoom(broker_id, incoming[broker_id],
                                usable_bytes=disk.disk_usable_bytes if disk is not None else None,
                                total_bytes=disk.disk_total_bytes if disk is not None else None,
                                min_free_fraction=min_free_fraction, unsized=unsized.get(broker_id, 0)))
    return RoomCheck(tuple(rooms), tuple(sorted(new)), min_free_fraction)


def require_room(room: RoomCheck, what: str, state: str = "nothing was changed", then: str = "") -> RoomCheck:
    """``room`` when no broker is short of it; else :class:`NotEnoughRoom` naming each that is
    (:meth:`RoomCheck.refusal` of ``what``, ``state`` and ``then``)."""
    if not room.ok:
        raise NotEnoughRoom(room.refusal(what, state, then), room)
    return room
