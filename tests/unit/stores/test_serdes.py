"""Serdes: Kafka-compatible byte layouts, JSON, pluggable, and versioned values (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from floe_jobs.stores import SerdeError, serdes


def test_bytes_match_kafka_serdes() -> None:
    assert serdes.STR.encode("héllo") == "héllo".encode()
    assert serdes.INT.encode(1) == b"\x00\x00\x00\x01"  # IntegerSerde
    assert serdes.INT.encode(-1) == b"\xff\xff\xff\xff"
    assert serdes.LONG.encode(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"  # LongSerde
    assert serdes.FLOAT.encode(1.5) == bytes.fromhex("3ff8000000000000")  # DoubleSerde
    assert serdes.FLOAT32.encode(1.5) == bytes.fromhex("3fc00000")  # FloatSerde


@pytest.mark.parametrize(
    ("serde", "value"),
    [
        (serdes.BYTES, b"\x00\xff"),
        (serdes.STR, "ünïcode ✓"),
        (serdes.INT, -(2**31)),
        (serdes.INT, 2**31 - 1),
        (serdes.LONG, -(2**63)),
        (serdes.FLOAT, 0.1),
        (serdes.FLOAT, -math.inf),
        (serdes.JSON, {"b": [1, 2.5, None, True], "a": "x"}),
    ],
)
def test_round_trip(serde: serdes.Serde[Any], value: Any) -> None:
    assert serde.decode(serde.encode(value)) == value


def test_json_is_canonical() -> None:
    assert serdes.JSON.encode({"b": 1, "a": 2}) == b'{"a":2,"b":1}'


@pytest.mark.parametrize(
    ("serde", "bad"),
    [(serdes.INT, 2**31), (serdes.INT, "1"), (serdes.LONG, 1.0), (serdes.STR, b"x"), (serdes.BYTES, "x"),
     (serdes.JSON, {1, 2}), (serdes.FLOAT, "1.0"), (serdes.INT, True)],
)
def test_encode_errors(serde: serdes.Serde[Any], bad: Any) -> None:
    with pytest.raises(SerdeError):
        serde.encode(bad)


@pytest.mark.parametrize(
    ("serde", "data"),
    [(serdes.INT, b"\x00"), (serdes.LONG, b"\x00" * 4), (serdes.STR, b"\xff\xfe"), (serdes.JSON, b"{")],
)
def test_decode_errors(serde: serdes.Serde[Any], data: bytes) -> None:
    with pytest.raises(SerdeError):
        serde.decode(data)


def test_text_and_json_forms() -> None:
    assert serdes.BYTES.parse("00ff") == b"\x00\xff"
    assert serdes.BYTES.to_json(b"\x00\xff") == "AP8="
    assert serdes.INT.parse("-5") == -5
    assert serdes.JSON.parse('{"a":1}') == {"a": 1}
    assert serdes.JSON.parse("plain") == "plain"
    with pytest.raises(SerdeError):
        serdes.INT.parse("x")
    with pytest.raises(SerdeError):
        serdes.BYTES.parse("zz")


def test_by_name() -> None:
    assert serdes.by_name("long") is serdes.LONG
    with pytest.raises(ValueError, match="unknown serde"):
        serdes.by_name("avro")


def test_function_serde_wraps_failures() -> None:
    upper = serdes.FunctionSerde("upper", lambda s: s.upper().encode(), lambda b: b.decode(), parser=str)
    assert upper.decode(upper.encode("ab")) == "AB"
    broken = serdes.FunctionSerde[str]("broken", lambda s: 1 / 0, lambda b: b.decode())  # type: ignore[arg-type,return-value]
    with pytest.raises(SerdeError, match="broken encoder failed"):
        broken.encode("x")
    assert isinstance(upper, serdes.Serde)


def v1_to_v2(value: dict[str, Any]) -> dict[str, Any]:
    return {"count": value["n"], "unit": "events"}


def v2_to_v3(value: dict[str, Any]) -> dict[str, Any]:
    return {**value, "labels": []}


def test_versioned_serde_upgrades_old_values_on_read() -> None:
    v1 = serdes.VersionedSerde(serdes.JSON, current_version=1)
    v3 = serdes.VersionedSerde(serdes.JSON, current_version=3, upgrades={1: v1_to_v2, 2: v2_to_v3})
    old = v1.encode({"n": 7})
    assert old[:3] == b"\xfe\x00\x01"
    assert v3.version_of(old) == 1
    assert v3.decode(old) == {"count": 7, "unit": "events", "labels": []}
    assert v3.decode(v3.encode({"count": 1, "unit": "x", "labels": ["a"]}))["labels"] == ["a"]


def test_versioned_serde_reads_legacy_and_changed_formats() -> None:
    # Version 1 was plain strings (no header); version 2 is JSON.
    serde = serdes.VersionedSerde(
        serdes.JSON, current_version=2, legacy_version=1, readers={1: serdes.STR},
        upgrades={1: lambda s: {"name": s}},
    )
    assert serde.decode(b"alice") == {"name": "alice"}
    assert serde.decode(serde.encode({"name": "bob"})) == {"name": "bob"}


def test_versioned_serde_errors_carry_the_schema_version() -> None:
    v2 = serdes.VersionedSerde(serdes.JSON, current_version=2, upgrades={1: v1_to_v2})
    newer = serdes.VersionedSerde(serdes.JSON, current_version=5, upgrades={k: v2_to_v3 for k in range(1, 5)})
    with pytest.raises(SerdeError, match="newer") as info:
        v2.decode(newer.encode({}))
    assert info.value.schema_version == 5
    with pytest.raises(SerdeError, match="upgrade from schema version 1 to 2 failed") as info:
        v2.decode(serdes.VersionedSerde(serdes.JSON, current_version=1).encode({"wrong": 1}))
    assert info.value.schema_version == 1
    with pytest.raises(SerdeError, match="no schema version header"):
        v2.decode(b'{"n":1}')
    with pytest.raises(SerdeError, match="does not decode") as info:
        v2.decode(b"\xfe\x00\x02{")
    assert info.value.schema_version == 2


def test_versioned_serde_refuses_gaps_in_upgrades() -> None:
    with pytest.raises(ValueError, match="no upgrade"):
        serdes.VersionedSerde(serdes.JSON, current_version=3, upgrades={1: v1_to_v2})
