"""The capacity review's params: bad numbers are refused with the number and a fix."""
from __future__ import annotations

import pytest

from kafkaops.capacity import steps as capacity_run
from kafkaops.capacity.records import ReportNote
from kafkaops.platform import state
from kafkaops.errors import ConfigError
from tests.unit.capacity.test_review import cluster


@pytest.mark.parametrize("params, match", [
    ({"target_records_per_s": 0, "per_consumer_records_per_s": 10}, "target_records_per_s is 0"),
    ({"target_records_per_s": -3, "per_consumer_records_per_s": 10}, "target_records_per_s is -3"),
    ({"target_records_per_s": 10}, "together"),
    ({"per_broker_mb_per_s": 0}, "per_broker_mb_per_s is 0"),
    ({"key_skew": True}, "skew_topic"),
    ({"target_records_per_s": "fast", "per_consumer_records_per_s": 1}, "bad capacity review parameters"),
    ({"network_capacity_mb_per_s": 0}, "network_capacity_mb_per_s is 0; give what one broker's network carries"),
    ({"network_capacity_mb_per_s": -10}, "network_capacity_mb_per_s is -10"),
    ({"max_cpu_percent": 0}, "max_cpu_percent is 0; give a percentage above 0 and at most 100"),
    ({"max_network_percent": 150}, "max_network_percent is 150"),
    ({"min_handler_idle_percent": -1}, "min_handler_idle_percent is -1"),
    ({"max_produce_p99_ms": 0}, "max_produce_p99_ms is 0"),
    ({"load_window_hours": 0}, "load_window_hours is 0"),
    ({"load_window_hours": 24 * 365}, "load_window_hours is 8760; give at most 744"),
    ({"prometheus_url": "prometheus:9090"}, "is not an http"),
    ({"prometheus_url": "http://admin:s3cret@prometheus:9090"}, "carries credentials"),
    ({"host_network_devices": "eth(0"}, r"host_network_devices 'eth\(0' is not a regex"),
])
def test_bad_params_are_refused(params, match) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        capacity_run.CapacityParams.from_params(params)
    assert err.value.final and not err.value.retriable  # Airflow's retry rule does not ask again


def test_targets_cover_the_reviewed_topics_and_units() -> None:
    p = capacity_run.CapacityParams.from_params({"target_records_per_s": 100, "per_consumer_records_per_s": 10,
                                                 "per_broker_mb_per_s": 2, "disk_per_broker_gb": 1.5})
    t = p.targets(cluster(t=1.0, offsets={0: 1}))
    assert [x.topic for x in t.topics] == ["orders"] and t.per_broker_bytes_per_s == 2e6
    assert t.disk_per_broker_bytes == 1_500_000_000


def test_history_review_and_report_from_dicts(local_store) -> None:
    p = capacity_run.CapacityParams()
    a = cluster(t=1.0, offsets={0: 0, 1: 0, 2: 0}, sizes={0: 0, 1: 0, 2: 0})
    b = cluster(t=2.0, offsets={0: 50, 1: 5, 2: 5}, sizes={0: 500, 1: 50, 2: 50})
    assert capacity_run.append_history(a.to_dict(), "r1")["points"] == 1
    assert capacity_run.append_history(b.to_dict(), "r2")["points"] == 2
    review = capacity_run.make_review(b.to_dict(), p, None)
    assert review["previous_taken_at"] == 1.0 and any(f["rule"] == "hot_partition" for f in review["findings"])
    log = capacity_run.record("kafka_capacity_review", "r2")
    paths = capacity_run.make_report(review, None, "r2", log)
    assert paths["html"].startswith("capacity/") and local_store.artifact(paths["html"]).body.startswith(b"<!")
    [note] = log.summary()["notes"]  # what the run's record page shows: the report, the verdict, the findings
    assert note["report"] == paths and note["verdict"].startswith("Brokers and disks are enough")
    assert note["findings"] == [f["message"] for f in review["findings"]]
    typed = ReportNote.from_dict(note)  # the contract the page reads, and what other capabilities query
    assert typed.to_dict() == {k: v for k, v in note.items() if k != "ts"} and typed.ts == note["ts"]
    assert typed.published.cluster_id == review["cluster_id"] and state.holds(note, ReportNote)


def test_a_url_with_credentials_is_refused_without_showing_them() -> None:
    with pytest.raises(ConfigError) as err:
        capacity_run.CapacityParams.from_params({"prometheus_url": "https://admin:s3cret@prometheus:9090"})
    assert "s3cret" not in str(err.value)


def test_the_load_params_become_the_load_rules_thresholds() -> None:
    params = capacity_run.CapacityParams.from_params({"max_cpu_percent": 55, "network_capacity_mb_per_s": 1250,
                                                      "min_handler_idle_percent": "20", "max_produce_p99_ms": 250})
    t = params.load_thresholds()
    assert (t.max_cpu, t.max_network, t.min_handler_idle, t.max_produce_p99_ms) == (0.55, 0.80, 0.20, 250.0)
    assert t.network_capacity_bytes_per_s == 1250e6
    defaults = capacity_run.CapacityParams.from_params({})
    assert defaults.load_thresholds().network_capacity() is None and defaults.load_window_hours == 24.0
    assert defaults.prometheus_conn_id == "prometheus_default" and defaults.prometheus_url == ""
    assert capacity_run.load_step_s(24) == 360.0 and capacity_run.load_step_s(0.1) == 15.0
