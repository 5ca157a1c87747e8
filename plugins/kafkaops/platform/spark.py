"""The Spark apps of ``spark_apps/`` submitted as Spark jobs: one launcher for every capability.

:func:`run_spark_app` hands one app to a :class:`Launcher` as a :class:`Submission`, the way Spark
jobs are submitted: the app's main file is the application, the ``kafkaops`` and ``spark_apps``
packages of this installation go as one zip with ``--py-files``, the jars of the Spark jar folder
(Kafka connector, ``kafkaops-spark-udf.jar``) with ``--jars``, and the cluster's Kafka client
settings as ``kafka.properties`` (below). The launcher of the Airflow tasks is
:class:`kafkaops.airflow.spark_submit.SparkSubmitLauncher` (the Spark provider's ``SparkSubmitHook`` on a
``spark`` connection, ``spark_default`` by default: ``local[*]``, ``spark://``, YARN or ``k8s://``
by changing the connection). The platform layer imports no Airflow, so the launcher comes in.

Before anything is submitted the master must accept a TCP connection (:func:`check_master`), so a
wrong or stopped ``spark://`` or ``k8s://`` master fails at once, naming it and the connection. The
launcher runs spark-submit in the log file's folder with the driver's output into the log file and
stops it after ``timeout_s``. A run that times out, fails or gives no result raises
:class:`SparkAppFailed` with the log's last lines.

Inputs and results travel through the kafkaops store when the caller gives an :class:`Exchange`
(the Airflow tasks do): each input document (the backfill's plan) is an artifact the app reads
(``--<name>-artifact``), and the app writes its result as an artifact (``--result-artifact``) that
:func:`run_spark_app` reads back, so the driver may run on any host that reaches the store (client
or cluster deploy mode), and nothing lies on a driver's disk. The store's URL, password included,
reaches the app like the Kafka settings: a private ``kafkaops-store.properties``, never on its
command line. Without an exchange (local runs, benchmarks) the result is
the ``kafkaops-result:`` JSON line of the driver's output (:func:`emit_result`), which the app
always prints too.

The Kafka client settings (the connection's whole librdkafka config, SASL and SSL included) reach
the app in a file, never on its command line: ``kafka.properties`` (Java properties, mode 0600) in
a private folder removed when the app ends, which only the driver reads (:func:`read_client_config`;
the executors get the options it makes inside their tasks). The app turns it into
the Java client's options with :func:`spark_kafka_options`. The submission's argv, which callers
record, holds no secret, and neither does spark-submit's environment (:func:`child_env`).

No open doors (docs/security.md "Spark"). The secret files are not served: in client deploy mode (the
default: the driver is spark-submit's own JVM) the driver reads ``kafka.properties`` and
``kafkaops-store.properties`` where they lie, in the submitter's 0700 folder, by their absolute path; only
in cluster deploy mode, where the driver runs elsewhere, do they go with ``--files`` (found by base name,
``SparkFiles``). Spark 4.2's file server answers a stream request for a shipped file before any
authentication (``spark.authenticate`` guards its RPC, not that path), so nothing secret may be on it.
Every submission also turns on Spark's own authentication and encryption (:data:`SECURITY_CONF`: the RPC
of the driver, executors and block managers, the task closures that carry the Kafka options, shuffle and
spill files): with ``local[*]``, YARN or Kubernetes Spark makes a secret per application itself; a
``spark://`` standalone cluster shares one secret between its Master, Workers and applications, which the
connection names as a file (:data:`AUTH_SECRET_FILE_EXTRA`) and which reaches spark-submit in a 0600
``--properties-file`` beside the others (:func:`write_submit_properties`), never on its command line, in its
environment or a log. ``local[*]`` binds the driver to loopback (:data:`LOOPBACK_CONF`).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.platform import redaction
from kafkaops.platform.paths import jar_dir, private_file

log = logging.getLogger(__name__)

LOG_TAIL_CHARS = 1500


class SparkAppFailed(KafkaOpsError):
    """A Spark app that timed out, exited with an unexpected code, or wrote no result."""


class SparkMasterUnreachable(SparkAppFailed, ConfigError):
    """The connection's Spark master accepts no connection: nothing was submitted or created. A
    ConfigError: the DAG tasks fail at once instead of retrying (the connection or the master must
    change)."""


#: The Kafka client settings as the app finds them: shipped with ``--files``, read by this base name.
KAFKA_PROPERTIES = "kafka.properties"
#: The app's result: one line of its driver output, this prefix and JSON (:func:`emit_result`).
RESULT_MARK = "kafkaops-result: "
#: What a Spark job runs on when the connection says nothing else.
LOCAL_MASTER = "local[*]"
#: Seconds :func:`check_master` waits for the master to accept a TCP connection.
MASTER_CONNECT_TIMEOUT_S = 5.0

#: librdkafka settings the Java client spells the same way and reads the same way.
_SAME_IN_JAVA = ("bootstrap.servers", "client.id", "ssl.key.password", "ssl.cipher.suites", "ssl.keystore.password")
#: librdkafka settings with no Java counterpart kafkaops can map: refused rather than silently dropped.
_UNMAPPED_SECURITY = ("sasl.oauthbearer.", "sasl.kerberos.", "ssl.crl.location", "ssl.engine.", "ssl.providers",
                      "ssl.certificate.verify_cb", "ssl_engine_callback_data")
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem_text(config: Mapping[str, str], inline: str, location: str) -> str | None:
    """A PEM given inline (``ssl.key.pem``) or by file (``ssl.key.location``), as text."""
    if config.get(inline):
        return config[inline]
    if config.get(location):
        try:
            return Path(config[location]).read_text()
        except OSError as err:
            raise ConfigError(f"cannot read {location} {config[location]}: {err.strerror}; the Spark app reads it on "
                              "the machine it runs on") from err
    return None


def _java_key(pem: str, password: str | None, where: str) -> str:
    """A client's PEM private key as Kafka's Java client reads it: unencrypted PKCS#8. On Java 17
    the client cannot decrypt the PBES2 (PBKDF2 + AES) PKCS#8 keys OpenSSL and ``cryptography``
    write (``NoSuchAlgorithmException: PBES2 SecretKeyFactory not available``), nor read a
    traditional RSA or EC key; an encrypted key is therefore decrypted here with ``ssl.key.password``
    and handed over in the options, which stay in the app's memory (never in a file or its argv)."""
    if "-----BEGIN PRIVATE KEY-----" in pem and "ENCRYPTED" not in pem:
        return pem
    from cryptography.hazmat.primitives import serialization

    encrypted = "ENCRYPTED" in pem
    try:
        key = serialization.load_pem_private_key(pem.encode(), password.encode() if encrypted and password else None)
    except (TypeError, ValueError) as err:
        reason = ("it is encrypted and ssl.key.password is missing" if encrypted and not password
                  else "ssl.key.password does not decrypt it" if encrypted else f"it is not a PEM private key ({err})")
        raise ConfigError(f"the Spark apps cannot read the client key {where}: {reason}; fix the Kafka connection's "
                          "ssl.key.location / ssl.key.pem and ssl.key.password") from err
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def spark_kafka_options(config: Mapping[str, str]) -> dict[str, str]:
    """The options of Spark's Kafka source and sink (``kafka.``-prefixed Java client properties) for
    a librdkafka client config: SASL PLAIN/SCRAM as ``sasl.jaas.config``; the CA, client certificate
    and key as PEM (files or inline; the key decrypted, as PKCS#8: :func:`_java_key`) or a PKCS#12 key store;
    hostname checking as ``ssl.endpoint.identification.algorithm`` says. Settings that only tune
    librdkafka are left out; security settings it cannot map are refused."""
    unmapped = sorted(k for k in config if k.startswith(_UNMAPPED_SECURITY))
    if unmapped:
        raise ConfigError(f"the Spark apps cannot pass {', '.join(unmapped)} to the Java Kafka client; use SASL "
                          "PLAIN/SCRAM and PEM or PKCS#12 certificates for clusters the rekey backfill and key skew read")
    java = {k: str(config[k]) for k in _SAME_IN_JAVA if config.get(k)}
    protocol = config.get("security.protocol")
    if protocol:
        java["security.protocol"] = protocol.upper()
    mechanism = (config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if mechanism:
        java["sasl.mechanism"] = mechanism
    if config.get("sasl.username") is not None and config.get("sasl.password") is not None:
        module = _JAAS_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise ConfigError(f"sasl.mechanism {mechanism} has no username/password login module for the Java "
                              f"client; use one of {', '.join(_JAAS_MODULES)}")
        java["sasl.jaas.config"] = (f"{module} required username={_jaas_quoted(config['sasl.username'])} "
                                    f"password={_jaas_quoted(config['sasl.password'])};")
    ca = config.get("ssl.ca.pem")
    if ca:
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca})
    elif config.get("ssl.ca.location"):
        java.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": config["ssl.ca.location"]})
    if config.get("ssl.keystore.location"):
        java.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": config["ssl.keystore.location"]})
    else:
        chain = _pem_text(config, "ssl.certificate.pem", "ssl.certificate.location")
        key = _pem_text(config, "ssl.key.pem", "ssl.key.location")
        if chain and key:
            java.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
                         "ssl.keystore.key": _java_key(key, config.get("ssl.key.password"),
                                                       config.get("ssl.key.location") or "ssl.key.pem")})
            java.pop("ssl.key.password", None)  # the key is handed over decrypted
    algorithm = config.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        java["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    return {f"kafka.{k}": v for k, v in java.items()}


def write_kafka_properties(config: Mapping[str, str], folder: Path, name: str = KAFKA_PROPERTIES) -> Path:
    """``config`` as Java properties in ``folder``/``name`` (kafka.properties), readable by this user
    only (created 0600, never wider)."""
    from jproperties import Properties

    properties = Properties()
    for key, value in config.items():
        properties[key] = str(value)
    path = folder / name
    with private_file(path) as out:
        properties.store(out, encoding="utf-8", timestamp=False)
    return path


def read_client_config(name: str | Path) -> dict[str, str]:
    """The client config an app was given (for the apps): ``name`` is a file (a ``.properties`` file
    :func:`write_kafka_properties` wrote, else JSON), or, when no such file is here, the base name of
    one shipped with ``--files`` (``SparkFiles``; call it once the Spark session runs)."""
    path = Path(name)
    if not path.is_file():
        from pyspark import SparkFiles

        path = Path(SparkFiles.get(path.name))
    try:
        body = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the settings file {path}: {err.strerror}; the launcher hands "
                          f"them over as {KAFKA_PROPERTIES} and {STORE_PROPERTIES}: by path to a driver on its "
                          "host, with --files to one in cluster deploy mode") from err
    if path.suffix != ".properties":
        return json.loads(body)
    from jproperties import Properties

    properties = Properties()
    properties.load(body, "utf-8")
    return {key: value.data for key, value in properties.items()}


