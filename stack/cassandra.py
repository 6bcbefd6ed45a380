"""Apache Cassandra 5.0: one loopback node run from the `cassandra-all` Maven artifact.

Cassandra's tarball scripts are not on Maven Central, so this module supplies what they
would: a minimal cassandra.yaml, a logback config and the JDK 17 module options
(`--add-exports`/`--add-opens`) that Cassandra's own jvm17-server.options sets. The heap is
capped at 1 GiB and data lives under the cache dir. With the node (unless ``FLOE_NODE=0``) CQL listens
on every address, so pods reach it on the node's bridge, and still names loopback as its own.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from floe_stack import artifacts, component, ports, procs, tls
from floe_stack.layout import CASSANDRA_VERSION, NODE_BRIDGE_IP, Layout, node_enabled

NAME = "cassandra"
SECURED = "cassandra-secured"

JDK17_MODULE_OPTIONS = [
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
]

LOGBACK = """\
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""


def node_yaml(
    *,
    cluster: str,
    data: Path,
    listen: str,
    rpc: str,
    seed: str,
    storage_port: int,
    port: int,
    replication: int,
    extra: str = "",
) -> str:
    """cassandra.yaml of one node of this stack's clusters (the default node, the secured node and
    the ring's): their data under `data`, `rpc` the rpc_address line(s), `extra` lines appended."""
    return f"""\
cluster_name: {cluster}
num_tokens: 16
allocate_tokens_for_local_replication_factor: {replication}
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
data_file_directories: [{data}/data]
commitlog_directory: {data}/commitlog
saved_caches_directory: {data}/saved_caches
hints_directory: {data}/hints
cdc_raw_directory: {data}/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{seed}"
listen_address: {listen}
{rpc}
storage_port: {storage_port}
native_transport_port: {port}
start_native_transport: true
endpoint_snitch: SimpleSnitch
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 640KiB
{extra}"""


