"""How the tests compare what an app computed with the truth: counters, told apart readably."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def counters_equal(got: Mapping[Any, Any], want: Mapping[Any, Any]) -> str | None:
    """None when equal, else a short description of the first differences."""
    if dict(got) == dict(want):
        return None
    diffs = []
    for k in sorted(set(got) | set(want), key=str):
        if got.get(k) != want.get(k):
            diffs.append(f"{k!r}: got {got.get(k)} want {want.get(k)}")
        if len(diffs) >= 10:
            break
    return f"{len(set(got) ^ set(want))} keys differ in presence; first differences: " + "; ".join(diffs)
