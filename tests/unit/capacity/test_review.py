"""Capacity review formulas against values computed here, rules firing and not, bad input."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kafkaops.capacity import load as capacity_load
from kafkaops.capacity import review as capacity
from kafkaops.capacity.review import (CapacityError, CapacityTargets, ReviewPoint, Thresholds, TopicTarget,
                               recommend_brokers, recommend_key_change, recommend_partitions, review, throughput)
from kafkaops.model import Broker, Cluster, ConsumerGroup, GroupPartitionLag, PartitionAssignment

GB = 1_000_000_000


def cluster(*, t: float, offsets: dict[int, int], sizes: dict[int, int] | None = None, brokers: int = 3,
            disk: tuple[int, int] | None = (100 * GB, 50 * GB), groups=(), topic: str = "orders",
            extra: tuple[PartitionAssignment, ...] = ()) -> Cluster:
    ids = list(range(1, brokers + 1))
    parts = tuple(PartitionAssignment(topic, p, tuple(ids[(p + i) % brokers] for i in range(min(2, brokers))),
                                      leader=ids[p % brokers], isr=(), start_offset=0, end_offset=o,
                                      size_bytes=(sizes or {}).get(p))
                  for p, o in offsets.items())
    return Cluster(brokers=tuple(Broker(i, disk_total_bytes=disk[0] if disk else None,
                                        disk_usable_bytes=disk[1] if disk else None) for i in ids),
                   partitions=parts + extra, cluster_id="c1", groups=tuple(groups), taken_at=t)


def group(gid: str, members: int, lags: dict[int, tuple[int, int]], topic: str = "orders") -> ConsumerGroup:
    return ConsumerGroup(gid, "STABLE", members,
                         tuple(GroupPartitionLag(topic, p, c, e) for p, (c, e) in lags.items()))


# -- throughput ----------------------------------------------------------------------------------------------

def test_throughput_is_the_offset_and_size_delta_over_the_time_between_snapshots() -> None:
    a = cluster(t=100.0, offsets={0: 100, 1: 50, 2: 0}, sizes={0: 1000, 1: 500, 2: 0})
    b = cluster(t=110.0, offsets={0: 300, 1: 70, 2: 0}, sizes={0: 3000, 1: 700, 2: 0})
    parts = {(p.topic, p.partition): p for p in throughput(a, b)}
    assert parts[("orders", 0)].records_per_s == pytest.approx((300 - 100) / 10)
    assert parts[("orders", 1)].records_per_s == pytest.approx((70 - 50) / 10)
    assert parts[("orders", 0)].bytes_per_s == pytest.approx((3000 - 1000) / 10)
    assert parts[("orders", 2)].records_per_s == 0
    [topic] = capacity.topic_throughput(parts.values())
    assert topic.records_per_s == pytest.approx(22.0) and topic.bytes_per_s == pytest.approx(220.0)


def test_throughput_works_from_stored_points_and_without_sizes() -> None:
    a = ReviewPoint.from_dict(ReviewPoint.of(cluster(t=0.0, offsets={0: 10})).to_dict())
    b = cluster(t=4.0, offsets={0: 30})
    [p] = throughput(a, b)
    assert p.records_per_s == 5.0 and p.bytes is None and p.bytes_per_s is None


def test_new_partitions_count_from_zero_and_unknown_topics_are_left_out() -> None:
    a = cluster(t=0.0, offsets={0: 10})
    b = cluster(t=2.0, offsets={0: 10, 1: 8},
                extra=(PartitionAssignment("new", 0, (1,), 1, (), 0, 100),))
    assert [(p.topic, p.partition, p.records_per_s) for p in throughput(a, b)] == [("orders", 0, 0.0),
                                                                                 ("orders", 1, 4.0)]


def test_throughput_refuses_snapshots_out_of_order() -> None:
    a, b = cluster(t=10.0, offsets={0: 1}), cluster(t=5.0, offsets={0: 2})
    with pytest.raises(CapacityError, match="not after"):
        throughput(a, b)


# -- indicators ----------------------------------------------------------------------------------------------

def test_disk_use_fires_above_70_percent_only() -> None:
    busy = cluster(t=1.0, offsets={0: 1, 1: 1, 2: 1}, disk=(100 * GB, 29 * GB))  # 71 % used
    calm = cluster(t=1.0, offsets={0: 1, 1: 1, 2: 1}, disk=(100 * GB, 30 * GB))  # 70 % used: not above
    fired = capacity.disk_findings(busy)
    assert [f.subject for f in fired] == ["broker 1", "broker 2", "broker 3"]
    assert fired[0].value == pytest.approx(0.71) and fired[0].threshold == 0.7 and fired[0].rule == "disk_use"
    assert capacity.disk_findings(calm) == []


def test_replicas_per_broker_fires_above_the_limit() -> None:
    c = cluster(t=1.0, offsets={p: 0 for p in range(6)})  # RF 2 over 3 brokers: 4 replicas each
    assert capacity.replica_findings(c, limit=4) == []
    fired = capacity.replica_findings(c, limit=3)
    assert {f.subject for f in fired} == {"broker 1", "broker 2", "broker 3"} and fired[0].value == 4


def test_idle_consumers_fire_when_members_exceed_partitions() -> None:
    c = cluster(t=1.0, offsets={0: 5, 1: 5, 2: 5},
                groups=[group("many", 5, {0: (1, 5)}), group("fits", 3, {0: (1, 5)})])
    [f] = capacity.idle_consumer_findings(c)
    assert (f.rule, f.subject, f.value, f.threshold) == ("idle_consumers", "group many", 5, 3)


def test_lag_growing_needs_two_points_and_no_fall() -> None:
    def pt(t: float, lag: int) -> ReviewPoint:
        return ReviewPoint(taken_at=t, offsets={}, lags={"g": lag})
    assert capacity.lag_findings([pt(1, 100)]) == []
    [f] = capacity.lag_findings([pt(1, 100), pt(2, 150), pt(3, 400)])
    assert f.value == 300 and f.subject == "group g"
    assert capacity.lag_findings([pt(1, 100), pt(2, 50), pt(3, 400)]) == []  # fell in between
    assert capacity.lag_findings([pt(1, 100), pt(2, 100)]) == []  # flat
    assert capacity.lag_findings([pt(1, 100), pt(2, 200)], min_points=3) == []


def test_partition_count_not_a_multiple_of_brokers() -> None:
    [f] = capacity.multiple_findings(cluster(t=1.0, offsets={0: 1, 1: 1, 2: 1, 3: 1}))
    assert (f.value, f.threshold) == (4, 3) and "6" in f.message
    assert capacity.multiple_findings(cluster(t=1.0, offsets={p: 1 for p in range(6)})) == []


def test_hot_partition_by_records_and_bytes_and_empty_topics() -> None:
    extra = (PartitionAssignment("idle", 0, (1,), 1, (), 0, 0, 0), PartitionAssignment("idle", 1, (2,), 2, (), 0, 0, 0))
    c = cluster(t=1.0, offsets={0: 400, 1: 100, 2: 100}, sizes={0: 4000, 1: 1000, 2: 1000}, extra=extra)
    found, empty = capacity.hot_partition_findings(c)
    mean = (400 + 100 + 100) / 3
    assert [(f.subject, f.value) for f in found] == [("orders-0", pytest.approx(400 / mean))] * 2
    assert empty == ["idle"]
    calm = cluster(t=1.0, offsets={0: 150, 1: 100, 2: 100})
    assert capacity.hot_partition_findings(calm)[0] == []


def test_a_hot_partition_says_what_the_key_skew_sample_found_or_how_to_find_out() -> None:
    c = cluster(t=1.0, offsets={0: 400, 1: 100, 2: 100})

    def cause(skews: list[dict]) -> str:
        [found] = capacity.hot_partition_findings(c, skews=skews, key_share=0.2)[0]
        return found.message.split("; ", 1)[1]

    assert cause([]) == "is one key dominant? run the review with key_skew on for this topic"
    dominant = {"topic": "orders", "top_keys": [{"key": "acct-1", "records": 300, "share": 0.5}]}
    assert cause([dominant]) == ("the key-skew sample's hottest key acct-1 holds 50% of its records: change the key "
                                 "or split that key (see the key change recommended below)")
    spread = {"topic": "orders", "top_keys": [{"key": "acct-1", "records": 30, "share": 0.05}]}
    assert cause([spread]).startswith("the key-skew sample's hottest key acct-1 holds 5% of its records, under the "
                                      "20% of a dominant key")
    assert cause([{"topic": "other", "top_keys": []}]).startswith("is one key dominant?")
    assert "no keyed records" in cause([{"topic": "orders", "top_keys": []}])


def test_hot_partition_uses_the_throughput_window_when_it_saw_records() -> None:
    a = cluster(t=0.0, offsets={0: 1000, 1: 1000, 2: 1000})
    b = cluster(t=10.0, offsets={0: 1300, 1: 1010, 2: 1010})  # stored: even; the window: partition 0 hot
    found, _ = capacity.hot_partition_findings(b, throughput(a, b))
    assert found[0].subject == "orders-0" and "window" in found[0].message
    assert found[0].value == pytest.approx(300 / ((300 + 10 + 10) / 3), rel=1e-3)


# -- recommendations -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, per_consumer, consumers, brokers", [
    (10_000, 1_500, 0, 3), (10_000, 1_500, 9, 3), (1_000, 1_000, 0, 4), (50, 7, 13, 5), (1, 1000, 0, 1)])
def test_partitions_formula(target, per_consumer, consumers, brokers) -> None:
    needed = max(-(-target // per_consumer), consumers)
    expected = max(brokers, ((needed + brokers - 1) // brokers) * brokers)
    rec = recommend_partitions("t", target, per_consumer, consumers, brokers)
    assert rec.value == expected and rec.value % brokers == 0
    assert rec.inputs["by_throughput"] == math.ceil(target / per_consumer)
    assert str(expected) in rec.message and "multiple" in rec.rule


@pytest.mark.parametrize("bad", [0, -5, 0.0])
def test_a_target_throughput_of_zero_or_less_is_refused(bad) -> None:
    with pytest.raises(CapacityError, match=rf"target throughput of orders is {bad!r}.*above 0") as err:
        recommend_partitions("orders", bad, 100, 0, 3)
    assert not err.value.retriable
    with pytest.raises(CapacityError, match="per-consumer"):
        recommend_partitions("orders", 100, bad, 0, 3)


def test_brokers_formula_from_disk_and_throughput() -> None:
    total, disk = 1_000 * GB, 500 * GB
    by_disk = math.ceil(total / (disk * 0.7))  # 1000 / 350 -> 3
    rec = recommend_brokers(total, disk, current=3)
    assert rec.value == by_disk == 3 and rec.inputs["add"] == 0
    rec = recommend_brokers(total, disk, throughput_bytes_per_s=450e6, per_broker_bytes_per_s=100e6, current=3)
    assert rec.value == max(by_disk, math.ceil(450e6 / 100e6)) == 5 and rec.inputs["add"] == 2
    assert recommend_brokers(0, disk).value == 1
    with pytest.raises(CapacityError, match="per-broker throughput"):
        recommend_brokers(total, disk, per_broker_bytes_per_s=0)


def test_key_change_only_when_one_key_dominates() -> None:
    skew = {"topic": "orders", "partitions": 3, "records": 1000,
            "top_keys": [{"key": "account-000000", "records": 400, "bytes": 1, "share": 0.4}],
            "candidate": {"field": "id", "records": 1000, "top_share": 0.001, "max_mean_ratio": 1.02}}
    rec = recommend_key_change(skew, 0.3)
    assert rec is not None and rec.value == 0.4 and rec.inputs["key"] == "account-000000"
    assert "'id'" in rec.message
    assert recommend_key_change(skew, 0.5) is None
    assert recommend_key_change({"topic": "e", "records": 0, "top_keys": []}) is None


# -- the review ---------------------------------------------------------------------------------------------

def test_review_round_trips_through_json_and_names_what_fired() -> None:
    a = cluster(t=0.0, offsets={0: 0, 1: 0, 2: 0, 3: 0}, sizes={0: 0, 1: 0, 2: 0, 3: 0},
                groups=[group("slow", 2, {0: (0, 0)})])
    b = cluster(t=10.0, offsets={0: 900, 1: 100, 2: 100, 3: 100}, sizes={0: 9000, 1: 1000, 2: 1000, 3: 1000},
                groups=[group("slow", 2, {0: (10, 900)})])
    history = [ReviewPoint.of(a)]
    targets = CapacityTargets(topics=(TopicTarget("orders", 1000, 150),), per_broker_bytes_per_s=500)
    r = review(b, history, targets=targets)
    assert {"hot_partition", "lag_growing", "partitions_not_multiple_of_brokers"} <= r.rules_fired()
    assert r.recommendation("partitions").value == 9  # ceil(1000/150)=7 -> 9 (multiple of 3)
    # one number per topic: the finding names the recommended count, not its own "e.g. 6"
    [uneven] = [f for f in r.findings if f.rule == "partitions_not_multiple_of_brokers"]
    assert uneven.message.endswith("use a multiple of 3: 9, as recommended below"), uneven.message
    brokers = r.recommendation("brokers")
    assert brokers.inputs["by_throughput"] == math.ceil((12_000 / 10) / 500)
    assert r.throughput and r.previous_taken_at == 0.0 and r.history_points == 2
    assert capacity.Review.from_json(r.to_json()) == r


def test_review_without_history_has_no_throughput_and_reports_empty_topics() -> None:
    r = review(cluster(t=5.0, offsets={0: 0, 1: 0, 2: 0}), thresholds=Thresholds())
    assert r.throughput == () and r.empty_topics == ("orders",) and r.previous_taken_at is None
    assert "hot_partition" not in r.rules_fired()


# -- the disk verdict: findings and recommendations agree ---------------------------------------------------

def on_one_host(c: Cluster) -> Cluster:
    """The brokers as on a laptop: one host, so one shared disk."""
    from dataclasses import replace

    return replace(c, brokers=tuple(replace(b, host="127.0.0.1", port=9090 + b.id) for b in c.brokers))


def sized(c: Cluster, bytes_per_partition: int) -> Cluster:
    from dataclasses import replace

    return replace(c, partitions=tuple(replace(p, size_bytes=bytes_per_partition) for p in c.partitions), _index=None)


def test_a_shared_disk_full_of_other_data_says_free_it_in_the_finding_and_the_recommendation() -> None:
    # the walked laptop: 270 GB disk, 190 GB used, Kafka holds a few MB of it
    laptop = on_one_host(sized(cluster(t=1.0, offsets={0: 10, 1: 10, 2: 10}, disk=(270 * GB, 80 * GB)), 2_000_000))
    r = review(laptop, targets=CapacityTargets())
    assert r.disk is not None and r.disk.action == "free_disk"
    [finding] = [f for f in r.findings if f.rule == "disk_use"]
    assert finding.subject == "brokers 1, 2, 3 (one disk)" and finding.value == pytest.approx(190 / 270, abs=1e-4)
    assert "other data alone fills it past the limit" in finding.message and "add brokers" not in finding.message
    brokers = r.recommendation("brokers")
    assert brokers.inputs["add"] == 0 and brokers.inputs["disk_action"] == "free_disk"
    assert "Free disk: brokers 1, 2, 3 (one disk) is above 70%" in brokers.message
    assert "more brokers would not help" in brokers.message and r.verdict in brokers.message
    assert capacity.Review.from_json(r.to_json()) == r


def test_kafka_data_filling_the_disks_says_add_brokers_in_both_with_the_same_count() -> None:
    # 3 brokers on disks of 100 GB, 80 GB used each, all of it Kafka's: 6 partitions x RF 2 x 20 GB
    full = sized(cluster(t=1.0, offsets={p: 1 for p in range(6)}, disk=(100 * GB, 20 * GB)), 20 * GB)
    r = review(full)
    assert r.disk.action == "add_brokers" and r.disk.brokers_needed == math.ceil(240 * GB / (70 * GB)) == 4
    findings = [f for f in r.findings if f.rule == "disk_use"]
    assert len(findings) == 3 and all("Kafka's data needs 4 brokers (today 3): add brokers" in f.message
                                      for f in findings)
    brokers = r.recommendation("brokers")
    assert brokers.value == 4 and brokers.inputs["add"] == 1 and "today 3: add 1" in brokers.message
    assert r.verdict.startswith("Add brokers:") and "add 1." in r.verdict


def test_one_full_disk_while_the_others_have_room_says_rebalance() -> None:
    from dataclasses import replace

    c = cluster(t=1.0, offsets={0: 1, 1: 1, 2: 1}, sizes={0: 40 * GB, 1: 1 * GB, 2: 40 * GB})  # broker 1: 80 GB
    used = c.bytes_per_broker()
    c = replace(c, brokers=tuple(replace(b, disk_usable_bytes=100 * GB - used[b.id]) for b in c.brokers))
    r = review(c)
    assert r.disk.action == "rebalance" and r.disk.brokers_needed == 3
    [finding] = [f for f in r.findings if f.rule == "disk_use"]
    assert finding.subject == "broker 1" and "rebalance (kafka_reassign operation=rebalance)" in finding.message
    brokers = r.recommendation("brokers")
    assert brokers.inputs["add"] == 0 and "Rebalance: broker 1 above 70%" in brokers.message


def test_disks_with_room_make_no_finding_and_brokers_are_enough() -> None:
    r = review(sized(cluster(t=1.0, offsets={0: 1, 1: 1, 2: 1}), 1 * GB))
    assert r.disk.action == "ok" and "disk_use" not in r.rules_fired()
    assert r.verdict.startswith("Brokers and disks are enough") and "today 3: enough" in r.recommendation("brokers").message
    assert review(cluster(t=1.0, offsets={0: 1}, disk=None)).disk is None  # no disk report, no verdict


def test_kafkaops_own_dead_letter_topics_and_groups_are_no_finding_and_no_lag() -> None:
    """A migration left orders.v2, its empty orders.v2.dlq (1 partition) and a backfill marker group: the
    review says nothing of the last two, while an operator's payments.dlq (no payments topic) is reviewed."""
    v2 = tuple(PartitionAssignment("orders.v2", p, (1 + p,), 1 + p, (), 0, n) for p, n in enumerate((900, 50, 50)))
    extra = (*v2, PartitionAssignment("orders.v2.dlq", 0, (1,), 1, (), 0, 0),
             PartitionAssignment("payments.dlq", 0, (1,), 1, (), 0, 5))
    marker = group("kafkaops-backfill-orders.v2-1a2b", 0, {0: (0, 10)}, topic="orders")
    reader = group("orders.readers", 1, {0: (5, 10)}, topic="orders")
    result = review(cluster(t=1.0, offsets={0: 10, 1: 10, 2: 10}, extra=extra, groups=(marker, reader)))
    subjects = {f.subject for f in result.findings}
    assert "topic payments.dlq" in subjects  # 1 partition over 3 brokers, as for any topic of the operator's
    assert not {s for s in subjects if "orders.v2.dlq" in s or "kafkaops-" in s}, subjects
    assert set(result.group_lag) == {"orders.readers"} and {x.group for x in result.lag} == {"orders.readers"}
    hot = [f for f in result.findings if f.rule == "hot_partition"]
    assert [f.subject for f in hot] == ["orders.v2-0"] and "(900 vs mean 333.3)" in hot[0].message