# -- Spark's own doors ---------------------------------------------------------------------------------

#: What every submission turns on (none of it secret: on the command line): authentication of every
#: connection to the driver, the executors and the block managers (and of the driver to a standalone
#: Master), AES-encrypted RPC without the weaker SASL fallback, encrypted shuffle and spill files.
SECURITY_CONF = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true",
                 "spark.network.crypto.saslFallback": "false", "spark.io.encryption.enabled": "true"}
#: A ``local`` master's driver is the whole application: it listens on loopback only.
LOOPBACK_CONF = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
#: The Spark setting of a standalone cluster's shared secret.
AUTH_SECRET = "spark.authenticate.secret"
#: The extra of a ``spark://`` connection naming the cluster's secret: a Spark properties file (mode 0600)
#: with :data:`AUTH_SECRET`, the one its Master and Workers start with (``--properties-file``).
AUTH_SECRET_FILE_EXTRA = "auth-secret-file"
#: What spark-submit reads with ``--properties-file`` for a standalone master: its defaults and the secret.
SUBMIT_PROPERTIES = "spark-submit.properties"


def security_conf(master: str) -> dict[str, str]:
    """The Spark settings every submission to ``master`` carries (:data:`SECURITY_CONF`, and for a
    ``local`` master :data:`LOOPBACK_CONF`)."""
    return {**SECURITY_CONF, **(LOOPBACK_CONF if master.startswith("local") else {})}


