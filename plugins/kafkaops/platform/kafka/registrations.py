"""Broker registrations in KRaft. A stopped broker stays registered with the controller (fenced) until it
is unregistered: a scale-out that removes the brokers it provisioned unregisters them after stopping them.

Neither librdkafka nor kafka-python speaks UnregisterBroker, so this runs Kafka's own ``kafka-cluster``
tool (``org.apache.kafka.tools.ClusterTool`` of the ``tools`` jars, as ``kafka-cluster.sh`` does) with the
connection's client settings as a Java properties file, readable by this user alone and removed when the
tool ends (never in its argv). Every call has a deadline: the tool is killed when it passes.
"""
from __future__ import annotations

import logging
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from kafkaops.errors import ConfigError, KafkaOpsError
from kafkaops.platform.paths import jar_dir

log = logging.getLogger(__name__)

#: Kafka's ``kafka-cluster`` command (``bin/kafka-cluster.sh`` runs this class).
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"

#: How long one run of the tool may take (a JVM start and one admin request).
TOOL_TIMEOUT_S = 90.0


#: The Java exception the controller answers an id it has no registration for with (already unregistered).
NOT_REGISTERED = "BrokerIdNotRegisteredException"


class UnregisterFailed(KafkaOpsError):
    """The controller did not unregister a broker (or the tool could not ask it). ``code``: the simple name of
    the Java exception behind it, when the tool printed one."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def _java_client_properties(config: Mapping[str, str]) -> dict[str, str]:
    """The Java admin client's properties for a librdkafka client config: the mapping the Spark apps use
    (:func:`kafkaops.platform.spark.spark_kafka_options`), without Spark's ``kafka.`` prefix."""
    from kafkaops.platform.spark import spark_kafka_options

    return {k.removeprefix("kafka."): v for k, v in spark_kafka_options(config).items()}


def run_cluster_tool(config: Mapping[str, str], args: Sequence[str], *, timeout_s: float = TOOL_TIMEOUT_S) -> str:
    """``kafka-cluster <args> --bootstrap-server <the connection's> --command-config <its settings>``; its
    standard output. A non-zero exit or the deadline raises :class:`UnregisterFailed` with the tool's last
    lines (they name no secret: the settings are in the file)."""
    from kafkaops.platform.spark import write_kafka_properties

    bootstrap = config.get("bootstrap.servers")
    if not bootstrap:
        raise ConfigError("the Kafka connection names no bootstrap.servers; kafka-cluster needs them")
    what = f"kafka-cluster {' '.join(args)}"
    with tempfile.TemporaryDirectory(prefix="kafkaops-cluster-tool-") as folder:
        properties = write_kafka_properties(_java_client_properties(config), Path(folder), "admin.properties")
        cmd = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{jar_dir('tools')}/*", CLUSTER_TOOL,
               *args, "--bootstrap-server", bootstrap, "--command-config", str(properties)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as err:  # run() killed the JVM and waited for it
            raise UnregisterFailed(f"{what} did not answer within {timeout_s:.0f} s (killed); check that "
                                   f"{bootstrap} answers, then run it again") from err
        except OSError as err:
            raise UnregisterFailed(f"{what} could not start ({err}); it needs java on this host's PATH") from err
    if done.returncode != 0:
        raise UnregisterFailed(f"{what} exited {done.returncode}: {_cause(done.stderr or done.stdout)}",
                               code=_error_class(done.stderr or done.stdout))
    return done.stdout


def _error_class(output: str) -> str | None:
    """The simple name of the innermost Java exception the tool printed (``Caused by: <class>: ...``,
    else its first exception line), e.g. ``BrokerIdNotRegisteredException``; None when it printed none."""
    names = re.findall(r"(?:^|Caused by: )([\w.$]+(?:Exception|Error))\b", output, flags=re.MULTILINE)
    return names[-1].rsplit(".", 1)[-1] if names else None


def _cause(output: str) -> str:
    """The tool's innermost error line (``Caused by: ...``), else its last line, without the stack frames."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip() and not line.strip().startswith("at ")]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    return (causes or lines or ["no output"])[-1][:500]


def unregister_brokers(config: Mapping[str, str], broker_ids: Iterable[int], *,
                       timeout_s: float = TOOL_TIMEOUT_S) -> tuple[int, ...]:
    """Unregister each of ``broker_ids``, which must be stopped first (a running broker registers again at its
    next heartbeat). An id the controller has no registration for counts as done (a repeated call). Returns
    the ids, in order; the first failure raises, naming those done before it."""
    done: list[int] = []
    for broker in sorted(set(broker_ids)):
        try:
            run_cluster_tool(config, ["unregister", "--id", str(broker)], timeout_s=timeout_s)
        except UnregisterFailed as err:
            if err.code == NOT_REGISTERED:
                log.info("broker %d was not registered (any more)", broker)
                done.append(broker)
                continue
            before = f" (unregistered before it: {', '.join(map(str, done))})" if done else ""
            raise UnregisterFailed(f"broker {broker} was not unregistered{before}: {err}") from err
        log.info("broker %d unregistered", broker)
        done.append(broker)
    return tuple(done)


def registered_brokers(config: Mapping[str, str], *, timeout_s: float = TOOL_TIMEOUT_S) -> dict[int, bool]:
    """Every broker the controller has registered, fenced ones included: broker id -> fenced (Kafka 4.0
    and later: DescribeCluster with fenced brokers, ``kafka-cluster list-endpoints --include-fenced-brokers``)."""
    out = run_cluster_tool(config, ["list-endpoints", "--include-fenced-brokers"], timeout_s=timeout_s)
    found: dict[int, bool] = {}
    for line in out.splitlines()[1:]:  # a header line, then one line per broker: ID HOST PORT RACK STATE ...
        fields = line.split()
        if fields and fields[0].isdigit():
            found[int(fields[0])] = "fenced" in (f.lower() for f in fields[1:])
    return found