class Cassandra:
    name = NAME

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        mine = procs.running_pid(layout, NAME) is not None
        self.port = book.get("cassandra", 9042, owned_by_us=mine)
        self.storage_port = book.get("cassandra_storage", 7000, owned_by_us=mine)
        self.jmx_port = book.get("cassandra_jmx", 7199, owned_by_us=mine)
        self.data = layout.data / "cassandra"

    def install(self) -> None:
        self.libs = artifacts.maven_jars(
            self.layout, f"cassandra-{CASSANDRA_VERSION}", [f"org.apache.cassandra:cassandra-all:{CASSANDRA_VERSION}"]
        )

    def _yaml(self) -> str:
        # Cassandra serves CQL on one address; 0.0.0.0 with a broadcast address is how it
        # serves loopback and the node's bridge at once.
        rpc = "rpc_address: 0.0.0.0\nbroadcast_rpc_address: 127.0.0.1" if node_enabled() else "rpc_address: 127.0.0.1"
        return node_yaml(
            cluster="floe-local",
            data=self.data,
            listen="127.0.0.1",
            rpc=rpc,
            seed=f"127.0.0.1:{self.storage_port}",
            storage_port=self.storage_port,
            port=self.port,
            replication=1,
            extra="concurrent_reads: 16\nconcurrent_writes: 16\n",
        )

    def start(self) -> None:
        if procs.running_pid(self.layout, self.name):
            return
        conf = self.layout.conf(f"{self.name}.yaml")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(self._yaml())
        logback = self.layout.conf(f"{self.name}-logback.xml")
        logback.write_text(LOGBACK)
        self.data.mkdir(parents=True, exist_ok=True)
        argv = [
            "java", "-Xms1g", "-Xmx1g", "-Xss256k",
            "-XX:+UseG1GC", "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1",
            "-XX:G1HeapRegionSize=16m", "-XX:MaxGCPauseMillis=300",
            "-XX:MaxDirectMemorySize=512m",
            "-Djdk.attach.allowAttachSelf=true",
            "-Dio.netty.tryReflectionSetAccessible=true",
            *JDK17_MODULE_OPTIONS,
            f"-Dcassandra.config=file://{conf}",
            f"-Dlogback.configurationFile={logback}",
            f"-Dcassandra.storagedir={self.data}",
            f"-Dcassandra.logdir={self.layout.run / 'logs'}",
            f"-Dcassandra.jmx.local.port={self.jmx_port}",
            "-Dcassandra-foreground=yes",
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
            "-Dcassandra.ring_delay_ms=1000",
            "-cp", f"{self.libs}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]
        procs.start(self.layout, self.name, argv, marker=str(conf))

    def ready(self) -> bool:
        from cassandra.cluster import Cluster, NoHostAvailable

        if not ports.accepts(self.port):
            return False
        cluster = Cluster(["127.0.0.1"], port=self.port, connect_timeout=2, control_connection_timeout=2)
        try:
            session = cluster.connect()
            return session.execute("SELECT release_version FROM system.local").one() is not None
        except (NoHostAvailable, OSError, Exception):
            return False
        finally:
            cluster.shutdown()

    def wait_ready(self, timeout: float) -> None:
        component.wait_until(self.ready, what=f"Cassandra ({self.name})", timeout=timeout,
                             alive=component.alive(self.layout, self.name), log=str(self.layout.log(self.name)))

    def env(self) -> dict[str, str]:
        env = {"FLOE_CASSANDRA_HOSTS": "127.0.0.1", "FLOE_CASSANDRA_PORT": str(self.port),
               "FLOE_CASSANDRA_LOCAL_DC": "datacenter1", "FLOE_CASSANDRA_VERSION": CASSANDRA_VERSION}
        if node_enabled():
            env["FLOE_CASSANDRA_HOSTS_PODS"] = NODE_BRIDGE_IP
        return env

    def processes(self) -> list[str]:
        return [NAME]

    def describe(self) -> str:
        return f"Cassandra {CASSANDRA_VERSION} CQL on 127.0.0.1:{self.port}"


class SecuredCassandra(Cassandra):
    """A second single-node cluster with PasswordAuthenticator and client encryption (no
    plaintext port), for the tests of authenticated TLS sessions; the default node stays as it
    is for every other test. Started on demand (`up`, by a test fixture), not by `make up`;
    `make down` stops it. Its role `floe` (a superuser: replicas provision their keyspace) has
    the password of `floe_stack.tls.passwords`; the certificate is `floe_stack.tls`'s server
    certificate, checked by clients against the local CA with hostname verification."""

    name = SECURED

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        mine = procs.running_pid(layout, SECURED) is not None
        self.port = book.get("cassandra_secured", 9142, owned_by_us=mine)
        self.storage_port = book.get("cassandra_secured_storage", 7010, owned_by_us=mine)
        self.jmx_port = book.get("cassandra_secured_jmx", 7299, owned_by_us=mine)
        self.data = layout.data / SECURED

    def _yaml(self) -> str:
        d = tls.ensure(self.layout)
        return super()._yaml().replace("cluster_name: floe-local", "cluster_name: floe-secured") + f"""\
authenticator: PasswordAuthenticator
client_encryption_options:
  enabled: true
  optional: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {d / "server.pem"}
  require_client_auth: false
"""

    def session(self, *, username: str, password: str) -> object:
        """A session over TLS (the local CA, hostname verified) with these credentials."""
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import Cluster

        context = ssl.create_default_context(cafile=str(tls.directory(self.layout) / "ca.crt"))
        cluster = Cluster(["127.0.0.1"], port=self.port, ssl_context=context, connect_timeout=5,
                          control_connection_timeout=5,
                          auth_provider=PlainTextAuthProvider(username=username, password=password))
        try:
            return cluster.connect()
        except Exception:
            cluster.shutdown()
            raise

    def ready(self) -> bool:
        """True once the role `floe` logs in; made, or given this checkout's password, with the
        default superuser (which Cassandra creates a few seconds after start) when it does not."""
        if not ports.accepts(self.port):
            return False
        password = tls.passwords(self.layout)["floe"]
        for username, secret in (("floe", password), ("cassandra", "cassandra")):
            try:
                session: Any = self.session(username=username, password=secret)
            except Exception:
                continue
            try:
                if username == "cassandra":
                    # The data outlives the checkout's password file (a fresh clone at the same
                    # path reuses it), so the role is made or given this checkout's password.
                    session.execute("CREATE ROLE IF NOT EXISTS floe WITH SUPERUSER = true AND LOGIN = true "
                                    "AND PASSWORD = %s", (password,))
                    session.execute("ALTER ROLE floe WITH PASSWORD = %s", (password,))
                    continue
                return True
            except Exception:
                return False
            finally:
                session.cluster.shutdown()
        return False

    def up(self, timeout: float = 240) -> bool:
        """Install (cached), start unless running, wait until the role logs in; whether it started."""
        started = procs.running_pid(self.layout, SECURED) is None
        self.install()
        self.start()
        self.wait_ready(timeout)
        return started

    def env(self) -> dict[str, str]:
        return {"FLOE_CASSANDRA_SECURED_PORT": str(self.port)}

    def processes(self) -> list[str]:
        return [SECURED]

    def describe(self) -> str:
        return f"Cassandra {CASSANDRA_VERSION} with password authentication and TLS on 127.0.0.1:{self.port}"
