"""The size a dry run checks output records against (`floe_jobs.kafkaio.record_size`) is the one
librdkafka refuses records by, before sending them: checked against the producer itself, which
refuses an oversized record in `produce()` without any broker."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from floe_jobs.kafkaio import OutputColumns, oversized, record_size

LIMIT = 1000  # librdkafka's smallest message.max.bytes


@pytest.fixture(scope="module")
def producer() -> Any:
    # no broker at that address: produce() only checks and queues, and the queue is purged
    p = Producer({"message.max.bytes": LIMIT, "bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    yield p
    p.purge()


def produces(producer: Any, key: Any, value: Any, headers: Any) -> bool:
    try:
        producer.produce("t", value, key, headers=headers)
    except KafkaException as exc:
        assert "MSG_SIZE_TOO_LARGE" in str(exc)
        return False
    return True


@pytest.mark.parametrize(
    ("key", "headers"),
    [
        (None, None),
        (b"k" * 2, None),
        ("wörd", None),  # a str key counts its UTF-8 bytes
        (b"key", [("abc", b"1234")]),
        (b"key", [("floe.src", b"x" * 200), ("t", b"")]),  # a header value over one varint byte
    ],
)
def test_a_record_is_refused_exactly_when_its_size_is_above_message_max_bytes(
    producer: Any, key: Any, headers: Any
) -> None:
    room = LIMIT - record_size(key, b"", headers)
    assert record_size(key, b"v" * room, headers) == LIMIT
    assert produces(producer, key, b"v" * room, headers)
    assert not produces(producer, key, b"v" * (room + 1), headers)


def test_oversized_names_the_first_row_above_the_limit_and_its_size() -> None:
    out = OutputColumns(keys=[b"a", b"b", b"c"], values=[b"x", b"y" * 2000, b"z" * 3000])
    assert oversized(out, LIMIT) == (1, record_size(b"b", b"y" * 2000))
    assert oversized(OutputColumns(keys=[b"a"], values=[b"x"]), LIMIT) is None
    assert oversized(OutputColumns(keys=[], values=[]), LIMIT) is None