def needs_shared_secret(master: str) -> bool:
    """Whether ``master`` (a standalone ``spark://`` one) needs the cluster's secret from the submitter:
    ``local``, YARN and Kubernetes make one per application themselves."""
    return master.startswith("spark://")


def read_auth_secret(path: str | None, master: str, conn_id: str) -> str:
    """The standalone cluster's secret from the connection's :data:`AUTH_SECRET_FILE_EXTRA` (a Spark
    properties file); a ConfigError naming the connection when there is none."""
    fix = (f"give connection {conn_id!r} the extra {AUTH_SECRET_FILE_EXTRA!r}: the path of a Spark properties "
           f"file (mode 0600) holding {AUTH_SECRET}, the one Spark master {master} and its workers start with "
           "(docs/security.md); nothing was submitted")
    if not path:
        raise ConfigError(f"Spark master {master} of connection {conn_id!r} needs its cluster's authentication "
                          f"secret: {fix}")
    from jproperties import Properties

    properties = Properties()
    try:
        properties.load(Path(path).read_bytes(), "utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}; {fix}") from err
    found = properties[AUTH_SECRET].data.strip() if AUTH_SECRET in properties else ""
    if not found:
        raise ConfigError(f"{path} holds no {AUTH_SECRET}: {fix}")
    return found


