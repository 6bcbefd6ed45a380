"""Apache Kafka 4.x in KRaft mode: one combined broker/controller on loopback.

Jars come from Maven Central (the `kafka_2.13` artifact and its dependencies) and run on the
machine's JDK; storage is formatted on first start and kept under the cache dir. With the node
(on unless ``FLOE_NODE=0``) a second listener on the node's bridge serves pods, advertising that address,
while clients on the host keep the loopback one.
"""

from __future__ import annotations

import subprocess
import uuid

from floe_stack import artifacts, component, ports, procs, tls
from floe_stack.layout import KAFKA_VERSION, NODE_BRIDGE_IP, SCALA_BINARY, Layout, node_enabled

NAME = "kafka"
LOG4J = "2.24.3"

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


class Kafka:
    name = NAME

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        mine = procs.running_pid(layout, NAME) is not None
        self.port = book.get("kafka", 9092, owned_by_us=mine)
        self.controller_port = book.get("kafka_controller", 9093, owned_by_us=mine)
        self.sasl_ssl_port = book.get("kafka_sasl_ssl", 9094, owned_by_us=mine)
        self.ssl_port = book.get("kafka_ssl", 9095, owned_by_us=mine)
        self.pods_port = book.get("kafka_pods", 9096, owned_by_us=mine) if node_enabled() else 0
        self.data = layout.data / "kafka"

    def install(self) -> None:
        self.libs = artifacts.maven_jars(
            self.layout,
            f"kafka-{KAFKA_VERSION}",
            [
                f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
                f"org.apache.logging.log4j:log4j-core:{LOG4J}",
                f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J}",
            ],
        )

    def _properties(self) -> str:
        pods = f",PODS://{NODE_BRIDGE_IP}:{self.pods_port}" if self.pods_port else ""
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}{pods}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}{pods}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PODS:PLAINTEXT",
                f"log.dirs={self.data}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=10",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # Let tests and benchmarks use short KIP-848 session timeouts.
                "group.consumer.min.session.timeout.ms=3000",
                "group.consumer.min.heartbeat.interval.ms=500",
                "auto.create.topics.enable=true",
                "log.retention.hours=24",
                "",
            ]
        )

    def _secured_properties(self, base: str) -> str:
        """Two more listeners, beside whatever the PLAINTEXT one is: SASL_SSL (PLAIN and SCRAM
        users, server-side TLS only) and SSL requiring a client certificate (mTLS), both with the
        certificates of `floe_stack.tls`. Later lines of a properties file win, so these extend
        the lines above rather than edit them."""
        props = dict(line.split("=", 1) for line in base.splitlines() if "=" in line)

        def host(key: str) -> str:
            listener = next(x for x in props[key].split(",") if x.startswith("PLAINTEXT://"))
            return listener.removeprefix("PLAINTEXT://").rsplit(":", 1)[0]

        bind, advertised = host("listeners"), host("advertised.listeners")
        d = tls.ensure(self.layout, hosts=[bind, advertised])
        plain = tls.passwords(self.layout)["floeplain"]
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return "\n".join(
            [
                f"listeners={props['listeners']},SASL_SSL://{bind}:{self.sasl_ssl_port},SSL://{bind}:{self.ssl_port}",
                f"advertised.listeners={props['advertised.listeners']},"
                f"SASL_SSL://{advertised}:{self.sasl_ssl_port},SSL://{advertised}:{self.ssl_port}",
                f"listener.security.protocol.map={props['listener.security.protocol.map']},SASL_SSL:SASL_SSL,SSL:SSL",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={d / 'server.pem'}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={d / 'ca.crt'}",
                "listener.name.ssl.ssl.client.auth=required",
                "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                f'required user_floeplain="{plain}";',
                f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram}",
                f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
                "",
            ]
        )

    def _scram_users(self) -> None:
        """SCRAM-SHA-256 and -512 credentials of the user `floe` (idempotent: set on every start,
        so a broker formatted before the secured listener existed gets them too)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        password = tls.passwords(self.layout)["floe"].encode()
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        # one request per mechanism: the broker refuses two changes to one user in a request
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion("floe", ScramCredentialInfo(mechanism, 4096), password)
            for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
                future.result()

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java", "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.layout.conf('kafka-log4j2.properties')}",
            "-cp", f"{self.libs}/*", main, *args,
        ]

    def start(self) -> None:
        if procs.running_pid(self.layout, NAME):
            return
        conf = self.layout.conf("kafka.properties")
        conf.parent.mkdir(parents=True, exist_ok=True)
        base = self._properties()
        conf.write_text(base + self._secured_properties(base))
        conf.chmod(0o600)  # holds the PLAIN user's password
        self.layout.conf("kafka-log4j2.properties").write_text(LOG4J2_PROPERTIES)
        if not (self.data / "meta.properties").exists():
            self.data.mkdir(parents=True, exist_ok=True)
            fmt = subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", uuid.uuid4().hex[:22],
                           "-c", str(conf), "--ignore-formatted"),
                capture_output=True, text=True,
            )
            if fmt.returncode != 0:
                raise component.StackError(f"formatting Kafka storage in {self.data} failed:\n{fmt.stderr[-2000:]}")
        procs.start(self.layout, NAME, self._java("kafka.Kafka", str(conf)), marker=str(conf))

    def ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not ports.accepts(self.port):
            return False
        try:
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
            md = admin.list_topics(timeout=2)
        except Exception:
            return False
        return bool(md.brokers) and md.controller_id >= 0

    def wait_ready(self, timeout: float) -> None:
        component.wait_until(self.ready, what="Kafka", timeout=timeout,
                             alive=component.alive(self.layout, NAME), log=str(self.layout.log(NAME)))
        self._scram_users()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        host = self.bootstrap.rsplit(":", 1)[0]
        env = {
            "FLOE_KAFKA_BOOTSTRAP": self.bootstrap,
            "FLOE_KAFKA_VERSION": KAFKA_VERSION,
            "FLOE_KAFKA_SASL_SSL_BOOTSTRAP": f"{host}:{self.sasl_ssl_port}",
            "FLOE_KAFKA_SSL_BOOTSTRAP": f"{host}:{self.ssl_port}",
            "FLOE_STACK_TLS_DIR": str(tls.directory(self.layout)),
        }
        if self.pods_port:
            env["FLOE_KAFKA_BOOTSTRAP_PODS"] = f"{NODE_BRIDGE_IP}:{self.pods_port}"
        return env

    def processes(self) -> list[str]:
        return [NAME]

    def describe(self) -> str:
        return f"Kafka {KAFKA_VERSION} (KRaft) on {self.bootstrap}"
