"""Cluster DNS for the stack's node: CoreDNS, built from the Go module proxy, serving
``cluster.local`` to pods from the API server, as a cluster's DNS add-on would.

Pods get the node's bridge address as their nameserver (the kubelet's ``clusterDNS``) and the
usual search path (``<namespace>.svc.cluster.local svc.cluster.local cluster.local``), so they
reach Services by name: ``kubernetes.default.svc``, an app's metrics or Spark UI Service. A
cluster runs CoreDNS as pods behind the ``kube-dns`` Service; here it is a node process like
kube-proxy, listening on the bridge's address only, because the node has no registry to pull
CoreDNS's image from. There is no upstream: pods may reach nothing outside the node, so names
outside the cluster domain fail at once instead of waiting on a resolver that cannot answer.

The binary is a small wrapper module (``main.go`` below) that links only the plugins the
Corefile uses, instead of ``go install``-ing CoreDNS with its ~60 plugins and their cloud SDKs.
Its API access is read-only: a client certificate whose user is bound to a ClusterRole that
lists and watches what the ``kubernetes`` plugin reads.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from floe_stack import artifacts, component, kube, procs
from floe_stack.layout import COREDNS_VERSION, NODE_BRIDGE_IP, Layout

NAME = "coredns"
DOMAIN = "cluster.local"
USER = "system:floe-stack:coredns"
PLUGINS = ("bind", "cache", "errors", "health", "kubernetes", "ready")

MAIN_GO = """package main

// CoreDNS with the plugins the stack's Corefile uses, and no others.
import (
{imports}
\t"github.com/coredns/coredns/coremain"
)

func main() {{ coremain.Run() }}
"""


def main_go(plugins: tuple[str, ...] = PLUGINS) -> str:
    imports = "\n".join(f'\t_ "github.com/coredns/coredns/plugin/{p}"' for p in plugins)
    return MAIN_GO.format(imports=imports)


def go_mod(version: str = COREDNS_VERSION) -> str:
    return f"module floe.local/corednsbuild\n\ngo 1.24\n\nrequire github.com/coredns/coredns v{version}\n"


def build(layout: Layout) -> Path:
    """Build ``coredns`` into the cache (a no-op when this version and plugin set are there)."""
    target = layout.bin / NAME
    digest = hashlib.sha1((go_mod() + main_go()).encode()).hexdigest()[:8]
    stamp = layout.bin / f".{NAME}-v{COREDNS_VERSION}-{digest}"
    if stamp.exists() and target.exists():
        return target
    artifacts.check_go_checksums()
    src = layout.cache / "build" / f"coredns-v{COREDNS_VERSION}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(go_mod())
    (src / "main.go").write_text(main_go())
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    out = layout.bin / f".{NAME}.partial"
    for cmd in (["go", "mod", "tidy"], ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out), "."]):
        proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise artifacts.ArtifactError(
                f"could not build CoreDNS v{COREDNS_VERSION} ({' '.join(cmd[:2])}) from {artifacts.GO_PROXY}:\n"
                f"{proc.stderr[-2000:]}")
    os.replace(out, target)
    stamp.touch()
    return target


def corefile(*, kubeconfig: Path, health_port: int, ready_port: int, address: str = NODE_BRIDGE_IP) -> str:
    """One server on the bridge's port 53: the cluster domain and reverse lookups of pod and
    Service addresses from the API server; anything else has no answer (no upstream)."""
    return f""".:53 {{
    bind {address}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


def rbac() -> list[dict[str, object]]:
    """Read access to what the kubernetes plugin watches, for CoreDNS's user."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "floe-stack:coredns"},
         "rules": [
             {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "floe-stack:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "floe-stack:coredns"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]},
    ]


class ClusterDNS:
    """CoreDNS on the node's bridge (after the control plane and the node)."""

    name = "cluster-dns"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.kube = kube.Kube(layout, book)
        running = procs.running_pid(layout, NAME) is not None
        self.health_port = book.get("coredns_health", 8080, owned_by_us=running)
        self.ready_port = book.get("coredns_ready", 8181, owned_by_us=running)
        self.conf = layout.conf("Corefile")

    def install(self) -> None:
        build(self.layout)

    def start(self) -> None:
        if procs.running_pid(self.layout, NAME):
            return
        self.kube.cert(NAME, f"/CN={USER}")
        kubeconfig = self.kube.write_kubeconfig(NAME, NAME)
        self.kube.apply(rbac(), what="CoreDNS's read access")
        self.conf.parent.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(corefile(kubeconfig=kubeconfig, health_port=self.health_port,
                                      ready_port=self.ready_port))
        procs.start(self.layout, NAME, [str(self.layout.bin / NAME), "-conf", str(self.conf)],
                    marker=str(self.conf))

    def _ready(self) -> bool:
        """The ready plugin answers 200 once the kubernetes plugin has synced with the API server."""
        return component.answers(f"http://127.0.0.1:{self.ready_port}/ready")

    def wait_ready(self, timeout: float) -> None:
        component.wait_until(self._ready, what=NAME, timeout=timeout, alive=component.alive(self.layout, NAME),
                             log=str(self.layout.log(NAME)))

    def env(self) -> dict[str, str]:
        return {"FLOE_CLUSTER_DNS": NODE_BRIDGE_IP, "FLOE_CLUSTER_DOMAIN": DOMAIN}

    def processes(self) -> list[str]:
        return [NAME]

    def describe(self) -> str:
        return f"cluster DNS: CoreDNS {COREDNS_VERSION} on {NODE_BRIDGE_IP}:53 ({DOMAIN}, no upstream)"

