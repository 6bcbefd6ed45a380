"""A local CA and the certificates of the stack's secured listeners (Kafka SASL_SSL and SSL,
the secured Cassandra node), made with openssl per checkout under ``.floe/tls``.

Managed Kafka and Cassandra services require TLS and authentication; this CA lets the tests run
the runtime's clients against listeners that do the same, with hostname verification on (the
server certificate names localhost, 127.0.0.1 and the hosts the services advertise). Keys are
PKCS#8, which both librdkafka and the Java clients read as PEM. Passwords of the stack's users
are random per checkout and kept in a 0600 file, never in the env file.

`client` and `expired_ca` make what users hand over in Secrets and the tests of bad input need:
client certificates with RSA or EC keys in PKCS#8, PKCS#1 or SEC1 form, certificates whose
notAfter has passed, and the stack's CA re-issued (same key and name) with dates in the past.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from floe_stack import component
from floe_stack.layout import Layout

USERS = ("floe", "floeplain")
"""Kafka users: `floe` has SCRAM-SHA-256 and -512 credentials, `floeplain` a PLAIN one; the
secured Cassandra node's role is `floe`."""


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise component.StackError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


def directory(layout: Layout) -> Path:
    return layout.run / "tls"


def _is_ip(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return host.count(".") == 3


def ensure(layout: Layout, *, hosts: Iterable[str] = ()) -> Path:
    """The CA (`ca.crt`), a server certificate (`server.crt`, `server.key`, and `server.pem`
    holding both, as Kafka's and Cassandra's PEM key stores take them) and a client certificate
    for mTLS (`client.crt`, `client.key`); made once, the server certificate again when it does
    not name every host in `hosts` (then naming those and every host it named before)."""
    d = directory(layout)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o700)
    if not (d / "ca.crt").exists():
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(d / "ca.key"))
        _openssl("req", "-x509", "-new", "-key", str(d / "ca.key"), "-days", "3650", "-subj", "/CN=floe-local-tls-ca",
                 "-out", str(d / "ca.crt"))
    known = set((d / "server.san").read_text().split(",")) if (d / "server.san").exists() else set()
    wanted = {"localhost", "127.0.0.1", *hosts} - {"", "0.0.0.0"}
    if wanted <= known and (d / "server.pem").exists():
        return d
    # every name asked for so far: the Kafka broker and the Cassandra node share the certificate
    names = sorted(wanted | known)
    san = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in names)
    _cert(d, "server", "/CN=localhost", extended="serverAuth,clientAuth", san=san)
    (d / "server.pem").write_text((d / "server.key").read_text() + (d / "server.crt").read_text())
    (d / "server.pem").chmod(0o600)
    _cert(d, "client", "/CN=floe", extended="clientAuth", san=None)
    (d / "server.san").write_text(",".join(names))
    return d


def _cert(d: Path, name: str, subject: str, *, extended: str, san: str | None) -> None:
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(d / f"{name}.key"))
    (d / f"{name}.key").chmod(0o600)
    _openssl("req", "-new", "-key", str(d / f"{name}.key"), "-subj", subject, "-out", str(d / f"{name}.csr"))
    ext = d / f"{name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment", f"extendedKeyUsage={extended}"]
    if san:
        lines.append(f"subjectAltName={san}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", str(ext), "-out", str(d / f"{name}.crt"))


def passwords(layout: Layout) -> dict[str, str]:
    """User → password of the stack's secured services, made on first use."""
    path = directory(layout) / "users.json"
    if path.exists():
        known: dict[str, str] = json.loads(path.read_text())
        if set(USERS) <= set(known):
            return known
    path.parent.mkdir(parents=True, exist_ok=True)
    made = {user: secrets.token_urlsafe(18) for user in USERS}
    path.touch(mode=0o600)
    path.write_text(json.dumps(made, indent=2) + "\n")
    return made


