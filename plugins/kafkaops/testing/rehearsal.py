"""A rehearsal of a live migration: :class:`kafkaops.testing.traffic.MigrationTraffic` plays the
applications (keyed producers and a consumer group), and :class:`StandInOperator` plays the person at the
switch (a human operator, not an Airflow operator). It follows the run's record in the kafkaops store,
as an operator reads it in the UI, and does what the record asks:

* a note with ``action="stop_producers"`` (the quiesce): stop producing to the source, let the
  consumer read to the source's end, stop it (its group is then empty);
* a note with ``action="switch"``: producers to the target, the consumer group on the target from
  the offsets kafkaops committed there.

With ``quiesce=acl`` kafkaops stops the writes itself: a StandInOperator made with
``stop_producers=False`` leaves the producers running (their sends to the source are refused with
TOPIC_AUTHORIZATION_FAILED, unacknowledged) and only drains and stops the consumer when asked.
Used by tests/dags/test_live_migration_dag.py and benchmarks/bench_live_migration.py.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Self

from kafkaops.platform import state
from kafkaops.platform import store as store_
from kafkaops.rekey.records import Action, ActionNote
from kafkaops.testing.traffic import MigrationTraffic

log = logging.getLogger(__name__)


class RecordFollower:
    """A thread that follows the newest run of ``dag_id`` started after it (or the run ``run_id``), as an
    operator reads its record, and hands each ``ActionNote`` in it to :meth:`act` (subclasses say what they
    do). :attr:`done` lists what was done, with the monotonic time; :attr:`error` holds what went wrong (the
    test or bench raises it)."""

    def __init__(self, dag_id: str, *, store: store_.Store | None = None, poll_s: float = 0.2,
                 run_id: str | None = None) -> None:
        self.dag_id, self.poll_s, self.run_id = dag_id, poll_s, run_id
        self.store = store or store_.current()
        self.done: list[tuple[str, float]] = []
        self.error: BaseException | None = None
        self._since = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="kafkaops-rehearsal-operator", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def did(self, what: str) -> bool:
        return any(a == what for a, _ in self.done)

    def _run_id(self) -> str | None:
        for op in self.store.list_operations(self.dag_id, limit=5):
            if (op.get("started_at") or 0) >= self._since - 1:
                return op["run_id"]
        return None

    def _follow(self) -> None:
        run_id, seen = self.run_id, 0
        try:
            while not self._stop.wait(self.poll_s):
                run_id = run_id or self._run_id()
                if run_id is None:
                    continue
                events = self.store.events(self.dag_id, run_id)
                for e in events[seen:]:
                    asked = state.read_notes([e.data], ActionNote)
                    if asked:
                        self.act(asked[0])
                seen = len(events)
        except BaseException as err:  # reported to the caller, who raises it
            log.exception("rehearsal operator failed")
            self.error = err

    def act(self, note: ActionNote) -> None:
        """Do what ``note`` asks for (nothing here)."""


class StandInOperator(RecordFollower):
    """:class:`RecordFollower` playing the person of a topic's live migration (the module docstring)."""

    def __init__(self, traffic: MigrationTraffic, dag_id: str, *, store: store_.Store | None = None,
                 poll_s: float = 0.2, on_switch: Callable[[str], None] | None = None,
                 stop_producers: bool = True) -> None:
        super().__init__(dag_id, store=store, poll_s=poll_s)
        self.traffic = traffic
        self.stop_producers = stop_producers
        self.on_switch = on_switch

    @property
    def switched(self) -> bool:
        """Whether the applications run on the target (the switch the record asked for is done)."""
        return self.did("switched")

    def act(self, note: ActionNote) -> None:
        action = note.action
        if action is Action.STOP_PRODUCERS and not any(a == "stopped" for a, _ in self.done):
            stop = self.stop_producers and self.traffic.writing_to == self.traffic.source  # not stopped before
            log.info("operator: %sdraining the consumer of %s", "stopping producers and " if stop else "",
                     self.traffic.source)
            if stop:
                self.traffic.stop_producing()
            self.traffic.drain_and_stop_consumer()
            self.done.append(("stopped", time.monotonic()))
        elif action is Action.SWITCH and not self.switched:
            switch = note.switch
            if switch is None:
                raise RuntimeError(f"the switch asked for in {self.dag_id} names no target topic: {note.text}")
            target = switch.target_topic
            log.info("operator: switching producers and consumers to %s", target)
            if self.traffic.writing_to is not None:  # refused by the ACL until now: stop them to move them
                self.traffic.stop_producing()
            self.traffic.switch_producers(target)
            self.traffic.switch_consumer(target)
            self.done.append(("switched", time.monotonic()))
            if self.on_switch:
                self.on_switch(target)
