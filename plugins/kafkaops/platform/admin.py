"""The only module that talks to Kafka: its admin APIs, and bounded reads of records.

confluent-kafka does the work; kafka-python's KafkaAdminClient is used only for what
confluent-kafka lacks (describe_log_dirs, partition reassignments).
:func:`snapshot` turns a live cluster into an immutable :class:`kafkaops.model.Cluster`; the
reassignment, leader-election and incremental-config calls serve :mod:`kafkaops.reassign.engine`.
Every error of either client becomes a typed kafkaops error in :func:`classify`, and every call
that is asked again goes through the one policy of :func:`retrying`.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import tenacity
from confluent_kafka import ConsumerGroupTopicPartitions, ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, OffsetSpec, ResourceType)

from kafkaops.errors import ConfigError, KafkaAuthFailed, KafkaOpsError, KafkaUnreachable, TopicExists, UnknownTopic
from kafkaops.model import Broker, Cluster, ConsumerGroup, GroupPartitionLag, PartitionAssignment, Reassignment
from kafkaops.platform import redaction, waits

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0

# librdkafka setting -> kafka-python KafkaAdminClient argument, for the few calls made through it.
_KAFKA_PYTHON_KEYS = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "ssl.cipher.suites": "ssl_ciphers",
}
#: librdkafka settings kafka-python cannot take: a connection using them gets no kafka-python client.
_NOT_FOR_KAFKA_PYTHON = ("ssl.key.pem", "ssl.certificate.pem", "ssl.ca.pem", "ssl.keystore.location",
                         "sasl.oauthbearer.", "sasl.kerberos.")


class ClientConfig(dict):  # type: ignore[type-arg]
    """A librdkafka config (``str -> str``) that knows where it came from (``source``: "Airflow
    connection 'kafka_default'", for messages) and never shows a secret in its ``repr``, so a
    config in an f-string, a log line, a dataclass or a traceback's locals leaks nothing."""

    source: str | None = None

    def __repr__(self) -> str:
        return repr(redaction.redacted(self))

    __str__ = __repr__


def kafka_python_args(config: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's ``KafkaAdminClient`` arguments for a librdkafka config: SASL (PLAIN, SCRAM),
    SSL with PEM files, hostname checking as librdkafka's ``ssl.endpoint.identification.algorithm``."""
    unsupported = sorted(k for k in config if k.startswith(_NOT_FOR_KAFKA_PYTHON))
    if unsupported:
        raise ConfigError(f"the Kafka connection{_named(config)} sets {', '.join(unsupported)}, which kafka-python "
                          "(log dir sizes and reassignments) cannot use; give the certificate, key and CA as PEM "
                          "files: ssl.certificate.location, ssl.key.location, ssl.ca.location")
    kwargs: dict[str, Any] = {_KAFKA_PYTHON_KEYS[k]: v for k, v in config.items() if k in _KAFKA_PYTHON_KEYS}
    kwargs["bootstrap_servers"] = kwargs["bootstrap_servers"].split(",")
    if "security_protocol" in kwargs:
        kwargs["security_protocol"] = kwargs["security_protocol"].upper()
    if "sasl_mechanism" in kwargs:
        kwargs["sasl_mechanism"] = kwargs["sasl_mechanism"].upper()
    if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        kwargs["ssl_check_hostname"] = False
    return kwargs


def _named(config: Mapping[str, Any]) -> str:
    source = getattr(config, "source", None)
    return f" ({source})" if source else ""


class _QuietLibrdkafkaLog:
    """Routes librdkafka's own log lines (connection retries and the like) to DEBUG; the
    errors that matter reach the caller as exceptions with a message of kafkaops'."""

    _log = logging.getLogger("kafkaops.librdkafka")

    def log(self, level: int, fmt: str, *args: object) -> None:
        self._log.debug(fmt, *args)


def quiet_kafka_python() -> None:
    """Raise kafka-python's loggers (``kafka``, ``kafka.conn``, ...) to WARNING, unless someone chose
    their level: it logs every connect and close at INFO, about 120 lines per task. kafkaops' own
    loggers (``kafkaops.*``, not below ``kafka``) keep theirs."""
    quiet = logging.getLogger("kafka")
    if quiet.level == logging.NOTSET:
        quiet.setLevel(logging.WARNING)


def client_config(config: Mapping[str, str]) -> dict[str, Any]:
    """A confluent-kafka client config: the connection's, with librdkafka's logging routed to DEBUG."""
    return {"logger": _QuietLibrdkafkaLog(), **config}


def connection_config(source: Mapping[str, Any] | str, *, name: str | None = None) -> ClientConfig:
    """A librdkafka config from a plain dict or a bootstrap string. SASL/SSL keys pass through
    unchanged. ``name`` (else the source's own) says where it came from, in messages."""
    config = ClientConfig({"bootstrap.servers": source} if isinstance(source, str) else source)
    config.source = name or getattr(source, "source", None)
    if not config.get("bootstrap.servers"):
        raise ConfigError(f"the Kafka connection{_named(config)} has no bootstrap.servers; set it in the dict or in "
                          "the Airflow connection's extras, e.g. {\"bootstrap.servers\": \"host:9092\"}")
    for k, v in config.items():
        if not isinstance(v, str):
            config[k] = "true" if v is True else "false" if v is False else str(v)
    return config


#: librdkafka codes of a connection the cluster refuses: wrong SASL credentials or mechanism, a TLS
#: handshake that failed (an untrusted or expired certificate, a client certificate the broker rejects).
AUTH_FAILURES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL,
                           KafkaError.UNSUPPORTED_SASL_MECHANISM, KafkaError.ILLEGAL_SASL_STATE,
                           KafkaError.CLUSTER_AUTHORIZATION_FAILED})


class _ErrorReports:
    """What librdkafka tells a connection's error callback. The client's config holds this small object's
    bound method, never the connection's: a callback that pointed back at the connection would make the
    connection and its client a reference cycle, which only Python's cyclic garbage collector frees, at
    whatever moment and on whatever thread a later allocation triggers it. On one of librdkafka's own
    threads (the background thread that completes an admin request's future) that collection destroys
    the client from its own thread, and librdkafka aborts the process ("calling rd_kafka_destroy() from
    librdkafka owned thread is prohibited"); inside another client's call it can deadlock."""

    __slots__ = ("refused", "dropped")

    def __init__(self) -> None:
        self.refused: KafkaError | None = None
        self.dropped = False

    def on_error(self, err: KafkaError) -> None:
        if err.code() in AUTH_FAILURES:
            self.refused = err
        elif err.code() == KafkaError._TRANSPORT:
            self.dropped = True


