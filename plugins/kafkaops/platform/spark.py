"""The Spark apps of ``spark_apps/`` submitted as Spark jobs: one launcher for every capability.

:func:`run_spark_app` hands one app to a :class:`Launcher` as a :class:`Submission`, the way Spark
jobs are submitted: the app's main file is the application, the ``kafkaops`` and ``spark_apps``
packages of this installation go as one zip with ``--py-files``, the jars of the Spark jar folder
(Kafka connector, ``kafkaops-spark-udf.jar``) with ``--jars``, and the cluster's Kafka client
settings as ``kafka.properties`` with ``--files``. The launcher of the Airflow tasks is
:class:`kafkaops.airflow.spark.SparkSubmitLauncher` (the Spark provider's ``SparkSubmitHook`` on a
``spark`` connection, ``spark_default`` by default: ``local[*]``, ``spark://``, YARN or ``k8s://``
by changing the connection). The platform layer imports no Airflow, so the launcher comes in.

Before anything is submitted the master must accept a TCP connection (:func:`check_master`), so a
wrong or stopped ``spark://`` or ``k8s://`` master fails at once, naming it and the connection. The
launcher runs spark-submit in the log file's folder with the driver's output into the log file and
stops it after ``timeout_s``. The app prints its result as one ``kafkaops-result:`` JSON line
(:func:`emit_result`), which comes back with the driver's output: no driver-local result file, so
the driver may run on any host whose output spark-submit relays (client deploy mode, the only one
Spark offers Python apps on a standalone cluster). Plans go in as JSON arguments. A run that times
out, fails or prints no result raises :class:`SparkAppFailed` with the log's last lines.

The Kafka client settings (the connection's whole librdkafka config, SASL and SSL included) reach
the app in a file, never on its command line: ``kafka.properties`` (Java properties, mode 0600) in
a private folder removed when the app ends; Spark ships it to the driver and the executors, and the
app finds it by its base name (:func:`read_client_config`: ``SparkFiles``). The app turns it into
the Java client's options with :func:`spark_kafka_options`. The submission's argv, which callers
record, holds no secret, and neither does spark-submit's environment (:func:`child_env`).
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tempfile
import zipfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.platform import redaction
from kafkaops.platform.paths import jar_dir

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


def write_kafka_properties(config: Mapping[str, str], folder: Path) -> Path:
    """``config`` as Java properties in ``folder``/kafka.properties, readable by this user only
    (created 0600, never wider)."""
    from jproperties import Properties

    properties = Properties()
    for key, value in config.items():
        properties[key] = str(value)
    path = folder / KAFKA_PROPERTIES
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
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
        raise ConfigError(f"cannot read the Kafka client settings {path}: {err.strerror}; the launcher ships "
                          f"them as {KAFKA_PROPERTIES} with --files") from err
    if path.suffix != ".properties":
        return json.loads(body)
    from jproperties import Properties

    properties = Properties()
    properties.load(body, "utf-8")
    return {key: value.data for key, value in properties.items()}


def emit_result(result: Mapping[str, Any]) -> None:
    """Print the app's result as the one line :func:`run_spark_app` reads back (for the apps)."""
    print(RESULT_MARK + json.dumps(result, sort_keys=True), flush=True)


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

    @property
    def name(self) -> str:
        return f"kafkaops-{self.app.replace('_', '-')}"

    def describe(self, master: str) -> list[str]:
        """The submission as a spark-submit command line, to record (no secret: the Kafka settings
        are a file it names)."""
        conf = [x for k, v in sorted(self.conf.items()) for x in ("--conf", f"{k}={v}")]
        return ["spark-submit", "--master", master, "--name", self.name, *conf, "--driver-memory", self.driver_memory,
                "--jars", ",".join(self.jars), "--py-files", self.py_files,
                *(["--files", ",".join(self.files)] if self.files else []), self.application, *self.args]


class Launcher(Protocol):
    """Submits a :class:`Submission` to the Spark master of a connection."""

    conn_id: str
    master: str

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


def run_spark_app(app: str, args: Sequence[str], *, launcher: Launcher, log_file: Path, timeout_s: float,
                  what: str, on_timeout: str, on_failure: str = "", ok_exit_codes: Collection[int] | None = (0,),
                  kafka_config: Mapping[str, str] | None = None, driver_memory: str = "1g",
                  on_start: Callable[[list[str]], None] | None = None) -> dict[str, Any]:
    """Submit ``spark_apps/<app>.py`` with ``args`` through ``launcher`` and return its result.

    ``what`` names the run in errors (``"key skew of orders"``); ``on_timeout`` and ``on_failure``
    say what to do next. The run failed when spark-submit exits with a code outside
    ``ok_exit_codes`` (``None``: any code, the result alone decides) or the app printed no result.
    ``kafka_config`` (the librdkafka config of the cluster) reaches the app as ``kafka.properties``
    (module docstring); ``on_start`` gets the submission's command line just before it starts (to
    record it: it holds no secret). An unreachable master raises before anything is submitted.
    """
    check_master(launcher.master, launcher.conn_id)
    jars = tuple(sorted(str(p) for p in jar_dir("spark").glob("*.jar")))
    log_file = log_file.absolute()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    with tempfile.TemporaryDirectory(prefix="kafkaops-spark-") as private:
        files: tuple[str, ...] = ()
        argv = list(args)
        if kafka_config is not None:
            files = (str(write_kafka_properties(kafka_config, Path(private))),)
            argv += ["--kafka-config", KAFKA_PROPERTIES]
        submission = Submission(app, app_file(app), str(python_archive(Path(private))), jars, files, tuple(argv),
                                driver_memory)
        if on_start is not None:
            on_start(submission.describe(launcher.master))
        try:
            code = launcher.submit(submission, env=submit_env(), log_file=log_file, timeout_s=timeout_s)
        except TimeoutError as err:
            raise SparkAppFailed(f"{what} did not finish within {timeout_s:.0f} s and was stopped (log {log_file}); "
                                 f"{on_timeout}") from err
    result = result_of(log_file)
    if (ok_exit_codes is not None and code not in ok_exit_codes) or result is None:
        found = "no result" if result is None else "a result (not used)"
        next_step = f"{on_failure}; " if on_failure else ""
        raise SparkAppFailed(f"{what} on Spark master {launcher.master} failed (exit {code}, {found}); {next_step}"
                             f"log {log_file} ends: {log_tail(log_file)}")
    return result
