"""A capacity review reading the brokers' load, with real parts only: a Kafka 4 node the role brings up with the
Prometheus JMX exporter attached (one node: the CPU need of one loaded broker is already two), Debian's prometheus server scraping them every second, a quiet stretch, then a
producer loading the brokers. The same review, with the same CPU limit, says "enough" over the quiet stretch and
"add brokers" over the loaded one; Prometheus unreachable or a selector that matches nothing leaves every load rule
named as skipped, never a zero."""
from __future__ import annotations

import time

import pytest

from kafkaops.capacity import review as capacity
from kafkaops.capacity import steps
from kafkaops.capacity.load import LoadWindow, percentile
from kafkaops.cli import datagen
from kafkaops.platform.kafka import connection, topics
from kafkaops.platform.provision import free_ports
from kafkaops.testing import clusters, prometheus
from kafkaops.testing.clusters import TEST_BROKER_CONFIG

pytestmark = pytest.mark.integration

TOPIC = "load"
QUIET_S, LOADED_S = 8.0, 12.0
#: Windows of seconds: a point a second, each rate() over 4 s (four scrapes)
STEP_S, RATE_S = 1.0, 4.0


def _params(**overrides: object) -> steps.CapacityParams:
    base = {"topics": [TOPIC], "network_capacity_mb_per_s": 10_000, "max_produce_p99_ms": 60_000}
    return steps.CapacityParams.from_params({**base, **overrides})


def _review(server_url: str | None, cluster: dict, params: steps.CapacityParams, *, start: float, end: float
            ) -> tuple[LoadWindow, capacity.Review]:
    params = steps.CapacityParams.from_params({**_as_conf(params), "load_window_hours": (end - start) / 3600})
    load = steps.take_load(server_url, cluster, params, now=end, step_s=STEP_S, rate_s=RATE_S,
                           why_none="no Prometheus in this test")
    return LoadWindow.from_dict(load), capacity.Review.from_dict(steps.make_review(cluster, params, None, load))


def _as_conf(params: steps.CapacityParams) -> dict:
    return {"topics": list(params.topics), "network_capacity_mb_per_s": params.network_capacity_mb_per_s,
            "max_produce_p99_ms": params.max_produce_p99_ms, "max_cpu_percent": params.max_cpu_percent,
            "prometheus_selector": params.prometheus_selector, "host_network_devices": params.host_network_devices}


def _cpu(window: LoadWindow) -> dict[str, float]:
    return {b: percentile(window.observed("cpu", b), 0.95) for b in window.brokers() if window.observed("cpu", b)}


