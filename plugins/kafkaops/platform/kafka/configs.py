"""Dynamic configs of brokers and topics: read (:func:`describe_configs`, only the dynamic values) and
changed one key at a time (:func:`incremental_alter_configs`), other values left as they are; and where
topics keep their data (:func:`describe_topic_storage`: tiered storage, whatever source sets it)."""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

from kafkaops.errors import ConfigError, KafkaOpsError, KafkaUnreachable
from kafkaops.model import TopicStorage
from kafkaops.platform.kafka import connection
from kafkaops.platform.kafka.connection import KafkaConnection

log = logging.getLogger(__name__)

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
    source: Any = entry.source  # a ConfigSource, or its int value
    return int(getattr(source, "value", source)) in _DYNAMIC_SOURCES


def describe_configs(conn: KafkaConnection, resource: str, names: Iterable[str | int], *,
                     keys: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
    """The dynamic (per-broker or per-topic) config values of each broker id or topic name,
    optionally only ``keys``. Values from defaults and static files are left out. A topic the
    cluster lacks raises :class:`UnknownTopic`."""
    rtype = _resource_type(resource)
    wanted_keys = None if keys is None else set(keys)
    found: dict[str, dict[str, str]] = {}
    for name in dict.fromkeys(str(n) for n in names):  # a missing topic: UnknownTopic, by its code (classify)
        future = conn.admin.describe_configs([ConfigResource(rtype, name)],
                                             request_timeout=conn.timeout_s)[ConfigResource(rtype, name)]
        entries = connection.wait_for(future, conn, f"the configs of {resource} {name}")
        found[name] = {k: e.value for k, e in sorted(entries.items())
                       if _is_dynamic(e) and (wanted_keys is None or k in wanted_keys)}
    return found


def config_value(conn: KafkaConnection, resource: str, name: str | int, key: str) -> str | None:
    """The value ``key`` has on broker id or topic ``name``, from whatever source (dynamic, the static file,
    the default); None when the resource does not report it."""
    rtype = _resource_type(resource)
    future = conn.admin.describe_configs([ConfigResource(rtype, str(name))],
                                         request_timeout=conn.timeout_s)[ConfigResource(rtype, str(name))]
    entries = connection.wait_for(future, conn, f"{key} of {resource} {name}")
    entry = entries.get(key)
    return None if entry is None else entry.value


#: The topic configs :func:`describe_topic_storage` reads (KIP-405).
STORAGE_KEYS = ("remote.storage.enable", "local.retention.bytes", "local.retention.ms")


def describe_topic_storage(conn: KafkaConnection, topics: Iterable[str]) -> dict[str, TopicStorage]:
    """Where each of ``topics`` keeps its data (:class:`TopicStorage`: remote storage on or off, the local
    retention), from its effective configs (set on the topic, the broker or by default). Topics go together,
    :data:`~connection.MAX_PARTITIONS_PER_REQUEST` a request at most. A topic the cluster lacks raises
    :class:`UnknownTopic`."""
    names = sorted(set(topics))
    found: dict[str, TopicStorage] = {}
    for part in connection.request_slices(names):
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in part]
        futures = conn.admin.describe_configs(resources, request_timeout=conn.timeout_s)
        for res, future in futures.items():
            entries = connection.wait_for(future, conn, f"the storage configs of topic {res.name}")
            found[res.name] = TopicStorage.from_configs(res.name, {k: entries[k].value for k in STORAGE_KEYS
                                                                   if k in entries})
    tiered = sum(s.remote for s in found.values())
    log.info("storage configs of %d topic(s) read: %d with remote storage on", len(found), tiered)
    return found


def incremental_alter_configs(conn: KafkaConnection, resource: str,
                              changes: Mapping[str | int, Iterable[ConfigOp]]) -> None:
    """Apply ``changes`` (broker id or topic name -> operations); other config values stay as they are. Topics
    go together, :data:`~connection.MAX_PARTITIONS_PER_REQUEST` resources a request at most."""
    rtype = _resource_type(resource)
    resources = []
    for name, ops in changes.items():
        entries = [ConfigEntry(op.key, op.value, incremental_operation=_OPS[op.op]) for op in ops]
        if entries:
            resources.append(ConfigResource(rtype, str(name), incremental_configs=entries))
    if not resources:
        return
    # librdkafka takes one broker resource per call (each goes to its own broker); topics go together.
    calls = [[r] for r in resources] if rtype == ResourceType.BROKER else connection.request_slices(resources)
    futures = {res: future for call in calls
               for res, future in conn.admin.incremental_alter_configs(call, request_timeout=conn.timeout_s).items()}
    failed = []
    for res, future in futures.items():
        try:
            connection.wait_for(future, conn, f"a config change of {resource} {res.name}")
        except KafkaUnreachable:
            raise
        except KafkaOpsError as err:
            failed.append(str(err))
    if failed:
        raise KafkaOpsError(f"{len(failed)} of {len(resources)} config change(s) failed: {'; '.join(failed)}")
    log.info("configs changed on %d %s(s)", len(resources), resource)
