"""The stack's secured listeners extend whatever the PLAINTEXT one is, with certificates that
name the hosts the broker advertises (openssl, no broker needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from floe_stack import component, kafka, tls
from floe_stack.layout import Layout


def test_secured_listeners_extend_the_plaintext_one(tmp_path: Path) -> None:
    layout = Layout(root=tmp_path / "repo", cache=tmp_path / "cache")
    broker = kafka.Kafka(layout, component.PortBook(layout))
    base = broker._properties().replace("PLAINTEXT://127.0.0.1:", "PLAINTEXT://10.1.2.3:")
    extra = dict(line.split("=", 1) for line in broker._secured_properties(base).splitlines() if "=" in line)
    assert extra["listeners"].startswith(f"PLAINTEXT://10.1.2.3:{broker.port},CONTROLLER://")
    assert extra["listeners"].endswith(f",SASL_SSL://10.1.2.3:{broker.sasl_ssl_port},SSL://10.1.2.3:{broker.ssl_port}")
    assert extra["listener.security.protocol.map"].endswith(",SASL_SSL:SASL_SSL,SSL:SSL")
    assert extra["listener.name.ssl.ssl.client.auth"] == "required"
    san = subprocess.run(
        ["openssl", "x509", "-in", str(tls.directory(layout) / "server.crt"), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "IP Address:10.1.2.3" in san and "IP Address:127.0.0.1" in san and "DNS:localhost" in san
    # a later caller asking for fewer names keeps the certificate
    before = (tls.directory(layout) / "server.pem").read_text()
    tls.ensure(layout)
    assert (tls.directory(layout) / "server.pem").read_text() == before
    password = tls.passwords(layout)["floeplain"]
    assert [k for k, v in extra.items() if password in v] == ["listener.name.sasl_ssl.plain.sasl.jaas.config"]