@dataclass
class KafkaConnection:
    """Admin clients for one cluster. Create with :func:`connect`; close with :meth:`close` (or use it
    as a context manager), which releases the librdkafka client there and then: nothing but this
    object holds it, and its callbacks hold nothing of this object (:class:`_ErrorReports`).
    A refused login or TLS handshake, which librdkafka only reports to its error callback while it
    keeps retrying, is kept in ``refused`` and ends the request waiting on it (:func:`_result`)."""

    config: ClientConfig = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    _reports: _ErrorReports = field(default_factory=_ErrorReports, init=False, repr=False)
    _admin: AdminClient | None = field(default=None, init=False, repr=False)
    _legacy: Any = field(default=None, init=False, repr=False)
    _probed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            self._admin = AdminClient(client_config({"socket.connection.setup.timeout.ms": int(self.timeout_s * 1000),
                                                     "error_cb": self._reports.on_error, **self.config}))
        except KafkaException as err:  # a setting librdkafka rejects: an unknown key, an unreadable certificate
            said = err.args[0].str() if err.args and isinstance(err.args[0], KafkaError) else str(err)
            raise ConfigError(f"the Kafka client config of {self.name} does not work: "
                              f"{redaction.scrub(said, self.config)}; fix the connection's settings") from None

    @property
    def admin(self) -> AdminClient:
        """The confluent-kafka admin client; only while the connection is open. Use it in an expression
        (``conn.admin.list_topics(...)``), never keep it: a reference kept elsewhere would outlive
        :meth:`close`."""
        if self._admin is None:
            raise KafkaOpsError(f"the connection to Kafka at {self.name} is closed; open another with "
                                "kafkaops.platform.admin.connect")
        return self._admin

    @property
    def closed(self) -> bool:
        return self._admin is None

    @property
    def refused(self) -> KafkaError | None:
        return self._reports.refused

    @property
    def dropped(self) -> bool:
        """A connection dropped (``_TRANSPORT``) since the client started."""
        return self._reports.dropped

    def _on_error(self, err: KafkaError) -> None:
        """The error callback's effect, as librdkafka would call it (for tests of the classification)."""
        self._reports.on_error(err)

    def probe_tls(self) -> None:
        """After a dropped connection, once: whether the TLS endpoint turns this client's certificate away
        (:func:`tls_refusal`); if so, that is the refusal (``_SSL``) that ends the wait. Under TLS 1.3 a
        broker rejects a client certificate after the client's half of the handshake, so librdkafka sees
        only connections dropped (``_TRANSPORT``) and retries until the request times out."""
        if self._probed or not self.dropped or self.refused is not None:
            return
        self._probed = True
        reason = tls_refusal(self.config, timeout_s=min(self.timeout_s, 5.0))
        if reason:
            self._reports.refused = KafkaError(KafkaError._SSL,
                                               f"TLS with {self.bootstrap.split(',')[0]} failed: {reason}")

    @property
    def bootstrap(self) -> str:
        return self.config["bootstrap.servers"]

    @property
    def name(self) -> str:
        """The cluster as messages name it: its bootstrap servers, and the connection they came from."""
        return self.bootstrap + _named(self.config)

    def legacy_admin(self) -> Any:
        """kafka-python's KafkaAdminClient, built on first use from the same config."""
        if self._legacy is None:
            from kafka.admin import KafkaAdminClient

            quiet_kafka_python()
            from kafka import errors as kerrors

            try:
                self._legacy = KafkaAdminClient(request_timeout_ms=int(self.timeout_s * 1000),
                                                **kafka_python_args(self.config))
            except _kafka_python_refusals() as err:
                raise _typed(KafkaAuthFailed, f"Kafka at {self.name} refused kafka-python's login: "
                                              f"{redaction.scrub(str(err), self.config)}; {_AUTH_FIX}",
                             code=type(err).__name__) from err
            except ConfigError:
                raise
            except Exception as err:
                raise KafkaUnreachable(f"kafka-python could not connect to {self.name}: "
                                       f"{redaction.scrub(str(err), self.config)}") from err
        return self._legacy

    def drop_legacy_admin(self) -> None:
        """Close kafka-python's client, so the next :meth:`legacy_admin` builds one with fresh metadata."""
        legacy, self._legacy = self._legacy, None
        if legacy is not None:
            legacy.close()

    def close(self) -> None:
        """Close kafka-python's client and release librdkafka's here, in the caller's thread: its threads
        are joined before this returns (requests still in flight end with ``_DESTROY``). Idempotent."""
        client, self._admin = self._admin, None
        try:
            self.drop_legacy_admin()
        finally:
            if client is not None and sys.getrefcount(client) > 2:  # this frame's name and the call's argument
                log.warning("the admin client of %s is still referenced elsewhere after close(); it is released "
                            "when that reference goes", self.name)
            del client

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(source: Mapping[str, Any] | str, *, timeout_s: float = DEFAULT_TIMEOUT_S,
            name: str | None = None) -> KafkaConnection:
    return KafkaConnection(connection_config(source, name=name), timeout_s=timeout_s)


def _kafka_python_refusals() -> tuple[type[Exception], ...]:
    """kafka-python's errors of a refused login (its SSL failures are plain connection errors)."""
    from kafka import errors as kerrors

    return (kerrors.SaslAuthenticationFailedError, kerrors.IllegalSaslStateError, kerrors.UnsupportedSaslMechanismError)


_AUTH_FIX = ("check the connection's sasl.username/sasl.password (and that the user exists for its "
             "sasl.mechanism), that ssl.ca.location holds the CA that signed the brokers' certificates, and that "
             "the brokers' trust store holds the CA of the client's certificate (ssl.certificate.location)")