# -- the brokers' load in the review (kafkaops.capacity.load) ---------------------------------------------------

def _load(cpu: dict[int, float], *, steps: int = 30) -> "capacity.LoadWindow":
    start, step = 1_764_403_200.0, 60.0
    flat = lambda v: tuple((start + k * step, v) for k in range(steps))  # noqa: E731
    return capacity.LoadWindow(start, start + (steps - 1) * step, step,
                               {"cpu": {f"broker {b}": flat(v) for b, v in cpu.items()},
                                "bytes_in": {f"broker {b}": flat(5e6) for b in cpu},
                                "bytes_out": {f"broker {b}": flat(8e6) for b in cpu},
                                "handler_idle": {f"broker {b}": flat(0.9) for b in cpu},
                                "produce_p99_ms": {f"broker {b}": flat(12.0) for b in cpu},
                                "under_min_isr": {f"broker {b}": flat(0.0) for b in cpu}})


def test_cpu_past_its_limit_turns_enough_brokers_into_add_brokers_in_one_verdict() -> None:
    c = cluster(t=0.0, offsets={p: 0 for p in range(6)}, sizes={p: GB for p in range(6)})
    calm = review(c, load=_load({1: 0.30, 2: 0.35, 3: 0.30}))
    assert "cpu" not in calm.rules_fired() and calm.recommendation("brokers").inputs["add"] == 0
    assert calm.verdict == calm.disk.text and calm.verdict.startswith("Brokers and disks are enough")
    assert calm.verdict_ok and calm.verdict_action == "ok"
    busy = review(c, load=_load({1: 0.90, 2: 0.85, 3: 0.88}))
    rec = busy.recommendation("brokers")
    assert rec.value == math.ceil((0.90 + 0.85 + 0.88) / 0.70) == 4 and rec.inputs["add"] == 1
    assert rec.inputs["largest"] == ["CPU"] and "by CPU ceil(2.63 / 0.7) = 4" in rec.message
    assert busy.verdict.startswith("Add brokers: the CPU needs 4 broker(s), today 3: add 1 "), busy.verdict
    assert (busy.verdict_action, busy.verdict_ok) == ("add_brokers", False)
    assert sorted(f.subject for f in busy.findings if f.rule == "cpu") == ["broker 1", "broker 2", "broker 3"]
    assert busy.skipped == {"network": capacity_load.NO_NETWORK_CAPACITY}  # no capacity stated: named, not guessed
    assert capacity.Review.from_dict(busy.to_dict()) == busy


