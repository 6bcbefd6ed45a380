"""The benchmark tables and plots, generated from bench/results/*.json so they never drift.

`make bench` runs every benchmark and then this. It writes:
- docs/benchmarks.md's full table (between `<!-- bench:table -->` and `<!-- bench:table:end -->`):
  every result with its metric in full, spreads, target and load, for whoever checks a figure;
- the README's headline (between `<!-- bench:start -->` and `<!-- bench:end -->`): one line per
  result (Floe, baseline, the ratio and which way is better, target met or missed) and a plot
  per area (`floe_stack.benchplot`, SVG under docs/img/bench/), for whoever wants the picture;
- the short tables of the docs that quote results, between `<!-- bench:rows <prefix> ... -->`
  and `<!-- bench:rows:end -->` (the results whose file name starts with one of the prefixes).
So no figure of a result is typed by hand. `generated` gives every one of these files as it
should read; tests/unit/stack compares it with what is committed.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from floe_stack import benchplot
from floe_stack.benchrows import files, met, ratio_text, target_text
from floe_stack.benchrows import fmt as _fmt

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
FULL_START, FULL_END = "<!-- bench:table -->", "<!-- bench:table:end -->"
DOC = Path("docs") / "benchmarks.md"
IMG = Path("docs") / "img" / "bench"
ROWS = re.compile(r"(<!-- bench:rows ([^>]*?) -->)\n.*?(<!-- bench:rows:end -->)", re.DOTALL)


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
    if r.get("value") is None:
        return "—"
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


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(results: Path, header: list[str], cells: Callable[[Path, dict[str, Any]], list[str]],
           prefixes: Sequence[str] = ("",)) -> str:
    """A markdown table with a row of `cells` per result whose file name starts with a prefix."""
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for path in files(results):
        if any(path.stem.startswith(prefix) for prefix in prefixes):
            rows.append("| " + " | ".join(map(_cell, cells(path, json.loads(path.read_text())))) + " |")
    return "\n".join(rows)


def table(results: Path) -> str:
    """Every result in full: docs/benchmarks.md's table."""
    header = ["benchmark", "value", "baseline", "ratio", "target", "met", "spread (value vs baseline)", "p50 / p99",
              "load", "measured"]
    return _table(results, header, lambda path, r: [
        f"`{path.stem}`: {r.get('metric', '')}", _value(r),
        f"{_fmt(r.get('baseline_value'))} ({r.get('baseline', '')})", _ratio(r), _fmt(r.get("target")), met(r),
        _spread(r), _latency(r), _load(r), str(r.get("date", ""))[:10],
    ])


def short_table(results: Path, prefixes: list[str]) -> str:
    """The results a doc quotes, without the metric's text (docs/benchmarks.md's table has it)."""
    header = ["result", "value", "baseline", "ratio", "target", "met", "spread (value vs baseline)", "p50 / p99",
              "load", "measured"]
    return _table(results, header, lambda path, r: [
        f"`{path.stem}`", _value(r), _fmt(r.get("baseline_value")), _ratio(r),
        _fmt(r.get("target")), met(r), _spread(r), _latency(r), _load(r), str(r.get("date", ""))[:10],
    ], prefixes)


def _with_unit(value: object, unit: object) -> str:
    return "—" if value is None else f"{_fmt(value)} {unit or ''}".strip()


def headline(results: Path) -> str:
    """The README's table: one line per result, no metric text (docs/benchmarks.md has it)."""
    header = ["benchmark", "Floe", "baseline", "ratio", "target"]
    return _table(results, header, lambda path, r: [
        f"`{path.stem}`", _value(r).strip(), _with_unit(r.get("baseline_value"), r.get("unit")), ratio_text(r),
        target_text(r),
    ])


# -- the files ---------------------------------------------------------------------------------


def _between(text: str, start: str, end: str, body: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body}\n{end}{tail}"


def render_doc(text: str, results: Path) -> str:
    """A doc with every `bench:rows` block regenerated."""
    return ROWS.sub(lambda m: f"{m[1]}\n{short_table(results, m[2].split())}\n{m[3]}", text)


def render(readme: str, results: Path) -> str:
    """The README with its headline table and a plot per area."""
    plots = "\n\n".join(f"![{area}: Floe against its baseline]({(IMG / f'{area}.svg').as_posix()})"
                        for area in benchplot.areas(results))
    return _between(readme, START, END, f"{headline(results)}\n\n{plots}")


def render_full(doc: str, results: Path) -> str:
    """docs/benchmarks.md with its full table."""
    return _between(doc, FULL_START, FULL_END, table(results))


def generated(root: Path) -> dict[Path, str]:
    """Every file this module writes (relative to the checkout), as it should read for the
    results under bench/results/."""
    results = root / "bench" / "results"
    out: dict[Path, str] = {}
    for path, (start, end), render_one in ((Path("README.md"), (START, END), render),
                                           (DOC, (FULL_START, FULL_END), render_full)):
        text = (root / path).read_text(encoding="utf-8")
        if not 0 <= text.find(start) < text.find(end):
            raise ValueError(f"{path} needs {start} and then {end} around its generated part")
        out[path] = render_one(text, results)
    for doc in sorted((root / "docs").glob("*.md")):
        path = doc.relative_to(root)
        text = out.get(path) or doc.read_text(encoding="utf-8")
        if ROWS.search(text):
            out[path] = render_doc(text, results)
    for area, svg in benchplot.plots(results).items():
        out[IMG / f"{area}.svg"] = svg
    return out


def _orphans(root: Path, files: dict[Path, str]) -> list[Path]:
    """Plots of an area that no longer has a result."""
    return [svg.relative_to(root) for svg in sorted((root / IMG).glob("*.svg")) if svg.relative_to(root) not in files]


def stale(root: Path) -> list[Path]:
    """The generated files that do not read as the results give, and plots of areas with no
    result left: what `python -m floe_stack.benchtable` would write or remove."""
    files = generated(root)
    wrong = [path for path, text in files.items()
             if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text]
    return wrong + _orphans(root, files)


def main() -> int:
    root = Path.cwd()
    try:
        files = generated(root)
    except ValueError as e:
        print(f"benchtable: {e}", file=sys.stderr)
        return 1
    for orphan in _orphans(root, files):
        (root / orphan).unlink()
        print(f"benchtable: {orphan} removed (no result of its area left)")
    for path, text in files.items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"benchtable: {path} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
