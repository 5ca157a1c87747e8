"""What a running producer sees under the live migration's ACL fence (``quiesce=acl``: a DENY Write ACL on the
source for the application's principal), measured with Kafka's own Java producer and librdkafka's, each with
acks=all and idempotence (kafkaops.testing.fence). docs/live-migration.md ("What producers see") says what
this finds; the test keeps it true:

* every send during the fence fails at once with TOPIC_AUTHORIZATION_FAILED, which neither client retries:
  the Java producer's callback gets a TopicAuthorizationException; librdkafka's delivery report gets the
  error for what was in flight, and from then on ``produce()`` itself raises it (an application that does
  not catch it stops there);
* the producer itself survives: once the ACL is gone, its next sends are acknowledged, no restart needed;
* no record is accepted and left behind: the topic holds exactly the acknowledged records, once each, and
  none of the refused ones;
* a producer with acks=0 hears nothing: what it sends under the fence is dropped without its knowing.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from kafkaops.platform.kafka import acls, connection, topics
from kafkaops.testing import clusters, fence
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

ADMIN, APP = "kafkaops-admin", "orders-app"
TOPIC = "fenced.orders"
FENCE_S = 6.0


@pytest.fixture(scope="module")
def fence_cluster() -> Iterator[dict[str, dict[str, str]]]:
    """One broker with an authorizer; ``orders-app`` may write and describe ``fenced.*`` (and use its
    producer id: IdempotentWrite on the cluster is implied by Write on a topic)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    with clusters.authorizer_cluster("kafkaops-fence-", admin=ADMIN, users=[APP], brokers=1, controllers=1,
                                     extra_config=clusters.TEST_BROKER_CONFIG) as (_, logins):
        with connection.connect(logins[ADMIN]) as conn:
            topics.create_topic(conn, TOPIC, 3, 1)
            grant = AclBinding(ResourceType.TOPIC, "fenced.", ResourcePatternType.PREFIXED, f"User:{APP}", "*",
                               AclOperation.ALL, AclPermissionType.ALLOW)
            for future in conn.admin.create_acls([grant]).values():
                future.result(30)
        # the grant is the controller's at once, the broker's a moment later: until then the application is refused
        wait_for(lambda: fence.can_write(logins[APP], TOPIC), timeout=60, what=f"{APP}'s grant on {TOPIC} in effect")
        yield logins


def test_producers_under_the_acl_fence_get_refusals_survive_it_and_leave_nothing_behind(fence_cluster) -> None:
    admin, app = fence_cluster[ADMIN], fence_cluster[APP]
    with fence.JavaProducer(app, TOPIC, rate_per_s=200) as java, \
            fence.LibrdkafkaProducer(app, TOPIC, rate_per_s=200) as rdk, \
            fence.LibrdkafkaProducer(app, TOPIC, rate_per_s=200, acks="0", prefix="acks0") as blind:
        wait_for(lambda: java.sends.acked_after(0) >= 200 and rdk.sends.acked_after(0) >= 200, timeout=120,
                 what=f"both producers writing to {TOPIC} (java said: {java.other[-5:]})")
        with connection.connect(admin) as conn:
            denied_at = time.time()
            assert acls.deny_writes(conn, TOPIC, [f"User:{APP}"]) == 1
            try:
                wait_for(lambda: java.sends.refused and rdk.sends.refused, timeout=60,
                         what="both producers' first refusal under the DENY Write ACL")
                refused_from = min(t for s in (java.sends, rdk.sends) for t, _, _ in s.refused)
                time.sleep(FENCE_S)
            finally:
                allowed_at = time.time()
                acls.allow_writes(conn, TOPIC, [f"User:{APP}"])
        wait_for(lambda: java.sends.acked_after(allowed_at + 1) >= 100 and rdk.sends.acked_after(allowed_at + 1) >= 100,
                 timeout=120, what="both producers acknowledged again after the ACL's removal")
        assert java.alive(), f"the Java producer stopped under the fence: {java.other[-10:]}"
    assert rdk.left == 0, f"{rdk.left} librdkafka records still unacknowledged at its close"

    held = fence.topic_values(admin, TOPIC)
    for sends in (java.sends, rdk.sends):
        acked, refused = sends.values()
        errors = sends.errors()
        print(f"\n{sends.client}: {len(acked):,} acknowledged, {len(refused):,} refused during "
              f"{allowed_at - denied_at:.1f} s of fence ({dict(errors)}); the first refusal "
              f"{min(t for t, _, _ in sends.refused) - denied_at:.2f} s after the ACL was created")
        seen = ({"TopicAuthorizationException"} if sends is java.sends else  # in the send's callback
                {"TOPIC_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED (raised by produce)"})  # or by produce()
        assert errors and set(errors) <= seen, errors
        assert refused and not refused & acked, (len(refused), sorted(refused & acked)[:5])
        mine = {v: n for v, n in held.items() if v in acked | refused}
        assert set(mine) == acked, (f"{sends.client}: acknowledged but not in {TOPIC}: {sorted(acked - set(mine))[:5]}; "
                                    f"refused but in {TOPIC}: {sorted(set(mine) - acked)[:5]}")
        assert max(mine.values()) == 1, f"{sends.client}: records in {TOPIC} twice"
        during = [t for t, _, _ in sends.refused]
        assert min(during) >= denied_at - 1 and max(during) <= allowed_at + 5, (denied_at, allowed_at, during[:3])
    assert refused_from - denied_at < 30

    # acks=0: no refusal reaches the application, and what it sent under the fence is not in the topic
    sent = {v for t, v in blind.sends.acked if denied_at + 1 < t < allowed_at}
    assert not blind.sends.refused and sent, (blind.sends.errors(), len(sent))
    dropped = sent - set(held)
    print(f"{blind.sends.client}: {len(sent):,} sent under the fence with no error, {len(dropped):,} of them dropped")
    assert len(dropped) > len(sent) // 2, (len(dropped), len(sent))