def spark_defaults() -> str:
    """The text of the ``spark-defaults.conf`` spark-submit reads when no ``--properties-file`` is given
    (``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``, else the pip pyspark's ``conf``); empty when none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        if not home:
            spec = importlib.util.find_spec("pyspark")
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            home = locations[0] if locations else ""
        conf_dir = str(Path(home) / "conf") if home else ""
    path = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    return path.read_text() if path is not None and path.is_file() else ""


def write_submit_properties(folder: Path, secret: str) -> Path:
    """``folder``/:data:`SUBMIT_PROPERTIES` (created 0600): the ``spark-defaults.conf`` spark-submit would
    read (a ``--properties-file`` replaces it) and the cluster's secret after it."""
    from jproperties import Properties

    path = folder / SUBMIT_PROPERTIES
    with private_file(path) as out:
        out.write(spark_defaults().encode() + b"\n")
        properties = Properties()
        properties[AUTH_SECRET] = secret
        properties.store(out, encoding="utf-8", timestamp=False)
    return path


def emit_result(result: Mapping[str, Any]) -> None:
    """Print the app's result as the one line :func:`run_spark_app` reads back without an
    :class:`Exchange` (for the apps)."""
    print(RESULT_MARK + json.dumps(result, sort_keys=True), flush=True)


# -- inputs and results through the store --------------------------------------------------------------

#: The store's URL (``url``), as the app gets it: Java properties shipped with ``--files``, mode 0600.
STORE_PROPERTIES = "kafkaops-store.properties"


@dataclass(frozen=True)
class Exchange:
    """Where a submission's input documents and its result travel: artifacts of ``store`` (a
    :class:`kafkaops.platform.store.Store`) under ``prefix``, one folder per submission."""

    store: Any
    prefix: str


def add_exchange_arguments(parser: Any, *inputs: str, group: Any = None) -> None:
    """The arguments :func:`run_spark_app` gives an app with an :class:`Exchange` (for the apps):
    ``--store-config``, ``--result-artifact`` and ``--<name>-artifact`` for each of ``inputs`` (in
    ``group`` when given: a mutually exclusive group with the app's own way to take it)."""
    parser.add_argument("--store-config", metavar="FILE", help=f"the kafkaops store's URL as {STORE_PROPERTIES} "
                        "(its path, or its base name when shipped with --files): inputs and the result go through it")
    parser.add_argument("--result-artifact", metavar="PATH", help="write the result to this artifact of the store")
    for name in inputs:
        (group or parser).add_argument(f"--{name}-artifact", metavar="PATH",
                                       help=f"read the {name} from this artifact of the store")


def app_store(args: Any) -> Any:
    """The store of an app run with ``--store-config`` (after the Spark session started), else None."""
    if not getattr(args, "store_config", None):
        return None
    from kafkaops.platform import store

    url = read_client_config(args.store_config).get("url")
    if not url:
        raise ConfigError(f"{args.store_config} names no store url")
    # not open_store: the submitter prepared the schema, and Alembic's scripts cannot be read from the
    # --py-files zip the driver imports kafkaops from
    return store.Store(url, source="the Spark app's kafkaops store")


