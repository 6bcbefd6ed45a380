"""TLS material for unit tests that load settings through the runtime's validation, which reads
certificates' dates and rewraps keys (`floe_jobs.pem`): a self-signed certificate valid for a
century and its key, made with openssl for the tests only (they open no connection)."""

from __future__ import annotations

import base64

CERT = """\
-----BEGIN CERTIFICATE-----
MIIBiTCCAS+gAwIBAgIUbz+f5d9NpiLZPUJyJ5n1Fws27uwwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOZmxvZS11bml0LXRlc3QwIBcNMjYxMTI2MDE1MjA4WhgPMjEy
NjExMDIwMTUyMDhaMBkxFzAVBgNVBAMMDmZsb2UtdW5pdC10ZXN0MFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAEpMbhiCpRyLRY2Q9FfG3IzUB1zA8muKbVyWTlr/B9
1owbnhKmcpaVixp/bhLhUAWqSmdaDR4tit9VNfrJo8wCbKNTMFEwHQYDVR0OBBYE
FAlfAEWR6ETo6PUHz8kvug7iHcvwMB8GA1UdIwQYMBaAFAlfAEWR6ETo6PUHz8kv
ug7iHcvwMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgbfdB3aXk
+EbEF/h7nP7Hdx8DPRtXtsjoJXdlePThGjACIQDgrwBCDk+2vK1PuCXGY6cLZc8G
b+RSj0NMoyiEaf8jNg==
-----END CERTIFICATE-----
"""

KEY = """\
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgeuIOnANRS/9sraFK
GZ/NG0EBm1vApT6NjTSCMicuTL+hRANCAASkxuGIKlHItFjZD0V8bcjNQHXMDya4
ptXJZOWv8H3WjBueEqZylpWLGn9uEuFQBapKZ1oNHi2K31U1+smjzAJs
-----END PRIVATE KEY-----
"""


def tagged(pem: str, tag: str) -> str:
    """`pem` followed by a block that no client reads, so that each variable's value is unique."""
    body = base64.b64encode(tag.encode()).decode()
    return f"{pem}-----BEGIN FLOE TEST TAG-----\n{body}\n-----END FLOE TEST TAG-----\n"
