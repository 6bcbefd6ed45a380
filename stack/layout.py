"""Where the local stack keeps things.

Downloads and builds are cached outside the repo (``$FLOE_CACHE``, default ``~/.cache/floe``)
so that a fresh clone reuses them; per-checkout runtime files (pid files, logs, generated
certificates, configs and the env file) live in ``<repo>/.floe``; Kafka's and Cassandra's
data live under the cache dir, one directory per checkout.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "4.1.1"
CASSANDRA_VERSION = "5.0.6"
KUBE_VERSION = "1.34.10"
ETCD_VERSION = "3.6.5"
HELM_VERSION = "3.19.0"
PROMETHEUS_VERSION = "3.16.0"
COREDNS_VERSION = "1.15.0"
SCALA_BINARY = "2.13"

# The node's pod network: one bridge whose address is also where the stack's services listen
# for pods. Pods get a route to this subnet and to the Service range only.
NODE_BRIDGE = "floe0"
NODE_BRIDGE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"


def node_enabled() -> bool:
    """The node (containerd, kubelet, kube-proxy, images) is part of the stack unless it is
    turned off with ``FLOE_NODE=0`` (``make up NODE=0``), for a machine that cannot run one."""
    return os.environ.get("FLOE_NODE", "1") != "0"


@dataclass(frozen=True)
class Layout:
    """Every path the stack uses, derived from the repo root and the cache dir."""

    root: Path
    cache: Path

    @classmethod
    def discover(cls, root: Path | None = None) -> Layout:
        root = root or Path(os.environ.get("FLOE_ROOT", Path.cwd()))
        cache = Path(os.environ.get("FLOE_CACHE", Path.home() / ".cache" / "floe"))
        return cls(root=root.resolve(), cache=cache.expanduser().resolve())

    @property
    def run(self) -> Path:
        return self.root / ".floe"

    @property
    def env_file(self) -> Path:
        return self.run / "stack.env"

    @property
    def bin(self) -> Path:
        return self.cache / "bin"

    @property
    def jars(self) -> Path:
        return self.cache / "jars"

    @property
    def data(self) -> Path:
        """Service data, under the cache dir but one directory per checkout, so two clones
        never run two brokers or two Cassandra nodes on the same files."""
        return self.cache / "data" / hashlib.sha1(str(self.root).encode()).hexdigest()[:12]

    def log(self, name: str) -> Path:
        return self.run / "logs" / f"{name}.log"

    def pid(self, name: str) -> Path:
        return self.run / "pids" / f"{name}.pid"

    def conf(self, name: str) -> Path:
        return self.run / "conf" / name
