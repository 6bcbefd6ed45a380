"""The operator's /metrics behind the API server's authentication and authorization
(`--metrics-auth kubernetes`, chart value `operator.metricsAuth`).

A scraper sends `Authorization: Bearer <its ServiceAccount token>`; the operator asks the API
server who that is (a TokenReview) and whether they may `get` the non-resource URL `/metrics`
(a SubjectAccessReview), the same question the API server's and the kubelet's own /metrics ask,
so a Prometheus that scrapes those already holds the right (kube-prometheus grants it). Answers
are kept for a minute per token, so a scrape costs no API call in steady state. Without the
option the port serves anyone who reaches it (the chart's NetworkPolicy confines who does).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from floe_operator import k8s
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0

# token → whether it may get /metrics; both reviews in one call
Authorizer = Callable[[str], bool]


def kubernetes_authorizer(cluster: k8s.Cluster) -> Authorizer:
    """Ask the API server: a TokenReview, then a SubjectAccessReview of `get /metrics`."""
    cache: dict[str, tuple[float, bool]] = {}
    lock = threading.Lock()

    def allowed(token: str) -> bool:
        key = hashlib.sha256(token.encode()).hexdigest()
        with lock:
            hit = cache.get(key)
            if hit is not None and time.monotonic() - hit[0] < CACHE_SECONDS:
                return hit[1]
        verdict = _review(cluster, token)
        with lock:
            cache[key] = (time.monotonic(), verdict)
        return verdict

    return allowed


def _review(cluster: k8s.Cluster, token: str) -> bool:
    try:
        review = cluster.create_cluster_sync(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status: dict[str, Any] = review.get("status") or {}
        if not status.get("authenticated"):
            return False
        user = status.get("user") or {}
        access = cluster.create_cluster_sync(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.get("username", ""),
                    "uid": user.get("uid", ""),
                    "groups": user.get("groups") or [],
                    "extra": user.get("extra") or {},
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                },
            },
        )
        return bool((access.get("status") or {}).get("allowed"))
    except k8s.ApiError as exc:
        log.warning("Could not review a /metrics token: %s", exc)
        return False


def serve(port: int, authorizer: Authorizer, *, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    """/metrics for bearers `authorizer` admits: 401 without a token, 403 for one it refuses."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if code == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="floe-operator-metrics"')
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                return self._send(404, b"not found\n")
            scheme, _, token = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return self._send(401, b"send Authorization: Bearer <ServiceAccount token>\n")
            if not authorizer(token.strip()):
                return self._send(403, b"this token may not get /metrics\n")
            return self._send(200, generate_latest(), CONTENT_TYPE_LATEST)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="floe-metrics", daemon=True).start()
    return server
