"""A connection to one Kafka cluster: its librdkafka config, the admin clients on it, and how a request
made through them is answered.

:func:`connect` turns a plain dict or a bootstrap string (:func:`connection_config`) into a
:class:`KafkaConnection`, which holds confluent-kafka's ``AdminClient`` and, built on first use,
kafka-python's ``KafkaAdminClient`` for what confluent-kafka lacks (log dir sizes, partition
reassignments; :func:`kafka_python_args` translates the config). Invariant: every librdkafka handle is
released deterministically, by :meth:`KafkaConnection.close` in the caller's thread, never by the cyclic
garbage collector (:class:`_ErrorReports` tells why). A refused login or TLS handshake ends a request at
once (:func:`wait_for`, :func:`tls_refusal`); every other error is classified by
:func:`kafkaops.platform.kafka.errors.classify`.
"""
from __future__ import annotations

import concurrent.futures
import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kafkaops.errors import ConfigError, KafkaAuthFailed, KafkaOpsError, KafkaUnreachable
from kafkaops.platform import redaction
from kafkaops.platform.kafka import errors

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_TIMEOUT_S = 10.0

#: The most topic-partitions (or topics) one request of this adapter carries. Kafka 4.4's protocol readers refuse
#: a request with an array of more than 1,000,000 elements (``MessageUtil.MAX_ARRAY_LENGTH``, checked by every
#: generated ``*Data`` reader), and librdkafka refuses an answer listing more than 100,000 partitions of one topic
#: (``RD_KAFKAP_PARTITIONS_MAX``). Invariant: a call that names partitions or topics names at most this many, so
#: no topics, partitions or resources array of its request, nor the partitions array of its answer, is longer.
#: A plan or cluster with more goes in several calls (:func:`request_slices`).
MAX_PARTITIONS_PER_REQUEST = 50_000

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


def request_slices(items: Iterable[_T], size: int = MAX_PARTITIONS_PER_REQUEST) -> list[list[_T]]:
    """``items`` in order, in consecutive slices of at most ``size`` (one request each); none when empty."""
    if size < 1:
        raise ConfigError(f"a request slice of {size} item(s) is impossible; use at least 1")
    listed = list(items)
    return [listed[i:i + size] for i in range(0, len(listed), size)]


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


def client_config(config: Mapping[str, Any]) -> dict[str, Any]:
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
        if err.code() in errors.AUTH_FAILURES:
            self.refused = err
        elif err.code() == KafkaError._TRANSPORT:
            self.dropped = True


@dataclass
class KafkaConnection:
    """Admin clients for one cluster. Create with :func:`connect`; close with :meth:`close` (or use it
    as a context manager), which releases the librdkafka client there and then: nothing but this
    object holds it, and its callbacks hold nothing of this object (:class:`_ErrorReports`).
    A refused login or TLS handshake, which librdkafka only reports to its error callback while it
    keeps retrying, is kept in ``refused`` and ends the request waiting on it (:func:`wait_for`)."""

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
                                "kafkaops.platform.kafka.connection.connect")
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
            try:
                self._legacy = KafkaAdminClient(request_timeout_ms=int(self.timeout_s * 1000),
                                                **kafka_python_args(self.config))
            except errors.kafka_python_refusals() as err:
                raise errors.typed(KafkaAuthFailed, f"Kafka at {self.name} refused kafka-python's login: "
                                                  f"{redaction.scrub(str(err), self.config)}; {errors.AUTH_FIX}",
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

    def renew(self) -> None:
        """Close both clients and open new ones, with fresh metadata: after the cluster lost a broker or its active
        controller, librdkafka's client may keep waiting on the controller it knew ("Timed out waiting for
        controller") until its next metadata refresh, minutes later."""
        self.close()
        self._reports = _ErrorReports()
        self._probed = False
        self.__post_init__()
        log.info("new Kafka clients for %s", self.name)

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


def wait_for(future: Any, conn: KafkaConnection, what: str) -> Any:
    """The future's result; its error classified. Waiting serves the client's error callback, so a
    refused login or handshake ends the wait at once instead of after the request's timeout."""
    deadline = time.monotonic() + conn.timeout_s + 5
    while not future.done() and conn.refused is None and time.monotonic() < deadline:
        # returns once answered (librdkafka's own thread completes the future); the error callback is served
        # at least every 0.1 s meanwhile
        concurrent.futures.wait([future], timeout=0.1)
        conn.admin.poll(0)
        conn.probe_tls()
    try:
        if not future.done() and conn.refused is not None:
            raise KafkaException(conn.refused)
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except (KafkaException, TimeoutError) as err:
        raise errors.classify(err, what, conn) from err


def call_legacy(conn: KafkaConnection, what: str, call: Callable[[Any], _T], attempts: int = 3) -> _T:
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
            typed = errors.classify(err, what, conn)
            if typed.retriable:
                conn.drop_legacy_admin()
            raise typed from err

    return errors.retrying(what, attempts=attempts, first_wait_s=1.0, max_wait_s=2.0)(once)
