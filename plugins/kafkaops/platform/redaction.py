"""Which Kafka client settings are secrets, and the one way kafkaops shows a config without them.

A setting is secret by its key, in any client's spelling: librdkafka's (``sasl.password``,
``ssl.key.password``, ``ssl.keystore.password``, ``ssl.key.pem``, ``sasl.oauthbearer.client.secret``,
``sasl.oauthbearer.assertion.private.key.passphrase`` ...), the Java client's (``sasl.jaas.config``,
``ssl.keystore.key``, ``ssl.truststore.password``, with or without Spark's ``kafka.`` prefix) and
kafka-python's (``sasl_plain_password``, ``ssl_password``).
Every log line, error and audit record that shows a client config shows :func:`redacted` of it;
text that may quote a secret value (a client library's error) goes through :func:`scrub`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

#: The key's last words that make it a secret (after the ``kafka.`` prefix, in either spelling).
_SECRET_KEY = re.compile(r"(password|passphrase|secret|jaas[._]config|key[._]pem|keystore[._]key"
                         r"|oauthbearer[._]config|token)$", re.IGNORECASE)


#: Environment variables whose values are credentials: Airflow's connections and variables given by
#: the environment, its secret settings (the Fernet key, database and Celery URLs, ``*_SECRET``...),
#: the kafkaops store's URL, and any ``*PASSWORD``, ``*SECRET``, ``*TOKEN``.
_SECRET_ENV = re.compile(r"^AIRFLOW_(CONN|VAR)_|^AIRFLOW__.*(FERNET_KEY|SQL_ALCHEMY_CONN|RESULT_BACKEND|BROKER_URL)$"
                         r"|^KAFKAOPS_STORE_URL$|(PASSWORD|SECRET|SECRET_KEY|TOKEN)$", re.IGNORECASE)


def secret_env_names(environ: Mapping[str, str]) -> list[str]:
    """The variables of ``environ`` that carry credentials, for the child processes that need none of
    them (Ansible, which also writes its whole environment into its runner artifacts; the Spark
    apps). Ansible's own ``ANSIBLE_*`` settings are never among them."""
    return sorted(k for k in environ if _SECRET_ENV.search(k) and not k.startswith("ANSIBLE_"))


def is_secret(key: str) -> bool:
    """True when the value of the client setting ``key`` must never be shown."""
    return bool(_SECRET_KEY.search(key.removeprefix("kafka.")))


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with every secret value replaced by ``***`` (the keys stay: they say what is set)."""
    return {k: (MASK if is_secret(str(k)) and v not in (None, "") else v) for k, v in config.items()}


def secret_values(config: Mapping[str, Any]) -> list[str]:
    """The secret values of ``config`` (non-empty), longest first (for :func:`scrub`)."""
    return sorted({str(v) for k, v in config.items() if is_secret(str(k)) and v not in (None, "")},
                  key=len, reverse=True)


def scrub(text: str, secrets: Mapping[str, Any] | Iterable[str]) -> str:
    """``text`` with every secret value of ``secrets`` (a config, or the values themselves) masked:
    for messages that quote what a client library said."""
    values = secret_values(secrets) if isinstance(secrets, Mapping) else [s for s in secrets if s]
    for value in values:
        text = text.replace(value, MASK)
    return text
