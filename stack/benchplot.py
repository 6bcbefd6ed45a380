"""The benchmark results drawn as one SVG per area (docs/img/bench/<area>.svg), for the README.

Every result is Floe against a baseline measured in the same run, so what a reader needs at a
glance is the two side by side, how far the runs scattered, and where the target lies. Each
result is a pair of horizontal bars: Floe's median and the baseline's, each with a whisker from
the lowest run to the highest (when the result records its runs), and the target as a dashed
line where it falls on the value's axis: a ratio target (`ratio >= 0.9`) drawn at that multiple of
the baseline, a target on the value in its own unit (`value <= 2 s`, `<= 250 MiB`) at that
figure. A target this cannot place (`median 0`, a bound on another field) is only written, with
met or missed, in the result's label. The results of an area differ in unit and size (cached
gets by the hundred thousand a second beside milliseconds per fenced batch), so each pair has
its own axis from 0.

Written by hand, not with a plotting library: a few rectangles and lines need no dependency,
and the output must be the same bytes for the same JSON (no timestamps, no generated ids) so
the unit test can regenerate it and compare. The background is drawn, so the text reads on
GitHub's light and dark themes alike.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

from floe_stack.benchrows import area, files, fmt, inverted, number, ratio_text, target

WIDTH = 800
LEFT = 80  # the bars' names ("Floe", "baseline") end here
RIGHT = 160  # the figures' column
BAR_W = WIDTH - LEFT - RIGHT - 16
TOP = 64  # title and legend
ROW_H = 94
FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"
INK, MUTED, BACKGROUND, BORDER = "#1f2328", "#59636e", "#ffffff", "#d0d7de"
FLOE, BASELINE, TARGET = "#0969da", "#8c959f", "#bc4c00"
MET, MISSED = "#1a7f37", "#cf222e"

_CLAUSE = re.compile(r"^(?:(value|p99|median|ratio) )?[<>]=? ?(baseline_value|[0-9]+(?:\.[0-9]+)?)(?: ?([^\s\d]\S*))?$")


def target_at(r: dict[str, Any]) -> float | None:
    """Where the result's target falls on its value's axis, or None if it cannot be placed.
    The target's first clause that can be placed counts: on the ratio (`ratio <= 3`, or the
    result's `target_ratio`) it is that multiple of the baseline (its inverse when the ratio is
    baseline / value); on the value (`value <= 2 s`, `<= 0.10`; `p99 <= 1 s` when the value is
    the p99) it is that figure, if in the value's unit; `value <= baseline_value` is the baseline."""
    base = number(r.get("baseline_value"))
    bare = target(r)
    on_ratio = number(r.get("target_ratio"))
    for clause in re.split(r",| and ", bare):
        m = _CLAUSE.match(clause.strip())
        if not m:
            continue
        subject, figure, unit = m.groups()
        if subject == "ratio" and unit is None and figure != "baseline_value":
            on_ratio = on_ratio or float(figure)
            break
        if subject == "p99" and r.get("p99_s") != r.get("value"):
            continue
        if figure == "baseline_value":
            if unit is None and base is not None:
                return base
        elif unit in (None, r.get("unit")):
            return float(figure)
    turned = inverted(r)
    if not on_ratio or base is None or turned is None:
        return None
    return base / on_ratio if turned else base * on_ratio


def _side(r: dict[str, Any], side: str) -> tuple[float | None, float | None, float | None]:
    """(median, min, max) of one side, value or baseline; min and max None without runs."""
    median = number(r.get("value" if side == "value" else "baseline_value"))
    runs = (r.get("spread") or {}).get(side)
    if median is None or not isinstance(runs, dict):
        return median, None, None
    return median, number(runs.get("min")), number(runs.get("max"))


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _text(x: float, y: float, body: str, size: int = 12, fill: str = INK, anchor: str = "start",
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}"'
            f' font-weight="{weight}">{body}</text>')


def _ratio_line(r: dict[str, Any]) -> str:
    return "no ratio recorded" if number(r.get("ratio")) is None else f"ratio {ratio_text(r)}"


