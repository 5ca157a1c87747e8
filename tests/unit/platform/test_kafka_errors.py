"""Kafka errors become typed kafkaops errors by code and class (never by message text), and the one
retry policy asks again only after retriable ones. Pure: no broker, no network."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from kafka import errors as kerrors

from kafkaops.errors import KafkaOpsError, KafkaUnreachable, TopicExists, UnknownTopic
from kafkaops.platform.kafka import errors, offsets

CONN = SimpleNamespace(bootstrap="k1:9092", name="k1:9092", timeout_s=7.0, refused=None,
                       config={})  # what classify reads of a KafkaConnection


def confluent(code: int, reason: str | None = None) -> KafkaException:
    return KafkaException(KafkaError(code) if reason is None else KafkaError(code, reason))


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                                  KafkaError.REQUEST_TIMED_OUT, KafkaError._RESOLVE])
def test_no_answer_is_unreachable_and_not_asked_again(code: int) -> None:
    err = errors.classify(confluent(code), "the cluster description", CONN)
    name = KafkaError(code).name()
    assert type(err) is KafkaUnreachable and err.code == name and not err.retriable
    assert f"cannot reach Kafka at k1:9092 within 7 s while asking for the cluster description: {name}" in str(err)
    assert "check bootstrap.servers" in str(err)


def test_the_code_decides_not_the_message() -> None:
    # a misleading reason text changes nothing; a transport error with a harmless text is still one
    assert type(errors.classify(confluent(KafkaError.INVALID_CONFIG, "Timed out, Connection refused, "
                                         "UNKNOWN_TOPIC already exists"), "x", CONN)) is KafkaOpsError
    assert type(errors.classify(confluent(KafkaError._TRANSPORT, "something odd"), "x", CONN)) is KafkaUnreachable


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC])
def test_an_unknown_topic_is_typed_and_names_the_code(code: int) -> None:
    err = errors.classify(confluent(code), "the configs of topic orders", CONN)
    assert isinstance(err, UnknownTopic) and err.retriable  # metadata may lag behind a creation, as in Kafka
    assert KafkaError(code).name() in str(err) and "topic orders" in str(err)


def test_an_existing_topic_is_typed() -> None:
    err = errors.classify(confluent(KafkaError.TOPIC_ALREADY_EXISTS), "the creation of topic t", CONN)
    assert type(err) is TopicExists and "TOPIC_ALREADY_EXISTS" in str(err) and not err.retriable


def test_other_codes_are_refusals_retriable_when_the_cluster_state_passes() -> None:
    moving = errors.classify(confluent(KafkaError.NOT_COORDINATOR), "the offsets of group g", CONN)
    assert type(moving) is KafkaOpsError and moving.retriable and moving.code == "NOT_COORDINATOR"
    assert str(moving).startswith("Kafka refused the offsets of group g at k1:9092: NOT_COORDINATOR")
    refused = errors.classify(confluent(KafkaError.POLICY_VIOLATION), "a config change", CONN)
    assert type(refused) is KafkaOpsError and not refused.retriable and "POLICY_VIOLATION" in str(refused)
    # librdkafka's own retriable flag counts too
    flagged = errors.classify(KafkaException(KafkaError(KafkaError.POLICY_VIOLATION, retriable=True)), "x", CONN)
    assert flagged.retriable


def test_a_bare_kafka_error_and_a_future_timeout_are_classified() -> None:
    assert isinstance(errors.classify(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), "x", CONN), UnknownTopic)
    err = errors.classify(TimeoutError(), "the consumer groups", CONN)
    assert type(err) is KafkaUnreachable and "no answer from Kafka at k1:9092 within 7 s" in str(err)


def test_kafka_python_errors_are_classified_by_class() -> None:
    assert type(errors.classify(kerrors.KafkaConnectionError("boom"), "x", CONN)) is KafkaUnreachable
    assert type(errors.classify(kerrors.KafkaTimeoutError(), "x", CONN)) is KafkaUnreachable
    unknown = errors.classify(kerrors.UnknownTopicOrPartitionError(), "x", CONN)
    assert isinstance(unknown, UnknownTopic) and "UnknownTopicOrPartitionError (error code 3)" in str(unknown)
    broker = errors.classify(kerrors.UnknownBrokerIdError(4), "the log dirs", CONN)
    assert broker.retriable and "broker 4 is not in the client's metadata" in str(broker)
    leader = errors.classify(kerrors.LeaderNotAvailableError(), "x", CONN)
    assert type(leader) is KafkaOpsError and leader.retriable and leader.code == "LeaderNotAvailableError"
    gone = errors.classify(kerrors.NoReassignmentInProgressError(), "x", CONN)
    assert not gone.retriable
    other = errors.classify(ValueError("bad answer"), "the log dirs", CONN)
    assert type(other) is KafkaOpsError and "ValueError: bad answer" in str(other) and not other.retriable


def failing(error: KafkaOpsError, succeed_on: int | None = None):
    calls = []

    def call() -> str:
        calls.append(1)
        if succeed_on is not None and len(calls) >= succeed_on:
            return "ok"
        raise error
    return call, calls


def test_a_retriable_error_is_asked_again_until_the_attempts_run_out() -> None:
    error = errors.classify(confluent(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), "the offsets of group g", CONN)
    call, calls = failing(error)
    with pytest.raises(KafkaOpsError, match=r"COORDINATOR_LOAD_IN_PROGRESS.*gave up after 4 attempt\(s\)") as info:
        errors.retrying("the offsets of group g", attempts=4, first_wait_s=0, max_wait_s=0)(call)
    assert len(calls) == 4 and info.value is error


def test_a_retriable_error_that_clears_returns_the_answer() -> None:
    call, calls = failing(errors.classify(confluent(KafkaError.LEADER_NOT_AVAILABLE), "x", CONN), succeed_on=3)
    assert errors.retrying("x", attempts=5, first_wait_s=0, max_wait_s=0)(call) == "ok" and len(calls) == 3


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError.POLICY_VIOLATION, KafkaError.TOPIC_ALREADY_EXISTS])
def test_a_non_retriable_error_is_raised_at_once(code: int) -> None:
    error = errors.classify(confluent(code), "x", CONN)
    call, calls = failing(error)
    with pytest.raises(KafkaOpsError) as info:
        errors.retrying("x", attempts=5, first_wait_s=0, max_wait_s=0)(call)
    assert len(calls) == 1 and info.value is error and "gave up" not in str(error)


def test_other_exceptions_pass_through_untouched() -> None:
    calls = []

    def call() -> None:
        calls.append(1)
        raise RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        errors.retrying("x", attempts=5, first_wait_s=0, max_wait_s=0)(call)
    assert len(calls) == 1


def test_a_deadline_stops_a_metadata_wait() -> None:
    call, calls = failing(UnknownTopic("topic t does not exist"))
    with pytest.raises(UnknownTopic, match=r"gave up after \d+ attempt\(s\) in 0\.\d s"):
        errors.retrying("the metadata of t", attempts=None, deadline_s=0.2, first_wait_s=0.01, max_wait_s=0.02)(call)
    assert len(calls) >= 2


def test_the_waits_grow_with_jitter_up_to_the_cap() -> None:
    policy = errors.retrying("x", attempts=10, first_wait_s=0.5, max_wait_s=3.0)
    waits = [policy.wait(SimpleNamespace(attempt_number=n)) for n in range(1, 8)]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 1.5 and 2.0 <= waits[2] <= 2.5
    assert all(w == 3.0 for w in waits[3:])


def test_a_policy_needs_a_stop() -> None:
    with pytest.raises(KafkaOpsError, match="needs attempts or deadline_s"):
        errors.retrying("x", attempts=None)


class _Committing:
    """A connection whose coordinator leaves the first ``silent`` offset commits unanswered."""

    def __init__(self, silent: int, refused: KafkaError | None = None) -> None:
        self.silent, self.refused, self.timeouts = silent, refused, []
        self.timeout_s, self.name, self.bootstrap, self.config = 60.0, "k1:9092", "k1:9092", {}
        self.admin = SimpleNamespace(alter_consumer_group_offsets=self.alter, poll=lambda t: None)

    def probe_tls(self) -> None:
        pass

    def alter(self, requests, request_timeout):
        from concurrent.futures import Future

        from confluent_kafka import TopicPartition
        self.timeouts.append(request_timeout)
        future: Future = Future()
        if len(self.timeouts) <= self.silent:
            future.set_exception(confluent(KafkaError._TIMED_OUT))
        else:
            future.set_result(SimpleNamespace(topic_partitions=[TopicPartition("orders", 0, 5)]))
        return {requests[0].group_id: future}


@pytest.fixture
def coordinator_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The group coordinator lookups commit_group_offsets makes through a consumer (no cluster here: each
    answers at once), by group."""
    asked: list[str] = []
    monkeypatch.setattr(offsets, "_group_coordinator_ready", lambda conn, group, *a: asked.append(group))
    return asked