def read_input(args: Any, name: str) -> str:
    """The input document ``name`` of an app: the ``--<name>-artifact`` of its store (for the apps)."""
    path = getattr(args, f"{name}_artifact")
    store = app_store(args)
    found = None if store is None else store.artifact(path)
    if found is None:
        raise ConfigError(f"the {name} artifact {path} is not in the kafkaops store"
                          + ("" if args.store_config else " (no --store-config)"))
    return found.body.decode()


def deliver_result(args: Any, result: Mapping[str, Any], store: Any = None) -> None:
    """Print the app's result line (:func:`emit_result`) and, with ``--result-artifact``, store it
    as that artifact of ``store`` (default :func:`app_store`, which needs the Spark session) (for the apps)."""
    emit_result(result)
    if getattr(args, "result_artifact", None):
        body = json.dumps(result, sort_keys=True).encode()
        (store or app_store(args)).put_artifact(args.result_artifact, body, "application/json")


def stored_result(store: Any, path: str) -> dict[str, Any] | None:
    """The result an app stored as the artifact ``path``, or None when it stored none."""
    found = store.artifact(path)
    return None if found is None else json.loads(found.body)


def result_of(log_file: Path) -> dict[str, Any] | None:
    """The last result line of an app's log, or None when it printed none."""
    found = None
    with log_file.open(errors="replace") as lines:
        for line in lines:
            at = line.find(RESULT_MARK)
            if at >= 0:
                found = line[at + len(RESULT_MARK):]
    return None if found is None else json.loads(found)


def tuning_options(pairs: Sequence[str]) -> dict[str, str]:
    """``--kafka-option kafka.KEY=VALUE`` pairs of an app's command line; a secret is refused there
    (it would be in argv, the process list and the audit): it belongs in the connection."""
    options = dict(p.split("=", 1) for p in pairs)
    secret = sorted(k for k in options if redaction.is_secret(k))
    if secret:
        raise ConfigError(f"--kafka-option {', '.join(secret)} would put a secret on the command line; put it in the "
                          "Kafka connection, which reaches the app through --kafka-config")
    return options


def child_env() -> dict[str, str]:
    """This process' environment without the credentials an app needs none of (the worker's Airflow
    connections given by the environment, ...: :func:`kafkaops.platform.redaction.secret_env_names`)."""
    hidden = set(redaction.secret_env_names(os.environ))
    return {k: v for k, v in os.environ.items() if k not in hidden}


