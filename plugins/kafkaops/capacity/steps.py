"""The steps of a scheduled capacity review as plain functions (the DAG wires them; no Airflow here).

    snapshot -> history append -> [key skew (a Spark job)] -> review -> report
      -> [proposed kafka_scale_out run: approval=manual, dry_run=false]

Each step takes and returns JSON-safe values (they travel through XCom) and appends what it did to
the run's audit record (``kafkaops.platform.state``), the report's location included.
"""
from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkaops.platform.kafka import connection, metadata
from kafkaops.platform import params as form
from kafkaops.platform import spark
from kafkaops.platform import state
from kafkaops.platform import store
from kafkaops.capacity import review as capacity
from kafkaops.capacity import report as capacity_report
from kafkaops.capacity import skew
from kafkaops.errors import ConfigError
from kafkaops.model import Cluster
from kafkaops.platform.paths import safe_name
from kafkaops.capacity.history import ReviewHistory
from kafkaops.capacity.records import HistoryAppended, ReportNote, SkewResult
from kafkaops.platform.recommendations import Published, Recommended

log = logging.getLogger(__name__)

KIND = "capacity_review"
#: A finished review's closing "what to do now" (its record's page).
NEXT_STEPS = ("Read the capacity report (the button above): its findings name what is short and its "
              "recommendations what to run, with the DAG and its parameters. A review changes nothing in the "
              "cluster; a proposed kafka_scale_out run, if the notes name one, waits for a person's approval.")


# The review's params, in the form's order (the Spark connection's is the Airflow layer's); each one's default
# is here only.
TOPICS = form.Texts(name="topics", title="Topics", description="Topics to review; empty means all topics.")
TARGET_RECORDS = form.MaybeNumber(
    name="target_records_per_s", title="Target throughput (records/s)",
    description="Peak records/s each reviewed topic must sustain; with the per-consumer throughput it gives the "
                "recommended partition count. Empty: no partition recommendation.")
PER_CONSUMER = form.MaybeNumber(name="per_consumer_records_per_s", title="Per-consumer throughput (records/s)",
                                description="Records/s one consumer handles (from a load test).")
MAX_CONSUMERS = form.MaybeInteger(name="max_consumers", minimum=0, title="Max consumers",
                                  description="Consumers a group may run at most; empty: the largest group seen.")
PER_BROKER = form.MaybeNumber(name="per_broker_mb_per_s", title="Per-broker throughput (MB/s)",
                              description="What one broker sustains; empty: brokers from disk headroom only.")
DISK_PER_BROKER = form.MaybeNumber(name="disk_per_broker_gb", title="Disk per broker (GB)",
                                   description="Log-dir capacity of a broker; empty: the smallest reported by the "
                                               "brokers.")
KEY_SKEW = form.Flag(name="key_skew", title="Key skew (Spark)",
                     description="Sample a topic with Spark and measure key skew and what-if partition counts.")
SKEW_TOPIC = form.Text(name="skew_topic", title="Key-skew topic",
                       description="The topic sampled; empty: the only entry of topics.")
SAMPLE_RECORDS = form.Integer(name="sample_records", given=10_000, minimum=1, title="Sample size",
                              description="Latest records read for the key skew, spread over the partitions.")
CANDIDATE_KEY_FIELD = form.Text(name="candidate_key_field", title="Candidate key field",
                                description="A top-level JSON field of the value to try as the new key; empty: none.")
CANDIDATE_PARTITIONS = form.WholeNumbers(
    name="candidate_partitions", given=skew.DEFAULT_CANDIDATES, title="Candidate partition counts",
    description=f"What-if partition counts; empty: {', '.join(map(str, skew.DEFAULT_CANDIDATES))}.")
PROPOSE_SCALE_OUT = form.Flag(name="propose_scale_out", title="Propose a scale-out",
                              description="When the review calls for more brokers, create a kafka_scale_out run "
                                          "(approval=manual, dry_run=false) that waits for a person to approve.")
SCALE_OUT_INVENTORY = form.Text(name="scale_out_inventory", title="Scale-out inventory",
                                description="The inventory the proposed kafka_scale_out run provisions with; empty: "
                                            "its default.")