def tls_refusal(config: Mapping[str, str], *, timeout_s: float = 5.0) -> str | None:
    """Why the first bootstrap server's TLS endpoint turns a client of ``config`` away, found by a TLS
    handshake of Python's ``ssl`` with the same CA, certificate and key files: the OpenSSL reason
    (``TLSV13_ALERT_CERTIFICATE_REQUIRED``, ``SSLV3_ALERT_CERTIFICATE_UNKNOWN``, ...). None when it
    accepts the client, cannot be reached, or the config is not TLS with files (PEM strings, key stores).
    A broker says nothing before a request, so a read that times out after the handshake is an accept."""
    import socket
    import ssl

    if config.get("security.protocol", "").upper() not in ("SSL", "SASL_SSL") or any(
            k.startswith(("ssl.keystore.", "ssl.key.pem", "ssl.certificate.pem", "ssl.ca.pem")) for k in config):
        return None
    host, _, port = config["bootstrap.servers"].split(",")[0].strip().rpartition(":")
    host = host.strip("[]")
    try:
        context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
        if config.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
            context.check_hostname = False
        if config.get("ssl.certificate.location"):
            context.load_cert_chain(config["ssl.certificate.location"], config.get("ssl.key.location"),
                                    config.get("ssl.key.password"))
        with socket.create_connection((host, int(port)), timeout=timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host) as tls:
            tls.settimeout(min(timeout_s, 2.0))
            tls.recv(1)
    except ssl.SSLError as err:
        return err.reason or type(err).__name__
    except (OSError, ValueError):
        return None
    return None


# -- errors: one classification, one retry policy ------------------------------------------------

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


def _typed(kind: type[KafkaOpsError], message: str, *, code: str | None = None,
           retriable: bool | None = None) -> KafkaOpsError:
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
            return _typed(KafkaAuthFailed, f"Kafka at {where} refused the connection while asking for {what}: "
                                           f"{detail}; {_AUTH_FIX}", code=name, retriable=False)
        if code in _UNREACHABLE:
            return _typed(KafkaUnreachable, f"cannot reach Kafka at {where} within {within} while asking for {what}: "
                                            f"{detail}; check bootstrap.servers and that the brokers are up",
                          code=name, retriable=False)
        if code in _UNKNOWN_TOPIC:
            return _typed(UnknownTopic, f"Kafka at {where} does not know the topic or partition of {what}: {detail}; "
                                        "check the name, or create the topic first", code=name)
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            return _typed(TopicExists, f"Kafka at {where} refused {what}: {detail}", code=name)
        return _typed(KafkaOpsError, f"Kafka refused {what} at {where}: {detail}", code=name,
                      retriable=bool(err.retriable()) or code in _TRANSIENT)
    if isinstance(err, TimeoutError) and conn.refused is not None:
        return classify(conn.refused, what, conn)
    if isinstance(err, TimeoutError):
        return _typed(KafkaUnreachable, f"no answer from Kafka at {where} within {within} while asking for {what}; "
                                        "check bootstrap.servers and that the brokers are up", retriable=False)
    from kafka import errors as kerrors

    if not isinstance(err, kerrors.KafkaError):
        return _typed(KafkaOpsError, f"{what} failed on {where}: {type(err).__name__}: "
                                     f"{redaction.scrub(str(err), conn.config)}")
    name, said = type(err).__name__, redaction.scrub(", ".join(str(a) for a in err.args), conn.config)
    detail = name + (f" (error code {err.errno})" if getattr(err, "errno", None) is not None else "") + (
        f": {said}" if said else "")
    if isinstance(err, _kafka_python_refusals()):
        return _typed(KafkaAuthFailed, f"Kafka at {where} refused kafka-python's login for {what}: {detail}; "
                                       f"{_AUTH_FIX}", code=name, retriable=False)
    if isinstance(err, (kerrors.KafkaConnectionError, kerrors.KafkaTimeoutError, kerrors.RequestTimedOutError)):
        return _typed(KafkaUnreachable, f"no answer from Kafka at {where} to {what} within {within}: {detail}; "
                                        "check that the brokers are up", code=name, retriable=False)
    if isinstance(err, kerrors.UnknownTopicOrPartitionError):
        return _typed(UnknownTopic, f"Kafka at {where} does not know the topic or partition of {what}: {detail}; "
                                    "check the name, or create the topic first", code=name)
    if isinstance(err, kerrors.TopicAlreadyExistsError):
        return _typed(TopicExists, f"Kafka at {where} refused {what}: {detail}", code=name)
    if isinstance(err, kerrors.UnknownBrokerIdError):  # the client's metadata lags behind a broker just added
        return _typed(KafkaOpsError, f"{what} on {where}: broker {said} is not in the client's metadata; check that "
                                     "it is registered", code=name, retriable=True)
    return _typed(KafkaOpsError, f"Kafka refused {what} at {where}: {detail}", code=name,
                  retriable=bool(err.retriable))


_T = TypeVar("_T")


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


def _result(future: Any, conn: KafkaConnection, what: str) -> Any:
    """The future's result; its error classified. Waiting serves the client's error callback, so a
    refused login or handshake ends the wait at once instead of after the request's timeout."""
    deadline = time.monotonic() + conn.timeout_s + 5
    while not future.done() and conn.refused is None and time.monotonic() < deadline:
        conn.admin.poll(0.1)
        conn.probe_tls()
    try:
        if not future.done() and conn.refused is not None:
            raise KafkaException(conn.refused)
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except (KafkaException, TimeoutError) as err:
        raise classify(err, what, conn) from err


def _cluster_metadata(conn: KafkaConnection) -> Any:
    """The brokers' metadata of every topic, asked in slices of a second (:func:`waits.list_topics`)."""
    try:
        return waits.list_topics(conn.admin, waits.Deadline(conn.timeout_s))
    except KafkaException as err:
        raise classify(err, "the topic metadata", conn) from err


def topic_names(conn: KafkaConnection) -> set[str]:
    """The names of the cluster's topics, internal ones included."""
    return set(_cluster_metadata(conn).topics)


def _topic_metadata(conn: KafkaConnection, name: str) -> Any | None:
    """The brokers' metadata of topic ``name``; None when it lacks the topic."""
    try:
        return waits.list_topics(conn.admin, waits.Deadline(conn.timeout_s), name).topics.get(name)
    except KafkaException as err:
        raise classify(err, f"the metadata of topic {name}", conn) from err


def describe_cluster(conn: KafkaConnection) -> tuple[str, int | None, list[Broker]]:
    """Cluster id, controller id and the registered (unfenced) brokers."""
    desc = _result(conn.admin.describe_cluster(request_timeout=conn.timeout_s), conn, "the cluster description")
    brokers = [Broker(id=n.id, host=n.host, port=n.port, rack=n.rack or None) for n in desc.nodes]
    return desc.cluster_id, (desc.controller.id if desc.controller else None), brokers


