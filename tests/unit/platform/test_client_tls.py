"""A client certificate (mTLS) in a Kafka connection: its key's password is a secret everywhere a
config is shown, kafka-python gets the same files, an unreadable key is a config error naming the
connection, and a TLS 1.3 endpoint that turns the certificate away (which librdkafka reports only as
dropped connections) is a refusal at once, found by a handshake against a real TLS server."""
from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kafkaops.errors import ConfigError, KafkaAuthFailed, KafkaUnreachable
from kafkaops.platform import redaction
from kafkaops.platform.kafka import connection, metadata

KEY_PASSWORD = "Key-Canary-3b7f"


def key_pair(folder: Path, name: str, password: str | None = KEY_PASSWORD) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM, encrypted with ``password``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / f"{name}.pem", folder / f"{name}.key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return cert_file, key_file


class TlsServer:
    """A TLS 1.3 endpoint on loopback that requires a client certificate signed by ``trusted`` (and then
    reads, as a broker waits for a request): a broker's mTLS listener as far as the handshake goes."""

    def __init__(self, folder: Path, trusted: Path) -> None:
        self.cert, key = key_pair(folder, "server", password=None)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.context.load_cert_chain(self.cert, key)
        self.context.load_verify_locations(trusted)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            with raw:
                try:
                    with self.context.wrap_socket(raw, server_side=True) as tls:
                        tls.settimeout(3)
                        tls.recv(16)
                except OSError:
                    pass


@pytest.fixture
def certificates(tmp_path: Path) -> dict[str, Path]:
    client_cert, client_key = key_pair(tmp_path, "client")
    stranger_cert, stranger_key = key_pair(tmp_path, "stranger")
    return {"client_cert": client_cert, "client_key": client_key, "stranger_cert": stranger_cert,
            "stranger_key": stranger_key}


@pytest.fixture
def server(tmp_path: Path, certificates: dict[str, Path]) -> Iterator[TlsServer]:
    running = TlsServer(tmp_path, trusted=certificates["client_cert"])
    yield running
    running.stopped = True
    running.listener.close()


def mtls(server: TlsServer, cert: Path, key: Path, password: str = KEY_PASSWORD) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{server.port}", "security.protocol": "SSL",
            "ssl.ca.location": str(server.cert), "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key), "ssl.key.password": password}


@pytest.mark.parametrize("key", ["ssl.key.password", "ssl.keystore.password", "ssl.key.pem", "kafka.ssl.key.password",
                                 "kafka.ssl.keystore.password", "ssl.truststore.password", "ssl_password",
                                 "sasl.oauthbearer.assertion.private.key.passphrase",
                                 "sasl.oauthbearer.assertion.private.key.pem", "SSL.KEY.PASSWORD"])
def test_every_spelling_of_a_key_secret_is_secret(key: str) -> None:
    assert redaction.is_secret(key)


@pytest.mark.parametrize("key", ["ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
                                 "ssl.certificate.pem", "ssl.ca.pem", "ssl_certfile", "ssl_keyfile"])
def test_where_the_certificate_and_key_are_is_not_secret(key: str) -> None:
    assert not redaction.is_secret(key)


def test_an_mtls_config_shows_its_files_and_masks_the_key_password(tmp_path: Path,
                                                                  certificates: dict[str, Path]) -> None:
    config = connection.connection_config({"bootstrap.servers": "k1:9093", "security.protocol": "SSL",
                                          "ssl.certificate.location": str(certificates["client_cert"]),
                                          "ssl.key.location": str(certificates["client_key"]),
                                          "ssl.key.password": KEY_PASSWORD, "ssl.keystore.password": KEY_PASSWORD,
                                          "ssl.key.pem": "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIF"},
                                         name="Airflow connection 'kafka_mtls'")
    shown = repr(config)
    assert KEY_PASSWORD not in shown and "MIIF" not in shown and str(certificates["client_key"]) in shown
    assert redaction.redacted(config)["ssl.key.password"] == redaction.MASK
    assert redaction.scrub(f"PEM lib: bad decrypt with {KEY_PASSWORD}", config) == "PEM lib: bad decrypt with ***"


def test_kafka_python_gets_the_certificate_key_and_password() -> None:
    args = connection.kafka_python_args({"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "ssl",
                                        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/client.pem",
                                        "ssl.key.location": "/client.key.pem", "ssl.key.password": KEY_PASSWORD})
    assert args == {"bootstrap_servers": ["k1:9093", "k2:9093"], "security_protocol": "SSL", "ssl_cafile": "/ca.pem",
                    "ssl_certfile": "/client.pem", "ssl_keyfile": "/client.key.pem", "ssl_password": KEY_PASSWORD}
    with pytest.raises(ConfigError, match="ssl.keystore.location") as refused:
        connection.kafka_python_args({"bootstrap.servers": "k1:9093", "ssl.keystore.location": "/ks.p12",
                                     "ssl.keystore.password": KEY_PASSWORD})
    assert KEY_PASSWORD not in str(refused.value)


def test_a_wrong_key_password_is_a_config_error_naming_the_connection(server: TlsServer,
                                                                      certificates: dict[str, Path]) -> None:
    wrong = mtls(server, certificates["client_cert"], certificates["client_key"], password="not-the-key-password")
    with pytest.raises(ConfigError, match=r"Airflow connection 'kafka_mtls'.*ssl\.key\.location") as refused:
        connection.connect(wrong, name="Airflow connection 'kafka_mtls'")
    assert "not-the-key-password" not in str(refused.value)


def test_the_probe_tells_an_accepted_certificate_from_a_refused_one(server: TlsServer,
                                                                   certificates: dict[str, Path]) -> None:
    assert connection.tls_refusal(mtls(server, certificates["client_cert"], certificates["client_key"])) is None
    reason = connection.tls_refusal(mtls(server, certificates["stranger_cert"], certificates["stranger_key"]))
    assert reason and reason.startswith("TLSV1"), reason  # an alert of the server: unknown CA
    assert connection.tls_refusal({"bootstrap.servers": f"127.0.0.1:{server.port}"}) is None  # not TLS: no probe


def test_an_untrusted_client_certificate_is_refused_at_once_naming_the_connection(
        server: TlsServer, certificates: dict[str, Path]) -> None:
    stranger = mtls(server, certificates["stranger_cert"], certificates["stranger_key"])
    with connection.connect(stranger, name="Airflow connection 'kafka_stranger'", timeout_s=10) as conn:
        started = time.monotonic()
        with pytest.raises(KafkaAuthFailed) as refused:
            metadata.describe_cluster(conn)
    assert time.monotonic() - started < 5  # not the request's 10 s timeout
    assert refused.value.code == "_SSL" and not refused.value.retriable
    message = str(refused.value)
    assert "Airflow connection 'kafka_stranger'" in message and "ssl.certificate.location" in message, message
    assert KEY_PASSWORD not in message


def test_a_trusted_client_certificate_is_not_called_refused(server: TlsServer, certificates: dict[str, Path]) -> None:
    """The endpoint accepts the certificate but speaks no Kafka: the request times out, unreachable."""
    trusted = mtls(server, certificates["client_cert"], certificates["client_key"])
    with connection.connect(trusted, name="Airflow connection 'kafka_mtls'", timeout_s=3) as conn:
        with pytest.raises(KafkaUnreachable, match="Airflow connection 'kafka_mtls'"):
            metadata.describe_cluster(conn)
