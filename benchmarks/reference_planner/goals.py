"""Which soft goals the planner pursues. Hard goals (distinct brokers per partition, rack spread,
replication factor kept) always hold; ``rack_aware=False`` only treats every broker as one rack."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Goals:
    """Soft goals in priority order, each on by default.

    ``replicas``: replicas per broker within one of each other; ``leaders``: preferred leaders per
    broker within one, by reordering replicas only; ``topic_spread``: each topic's replicas spread
    evenly; ``bytes``: when sizes are known, pick which replicas move so bytes per broker even out.
    Minimal data movement always applies: no move that these goals do not need.
    """

    rack_aware: bool = True
    replicas: bool = True
    leaders: bool = True
    topic_spread: bool = True
    bytes: bool = True