def snapshot(conn: KafkaConnection, *, topics: Iterable[str] | None = None, include_internal: bool = False,
             offsets: bool = True, sizes: bool = True, groups: bool = True) -> Cluster:
    """An immutable picture of the live cluster. Unknown ``topics`` raise :class:`UnknownTopic`."""
    started = time.monotonic()
    cluster_id, controller_id, brokers = describe_cluster(conn)
    metadata = _cluster_metadata(conn)
    wanted = None if topics is None else list(dict.fromkeys(topics))
    if wanted is not None:
        missing = [t for t in wanted if t not in metadata.topics]
        if missing:
            existing = sorted(t for t in metadata.topics if not t.startswith("__"))
            raise UnknownTopic(f"topic(s) {', '.join(missing)} do not exist on {conn.bootstrap}; existing topics: "
                               f"{', '.join(existing[:20]) or '(none)'}; check the name or create the topic first")
    names = wanted if wanted is not None else sorted(
        t for t in metadata.topics if include_internal or not t.startswith("__"))

    partitions = []
    for name in names:
        tmeta = metadata.topics[name]
        if tmeta.error is not None:
            raise classify(tmeta.error, f"the metadata of topic {name}", conn)
        for pid, pmeta in sorted(tmeta.partitions.items()):
            partitions.append(PartitionAssignment(
                topic=name, partition=pid, replicas=tuple(pmeta.replicas),
                leader=pmeta.leader if pmeta.leader >= 0 else None, isr=tuple(pmeta.isrs)))

    registered = {b.id for b in brokers}
    offline_ids = sorted({r for p in partitions for r in p.replicas} - registered)
    all_brokers = brokers + [Broker(id=i, online=False) for i in offline_ids]

    wanted_dirs: dict[str, list[int]] = {}
    for p in partitions:
        wanted_dirs.setdefault(p.topic, []).append(p.partition)
    # Log-dir sizes (kafka-python, decoded in Python) overlap with the offset look-ups (librdkafka).
    # The pool is shut down without waiting: a look-up that outlived its bound must not hold this wait.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafkaops-log-dirs")
    try:
        sizes_job = pool.submit(_log_dir_sizes, conn, wanted_dirs, sorted(registered)) if sizes else None
        start_offsets, end_offsets = (_list_offsets(conn, partitions) if offsets and partitions else ({}, {}))
        bound = waits.Deadline(3 * conn.timeout_s + 10)  # _legacy_call's 3 attempts, each within the timeout
        try:
            size_of, disks = sizes_job.result(timeout=bound.remaining()) if sizes_job is not None else ({}, {})
        except FuturesTimeout:
            raise bound.timed_out(f"the log dir sizes of brokers {sorted(registered)} on {conn.name}",
                                  state="nothing changed on the cluster",
                                  then="check the brokers' DescribeLogDirs answers, or snapshot without sizes") \
                from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    all_brokers = [_with_disk(b, disks.get(b.id)) for b in all_brokers]
    partitions = [PartitionAssignment(topic=p.topic, partition=p.partition, replicas=p.replicas, leader=p.leader,
                                      isr=p.isr, start_offset=start_offsets.get(p.key),
                                      end_offset=end_offsets.get(p.key), size_bytes=size_of.get(p.key))
                  for p in partitions]
    group_list = _consumer_groups(conn, end_offsets) if groups else []
    cluster = Cluster(brokers=tuple(all_brokers), partitions=tuple(partitions), cluster_id=cluster_id,
                      controller_id=controller_id, groups=tuple(group_list), taken_at=time.time())
    log.info("snapshot of %s: %d brokers (%d offline), %d topics, %d partitions, %d groups in %.2f s",
             cluster_id, len(all_brokers), len(offline_ids), len(names), len(partitions), len(group_list),
             time.monotonic() - started)
    return cluster


def _with_disk(broker: Broker, disk: tuple[int, int] | None) -> Broker:
    if disk is None:
        return broker
    return Broker(id=broker.id, host=broker.host, port=broker.port, rack=broker.rack, online=broker.online,
                  disk_total_bytes=disk[0], disk_usable_bytes=disk[1])


