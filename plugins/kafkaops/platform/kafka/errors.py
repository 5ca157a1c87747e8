"""Kafka's errors as kafkaops errors: one classification (:func:`classify`), one retry policy (:func:`retrying`).

Every error of either client (a confluent-kafka :class:`KafkaError` code, a kafka-python exception class)
becomes a typed :mod:`kafkaops.errors` error by its code or class, never by message text; every call that
is asked again goes through :func:`retrying`, which asks again only after an error marked ``retriable``.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import tenacity
from confluent_kafka import KafkaError, KafkaException

from kafkaops.errors import ConfigError, KafkaAuthFailed, KafkaOpsError, KafkaUnreachable, TopicExists, UnknownTopic
from kafkaops.platform import redaction

if TYPE_CHECKING:
    from kafkaops.platform.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)

#: librdkafka codes of a connection the cluster refuses: wrong SASL credentials or mechanism, a TLS
#: handshake that failed (an untrusted or expired certificate, a client certificate the broker rejects).
AUTH_FAILURES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL,
                           KafkaError.UNSUPPORTED_SASL_MECHANISM, KafkaError.ILLEGAL_SASL_STATE,
                           KafkaError.CLUSTER_AUTHORIZATION_FAILED})


def kafka_python_refusals() -> tuple[type[Exception], ...]:
    """kafka-python's errors of a refused login (its SSL failures are plain connection errors)."""
    from kafka import errors as kerrors

    return (kerrors.SaslAuthenticationFailedError, kerrors.IllegalSaslStateError, kerrors.UnsupportedSaslMechanismError)


#: What to check when Kafka refuses a login or a TLS handshake: the end of such an error's message.
AUTH_FIX = ("check the connection's sasl.username/sasl.password (and that the user exists for its "
            "sasl.mechanism), that ssl.ca.location holds the CA that signed the brokers' certificates, and that "
            "the brokers' trust store holds the CA of the client's certificate (ssl.certificate.location)")

_E = KafkaError
#: librdkafka codes for "no broker answered": no connection, or none within the request's timeout.
_UNREACHABLE = frozenset({_E._TRANSPORT, _E._ALL_BROKERS_DOWN, _E._RESOLVE, _E._TIMED_OUT, _E._TIMED_OUT_QUEUE,
                          _E._MSG_TIMED_OUT, _E.REQUEST_TIMED_OUT})
_UNKNOWN_TOPIC = frozenset({_E.UNKNOWN_TOPIC_OR_PART, _E._UNKNOWN_TOPIC, _E._UNKNOWN_PARTITION, _E.UNKNOWN_TOPIC_ID})
#: States the cluster reports as passing: a leader, coordinator or controller moving, metadata
#: catching up. librdkafka marks few admin errors retriable itself, hence the list.
_TRANSIENT = frozenset({_E.NOT_COORDINATOR, _E.COORDINATOR_LOAD_IN_PROGRESS, _E.COORDINATOR_NOT_AVAILABLE,
                        _E._WAIT_COORD, _E.LEADER_NOT_AVAILABLE, _E.NOT_LEADER_FOR_PARTITION, _E.NOT_CONTROLLER,
                        _E.FENCED_LEADER_EPOCH, _E.UNKNOWN_LEADER_EPOCH, _E.OFFSET_NOT_AVAILABLE,
                        _E.NETWORK_EXCEPTION, _E.NOT_ENOUGH_REPLICAS, _E.THROTTLING_QUOTA_EXCEEDED})


def typed(kind: type[KafkaOpsError], message: str, *, code: str | None = None,
          retriable: bool | None = None) -> KafkaOpsError:
    """An error of ``kind`` with ``message``, the Kafka error ``code`` it stands for and, when given,
    whether asking again may succeed (else the kind's default)."""
    error = kind(message)
    error.code = code
    if retriable is not None:
        error.retriable = retriable
    return error


