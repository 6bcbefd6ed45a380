"""The group protocol a replica joins with, against the real broker's bounds on KIP-848 group
configs (the stack's broker: group.consumer.min.heartbeat.interval.ms=500; a stock Kafka 4
broker's minimums are 5 s and a 45 s session, above Floe's defaults)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from floe_jobs import config, membership
from floe_stack import localrun

pytestmark = [pytest.mark.kafka]


def _cfg(bootstrap: str, protocol: str, heartbeat_ms: int) -> config.FloeConfig:
    return config.load(
        environ={
            "FLOE_APP_ID": localrun.unique("gp"),
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "FLOE_KAFKA_TOPICS": "unused",
            "FLOE_CASSANDRA_KEYSPACE": "unused",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
            "FLOE_KAFKA_GROUP_PROTOCOL": protocol,
            "FLOE_KAFKA_SESSION_TIMEOUT_MS": "10000",
            "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": str(heartbeat_ms),
        }
    )


def test_auto_joins_with_the_consumer_protocol_when_the_broker_takes_the_timeouts(kafka_bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert membership.choose_protocol(admin, _cfg(kafka_bootstrap, "auto", 3000)) == "consumer"


def test_auto_falls_back_to_classic_when_the_broker_refuses_the_timeouts(kafka_bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    # 400 ms is below the broker's group.consumer.min.heartbeat.interval.ms (500)
    assert membership.choose_protocol(admin, _cfg(kafka_bootstrap, "auto", 400)) == "classic"


def test_an_explicit_consumer_protocol_stops_with_what_to_change(kafka_bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    with pytest.raises(membership.GroupConfigsRefused) as refused:
        membership.choose_protocol(admin, _cfg(kafka_bootstrap, "consumer", 400))
    message = str(refused.value)
    assert "group.consumer.min.heartbeat.interval.ms" in message
    assert "spec.shutdown.sessionTimeoutMs" in message and "spec.kafka.groupProtocol" in message