def _list_offsets(conn: KafkaConnection, partitions: list[PartitionAssignment], *, attempts: int = 4
                  ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Earliest and latest offsets of every partition that has a leader. Partitions whose leader
    moved under the client (new topics, elections, reassignments) are asked again."""
    led = [TopicPartition(p.topic, p.partition) for p in partitions if not p.offline]
    return (_offsets_at(conn, led, OffsetSpec.earliest(), "earliest", attempts),
            _offsets_at(conn, led, OffsetSpec.latest(), "latest", attempts))


def _offsets_at(conn: KafkaConnection, led: list[TopicPartition], spec: OffsetSpec, label: str, attempts: int
                ) -> dict[tuple[str, int], int]:
    """The ``label`` offset of each of ``led``; partitions without one are left out, with a warning."""
    found: dict[tuple[str, int], int] = {}
    failed: dict[TopicPartition, KafkaOpsError] = {}
    pending = list(led)

    def ask() -> None:
        nonlocal pending
        futures = conn.admin.list_offsets({tp: spec for tp in pending}, request_timeout=conn.timeout_s)
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = _result(
                    future, conn, f"the {label} offset of {tp.topic}-{tp.partition}").offset
                failed.pop(tp, None)
            except KafkaOpsError as err:
                failed[tp] = err
        pending = [tp for tp, err in failed.items() if err.retriable]
        if pending:
            raise _typed(KafkaOpsError, f"no {label} offsets yet for {len(pending)} partition(s) at {conn.bootstrap}, "
                                        f"first {pending[0].topic}-{pending[0].partition}: {failed[pending[0]]}",
                         retriable=True)

    try:
        retrying(f"the {label} offsets", attempts=attempts, first_wait_s=0.5, max_wait_s=2.0)(ask)
    except KafkaOpsError:
        pass  # the partitions in ``failed`` are named below
    if failed:
        first_tp, first_err = next(iter(failed.items()))
        log.warning("no %s offsets for %d of %d partitions (first: %s-%d: %s)", label, len(failed), len(led),
                    first_tp.topic, first_tp.partition, first_err)
    return found


def _log_dir_sizes(conn: KafkaConnection, topics: dict[str, list[int]], brokers: list[int]
                   ) -> tuple[dict[tuple[str, int], int], dict[int, tuple[int, int]]]:
    """Largest replica size per partition, and (total, usable) disk bytes per broker."""
    per_replica, disks = _describe_log_dirs(conn, topics, brokers)
    sizes: dict[tuple[str, int], int] = {}
    for (topic, partition, _broker), size in per_replica.items():
        sizes[(topic, partition)] = max(sizes.get((topic, partition), 0), size)
    return sizes, disks


def replica_sizes(conn: KafkaConnection, partitions: Iterable[tuple[str, int]], brokers: Iterable[int]
                  ) -> dict[tuple[str, int, int], int]:
    """Bytes on disk of each replica ``(topic, partition, broker)`` of ``partitions`` on ``brokers``,
    counting a replica that is being copied (a reassignment's adding replica) as far as it got."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    wanted = sorted(set(brokers))
    if not topics or not wanted:
        return {}
    return _describe_log_dirs(conn, topics, wanted)[0]


def _describe_log_dirs(conn: KafkaConnection, topics: dict[str, list[int]], brokers: list[int]
                       ) -> tuple[dict[tuple[str, int, int], int], dict[int, tuple[int, int]]]:
    """Replica sizes ``(topic, partition, broker) -> bytes`` and (total, usable) disk bytes per broker."""
    answers = _legacy_call(conn, f"the log dirs of brokers {brokers}", lambda client: client.describe_log_dirs(
        topic_partitions=topics, brokers=brokers))
    sizes: dict[tuple[str, int, int], int] = {}
    disks: dict[int, tuple[int, int]] = {}
    for answer in answers:
        total = usable = 0
        for log_dir in answer["log_dirs"]:
            if log_dir.get("error_code", 0) != 0:
                continue
            total += max(log_dir.get("total_bytes", 0), 0)
            usable += max(log_dir.get("usable_bytes", 0), 0)
            for topic in log_dir.get("topics", []):
                for part in topic["partitions"]:
                    if part.get("is_future_key"):
                        continue
                    key = (topic["name"], part["partition_index"], answer["broker"])
                    sizes[key] = max(sizes.get(key, 0), part["partition_size"])
        disks[answer["broker"]] = (total, usable)
    return sizes, disks


def _legacy_call(conn: KafkaConnection, what: str, call: Callable[[Any], _T], attempts: int = 3) -> _T:
    """``call(KafkaAdminClient)``, its failures turned into kafkaops errors naming ``what``. A client
    that failed with a retriable error (such as a broker just added that it does not know yet) is
    rebuilt with fresh metadata and tried again."""
    def once() -> _T:
        client = conn.legacy_admin()
        try:
            return call(client)
        except KafkaOpsError:
            raise
        except Exception as err:
            typed = classify(err, what, conn)
            if typed.retriable:
                conn.drop_legacy_admin()
            raise typed from err

    return retrying(what, attempts=attempts, first_wait_s=1.0, max_wait_s=2.0)(once)


def _consumer_groups(conn: KafkaConnection, end_offsets: Mapping[tuple[str, int], int]) -> list[ConsumerGroup]:
    listing = _result(conn.admin.list_consumer_groups(request_timeout=conn.timeout_s), conn, "consumer groups")
    ids = sorted(g.group_id for g in listing.valid)
    if not ids:
        return []
    described = conn.admin.describe_consumer_groups(ids, request_timeout=conn.timeout_s)
    groups = []
    for gid in ids:
        try:
            desc = described[gid].result(timeout=conn.timeout_s + 5)
            state, members = str(desc.state.name if hasattr(desc.state, "name") else desc.state), len(desc.members)
        except KafkaException as err:
            log.warning("cannot describe group %s: %s", gid, err)
            state, members = "UNKNOWN", 0
        offsets_future = conn.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(gid)],
                                                                request_timeout=conn.timeout_s)[gid]
        lags = []
        try:
            for tp in offsets_future.result(timeout=conn.timeout_s + 5).topic_partitions:
                committed = tp.offset if tp.offset is not None and tp.offset >= 0 else None
                lags.append(GroupPartitionLag(tp.topic, tp.partition, committed,
                                              end_offsets.get((tp.topic, tp.partition))))
        except KafkaException as err:
            log.warning("cannot read offsets of group %s: %s", gid, err)
        groups.append(ConsumerGroup(gid, state, members, tuple(sorted(lags, key=lambda x: (x.topic, x.partition)))))
    return groups


def create_topic(conn: KafkaConnection, name: str, partitions: int, replication_factor: int,
                 config: Mapping[str, str] | None = None) -> bool:
    """Create a topic; False when it exists already with the same partition count."""
    future = conn.admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
                                      request_timeout=conn.timeout_s)[name]
    try:
        _result(future, conn, f"the creation of topic {name} ({partitions} partitions, RF {replication_factor})")
    except TopicExists as err:
        existing = _topic_metadata(conn, name)
        have = "no metadata" if existing is None else f"{len(existing.partitions)} partitions"
        if existing is None or len(existing.partitions) != partitions:
            raise KafkaOpsError(f"topic {name} exists with {have}, not {partitions} partitions; use another name "
                                "or delete it first") from err
        return False
    _wait_for_leaders(conn, name, partitions, "created")
    return True


def _wait_for_leaders(conn: KafkaConnection, name: str, partitions: int, what: str) -> None:
    """Return once the brokers' metadata shows ``name`` with ``partitions`` partitions, each with a
    leader: the controller acknowledges a change before every broker has it, and the next call may
    ask another broker."""
    def led() -> None:
        meta = _topic_metadata(conn, name)
        if meta is None:
            seen = "no metadata of it"
        elif meta.error is not None:
            err = classify(meta.error, f"the metadata of topic {name}", conn)
            if not err.retriable:
                raise err
            seen = f"the error {err.code}"
        else:
            with_leader = sum(1 for p in meta.partitions.values() if p.leader >= 0)
            if len(meta.partitions) == partitions and with_leader == partitions:
                return
            seen = f"{len(meta.partitions)} partition(s), {with_leader} with a leader"
        raise _typed(KafkaOpsError, f"topic {name} was {what}, but the metadata of {conn.bootstrap} shows {seen}, "
                                    f"not {partitions} partition(s) each with a leader; check the brokers' health",
                     retriable=True)

    retrying(f"the leaders of topic {name}", attempts=None, deadline_s=conn.timeout_s, first_wait_s=0.05,
             max_wait_s=0.5)(led)


def delete_topics(conn: KafkaConnection, names: Iterable[str]) -> None:
    """Delete ``names``; ones that do not exist are skipped."""
    futures = conn.admin.delete_topics(list(names), request_timeout=conn.timeout_s)
    for name, future in futures.items():
        try:
            _result(future, conn, f"the deletion of topic {name}")
        except UnknownTopic:
            log.info("topic %s does not exist, nothing to delete", name)


