"""The README's benchmark table, generated from bench/results/*.json so it never drifts.

`make bench` runs every benchmark and then this; tests/unit/stack checks the README holds the
table these files give. Docs that quote results hold a short table of them between
`<!-- bench:rows <prefix> ... -->` and `<!-- bench:rows:end -->` (the results whose file name
starts with one of the prefixes), generated here too, so no figure of a result is typed by hand.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
ROWS = re.compile(r"(<!-- bench:rows ([^>]*?) -->)\n.*?(<!-- bench:rows:end -->)", re.DOTALL)
AREAS = ("store", "operator", "handover", "scaleout", "autoscale", "throughput", "lag")


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
            count = f"{runs['runs']} runs" if "runs" in runs else f"{runs.get('samples', '?')} samples"
            parts.append(f"{_fmt(runs['min'])} to {_fmt(runs['max'])} ({count})")
    return " vs ".join(parts) or "—"


def _ratio(r: dict[str, object]) -> str:
    """The ratio, and beside it the ratio per CPU second when the result records one."""
    per_cpu = r.get("ratio_per_cpu_second")
    return _fmt(r.get("ratio")) + ("" if per_cpu is None else f" ({_fmt(per_cpu)} per CPU second)")


def _value(r: dict[str, Any]) -> str:
    """The value with its unit, and the worst run beside it when the result records one
    (`value_max`): a median that meets its target must not hide a run that did not."""
    text = f"{_fmt(r['value'])} {r.get('unit', '')}"
    worst = r.get("value_max")
    return text if worst is None or worst == r["value"] else f"{text} (median; max {_fmt(worst)})"


def _latency(r: dict[str, object]) -> str:
    return f"{_fmt(r['p50_s'])} s / {_fmt(r['p99_s'])} s" if r.get("p50_s") is not None else "—"


def _load(r: dict[str, object]) -> str:
    for key in ("load_average_1m", "load_average"):
        value = r.get(key)
        if isinstance(value, int | float):
            return _fmt(round(value, 1))
    return "—"


def _files(results: Path) -> list[Path]:
    def order(path: Path) -> tuple[int, str]:
        area = path.stem.split("-")[0]
        return (AREAS.index(area) if area in AREAS else len(AREAS), path.stem)

    return sorted(results.glob("*.json"), key=order)


def _met(r: dict[str, object]) -> str:
    met = r.get("target_met")
    return "—" if met is None else ("met" if met else "**missed**")


def _table(results: Path, header: list[str], cells: Callable[[Path, dict[str, Any]], list[str]],
           prefixes: Sequence[str] = ("",)) -> str:
    """A markdown table with a row of `cells` per result whose file name starts with a prefix."""
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for path in _files(results):
        if any(path.stem.startswith(prefix) for prefix in prefixes):
            rows.append("| " + " | ".join(cells(path, json.loads(path.read_text()))) + " |")
    return "\n".join(rows)


def table(results: Path) -> str:
    header = ["benchmark", "value", "baseline", "ratio", "target", "met", "spread (value vs baseline)", "p50 / p99",
              "measured"]
    return _table(results, header, lambda path, r: [
        f"`{path.stem}`: {r['metric']}", _value(r),
        f"{_fmt(r.get('baseline_value'))} ({r.get('baseline', '')})", _ratio(r), _fmt(r.get("target")), _met(r),
        _spread(r), _latency(r), str(r.get("date", ""))[:10],
    ])


def short_table(results: Path, prefixes: list[str]) -> str:
    """The results a doc quotes, without the metric's text (the README's table has it)."""
    header = ["result", "value", "baseline", "ratio", "target", "met", "spread (value vs baseline)", "p50 / p99",
              "load", "measured"]
    return _table(results, header, lambda path, r: [
        f"`{path.stem}`", _value(r), _fmt(r.get("baseline_value")), _ratio(r),
        _fmt(r.get("target")), _met(r), _spread(r), _latency(r), _load(r), str(r.get("date", ""))[:10],
    ], prefixes)


def render_doc(text: str, results: Path) -> str:
    """A doc with every `bench:rows` block regenerated."""
    return ROWS.sub(lambda m: f"{m[1]}\n{short_table(results, m[2].split())}\n{m[3]}", text)


def render(readme: str, results: Path) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table(results)}\n{END}{tail}"


def main() -> int:
    root = Path.cwd()
    results = root / "bench" / "results"
    readme = root / "README.md"
    text = readme.read_text()
    if START not in text:
        print(f"benchtable: README.md has no {START} marker", file=sys.stderr)
        return 1
    readme.write_text(render(text, results))
    print("benchtable: README.md benchmark table updated")
    for doc in sorted((root / "docs").glob("*.md")):
        before = doc.read_text()
        if ROWS.search(before):
            doc.write_text(render_doc(before, results))
            print(f"benchtable: {doc.relative_to(root)} figures updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
