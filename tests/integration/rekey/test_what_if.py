"""The capacity review's key-skew what-if against a real migration of the same data (issue 31): a zipf-keyed
topic of 6 partitions, sampled as the review samples it (kafkaops.capacity.skew.sample_offsets, weighted by what
each partition stores), predicts max/mean records per partition at 12 partitions; the rekey backfill then
copies the topic into 12 partitions, and the copy's real max/mean is within 15 % of the prediction. The
sample's "now" is the stored ratio within sampling error."""
from __future__ import annotations

import pytest

from kafkaops.capacity import skew
from kafkaops.cli import datagen
from kafkaops.platform import provision
from kafkaops.platform.kafka import connection, metadata, records, topics
from kafkaops.rekey.backfill import BackfillPlan
from tests.conftest import committed_copy

pytestmark = pytest.mark.integration

TOPIC = "whatif.orders"
RECORDS, SAMPLE, NOW, NEW = 24_000, 8_000, 6, 12


def max_mean(per_partition: list[int]) -> float:
    return max(per_partition) / (sum(per_partition) / len(per_partition))


def test_the_key_skew_what_if_matches_a_real_migration_of_the_same_data(rekey_cluster: provision.ClusterSpec,
                                                                       spark) -> None:
    from spark_apps import rekey_backfill

    config = {"bootstrap.servers": rekey_cluster.bootstrap}
    with connection.connect(rekey_cluster.bootstrap) as conn:
        topics.create_topic(conn, TOPIC, NOW, 1)
    datagen.produce(config, TOPIC, datagen.DatagenSpec(records=RECORDS, keys=3000, skew="zipf", zipf_s=1.1,
                                                       record_bytes=64, seed=31))
    with connection.connect(rekey_cluster.bootstrap) as conn:
        cluster = metadata.snapshot(conn, topics=[TOPIC], sizes=False, groups=False)
    stored = [(p.end_offset or 0) - (p.start_offset or 0) for p in cluster.partitions_of(TOPIC)]
    assert sum(stored) == RECORDS and max_mean(stored) > 1.3, stored  # skewed, as the test needs

    # the review's sample and its what-if
    start, end = skew.sample_offsets(cluster, TOPIC, SAMPLE)
    sample = [(r.key, r.value, r.partition)
              for r in records.read_ranges(config, TOPIC, {p: (start[p], end[p]) for p in end})]
    assert len(sample) == SAMPLE
    result = skew.analyze(TOPIC, sample, partitions=NOW, candidates=(NEW,))
    assert result["now"]["max_mean_ratio"] == pytest.approx(max_mean(stored), rel=0.10), (result["now"], stored)
    predicted = result["what_if"][str(NEW)]["max_mean_ratio"]

    # the real migration of the same data into 12 partitions
    plan = BackfillPlan(TOPIC, tuple((p, s, e) for p, (s, e) in sorted(records.end_offsets(config, TOPIC).items())),
                        f"{TOPIC}.v2", NEW, "record_key")
    with connection.connect(rekey_cluster.bootstrap) as conn:
        topics.create_topic(conn, plan.target_topic, NEW, 1)
        topics.create_topic(conn, plan.dead_letter_topic, 1, 1)
    assert rekey_backfill.run(spark, plan, rekey_cluster.bootstrap).written == RECORDS
    copied, _ = committed_copy(config, plan.target_topic)
    per_partition = [0] * NEW
    for r in copied:
        per_partition[r.partition] += 1
    observed = max_mean(per_partition)
    assert sum(per_partition) == RECORDS
    print(f"\nkey-skew what-if at {NEW} partitions: max/mean {predicted:.2f} predicted, {observed:.2f} after the "
          f"migration; now {result['now']['max_mean_ratio']:.2f} sampled, {max_mean(stored):.2f} stored")
    assert abs(predicted / observed - 1) <= 0.15, (
        f"the what-if predicted max/mean {predicted:.2f} at {NEW} partitions; the migration gave {observed:.2f} "
        f"({per_partition})")
