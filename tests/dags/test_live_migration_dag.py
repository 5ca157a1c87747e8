"""kafka_partition_increase as a live migration (quiesce=manual and acl), 3 -> 12 partitions, while keyed
producers write ~2,000 records/s and a consumer group reads through the switch
(kafkaops.testing.traffic.MigrationTraffic, with kafkaops.testing.rehearsal.StandInOperator doing what the
run's record asks). Afterwards, from the consumer's own log: nothing lost, duplicated or out of
per-key order, for the record key (the direct copy, producers stopped by the operator) and a value
field whose values span source partitions (``field:customer``: the merged copy, producers quiesced
by a DENY Write ACL on a cluster with an authorizer). Also: a producer the fence does not stop abandons
the run cleanly, named, the source staying authoritative."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkaops.airflow import pages
from kafkaops.testing import clusters, fence
from kafkaops.platform import provision, state, store
from kafkaops.platform.kafka import connection, metadata, topics
from kafkaops.rekey import migration
from kafkaops.rekey.records import LiveRecord
from kafkaops.testing.rehearsal import StandInOperator
from kafkaops.testing.traffic import MigrationReport, MigrationTraffic
from tests.conftest import wait_for
from tests.dags.conftest import kafka_default_connection, marker_groups, run_partition_increase

pytestmark = pytest.mark.integration

CAPACITY_DAG = "kafka_capacity_review"  # the records a partition increase reads its capacity advice from
#: a short protocol: one catch-up pass (the budget is spent after it), a 3 s quiet period
LIVE = dict(mode="migrate", new_partition_count=12, dry_run=False, approval="auto_approve", quiesce="manual",
            catch_up_lag_records=2000, catch_up_budget_s=300, quiet_s=3, quiesce_timeout_s=120, switch_timeout_s=120)


@pytest.fixture(scope="module")
def cluster(one_broker_cluster: provision.ClusterSpec) -> Iterator[provision.ClusterSpec]:
    with kafka_default_connection(one_broker_cluster.bootstrap):
        yield one_broker_cluster


def test_a_live_migration_by_the_record_key_loses_duplicates_and_reorders_nothing(dagbag, cluster, tmp_path) -> None:
    topic = "live.record_key"
    config = {"bootstrap.servers": cluster.bootstrap}
    with connection.connect(config) as conn:
        topics.create_topic(conn, topic, 3, 1)
        cluster_id = metadata.describe_cluster(conn)[0]
    # a capacity review of this cluster that recommended 6 partitions for the topic: shown at the approval;
    # a newer one of another cluster (the same topic name there) is not
    reviews = store.current()
    for run_id, of, count in (("review-live", cluster_id, 6), ("review-elsewhere", "another-cluster", 48)):
        reviews.start_operation(CAPACITY_DAG, run_id, kind="capacity_review", triggered_by="cron", params={})
        recommended = [{"kind": "partitions", "subject": f"topic {topic}", "value": count,
                        "message": f"topic {topic}: {count} partitions"}]
        reviews.append_event(CAPACITY_DAG, run_id, "note",
                             {"text": "capacity report", "cluster_id": of, "recommended": recommended})
        reviews.update_operation(CAPACITY_DAG, run_id, state="finished", outcome="success")
    with MigrationTraffic(config, topic, group=f"{topic}.readers", rate_per_s=2000) as traffic:
        with StandInOperator(traffic, "kafka_partition_increase") as operator:
            dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="record_key",
                                                     cutover_groups="late.readers", **LIVE)
        assert operator.error is None, operator.error
        report = traffic.finish()
    assert str(dag_run.state) == "success", record
    assert [a for a, _ in operator.done] == ["stopped", "switched"]
    assert report.ok and (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), str(report)
    quiesced = next(n["quiesce"] for n in record["notes"] if "quiesce" in n)
    assert quiesced["how"] == "manual" and quiesced["settled_at"] > quiesced["asked_at"]
    assert_live_record(config, topic, record, report)
    assert "recommends 6 partitions for live.record_key" in record["plan"]["summary"]
    assert "48 partitions" not in record["plan"]["summary"]
    assert "you chose 12: allowed, but it is more than the review's count" in record["plan"]["summary"]
    # a named group that never committed on the source: from the start of the target, and said so
    late = next(n["offset_translation"] for n in record["notes"] if "offset_translation" in n)["late.readers"]
    assert late["stated"].startswith("no committed offset on the source") and late["committed_for"] == "late.readers"
    with connection.connect(config) as conn:
        snap = metadata.snapshot(conn, topics=[f"{topic}.v2"], sizes=False)
    starts = {str(p.partition): p.start_offset or 0 for p in snap.partitions_of(f"{topic}.v2")}
    assert late["target"] == starts
    assert {x.partition: x.committed for g in snap.groups if g.group_id == "late.readers" for x in g.partitions} \
        == {int(k): v for k, v in starts.items()}
    # the operator's view: the record page tells the cut-over as tables, in UTC, with units
    page = pages.render_record(state.read_record("kafka_partition_increase", dag_run.run_id))
    (tmp_path / "record.html").write_text(page)
    for shown in ("Live cut-over", "the source was then observed still", "write-unavailable window",
                  "confirmed by param approval=auto_approve", f"{topic}.readers", "catch-up", "final (after the quiesce)",
                  "lag before (records)", "UTC"):
        assert shown in page, shown


def assert_live_record(config: dict, topic: str, record: dict, report: MigrationReport) -> None:
    """What the operation record of a successful live migration of ``topic`` must show."""
    assert record["outcome"] == "success", record
    target = f"{topic}.v2"
    assert report.received_by_topic[topic] > 0 and report.received_by_topic[target] > 0, str(report)
    assert [(g["gate"], g["ok"]) for g in record["gates"]] == [("preflight", True), ("backfill", True)]
    # the backfill gate's Data Docs, stored after the switch was asked for (outside the window), and linked
    docs = record["gates"][1]["docs_path"]
    assert docs and store.current().artifact(docs) is not None, record["gates"]
    notes = record["notes"]
    catch_up = [n["catch_up"] for n in notes if "catch_up" in n]
    assert len(catch_up) == 1 and catch_up[0]["written"] > 0  # records produced during the backfill
    cut = next(n["offset_translation"] for n in notes if "offset_translation" in n)
    assert cut[f"{topic}.readers"]["committed_for"] == f"{topic}.readers"
    assert cut[f"{topic}.readers"]["settled"] == "drained" and cut[f"{topic}.readers"]["redelivered"] == 0
    observed = next(n["switch_observed"] for n in notes if "switch_observed" in n)
    # the window from the records' timestamps, as the producers saw it from their acks
    assert observed["write_window_s"] > 0 and abs(observed["write_window_s"] - report.write_window_s) < 5, \
        (observed, report.write_window_s)
    decision = next(n["switch_decision"] for n in notes if "switch_decision" in n)
    assert decision == {"approved": True, "by": "param approval=auto_approve"}
    # where the window went, from the record's own times: the phases add up to it
    phases = LiveRecord.of(notes).window_phases()
    assert phases and abs(sum(s for _, s in phases) - observed["write_window_s"]) < 0.1, (phases, observed)
    print(f"{topic}: write window {observed['write_window_s']:.2f} s (harness {report.write_window_s:.2f} s): "
          + ", ".join(f"{name} {s:.2f} s" for name, s in phases))
    tail = next(n["catch_up"] for n in notes if "catch_up" in n)
    assert tail["mode"] == "tail" and tail["written"] > 0
    with connection.connect(config) as conn:
        assert len(metadata.snapshot(conn, topics=[target], sizes=False, groups=False).partitions) == 12
    # the switch confirmed (past the rollback point): the backfill's and the tail's marker groups are deleted
    [deleted] = [n for n in notes if n.get("markers_deleted")]
    assert any(g.endswith("-tail") for g in deleted["deleted"]) and not deleted["left"], deleted
    assert marker_groups(config, target) == []


def test_the_acl_quiesce_on_a_cluster_without_an_authorizer_is_refused_before_any_copy(dagbag, cluster) -> None:
    topic = "live.no-authorizer"
    config = {"bootstrap.servers": cluster.bootstrap}
    with connection.connect(config) as conn:
        topics.create_topic(conn, topic, 3, 1)
    dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="record_key",
                                             **{**LIVE, "quiesce": "acl", "quiesce_principals": f"User:{APP}"})
    assert str(dag_run.state) == "failed" and record["outcome"] == "refused", record  # before anything changed
    assert record["outcome_reason"].startswith("refused at preflight_gate, before anything changed: ConfigError")
    by_name = {s["name"]: s for s in record["steps"]}
    assert by_name["preflight_gate"]["status"] == "failed", record["steps"]
    error = by_name["preflight_gate"]["error"]
    assert "quiesce=acl cannot stop the producers of live.no-authorizer" in error and "have no authorizer" in error
    assert "Nothing was changed" in error and "quiesce=manual" in error
    assert not {"plan", "execute", "create_target"} & {n for n, s in by_name.items() if s["status"] == "success"}
    assert not any("ACL" in n.get("text", "") and "could NOT" in n.get("text", "") for n in record["notes"])
    with connection.connect(config) as conn:
        held = conn.admin.list_topics(timeout=10).topics
    assert f"{topic}.v2" not in held and topic in held  # no copy began


ADMIN, APP = "kafkaops-admin", "orders-app"


@pytest.fixture(scope="module")
def acl_cluster(airflow_db) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """One broker with an authorizer (StandardAuthorizer) on a SASL_PLAINTEXT listener: kafkaops' login
    is a super user, the application's (``orders-app``) may use topics and groups named ``live.*``.
    Yields the librdkafka config of kafkaops and of the application."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    with clusters.authorizer_cluster("kafkaops-acl-", admin=ADMIN, users=[APP], brokers=1, controllers=1) as (
            spec, logins):
        admin_config = logins[ADMIN]
        with connection.connect(admin_config) as conn:
            grants = [AclBinding(kind, "live.", ResourcePatternType.PREFIXED, f"User:{APP}", "*", AclOperation.ALL,
                                 AclPermissionType.ALLOW) for kind in (ResourceType.TOPIC, ResourceType.GROUP)]
            for future in conn.admin.create_acls(grants).values():
                future.result(30)
            topics.create_topic(conn, "live.probe", 1, 1)
        # the grant is the controller's at once, the broker's a moment later: until then the application is refused
        wait_for(lambda: fence.can_write(logins[APP], "live.probe"), timeout=60, what=f"{APP}'s grants in effect")
        with kafka_default_connection(spec.bootstrap, admin_config):
            yield admin_config, logins[APP]


