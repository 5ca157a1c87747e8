"""The steps of a scheduled capacity review as plain functions (the DAG wires them; no Airflow here).

    snapshot -> history append -> [key skew (a Spark job)] -> review -> report
      -> [proposed kafka_scale_out run: approval=manual, dry_run=false]

Each step takes and returns JSON-safe values (they travel through XCom) and appends what it did to
the run's audit record (``kafkaops.platform.state``), the report's location included.
"""
from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kafkaops.platform.kafka import connection, metadata
from kafkaops.platform import params as form
from kafkaops.platform import spark
from kafkaops.platform import state
from kafkaops.platform import store
from kafkaops.capacity import review as capacity
from kafkaops.capacity import report as capacity_report
from kafkaops.capacity import skew
from kafkaops.capacity.load import (HOST_INDICATORS, NODES_QUERY, QUERIES, LoadThresholds, LoadWindow, Point, promql,
                                   utc_minute)
from kafkaops.platform.prometheus import PrometheusClient, PrometheusError, PrometheusUnreachable, public_url
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
PROMETHEUS_CONN_ID = form.Text(
    name="prometheus_conn_id", given="prometheus_default", title="Prometheus connection",
    description="The Airflow connection (HTTP: host, port, schema; login and password for basic auth) of the "
                "Prometheus server that scrapes the brokers' JMX exporters. Missing: no load rules, each named as "
                "skipped.")
PROMETHEUS_URL = form.Text(name="prometheus_url", title="Prometheus URL",
                           description="The server's base URL, e.g. http://prometheus:9090, instead of the "
                                       "connection; no credentials in it (put those in the connection).")
PROMETHEUS_SELECTOR = form.Text(
    name="prometheus_selector", title="Prometheus label matchers",
    description='Label matchers that pick this cluster\'s series on a shared server, e.g. job="kafka-prod"; empty: '
                "all the server's Kafka exporters (their node ids are matched to this cluster's brokers).")
HOST_NETWORK_DEVICES = form.Text(
    name="host_network_devices", title="Host network devices (regex)",
    description="Where a broker is alone on its host and a node_exporter there is scraped, its network load is the "
                "host's: the devices whose name matches this regex, e.g. eth0|bond0; empty: every device but loopback "
                "and containers' and bridges' virtual ones.")
LOAD_WINDOW_HOURS = form.Number(name="load_window_hours", given=24, above=0, title="Load window (hours)",
                                description="The hours of load up to the review that the load rules read.")
MAX_CPU = form.Number(name="max_cpu_percent", given=70, above=0, title="CPU limit (%)",
                      description="A broker's CPU (p95 over the window) above this fires the cpu rule; the CPU need "
                                  "counts brokers at this use.")
MAX_NETWORK = form.Number(name="max_network_percent", given=80, above=0, title="Network limit (% of capacity)",
                          description="A broker's busier network direction (p95) above this share of its stated "
                                      "capacity fires the network rule.")
NETWORK_CAPACITY = form.MaybeNumber(
    name="network_capacity_mb_per_s", above=0, title="Network capacity per broker (MB/s)",
    description="What one broker's network carries each way, e.g. 1250 for 10 Gbit/s; empty: the network rule "
                "is skipped (named in the report).")
MIN_HANDLER_IDLE = form.Number(name="min_handler_idle_percent", given=30, above=0,
                               title="Request handlers idle, at least (%)",
                               description="Request handlers idle below this (5th percentile) fires "
                                           "request_handler_idle: the broker cannot keep up.")
MAX_PRODUCE_P99 = form.Number(name="max_produce_p99_ms", given=100, above=0, title="Produce p99 target (ms)",
                              description="The brokers' Produce p99 total time (its p95 over the window) above this "
                                          "fires produce_p99.")
SCALE_OUT_INVENTORY = form.Text(name="scale_out_inventory", title="Scale-out inventory",
                                description="The inventory the proposed kafka_scale_out run provisions with; empty: "
                                            "its default.")