def delete_consumer_group(conn: KafkaConnection, group_id: str, *, attempts: int = 5) -> None:
    """Delete consumer group ``group_id``; a group whose members are still leaving
    (NON_EMPTY_GROUP) is asked again, up to ``attempts`` times."""
    def delete() -> None:
        future = conn.admin.delete_consumer_groups([group_id], request_timeout=conn.timeout_s)[group_id]
        try:
            future.result(timeout=conn.timeout_s + 5)
        except KafkaException as err:
            code = err.args[0].code() if err.args and isinstance(err.args[0], KafkaError) else None
            if code == KafkaError.NON_EMPTY_GROUP:
                raise _typed(KafkaOpsError, f"consumer group {group_id} still has members leaving",
                             retriable=True) from err
            raise classify(err, f"the deletion of consumer group {group_id}", conn) from err

    retrying(f"the deletion of consumer group {group_id}", attempts=attempts, first_wait_s=0.5,
             max_wait_s=2.0)(delete)


def truncate_topics(conn: KafkaConnection, names: Iterable[str]) -> dict[tuple[str, int], int]:
    """Delete every record now in ``names`` (DeleteRecords up to each partition's end offset),
    keeping the topics and their configs; returns the offsets each partition now starts at."""
    names = list(names)
    snap = snapshot(conn, topics=names, sizes=False, groups=False)
    ends = [TopicPartition(p.topic, p.partition, p.end_offset or 0) for p in snap.partitions if p.end_offset]
    if ends:
        futures = conn.admin.delete_records(ends, request_timeout=conn.timeout_s)
        for tp, future in futures.items():
            try:
                future.result(timeout=conn.timeout_s + 5)
            except KafkaException as err:
                raise KafkaOpsError(f"cannot delete the records of {tp.topic}-{tp.partition} before offset "
                                    f"{tp.offset}: {err}; a compacted topic refuses DeleteRecords: delete the "
                                    "topic and create it again") from err
    return {(p.topic, p.partition): p.end_offset or 0 for p in snap.partitions}


# -- partition reassignments (kafka-python) -------------------------------------------------------

def list_partition_reassignments(conn: KafkaConnection, partitions: Iterable[tuple[str, int]] | None = None
                                 ) -> dict[tuple[str, int], Reassignment]:
    """The reassignments in flight, of ``partitions`` or of the whole cluster."""
    from kafka.structs import TopicPartition as KafkaTopicPartition

    wanted = None if partitions is None else [KafkaTopicPartition(t, p) for t, p in partitions]
    if wanted == []:
        return {}
    listing = _legacy_call(conn, "the reassignments in flight",
                           lambda client: client.list_partition_reassignments(wanted))
    found = {}
    for tp, state in listing.items():
        found[(tp.topic, tp.partition)] = Reassignment(
            tp.topic, tp.partition, tuple(state["replicas"]), tuple(state["adding_replicas"]),
            tuple(state["removing_replicas"]))
    return dict(sorted(found.items()))


def alter_partition_reassignments(conn: KafkaConnection,
                                  reassignments: Mapping[tuple[str, int], Iterable[int] | None]) -> None:
    """Submit new replica lists; ``None`` cancels the partition's reassignment in flight. A cancel
    that finds nothing in flight (it finished meanwhile) is not an error."""
    from kafka.errors import NoReassignmentInProgressError
    from kafka.structs import TopicPartition as KafkaTopicPartition

    if not reassignments:
        return
    request = {KafkaTopicPartition(t, p): (None if r is None else [int(b) for b in r])
               for (t, p), r in reassignments.items()}
    results = _legacy_call(conn, f"{len(request)} reassignment(s)",
                           lambda client: client.alter_partition_reassignments(request))
    failed = []
    for tp, error in sorted(results.items()):
        if error is None:
            continue
        if error is NoReassignmentInProgressError and request[tp] is None:
            log.info("cancel of %s-%d: no reassignment in flight", tp.topic, tp.partition)
            continue
        failed.append(f"{tp.topic}-{tp.partition} -> {request[tp]}: {error.__name__}")
    missing = sorted(f"{tp.topic}-{tp.partition}" for tp in request if tp not in results)
    if failed or missing:
        raise KafkaOpsError(f"Kafka refused {len(failed) + len(missing)} of {len(request)} reassignment(s) at "
                            f"{conn.bootstrap}: {'; '.join(failed + [m + ': no answer' for m in missing])[:2000]}; "
                            "check the topics and broker ids, then resubmit")


def elect_preferred_leaders(conn: KafkaConnection, partitions: Iterable[tuple[str, int]] | None = None
                            ) -> tuple[tuple[str, int], ...]:
    """Move leadership to each partition's first replica (all partitions when ``partitions`` is
    None). Returns the partitions whose leader changed; ones already led by it are skipped."""
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    if wanted == []:
        return ()
    # confluent-kafka 2.16 rejects every keyword argument of elect_leaders, hence none here.
    results = _result(conn.admin.elect_leaders(ElectionType.PREFERRED, wanted), conn, "a preferred leader election")
    elected, failed = [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        if error is None:
            elected.append((tp.topic, tp.partition))
        elif error.code() != KafkaError.ELECTION_NOT_NEEDED:
            failed.append(f"{tp.topic}-{tp.partition}: {error.str()}")
    if failed:
        raise KafkaOpsError(f"preferred leader election failed for {len(failed)} partition(s) at {conn.bootstrap}: "
                            f"{'; '.join(failed[:20])}; the first replica must be alive and in the ISR, "
                            "retry once it has caught up")
    log.info("preferred leader election: %d partition(s) changed leader", len(elected))
    return tuple(elected)


# -- dynamic configs of brokers and topics (confluent-kafka) ---------------------------------------

_RESOURCE_TYPES = {"broker": ResourceType.BROKER, "topic": ResourceType.TOPIC}
_DYNAMIC_SOURCES = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DYNAMIC_BROKER_CONFIG.value}
_OPS = {"SET": AlterConfigOpType.SET, "DELETE": AlterConfigOpType.DELETE,
        "APPEND": AlterConfigOpType.APPEND, "SUBTRACT": AlterConfigOpType.SUBTRACT}


