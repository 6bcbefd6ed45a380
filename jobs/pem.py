"""PEM material from Secrets, checked once at start: certificates in date, keys in the one form
every client reads.

Users hold private keys in the form their tools wrote: PKCS#8 (`BEGIN PRIVATE KEY`, openssl 3's
default), PKCS#1 (`BEGIN RSA PRIVATE KEY`, cert-manager's default encoding and older openssl's)
or SEC1 (`BEGIN EC PRIVATE KEY`). librdkafka reads all three; the Java client behind Spark's
Kafka source and sink reads only unencrypted PKCS#8 and fails in the middle of a batch
otherwise. So every key is rewrapped here as PKCS#8: a DER envelope around the same key bytes,
which needs no cryptography library. An encrypted key is refused with what to run instead
(there is no setting for its passphrase: the Secret is what protects the key).

A certificate past its notAfter fails the handshake on one side or the other with a message
that seldom says why (a broker answers an expired client certificate with an SSL alert), so the
dates are read here and an expired certificate is named with the day it expired.

Messages never quote the material itself: a key is a secret, and PEM text is noise.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)

# DER encodings of the object identifiers a PKCS#8 envelope names
_RSA_ENCRYPTION = bytes.fromhex("06092a864886f70d010101")  # 1.2.840.113549.1.1.1
_EC_PUBLIC_KEY = bytes.fromhex("06072a8648ce3d0201")  # 1.2.840.10045.2.1
_COMMON_NAME = bytes.fromhex("0603550403")  # 2.5.4.3

DECRYPT_HINT = "openssl pkcs8 -topk8 -nocrypt -in encrypted.key -out key.pem"


def _blocks(text: str) -> list[tuple[str, str, bytes]]:
    """(label, headers, DER) of each PEM block."""
    out = []
    for label, body in _BLOCK.findall(text):
        headers, _, data = body.rpartition("\n\n") if ":" in body.split("\n", 1)[0] else ("", "", body)
        try:
            der = base64.b64decode("".join(data.split()), validate=True)
        except ValueError:
            raise ValueError(f"its {label} block is not base64") from None
        out.append((label, headers, der))
    return out


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start, end) of the DER element at `at`: its value is der[start:end]."""
    if at + 2 > len(der):
        raise ValueError("truncated DER")
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        n = length & 0x7F
        if n == 0 or n > 4 or at + n > len(der):
            raise ValueError("bad DER length")
        length = int.from_bytes(der[at : at + n], "big")
        at += n
    if at + length > len(der):
        raise ValueError("truncated DER")
    return tag, at, at + length


Element = tuple[int, int, int, int]
"""(tag, where the element begins, where its value begins, where it ends)."""


def _children(der: bytes, start: int, end: int) -> list[Element]:
    out = []
    at = start
    while at < end:
        tag, value, stop = _element(der, at)
        out.append((tag, at, value, stop))
        at = stop
    return out


def _sequence(der: bytes) -> list[Element]:
    tag, start, end = _element(der, 0)
    if tag != 0x30:
        raise ValueError("not a DER sequence")
    return _children(der, start, end)


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _pem(label: str, der: bytes) -> str:
    text = base64.b64encode(der).decode()
    lines = "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n"


def _pkcs8(algorithm: bytes, key: bytes) -> str:
    return _pem("PRIVATE KEY", _der(0x30, b"\x02\x01\x00" + _der(0x30, algorithm) + _der(0x04, key)))


def pkcs8(text: str) -> str:
    """The private key in `text` as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), from PKCS#8,
    PKCS#1 (RSA) or SEC1 (EC); other PEM blocks beside it (a certificate, EC parameters) are
    left out. ValueError, saying what was found, for anything else."""
    blocks = _blocks(text)
    labels = [label for label, _, _ in blocks]
    for label, headers, der in blocks:
        try:
            if label == "PRIVATE KEY":
                _sequence(der)
                return _pem(label, der)
            if label == "ENCRYPTED PRIVATE KEY" or "ENCRYPTED" in headers:
                raise ValueError(
                    f"the key is encrypted ({label}); give it unencrypted (the Secret protects it), e.g. "
                    f"`{DECRYPT_HINT}`"
                )
            if label == "RSA PRIVATE KEY":
                _sequence(der)
                return _pkcs8(_RSA_ENCRYPTION + b"\x05\x00", der)
            if label == "EC PRIVATE KEY":
                return _ec_pkcs8(der)
        except (IndexError, ValueError) as exc:
            if "encrypted" in str(exc):
                raise
            raise ValueError(f"its {label} block is not a readable key ({exc})") from None
    found = ", ".join(labels) or "no PEM block"
    raise ValueError(
        f"no private key in it (found: {found}); expected BEGIN PRIVATE KEY, BEGIN RSA PRIVATE KEY or "
        "BEGIN EC PRIVATE KEY"
    )