#: The longest load window a review reads (hours).
MAX_LOAD_WINDOW_HOURS = 24 * 31


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
    prometheus_conn_id: str = PROMETHEUS_CONN_ID.default
    prometheus_url: str = PROMETHEUS_URL.default
    prometheus_selector: str = PROMETHEUS_SELECTOR.default
    host_network_devices: str = HOST_NETWORK_DEVICES.default
    load_window_hours: float = LOAD_WINDOW_HOURS.default
    max_cpu_percent: float = MAX_CPU.default
    max_network_percent: float = MAX_NETWORK.default
    network_capacity_mb_per_s: float | None = NETWORK_CAPACITY.default
    min_handler_idle_percent: float = MIN_HANDLER_IDLE.default
    max_produce_p99_ms: float = MAX_PRODUCE_P99.default
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
                scale_out_inventory=SCALE_OUT_INVENTORY.read(params),
                prometheus_conn_id=PROMETHEUS_CONN_ID.read(params), prometheus_url=PROMETHEUS_URL.read(params),
                prometheus_selector=PROMETHEUS_SELECTOR.read(params),
                host_network_devices=HOST_NETWORK_DEVICES.read(params), load_window_hours=LOAD_WINDOW_HOURS.read(params),
                max_cpu_percent=MAX_CPU.read(params), max_network_percent=MAX_NETWORK.read(params),
                network_capacity_mb_per_s=NETWORK_CAPACITY.read(params),
                min_handler_idle_percent=MIN_HANDLER_IDLE.read(params), max_produce_p99_ms=MAX_PRODUCE_P99.read(params),
                kafka_conn_id=form.KAFKA_CONN_ID.read(params))
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
        for name in ("max_cpu_percent", "max_network_percent", "min_handler_idle_percent"):
            value = getattr(self, name)
            if not 0 < value <= 100:
                problems.append(f"{name} is {value:g}; give a percentage above 0 and at most 100")
        for name in ("max_produce_p99_ms", "load_window_hours"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} is {getattr(self, name):g}; give a number above 0")
        if self.load_window_hours > MAX_LOAD_WINDOW_HOURS:
            problems.append(f"load_window_hours is {self.load_window_hours:g}; give at most {MAX_LOAD_WINDOW_HOURS} "
                            "(31 days: the longest a range query keeps to its 240 points at a useful step)")
        if self.network_capacity_mb_per_s is not None and not self.network_capacity_mb_per_s > 0:
            problems.append(f"network_capacity_mb_per_s is {self.network_capacity_mb_per_s:g}; give what one "
                            "broker's network carries each way in MB/s (e.g. 1250 for 10 Gbit/s), or leave it empty")
        if self.prometheus_url:
            if not self.prometheus_url.startswith(("http://", "https://")):
                problems.append(f"prometheus_url {public_url(self.prometheus_url)!r} is not an http(s) URL; give "
                                "the server's base URL, e.g. http://prometheus:9090")
            elif urlsplit(self.prometheus_url).username or urlsplit(self.prometheus_url).password:
                problems.append("prometheus_url carries credentials, which a run's params would show; put them in "
                                "the Airflow connection named by prometheus_conn_id and leave prometheus_url empty")
        if self.host_network_devices:
            try:
                re.compile(self.host_network_devices)
            except re.error as err:
                problems.append(f"host_network_devices {self.host_network_devices!r} is not a regex ({err}); give the "
                                "devices' names as a regex, e.g. eth0|bond0, or leave it empty")
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

    def load_thresholds(self) -> LoadThresholds:
        return LoadThresholds(
            max_cpu=self.max_cpu_percent / 100, max_network=self.max_network_percent / 100,
            min_handler_idle=self.min_handler_idle_percent / 100, max_produce_p99_ms=self.max_produce_p99_ms,
            network_capacity_bytes_per_s=(None if self.network_capacity_mb_per_s is None
                                          else self.network_capacity_mb_per_s * 1e6))

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


def make_review(cluster_data: Mapping[str, Any], params: CapacityParams, skew_result: Mapping[str, Any] | None,
                load_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The review of the snapshot against the stored history (which already holds this point) and the brokers'
    load (:func:`take_load`'s window; None: no load section)."""
    cluster = Cluster.from_dict(cluster_data)
    history = ReviewHistory(cluster.cluster_id or "unknown").points()
    skew = _skew_of(skew_result)
    result = capacity.review(cluster, history, targets=params.targets(cluster),
                             skews=[skew.to_dict()] if skew else (),
                             load=LoadWindow.from_dict(load_data) if load_data else None,
                             load_thresholds=params.load_thresholds())
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
            tuple(f.message for f in review.findings), tuple(r.message for r in review.recommendations), published,
            load_caption=capacity_report.load_caption(review)))
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


# -- the brokers' load, from Prometheus -------------------------------------------------------------------------