def log_tail(log_file: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return log_file.read_text(errors="replace")[-chars:]
    except OSError as err:
        return f"(log unreadable: {err})"


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The host and port pairs of a ``spark://`` (also ``spark://h1:7077,h2:7077``) or ``k8s://``
    master; none for ``local`` and ``yarn`` (found through the Hadoop configuration)."""
    if master.startswith("spark://"):
        pairs = []
        for address in master[len("spark://"):].split(","):
            host, _, port = address.strip().rpartition(":")
            pairs.append((host, int(port)) if host else (port, 7077))
        return pairs
    if master.startswith("k8s://"):
        url = urlsplit(master[len("k8s://"):] if "://" in master[len("k8s://"):] else "https://" + master[6:])
        return [(url.hostname or "", url.port or (80 if url.scheme == "http" else 443))]
    return []


def check_master(master: str, conn_id: str, *, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`SparkMasterUnreachable` unless one address of ``master`` accepts a TCP connection
    within ``timeout_s``; the message names the master and the connection."""
    tried = []
    for host, port in master_addresses(master):
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return
        except OSError as err:
            tried.append(f"{host}:{port}: {err.strerror or err}")
    if tried:
        raise SparkMasterUnreachable(f"Spark master {master} of connection {conn_id!r} is not reachable "
                                     f"({'; '.join(tried)}); nothing was submitted or created. Start the master or "
                                     f"point the connection {conn_id!r} at a running one, then run the task again")


@dataclass(frozen=True)
class Submission:
    """One app of ``spark_apps`` as a Spark job; what goes to spark-submit, none of it secret."""

    app: str
    application: str
    py_files: str
    jars: tuple[str, ...]
    files: tuple[str, ...]
    args: tuple[str, ...]
    driver_memory: str = "1g"
    conf: Mapping[str, str] = field(default_factory=dict)
    #: spark-submit's ``--properties-file`` (a standalone master's secret: :func:`write_submit_properties`)
    properties_file: str | None = None
    #: Secret files the driver reads where they lie (client deploy mode): named by the args, never shipped
    private_files: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"kafkaops-{self.app.replace('_', '-')}"

    def describe(self, master: str) -> list[str]:
        """The submission as a spark-submit command line, to record (no secret: the Kafka settings
        are a file it names)."""
        conf = [x for k, v in sorted(self.conf.items()) for x in ("--conf", f"{k}={v}")]
        properties = ["--properties-file", self.properties_file] if self.properties_file else []
        return ["spark-submit", "--master", master, "--name", self.name, *conf, *properties,
                "--driver-memory", self.driver_memory,
                "--jars", ",".join(self.jars), "--py-files", self.py_files,
                *(["--files", ",".join(self.files)] if self.files else []), self.application, *self.args]


class Launcher(Protocol):
    """Submits a :class:`Submission` to the Spark master of a connection."""

    conn_id: str
    master: str
    #: ``client`` (or None: spark-submit's default) or ``cluster``: where the driver runs
    deploy_mode: str | None
    #: the connection's :data:`AUTH_SECRET_FILE_EXTRA`, None when it names none
    auth_secret_file: str | None

    def submit(self, submission: Submission, *, env: Mapping[str, str], log_file: Path, timeout_s: float) -> int:
        """Run it in ``log_file``'s folder with ``env``, the driver's output into ``log_file``;
        return spark-submit's exit code; raise TimeoutError when it was stopped after ``timeout_s``."""
        ...


PACKAGES = ("kafkaops", "spark_apps")


def python_archive(folder: Path) -> Path:
    """A zip of the installed ``kafkaops`` and ``spark_apps`` packages (found by importlib, so it is
    what this process runs), for ``--py-files``."""
    path = folder / "kafkaops-apps.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise ConfigError(f"package {package} is not installed: the Spark apps need it")
            root = Path(list(spec.submodule_search_locations)[0])
            for file in sorted(root.rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                    archive.write(file, f"{package}/{file.relative_to(root).as_posix()}")
    return path


def app_file(app: str) -> str:
    """The main file of ``spark_apps/<app>.py`` as installed."""
    spec = importlib.util.find_spec(f"spark_apps.{app}")
    if spec is None or not spec.origin:
        raise ConfigError(f"Spark app spark_apps.{app} is not installed")
    return spec.origin


def submit_env() -> dict[str, str]:
    """spark-submit's environment: :func:`child_env`, this interpreter's ``bin`` first on PATH (the
    pip pyspark's spark-submit) and as the driver's Python. Executors start no Python worker (the apps
    run on the JVM): a ``PYSPARK_PYTHON`` of this host is not handed to them."""
    env = child_env()
    env.pop("PYSPARK_PYTHON", None)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, *filter(None, [env.get("PATH")])])
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


#: How often a running Spark app's progress is logged (:func:`run_spark_app`).
PROGRESS_EVERY_S = 15.0


