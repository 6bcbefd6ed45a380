"""The group protocol a replica joins with, against the real broker's bounds on KIP-848 group
configs (the stack's broker: group.consumer.min.heartbeat.interval.ms=500; a stock Kafka 4
broker's minimums are 5 s and a 45 s session, above Floe's defaults)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient
from floe_jobs import config, membership

pytestmark = [pytest.mark.kafka]


def _cfg(job_config: config.FloeConfig, protocol: str, heartbeat_ms: int) -> config.FloeConfig:
    """The suite's job configuration with this protocol and group timeouts."""
    kafka = job_config.kafka.model_copy(
        update={"group_protocol": protocol, "session_timeout_ms": 10_000, "heartbeat_interval_ms": heartbeat_ms}
    )
    return job_config.model_copy(update={"kafka": kafka})


def test_auto_joins_with_the_consumer_protocol_when_the_broker_takes_the_timeouts(
    kafka_bootstrap: str, job_config: config.FloeConfig
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert membership.choose_protocol(admin, _cfg(job_config, "auto", 3000)) == "consumer"


def test_auto_falls_back_to_classic_when_the_broker_refuses_the_timeouts(
    kafka_bootstrap: str, job_config: config.FloeConfig
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    # 400 ms is below the broker's group.consumer.min.heartbeat.interval.ms (500)
    assert membership.choose_protocol(admin, _cfg(job_config, "auto", 400)) == "classic"


def test_an_explicit_consumer_protocol_stops_with_what_to_change(
    kafka_bootstrap: str, job_config: config.FloeConfig
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    with pytest.raises(membership.GroupConfigsRefused) as refused:
        membership.choose_protocol(admin, _cfg(job_config, "consumer", 400))
    message = str(refused.value)
    assert "group.consumer.min.heartbeat.interval.ms" in message
    assert "spec.shutdown.sessionTimeoutMs" in message and "spec.kafka.groupProtocol" in message