def test_a_live_migration_by_a_value_field_with_the_acl_quiesce(dagbag, acl_cluster) -> None:
    """The merged copy (customers span source partitions) under traffic, the producers quiesced by a DENY
    Write ACL: their sends to the source are refused (unacknowledged, never lost), the ACL is gone after."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType

    admin_config, app_config = acl_cluster
    topic = "live.field.customer"
    with connection.connect(admin_config) as conn:
        topics.create_topic(conn, topic, 3, 1)
    with MigrationTraffic(app_config, topic, group=f"{topic}.readers", rate_per_s=2000) as traffic:
        with StandInOperator(traffic, "kafka_partition_increase", stop_producers=False) as operator:
            dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="field:customer",
                                                     **{**LIVE, "quiesce": "acl",
                                                        "quiesce_principals": f"User:{APP}"})
        assert operator.error is None, operator.error
        report = traffic.finish()
    assert str(dag_run.state) == "success", record
    assert (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), str(report)
    assert report.unacknowledged > 0 and "AUTHORIZATION" in " ".join(traffic.failures[:1]).upper(), str(report)
    actions = [n.get("action") for n in record["notes"] if n.get("action")]
    assert actions.index("writes_denied") < actions.index("stop_producers") < actions.index("switch") \
        < actions.index("writes_allowed")
    assert next(n["quiesce"] for n in record["notes"] if "quiesce" in n)["how"] == "acl"
    assert next(n for n in record["notes"] if "run" in n and n["run"])["run"]["mode"] == "merged"
    assert_live_record(admin_config, topic, record, report)
    with connection.connect(admin_config) as conn:  # the DENY is gone; the application's grants stay
        left = conn.admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                         AclOperation.ANY, AclPermissionType.DENY)).result(30)
    assert left == []


def test_a_principal_the_acl_does_not_name_abandons_the_migration_named_with_what_it_wrote(dagbag, acl_cluster) -> None:
    """kafkaops' own login (not named in ``quiesce_principals``) keeps writing through the fence, a producer
    that never stops: the quiesce ends abandoned at its timeout, the record names the records written since
    the DENY and the principals it names, the DENY is removed, the target deleted, and the source stays
    authoritative with every acknowledged record in it (manual's "producers did not stop": unit-tested)."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType

    admin_config, app_config = acl_cluster
    topic = "live.stray"
    with connection.connect(admin_config) as conn:
        topics.create_topic(conn, topic, 3, 1)
    with MigrationTraffic(app_config, topic, group=f"{topic}.readers", rate_per_s=500) as traffic, \
            fence.LibrdkafkaProducer(admin_config, topic, rate_per_s=20, prefix="stray") as stray:
        dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="record_key",
                                                 **{**LIVE, "quiesce": "acl", "quiesce_principals": f"User:{APP}",
                                                    "quiesce_timeout_s": 8, "catch_up_lag_records": 10**9,
                                                    "delete_target_on_abandon": True})
        report = traffic.finish()
    assert str(dag_run.state) == "failed" and record["outcome"] == "abandoned", record
    reason = record["outcome_reason"]
    assert "quiesce failed" in reason and "since the DENY Write ACL went up, in partition(s)" in reason, reason
    assert f"a principal the DENY Write ACL does not name (it names User:{APP}) still writes to it" in reason, reason
    assert not stray.sends.refused and len(stray.sends.acked) > 0  # the fence never stopped it
    held = fence.topic_values(admin_config, topic)
    assert all(held[v] == 1 for _, v in stray.sends.acked), "an acknowledged stray record is not in the source once"
    assert (report.lost, report.duplicated, report.out_of_order) == (0, 0, 0), str(report)
    with connection.connect(admin_config) as conn:
        left = conn.admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                         AclOperation.ANY, AclPermissionType.DENY)).result(30)
        names = conn.admin.list_topics(timeout=10).topics
    assert left == [] and f"{topic}.v2" not in names and topic in names
    # rolled back before the switch: the backfill's marker groups stay (what a rerun resumes from)
    assert marker_groups(admin_config, f"{topic}.v2") and not any(n.get("markers_deleted") for n in record["notes"])


