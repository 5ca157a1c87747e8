"""The Kafka objects kafkaops itself makes, by name, so a capacity review tells them from the operator's
(pure; listed with the pure parts in the import contracts).

    dead-letter topics   a migration's ``<target>.dlq`` (records without a key under the rule)
    groups               ``kafkaops-`` and then what made them: the backfill's marker groups
                         (``kafkaops-backfill-``), the traffic check's (``kafkaops-traffic-``), probes

A ``.dlq`` topic counts as kafkaops' only beside the topic it is the dead letter of: an operator's own
``payments.dlq`` with no ``payments`` stays the operator's.
"""
from __future__ import annotations

from collections.abc import Iterable

DEAD_LETTER_SUFFIX = ".dlq"
GROUP_PREFIX = "kafkaops-"
MARKER_GROUP_PREFIX = f"{GROUP_PREFIX}backfill-"


def dead_letter_topic(target_topic: str) -> str:
    """The dead-letter topic kafkaops makes beside a migration's ``target_topic``."""
    return f"{target_topic}{DEAD_LETTER_SUFFIX}"


def own_topics(topics: Iterable[str]) -> set[str]:
    """The dead-letter topics among ``topics`` that sit beside the topic they serve."""
    names = set(topics)
    return {t for t in names if t.endswith(DEAD_LETTER_SUFFIX) and t[:-len(DEAD_LETTER_SUFFIX)] in names}


def is_own_group(group_id: str) -> bool:
    return group_id.startswith(GROUP_PREFIX)
