"""A 3-node Cassandra ring on loopback addresses (127.0.0.2-4), for what one node cannot show:
a node lost under replication factor 3 and LOCAL_QUORUM, the setting production runs.

Each node has its own address (so all use the same CQL and storage ports, as in a real ring),
its own data, config, pid file and JMX port, and a small heap (three of them fit beside the
stack). Nodes start one after another: Cassandra refuses two nodes joining a ring at once. The
ring is not part of `make up`; the tests that need it start it (`floe_stack.ring.Ring`) and
stop it when they are done. It uses the artifacts `make up` cached.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from floe_stack import artifacts, component, ports, procs
from floe_stack.cassandra import JDK17_MODULE_OPTIONS, LOGBACK, node_yaml
from floe_stack.layout import CASSANDRA_VERSION, Layout

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
HEAP = "384m"


def _free_everywhere(port: int, addresses: Sequence[str]) -> bool:
    return all(ports.is_free(port, host) for host in addresses)


def _pick(default: int, addresses: Sequence[str]) -> int:
    """`default` when free on every address, else a port free on all of them."""
    port = default
    for _ in range(50):
        if _free_everywhere(port, addresses):
            return port
        port = ports.free_port()
    raise component.StackError(f"no port free on every one of {', '.join(addresses)}")


class Ring:
    """Three Cassandra nodes on `addresses`, the first one the seed."""

    def __init__(self, layout: Layout, *, addresses: Sequence[str] = ADDRESSES, heap: str = HEAP) -> None:
        self.layout = layout
        self.addresses = tuple(addresses)
        self.heap = heap
        self.port = _pick(9042, self.addresses)
        self.storage_port = _pick(7000, self.addresses)
        self.jmx_ports = [ports.free_port() for _ in self.addresses]
        self.libs: Path | None = None

    @property
    def hosts(self) -> list[str]:
        return list(self.addresses)

    def name(self, node: int) -> str:
        return f"cassandra-ring-{node}"

    def data(self, node: int) -> Path:
        return self.layout.data / "cassandra-ring" / str(node)

    def install(self) -> None:
        self.libs = artifacts.maven_jars(
            self.layout, f"cassandra-{CASSANDRA_VERSION}", [f"org.apache.cassandra:cassandra-all:{CASSANDRA_VERSION}"]
        )

    def _yaml(self, node: int) -> str:
        address = self.addresses[node]
        return node_yaml(
            cluster="floe-ring",
            data=self.data(node),
            listen=address,
            rpc=f"rpc_address: {address}",
            seed=f"{self.addresses[0]}:{self.storage_port}",
            storage_port=self.storage_port,
            port=self.port,
            replication=3,
            extra="concurrent_reads: 8\nconcurrent_writes: 8\nmemtable_heap_space: 64MiB\n"
            "memtable_offheap_space: 64MiB\nkey_cache_size: 8MiB\n",
        )

    def start_node(self, node: int, *, timeout: float = 240.0) -> float:
        """Start node `node` (0-2) if it is not running and wait until it answers CQL and sees
        the other running nodes up; the seconds it took."""
        assert self.libs is not None, "install() first"
        t0 = time.monotonic()
        name = self.name(node)
        if procs.running_pid(self.layout, name) is None:
            conf = self.layout.conf(f"{name}.yaml")
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(self._yaml(node))
            logback = self.layout.conf("cassandra-logback.xml")
            logback.write_text(LOGBACK)
            self.data(node).mkdir(parents=True, exist_ok=True)
            argv = [
                "java", f"-Xms{self.heap}", f"-Xmx{self.heap}", "-Xss256k",
                "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=300", "-XX:MaxDirectMemorySize=256m",
                "-XX:CICompilerCount=2",
                "-Djdk.attach.allowAttachSelf=true",
                "-Dio.netty.tryReflectionSetAccessible=true",
                *JDK17_MODULE_OPTIONS,
                f"-Dcassandra.config=file://{conf}",
                f"-Dlogback.configurationFile={logback}",
                f"-Dcassandra.storagedir={self.data(node)}",
                f"-Dcassandra.logdir={self.layout.run / 'logs'}",
                f"-Dcassandra.jmx.local.port={self.jmx_ports[node]}",
                "-Dcassandra-foreground=yes",
                "-Dcassandra.skip_wait_for_gossip_to_settle=0",
                "-Dcassandra.ring_delay_ms=1000",
                "-Dcassandra.consistent.rangemovement=false",
                "-cp", f"{self.libs}/*",
                "org.apache.cassandra.service.CassandraDaemon",
            ]
            procs.start(self.layout, name, argv, marker=str(conf))
        component.wait_until(
            lambda: self._node_ready(node),
            what=f"Cassandra ring node {self.addresses[node]}",
            timeout=timeout,
            alive=component.alive(self.layout, name),
            log=str(self.layout.log(name)),
        )
        return time.monotonic() - t0

    def start(self) -> float:
        """Start every node, one after another; the seconds it took."""
        t0 = time.monotonic()
        self.install()
        for node in range(len(self.addresses)):
            self.start_node(node)
        return time.monotonic() - t0

    def running(self, node: int) -> bool:
        return procs.running_pid(self.layout, self.name(node)) is not None

    def _node_ready(self, node: int) -> bool:
        """The node answers CQL and knows every other running node (gossip has met them)."""
        from cassandra.cluster import Cluster
        from cassandra.policies import WhiteListRoundRobinPolicy

        address = self.addresses[node]
        if not ports.accepts(self.port, address):
            return False
        cluster = Cluster(
            [address],
            port=self.port,
            connect_timeout=2,
            control_connection_timeout=2,
            load_balancing_policy=WhiteListRoundRobinPolicy([address]),
            protocol_version=5,
        )
        try:
            session = cluster.connect()
            peers = {str(row[0]) for row in session.execute("SELECT peer FROM system.peers")}
            others = {a for i, a in enumerate(self.addresses) if i != node and self.running(i)}
            return others <= peers
        except Exception:
            return False
        finally:
            cluster.shutdown()

    def kill(self, node: int) -> None:
        """SIGKILL node `node`, as a lost machine would go."""
        pid = procs.running_pid(self.layout, self.name(node))
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        while procs.running_pid(self.layout, self.name(node)) is not None:
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop every node (by pid file) and remove the ring's data."""
        for node in range(len(self.addresses)):
            procs.stop(self.layout, self.name(node), timeout=30)
        shutil.rmtree(self.layout.data / "cassandra-ring", ignore_errors=True)
