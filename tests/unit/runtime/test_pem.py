"""Keys in every form users hold them become the PKCS#8 every client reads; certificates out of
date, encrypted keys and missing Secret keys stop the start naming the setting and the Secret key,
never the material. Keys and certificates are made with openssl, as users make them."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from floe_jobs import config, pem
from floe_stack import tls

from tests import material

from .test_security import BASE

SECRETS = {
    "FLOE_KAFKA_SSL_CERT_PEM": {"name": "kafka-client", "key": "tls.crt"},
    "FLOE_KAFKA_SSL_KEY_PEM": {"name": "kafka-client", "key": "tls.key"},
    "FLOE_KAFKA_SSL_CA_PEM": {"name": "kafka-ca", "key": "ca.crt"},
    "FLOE_KAFKA_SASL_USERNAME": {"name": "kafka-user", "key": "username"},
    "FLOE_KAFKA_SASL_PASSWORD": {"name": "kafka-user", "key": "password"},
    "FLOE_CASSANDRA_TLS_CA_PEM": {"name": "cassandra-ca", "key": "ca.crt"},
}


def openssl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ca")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(d / "ca.key"))
    openssl("req", "-x509", "-new", "-key", str(d / "ca.key"), "-days", "2", "-subj", "/CN=floe-local-tls-ca",
            "-out", str(d / "ca.crt"))
    return d


@pytest.mark.parametrize("form", ["pkcs1", "ec-sec1", "ec", "pkcs8"])
def test_every_key_form_becomes_the_pkcs8_openssl_would_write(form: tls.KeyForm, ca: Path, tmp_path: Path) -> None:
    _, key = tls.client(ca, tmp_path, form=form)
    wanted = openssl("pkcs8", "-topk8", "-nocrypt", stdin=key)
    assert pem.pkcs8(key) == wanted
    # beside a certificate, as some tools write the pair into one key
    assert pem.pkcs8(material.CERT + key) == wanted


@pytest.mark.parametrize("traditional", [False, True])
def test_an_encrypted_key_is_refused_with_what_to_run(traditional: bool, tmp_path: Path) -> None:
    key = openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024")
    args = ["rsa", "-aes128", "-traditional"] if traditional else ["pkcs8", "-topk8", "-v2", "aes-128-cbc"]
    encrypted = openssl(*args, "-passout", "pass:hunter2", stdin=key)
    with pytest.raises(ValueError) as info:
        pem.pkcs8(encrypted)
    assert "encrypted" in str(info.value) and pem.DECRYPT_HINT in str(info.value)
    body = encrypted.splitlines()[-2]
    assert body not in str(info.value)


def test_a_certificate_given_as_a_key_is_refused_saying_what_was_found() -> None:
    with pytest.raises(ValueError, match="found: CERTIFICATE"):
        pem.pkcs8(material.CERT)


def test_dates_of_a_certificate(ca: Path, tmp_path: Path) -> None:
    (cert,) = pem.certificates(material.CERT)
    assert cert.subject == "floe-unit-test" and cert.not_before < datetime.now(UTC) < cert.not_after
    assert pem.certificate_problem(material.CERT, ca=False) is None
    later = datetime(2200, 1, 1, tzinfo=UTC)
    assert "CN=floe-unit-test expired on 2126-" in str(pem.certificate_problem(material.CERT, ca=False, now=later))
    earlier = datetime(2000, 1, 1, tzinfo=UTC)
    assert "is not valid before" in str(pem.certificate_problem(material.CERT, ca=False, now=earlier))
    expired, _ = tls.client(ca, tmp_path, expired=True)
    assert "CN=floe expired on" in str(pem.certificate_problem(expired, ca=False))


def test_a_ca_bundle_fails_only_when_none_of_it_is_in_date(ca: Path, tmp_path: Path) -> None:
    old = tls.expired_ca(ca, tmp_path)
    assert "CN=floe-local-tls-ca expired on" in str(pem.certificate_problem(old, ca=True))
    # mid-rotation: the old CA beside the new
    assert pem.certificate_problem(old + material.CERT, ca=True) is None
    assert "every CA certificate in it has expired" in str(pem.certificate_problem(old + old, ca=True))


def load(**env: str) -> config.FloeConfig:
    """Loaded as a pod would: the variables from Secrets named in FLOE_SECRET_REFS, as the operator renders it."""
    refs = {name: ref for name, ref in SECRETS.items() if name in env}
    return config.load(environ={**BASE, "FLOE_SECRET_REFS": json.dumps(refs), **env})


def mtls(cert: str, key: str) -> dict[str, str]:
    return {"FLOE_KAFKA_SECURITY_PROTOCOL": "SSL", "FLOE_KAFKA_SSL_CERT_PEM": cert, "FLOE_KAFKA_SSL_KEY_PEM": key,
            "FLOE_KAFKA_SSL_CA_PEM": material.CERT}


def test_the_runtime_hands_every_client_a_pkcs8_key(ca: Path, tmp_path: Path) -> None:
    cert, key = tls.client(ca, tmp_path, form="pkcs1")
    cfg = load(**mtls(cert, key))
    assert cfg.kafka.security.key_pem == pem.pkcs8(key)
    assert cfg.kafka.security.java()["kafka.ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")


def test_an_expired_client_certificate_stops_the_start_naming_the_secret_key(ca: Path, tmp_path: Path) -> None:
    cert, key = tls.client(ca, tmp_path, expired=True)
    with pytest.raises(config.ConfigError) as info:
        load(**mtls(cert, key))
    message = str(info.value)
    assert "kafka.ssl_cert_pem (FLOE_KAFKA_SSL_CERT_PEM from Secret kafka-client key tls.crt)" in message
    assert "CN=floe expired on" in message
    assert key.splitlines()[1] not in message and cert.splitlines()[1] not in message


def test_an_expired_cassandra_ca_stops_the_start_naming_the_secret_key(ca: Path, tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError) as info:
        load(FLOE_CASSANDRA_TLS_CA_PEM=tls.expired_ca(ca, tmp_path))
    assert "(FLOE_CASSANDRA_TLS_CA_PEM from Secret cassandra-ca key ca.crt)" in str(info.value)
    assert "expired on" in str(info.value)


def test_an_encrypted_key_stops_the_start_naming_the_secret_key(ca: Path, tmp_path: Path) -> None:
    cert, key = tls.client(ca, tmp_path)
    encrypted = openssl("pkcs8", "-topk8", "-v2", "aes-128-cbc", "-passout", "pass:x", stdin=key)
    with pytest.raises(config.ConfigError) as info:
        load(**mtls(cert, encrypted))
    assert "kafka.ssl_key_pem (FLOE_KAFKA_SSL_KEY_PEM from Secret kafka-client key tls.key)" in str(info.value)
    assert "the key is encrypted" in str(info.value)


def test_a_variable_whose_secret_key_is_missing_stops_the_start_naming_both() -> None:
    # the kubelet leaves an optional reference's variable out when the key is missing
    env = {"FLOE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "FLOE_KAFKA_SASL_MECHANISM": "PLAIN",
           "FLOE_KAFKA_SASL_USERNAME": "u", "FLOE_KAFKA_SSL_CA_PEM": material.CERT, "FLOE_KAFKA_SASL_PASSWORD": ""}
    refs = ('{"FLOE_KAFKA_SASL_PASSWORD": {"name": "kafka-user", "key": "password"},'
            ' "FLOE_KAFKA_SSL_CA_PEM": {"name": "kafka-ca", "key": "ca.crt"}}')
    with pytest.raises(config.ConfigError) as info:
        config.load(environ={**BASE, **env, "FLOE_SECRET_REFS": refs})
    (line,) = str(info.value).splitlines()[1:]
    assert line.strip() == (
        "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD from Secret kafka-user key password): not set: the Secret "
        "kafka-user or its key password is missing, or the value is empty; add it, or fix the reference in the "
        "StreamingApp"
    )


def test_later_errors_name_the_secret_key_of_each_variable() -> None:
    cfg = load(FLOE_KAFKA_SECURITY_PROTOCOL="SASL_SSL", FLOE_KAFKA_SASL_MECHANISM="PLAIN",
               FLOE_KAFKA_SASL_USERNAME="u", FLOE_KAFKA_SASL_PASSWORD="hunter2", FLOE_KAFKA_SSL_CA_PEM=material.CERT)
    assert cfg.secret_refs["FLOE_KAFKA_SASL_PASSWORD"] == config.SecretRef(name="kafka-user", key="password")
    assert cfg.sourced("check kafka.sasl_username (FLOE_KAFKA_SASL_USERNAME), kafka.sasl_password "
                       "(FLOE_KAFKA_SASL_PASSWORD)") == (
        "check kafka.sasl_username (FLOE_KAFKA_SASL_USERNAME from Secret kafka-user key username), "
        "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD from Secret kafka-user key password)"
    )