@dataclass(frozen=True)
class CapacityParams:
    """The review's params (the DAG's form; defaults: the specs above); validated before anything runs."""

    topics: tuple[str, ...] = TOPICS.default
    target_records_per_s: float | None = TARGET_RECORDS.default
    per_consumer_records_per_s: float | None = PER_CONSUMER.default
    max_consumers: int | None = MAX_CONSUMERS.default
    per_broker_mb_per_s: float | None = PER_BROKER.default
    disk_per_broker_gb: float | None = DISK_PER_BROKER.default
    key_skew: bool = KEY_SKEW.default
    skew_topic: str = SKEW_TOPIC.default
    sample_records: int = SAMPLE_RECORDS.default
    candidate_key_field: str = CANDIDATE_KEY_FIELD.default
    candidate_partitions: tuple[int, ...] = CANDIDATE_PARTITIONS.default
    propose_scale_out: bool = PROPOSE_SCALE_OUT.default
    scale_out_inventory: str = SCALE_OUT_INVENTORY.default
    kafka_conn_id: str = form.KAFKA_CONN_ID.default

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CapacityParams:
        """The params of a run, however sent: an empty field is its default (kafkaops.platform.params)."""
        try:
            result = cls(
                topics=TOPICS.read(params), target_records_per_s=TARGET_RECORDS.read(params),
                per_consumer_records_per_s=PER_CONSUMER.read(params), max_consumers=MAX_CONSUMERS.read(params),
                per_broker_mb_per_s=PER_BROKER.read(params), disk_per_broker_gb=DISK_PER_BROKER.read(params),
                key_skew=KEY_SKEW.read(params), skew_topic=SKEW_TOPIC.read(params),
                sample_records=SAMPLE_RECORDS.read(params), candidate_key_field=CANDIDATE_KEY_FIELD.read(params),
                candidate_partitions=CANDIDATE_PARTITIONS.read(params),
                propose_scale_out=PROPOSE_SCALE_OUT.read(params),
                scale_out_inventory=SCALE_OUT_INVENTORY.read(params), kafka_conn_id=form.KAFKA_CONN_ID.read(params))
        except ConfigError as err:
            raise ConfigError(f"bad capacity review parameters: {err}; see the DAG's params form") from err
        result.validate()
        return result

    def validate(self) -> None:
        problems = []
        if (self.target_records_per_s is None) != (self.per_consumer_records_per_s is None):
            problems.append("give target_records_per_s and per_consumer_records_per_s together (or neither)")
        if self.target_records_per_s is not None and self.target_records_per_s <= 0:
            problems.append(f"target_records_per_s is {self.target_records_per_s:g}; give the peak records/s the "
                            "topics must sustain (above 0), e.g. 2x today's")
        if self.per_consumer_records_per_s is not None and self.per_consumer_records_per_s <= 0:
            problems.append(f"per_consumer_records_per_s is {self.per_consumer_records_per_s:g}; give the records/s "
                            "one consumer handles (above 0)")
        for name in ("per_broker_mb_per_s", "disk_per_broker_gb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                problems.append(f"{name} is {value:g}; give a number above 0 or leave it empty")
        if self.sample_records < 1:
            problems.append(f"sample_records is {self.sample_records}; give 1 or more")
        if any(n < 1 for n in self.candidate_partitions):
            problems.append(f"candidate_partitions {list(self.candidate_partitions)} hold a count below 1")
        if self.key_skew and not (self.skew_topic or len(self.topics) == 1):
            problems.append("key_skew needs skew_topic (or exactly one entry in topics)")
        if problems:
            raise ConfigError("refusing the capacity review: " + "; ".join(problems))

    @property
    def kind(self) -> str:
        return KIND

    @property
    def dry_run(self) -> bool:
        """A review reads only; it still holds the cluster lock, so its numbers are not taken mid-move."""
        return False

    @property
    def skew_target(self) -> str:
        return self.skew_topic or (self.topics[0] if self.topics else "")

    def targets(self, cluster: Cluster) -> capacity.CapacityTargets:
        topics: tuple[capacity.TopicTarget, ...] = ()
        if self.target_records_per_s is not None and self.per_consumer_records_per_s is not None:
            names = self.topics or tuple(t for t in cluster.topics if not t.startswith("__"))
            topics = tuple(capacity.TopicTarget(t, self.target_records_per_s, self.per_consumer_records_per_s,
                                                self.max_consumers) for t in names)
        return capacity.CapacityTargets(
            topics=topics,
            per_broker_bytes_per_s=None if self.per_broker_mb_per_s is None else self.per_broker_mb_per_s * 1e6,
            disk_per_broker_bytes=None if self.disk_per_broker_gb is None else int(self.disk_per_broker_gb * 1e9))


def record(dag_id: str, run_id: str, **kwargs: Any) -> state.AuditLog:
    return state.AuditLog(dag_id, run_id, **kwargs)


def take_snapshot(conn_config: Mapping[str, str], params: CapacityParams, log_: state.AuditLog | None = None
                  ) -> dict[str, Any]:
    """A snapshot of the cluster (offsets, sizes, groups) as a dict. Raises before anything is stored."""
    with connection.connect(conn_config) as conn:
        cluster = metadata.snapshot(conn, topics=params.topics or None)
    if log_ is not None:
        log_.append("snapshot", stage="before", cluster=cluster.to_dict())
    return cluster.to_dict()


def append_history(cluster_data: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    cluster = Cluster.from_dict(cluster_data)
    history = ReviewHistory(cluster.cluster_id or "unknown")
    history.append(capacity.ReviewPoint.of(cluster, run_id=run_id))
    return HistoryAppended(history.cluster_id, len(history.points())).to_dict()


def run_key_skew(conn_config: Mapping[str, str], cluster_data: Mapping[str, Any], params: CapacityParams,
                 run_id: str, *, launcher: spark.Launcher, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Submit ``spark_apps/key_skew.py`` through ``launcher`` over a bounded sample of the topic; its
    result comes back through the kafkaops store (``capacity/<cluster>/<run>/key-skew/...``)."""
    cluster = Cluster.from_dict(cluster_data)
    topic = params.skew_target
    start, end = skew.sample_offsets(cluster, topic, params.sample_records)
    with tempfile.TemporaryDirectory(prefix="kafkaops-skew-") as tmp:  # the task's own scratch space
        log_file = Path(tmp) / f"{safe_name(topic)}.log"
        args = ["--topic", topic,
                "--partitions", str(len(cluster.partitions_of(topic))), "--start", json.dumps(start),
                "--end", json.dumps(end), "--candidates", ",".join(map(str, params.candidate_partitions))]
        if params.candidate_key_field:
            args += ["--candidate-field", params.candidate_key_field]
        exchange = spark.Exchange(store.current(), f"capacity/{safe_name(cluster.cluster_id or 'unknown')}/"
                                                   f"{safe_name(run_id)}/key-skew")
        result = spark.run_spark_app("key_skew", args, launcher=launcher, log_file=log_file, timeout_s=timeout_s,
                                     what=f"key skew of {topic}", on_timeout="lower sample_records",
                                     kafka_config=conn_config, exchange=exchange)
    return SkewResult.from_dict(result).to_dict()


def make_review(cluster_data: Mapping[str, Any], params: CapacityParams, skew_result: Mapping[str, Any] | None
                ) -> dict[str, Any]:
    """The review of the snapshot against the stored history (which already holds this point)."""
    cluster = Cluster.from_dict(cluster_data)
    history = ReviewHistory(cluster.cluster_id or "unknown").points()
    skew = _skew_of(skew_result)
    result = capacity.review(cluster, history, targets=params.targets(cluster),
                             skews=[skew.to_dict()] if skew else ())
    return result.to_dict()


def make_report(review_data: Mapping[str, Any], skew_result: Mapping[str, Any] | None, run_id: str,
                log_: state.AuditLog | None = None) -> dict[str, str]:
    review = capacity.Review.from_dict(review_data)
    skew = _skew_of(skew_result)
    paths = capacity_report.write_report(review, skew.to_dict() if skew else None, run_id=run_id)
    if log_ is not None:
        # the recommendations as values too, published for the steps that act on them (a partition increase's approval)
        published = Published(review.cluster_id, tuple(Recommended(r.kind, r.subject, r.value, r.message)
                                                       for r in review.recommendations))
        state.append_note(log_, ReportNote(
            f"capacity report: {paths.html_url}", paths.html_url, paths.to_dict(), review.verdict,
            tuple(f.message for f in review.findings), tuple(r.message for r in review.recommendations), published))
    return paths.to_dict()


def _skew_of(skew_result: Mapping[str, Any] | None) -> SkewResult | None:
    """The key-skew step's result read back (None: the step was skipped or gave nothing)."""
    return SkewResult.from_dict(skew_result) if skew_result else None


def scale_out_proposal(review_data: Mapping[str, Any], params: CapacityParams) -> dict[str, Any] | None:
    """The conf of a proposed ``kafka_scale_out`` run (a person approves it there), or None when the
    review does not call for more brokers."""
    rec = capacity.Review.from_dict(review_data).recommendation("brokers")
    add = int((rec.inputs.get("add") or 0)) if rec else 0
    if add <= 0:
        return None
    return {"kafka_conn_id": params.kafka_conn_id, "add_brokers": add, "inventory": params.scale_out_inventory,
            "topics": list(params.topics), "approval": "manual", "dry_run": False}
