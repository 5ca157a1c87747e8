"""The capacity review's load rules on windows built here (pure logic: what Prometheus would have answered)."""
from __future__ import annotations

import math

import pytest

from kafkaops.capacity.load import LoadThresholds, LoadWindow, held_hours, load_findings, load_needs, percentile
from kafkaops.capacity.review import CapacityError

START = 1_764_403_200.0  # 2025-11-29 08:00 UTC
STEP = 60.0
MB = 1_000_000


def _flat(value: float, steps: int = 60, *, skip: range = range(0)) -> tuple[tuple[float, float], ...]:
    return tuple((START + k * STEP, value) for k in range(steps) if k not in skip)


def _window(cpu=None, bytes_in=None, bytes_out=None, idle=None, p99=None, under=None, skipped=None) -> LoadWindow:
    indicators = {name: series for name, series in (("cpu", cpu), ("bytes_in", bytes_in), ("bytes_out", bytes_out),
                                                    ("handler_idle", idle), ("produce_p99_ms", p99),
                                                    ("under_min_isr", under)) if series is not None}
    return LoadWindow(START, START + 59 * STEP, STEP, indicators, skipped or {})


def _quiet(brokers=("broker 1", "broker 2", "broker 3")) -> dict:
    return dict(cpu={b: _flat(0.3) for b in brokers}, bytes_in={b: _flat(10 * MB) for b in brokers},
                bytes_out={b: _flat(20 * MB) for b in brokers}, idle={b: _flat(0.8) for b in brokers},
                p99={b: _flat(20) for b in brokers}, under={b: _flat(0) for b in brokers})


CAPACITY = LoadThresholds(network_capacity_bytes_per_s=125 * MB)


def test_a_quiet_cluster_fires_no_rule_and_skips_none():
    findings, skipped = load_findings(_window(**_quiet()), CAPACITY, {"broker 1": 100, "broker 2": 100, "broker 3": 100})
    assert findings == [] and skipped == {}


def test_cpu_above_its_limit_fires_for_that_broker_naming_the_hours_and_another_rule_does_not():
    load = _quiet()
    busy = tuple((t, 0.9 if 10 <= k < 40 else 0.3) for k, (t, _) in enumerate(_flat(0)))
    load["cpu"] = {**load["cpu"], "broker 2": busy}
    findings, _ = load_findings(_window(**load), CAPACITY)
    assert [(f.rule, f.subject) for f in findings] == [("cpu", "broker 2")]
    (cpu,) = findings
    assert cpu.value == 0.9 and cpu.threshold == 0.7
    assert "held 2025-11-29 08:10-08:39 UTC" in cpu.message, cpu.message


def test_a_gap_is_not_counted_and_is_said():
    load = _quiet()
    load["cpu"] = {**load["cpu"], "broker 3": _flat(0.95, skip=range(20, 60))}  # down after 20 minutes
    findings, _ = load_findings(_window(**load), CAPACITY)
    (cpu,) = [f for f in findings if f.rule == "cpu"]
    assert "observed 20 of 60 steps (the rest is a gap, not counted)" in cpu.message
    assert load_needs(_window(**load), CAPACITY).inputs["cpu_brokers_measured"] == 3


def test_network_handlers_latency_and_min_isr_each_fire_on_their_own_limit():
    load = _quiet()
    load["bytes_out"] = {**load["bytes_out"], "broker 1": _flat(110 * MB)}  # 88 % of 125 MB/s
    load["idle"] = {**load["idle"], "broker 2": _flat(0.1)}
    load["p99"] = {**load["p99"], "broker 3": _flat(450)}
    load["under"] = {**load["under"], "broker 3": _flat(0, skip=range(30, 31)) + ((START + 30 * STEP, 2.0),)}
    findings, skipped = load_findings(_window(**load), CAPACITY)
    assert sorted((f.rule, f.subject) for f in findings) == [
        ("network", "broker 1"), ("produce_p99", "broker 3"), ("request_handler_idle", "broker 2"),
        ("under_min_isr", "broker 3")]
    assert skipped == {}
    network = next(f for f in findings if f.rule == "network")
    assert network.value == pytest.approx(0.88) and "of its 125 MB/s" in network.message


def test_a_missing_indicator_skips_its_rules_by_name_and_never_reads_as_zero():
    load = _quiet()
    del load["p99"]
    findings, skipped = load_findings(_window(**load, skipped={"produce_p99_ms": "no series for the Produce p99"}), CAPACITY)
    assert findings == []
    assert skipped == {"produce_p99": "no series for the Produce p99"}
    with pytest.raises(CapacityError, match="no observed value"):
        percentile([], 0.95)


