"""spec.kafka.properties reach the runtime's clients, shown by what the broker exposes: the group
member's client id in the group's description, and the compression codec of the record batches
the broker stored for the producer."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from floe_jobs import config, kafkaio, membership
from floe_stack import localrun
from floe_stack.layout import Layout

pytestmark = [pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[3]
ZSTD = 4  # the codec bits (0-2) of a record batch's attributes (Kafka's message format v2)


def _app(bootstrap: str, suffix: str, props: dict[str, str]) -> tuple[str, str, config.FloeConfig]:
    """A new app id, its one-partition topic `<id>-<suffix>` and the runtime's configuration of
    it with the Kafka client properties `props`."""
    app_id = localrun.unique("kp")
    topic = f"{app_id}-{suffix}"
    localrun.create_topic(bootstrap, topic, 1)
    cfg = config.load(
        environ={
            "FLOE_APP_ID": app_id,
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "FLOE_KAFKA_TOPICS": topic,
            "FLOE_KAFKA_EXTRA": json.dumps(props),
            "FLOE_CASSANDRA_KEYSPACE": "unused",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
        }
    )
    return app_id, topic, cfg


@pytest.mark.timeout(120)
def test_client_id_prefixes_the_group_members_id_as_the_broker_describes_it(kafka_bootstrap: str) -> None:
    app_id, topic, cfg = _app(kafka_bootstrap, "in", {"client.id": "team-a", "socket.keepalive.enable": "true"})
    member = membership.Membership(cfg, topics=[topic], client_id=f"{app_id}-0", protocol="consumer")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        deadline = time.monotonic() + 60
        while not member.owned:
            assert time.monotonic() < deadline, "the member never got its partition"
            time.sleep(0.05)
        group = admin.describe_consumer_groups([cfg.group_id], request_timeout=10)[cfg.group_id].result()
        assert [m.client_id for m in group.members] == [f"team-a-{app_id}-0"]
    finally:
        member.close(leave=True)


def _batch_codecs(log_dir: Path, topic: str) -> list[int]:
    """The compression codec of every record batch in the broker's first segment of `topic`-0."""
    data = (log_dir / f"{topic}-0" / "00000000000000000000.log").read_bytes()
    codecs, at = [], 0
    while at + 23 <= len(data):
        (length,) = struct.unpack_from(">i", data, at + 8)
        if length <= 0:
            break
        (attributes,) = struct.unpack_from(">h", data, at + 21)
        codecs.append(attributes & 0x7)
        at += 12 + length
    return codecs


def _log_dir() -> Path:
    conf = Layout.discover(ROOT).conf("kafka.properties").read_text()
    dirs = [line.split("=", 1)[1].strip() for line in conf.splitlines() if line.startswith("log.dirs=")]
    return Path(dirs[-1].split(",")[0])


@pytest.mark.timeout(120)
def test_compression_type_reaches_the_producer_as_the_broker_stores_its_batches(kafka_bootstrap: str) -> None:
    app_id, topic, cfg = _app(kafka_bootstrap, "out", {"compression.type": "zstd", "linger.ms": "20"})
    sink = kafkaio.KafkaSink(cfg, client_id=app_id)
    try:
        value = b"floe " * 200  # compressible: librdkafka sends a batch uncompressed when that is smaller
        assert sink.write_rows((str(i).encode(), value, None, topic) for i in range(200)) == 200
    finally:
        sink.close()
    codecs = _batch_codecs(_log_dir(), topic)
    assert codecs, "no record batch in the broker's segment"
    assert set(codecs) == {ZSTD}, f"batch codecs {codecs} (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)"