KeyForm = Literal["pkcs8", "pkcs1", "ec", "ec-sec1"]
"""How a client key is written: RSA as PKCS#8 or PKCS#1 (`BEGIN RSA PRIVATE KEY`), EC P-256 as
PKCS#8 or SEC1 (`BEGIN EC PRIVATE KEY`, with openssl's EC PARAMETERS block before it)."""


def _key(path: Path, form: KeyForm) -> None:
    if form in ("pkcs8", "pkcs1"):
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(path))
        if form == "pkcs1":
            _openssl("rsa", "-in", str(path), "-traditional", "-out", str(path))
    elif form == "ec":
        _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    else:
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-out", str(path))
    path.chmod(0o600)


def _past() -> tuple[str, str]:
    """A validity that ended yesterday (openssl ca's date format)."""
    now = datetime.now(UTC)
    start, end = now - timedelta(days=30), now - timedelta(days=1)
    return start.strftime("%Y%m%d%H%M%SZ"), end.strftime("%Y%m%d%H%M%SZ")


def _sign_in_the_past(ca: Path, out: Path, name: str, *, extensions: str, self_signed: bool) -> Path:
    """Sign `out/<name>.csr` with dates in the past (`openssl ca`, which alone takes both dates)."""
    (out / f"{name}.index").write_text("")
    (out / f"{name}.ext").write_text(extensions)
    conf = out / f"{name}.cnf"
    conf.write_text(
        "[ca]\ndefault_ca = floe\n[floe]\n"
        f"database = {out / f'{name}.index'}\nnew_certs_dir = {out}\nserial = {out / f'{name}.serial'}\n"
        "default_md = sha256\npolicy = any\nunique_subject = no\n[any]\ncommonName = supplied\n"
    )
    (out / f"{name}.serial").write_text(f"{secrets.randbits(64):016X}\n")
    start, end = _past()
    signer = ["-selfsign", "-keyfile", str(ca / "ca.key")] if self_signed else [
        "-cert", str(ca / "ca.crt"), "-keyfile", str(ca / "ca.key")]
    _openssl("ca", "-batch", "-notext", "-config", str(conf), *signer, "-in", str(out / f"{name}.csr"),
             "-startdate", start, "-enddate", end, "-extfile", str(out / f"{name}.ext"),
             "-out", str(out / f"{name}.crt"))
    return out / f"{name}.crt"


def client(ca: Path, out: Path, *, name: str = "client", form: KeyForm = "pkcs8", expired: bool = False,
           subject: str = "/CN=floe") -> tuple[str, str]:
    """(certificate PEM, key PEM) of a client certificate that the CA in directory `ca` signed,
    made under `out`; `expired`: its notAfter was yesterday."""
    out.mkdir(parents=True, exist_ok=True)
    _key(out / f"{name}.key", form)
    extensions = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
    _openssl("req", "-new", "-key", str(out / f"{name}.key"), "-subj", subject, "-out", str(out / f"{name}.csr"))
    if expired:
        cert = _sign_in_the_past(ca, out, name, extensions=extensions, self_signed=False)
    else:
        (out / f"{name}.ext").write_text(extensions)
        _openssl("x509", "-req", "-in", str(out / f"{name}.csr"), "-CA", str(ca / "ca.crt"), "-CAkey",
                 str(ca / "ca.key"), "-CAcreateserial", "-days", "30", "-sha256", "-extfile",
                 str(out / f"{name}.ext"), "-out", str(out / f"{name}.crt"))
        cert = out / f"{name}.crt"
    return cert.read_text(), (out / f"{name}.key").read_text()


def expired_ca(ca: Path, out: Path) -> str:
    """The CA of directory `ca` issued again with the same key and name but a notAfter of
    yesterday: what a CA Secret holds once its CA certificate has run out."""
    out.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-new", "-key", str(ca / "ca.key"), "-subj", "/CN=floe-local-tls-ca", "-out", str(out / "ca.csr"))
    extensions = "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
    return _sign_in_the_past(ca, out, "ca", extensions=extensions, self_signed=True).read_text()