def classify(err: BaseException | KafkaError, what: str, conn: KafkaConnection) -> KafkaOpsError:
    """The typed kafkaops error for a Kafka client's error while asking for ``what``: by the
    :class:`KafkaError` code of a confluent-kafka error, by the class of a kafka-python one, never by
    message text. :class:`KafkaUnreachable` when no broker answered (not retriable: the request
    already waited its timeout), :class:`UnknownTopic` for an unknown topic or partition,
    :class:`TopicExists`, else :class:`KafkaOpsError`, retriable when the cluster reports a passing
    state. The message names the code; raise the result ``from err``."""
    if isinstance(err, KafkaOpsError):
        return err
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        err = err.args[0]
    where, within = conn.name, f"{conn.timeout_s:.0f} s"
    if isinstance(err, KafkaError) and err.code() in _UNREACHABLE and conn.refused is not None:
        err = conn.refused  # the request timed out because every login or handshake was refused
    if isinstance(err, KafkaError):
        code, name = err.code(), err.name()
        detail = f"{name} ({redaction.scrub(err.str(), conn.config)})"
        if code in AUTH_FAILURES:
            return typed(KafkaAuthFailed, f"Kafka at {where} refused the connection while asking for {what}: "
                                          f"{detail}; {AUTH_FIX}", code=name, retriable=False)
        if code in _UNREACHABLE:
            return typed(KafkaUnreachable, f"cannot reach Kafka at {where} within {within} while asking for {what}: "
                                           f"{detail}; check bootstrap.servers and that the brokers are up",
                         code=name, retriable=False)
        if code in _UNKNOWN_TOPIC:
            return typed(UnknownTopic, f"Kafka at {where} does not know the topic or partition of {what}: {detail}; "
                                       "check the name, or create the topic first", code=name)
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            return typed(TopicExists, f"Kafka at {where} refused {what}: {detail}", code=name)
        return typed(KafkaOpsError, f"Kafka refused {what} at {where}: {detail}", code=name,
                     retriable=bool(err.retriable()) or code in _TRANSIENT)
    if isinstance(err, TimeoutError) and conn.refused is not None:
        return classify(conn.refused, what, conn)
    if isinstance(err, TimeoutError):
        return typed(KafkaUnreachable, f"no answer from Kafka at {where} within {within} while asking for {what}; "
                                       "check bootstrap.servers and that the brokers are up", retriable=False)
    from kafka import errors as kerrors

    if not isinstance(err, kerrors.KafkaError):
        return typed(KafkaOpsError, f"{what} failed on {where}: {type(err).__name__}: "
                                    f"{redaction.scrub(str(err), conn.config)}")
    name, said = type(err).__name__, redaction.scrub(", ".join(str(a) for a in err.args), conn.config)
    detail = name + (f" (error code {err.errno})" if getattr(err, "errno", None) is not None else "") + (
        f": {said}" if said else "")
    if isinstance(err, kafka_python_refusals()):
        return typed(KafkaAuthFailed, f"Kafka at {where} refused kafka-python's login for {what}: {detail}; "
                                      f"{AUTH_FIX}", code=name, retriable=False)
    if isinstance(err, (kerrors.KafkaConnectionError, kerrors.KafkaTimeoutError, kerrors.RequestTimedOutError)):
        return typed(KafkaUnreachable, f"no answer from Kafka at {where} to {what} within {within}: {detail}; "
                                       "check that the brokers are up", code=name, retriable=False)
    if isinstance(err, kerrors.UnknownTopicOrPartitionError):
        return typed(UnknownTopic, f"Kafka at {where} does not know the topic or partition of {what}: {detail}; "
                                   "check the name, or create the topic first", code=name)
    if isinstance(err, kerrors.TopicAlreadyExistsError):
        return typed(TopicExists, f"Kafka at {where} refused {what}: {detail}", code=name)
    if isinstance(err, kerrors.UnknownBrokerIdError):  # the client's metadata lags behind a broker just added
        return typed(KafkaOpsError, f"{what} on {where}: broker {said} is not in the client's metadata; check that "
                                    "it is registered", code=name, retriable=True)
    return typed(KafkaOpsError, f"Kafka refused {what} at {where}: {detail}", code=name,
                 retriable=bool(err.retriable))


def _is_retriable(err: BaseException) -> bool:
    return isinstance(err, KafkaOpsError) and err.retriable


def _log_retry(what: str) -> Callable[[tenacity.RetryCallState], None]:
    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.info("%s: attempt %d failed (%s); asking again in %.2f s", what, state.attempt_number,
                 state.outcome.exception() if state.outcome else None, state.upcoming_sleep)
    return before_sleep


def _give_up(state: tenacity.RetryCallState) -> NoReturn:
    """Re-raise the last typed error, its message telling how often and how long it was asked."""
    err = state.outcome.exception() if state.outcome else None
    assert isinstance(err, KafkaOpsError)
    err.args = (f"{err}; gave up after {state.attempt_number} attempt(s) in {state.seconds_since_start:.1f} s",
                *err.args[1:])
    raise err


def retrying(what: str, *, attempts: int | None = 5, deadline_s: float | None = None, first_wait_s: float = 0.5,
             max_wait_s: float = 3.0) -> tenacity.Retrying:
    """THE retry policy of kafkaops: ask again only after a :class:`KafkaOpsError` that is
    ``retriable`` (see :func:`classify`), waiting ``first_wait_s`` doubling per attempt up to
    ``max_wait_s``, plus up to ``first_wait_s`` of jitter; stop after ``attempts`` or once
    ``deadline_s`` has passed, whichever comes first, and re-raise the last error with the
    attempts in its message. Other errors pass through at once. ``retrying(...)(fn, *args)``."""
    stops = ([tenacity.stop_after_attempt(attempts)] if attempts is not None else []) + (
        [tenacity.stop_after_delay(deadline_s)] if deadline_s is not None else [])
    if not stops:
        raise ConfigError(f"the retry policy of {what} needs attempts or deadline_s")
    stop = stops[0] if len(stops) == 1 else stops[0] | stops[1]
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_is_retriable), stop=stop,
        wait=tenacity.wait_exponential_jitter(multiplier=first_wait_s, max=max_wait_s, jitter=first_wait_s),
        before_sleep=_log_retry(what), retry_error_callback=_give_up)
