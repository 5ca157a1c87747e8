"""The brokers' load as Prometheus sees it, with real parts only: a one-node Kafka 4 cluster the role brings up
with the Prometheus JMX exporter attached (kafka_broker_jmx_exporter), Debian's prometheus server scraping it
every second (kafkaops.testing.prometheus), a producer writing for a few seconds, then the client
(kafkaops.platform.prometheus) reading the load back through the HTTP API. And the host's load: Debian's node
exporter scraped by the same kind of server."""
from __future__ import annotations

import re
import time

import pytest

from kafkaops.cli import datagen
from kafkaops.errors import ProvisionError
from kafkaops.platform.kafka import connection, topics
from kafkaops.platform.prometheus import PrometheusQueryError, finite
from kafkaops.testing import clusters, prometheus
from kafkaops.testing.clusters import TEST_BROKER_CONFIG

pytestmark = pytest.mark.integration

TOPIC = "load"
PRODUCE_S = 4.0


def test_prometheus_reads_the_brokers_bytes_in_and_produce_rate_from_the_jmx_exporter() -> None:
    with clusters.temporary_cluster("kafkaops-metrics-", brokers=1, controllers=1, metrics=True,
                                    extra_config=TEST_BROKER_CONFIG) as spec, \
            prometheus.temporary_prometheus(spec.metrics_targets, scrape_interval_s=1.0) as server:
        (target,) = spec.metrics_targets
        assert (spec.base_dir / "node-1" / "config" / "jmx-exporter.yml").is_file()
        server.wait_until_scraped(timeout_s=20)

        start = time.time()
        with connection.connect(spec.bootstrap) as conn:
            topics.create_topic(conn, TOPIC, 1, 1)
        written, batch = 0, 0
        while time.time() - start < PRODUCE_S:
            done = datagen.produce({"bootstrap.servers": spec.bootstrap}, TOPIC,
                                   datagen.DatagenSpec(records=2_000, keys=100, record_bytes=200, seed=batch))
            written, batch = written + done.records, batch + 1
            time.sleep(0.2)
        time.sleep(2.5 * server.scrape_interval_s)  # the last writes scraped
        end = time.time()

        with server.client() as prom:
            # per broker: the broker-wide series have no topic label
            bytes_in = prom.query_range('rate(kafka_server_brokertopicmetrics_bytesin_total{topic=""}[5s])',
                                        start=start, end=end, step_s=1)
            assert [s.labels["instance"] for s in bytes_in.series] == [target], bytes_in
            rates = [v for _, v in finite(bytes_in.series[0].points)]
            assert max(rates) > 1_000, f"bytes in per second of broker {target} while {written} records were written: {rates}"

            counter = prom.query_range('kafka_server_brokertopicmetrics_bytesin_total{topic=""}',
                                       start=start, end=end, step_s=1)
            (values,) = [s.values for s in counter.series]
            assert values[-1] > values[0] >= 0, values
            assert values[-1] - values[0] >= written * 200, (values, written)  # at least the values' bytes

            per_topic = prom.query_range(f'rate(kafka_server_brokertopicmetrics_bytesin_total{{topic="{TOPIC}"}}[5s])',
                                         start=start, end=end, step_s=1)
            assert len(per_topic.series) == 1 and max(per_topic.series[0].values) > 1_000, per_topic

            produce = prom.query_range(
                'sum by (instance) (rate(kafka_network_requestmetrics_requests_total{request="Produce"}[5s]))',
                start=start, end=end, step_s=1)
            assert [s.labels["instance"] for s in produce.series] == [target], produce
            assert max(produce.series[0].values) > 0, produce

            # the other series a capacity review reads are there, each with a value of its own kind
            now = prom.query('kafka_network_requestmetrics_totaltimems{request="Produce", quantile="0.99"}')
            assert len(now) == 1 and now[0].value >= 0, now
            idle = prom.query("kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent")
            assert len(idle) == 1 and 0 <= idle[0].value <= 1.01, idle
            network_idle = prom.query("kafka_network_socketserver_networkprocessoravgidlepercent")
            assert len(network_idle) == 1 and 0 <= network_idle[0].value <= 1.01, network_idle
            health = {s.labels["__name__"]: s.value for s in prom.query(
                '{__name__=~"kafka_server_replicamanager_(underreplicatedpartitions|underminisrpartitioncount)"}')}
            assert health == {"kafka_server_replicamanager_underreplicatedpartitions": 0,
                              "kafka_server_replicamanager_underminisrpartitioncount": 0}, health
            assert prom.query("kafka_server_replicamanager_isrshrinks_total"), "no ISR shrink counter"
            cpu = prom.query(f'rate(process_cpu_seconds_total{{instance="{target}"}}[5s])')
            assert len(cpu) == 1 and cpu[0].value > 0, cpu

            # a metric nobody exports: no series at all, not a series of zeros
            missing = prom.query_range("kafka_server_no_such_metric_total", start=start, end=end, step_s=1)
            assert missing.series == ()
            assert prom.query("kafka_server_no_such_metric_total") == ()
            with pytest.raises(PrometheusQueryError, match="rate\\(oops"):
                prom.query("rate(oops")


def test_a_broker_whose_exporter_does_not_answer_fails_the_health_check_naming_it() -> None:
    """The inventory turns the exporter on but its JVM option never reaches the broker (an operator's override):
    the broker runs, its exporter's port stays shut, and the role's check says so, naming host and port."""
    with pytest.raises(ProvisionError) as failed:
        with clusters.temporary_cluster("kafkaops-metrics-", brokers=1, controllers=1, metrics=True,
                                        extra_config=TEST_BROKER_CONFIG,
                                        inventory_vars={"kafka_broker_jmx_exporter_opt": "",
                                                        "kafka_broker_jmx_exporter_wait": 2}) as spec:
            pytest.fail(f"the cluster came up although no exporter answers on {spec.metrics_targets}")
    message = str(failed.value)
    assert "check 'JMX exporter' failed on kafka-1" in message, message
    assert re.search(r"does not answer on 127\.0\.0\.1:\d+ after 2 s; the broker is left running", message), message


def test_prometheus_reads_the_host_s_cpu_from_a_node_exporter_in_job_node() -> None:
    with prometheus.temporary_node_exporter() as node, \
            prometheus.temporary_prometheus((), node_targets=[node.target], scrape_interval_s=0.5) as server:
        start = time.time()
        server.wait_until_scraped(timeout_s=15)
        time.sleep(4 * server.scrape_interval_s)  # a few samples for rate()
        end = time.time()
        with server.client() as prom:
            idle = prom.query_range('rate(node_cpu_seconds_total{mode="idle"}[30s])', start=start, end=end, step_s=1)
            assert idle.series, f"no idle CPU series from {node.target}; its log: {node.log_tail()}"
            assert {(s.labels["job"], s.labels["instance"]) for s in idle.series} == {(prometheus.NODE_JOB, node.target)}
            assert all(0 <= v <= 1.5 for s in idle.series for _, v in finite(s.points)), idle  # CPU seconds per second
            assert any(finite(s.points) for s in idle.series), idle
            # only the collectors the tests turn on, each of them working
            collectors = {s.labels["collector"]: s.value for s in prom.query("node_scrape_collector_success")}
            assert collectors == dict.fromkeys(prometheus.NODE_COLLECTORS, 1.0), collectors
            assert prom.query('node_network_receive_bytes_total{device="lo"}'), "no loopback traffic series (netdev)"