def _ec_pkcs8(der: bytes) -> str:
    """SEC1 ECPrivateKey → PKCS#8: the curve moves to the algorithm identifier, as PKCS#8 wants
    it (and as the Java client requires)."""
    fields = _sequence(der)
    curve = next((der[value:end] for tag, _, value, end in fields if tag == 0xA0), None)
    if curve is None:
        raise ValueError("the EC key names no curve")
    kept = b"".join(der[begin:end] for tag, begin, _, end in fields if tag != 0xA0)
    return _pkcs8(_EC_PUBLIC_KEY + curve, _der(0x30, kept))


@dataclass(frozen=True)
class Certificate:
    """What the checks read from a certificate."""

    subject: str
    not_before: datetime
    not_after: datetime


def _time(der: bytes, tag: int, start: int, end: int) -> datetime:
    text = der[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime: two-digit year, 1950-2049
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    return datetime.strptime(text.rstrip("Z"), "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def _common_name(der: bytes, start: int, end: int) -> str:
    for _, _, s, e in _children(der, start, end):  # a SET of attributes per name part
        for _, _, s2, e2 in _children(der, s, e):
            attribute = _children(der, s2, e2)
            if len(attribute) == 2 and der[attribute[0][1] : attribute[0][3]] == _COMMON_NAME:
                _, _, vs, ve = attribute[1]
                return der[vs:ve].decode(errors="replace")
    return "(no CN)"


def certificates(text: str) -> list[Certificate]:
    """The certificates of a PEM text, in order; ValueError when one cannot be read."""
    out = []
    for label, _, der in _blocks(text):
        if label != "CERTIFICATE":
            continue
        try:
            _, _, tbs_start, tbs_end = _sequence(der)[0]
            tbs = _children(der, tbs_start, tbs_end)
            if tbs[0][0] == 0xA0:  # explicit version
                tbs = tbs[1:]
            _, _, v_start, v_end = tbs[3]
            not_before, not_after = (_time(der, tag, s, e) for tag, _, s, e in _children(der, v_start, v_end))
            out.append(Certificate(_common_name(der, tbs[4][2], tbs[4][3]), not_before, not_after))
        except (IndexError, ValueError) as exc:
            raise ValueError(f"a CERTIFICATE block is not a readable certificate ({exc})") from None
    return out


def _day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def certificate_problem(text: str, *, ca: bool, now: datetime | None = None) -> str | None:
    """Why the certificate in `text` cannot work today, or None. A client certificate is its
    first block; a CA bundle fails only when none of its certificates is in date (a bundle
    mid-rotation holds an old one beside the new)."""
    now = now or datetime.now(UTC)
    certs = certificates(text)
    if not certs:
        return "no BEGIN CERTIFICATE block in it"
    checked = certs if ca else certs[:1]
    expired = [c for c in checked if c.not_after < now]
    early = [c for c in checked if c.not_before > now]
    if len(expired) + len(early) < len(checked):
        return None
    if expired:
        last = max(expired, key=lambda c: c.not_after)
        what = "every CA certificate in it has expired, the latest" if ca and len(checked) > 1 else "certificate"
        return f"{what} CN={last.subject} expired on {_day(last.not_after)}; renew it in its Secret"
    first = min(early, key=lambda c: c.not_before)
    return f"certificate CN={first.subject} is not valid before {_day(first.not_before)} (check the clocks)"


def problem(text: str, *, kind: Literal["ca", "certificate", "key"]) -> str | None:
    """Why PEM `text` cannot serve as a CA bundle, a client certificate or a client key today
    (without quoting it), or None: the one check the runtime's settings and the operator share."""
    try:
        if kind == "key":
            pkcs8(text)
            return None
        return certificate_problem(text, ca=kind == "ca")
    except ValueError as exc:
        return str(exc)
