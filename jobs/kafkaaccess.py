"""Whether a Kafka cluster let a client in, and what to fix when it did not.

librdkafka reports a refused SASL login or TLS handshake only through its error callback; the
request that failed says "transport failure". `ErrorWatch` keeps the refusal, `check_access`
turns it into a `SecurityError` at once (retrying cannot help), and `refusal` names the
settings to change by their configuration keys and environment variables (`config.env_name`).
Used by the replica at start and by the operator's Kafka clients alike.
"""

from __future__ import annotations

from typing import Any

from floe_jobs.config import env_name
from floe_jobs.kafkasec import KafkaSecurity


class SecurityError(ValueError):
    """The cluster refused this client's credentials or certificates (or the client refused the
    cluster's certificate): retrying cannot help, the settings named in the message must change."""


class ErrorWatch:
    """A client's `error_cb`: keeps the last authentication or TLS failure librdkafka reported,
    which a failed request itself reports only as a transport failure."""

    def __init__(self) -> None:
        self.refused: Any = None

    def __call__(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        refused = error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED)
        if refused or _alert(error):
            self.refused = error


def _alert(error: Any) -> bool:
    """A broker that requires a client certificate ends the handshake with an alert, which
    librdkafka reports as a transport failure."""
    from confluent_kafka import KafkaError

    return bool(error.code() == KafkaError._TRANSPORT and ("SSL alert" in error.str() or "certificate" in error.str()))


def tls_refused(error: Any) -> bool:
    """Whether a refusal `ErrorWatch` kept was the TLS handshake's (CA, certificates), not SASL's."""
    from confluent_kafka import KafkaError

    return bool(error.code() == KafkaError._SSL or _alert(error))


def _hint(security: KafkaSecurity, detail: str) -> str:
    def named(*keys: str) -> str:
        return ", ".join(f"kafka.{key} ({env_name('kafka', key)})" for key in keys)

    lowered = detail.lower()
    if security.sasl and "authentication" in lowered and "handshake" not in lowered:
        return (
            f"check {named('sasl_username', 'sasl_password')} with mechanism {security.sasl_mechanism} "
            "(the StreamingApp's spec.kafka.security.sasl.credentialsSecretRef)"
        )
    if "certificate" in lowered or "handshake" in lowered or "ssl alert" in lowered:
        if security.cert_pem:
            return (
                f"check {named('ssl_ca_pem', 'ssl_cert_pem', 'ssl_key_pem')} (spec.kafka.security.tls: the CA must "
                "have signed the brokers' certificates, the brokers must trust the client certificate, and neither "
                "may have expired)"
            )
        return (
            f"check {named('ssl_ca_pem')} (spec.kafka.security.tls.caSecretRef: the CA must have signed the brokers' "
            "certificates, which must name the host connected to and not have expired; a broker requiring "
            f"client certificates also needs {named('ssl_cert_pem', 'ssl_key_pem')})"
        )
    return f"check kafka.security_protocol ({env_name('kafka', 'security_protocol')}): {security.protocol}"


def refusal(security: KafkaSecurity, *, bootstrap: str, error: Any) -> str:
    """What the cluster refused and which settings to fix (librdkafka's reason holds no secret)."""
    detail = error.str()
    return f"Kafka at {bootstrap} refused the connection ({security.protocol}): {detail}; {_hint(security, detail)}"


def check_access(admin: Any, watch: ErrorWatch, security: KafkaSecurity, *, bootstrap: str, timeout: float) -> None:
    """Ask for metadata until the cluster answers, failing at once with `SecurityError` when
    it refused this client's security settings (not after the retries an unreachable cluster
    gets). Other failures are left to the caller's retries."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=max(1.0, min(5.0, deadline - time.monotonic())))
            return
        except Exception:
            admin.poll(0)  # serves error_cb: the reason behind the transport failure
            if watch.refused is not None:
                raise SecurityError(refusal(security, bootstrap=bootstrap, error=watch.refused)) from None
            if time.monotonic() >= deadline:
                return