@pytest.mark.parametrize("capacity", [0, -5])
def test_a_network_capacity_of_zero_is_refused_with_the_param_to_set(capacity):
    with pytest.raises(CapacityError, match="network_capacity_mb_per_s"):
        LoadThresholds(network_capacity_bytes_per_s=capacity)


def test_a_network_capacity_missing_skips_the_network_rule_naming_the_param_and_the_rest_still_run():
    load = _quiet()
    load["cpu"] = {**load["cpu"], "broker 1": _flat(0.95)}
    findings, skipped = load_findings(_window(**load), LoadThresholds())
    assert [f.rule for f in findings] == ["cpu"]
    assert list(skipped) == ["network"] and "network_capacity_mb_per_s" in skipped["network"]
    needs = load_needs(_window(**load), LoadThresholds())
    assert needs.by_network is None and needs.by_cpu == math.ceil((0.95 + 0.6) / 0.7)


def test_one_hot_broker_with_even_replicas_points_to_a_rebalance_not_more_brokers():
    load = _quiet(("broker 1", "broker 2", "broker 3", "broker 4"))
    load["cpu"] = {**load["cpu"], "broker 4": _flat(0.85)}
    findings, _ = load_findings(_window(**load), CAPACITY, dict.fromkeys(("broker 1", "broker 2", "broker 3", "broker 4"), 500))
    assert sorted(f.rule for f in findings if f.subject == "broker 4") == ["cpu", "hot_broker"]
    hot = next(f for f in findings if f.rule == "hot_broker")
    assert "rebalance" in hot.message and hot.value == pytest.approx(0.85 / 0.3, rel=0.01)
    needs = load_needs(_window(**load), CAPACITY)
    assert needs.by_cpu == math.ceil((3 * 0.3 + 0.85) / 0.7) == 3  # the cluster as a whole has room: 4 are enough
    idle = _quiet(("broker 1", "broker 2", "broker 3", "broker 4"))
    idle["cpu"] = {b: _flat(0.004 if b == "broker 4" else 0.001) for b in idle["cpu"]}  # 4x, of next to nothing
    assert not [f for f in load_findings(_window(**idle), CAPACITY, dict.fromkeys(idle["cpu"], 500))[0]
                if f.rule == "hot_broker"]
    uneven = {"broker 1": 200, "broker 2": 500, "broker 3": 500, "broker 4": 800}
    assert not [f for f in load_findings(_window(**load), CAPACITY, uneven)[0] if f.rule == "hot_broker"]


def test_the_broker_needs_follow_cpu_and_network_with_their_inputs():
    load = _quiet()
    load["cpu"] = {b: _flat(0.9) for b in load["cpu"]}
    needs = load_needs(_window(**load), CAPACITY)
    assert needs.by_cpu == math.ceil(2.7 / 0.7) == 4
    assert needs.by_network == math.ceil(60 * MB / (0.8 * 125 * MB)) == 1
    assert "by CPU ceil(2.7 / 0.7) = 4" in needs.text()


def test_held_hours_split_at_gaps_and_the_window_round_trips():
    points = _flat(1.0, skip=range(5, 8))
    assert held_hours(points, lambda v: v > 0.5, STEP) == ((START, START + 4 * STEP), (START + 8 * STEP, START + 59 * STEP))
    window = _window(**_quiet())
    assert LoadWindow.from_dict(window.to_dict()) == window


def test_a_hosts_network_counts_its_devices_but_loopback_and_virtual_ones_unless_named():
    from kafkaops.capacity.load import QUERIES, devices_matcher, promql

    assert devices_matcher() == 'device!~"lo|veth.*|docker.*|br-.*|virbr.*|cni.*|flannel.*|cali.*|vxlan.*|tun.*|tap.*"'
    assert devices_matcher(" eth0|bond0 ") == 'device=~"eth0|bond0"'
    assert devices_matcher(r'en\d+"x') == r'device=~"en\\d+\"x"'  # a PromQL string: backslash and quote escaped
    query = promql(QUERIES["host_bytes_in"], rate="60s", selector='job="kafka"', devices="lo")
    assert query == 'sum by (instance) (rate(node_network_receive_bytes_total{device=~"lo"}[60s]))'
    assert "job=" not in query  # the operator's selector picks Kafka's exporters, not the node exporters


def test_needs_from_fewer_brokers_than_the_cluster_has_are_a_floor_and_say_so():
    load = _quiet(("broker 1", "broker 2"))
    needs = load_needs(_window(**load), CAPACITY, brokers=3)
    assert needs.inputs["brokers"] == 3 and needs.inputs["cpu_brokers_measured"] == 2
    assert needs.text().count("(at least: 2 of 3 brokers measured, the others' load unknown)") == 2
    assert "at least" not in load_needs(_window(**load), CAPACITY, brokers=2).text()
