"""Reading Kafka's reassignment JSON, broker and rack lists, sizes; writing the plan."""
from __future__ import annotations

import json

import pytest

from kafkaops.reassign.planner import PlanInputError, plan_scale_out
from kafkaops.cli.planfile import load_cluster, parse_brokers, parse_racks, read_assignment, write_plan


def write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


CURRENT = {"version": 1, "partitions": [{"topic": "orders", "partition": p, "replicas": [1 + p % 3, 1 + (p + 1) % 3]}
                                        for p in range(6)]}


def test_load_cluster_with_racks_and_sizes(tmp_path):
    current = write(tmp_path / "current.json", CURRENT)
    sizes = write(tmp_path / "sizes.json", {"partitions": [{"topic": "orders", "partition": 0, "size": 100},
                                                           {"topic": "gone", "partition": 0, "size": 5}]})
    cluster = load_cluster(current, [1, 2, 3, 4], {1: "a", 2: "b", 3: "a", 4: "b"}, sizes)
    assert cluster.broker_ids == (1, 2, 3, 4) and cluster.broker(4).rack == "b"
    assert cluster.partition("orders", 0).size_bytes == 100
    assert cluster.partition("orders", 1).size_bytes is None
    assert cluster.replicas_per_broker()[4] == 0


@pytest.mark.parametrize("content, message", [
    ("{nope", r"current.json: not JSON \(Expecting property name"),
    ([], r'current.json: expected an object with a "partitions" list'),
    ({"partitions": [{"topic": "t", "partition": p, "replicas": [1]} for p in range(3)] + [{"topic": "t", "partition": 3}]},
     r'current.json: partitions\[3\] has no "replicas"; expected \{"topic","partition","replicas"\}'),
    ({"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}, r'partitions\[0\] "partition" is -1'),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, r'"replicas" is \[\]; expected a non-empty'),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "names a broker twice"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}, r"partitions\[1\] repeats t-0"),
    ({"partitions": ["x"]}, r"partitions\[0\] is not an object"),
])
def test_malformed_assignment(tmp_path, content, message):
    path = write(tmp_path / "current.json", content)
    with pytest.raises(PlanInputError, match=message):
        read_assignment(path)


def test_missing_file(tmp_path):
    with pytest.raises(PlanInputError, match="cannot read it"):
        read_assignment(tmp_path / "absent.json")


def test_replica_on_unlisted_broker(tmp_path):
    current = write(tmp_path / "current.json", CURRENT)
    with pytest.raises(PlanInputError, match=r"orders-1 has replicas on broker\(s\) \[3\], which --brokers does not list"):
        load_cluster(current, [1, 2])


def test_racks_for_unlisted_broker(tmp_path):
    current = write(tmp_path / "current.json", CURRENT)
    with pytest.raises(PlanInputError, match=r"--racks names broker\(s\) \[9\]"):
        load_cluster(current, [1, 2, 3], {9: "a"})


@pytest.mark.parametrize("text, message", [("1,x", "expected broker ids"), ("1,1", r"lists broker\(s\) \[1\] twice"),
                                           ("", "expected broker ids")])
def test_parse_brokers(text, message):
    assert parse_brokers("1, 2,3") == [1, 2, 3]
    with pytest.raises(PlanInputError, match=message):
        parse_brokers(text)


@pytest.mark.parametrize("text", ["1", "x:a", "1:", "1:a,1:b"])
def test_parse_racks(text):
    assert parse_racks("1:a, 2:b") == {1: "a", 2: "b"}
    with pytest.raises(PlanInputError):
        parse_racks(text)


def test_write_plan_is_kafka_json(tmp_path):
    cluster = load_cluster(write(tmp_path / "current.json", CURRENT), [1, 2, 3])
    plan = plan_scale_out(cluster, [4])
    write_plan(plan, tmp_path / "plan.json")
    assert json.loads((tmp_path / "plan.json").read_text()) == plan.to_kafka_json()