@dataclass(frozen=True)
class ConfigOp:
    """One incremental config change: ``op`` is SET, DELETE, APPEND or SUBTRACT (the last two on
    list-valued configs, with comma-separated items)."""

    key: str
    op: str
    value: str | None = None

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ConfigError(f"config operation {self.op!r} on {self.key} is unknown; use one of {', '.join(_OPS)}")


def _resource_type(resource: str) -> ResourceType:
    try:
        return _RESOURCE_TYPES[resource]
    except KeyError as err:
        raise ConfigError(f"config resource {resource!r} is unknown; use 'broker' or 'topic'") from err


def _is_dynamic(entry: ConfigEntry) -> bool:
    return int(getattr(entry.source, "value", entry.source)) in _DYNAMIC_SOURCES


def describe_configs(conn: KafkaConnection, resource: str, names: Iterable[str | int], *,
                     keys: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """The dynamic (per-broker or per-topic) config values of each broker id or topic name,
    optionally only ``keys``. Values from defaults and static files are left out. A topic the
    cluster lacks raises :class:`UnknownTopic`."""
    rtype = _resource_type(resource)
    wanted_keys = None if keys is None else set(keys)
    found: dict[str, dict[str, str]] = {}
    for name in dict.fromkeys(str(n) for n in names):  # a missing topic: UnknownTopic, by its code (classify)
        entries = _result(conn.admin.describe_configs([ConfigResource(rtype, name)], request_timeout=conn.timeout_s)
                          [ConfigResource(rtype, name)], conn, f"the configs of {resource} {name}")
        found[name] = {k: e.value for k, e in sorted(entries.items())
                       if _is_dynamic(e) and (wanted_keys is None or k in wanted_keys)}
    return found


def incremental_alter_configs(conn: KafkaConnection, resource: str,
                              changes: Mapping[str | int, Iterable[ConfigOp]]) -> None:
    """Apply ``changes`` (broker id or topic name -> operations); other config values stay as they are."""
    rtype = _resource_type(resource)
    resources = []
    for name, ops in changes.items():
        entries = [ConfigEntry(op.key, op.value, incremental_operation=_OPS[op.op]) for op in ops]
        if entries:
            resources.append(ConfigResource(rtype, str(name), incremental_configs=entries))
    if not resources:
        return
    # librdkafka takes one broker resource per call (each goes to its own broker); topics go together.
    calls = [[r] for r in resources] if rtype == ResourceType.BROKER else [resources]
    futures = {res: future for call in calls
               for res, future in conn.admin.incremental_alter_configs(call, request_timeout=conn.timeout_s).items()}
    failed = []
    for res, future in futures.items():
        try:
            _result(future, conn, f"a config change of {resource} {res.name}")
        except KafkaUnreachable:
            raise
        except KafkaOpsError as err:
            failed.append(str(err))
    if failed:
        raise KafkaOpsError(f"{len(failed)} of {len(resources)} config change(s) failed: {'; '.join(failed)}")
    log.info("configs changed on %d %s(s)", len(resources), resource)


# -- partition increase and consumer-group offsets (confluent-kafka) ------------------------------------------

def create_partitions(conn: KafkaConnection, topic: str, new_total: int,
                      assignment: Iterable[Iterable[int]] | None = None) -> bool:
    """Grow ``topic`` to ``new_total`` partitions, the new ones on ``assignment`` (one replica list
    per new partition, preferred leader first). Resume-safe: False when the topic already has
    ``new_total`` partitions; a topic with more is refused (Kafka never shrinks a topic)."""
    from confluent_kafka.admin import NewPartitions

    metadata = _topic_metadata(conn, topic)
    if metadata is None or metadata.error is not None:
        raise UnknownTopic(f"topic {topic} does not exist on {conn.bootstrap}; check the name")
    current = len(metadata.partitions)
    if current == new_total:
        return False
    if current > new_total:
        raise KafkaOpsError(f"topic {topic} has {current} partitions, more than the {new_total} asked for; Kafka "
                            "cannot remove partitions: migrate to a new topic instead")
    replicas = [[int(b) for b in r] for r in assignment] if assignment is not None else None
    if replicas is not None and len(replicas) != new_total - current:
        raise ConfigError(f"growing {topic} from {current} to {new_total} partitions needs {new_total - current} "
                          f"replica lists, got {len(replicas)}")
    request = NewPartitions(topic, new_total, replica_assignment=replicas) if replicas else \
        NewPartitions(topic, new_total)
    future = conn.admin.create_partitions([request], request_timeout=conn.timeout_s)[topic]
    _result(future, conn, f"growing {topic} from {current} to {new_total} partitions")
    _wait_for_leaders(conn, topic, new_total, f"grown from {current} to {new_total} partitions")
    log.info("topic %s grown from %d to %d partitions", topic, current, new_total)
    return True


#: The longest one request to commit a group's offsets may go unanswered before it is sent again.
COMMIT_ATTEMPT_S = 15.0


def _group_coordinator_ready(conn: KafkaConnection, group_id: str, topic: str, partitions: list[int],
                             timeout_s: float, what: str) -> None:
    """Return once ``group_id``'s coordinator answers: its committed offsets read through a consumer (the
    group protocol's own coordinator lookup, bounded by ``timeout_s``), never through the admin API.

    librdkafka's admin requests to a group coordinator (AlterConsumerGroupOffsets, ListConsumerGroupOffsets,
    DescribeConsumerGroups) abort the process when one times out while its coordinator lookup is still
    going on and that lookup ends later: the lookup's callback finds the request's once-only reply object
    already freed (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``, from
    ``rd_kafka_admin_coord_response_parse`` on librdkafka's main thread; librdkafka 2.16, unfixed upstream,
    confluentinc/librdkafka#5397 describes the same use-after-free). A fresh cluster creates
    ``__consumer_offsets`` on the first lookup, and under load that took longer than the commit's
    15 s request timeout: the abort of issue 29 (a core dump of tests/integration/platform/test_kafka_39.py
    under CPU load showed that stack). Once the coordinator has answered this consumer, the admin request's
    lookup answers at once. A lookup that does not end in ``timeout_s`` is a retriable timeout, and no
    admin request was sent."""
    from confluent_kafka import Consumer

    consumer = Consumer(client_config({**conn.config, "group.id": group_id, "enable.auto.commit": False,
                                       "socket.connection.setup.timeout.ms": int(timeout_s * 1000)}))
    try:
        consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    except KafkaException as err:
        raise classify(err, what, conn) from err
    finally:
        consumer.close()


def commit_group_offsets(conn: KafkaConnection, group_id: str, topic: str, offsets: Mapping[int, int], *,
                         attempts: int = 10) -> None:
    """Set ``group_id``'s committed offsets on ``topic`` (partition -> next offset to read). The group
    must have no active members (Kafka refuses otherwise). A coordinator that is still loading or
    moving (a fresh cluster creates ``__consumer_offsets`` on first use) is asked again, and so is one
    that did not answer within ``COMMIT_ATTEMPT_S``: setting the same offsets twice is harmless, and a
    coordinator elected a moment ago may leave its first request unanswered. All attempts together
    take at most ``attempts`` tries or twice the connection's timeout."""
    request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, int(p), int(o))
                                                      for p, o in sorted(offsets.items())])
    what = f"the committed offsets of group {group_id} on {topic}"
    attempt_s = min(conn.timeout_s, COMMIT_ATTEMPT_S)

    def commit() -> None:
        try:
            _group_coordinator_ready(conn, group_id, topic, sorted(offsets), attempt_s, what)
            future = conn.admin.alter_consumer_group_offsets([request], request_timeout=attempt_s)[group_id]
            result = _result(future, conn, what)
        except KafkaUnreachable as err:
            if err.code in ("_TIMED_OUT", "REQUEST_TIMED_OUT") and conn.refused is None:
                err.retriable = True  # unanswered, not refused: the same request again is safe
            raise
        failed = [(tp, classify(tp.error, what, conn)) for tp in result.topic_partitions if tp.error]
        if failed:
            raise _typed(KafkaOpsError, f"Kafka refused offsets of group {group_id} on {len(failed)} of "
                                        f"{len(offsets)} partition(s): "
                                        f"{'; '.join(f'{tp.topic}-{tp.partition}: {err.code}' for tp, err in failed)}; "
                                        "stop the group's consumers (an active group cannot be changed) and retry",
                         retriable=all(err.retriable for _, err in failed))

    retrying(what, attempts=attempts, deadline_s=2 * conn.timeout_s, first_wait_s=0.5, max_wait_s=3.0)(commit)