def load_step_s(hours: float) -> float:
    """The range queries' step for a window of ``hours``: about 240 points, at least 15 s, a whole second."""
    return float(max(15, math.ceil(hours * 3600 / 240)))


def _nodes(client: PrometheusClient, selector: str, start: float, end: float) -> dict[str, str]:
    """Each JMX exporter's ``instance`` -> ``broker N`` (its Kafka node id, from the role's rules)."""
    window = f"{max(60, int(end - start))}s"
    found = client.query(promql(NODES_QUERY, rate="60s", selector=selector, window=window), at=end)
    return {s.labels["instance"]: f"broker {s.labels['node_id']}" for s in found
            if s.labels.get("instance") and s.labels.get("node_id", "").isdigit()}


def _host(instance: str) -> str:
    return instance.rsplit(":", 1)[0] if ":" in instance else instance


def read_load(client: PrometheusClient, *, start: float, end: float, step_s: float, selector: str = "",
              brokers: set[int] | None = None, rate_s: float | None = None, devices: str = "") -> LoadWindow:
    """Each indicator of :data:`~kafkaops.capacity.load.QUERIES` over the window, per broker (``broker N``, named by
    the exporter's ``node_id``; ``brokers``: the cluster's ids, others' series left out). An indicator whose query
    fails or matches nothing is skipped with the reason; an unreachable server skips them all at once. The window
    is never padded with zeros. A broker alone on its host takes its CPU and its network from the host's
    node_exporter when one is scraped (the network: the host's devices matched by ``devices``, see
    :func:`~kafkaops.capacity.load.devices_matcher`), else from its JVM and its own byte rates
    (:attr:`LoadWindow.cpu_source`, :attr:`LoadWindow.network_source`). ``rate_s``: the window of each ``rate()``,
    by default two steps and at least 30 s (two scrapes at Prometheus' default 15 s interval)."""
    rate = f"{int(rate_s if rate_s is not None else max(step_s * 2, 30))}s"
    found: dict[str, dict[str, tuple[Point, ...]]] = {}
    skipped: dict[str, str] = {}
    names: dict[str, str] = {}
    try:
        names = _nodes(client, selector, start, end)
    except PrometheusUnreachable as err:
        reason = f"Prometheus {client.public_url} did not answer: {err}"
        return LoadWindow(start, end, step_s, {}, {name: reason for name in QUERIES if name not in HOST_INDICATORS})
    except PrometheusError as err:
        log.warning("the brokers' node ids could not be read from %s: %s", client.public_url, err)
    if not names:
        log.warning("no kafka_server_app_info_start_time_ms series on %s: the load is shown per exporter address",
                    client.public_url)
    hosts: dict[str, dict[str, tuple[Point, ...]]] = {}
    for name, template in QUERIES.items():
        query = promql(template, rate=rate, selector=selector, devices=devices)
        try:
            result = client.query_range(query, start=start, end=end, step_s=step_s)
        except PrometheusError as err:
            if name not in HOST_INDICATORS:
                skipped[name] = f"Prometheus {client.public_url} did not answer {query!r}: {err}"
            continue
        series = {s.labels.get("instance", "?"): s.points for s in result.series}
        if name in HOST_INDICATORS:
            hosts[name] = {_host(i): pts for i, pts in series.items()}
            continue
        named = {names.get(i, i): pts for i, pts in series.items()}
        if brokers is not None and names:
            named = {b: pts for b, pts in named.items() if b in {f"broker {n}" for n in brokers}}
        if not named:
            skipped[name] = (f"no series for {query!r} on {client.public_url} from {utc_minute(start)} to {utc_minute(end)}: is "
                             "the JMX exporter on (kafka_broker_jmx_exporter) and scraped"
                             + (f", and does the selector {selector!r} match it?" if selector else "?"))
            continue
        found[name] = named
    cpu_source, network_source = _host_load(found, skipped, hosts, names)
    log.info("load window %s..%s: %d of %d indicators read", utc_minute(start), utc_minute(end), len(found),
             len(QUERIES) - len(HOST_INDICATORS))
    return LoadWindow(start, end, step_s, found, skipped, cpu_source, network_source)


