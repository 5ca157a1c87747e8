"""``make demo``: the main job, broker addition, on the local cluster, through the real DAGs.

The local cluster (playbooks/inventory/local.yml: three KRaft nodes on 19092/94/96) comes up with
the kafka_broker role and gets a skewed ``orders`` topic. Then Airflow runs ``kafka_scale_out``
(``airflow dags test``, i.e. ``dag.test()``, in a child process): preflight gate, broker 4
provisioned by the same role, registered, the plan, approval (``auto_approve``: nobody is there to
click), throttled batches, verification, throttles removed, preferred leaders, the post-move gate.
A traffic check (:mod:`kafkaops.testing.traffic`) produces and consumes keyed records throughout.
``kafka_reassign`` then drains broker 4 and stops it, so the next demo starts from the same three
brokers. Last, ``kafka_partition_increase`` migrates ``orders`` live to a new topic of 6 partitions by the
record key while an application writes and reads it (the demo plays the operator who stops the producers
and moves them), and the application's traffic check says what it lost, duplicated or reordered (nothing).
The runs' operation records stay in ``.cache/airflow`` (the home ``make airflow``
serves), on the run's "Operation record" tab.

The terminal tells the story from the run's audit events in the kafkaops store (and the batches'
progress, polled as the DAG's trigger polls it); Airflow's task logs, Ansible's and Kafka's
clients' go to the log file the demo names at its start and its end.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from kafkaops.cli import datagen
from kafkaops.errors import KafkaOpsError
from kafkaops.model import Cluster
from kafkaops.platform import provision, state
from kafkaops.platform.kafka import connection, metadata, topics
from kafkaops.testing import traffic
from kafkaops.platform import store as store_
from kafkaops.platform.partitioner import partition_for
from kafkaops.platform.paths import CACHE
from kafkaops.platform.render import (BROKER_COLUMNS, PARTITION_COLUMNS, broker_rows, cluster_headline, duration,
                                     human_bytes, partition_rows, render_snapshot, table)
from kafkaops.reassign import records as reassign_records
from kafkaops.reassign import steps
from kafkaops.reassign.engine import Progress
from kafkaops.rekey.records import LiveRecord
from kafkaops.resources import dags_folder

log = logging.getLogger(__name__)

TOPIC = "orders"
AIRFLOW_HOME = CACHE / "airflow"
LOG_FILE = CACHE / "demo" / "airflow.log"
#: Slow enough that each batch shows its progress, fast enough for a demo of about two minutes.
SCALE_OUT_THROTTLE_MB = 2.0


local_spec = provision.local_spec  # the local cluster as a spec (also make cluster-up's, in provision.LOCAL_SPEC)


def _log_to(path: Path) -> None:
    """This process' logging (kafkaops, ansible-runner, the Kafka clients) into ``path``, not the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")  # appends, as the Airflow children do
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _airflow_env(bootstrap: str, out: TextIO) -> dict[str, str]:
    """The environment of the Airflow child processes: the cache's home, the DAG files kafkaops ships
    (the plugin comes with the package, through its ``airflow.plugins`` entry point), and
    ``kafka_default`` at the local cluster, as ``make airflow`` has it. Migrates the metadata
    database, its output into ``out``."""
    os.environ.setdefault("AIRFLOW_HOME", str(AIRFLOW_HOME))
    os.environ.update({
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
        "GX_ANALYTICS_ENABLED": "false",
    })
    env = dict(os.environ)
    Path(os.environ["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    result = subprocess.run([_airflow(), "db", "migrate"], stdout=out, stderr=subprocess.STDOUT, env=env,
                            timeout=600)
    if result.returncode != 0:
        raise KafkaOpsError(f"airflow db migrate in {os.environ['AIRFLOW_HOME']} failed (exit {result.returncode}); "
                            f"its output is at the end of {out.name}")
    return env


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


class Story:
    """Prints one run's audit events as they arrive: the plan, the approval an operator would read,
    each batch with % and ETA, the gates with their numbers, the notes, the outcome. ``brief``
    keeps it to a few lines (the drain)."""

    def __init__(self, dag_id: str, since: float, conn_config: Mapping[str, str], *, brief: bool = False,
                 check: traffic.TrafficCheck | None = None, out: TextIO = sys.stdout) -> None:
        self.dag_id, self.since, self.conn_config, self.brief = dag_id, since, dict(conn_config), brief
        self.check, self.out = check, out
        self.run_id: str | None = None
        self.seen = 0
        self.plan: dict[str, Any] | None = None
        self.before: dict[str, Any] | None = None
        self.params: dict[str, Any] = {}
        self.kind = ""
        self.batch: dict[str, Any] | None = None
        self.tty = getattr(out, "isatty", lambda: False)()
        self._mark = -1
        self._width = 0  # of the progress line a terminal shows now

    @property
    def store(self) -> store_.Store:
        return store_.current()

    def say(self, text: str = "") -> None:
        if self._width and not text.startswith("\r"):  # a terminal's live progress line stays as it was
            self.out.write("\n")
            self._width = 0
        print(text, file=self.out, flush=True)

    def poll(self) -> None:
        """Print what happened since the last poll; follow the batch in flight."""
        if self.run_id is None:
            ours = [op for op in self.store.list_operations(self.dag_id, limit=5) if op["started_at"] >= self.since]
            if not ours:
                return
            self.run_id = ours[-1]["run_id"]
        events = self.store.events(self.dag_id, self.run_id)
        for event in events[self.seen:]:
            self.show(event.kind, dict(event.data), event.ts)
        self.seen = len(events)
        if self.batch is not None:
            self.follow_batch()

    def show(self, kind: str, d: dict[str, Any], ts: float) -> None:
        if kind == "started":
            self.params, self.kind = dict(d.get("params") or {}), str(d.get("operation"))
            self.say(f"run {d.get('run_id')} ({self.kind}) started")
        elif kind == "snapshot" and d.get("stage") == "before":
            self.before = d.get("cluster")
        elif kind == "gate":
            self.say(self.gate_line(d))
        elif kind == "plan":
            self.plan = d
            if not self.brief:  # brief: the approval line says it
                self.say(f"plan: {d.get('summary')}")
        elif kind == "approval":
            self.show_approval(d)
        elif kind == "throttle_set":
            self.say(f"throttle {d.get('rate', 0) / 1e6:g} MB/s on brokers {d.get('brokers')}, topics "
                     f"{', '.join(d.get('topics') or [])}")
        elif kind == "batch":
            self.finish_batch(ts)
            of = int(d["index"]) + int(d.get("remaining") or 0)
            self.batch = {**d, "of": of, "ts": ts}
            self._mark = -1
            if not self.brief:
                self.say(f"batch {d['index']}/{of}: {', '.join(f'{t}-{p}' for t, p in d.get('keys', []))}")
        elif kind == "throttle_removed":
            self.finish_batch(ts)
            left = d.get("left") or {}
            self.say(f"throttles removed from brokers {d.get('brokers')}" + (f"; LEFT: {left}" if left else ""))
        elif kind == "note":
            self.show_note(str(d.get("text", "")))
        elif kind == "step" and d.get("status") == "success" and "registered" in d:
            self.say(f"the controller registered brokers {d['registered']}")
        elif kind == "step" and d.get("status") == "failed":
            self.batch = None
            self.say(f"step {d.get('name')} FAILED: {d.get('error')}")
        elif kind == "outcome":
            self.finish_batch(ts)
            self.say(f"outcome: {d.get('outcome')}" + (f" ({d['reason']})" if d.get("reason") else ""))

    def show_note(self, text: str) -> None:
        if text.startswith("lock on cluster") and self.brief:
            return
        self.say(text)

    def gate_line(self, d: Mapping[str, Any]) -> str:
        stats = d.get("statistics") or {}
        line = (f"gate {d.get('gate')}: {'passed' if d.get('ok') else 'FAILED'}, "
                f"{stats.get('successful_expectations', '?')}/{stats.get('evaluated_expectations', '?')} expectations")
        facts = self.gate_facts(str(d.get("gate")))
        if facts:
            line += f"; {facts}"
        return "\n".join([line, *[f"  {f}" for f in d.get("failures") or []]])

    def gate_facts(self, gate: str) -> str:
        """The numbers a gate was about, from the snapshots and the plan it checked."""
        if gate == "preflight" and self.before:
            c = Cluster.from_dict(self.before)
            return (f"{len(c.online_broker_ids)}/{len(c.brokers)} brokers online, {len(c.under_replicated)} "
                    f"under-replicated, {len(c.offline_partitions)} offline partitions")
        if gate == "plan" and self.plan:
            return (f"{self.plan.get('moves')} partitions, {self.plan.get('replica_moves')} replica moves, "
                    f"{human_bytes(self.plan.get('bytes_to_move'))}")
        if gate == "post_move":
            after = (state.AuditLog(self.dag_id, self.run_id or "", store=self.store).summary().get("after")
                     if self.run_id else None)
            if after:
                c = Cluster.from_dict(after)
                return (f"replicas as planned, {len(c.under_replicated)} under-replicated, "
                        f"{len(c.offline_partitions)} offline partitions")
        return ""

    def show_approval(self, d: Mapping[str, Any]) -> None:
        by = f"{'approved' if d.get('approved') else 'REJECTED'} by {d.get('by')}"
        if self.plan is None:
            self.say(f"approval: {by}")
            return
        if self.brief:
            self.say(f"plan and approval: {self.plan.get('summary')} ({by})")
            return
        text = approval_text(self.plan, self.kind, self.params).strip("\n").splitlines()
        self.say("\n-- the approval an operator reads (Required actions in the UI) --")
        for line in text:
            if line.strip() != "```":
                self.say(f"  {line}" if line.strip() else "")
        self.say(f"-- {by} --\n")

    def follow_batch(self) -> None:
        """Poll the batch in flight as the DAG's trigger does; print % and ETA."""
        if self.plan is None or self.before is None or self.batch is None:
            return
        spec = steps.wait_spec(self.plan, self.batch.get("keys", []), self.before)
        try:
            polled = steps.progress_of(self.conn_config, spec, self.batch["ts"])
        except KafkaOpsError as err:
            log.info("progress poll failed: %s", err)
            return
        self.show_progress(polled.progress)

    def show_progress(self, status: Progress) -> None:
        """A batch's progress (``steps.progress_of``): on a terminal one line rewritten in place,
        else a line at each quarter; the batch's last line when it is done."""
        if self.batch is None:
            return
        self.batch["status"] = status
        mark = int(status.percent // 25)
        if self.tty and not status.done:
            line = self.progress_line(status)
            self.out.write("\r" + line.ljust(self._width))
            self.out.flush()
            self._width = len(line)
        elif mark != self._mark and not (status.done or self.brief or self.tty):
            self.say(self.progress_line(status))  # the last line is finish_batch's
        self._mark = mark
        if status.done:
            self.finish_batch()

    def progress_line(self, status: Progress) -> str:
        eta = status.eta_s
        line = (f"  batch {self.batch['index']}/{self.batch['of']}: {status.percent:5.1f}% "  # type: ignore[index]
                f"({human_bytes(status.bytes_done)} of {human_bytes(status.bytes_total)}, "
                f"{status.partitions_done}/{status.partitions_total} partitions)"
                + ("" if eta is None or status.done else f", ETA {duration(eta)}"))
        if self.check is not None:
            line += f"; traffic sent {self.check.sent:,}, received {len(self.check.received):,}"
        return line

    def finish_batch(self, ts: float | None = None) -> None:
        """The batch's last line: done (seen by a poll, or implied by the run's next event at ``ts``)."""
        if self.batch is None:
            return
        status = self.batch.get("status")
        if not isinstance(status, Progress) or not status.done:
            total = status.bytes_total if isinstance(status, Progress) else int(self.batch.get("bytes") or 0)
            count = int(self.batch["partitions"])
            status = Progress(count, count, 0, total, total)
        line = self.progress_line(status) + f", done in {duration((ts or time.time()) - self.batch['ts'])}"
        self.say(f"\r{line.ljust(self._width)}" if self.tty else line)
        self.batch, self._width = None, 0


def approval_text(plan_data: Mapping[str, Any], kind: str, params: Mapping[str, Any]) -> str:
    """The text the approval step shows an operator for this plan (the reassignment steps' own)."""
    return steps.approval_text(plan_data, steps.OperationParams.from_params(kind, params))


def _run_dag(dag_id: str, conf: Mapping[str, Any], *, env: Mapping[str, str], out: TextIO, story: Story
             ) -> dict[str, Any]:
    """``airflow dags test`` in a child process logging into ``out``, told by ``story`` meanwhile;
    the run's operation record."""
    out.write(f"\n===== airflow dags test {dag_id} {json.dumps(conf)}\n")
    out.flush()
    child = subprocess.Popen([_airflow(), "dags", "test", dag_id, "-c", json.dumps(conf)], stdout=out,
                             stderr=subprocess.STDOUT, env=dict(env))
    try:
        while child.poll() is None:
            story.poll()
            time.sleep(1.0)
        story.poll()
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(30)
    if story.run_id is None:
        raise KafkaOpsError(f"{dag_id} exited with {child.returncode} before its run reached the kafkaops store; "
                            f"see {out.name}")
    record = state.read_record(dag_id, story.run_id, folds=(reassign_records.fold_record,)) or {}
    record["exit_code"] = child.returncode
    return record


def _after(cluster: Cluster, *, partitions: bool = True) -> str:
    """The cluster after an operation, as short as the story needs: the topics' partitions (no
    internal ones) and the brokers' load."""
    shown = replace(cluster, partitions=tuple(p for p in cluster.partitions if not p.topic.startswith("__")),
                    groups=(), _index=None)
    out = [cluster_headline(shown), "", table(BROKER_COLUMNS, broker_rows(shown))]
    if partitions:
        out += ["", table(PARTITION_COLUMNS, partition_rows(shown))]
    return "\n".join(out)


def _fill(conn: connection.KafkaConnection, records: int) -> None:
    """The skewed ``orders`` topic, new: an earlier demo's ``orders`` (grown by its traffic) and the topics its
    migration made (``orders.v2``, its dead letters) are deleted first, so every demo tells the same story
    (``--records`` records, and the live migration's target is ``orders.v2`` each time)."""
    earlier = sorted(t for t in metadata.topic_names(conn) if t == TOPIC or t.startswith(f"{TOPIC}.v"))
    if earlier:
        topics.delete_topics(conn, earlier)  # the groups' offsets on them go with them
        deadline = time.monotonic() + 120
        while set(earlier) & metadata.topic_names(conn):
            if time.monotonic() > deadline:
                raise KafkaOpsError(f"an earlier demo's topics {', '.join(earlier)} are still there 120 s after "
                                    "their deletion; run make cluster-down, then the demo again")
            time.sleep(1.0)
        print(f"an earlier demo's topics deleted: {', '.join(earlier)}")
    if not topics.create_topic(conn, TOPIC, 3, 3):
        return
    result = datagen.produce(conn.config, TOPIC, datagen.DatagenSpec(
        records=records, keys=500, skew="hot", hot_share=0.4, record_bytes=300, seed=7))
    hot_key, hot_count = result.per_key_top[0]
    print(f"topic {TOPIC}: {result.records} records, {result.records_per_second:,.0f} records/s; hot key {hot_key} "
          f"takes {hot_count / result.records:.0%} and lands in {TOPIC}-{partition_for(hot_key.encode(), 3)} "
          "(murmur2, as Kafka's Java client places it)")


def _tell(spec: provision.ClusterSpec, spec_path: Path, records: int, out: TextIO) -> int:
    """The story: before, the scale-out under traffic, after, the traffic check, the drain."""
    config = {"bootstrap.servers": spec.bootstrap}
    with connection.connect(config) as conn:
        _fill(conn, records)
        print("\n== before\n" + render_snapshot(metadata.snapshot(conn)), flush=True)
    print(f"\npreparing Airflow in {os.environ.get('AIRFLOW_HOME', AIRFLOW_HOME)} (airflow db migrate) ...", flush=True)
    env = _airflow_env(spec.bootstrap, out)
    with traffic.TrafficCheck(config, TOPIC, keys=40, rate_per_s=200) as check:
        print(f"traffic check: a producer (acks=all, idempotent) sends 200 keyed records/s over 40 keys to {TOPIC}, "
              f"a consumer reads them in group {check.group_id}")
        print("\n== kafka_scale_out (airflow dags test): add one broker, move replicas onto it", flush=True)
        added = _run_dag("kafka_scale_out", {
            "dry_run": False, "approval": "auto_approve", "inventory": str(spec_path), "add_brokers": 1,
            "topics": [TOPIC], "throttle_mb_per_s": SCALE_OUT_THROTTLE_MB, "max_moves_per_broker": 1},
            env=env, out=out, story=Story("kafka_scale_out", time.time(), config, check=check))
    report = check.stop()
    if added.get("after"):
        print("\n== after the scale-out\n" + _after(Cluster.from_dict(added["after"])), flush=True)
    print(f"\n== traffic through the scale-out: {'OK' if report.ok else 'FAILED'}\n"
          f"records sent {report.sent:,}, received {report.received:,}, lost {report.lost}, duplicated "
          f"{report.duplicated}, out of order {report.out_of_order} (per key, over {report.keys} keys)"
          + (f"\n{report}" if not report.ok or report.redelivered else ""))
    if added.get("outcome") != "success":
        print(f"\nkafka_scale_out ended {added.get('outcome')} (its reason is above); the task logs are in {out.name}")
        return 1

    grown = provision.ClusterSpec.load(spec_path)
    new = [n.node_id for n in grown.nodes if n not in spec.nodes]
    print(f"\n== kafka_reassign: drain broker(s) {new} and stop them, back to three brokers", flush=True)
    drained = _run_dag("kafka_reassign", {
        "operation": "drain", "drain_brokers": new, "stop_drained": True, "dry_run": False,
        "approval": "auto_approve", "inventory": str(spec_path), "throttle_mb_per_s": 50},
        env=env, out=out, story=Story("kafka_reassign", time.time(), config, brief=True))
    if drained.get("outcome") == "success":  # stopped by the run: remove their folders, the spec forgets them
        provision.cluster_down(grown, limit=[grown.node(b).hostname for b in new], purge=True)
        spec.save(spec_path)
    with connection.connect(config) as conn:
        print("\n== after the drain\n" + _after(metadata.snapshot(conn, groups=False), partitions=False), flush=True)
    migrated = _live_migration(config, env, out)
    print(f"\nthe runs' operation records: `make airflow`, then the DAG run's \"Operation record\" tab "
          f"(AIRFLOW_HOME {os.environ['AIRFLOW_HOME']})")
    return 0 if drained.get("outcome") == "success" and report.ok and migrated else 1


#: The live partition increase of the demo: the record key, the tail copy until at most this many records
#: are left, then the demo (the operator) stops the producers when the record asks.
LIVE_MIGRATION = {"mode": "migrate", "new_partition_count": 6, "key_rule": "record_key", "dry_run": False,
                  "approval": "auto_approve", "quiesce": "manual", "catch_up_lag_records": 2000,
                  "catch_up_budget_s": 60, "quiet_s": 3, "quiesce_timeout_s": 300, "switch_timeout_s": 300}


def _live_migration(config: Mapping[str, str], env: Mapping[str, str], out: TextIO) -> bool:
    """``orders`` from 3 to 6 partitions by the record key while an application writes and reads it: the demo
    plays its operator (:class:`kafkaops.testing.rehearsal.StandInOperator`: stops the producers when the
    record asks, moves producers and consumers to the new topic at the switch), and the traffic check says
    what the application saw. True when the run succeeded and nothing was lost, duplicated or reordered."""
    from kafkaops.testing.rehearsal import StandInOperator

    dag_id = "kafka_partition_increase"
    print(f"\n== {dag_id} (airflow dags test): {TOPIC} from 3 to 6 partitions by the record key, live "
          "(quiesce=manual: the demo stops the producers when the record asks, then moves them)", flush=True)
    with traffic.MigrationTraffic(config, TOPIC, group=f"{TOPIC}.readers", keys=200, rate_per_s=200) as app:
        print(f"traffic check: producers (acks=all, idempotent) send 200 keyed records/s over 200 keys to {TOPIC}, "
              f"a consumer reads them in group {app.group}")
        with StandInOperator(app, dag_id) as operator:
            record = _run_dag(dag_id, {"topic": TOPIC, **LIVE_MIGRATION}, env=env, out=out,
                              story=Story(dag_id, time.time(), config, brief=True))
        report = app.finish()
    if operator.error is not None:
        print(f"the demo's operator failed: {operator.error}")
    said = [str(n.get("text", "")) for n in record.get("notes") or []]
    window = next((t for t in said if t.startswith("switch observed")), "no switch observed")
    live = LiveRecord.of(list(record.get("notes") or []))
    phases = live.window_phases() if live else ()
    print(f"\n== the live migration: {record.get('outcome')}\n"
          f"{window}\n"
          + "".join(f"  {duration(seconds):>12}  {name}\n" for name, seconds in phases) +
          f"the application's view (traffic check): {'OK' if report.ok else 'FAILED'}: sent {report.sent:,}, "
          f"lost {report.lost}, duplicated {report.duplicated}, out of order {report.out_of_order} (per key); "
          f"writes paused {duration(report.write_window_s)} between the last acknowledged write to {TOPIC} and "
          "the first to the new topic", flush=True)
    return record.get("outcome") == "success" and report.ok and operator.error is None


def _stop(spec: provision.ClusterSpec, spec_path: Path) -> None:
    """Stop the brokers a run added and left running (the spec the DAG grew), then the local cluster."""
    print("stopping the cluster (make cluster-up keeps one running) ...", flush=True)
    grown = provision.ClusterSpec.load(spec_path)
    added = [n.hostname for n in grown.nodes if n not in spec.nodes]
    if added:
        provision.cluster_down(grown, limit=added, purge=True)
    provision.cluster_down()


def run_demo(records: int = 100_000, keep_running: bool = False) -> int:
    _log_to(LOG_FILE)
    print(f"kafkaops demo: Airflow's task logs, Ansible's and the Kafka clients' go to {LOG_FILE}")
    print("bringing up the local 3-broker KRaft cluster with the kafka_broker Ansible role ...", flush=True)
    provision.cluster_up()
    spec = local_spec()
    spec_path = spec.save(CACHE / "demo" / "local-cluster.json")  # three nodes: the DAG grows this copy
    try:
        with open(LOG_FILE, "a", encoding="utf-8") as out:
            return _tell(spec, spec_path, records, out)
    finally:
        if not keep_running:
            _stop(spec, spec_path)
        print(f"Airflow's task logs and the rest: {LOG_FILE}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kafkaops demo``."""
    parser.add_argument("--records", type=int, default=100_000, metavar="N",
                        help="records of the skewed 'orders' topic (default 100000)")
    parser.add_argument("--keep-running", action="store_true", help="leave the local cluster up afterwards")


def run(args: argparse.Namespace) -> int:
    return run_demo(records=args.records, keep_running=args.keep_running)