@pytest.mark.parametrize("mode", ["migrate", "in_place"])
def test_a_dry_run_plans_and_changes_nothing(dagbag, cluster, mode) -> None:
    """Dry run is the default: planned (and for a live migration nothing asked of the operator), no step
    after the approval runs, nothing is created."""
    topic = f"live.dry.{mode}"
    with connection.connect({"bootstrap.servers": cluster.bootstrap}) as conn:
        topics.create_topic(conn, topic, 3, 1)
    with kafka_default_connection(cluster.bootstrap):  # whichever module fixture set the connection last
        dag_run, record = run_partition_increase(dagbag, topic=topic, key_rule="record_key",
                                                 **{**LIVE, "mode": mode, "dry_run": True,
                                                    "accept_ordering_break": True,
                                                    "quiesce": "manual" if mode == "migrate" else "none"})
    assert str(dag_run.state) == "success" and record["outcome"] == "dry_run", record
    assert not [s for s in record["steps"] if s["status"] == "failed"], record["steps"]
    assert not [n for n in record["notes"] if n.get("action")]  # nobody was asked to stop anything
    with connection.connect({"bootstrap.servers": cluster.bootstrap}) as conn:
        held = conn.admin.list_topics(timeout=10).topics
        assert f"{topic}.v2" not in held and len(held[topic].partitions) == 3


def test_the_acl_check_passes_for_a_principal_that_may_alter_acls_and_names_one_that_may_not(acl_cluster) -> None:
    admin_config, app_config = acl_cluster
    with connection.connect(admin_config) as conn:
        assert migration.acl_problem(conn) is None  # a super user: describe and alter
    with connection.connect(app_config) as conn:
        problem = migration.acl_problem(conn)
    assert problem is not None and "may not read the brokers' configs" in problem, problem
    assert "it needs DescribeConfigs, Describe and Alter on the Cluster resource" in problem