def test_one_hot_broker_among_even_replicas_says_rebalance_not_add() -> None:
    c = cluster(t=0.0, offsets={p: 0 for p in range(6)}, sizes={p: GB for p in range(6)})
    r = review(c, load=_load({1: 0.20, 2: 0.22, 3: 0.65}))
    assert "hot_broker" in r.rules_fired() and r.recommendation("brokers").inputs["add"] == 0
    assert r.verdict.startswith("Rebalance: broker 3 (hot broker) is past its load limits"), r.verdict


def test_one_broker_past_its_cpu_limit_while_the_others_have_room_says_rebalance_never_enough() -> None:
    c = cluster(t=0.0, offsets={p: 0 for p in range(6)}, sizes={p: GB for p in range(6)})
    r = review(c, load=_load({1: 0.76, 2: 0.55, 3: 0.45}))  # 1.76 / 0.7: 3 brokers are enough
    assert r.recommendation("brokers").inputs["add"] == 0 and [f.subject for f in r.findings if f.rule == "cpu"] == [
        "broker 1"]
    assert r.verdict.startswith("Rebalance: broker 1 (cpu) is past its load limits while the other brokers have "
                                "room"), r.verdict
    assert "Brokers and disks are enough" not in r.verdict and not r.verdict_ok


def test_every_broker_past_a_latency_limit_with_room_everywhere_says_look_into_the_brokers() -> None:
    c = cluster(t=0.0, offsets={p: 0 for p in range(6)}, sizes={p: GB for p in range(6)})
    window = _load({1: 0.3, 2: 0.3, 3: 0.3})
    slow = {b: tuple((t, 500.0) for t, _ in pts) for b, pts in window.indicators["produce_p99_ms"].items()}
    r = review(c, load=replace(window, indicators={**window.indicators, "produce_p99_ms": slow}))
    assert r.verdict.startswith("Look into the brokers: every broker is past a load limit (broker 1 (produce p99)"), \
        r.verdict


