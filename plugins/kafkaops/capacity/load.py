"""The brokers' load over a review window as Prometheus saw it, and the rules a capacity review applies to it.

:func:`read_load` asks a Prometheus server (:mod:`kafkaops.platform.prometheus`) one range query per indicator
(:data:`QUERIES`: the JMX exporter's metrics, ``kafka_broker_jmx_exporter``) and keeps what it could not read,
with the reason, in :attr:`LoadWindow.skipped`. Everything else is pure and reads a :class:`LoadWindow`:

- :func:`load_findings`: one :class:`~kafkaops.capacity.review.Finding` per broker and rule that held, with the
  hours (UTC) when it did; each percentile is of the observed points only (a broker down for part of the window
  leaves a gap, never a zero);
- :func:`load_needs`: the brokers the CPU and the network need, each with its formula and inputs, for the
  broker-count recommendation (:func:`kafkaops.capacity.review.recommend_brokers` takes the largest need);
- a hot broker (one broker's load far above the others' while replica counts are even) is a finding of its own
  that points to a rebalance, not to more brokers.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kafkaops.capacity.findings import CapacityError, Finding

Point = tuple[float, float]
"""A sample: its Unix timestamp (seconds) and its value (as :data:`kafkaops.platform.prometheus.Point`)."""

log = logging.getLogger(__name__)

QUERIES: Mapping[str, str] = {
    "cpu": "max by (instance) (rate(process_cpu_seconds_total{{{sel}}}[{rate}]) / on (instance) "
           "java_lang_operatingsystem_availableprocessors{{{sel}}})",
    "host_cpu": '1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle"}}[{rate}]))',
    "host_bytes_in": "sum by (instance) (rate(node_network_receive_bytes_total{{{devices}}}[{rate}]))",
    "host_bytes_out": "sum by (instance) (rate(node_network_transmit_bytes_total{{{devices}}}[{rate}]))",
    "bytes_in": 'sum by (instance) (rate(kafka_server_brokertopicmetrics_bytesin_total{{topic=""{and_sel}}}[{rate}])) '
                '+ on (instance) sum by (instance) '
                '(rate(kafka_server_brokertopicmetrics_replicationbytesin_total{{topic=""{and_sel}}}[{rate}]))',
    "bytes_out": 'sum by (instance) (rate(kafka_server_brokertopicmetrics_bytesout_total{{topic=""{and_sel}}}[{rate}])) '
                 '+ on (instance) sum by (instance) '
                 '(rate(kafka_server_brokertopicmetrics_replicationbytesout_total{{topic=""{and_sel}}}[{rate}]))',
    "handler_idle": "max by (instance) (kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent{{{sel}}})",
    "produce_p99_ms": 'max by (instance) (kafka_network_requestmetrics_totaltimems{{request="Produce",'
                      'quantile="0.99"{and_sel}}})',
    "under_min_isr": "max by (instance) (kafka_server_replicamanager_underminisrpartitioncount{{{sel}}})",
}
"""The PromQL of each indicator, one series per exporter (``instance``: its host:port), each a template of
:func:`promql`. ``cpu`` is the broker JVM's CPU as a share of its host's processors (0..1), from the JMX
exporter's ``process_cpu_seconds_total``; ``host_cpu`` is the host's (node_exporter), which the CPU rule takes
instead where a host runs one broker; bytes are what a broker's network carries each way (clients' and
replication's) per second, and ``host_bytes_in`` / ``host_bytes_out`` what the host's network devices carry
(node_exporter; :data:`HOST_INDICATORS`), which the network rule takes instead where a host runs one broker. The
operator's selector narrows every query but the node_exporter's, whose series are matched to the brokers by host
(their devices: :func:`devices_matcher`)."""

#: The node_exporter's indicators: per host, not per broker; a broker alone on its host takes them instead of its own.
HOST_INDICATORS = ("host_cpu", "host_bytes_in", "host_bytes_out")

#: The network devices a host's network load leaves out unless the operator names the devices: loopback and the
#: virtual devices of containers and bridges (their bytes also cross a physical device, or never leave the host).
VIRTUAL_DEVICES = "lo|veth.*|docker.*|br-.*|virbr.*|cni.*|flannel.*|cali.*|vxlan.*|tun.*|tap.*"


def devices_matcher(devices: str = "") -> str:
    """The node_exporter ``device`` label matcher of a host's network load: the operator's regex (``devices``, e.g.
    ``eth0|bond0``), else every device but :data:`VIRTUAL_DEVICES`."""
    regex = devices.strip()
    escaped = (regex or VIRTUAL_DEVICES).replace("\\", "\\\\").replace('"', '\\"')
    return f'device=~"{escaped}"' if regex else f'device!~"{escaped}"'


#: The series that names each JMX exporter's Kafka node (the kafka_broker role's rules: ``node_id`` label).
NODES_QUERY = "max by (instance, node_id) (last_over_time(kafka_server_app_info_start_time_ms{{{sel}}}[{window}]))"


def promql(template: str, *, rate: str, selector: str = "", window: str = "1h", devices: str = "") -> str:
    """A query of :data:`QUERIES` with its rate window, the operator's label matchers (``selector``, e.g.
    ``job="kafka-prod"``: what tells this cluster's series from others' on a shared server) and the host network
    devices counted (``devices``: :func:`devices_matcher`'s regex) filled in."""
    selector = selector.strip().strip("{}").strip().strip(",")
    return template.format(rate=rate, sel=selector, and_sel=f",{selector}" if selector else "", window=window,
                           devices=devices_matcher(devices))


RULES: Mapping[str, tuple[str, ...]] = {
    "cpu": ("cpu",), "network": ("bytes_in", "bytes_out"), "request_handler_idle": ("handler_idle",),
    "produce_p99": ("produce_p99_ms",), "under_min_isr": ("under_min_isr",), "hot_broker": ("cpu", "bytes_in", "bytes_out"),
}
"""Each load rule and the indicators it reads: a rule whose indicators could not be read is skipped, by name."""


NETWORK_HINT = "MB/s, e.g. 1250 for 10 Gbit/s"
NO_NETWORK_CAPACITY = ("no network capacity stated: set the param network_capacity_mb_per_s (what one broker's network "
                       f"carries each way, {NETWORK_HINT}) for the network rule")


@dataclass(frozen=True)
class LoadThresholds:
    """The load rules' limits (the capacity review's params). ``network_capacity_bytes_per_s``: what one broker's
    network carries each way, as the operator states it; the network rule needs it."""

    max_cpu: float = 0.70
    max_network: float = 0.80
    min_handler_idle: float = 0.30
    max_produce_p99_ms: float = 100.0
    max_under_min_isr: float = 0.0
    hot_ratio: float = 2.0
    even_replicas: float = 0.10
    hot_floor: float = 0.5
    network_capacity_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_cpu", "max_network", "min_handler_idle"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise CapacityError(f"{name} is {value!r}; give a share in (0, 1], e.g. 0.7")
        if not self.max_produce_p99_ms > 0 or self.max_under_min_isr < 0 or not self.hot_ratio > 1:
            raise CapacityError(f"load thresholds out of range: max_produce_p99_ms {self.max_produce_p99_ms!r} (> 0), "
                                f"max_under_min_isr {self.max_under_min_isr!r} (>= 0), hot_ratio {self.hot_ratio!r} "
                                "(> 1)")

        value = self.network_capacity_bytes_per_s
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise CapacityError(f"the network capacity per broker is {value!r}: give what one broker's network carries "
                                f"each way in the param network_capacity_mb_per_s ({NETWORK_HINT}), or leave it empty")

    def network_capacity(self) -> float | None:
        """The stated per-broker network capacity (bytes/s); None: not stated, the network rule is skipped."""
        return None if self.network_capacity_bytes_per_s is None else float(self.network_capacity_bytes_per_s)


@dataclass(frozen=True)
class LoadWindow:
    """What Prometheus showed of each indicator over ``start``..``end`` (Unix seconds, every ``step_s``): per
    indicator, each broker's points (gaps left out). ``skipped``: the indicators it could not read, and why."""

    start: float
    end: float
    step_s: float
    indicators: Mapping[str, Mapping[str, tuple[Point, ...]]]
    skipped: Mapping[str, str] = field(default_factory=dict)
    cpu_source: Mapping[str, str] = field(default_factory=dict)
    """Per broker, where its ``cpu`` points come from (the host's node_exporter, or the broker's JVM)."""
    network_source: Mapping[str, str] = field(default_factory=dict)
    """Per broker, where its ``bytes_in`` / ``bytes_out`` points come from (its host's network devices from the
    node_exporter, or the broker's own byte rates from its JMX exporter)."""
    asked_start: float | None = None
    """The start the review asked for, when Prometheus' data began well after it (a new server or cluster): the
    window was then read again from its first data (``start``) at a finer step. None: ``start`` is the one asked."""

    def observed_span(self) -> tuple[float, float] | None:
        """The times of the earliest and the latest finite point of any indicator and broker; None: no point."""
        seen = [t for series in self.indicators.values() for points in series.values() for t, v in points
                if math.isfinite(v)]
        return (min(seen), max(seen)) if seen else None

    def first_observed(self) -> float | None:
        """The time of the earliest finite point of any indicator and broker; None: no point at all."""
        span = self.observed_span()
        return None if span is None else span[0]

    def brokers(self) -> tuple[str, ...]:
        return tuple(sorted({b for series in self.indicators.values() for b in series}))

    def observed(self, indicator: str, broker: str) -> tuple[float, ...]:
        """The finite values of one broker's indicator: what a percentile is taken of."""
        return tuple(v for _, v in self.indicators.get(indicator, {}).get(broker, ()) if math.isfinite(v))

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "step_s": self.step_s,
                "indicators": {k: {b: [list(p) for p in pts] for b, pts in v.items()} for k, v in self.indicators.items()},
                "skipped": dict(self.skipped), "cpu_source": dict(self.cpu_source),
                "network_source": dict(self.network_source), "asked_start": self.asked_start}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadWindow:
        try:
            return cls(float(data["start"]), float(data["end"]), float(data["step_s"]),
                       {k: {b: tuple((float(t), float(v)) for t, v in pts) for b, pts in v.items()}
                        for k, v in data["indicators"].items()}, dict(data.get("skipped") or {}),
                       dict(data.get("cpu_source") or {}), dict(data.get("network_source") or {}),
                       None if data.get("asked_start") is None else float(data["asked_start"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CapacityError(f"cannot read a load window from this dict: {err!r}; expected LoadWindow.to_dict()") from err


# -- the rules (pure) -----------------------------------------------------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; raises on none (a rule never invents a value)."""
    if not values:
        raise CapacityError("a percentile of no observed value was asked; the rule must be skipped instead")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def utc_minute(ts: float) -> str:
    """A Unix time as the load rules and plots show it: ``2026-11-29 14:05 UTC``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _crossing(limit: float, above: bool) -> Callable[[float], bool]:
    """Whether a value is past ``limit``: above it, or below it when ``above`` is False."""
    return (lambda v: v > limit) if above else (lambda v: v < limit)


def held_hours(points: Sequence[Point], crosses: Callable[[float], bool], step_s: float) -> tuple[tuple[float, float], ...]:
    """The stretches (first, last timestamp) of consecutive observed points for which ``crosses(value)`` holds;
    a gap in the points (more than 1.5 steps) ends a stretch."""
    stretches: list[tuple[float, float]] = []
    for t, v in points:
        if not (math.isfinite(v) and crosses(v)):
            continue
        if stretches and t - stretches[-1][1] <= 1.5 * step_s:
            stretches[-1] = (stretches[-1][0], t)
        else:
            stretches.append((t, t))
    return tuple(stretches)


def _when(stretches: Sequence[tuple[float, float]]) -> str:
    shown = [f"{utc_minute(a)[:-4]}-{utc_minute(b)[11:]}" if a != b else utc_minute(a) for a, b in stretches[:3]]
    more = f" and {len(stretches) - 3} more" if len(stretches) > 3 else ""
    return ", ".join(shown) + more


def _coverage(window: LoadWindow, points: Sequence[Point]) -> str:
    expected = max(1, int(round((window.end - window.start) / window.step_s)) + 1)
    seen = sum(1 for _, v in points if math.isfinite(v))
    return "" if seen >= expected else f"; observed {seen} of {expected} steps (the rest is a gap, not counted)"


def _network(window: LoadWindow, broker: str) -> tuple[Point, ...]:
    """Each step's larger of bytes in and out per second: what the busier direction of the network carries."""
    out = dict(window.indicators.get("bytes_out", {}).get(broker, ()))
    return tuple((t, max(v, out[t])) for t, v in window.indicators.get("bytes_in", {}).get(broker, ()) if t in out)


def load_findings(window: LoadWindow, thresholds: LoadThresholds = LoadThresholds(),
                  replicas: Mapping[str, int] | None = None) -> tuple[list[Finding], dict[str, str]]:
    """The load rules that held, per broker, and the rules skipped with why (their indicators unread, or no
    observed value). CPU and network: the p95 of the observed points above the limit; request handlers: the 5th
    percentile of their idle share below it; Produce p99: its p95 above the target; under-min-ISR partitions: any
    observed above the limit. ``replicas`` (per broker name) lets a hot broker be told from an undersized cluster."""
    skipped = {rule: "; ".join(window.skipped.get(i, f"{i} was not read") for i in needs
                               if i in window.skipped or i not in window.indicators)
               for rule, needs in RULES.items() if any(i in window.skipped or i not in window.indicators for i in needs)}
    findings: list[Finding] = []
    checks: tuple[tuple[str, str, float, float, bool, str, str], ...] = (
        ("cpu", "cpu", 0.95, thresholds.max_cpu, True, "{:.0%}", "CPU (the broker's share of its host's processors)"),
        ("request_handler_idle", "handler_idle", 0.05, thresholds.min_handler_idle, False, "{:.0%}",
         "request handlers idle (5th percentile)"),
        ("produce_p99", "produce_p99_ms", 0.95, thresholds.max_produce_p99_ms, True, "{:,.0f} ms",
         "Produce p99 latency (its p95)"),
        ("under_min_isr", "under_min_isr", 1.0, thresholds.max_under_min_isr, True, "{:,.0f}",
         "partitions under their min ISR (most)"),
    )
    for rule, indicator, q, limit, above, shown, what in checks:
        if rule in skipped:
            continue
        for broker in sorted(window.indicators.get(indicator, {})):
            points = window.indicators[indicator][broker]
            values = window.observed(indicator, broker)
            if not values:
                skipped[rule] = f"{what}: no observed value for {broker} in the window"
                continue
            value = percentile(values, q)
            if (value > limit) if above else (value < limit):
                held = held_hours(points, _crossing(limit, above), window.step_s)
                findings.append(Finding(rule, broker, round(value, 4), limit,
                                        f"{broker}: {what} {shown.format(value)} ({'>' if above else '<'} "
                                        f"{shown.format(limit)}), held {_when(held)}{_coverage(window, points)}"))
    capacity = thresholds.network_capacity()
    if "network" not in skipped and capacity is None:
        skipped["network"] = NO_NETWORK_CAPACITY
    if "network" not in skipped and capacity is not None:
        for broker in sorted(window.indicators.get("bytes_in", {})):
            points = _network(window, broker)
            values = tuple(v for _, v in points if math.isfinite(v))
            if not values:
                skipped["network"] = f"network: no observed value for {broker} in the window"
                continue
            use = percentile(values, 0.95) / capacity
            if use > thresholds.max_network:
                held = held_hours(points, _crossing(thresholds.max_network * capacity, True), window.step_s)
                findings.append(Finding("network", broker, round(use, 4), thresholds.max_network,
                                        f"{broker}: network {use:.0%} of its {capacity / 1e6:,.0f} MB/s (p95 of the busier "
                                        f"direction, > {thresholds.max_network:.0%}), held {_when(held)}"
                                        f"{_coverage(window, points)}"))
    if "hot_broker" not in skipped:
        findings += hot_brokers(window, thresholds, replicas)
    return findings, skipped


def hot_brokers(window: LoadWindow, thresholds: LoadThresholds, replicas: Mapping[str, int] | None) -> list[Finding]:
    """Brokers whose CPU or busier network direction (p95) is ``hot_ratio`` times the median of the others' while
    every broker's replica count is within ``even_replicas`` of the mean: the load follows leaders or a few busy
    partitions, and a rebalance evens it where more brokers would not. A broker is hot only when its load is also
    at least ``hot_floor`` of its limit (CPU: ``max_cpu``; network: ``max_network`` x the stated capacity, none
    without one): twice next to nothing is noise, not a broker that needs its load moved."""
    if not replicas or len(replicas) < 3:
        return []
    mean = sum(replicas.values()) / len(replicas)
    if mean <= 0 or max(abs(n - mean) for n in replicas.values()) > thresholds.even_replicas * mean:
        return []
    found = []
    capacity = thresholds.network_capacity()
    floors = {"CPU": thresholds.hot_floor * thresholds.max_cpu,
              "network": None if capacity is None else thresholds.hot_floor * thresholds.max_network * capacity}
    for name in ("CPU", "network"):
        floor = floors[name]
        if floor is None:
            continue
        loads = {b: percentile(v, 0.95) for b in window.brokers()
                 if (v := window.observed("cpu", b) if name == "CPU"
                     else tuple(x for _, x in _network(window, b) if math.isfinite(x)))}
        for broker, load in sorted(loads.items()):
            others = sorted(v for b, v in loads.items() if b != broker)
            if len(others) < 2:
                continue
            median = others[len(others) // 2] if len(others) % 2 else (others[len(others) // 2 - 1] + others[len(others) // 2]) / 2
            if median > 0 and load > thresholds.hot_ratio * median and load >= floor:
                found.append(Finding("hot_broker", broker, round(load / median, 2), thresholds.hot_ratio,
                                     f"{broker}: {name} load (p95) {load / median:.1f}x the other brokers' median while "
                                     f"replica counts are within {thresholds.even_replicas:.0%} of each other: the load "
                                     "follows leaders or busy partitions; rebalance (kafka_reassign, operation rebalance) "
                                     "rather than add brokers"))
    return found


def unobserved_findings(window: LoadWindow, brokers: Sequence[int]) -> list[Finding]:
    """One ``load_unobserved`` finding naming the cluster's ``brokers`` (ids) that have no point of any indicator
    in the window while others do: Prometheus does not scrape their exporters (a broker added since its scrape
    targets were written) or they have none. Their load is in no rule and no need. None when nothing was read
    (every rule is skipped then, with why) or every broker was seen."""
    seen = set(window.brokers())
    if not seen:
        return []
    missing = [b for b in sorted(brokers) if f"broker {b}" not in seen]
    if not missing:
        return []
    names = ", ".join(map(str, missing))
    subject = f"broker{'s' if len(missing) > 1 else ''} {names}"
    return [Finding("load_unobserved", subject, float(len(missing)), 0.0,
                    f"{subject}: no load series in Prometheus from {utc_minute(window.start)} to "
                    f"{utc_minute(window.end)} while {len(seen)} other broker(s) have them; add "
                    f"{'their exporters' if len(missing) > 1 else 'its exporter'} (the kafka_broker role's "
                    "kafka_broker_jmx_exporter, host:kafka_broker_jmx_exporter_port) to Prometheus' scrape targets. "
                    "Until then the load rules and the CPU and network needs count only the brokers seen")]


@dataclass(frozen=True)
class LoadNeeds:
    """The brokers the CPU and the network need at their limits, each with the formula's inputs (None: not
    measured)."""

    by_cpu: int | None
    by_network: int | None
    inputs: Mapping[str, Any]

    def text(self) -> str:
        parts = []
        if self.by_cpu is not None:
            parts.append(f"by CPU ceil({self.inputs['cpu_sum']:.4g} / {self.inputs['max_cpu']:g}) = {self.by_cpu}"
                         f"{self._partial('cpu_brokers_measured')}")
        if self.by_network is not None:
            parts.append(f"by network ceil({self.inputs['network_sum_bytes_per_s'] / 1e6:,.1f} MB/s / "
                         f"({self.inputs['max_network']:g} x {self.inputs['network_capacity_bytes_per_s'] / 1e6:,.0f} "
                         f"MB/s)) = {self.by_network}{self._partial('network_brokers_measured')}")
        return "; ".join(parts) or "no load measured"

    def _partial(self, measured_key: str) -> str:
        """`` (at least: 3 of 5 brokers measured)`` when some of the cluster's brokers had no points."""
        total, measured = self.inputs.get("brokers"), self.inputs.get(measured_key)
        if total is None or measured is None or measured >= total:
            return ""
        return f" (at least: {measured} of {total} brokers measured, the others' load unknown)"


def load_needs(window: LoadWindow, thresholds: LoadThresholds = LoadThresholds(), brokers: int | None = None
               ) -> LoadNeeds:
    """brokers by CPU = ceil(sum of each broker's CPU p95 / max_cpu); by network = ceil(sum of each broker's busier
    direction p95 / (max_network x capacity)). A broker without observed values adds nothing (it is not
    assumed idle: the inputs say how many were measured, of the cluster's ``brokers``, and the text says a need
    of fewer than all is a floor)."""
    cpu = [percentile(v, 0.95) for b in window.brokers() if (v := window.observed("cpu", b))]
    inputs: dict[str, Any] = {"max_cpu": thresholds.max_cpu, "cpu_brokers_measured": len(cpu),
                              "max_network": thresholds.max_network}
    if brokers is not None:
        inputs["brokers"] = brokers
    by_cpu = None
    if cpu and "cpu" not in window.skipped:
        inputs["cpu_sum"] = sum(cpu)
        by_cpu = max(1, math.ceil(sum(cpu) / thresholds.max_cpu))
    by_network = None
    net = [percentile(v, 0.95) for b in window.brokers()
           if (v := tuple(x for _, x in _network(window, b) if math.isfinite(x)))]
    capacity = thresholds.network_capacity()
    if net and capacity is not None and not {"bytes_in", "bytes_out"} & set(window.skipped):
        inputs.update(network_sum_bytes_per_s=sum(net), network_capacity_bytes_per_s=capacity,
                      network_brokers_measured=len(net))
        by_network = max(1, math.ceil(sum(net) / (thresholds.max_network * capacity)))
    return LoadNeeds(by_cpu, by_network, inputs)
