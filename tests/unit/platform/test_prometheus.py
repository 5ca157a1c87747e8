"""The Prometheus client's parsing of the HTTP API's JSON documents (the shapes of
https://prometheus.io/docs/prometheus/latest/querying/api/), and its errors against a port nothing listens on."""
from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest

from kafkaops.errors import KafkaOpsError
from kafkaops.platform import prometheus
from kafkaops.platform.prometheus import PrometheusClient, PrometheusQueryError, PrometheusUnreachable, Series
from kafkaops.platform.provision import free_ports

MATRIX = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "kafka_server_brokertopicmetrics_bytesin_total", "instance": "127.0.0.1:19404",
                    "job": "kafka"},
         # a gap between 1700000002 and 1700000006: the broker was down, Prometheus has no sample there
         "values": [[1700000000, "10"], [1700000001, "25.5"], [1700000002, "40"], [1700000006, "NaN"],
                    [1700000007, "+Inf"]]},
        {"metric": {"instance": "127.0.0.1:19405", "job": "kafka"},
         "values": [[1700000001.5, "0"], [1700000000.5, "3e2"]]},
    ]},
}


def test_a_matrix_becomes_series_with_their_labels_and_points_gaps_left_as_gaps() -> None:
    series, warnings = prometheus.parse_matrix(MATRIX)
    assert warnings == ()
    first, second = series
    assert first.labels["instance"] == "127.0.0.1:19404" and first.labels["__name__"].endswith("_total")
    assert first.points[:3] == ((1700000000.0, 10.0), (1700000001.0, 25.5), (1700000002.0, 40.0))
    assert [t for t, _ in first.points] == [1700000000, 1700000001, 1700000002, 1700000006, 1700000007]
    assert math.isnan(first.points[3][1]) and first.points[4][1] == math.inf
    assert first.gaps(step_s=1) == ((1700000002.0, 1700000006.0),)
    assert prometheus.finite(first.points) == first.points[:3]
    assert second.points == ((1700000000.5, 300.0), (1700000001.5, 0.0))  # in time order; a real 0 stays 0
    assert second.gaps(step_s=1) == ()


def test_no_match_is_no_series_not_zeros() -> None:
    assert prometheus.parse_matrix({"status": "success", "data": {"resultType": "matrix", "result": []}}) == ((), ())
    assert prometheus.parse_vector({"status": "success", "data": {"resultType": "vector", "result": []}}) == ((), ())


def test_a_vector_and_a_scalar_become_samples_and_warnings_are_kept() -> None:
    samples, warnings = prometheus.parse_vector({
        "status": "success", "warnings": ["PromQL info: metric might not be a counter"],
        "data": {"resultType": "vector", "result": [
            {"metric": {"instance": "a:1"}, "value": [1700000000.123, "0.25"]},
            {"metric": {}, "value": [1700000000.123, "-Inf"]}]}})
    assert samples[0] == prometheus.Sample(labels={"instance": "a:1"}, timestamp=1700000000.123, value=0.25)
    assert samples[1].labels == {} and samples[1].value == -math.inf
    assert warnings == ("PromQL info: metric might not be a counter",)
    (scalar,), _ = prometheus.parse_vector({"status": "success", "data": {"resultType": "scalar",
                                                                          "result": [1700000000, "2"]}})
    assert scalar == prometheus.Sample(labels={}, timestamp=1700000000.0, value=2.0)


@pytest.mark.parametrize(("document", "says"), [
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "status is 'error': bad_data parse error"),
    ([], "is a JSON object"),
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, "one of \\['matrix'\\]"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, 2]]}]}},
     "a sample is"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "x"]]}]}},
     "not a number: 'x'"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"a": 1}, "values": []}]}},
     "label names and string values"),
])
def test_a_document_not_of_the_api_is_refused_saying_where(document: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        prometheus.parse_matrix(document)


def test_a_series_gap_needs_a_positive_step() -> None:
    with pytest.raises(ValueError, match="positive"):
        Series(labels={}, points=()).gaps(0)


def test_the_url_is_shown_without_its_credentials() -> None:
    assert prometheus.public_url("https://ops:s3cret@prom.example:9090/prefix") == "https://prom.example:9090/prefix"
    assert prometheus.public_url("http://prom:9090") == "http://prom:9090"


def test_an_unreachable_server_is_a_retriable_error_naming_the_url_without_credentials_and_the_query() -> None:
    (port,) = free_ports(1)  # nothing listens there
    with PrometheusClient(f"http://ops:s3cret@127.0.0.1:{port}", timeout_s=2) as client:
        with pytest.raises(PrometheusUnreachable) as caught:
            client.query_range("up", start=datetime(2026, 1, 1, tzinfo=timezone.utc),
                               end=datetime(2026, 1, 1, 0, 5, tzinfo=timezone.utc), step_s=15)
    message = str(caught.value)
    assert isinstance(caught.value, KafkaOpsError) and caught.value.retriable
    assert f"http://127.0.0.1:{port}/api/v1/query_range" in message and "'up'" in message
    assert "s3cret" not in message and "ops@" not in message
    assert "check the URL" in message


def test_a_bad_window_or_url_is_refused_before_asking() -> None:
    with pytest.raises(PrometheusQueryError, match="not an http"):
        PrometheusClient("prom:9090")
    with PrometheusClient("http://127.0.0.1:9") as client:
        with pytest.raises(PrometheusQueryError, match="start <= end"):
            client.query_range("up", start=10, end=5, step_s=1)
        with pytest.raises(ValueError, match="naive datetime"):
            client.query("up", at=datetime(2026, 1, 1))