def test_a_review_without_prometheus_names_every_load_rule_it_skipped() -> None:
    c = cluster(t=0.0, offsets={0: 0}, sizes={0: GB})
    none = capacity.LoadWindow(0.0, 3600.0, 15.0, {}, {i: "no Prometheus: no connection" for i in
                                                       ("cpu", "bytes_in", "bytes_out", "handler_idle",
                                                        "produce_p99_ms", "under_min_isr")})
    r = review(c, load=none)
    assert set(r.skipped) == set(capacity_load.RULES) and all("no Prometheus" in why for why in r.skipped.values())
    assert r.recommendation("brokers").inputs["by_cpu"] is None and r.verdict == r.disk.text


def test_brokers_prometheus_does_not_show_are_named_and_every_broker_means_every_one_it_shows() -> None:
    """A cluster of 3 whose broker 3 is not scraped (added since Prometheus' targets were written): a finding names
    it, the needs say they are a floor, and the verdict never says "every broker" of the two it saw."""
    c = cluster(t=0.0, offsets={p: 0 for p in range(6)}, sizes={p: GB for p in range(6)})
    window = _load({1: 0.3, 2: 0.3})
    slow = {b: tuple((t, 500.0) for t, _ in pts) for b, pts in window.indicators["produce_p99_ms"].items()}
    r = review(c, load=replace(window, indicators={**window.indicators, "produce_p99_ms": slow}))
    [unseen] = [f for f in r.findings if f.rule == "load_unobserved"]
    assert unseen.subject == "broker 3" and "no load series in Prometheus" in unseen.message
    assert "kafka_broker_jmx_exporter" in unseen.message and "count only the brokers seen" in unseen.message
    assert r.verdict.startswith("Look into the brokers: every broker Prometheus shows (2 of 3) is past a load limit"), \
        r.verdict
    assert "Not counted in the load: broker 3 (no series in Prometheus" in r.verdict
    assert "The brokers together are enough for the load Prometheus shows: " in r.verdict, r.verdict
    rec = r.recommendation("brokers")
    assert rec.inputs["load"]["brokers"] == 3 and rec.inputs["load"]["cpu_brokers_measured"] == 2
    assert "(at least: 2 of 3 brokers measured, the others' load unknown)" in rec.message
    # all seen: no such finding, no floor, and "every broker" is every broker
    whole = review(c, load=replace(_load({1: 0.3, 2: 0.3, 3: 0.3}), indicators={
        **_load({1: 0.3, 2: 0.3, 3: 0.3}).indicators,
        "produce_p99_ms": {f"broker {b}": tuple((t, 500.0) for t, _ in pts) for b, pts in
                           enumerate(_load({1: 0.3, 2: 0.3, 3: 0.3}).indicators["produce_p99_ms"].values(), 1)}}))
    assert "load_unobserved" not in whole.rules_fired() and "at least" not in whole.recommendation("brokers").message
    assert whole.verdict.startswith("Look into the brokers: every broker is past"), whole.verdict
    # nothing read at all: every rule is skipped with why, and no broker is called unobserved
    blind = review(c, load=capacity.LoadWindow(0.0, 60.0, 15.0, {}, {"cpu": "no Prometheus"}))
    assert "load_unobserved" not in blind.rules_fired()