@contextmanager
def _progress_thread(progress: Callable[[float], None] | None, every_s: float, what: str) -> Iterator[None]:
    """Call ``progress(elapsed_s)`` every ``every_s`` on a thread while the block runs; the thread is
    stopped and joined when the block ends (a call under way is waited for, at most ``every_s`` + 60 s)."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                progress(time.monotonic() - started)
            except Exception as err:  # a progress line is never worth failing the run for
                log.warning("the progress of %s could not be read: %s", what, err)

    thread = threading.Thread(target=watch, name="kafkaops-spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(every_s + 60.0)


def run_spark_app(app: str, args: Sequence[str], *, launcher: Launcher, log_file: Path, timeout_s: float,
                  what: str, on_timeout: str, on_failure: str = "", ok_exit_codes: Collection[int] | None = (0,),
                  kafka_config: Mapping[str, str] | None = None, driver_memory: str = "1g",
                  on_start: Callable[[list[str]], None] | None = None, exchange: Exchange | None = None,
                  inputs: Mapping[str, str] | None = None, progress: Callable[[float], None] | None = None,
                  progress_every_s: float = PROGRESS_EVERY_S) -> dict[str, Any]:
    """Submit ``spark_apps/<app>.py`` with ``args`` through ``launcher`` and return its result.

    ``what`` names the run in errors (``"key skew of orders"``); ``on_timeout`` and ``on_failure``
    say what to do next. The run failed when spark-submit exits with a code outside
    ``ok_exit_codes`` (``None``: any code, the result alone decides) or the app gave no result.
    ``kafka_config`` (the librdkafka config of the cluster) reaches the app as ``kafka.properties``
    (module docstring); ``on_start`` gets the submission's command line just before it starts (to
    record it: it holds no secret). With an ``exchange`` each of ``inputs`` (name -> JSON text) is
    stored as ``<prefix>/<submission>/<name>.json`` for the app's ``--<name>-artifact`` and the
    result comes back as the artifact ``result.json`` beside them (module docstring). An
    unreachable master raises before anything is submitted. ``progress`` is called every
    ``progress_every_s`` while the app runs, with the seconds since it was submitted (to log how far it
    got), on a thread of its own that ends before this returns; its errors are logged, never raised.
    """
    if inputs and exchange is None:
        raise ValueError("run_spark_app: inputs travel through the store: give an exchange")
    check_master(launcher.master, launcher.conn_id)
    secret = (read_auth_secret(launcher.auth_secret_file, launcher.master, launcher.conn_id)
              if needs_shared_secret(launcher.master) else None)
    jars = tuple(sorted(str(p) for p in jar_dir("spark").glob("*.jar")))
    log_file = log_file.absolute()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    # the secret files: read in place by a driver on this host, shipped (and named by base name) only to one
    # that runs elsewhere (module docstring)
    ship = launcher.deploy_mode == "cluster"
    with tempfile.TemporaryDirectory(prefix="kafkaops-spark-") as private:
        secret_files: list[str] = []
        argv = list(args)

        def secret_file(path: Path) -> str:
            secret_files.append(str(path))
            return path.name if ship else str(path)

        if kafka_config is not None:
            argv += ["--kafka-config", secret_file(write_kafka_properties(kafka_config, Path(private)))]
        result_path = None
        if exchange is not None:  # a folder of its own: no earlier try's result can be taken for this one's
            folder = f"{exchange.prefix.rstrip('/')}/{secrets.token_hex(6)}"
            for name, text in (inputs or {}).items():
                argv += [f"--{name}-artifact", exchange.store.put_artifact(f"{folder}/{name}.json", text.encode(),
                                                                          "application/json")]
            result_path = f"{folder}/result.json"
            url = exchange.store.url.render_as_string(hide_password=False)
            store_config = secret_file(write_kafka_properties({"url": url}, Path(private), STORE_PROPERTIES))
            argv += ["--store-config", store_config, "--result-artifact", result_path]
        properties = None if secret is None else str(write_submit_properties(Path(private), secret))
        submission = Submission(app, app_file(app), str(python_archive(Path(private))), jars,
                                tuple(secret_files) if ship else (), tuple(argv), driver_memory,
                                security_conf(launcher.master), properties, () if ship else tuple(secret_files))
        if on_start is not None:
            on_start(submission.describe(launcher.master))
        try:
            with _progress_thread(progress, progress_every_s, what):
                code = launcher.submit(submission, env=submit_env(), log_file=log_file, timeout_s=timeout_s)
        except TimeoutError as err:
            raise SparkAppFailed(f"{what} did not finish within {timeout_s:.0f} s and was stopped (log {log_file}); "
                                 f"{on_timeout}") from err
    result = result_of(log_file) if exchange is None or result_path is None else stored_result(exchange.store,
                                                                                                 result_path)
    if (ok_exit_codes is not None and code not in ok_exit_codes) or result is None:
        found = "no result" if result is None else "a result (not used)"
        next_step = f"{on_failure}; " if on_failure else ""
        raise SparkAppFailed(f"{what} on Spark master {launcher.master} failed (exit {code}, {found}); {next_step}"
                             f"log {log_file} ends: {log_tail(log_file)}")
    return result