# -- write ACLs (a live migration's quiesce) ---------------------------------------------------------------

def _write_denials(topic: str, principals: Iterable[str]) -> list[Any]:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.WRITE,
                       AclPermissionType.DENY) for principal in sorted(set(principals))]


def deny_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """A DENY Write ACL on ``topic`` for each principal (``User:<name>``): their producers get
    TOPIC_AUTHORIZATION_FAILED. Needs an authorizer on the cluster. Returns how many were created."""
    bindings = _write_denials(topic, principals)
    what = f"DENY Write ACLs on {topic}"
    futures = conn.admin.create_acls(bindings, request_timeout=conn.timeout_s)
    for binding in bindings:
        _result(futures[binding], conn, what)
    return len(bindings)


def allow_writes(conn: KafkaConnection, topic: str, principals: Iterable[str]) -> int:
    """Remove the DENY Write ACLs :func:`deny_writes` created (idempotent); returns how many went."""
    from confluent_kafka.admin import AclBindingFilter

    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in _write_denials(topic, principals)]
    if not filters:
        return 0
    futures = conn.admin.delete_acls(filters, request_timeout=conn.timeout_s)
    return sum(len(_result(futures[f], conn, f"removing DENY Write ACLs on {topic}")) for f in filters)


# -- bounded reads of records ---------------------------------------------------------------------------
# A sample of a topic (how many keys a partition increase would move), lineage headers of a backfill
# target (the cut-over's offset translation), and whole ranges read back. Each read has an end: the
# offsets it was given, or the end offsets of a snapshot. It assigns partitions (no consumer group,
# nothing committed) and stops when every partition reached its end.


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


def read_ranges(config: Mapping[str, str], topic: str, ranges: Mapping[int, tuple[int, int]], *,
                timeout_s: float = 120.0) -> Iterator[Record]:
    """Records of ``topic`` in ``[start, end)`` per partition (``ranges``), in offset order per partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from kafkaops.platform.admin import client_config

    wanted = {int(p): (int(s), int(e)) for p, (s, e) in ranges.items() if e > s}
    if not wanted:
        return
    consumer = Consumer(client_config({**config, "group.id": f"kafkaops-read-{time.monotonic_ns()}",
                                       "enable.auto.commit": False, "enable.partition.eof": True,
                                       "auto.offset.reset": "earliest", "fetch.max.bytes": 16 * 1024 * 1024}))
    try:
        consumer.assign([TopicPartition(topic, p, s) for p, (s, _) in sorted(wanted.items())])
        pending = set(wanted)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkaUnreachable(f"reading {topic} partitions {sorted(pending)} did not reach the end offsets "
                                       f"{ {p: wanted[p][1] for p in sorted(pending)} } within {timeout_s:.0f} s; "
                                       "check the brokers, or that the records were not deleted meanwhile")
            for msg in consumer.consume(10_000, 1.0):
                p = msg.partition()
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        if p in pending and msg.offset() >= wanted[p][1]:
                            pending.discard(p)
                        continue
                    raise KafkaOpsError(f"reading {topic}-{p}: {msg.error()}")
                if p not in pending:
                    continue
                if msg.offset() >= wanted[p][1]:
                    pending.discard(p)
                    continue
                yield Record(topic, p, msg.offset(), msg.timestamp()[1], msg.key(), msg.value(),
                             tuple(msg.headers() or ()))
                if msg.offset() + 1 >= wanted[p][1]:
                    pending.discard(p)
    finally:
        consumer.close()


def end_offsets(config: Mapping[str, str], topic: str) -> dict[int, tuple[int, int]]:
    """Start and end offsets of each partition of ``topic`` (a fresh snapshot of one topic)."""
    with connect(config) as conn:
        snap = snapshot(conn, topics=[topic], sizes=False, groups=False)
    return {p.partition: (p.start_offset or 0, p.end_offset or 0) for p in snap.partitions}


def read_topic(config: Mapping[str, str], topic: str, **kwargs: Any) -> list[Record]:
    """Every record of ``topic`` up to its end offsets now."""
    return list(read_ranges(config, topic, end_offsets(config, topic), **kwargs))


def sample(config: Mapping[str, str], topic: str, ranges: Mapping[int, tuple[int, int]], per_partition: int
           ) -> list[Record]:
    """Up to ``per_partition`` of the latest records of each partition in ``ranges``."""
    tail = {p: (max(s, e - per_partition), e) for p, (s, e) in ranges.items()}
    return list(read_ranges(config, topic, tail))
