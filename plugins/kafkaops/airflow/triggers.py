"""Deferrable triggers: poll Kafka from the triggerer without holding a worker slot.
They live in plugins/ so the triggerer can import them (``kafkaops.airflow.triggers``).

A trigger's kwargs are stored in Airflow's database, so they carry the Kafka connection's id, never
its config: the triggerer reads the connection when the trigger runs (:func:`kafkaops.airflow.hooks.aget_config`)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class ReassignmentProgressTrigger(BaseTrigger):
    """Poll a reassignment until its partitions are done; log % done and ETA when they changed (at
    most one line per poll), else every ``log_every_s``.
    Fires a :class:`kafkaops.reassign.records.ProgressEvent` (its dict): done, or stalled when nothing
    progressed for ``stall_timeout_s``. ``spec``: a :class:`~kafkaops.reassign.records.WaitSpec`'s dict."""

    def __init__(self, kafka_conn_id: str, spec: Mapping[str, Any], started_at: float,
                 poll_interval_s: float = 2.0, stall_timeout_s: float = 120.0, log_every_s: float = 30.0) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id
        self.spec = dict(spec)
        self.started_at = started_at
        self.poll_interval_s = poll_interval_s
        self.stall_timeout_s = stall_timeout_s
        self.log_every_s = log_every_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("kafkaops.airflow.triggers.ReassignmentProgressTrigger",
                {"kafka_conn_id": self.kafka_conn_id, "spec": self.spec, "started_at": self.started_at,
                 "poll_interval_s": self.poll_interval_s, "stall_timeout_s": self.stall_timeout_s,
                 "log_every_s": self.log_every_s})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from kafkaops.airflow.hooks import aget_config
        from kafkaops.reassign.engine import ProgressLog, Receiver
        from kafkaops.reassign.records import ProgressEvent, WaitSpec
        from kafkaops.reassign.steps import progress_of

        config = await aget_config(self.kafka_conn_id)
        spec = WaitSpec.from_dict(self.spec)
        last_mark: tuple[int, int] | None = None
        last_change = time.monotonic()
        lines = ProgressLog(every_s=self.log_every_s)
        seen: dict[int, Receiver] = {}  # each receiving broker's last answer: a stall names its last free bytes
        while True:
            try:  # a poll that hangs counts as no answer: the stall timeout below still ends the wait
                status = await asyncio.wait_for(asyncio.to_thread(progress_of, config, spec, self.started_at),
                                                timeout=self.stall_timeout_s)
            except Exception as err:  # a broker or the bootstrap may be down for a while: keep polling
                self.log.warning("progress poll failed: %s", err)
                status = None
            if status is not None:
                status = status.remembering(seen)
                seen.update({r.broker: r for r in status.progress.receivers})
                if not status.done and lines.due(status.progress, time.monotonic()):  # done: the task logs it
                    self.log.info("reassignment %s", status.text)
                if status.done:
                    yield TriggerEvent(ProgressEvent("done", status).to_dict())
                    return
                mark = (status.progress.partitions_done, status.progress.bytes_done)
                if mark != last_mark:
                    last_mark, last_change = mark, time.monotonic()
            if time.monotonic() - last_change > self.stall_timeout_s:
                yield TriggerEvent(ProgressEvent("stalled", status, self.stall_timeout_s).to_dict())
                return
            await asyncio.sleep(self.poll_interval_s)
