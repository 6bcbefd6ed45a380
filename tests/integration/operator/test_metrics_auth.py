"""The operator's /metrics with `--metrics-auth kubernetes`, against the real API server: no
token is a 401, a token the API server does not know or whose ServiceAccount may not `get
/metrics` is a 403, a ServiceAccount bound to that non-resource URL reads the metrics."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import yaml
from floe_operator import k8s, metricsauth

from .kube import Kubectl

pytestmark = [pytest.mark.k8s]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tokens(kube: Kubectl, namespace: str) -> Iterator[dict[str, str]]:
    role = f"floe-metrics-reader-{namespace}"
    kube.run("create", "serviceaccount", "scraper", "-n", namespace)
    kube.run("create", "serviceaccount", "nobody", "-n", namespace)
    kube.run("apply", "-f", "-", stdin=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}]},
    ]))
    try:
        yield {sa: kube.run("create", "token", sa, "-n", namespace).stdout.strip() for sa in ("scraper", "nobody")}
    finally:
        kube.run("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found")


def _status(port: int, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            assert b"floe_operator_kube_writes" in r.read()
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_metrics_answer_only_a_token_allowed_to_get_metrics(
    kube: Kubectl, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", kube.kubeconfig)
    port = _free_port()
    server = metricsauth.serve(port, metricsauth.kubernetes_authorizer(k8s.Cluster(k8s.load_client(pool_size=2))),
                               host="127.0.0.1")
    try:
        assert _status(port, None) == 401
        assert _status(port, "not-a-token") == 403
        assert _status(port, tokens["nobody"]) == 403
        assert _status(port, tokens["scraper"]) == 200
    finally:
        server.shutdown()