def test_an_unanswered_offset_commit_is_sent_again_with_a_short_request_timeout(coordinator_lookups) -> None:
    conn = _Committing(silent=2)
    offsets.commit_group_offsets(conn, "billing", "orders", {0: 5})  # type: ignore[arg-type]
    assert conn.timeouts == [offsets.COMMIT_ATTEMPT_S] * 3
    assert coordinator_lookups == ["billing"] * 3  # each attempt finds the coordinator before its request


def test_an_offset_commit_whose_login_was_refused_is_not_sent_again(coordinator_lookups) -> None:
    conn = _Committing(silent=5, refused=KafkaError(KafkaError._TRANSPORT))
    with pytest.raises(KafkaUnreachable):
        offsets.commit_group_offsets(conn, "billing", "orders", {0: 5})  # type: ignore[arg-type]
    assert len(conn.timeouts) == 1 and coordinator_lookups == ["billing"]


def test_no_admin_offset_commit_is_sent_before_the_group_coordinator_answered(monkeypatch) -> None:
    """librdkafka aborts the process when an admin request to a group coordinator times out during its
    coordinator lookup (offsets._group_coordinator_ready): the lookup is the consumer's, and while it times
    out no admin request is sent; once it answers, the commit goes out."""
    answers = [KafkaException(KafkaError(KafkaError._TIMED_OUT)), KafkaException(KafkaError(KafkaError._TIMED_OUT))]
    sent_at: list[int] = []

    class Lookup:
        def __init__(self, config):
            assert config["group.id"] == "billing" and config["enable.auto.commit"] is False
        def committed(self, partitions, timeout):
            if answers:
                raise answers.pop(0)
            return partitions
        def close(self):
            pass

    import confluent_kafka
    monkeypatch.setattr(confluent_kafka, "Consumer", Lookup)
    conn = _Committing(silent=0)
    def alter(requests, request_timeout):  # notes how many lookups were still to time out when it was sent
        sent_at.append(len(answers))
        return conn.alter(requests, request_timeout)

    conn.admin.alter_consumer_group_offsets = alter
    offsets.commit_group_offsets(conn, "billing", "orders", {0: 5})  # type: ignore[arg-type]
    assert sent_at == [0] and conn.timeouts == [offsets.COMMIT_ATTEMPT_S]


def test_a_refused_probe_is_read_without_comparing_a_kafka_error_to_none() -> None:
    """``KafkaError == None`` leaves a TypeError set behind a valid result (confluent-kafka's richcompare);
    the next native call then raises SystemError. The fence probe's reading never makes that comparison."""
    import time

    from kafkaops.testing import fence

    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert fence.acknowledged([None]) and not fence.acknowledged([refused]) and not fence.acknowledged([])
    assert not fence.acknowledged([None, None])
    assert time.monotonic() > 0  # raised SystemError after ``[refused] == [None]``