def test_the_review_says_add_brokers_when_the_brokers_cpu_crosses_its_limit_and_enough_before(local_store) -> None:
    with clusters.temporary_cluster("kafkaops-load-", brokers=1, controllers=1, metrics=True,
                                    extra_config=TEST_BROKER_CONFIG) as spec, \
            prometheus.temporary_prometheus(spec.metrics_targets, scrape_interval_s=1.0) as server, \
            prometheus.temporary_node_exporter() as node, \
            prometheus.temporary_prometheus(spec.metrics_targets, node_targets=[node.target],
                                            scrape_interval_s=1.0) as with_node:
        server.wait_until_scraped(timeout_s=30)
        with_node.wait_until_scraped(timeout_s=30)
        config = {"bootstrap.servers": spec.bootstrap}
        with connection.connect(config) as conn:
            topics.create_topic(conn, TOPIC, 3, 1)
        time.sleep(RATE_S + 1)  # the topic's creation out of the quiet window's rates
        quiet_start = time.time()
        time.sleep(QUIET_S)
        quiet_end = loaded_start = time.time()
        written, batch = 0, 0
        while time.time() - loaded_start < LOADED_S:
            done = datagen.produce(config, TOPIC, datagen.DatagenSpec(records=3_000, keys=500, skew="uniform",
                                                                      record_bytes=4_000, seed=batch))
            written, batch = written + done.records, batch + 1
        time.sleep(2 * server.scrape_interval_s)
        loaded_end = time.time()
        cluster = steps.take_snapshot(config, _params())

        probe, _ = _review(server.url, cluster, _params(), start=loaded_start + RATE_S, end=loaded_end)
        quiet_probe, _ = _review(server.url, cluster, _params(), start=quiet_start + RATE_S, end=quiet_end)
        busy, calm = _cpu(probe), _cpu(quiet_probe)
        assert sorted(busy) == sorted(calm) == ["broker 1"], (probe.skipped, busy, calm)
        assert min(busy.values()) > 1.5 * max(calm.values()), (
            f"the producer ({written} records of 4 kB) did not load the brokers' CPU above the quiet stretch's: "
            f"loaded {busy}, quiet {calm}")
        # one CPU limit between the quiet and the loaded brokers' p95, as a percentage of the host's processors
        limit = 100 * (max(calm.values()) + min(busy.values())) / 2

        window, before = _review(server.url, cluster, _params(max_cpu_percent=limit), start=quiet_start + RATE_S,
                                 end=quiet_end)
        assert not window.skipped and window.cpu_source == {"broker 1": "the broker's JVM"}, window
        assert window.network_source == {"broker 1": "the broker's bytes, clients' and replication's (JMX exporter)"}
        assert "cpu" not in before.rules_fired() and not before.skipped, before.findings
        assert before.recommendation("brokers").inputs["add"] == 0, before.recommendation("brokers")
        assert not (before.verdict or "").startswith("Add brokers"), before.verdict

        window, after = _review(server.url, cluster, _params(max_cpu_percent=limit), start=loaded_start + RATE_S,
                                end=loaded_end)
        fired = sorted(f.subject for f in after.findings if f.rule == "cpu")
        assert fired == ["broker 1"], after.findings
        rec = after.recommendation("brokers")
        assert rec.inputs["largest"] == ["CPU"] and rec.inputs["add"] >= 1 and rec.inputs["current"] == 1, rec
        assert after.verdict.startswith("Add brokers: the CPU needs"), after.verdict
        # the rules whose limits were not crossed stay quiet: network against 10 GB/s, Produce p99 against 60 s
        assert not {"network", "produce_p99", "under_min_isr", "request_handler_idle"} & after.rules_fired()
        net = window.indicators["bytes_in"]["broker 1"]
        assert max(v for _, v in net) > 100_000, net  # bytes in, clients' and replication's, per second

        # where a node_exporter runs on the broker's host (and the broker is alone there), the CPU and the network
        # are the host's: here its loopback device, which carries the producer's bytes
        window, _ = _review(with_node.url, cluster, _params(host_network_devices="lo"), start=loaded_start + RATE_S,
                            end=loaded_end)
        assert window.cpu_source == {"broker 1": "host 127.0.0.1 (node_exporter)"}, window.cpu_source
        host = window.observed("cpu", "broker 1")
        assert host and all(0 <= v <= 1 for v in host) and max(host) > 0, host
        assert window.network_source == {"broker 1": "host 127.0.0.1's network devices (node_exporter)"}, window
        own_in = max(v for _, v in net)
        host_in = max(window.observed("bytes_in", "broker 1"))
        assert host_in >= 0.5 * own_in, (host_in, own_in)  # loopback carries at least what the broker took in

        # the default 24 h window of a server a minute old: read again from its first data at a 15 s step, not one
        # point every 6 minutes; the window says which start was asked
        young = LoadWindow.from_dict(steps.take_load(server.url, cluster, _params(), now=loaded_end))
        assert young.asked_start == loaded_end - 24 * 3600 and young.step_s == 15.0, young.to_dict()
        assert young.start == young.first_observed() and loaded_end - young.start <= 2 * 360, young.to_dict()
        assert len(young.observed("cpu", "broker 1")) >= 2, young.to_dict()

        # a selector that matches no series: every load rule named as skipped, nothing read as zero
        window, blind = _review(server.url, cluster, _params(prometheus_selector='job="not-kafka"'),
                                start=loaded_start, end=loaded_end)
        assert not window.indicators and set(blind.skipped) == set(capacity.RULES_OF_LOAD)
        assert all('job="not-kafka"' in why for why in window.skipped.values()), window.skipped
        assert "cpu" not in blind.rules_fired() and blind.recommendation("brokers").inputs["by_cpu"] is None


def test_an_unreachable_prometheus_leaves_the_review_whole_and_names_each_rule_it_skipped(local_store) -> None:
    (port,) = free_ports(1)  # nothing listens there
    cluster = _offline_cluster()
    started = time.monotonic()
    window, review = _review(f"http://127.0.0.1:{port}", cluster, _params(), start=time.time() - 600,
                             end=time.time())
    assert time.monotonic() - started < 10, "one refused connection should skip every query at once"
    assert set(review.skipped) == set(capacity.RULES_OF_LOAD) and not window.indicators
    assert all(f"127.0.0.1:{port}" in why and "did not answer" in why for why in window.skipped.values())
    assert review.recommendation("brokers") is not None and review.recommendation("brokers").inputs["by_cpu"] is None


def _offline_cluster() -> dict:
    from kafkaops.model import Broker, Cluster, PartitionAssignment

    return Cluster(brokers=tuple(Broker(i, disk_total_bytes=10**11, disk_usable_bytes=9 * 10**10) for i in (1, 2, 3)),
                   partitions=(PartitionAssignment(TOPIC, 0, (1, 2), 1, (1, 2), 0, 10, size_bytes=1000),),
                   cluster_id="offline", taken_at=time.time()).to_dict()