def _host_load(found: dict[str, dict[str, tuple[Point, ...]]], skipped: dict[str, str],
               hosts: Mapping[str, Mapping[str, tuple[Point, ...]]], names: Mapping[str, str]
               ) -> tuple[dict[str, str], dict[str, str]]:
    """Puts the host's CPU and network (node_exporter, ``hosts``: indicator -> host -> points) in ``found`` for each
    broker alone on its host (an indicator read that way is no longer skipped), and returns where each broker's CPU
    and network came from."""
    by_host: dict[str, list[str]] = {}
    for instance, broker in names.items():
        by_host.setdefault(_host(instance), []).append(broker)
    cpu_source: dict[str, str] = {}
    network_source: dict[str, str] = {}
    host_network = ("host_bytes_in", "bytes_in"), ("host_bytes_out", "bytes_out")
    for instance, broker in names.items():
        if not any(broker in found.get(i, {}) for i in ("cpu", "bytes_in", "bytes_out")):
            continue  # an exporter of the server that is not this cluster's
        host = _host(instance)
        sharing = len(by_host.get(host, ()))
        shared = "" if sharing == 1 else f" ({sharing} brokers share host {host})"
        if sharing == 1 and host in hosts.get("host_cpu", {}):
            found.setdefault("cpu", {})[broker] = hosts["host_cpu"][host]
            cpu_source[broker] = f"host {host} (node_exporter)"
        elif broker in found.get("cpu", {}):
            cpu_source[broker] = "the broker's JVM" + shared
        if sharing == 1 and all(host in hosts.get(h, {}) for h, _ in host_network):
            for h, indicator in host_network:
                found.setdefault(indicator, {})[broker] = hosts[h][host]
            network_source[broker] = f"host {host}'s network devices (node_exporter)"
        elif broker in found.get("bytes_in", {}):
            network_source[broker] = "the broker's bytes, clients' and replication's (JMX exporter)" + shared
    for indicator in ("cpu", "bytes_in", "bytes_out"):
        if found.get(indicator):
            skipped.pop(indicator, None)
    return cpu_source, network_source


def no_prometheus(reason: str, *, start: float, end: float, step_s: float) -> LoadWindow:
    """The load window of a review without Prometheus: every indicator skipped, with ``reason``."""
    return LoadWindow(start, end, step_s, {}, {name: reason for name in QUERIES if name not in HOST_INDICATORS})


def take_load(prometheus_url: str | None, cluster_data: Mapping[str, Any], params: CapacityParams, *,
              why_none: str = "", now: float | None = None, timeout_s: float = 30.0, step_s: float | None = None,
              rate_s: float | None = None) -> dict[str, Any]:
    """The brokers' load over the review window (``load_window_hours`` up to now) as a
    :class:`~kafkaops.capacity.load.LoadWindow` dict. ``prometheus_url`` None: no Prometheus, every load rule
    skipped with ``why_none``. Raises nothing for an unreachable server: the review goes on without the load.
    ``step_s`` and ``rate_s`` (default: :func:`load_step_s`, :func:`read_load`'s) are for windows of seconds."""
    end = time.time() if now is None else now
    start = end - params.load_window_hours * 3600
    step = step_s or load_step_s(params.load_window_hours)
    if not prometheus_url:
        return no_prometheus(why_none or "no Prometheus: set prometheus_url or the Airflow connection named by "
                                         "prometheus_conn_id", start=start, end=end, step_s=step).to_dict()
    cluster = Cluster.from_dict(cluster_data)
    brokers = {b.id for b in cluster.brokers}
    with PrometheusClient(prometheus_url, timeout_s=timeout_s) as client:
        window = read_load(client, start=start, end=end, step_s=step, selector=params.prometheus_selector,
                           brokers=brokers, rate_s=rate_s, devices=params.host_network_devices)
        first = window.first_observed()
        if step_s is None and first is not None and first - start > 2 * step:
            # a server (or cluster) younger than the window: its data read again, from where it begins, at a step
            # that gives it about as many points as a whole window would have
            since = max(start, first - step)
            finer = load_step_s((end - since) / 3600)
            if finer < step:
                log.info("Prometheus has data from %s only: the load is read again from there every %g s",
                         utc_minute(first), finer)
                again = read_load(client, start=since, end=end, step_s=finer, selector=params.prometheus_selector,
                                  brokers=brokers, rate_s=rate_s, devices=params.host_network_devices)
                # the window starts at the data: the minutes before it are no broker's gap
                window = replace(again, start=again.first_observed() or since, asked_start=start)
    log.info("load of %d broker(s) from %s over %.1f h: %d indicator(s) skipped", len(window.brokers()),
             public_url(prometheus_url), params.load_window_hours, len(window.skipped))
    return window.to_dict()
