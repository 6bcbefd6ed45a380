"""The cluster DNS's pure parts: the wrapper module CoreDNS is built from, its Corefile, its
read-only access, and the kubelet pointing pods at it."""

from __future__ import annotations

import re
from pathlib import Path

from floe_stack import dns, node
from floe_stack.layout import COREDNS_VERSION, NODE_BRIDGE_IP, Layout


def _directives(corefile: str) -> set[str]:
    """The plugin names a Corefile uses (the first word of each line inside a server block)."""
    names = set()
    for line in corefile.splitlines()[1:]:
        word = line.strip().split(" ", 1)[0]
        if line.startswith("    ") and not line.startswith("        ") and word and word != "}":
            names.add(word)
    return names


def test_the_binary_links_exactly_the_plugins_the_corefile_uses(tmp_path: Path) -> None:
    conf = dns.corefile(kubeconfig=tmp_path / "k", health_port=1, ready_port=2)
    linked = set(re.findall(r'"github.com/coredns/coredns/plugin/(\w+)"', dns.main_go()))
    assert _directives(conf) == linked == set(dns.PLUGINS)
    assert f"require github.com/coredns/coredns v{COREDNS_VERSION}" in dns.go_mod()


def test_corefile_serves_the_cluster_domain_on_the_bridge_only_and_has_no_upstream(tmp_path: Path) -> None:
    conf = dns.corefile(kubeconfig=tmp_path / "coredns.kubeconfig", health_port=18080, ready_port=18181)
    assert f"bind {NODE_BRIDGE_IP}" in conf
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in conf
    assert f"kubeconfig {tmp_path / 'coredns.kubeconfig'}" in conf
    assert "health 127.0.0.1:18080" in conf and "ready 127.0.0.1:18181" in conf
    # pods may reach nothing outside the node: no resolver to forward to
    assert "forward" not in conf and "/etc/resolv.conf" not in conf


def test_coredns_may_only_read_what_the_kubernetes_plugin_watches() -> None:
    role, binding = dns.rbac()
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}  # type: ignore[attr-defined]
    assert verbs == {"list", "watch"}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": dns.USER}]


def test_the_kubelet_gives_pods_the_cluster_dns(tmp_path: Path) -> None:
    paths = node.Paths(Layout(root=tmp_path / "repo", cache=tmp_path / "cache"))
    conf = node.kubelet_config(paths, port=1, healthz_port=2, ca=tmp_path / "ca.crt", resolv=tmp_path / "r")
    assert conf["clusterDNS"] == [NODE_BRIDGE_IP] and conf["clusterDomain"] == dns.DOMAIN
