"""Byte-order helpers for ranges over blob keys.

Cassandra compares `blob` clustering keys as unsigned bytes, lexicographically, so a prefix
scan is the range `[prefix, upper)` where `upper` is the smallest byte string greater than
every string that starts with `prefix`.
"""

from __future__ import annotations


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The exclusive upper bound of all keys starting with `prefix`, or None when unbounded.

    Trailing 0xFF bytes cannot be incremented, so they are dropped and the byte before them
    incremented: b"a\\xff" -> b"b". A prefix made only of 0xFF bytes (or the empty prefix)
    has no finite upper bound: every key from the prefix on matches.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
