"""The Spark apps of ``spark_apps/`` as local subprocesses: one launcher for every capability.

:func:`run_spark_app` runs ``python -m spark_apps.<app> ...`` (``spark_apps`` is a package of the
kafkaops wheel; local Spark: the app starts its own session) in the log file's folder, so Spark's
scratch files stay with the run, writes its stdout and stderr to that log file, enforces a
timeout, and returns the JSON the app wrote. A run that times out, fails or writes nothing raises
:class:`SparkAppFailed` with the log's last lines. Callers pass absolute paths.

The app's Kafka client settings (the connection's whole librdkafka config, SASL and SSL included)
reach it in a file, never on its command line: :func:`run_spark_app` writes them to
``kafka.json`` (mode 0600) in a folder of its own, passes ``--kafka-config PATH`` and removes the
folder when the app ends. The app turns them into the Java client's options with
:func:`spark_kafka_options`. Its argv, which callers may record, therefore holds no secret.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.platform import redaction

LOG_TAIL_CHARS = 1500


class SparkAppFailed(KafkaOpsError):
    """A Spark app that timed out, exited with an unexpected code, or wrote no result."""


def spark_command(app: str, args: Sequence[str]) -> list[str]:
    """The command line of ``spark_apps/<app>.py`` with ``args``."""
    return [sys.executable, "-m", f"spark_apps.{app}", *args]


KAFKA_CONFIG_FILE = "kafka.json"

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


def spark_kafka_options(config: Mapping[str, str]) -> dict[str, str]:
    """The options of Spark's Kafka source and sink (``kafka.``-prefixed Java client properties) for
    a librdkafka client config: SASL PLAIN/SCRAM as ``sasl.jaas.config``; the CA, client certificate
    and key as PEM (files or inline; the Java client wants the key in PKCS#8) or a PKCS#12 key store;
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
            java.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain, "ssl.keystore.key": key})
    algorithm = config.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        java["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    return {f"kafka.{k}": v for k, v in java.items()}


def write_kafka_config(config: Mapping[str, str], folder: Path) -> Path:
    """``config`` as JSON in ``folder``/kafka.json, readable by this user only (created 0600, never wider)."""
    path = folder / KAFKA_CONFIG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(dict(config), out)
    return path


def read_kafka_config(path: str | Path) -> dict[str, str]:
    """The client config a launcher wrote with :func:`write_kafka_config` (for the apps)."""
    return json.loads(Path(path).read_text())


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


def run_spark_app(app: str, args: Sequence[str], *, output: Path, log_file: Path, timeout_s: float, what: str,
                  on_timeout: str, on_failure: str = "", ok_exit_codes: Collection[int] | None = (0,),
                  kafka_config: Mapping[str, str] | None = None,
                  on_start: Callable[[list[str]], None] | None = None) -> dict[str, Any]:
    """Run ``spark_apps/<app>.py`` with ``args`` and return the JSON it wrote to ``output``.

    ``what`` names the run in errors (``"key skew of orders"``); ``on_timeout`` and ``on_failure``
    say what to do next. ``output`` is removed first, so a result is always this run's. The run
    failed when it exits with a code outside ``ok_exit_codes`` (``None``: any code, the result
    file alone decides) or leaves no ``output``. ``kafka_config`` (the librdkafka config of the
    cluster) reaches the app as ``--kafka-config FILE`` (module docstring); ``on_start`` gets the
    argv just before the app starts (to record it: it holds no secret).
    """
    output, log_file = output.absolute(), log_file.absolute()
    output.unlink(missing_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafkaops-kafka-") as secret_dir, log_file.open("w") as out:
        argv = list(args)
        if kafka_config is not None:
            argv += ["--kafka-config", str(write_kafka_config(kafka_config, Path(secret_dir)))]
        command = spark_command(app, argv)
        if on_start is not None:
            on_start(command)
        try:
            done = subprocess.run(command, cwd=log_file.parent, stdout=out, env=child_env(),
                                  stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as err:
            raise SparkAppFailed(f"{what} did not finish within {timeout_s:.0f} s and was stopped (log {log_file}); "
                                 f"{on_timeout}") from err
    bad_exit = ok_exit_codes is not None and done.returncode not in ok_exit_codes
    if bad_exit or not output.exists():
        found = "no result" if not output.exists() else f"result {output} (not used)"
        next_step = f"{on_failure}; " if on_failure else ""
        raise SparkAppFailed(f"{what} failed (exit {done.returncode}, {found}); {next_step}log {log_file} ends: "
                             f"{log_tail(log_file)}")
    return json.loads(output.read_text())