def _row(y: float, name: str, r: dict[str, Any]) -> list[str]:
    """One result: its label, Floe's bar and the baseline's, whiskers and the target line."""
    bare = target(r)
    met = r.get("target_met")
    verdict = "" if met is None else (
        f'<tspan fill="{MET if met else MISSED}" font-weight="bold">{"met" if met else "missed"}</tspan>')
    label = f'<tspan font-weight="bold">{escape(name)}</tspan>'
    if bare or verdict:
        # about 100 characters fit on the line at this size: the name and the verdict go whole
        label += f'<tspan fill="{MUTED}">  ·  target </tspan>{escape(_short(bare, max(16, 80 - len(name))))}'
        label += f"{': ' if bare and verdict else ''}{verdict}"
    out = [_text(16, y + 16, label, size=13),
           _text(16, y + 33, escape(_short(_ratio_line(r), 120)), size=11, fill=MUTED)]
    sides = [("Floe", FLOE, _side(r, "value"), y + 42), ("baseline", BASELINE, _side(r, "baseline"), y + 64)]
    line = target_at(r)
    figures = [f for _, _, side, _ in sides for f in side if f is not None] + ([line] if line is not None else [])
    if not figures or _side(r, "value")[0] is None:
        return [*out, _text(LEFT, y + 58, "no value recorded", fill=MUTED)]
    top = max(max(figures), 0.0) or 1.0

    def x(v: float) -> float:
        return LEFT + max(v, 0.0) / top * BAR_W

    unit = escape(str(r.get("unit") or ""))
    for title, colour, (median, low, high), bar_y in sides:
        if median is None:
            continue
        mid = bar_y + 8
        out.append(_text(LEFT - 8, mid + 4, title, anchor="end"))
        out.append(f'<rect x="{LEFT}" y="{bar_y:.1f}" width="{x(median) - LEFT:.1f}" height="16" fill="{colour}"/>')
        if low is not None and high is not None:
            out.append(f'<path d="M{x(low):.1f} {mid:.1f}H{x(high):.1f}M{x(low):.1f} {mid - 5:.1f}v10'
                       f'M{x(high):.1f} {mid - 5:.1f}v10" stroke="{INK}" stroke-width="1.5" fill="none"/>')
        out.append(_text(WIDTH - RIGHT, mid + 4, f"{escape(fmt(median))} {unit}".strip()))
    if line is not None:
        out.append(f'<path d="M{x(line):.1f} {y + 38:.1f}V{y + 84:.1f}" stroke="{TARGET}" stroke-width="2"'
                   ' stroke-dasharray="4 3"/>')
    return out


def _legend(y: float) -> list[str]:
    return [
        f'<rect x="16" y="{y - 10}" width="14" height="10" fill="{FLOE}"/>', _text(36, y, "Floe (median)", size=11),
        f'<rect x="136" y="{y - 10}" width="14" height="10" fill="{BASELINE}"/>',
        _text(156, y, "baseline (median)", size=11),
        f'<path d="M282 {y - 5}H306M282 {y - 10}v10M306 {y - 10}v10" stroke="{INK}" stroke-width="1.5" fill="none"/>',
        _text(312, y, "runs, min to max", size=11),
        f'<path d="M430 {y - 11}V{y + 1}" stroke="{TARGET}" stroke-width="2" stroke-dasharray="4 3"/>',
        _text(438, y, "target", size=11),
        _text(WIDTH - 16, y, "each benchmark on its own axis from 0", size=11, fill=MUTED, anchor="end"),
    ]


def plot(name: str, results: list[tuple[str, dict[str, Any]]]) -> str:
    """One area's SVG: a pair of bars per result, in the order given."""
    height = TOP + ROW_H * len(results) + 8
    title = f"{name}: Floe against its baseline"
    body = [_text(16, 26, escape(title), size=15, weight="bold"), *_legend(48)]
    for i, (stem, r) in enumerate(results):
        body += _row(TOP + i * ROW_H, stem, r)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0.5" y="0.5" width="{WIDTH - 1}" height="{height - 1}" rx="6" fill="{BACKGROUND}" '
        f'stroke="{BORDER}"/>',
        f'<g font-family="{FONT}">',
        *body,
        "</g>",
        "</svg>",
        "",
    ])


def areas(results: Path) -> list[str]:
    """The areas that have results, in the tables' order."""
    return list(dict.fromkeys(area(path) for path in files(results)))


def plots(results: Path) -> dict[str, str]:
    """Every area's SVG, by area."""
    by_area: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in files(results):
        by_area.setdefault(area(path), []).append((path.stem, json.loads(path.read_text())))
    return {name: plot(name, rows) for name, rows in by_area.items()}
