"""The README's benchmark table, generated from bench/results/*.json so it never drifts.

`make bench` runs every benchmark and then this; tests/unit/stack checks the README holds the
table these files give.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
AREAS = ("store", "operator", "handover", "scaleout", "throughput", "lag")


def _fmt(value: object) -> str:
    """Four significant digits, never in exponent form: 10,363.2 reads 10,363, and 0.0473 stays."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1000:
        return f"{round(value):,}"
    return f"{value:.4g}"


def _spread(r: dict[str, object]) -> str:
    """min to max of the value's runs, then of the baseline's, when the result records them."""
    spread = r.get("spread")
    if not isinstance(spread, dict):
        return "—"
    parts = []
    for side in ("value", "baseline"):
        runs = spread.get(side)
        if isinstance(runs, dict) and "min" in runs:
            parts.append(f"{_fmt(runs['min'])} to {_fmt(runs['max'])} ({runs.get('runs', '?')} runs)")
    return " vs ".join(parts) or "—"


def _met(r: dict[str, object]) -> str:
    met = r.get("target_met")
    return "—" if met is None else ("met" if met else "**missed**")


def table(results: Path) -> str:
    rows = [
        "| benchmark | value | baseline | ratio | target | met | spread (value vs baseline) | p50 / p99 | measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    files = sorted(results.glob("*.json"), key=lambda p: (AREAS.index(p.stem.split("-")[0])
                                                           if p.stem.split("-")[0] in AREAS else len(AREAS), p.stem))
    for path in files:
        r = json.loads(path.read_text())
        lat = f"{_fmt(r['p50_s'])} s / {_fmt(r['p99_s'])} s" if r.get("p50_s") is not None else "—"
        rows.append(
            f"| `{path.stem}`: {r['metric']} | {_fmt(r['value'])} {r.get('unit', '')} | "
            f"{_fmt(r.get('baseline_value'))} ({r.get('baseline', '')}) | {_fmt(r.get('ratio'))} | "
            f"{_fmt(r.get('target'))} | {_met(r)} | {_spread(r)} | {lat} | {str(r.get('date', ''))[:10]} |"
        )
    return "\n".join(rows)


def render(readme: str, results: Path) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table(results)}\n{END}{tail}"


def main() -> int:
    root = Path.cwd()
    readme = root / "README.md"
    text = readme.read_text()
    if START not in text:
        print(f"benchtable: README.md has no {START} marker", file=sys.stderr)
        return 1
    readme.write_text(render(text, root / "bench" / "results"))
    print("benchtable: README.md benchmark table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
