"""kafka_partition_increase as a live migration (quiesce=manual), 3 -> 12 partitions, while keyed
producers write ~2,000 records/s and a consumer group reads through the switch
(kafkaops.platform.traffic.MigrationTraffic, with kafkaops.platform.rehearsal.Operator doing what the
run's record asks). Afterwards, from the consumer's own log: nothing lost, duplicated or out of
per-key order, for the record key (the direct copy) and a value field whose values span source
partitions (``field:customer``: the merged copy). Also: producers that never stop abandon the run
cleanly, the source staying authoritative."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkaops.platform import admin, provision
from kafkaops.platform.rehearsal import Operator
from kafkaops.platform.traffic import MigrationTraffic
from tests.dags.conftest import kafka_default_connection, run_partition_increase

pytestmark = pytest.mark.integration

#: a short protocol: one catch-up pass (the budget is spent after it), a 3 s quiet period
LIVE = dict(mode="migrate", new_partition_count=12, dry_run=False, approval="auto_approve", quiesce="manual",
            catch_up_lag_records=0, catch_up_budget_s=1, quiet_s=3, quiesce_timeout_s=120, switch_timeout_s=120)


@pytest.fixture(scope="module")
def cluster(one_broker_cluster: provision.ClusterSpec) -> Iterator[provision.ClusterSpec]:
    with kafka_default_connection(one_broker_cluster.bootstrap):
        yield one_broker_cluster


@pytest.mark.parametrize("rule", ["record_key", "field:customer"])
def test_a_live_migration_loses_duplicates_and_reorders_nothing(dagbag, cluster, rule) -> None:
    topic = f"live.{rule.replace(':', '.')}"
    config = {"bootstrap.servers": cluster.bootstrap}
    with admin.connect(config) as conn:
        admin.create_topic(conn, topic, 3, 1)
    with MigrationTraffic(config, topic, group=f"{topic}.readers", rate_per_s=2000) as traffic:
        with Operator(traffic, "kafka_partition_increase") as operator:
            dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule=rule, **LIVE)
        assert operator.error is None, operator.error
        report = traffic.finish()
    assert str(dag_run.state) == "success", record
    assert record["outcome"] == "success", record
    assert [a for a, _ in operator.done] == ["stopped", "switched"]
    assert report.ok and (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), str(report)
    target = f"{topic}.v2"
    assert report.received_by_topic[topic] > 0 and report.received_by_topic[target] > 0, str(report)
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    notes = record["notes"]
    catch_up = [n["catch_up"] for n in notes if "catch_up" in n]
    assert len(catch_up) == 1 and catch_up[0]["written"] > 0  # records produced during the backfill
    quiesced = next(n["quiesce"] for n in notes if "quiesce" in n)
    assert quiesced["how"] == "manual" and quiesced["settled_at"] > quiesced["asked_at"]
    cut = next(n["offset_translation"] for n in notes if "offset_translation" in n)
    assert cut[f"{topic}.readers"]["committed_for"] == f"{topic}.readers"
    assert cut[f"{topic}.readers"]["settled"] == "drained" and cut[f"{topic}.readers"]["redelivered"] == 0
    observed = next(n["switch_observed"] for n in notes if "switch_observed" in n)
    # the window from the records' timestamps, as the producers saw it from their acks
    assert observed["write_window_s"] > 0 and abs(observed["write_window_s"] - report.write_window_s) < 5, \
        (observed, report.write_window_s)
    decision = next(n["switch_decision"] for n in notes if "switch_decision" in n)
    assert decision == {"approved": True, "by": "param approval=auto_approve"}
    with admin.connect(config) as conn:
        assert len(admin.snapshot(conn, topics=[target], sizes=False, groups=False).partitions) == 12


def test_producers_that_never_stop_abandon_the_migration(dagbag, cluster) -> None:
    topic = "live.unstoppable"
    config = {"bootstrap.servers": cluster.bootstrap}
    with admin.connect(config) as conn:
        admin.create_topic(conn, topic, 3, 1)
    with MigrationTraffic(config, topic, group=f"{topic}.readers", rate_per_s=500) as traffic:
        # nobody follows the record: the producers keep writing through the quiesce
        dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="record_key",
                                                 **{**LIVE, "quiesce_timeout_s": 8, "catch_up_budget_s": 1,
                                                    "delete_target_on_abandon": True})
        report = traffic.finish()
    assert record["outcome"] == "abandoned", record
    assert "end offsets still moved" in record["outcome_reason"] or "quiesce" in record["outcome_reason"]
    abandoned = next(n for n in record["notes"] if n.get("abandoned"))
    assert abandoned["target_deleted"] is True and f"{topic} stays authoritative" in abandoned["text"]
    assert report.ok and report.received_by_topic.get(f"{topic}.v2", 0) == 0  # the applications never left
    with admin.connect(config) as conn:
        topics = conn.admin.list_topics(timeout=10).topics
    assert f"{topic}.v2" not in topics and topic in topics
    assert str(dag_run.state) in ("failed", "success")
