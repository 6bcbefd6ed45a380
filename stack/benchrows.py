"""Reading one benchmark result (bench/results/<area>-<name>.json) the same way for its table
row and its plot: the order of the results, how a figure is written, and which way its ratio is
better.

The results are written by different benches over months, so their fields vary: a ratio may be
value / baseline or baseline / value, a target may be on the ratio, on the value in its own unit,
or on something only the text names. What is read here is what every result carries (`metric`,
`value`, `baseline_value`, `ratio`, `target`), and anything that cannot be told is None, never a
guess.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

AREAS = ("store", "operator", "handover", "scaleout", "autoscale", "throughput", "lag")

_FORMULA = re.compile(r"ratio = (value|baseline) / (value|baseline)")
_BETTER = re.compile(r"\b(higher|lower) is better")
_TARGET = re.compile(r"^(?:(value|p99|median|ratio) )?([<>]=?)")


def fmt(value: object) -> str:
    """Four significant digits, never in exponent form: 10,363.2 reads 10,363, and 0.0473 stays."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1000:
        return f"{round(value):,}"
    return f"{value:.4g}"


def number(value: object) -> float | None:
    """A figure of a result as a float, or None when it is missing or not a finite number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def target(r: dict[str, Any]) -> str:
    """The result's target without its explanation in brackets, `<=` and `>=` spelled so
    whichever way it was written: `value <= baseline_value (the median run's ...)` reads
    `value <= baseline_value`."""
    text = str(r.get("target") or "").replace("≤", "<=").replace("≥", ">=")
    return re.sub(r"\s*\([^)]*\)", "", text).strip()


def area(path: Path) -> str:
    """The area of a result: its file name up to the first dash (`store-get` is a store result)."""
    return path.stem.split("-")[0]


def files(results: Path) -> list[Path]:
    """The result files, area by area in the order of AREAS (others after), then by name."""

    def order(path: Path) -> tuple[int, str]:
        return (AREAS.index(area(path)) if area(path) in AREAS else len(AREAS), path.stem)

    return sorted(results.glob("*.json"), key=order)


def met(r: dict[str, Any]) -> str:
    met = r.get("target_met")
    return "—" if met is None else ("met" if met else "**missed**")


def inverted(r: dict[str, Any]) -> bool | None:
    """Whether the ratio is baseline / value (True) or value / baseline (False). The metric's
    text says so (`ratio = baseline / value`), or else the figures do (whichever quotient lies
    nearer the recorded ratio: the recorded figures are rounded); None when neither tells."""
    said = _FORMULA.search(str(r.get("metric", "")))
    if said:
        return said[1] == "baseline"
    value, base, ratio = number(r.get("value")), number(r.get("baseline_value")), number(r.get("ratio"))
    if value is None or base is None or ratio is None or min(value, base, ratio) <= 0:
        return None
    return abs(math.log(ratio * value / base)) < abs(math.log(ratio * base / value))


def ratio_better(r: dict[str, Any]) -> str | None:
    """"higher" or "lower": which way the recorded ratio is better. The metric says which way
    the value is (`lower is better`), turned over when the ratio is baseline / value; a result
    that does not say is read from its target (`ratio >= 1.0`, `value <= 2 s`); None if neither."""
    said = _BETTER.search(str(r.get("metric", "")))
    bound = _TARGET.match(target(r))
    if said:
        better, subject = said[1], "value"
    elif bound:
        better, subject = ("lower" if bound[2].startswith("<") else "higher"), bound[1] or "value"
    else:
        return None
    if subject == "ratio":
        return better
    turned = inverted(r)
    if turned is None:
        return None
    return {"higher": "lower", "lower": "higher"}[better] if turned else better


def ratio_text(r: dict[str, Any]) -> str:
    """The ratio with what it divides and which way is better, `0.91 (Floe / baseline, higher is
    better)`, and the ratio per CPU second when the result records one."""
    if number(r.get("ratio")) is None:
        return "—"
    turned, better = inverted(r), ratio_better(r)
    notes = []
    if turned is not None:
        notes.append("baseline / Floe" if turned else "Floe / baseline")
    if better is not None:
        notes.append(f"{better} is better")
    note = ", ".join(notes)
    per_cpu = r.get("ratio_per_cpu_second")
    if per_cpu is not None:
        note += f"{'; ' if note else ''}{fmt(per_cpu)} per CPU second"
    return fmt(r["ratio"]) + (f" ({note})" if note else "")


def target_text(r: dict[str, Any]) -> str:
    """The target, then met or missed."""
    bare = target(r)
    return f"{bare}: {met(r)}" if bare else met(r)
