"""Apache Kafka 4.x in KRaft mode: one combined broker/controller on loopback.

Jars come from Maven Central (the `kafka_2.13` artifact and its dependencies) and run on the
machine's JDK; storage is formatted on first start and kept under the cache dir. With the node
(``FLOE_NODE=1``) a second listener on the node's bridge serves pods, advertising that address,
while clients on the host keep the loopback one.
"""

from __future__ import annotations

import subprocess
import uuid

from floe_stack import artifacts, component, ports, procs
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
        self.pods_port = book.get("kafka_pods", 9094, owned_by_us=mine) if node_enabled() else 0
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
        conf.write_text(self._properties())
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

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {"FLOE_KAFKA_BOOTSTRAP": self.bootstrap, "FLOE_KAFKA_VERSION": KAFKA_VERSION}
        if self.pods_port:
            env["FLOE_KAFKA_BOOTSTRAP_PODS"] = f"{NODE_BRIDGE_IP}:{self.pods_port}"
        return env

    def processes(self) -> list[str]:
        return [NAME]

    def describe(self) -> str:
        return f"Kafka {KAFKA_VERSION} (KRaft) on {self.bootstrap}"
