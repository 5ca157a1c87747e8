"""Secret client settings are masked wherever a config is shown: the helper, the config's repr, the
connection's repr, and errors that name the connection."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kafkaops.errors import ConfigError, KafkaAuthFailed
from kafkaops.platform import redaction
from kafkaops.platform.kafka import connection, errors

PASSWORD = "Canary-Pass-91"
CONFIG = {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
          "sasl.username": "ops", "sasl.password": PASSWORD, "ssl.key.password": "key-pass-1",
          "ssl.key.pem": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
          "ssl.ca.location": "/etc/kafka/ca.pem"}


@pytest.mark.parametrize("key", ["sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
                                 "ssl.truststore.password", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config",
                                 "kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "sasl_plain_password",
                                 "ssl_password"])
def test_secret_keys_in_every_clients_spelling(key: str) -> None:
    assert redaction.is_secret(key)


@pytest.mark.parametrize("key", ["bootstrap.servers", "sasl.username", "sasl.mechanism", "ssl.ca.location",
                                 "ssl.certificate.pem", "ssl.key.location", "security.protocol"])
def test_settings_that_are_not_secret_stay_visible(key: str) -> None:
    assert not redaction.is_secret(key)


def test_redacted_masks_the_values_and_keeps_the_keys() -> None:
    shown = redaction.redacted(CONFIG)
    assert shown.keys() == CONFIG.keys()
    assert shown["sasl.password"] == shown["ssl.key.pem"] == shown["ssl.key.password"] == "***"
    assert shown["sasl.username"] == "ops" and shown["ssl.ca.location"] == "/etc/kafka/ca.pem"


def test_scrub_masks_secret_values_quoted_in_text() -> None:
    text = f"login failed for ops with {PASSWORD} (key pass key-pass-1)"
    assert redaction.scrub(text, CONFIG) == "login failed for ops with *** (key pass ***)"


def test_a_client_config_shows_no_secret_however_it_is_printed() -> None:
    config = connection.connection_config(CONFIG, name="Airflow connection 'kafka_secure'")
    for shown in (repr(config), str(config), f"{config}", f"{config!r}", repr([config]), repr({"c": config})):
        assert PASSWORD not in shown and "MIIE" not in shown and "key-pass-1" not in shown
        assert "'sasl.username': 'ops'" in shown
    assert config["sasl.password"] == PASSWORD  # the client still gets the real value
    assert config.source == "Airflow connection 'kafka_secure'"


#: What a client can be built from here: no certificate files to read.
SASL_ONLY = {k: v for k, v in CONFIG.items() if not k.startswith("ssl.")} | {"security.protocol": "SASL_PLAINTEXT"}


def test_a_connection_and_its_config_errors_show_no_secret() -> None:
    with connection.connect(SASL_ONLY, name="Airflow connection 'kafka_secure'") as conn:
        assert PASSWORD not in repr(conn) and conn.name == "k1:9093 (Airflow connection 'kafka_secure')"
    with pytest.raises(ConfigError) as err:
        connection.connection_config({k: v for k, v in CONFIG.items() if k != "bootstrap.servers"}, name="--kafka-config x")
    assert "(--kafka-config x)" in str(err.value) and PASSWORD not in str(err.value)
    with pytest.raises(ConfigError, match="ssl.ca.location") as err:  # librdkafka reads the file at once
        connection.connect(CONFIG, name="Airflow connection 'kafka_secure'")
    assert "Airflow connection 'kafka_secure'" in str(err.value) and PASSWORD not in str(err.value)


@pytest.mark.parametrize("code", [KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL])
def test_a_refused_login_or_handshake_is_an_auth_error_naming_the_connection(code: int) -> None:
    with connection.connect(SASL_ONLY, name="Airflow connection 'kafka_secure'") as conn:
        err = errors.classify(KafkaError(code, f"SASL failed for password {PASSWORD}"), "the cluster description",
                             conn)
    assert type(err) is KafkaAuthFailed and not err.retriable and err.code == KafkaError(code).name()
    assert "Airflow connection 'kafka_secure'" in str(err) and PASSWORD not in str(err)
    assert "sasl.username/sasl.password" in str(err)


def test_a_timeout_after_a_refused_login_is_the_refusal() -> None:
    """librdkafka keeps retrying a refused login; the request then times out. The refusal, which its
    error callback reported, is the cause kafkaops names."""
    with connection.connect(SASL_ONLY) as conn:
        conn._on_error(KafkaError(KafkaError._AUTHENTICATION, "bad credentials"))
        err = errors.classify(KafkaError(KafkaError._TIMED_OUT, "timed out"), "the cluster description", conn)
    assert type(err) is KafkaAuthFailed and err.code == "_AUTHENTICATION"


def test_kafka_python_gets_the_same_security_settings() -> None:
    args = connection.kafka_python_args({**{k: v for k, v in CONFIG.items() if k != "ssl.key.pem"},
                                        "security.protocol": "sasl_ssl", "ssl.endpoint.identification.algorithm": "none"})
    assert args == {"bootstrap_servers": ["k1:9093"], "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                    "sasl_plain_username": "ops", "sasl_plain_password": PASSWORD, "ssl_password": "key-pass-1",
                    "ssl_cafile": "/etc/kafka/ca.pem", "ssl_check_hostname": False}
    with pytest.raises(ConfigError, match="ssl.key.pem") as err:
        connection.kafka_python_args(CONFIG)
    assert PASSWORD not in str(err.value)


def test_the_credentials_of_the_environment_are_named_for_child_processes() -> None:
    environ = {"AIRFLOW_CONN_KAFKA_DEFAULT": "{}", "AIRFLOW_VAR_X": "1", "AIRFLOW__CORE__FERNET_KEY": "k",
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:p@h/db", "AIRFLOW__API_AUTH__JWT_SECRET": "s",
               "KAFKAOPS_STORE_URL": "postgresql://u:p@h/ops", "PGPASSWORD": "p", "GITHUB_TOKEN": "t",
               "ANSIBLE_BECOME_PASSWORD": "b", "AIRFLOW_HOME": "/a", "PATH": "/bin", "KAFKAOPS_CACHE": "/c",
               "AIRFLOW__CORE__DAGS_FOLDER": "/d"}
    assert redaction.secret_env_names(environ) == [
        "AIRFLOW_CONN_KAFKA_DEFAULT", "AIRFLOW_VAR_X", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "GITHUB_TOKEN", "KAFKAOPS_STORE_URL", "PGPASSWORD"]
