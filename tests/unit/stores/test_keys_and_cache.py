"""Prefix upper bounds over unsigned byte order, and the read cache (pure)."""

from __future__ import annotations

import pytest
from floe_jobs.stores import CacheOptions, ReadCache, prefix_upper_bound
from floe_jobs.stores.cache import ABSENT, MISS


@pytest.mark.parametrize(
    ("prefix", "upper"),
    [
        (b"abc", b"abd"),
        (b"a\xff", b"b"),
        (b"a\xff\xff", b"b"),
        (b"\x00", b"\x01"),
        (b"\x01\xfe", b"\x01\xff"),
        (b"\xff", None),
        (b"\xff\xff", None),
        (b"", None),
    ],
)
def test_prefix_upper_bound(prefix: bytes, upper: bytes | None) -> None:
    assert prefix_upper_bound(prefix) == upper


def test_prefix_bound_contains_exactly_the_prefixed_keys() -> None:
    keys = [bytes([a, b]) for a in (0x00, 0x01, 0x7F, 0xFE, 0xFF) for b in (0x00, 0x80, 0xFF)]
    for prefix in (b"\x01", b"\xfe", b"\xff", b"\x7f\xff", b"\xff\xff"):
        upper = prefix_upper_bound(prefix)
        selected = {k for k in keys if k >= prefix and (upper is None or k < upper)}
        assert selected == {k for k in keys if k.startswith(prefix)}, prefix


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cache_hits_misses_absent_and_expiry() -> None:
    clock = Clock()
    cache = ReadCache(CacheOptions(max_entries=10, ttl_seconds=5), clock=clock)
    assert cache.get("k") is MISS
    cache.set("k", b"v")
    cache.set("gone", ABSENT)
    assert cache.get("k") == b"v"
    assert cache.get("gone") is ABSENT
    clock.now = 4.9
    assert cache.get("k") == b"v"
    clock.now = 5.0
    assert cache.get("k") is MISS
    assert len(cache) == 1


def test_cache_evicts_least_recently_used() -> None:
    cache = ReadCache(CacheOptions(max_entries=2, ttl_seconds=60))
    cache.set("a", b"1")
    cache.set("b", b"2")
    assert cache.get("a") == b"1"  # b is now the least recently used
    cache.set("c", b"3")
    assert cache.get("b") is MISS
    assert cache.get("a") == b"1"
    assert cache.get("c") == b"3"
    cache.invalidate("a")
    assert cache.get("a") is MISS
    cache.clear()
    assert len(cache) == 0


def test_cache_options_are_validated() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        CacheOptions(max_entries=0)
    with pytest.raises(ValueError, match="ttl"):
        CacheOptions(ttl_seconds=0)
