"""The benchmark plots and headline table, on results of every shape the benches write: a ratio
either way round, targets on the ratio, in seconds, on an error or on nothing drawable, missed
targets, missing latencies, spreads and baselines; and the check that the committed files follow
the JSON."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from floe_stack import benchplot, benchrows, benchtable

ROOT = Path(__file__).resolve().parents[3]
SVG = "{http://www.w3.org/2000/svg}"


def result(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"metric": "ops per second; higher is better", "unit": "ops/s", "value": 90.0,
                            "baseline": "raw driver", "baseline_value": 100.0, "ratio": 0.9,
                            "target": "ratio >= 0.8", "target_met": True, "p50_s": None, "p99_s": None}
    return {**base, **fields}


def test_the_ratio_is_read_from_the_metric_then_from_the_figures() -> None:
    said = result(metric="gap; lower is better, ratio = baseline / value", value=2.0, baseline_value=10.0, ratio=5.0)
    assert benchrows.inverted(said) is True
    # no formula in the text: 0.0033 lies nearer 0.01 / 3.065 than 3.065 / 0.01
    assert benchrows.inverted(result(metric="error", value=0.01, baseline_value=3.065, ratio=0.0033)) is False
    # the recorded baseline is rounded (0.002 for 0.00155): still nearer value / baseline
    assert benchrows.inverted(result(metric="p99", value=0.09, baseline_value=0.002, ratio=58.27)) is False
    assert benchrows.inverted(result(metric="writes", value=0, baseline_value=4345.0, ratio=0.0)) is None
    assert benchrows.inverted(result(ratio=None)) is None


def test_a_figure_that_is_no_finite_number_is_none() -> None:
    assert [benchrows.number(v) for v in (1, 2.5, float("nan"), float("inf"), True, "3", None)] == [
        1.0, 2.5, None, None, None, None, None]


@pytest.mark.parametrize(("fields", "better"), [
    ({}, "higher"),
    ({"metric": "gap; lower is better, ratio = baseline / value"}, "higher"),
    ({"metric": "seconds per batch, ratio fenced/unfenced, lower is better", "value": 3.6, "baseline_value": 3.0,
      "ratio": 1.2}, "lower"),
    ({"metric": "records per second", "target": "ratio >= 1.0"}, "higher"),
    ({"metric": "seconds", "target": "value <= 2 s", "value": 1.2, "baseline_value": 10.0, "ratio": 8.3}, "higher"),
    ({"metric": "seconds", "target": "median 0"}, None),
    ({"metric": "lower is better", "value": 0, "ratio": 0.0}, None),
])
def test_which_way_the_ratio_is_better(fields: dict[str, Any], better: str | None) -> None:
    assert benchrows.ratio_better(result(**fields)) == better


def test_the_ratio_says_what_it_divides_and_which_way_is_better() -> None:
    assert benchrows.ratio_text(result()) == "0.9 (Floe / baseline, higher is better)"
    assert benchrows.ratio_text(result(ratio_per_cpu_second=1.12)) == (
        "0.9 (Floe / baseline, higher is better; 1.12 per CPU second)")
    assert benchrows.ratio_text(result(metric="x", target="median 0", value=0, ratio=0.0)) == "0"
    assert benchrows.ratio_text(result(ratio=None)) == "—"


@pytest.mark.parametrize(("fields", "line"), [
    ({"target": "ratio >= 0.9"}, 90.0),
    ({"target": "ratio >= 100", "target_ratio": 100.0}, 10_000.0),
    ({"target": "ratio <= 3 and <= 15 ms added per batch", "unit": "s"}, 300.0),
    ({"metric": "gap, ratio = baseline / value", "target": "ratio >= 4", "ratio": 1.1}, 25.0),
    ({"target": "value <= 2 s", "unit": "s"}, 2.0),
    ({"target": "value <= 1 s and value_max <= 2 s", "unit": "s"}, 1.0),
    ({"target": "<= 250 MiB", "unit": "MiB"}, 250.0),
    ({"target": "≤ 250MiB", "unit": "MiB"}, 250.0),
    ({"target": "value < 2 s (the session timeout's fifth)", "unit": "s"}, 2.0),
    ({"target": "<= 0.10", "unit": "ratio"}, 0.1),
    ({"target": "p99 <= 1 s", "unit": "s", "value": 2.0, "p99_s": 2.0}, 1.0),
    ({"target": "p99 <= 1 s", "unit": "s", "value": 0.5, "p99_s": 2.0}, None),
    ({"target": "<= 15 ms added per batch", "unit": "s"}, None),
    ({"target": "<= 250 MiB", "unit": "s"}, None),
    ({"target": "median 0"}, None),
    ({"target": "value <= baseline_value (the median run's gap is no longer)"}, 100.0),
    ({"target": "value <= 60 s to the first commit, decision_s <= 30 s", "unit": "s"}, None),
    ({"target": "ratio >= 0.9", "baseline_value": None}, None),
    ({"target": None}, None),
])
def test_where_the_target_line_falls(fields: dict[str, Any], line: float | None) -> None:
    got = benchplot.target_at(result(**fields))
    assert got == pytest.approx(line) if line is not None else got is None


SHAPES: dict[str, dict[str, Any]] = {
    "store-met": result(spread={"value": {"min": 80, "median": 90, "max": 95, "runs": 7},
                                "baseline": {"min": 95, "median": 100, "max": 120, "runs": 7}}),
    "store-missed": result(value=50.0, ratio=0.5, target_met=False, p50_s=0.001, p99_s=0.002),
    "handover-latency": result(metric="gap; lower is better, ratio = baseline / value", unit="s", value=3.4,
                               value_max=4.0, baseline_value=12.8, ratio=3.78, target_met=False,
                               target="value <= 1 s and value_max <= 2 s"),
    "lag-error": result(metric="relative error; lower is better, ratio = value / baseline", unit="ratio", value=0.85,
                        baseline_value=1.12, ratio=0.76, target="<= 0.10", target_met=False,
                        spread={"true_lag_s": {"min": 0.1, "median": 0.2, "max": 0.3, "samples": 120}}),
    "autoscale-no-ratio": result(unit="s", value=40.0, baseline_value=0.0, ratio=None, target_met=None,
                                 target="value <= 60 s to the first commit, decision_s <= 30 s"),
    "operator-no-baseline": result(baseline_value=None, ratio=None, target="median 0"),
    "operator-no-value": result(value=None),
    "newarea-zero": result(value=0, baseline_value=0, ratio=0.0, target=None, target_met=None),
}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "bench" / "results"
    folder.mkdir(parents=True)
    for name, r in SHAPES.items():
        (folder / f"{name}.json").write_text(json.dumps(r))
    return folder


def test_every_shape_of_result_is_drawn_on_its_area(results: Path) -> None:
    plots = benchplot.plots(results)
    assert list(plots) == ["store", "operator", "handover", "autoscale", "lag", "newarea"]
    for area, svg in plots.items():
        tree = ET.fromstring(svg)
        texts = " ".join("".join(t.itertext()) for t in tree.iter(f"{SVG}text"))
        for name in (n for n in SHAPES if n.startswith(f"{area}-")):
            assert name in texts, f"{name} not labelled on {area}.svg"
        background = tree.find(f"{SVG}rect")
        assert background is not None and background.get("fill") == benchplot.BACKGROUND
    store = "".join(ET.fromstring(plots["store"]).itertext())
    assert "ratio >= 0.8: met" in store and "ratio >= 0.8: missed" in store
    assert "no value recorded" in "".join(ET.fromstring(plots["operator"]).itertext())


def test_the_plots_are_the_same_bytes_for_the_same_results(results: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    shutil.copytree(results, again)
    for path in again.iterdir():  # the same JSON, written anew
        path.write_text(json.dumps(json.loads(path.read_text()), indent=2))
    assert benchplot.plots(results) == benchplot.plots(again)


def test_the_headline_is_one_short_line_per_result(results: Path) -> None:
    lines = benchtable.headline(results).splitlines()
    assert len(lines) == 2 + len(SHAPES)
    handover = next(line for line in lines if "handover-latency" in line)
    assert handover == ("| `handover-latency` | 3.4 s (median; max 4) | 12.8 s | 3.78 (baseline / Floe, higher is"
                        " better) | value <= 1 s and value_max <= 2 s: **missed** |")
    assert "| — | — |" in next(line for line in lines if "operator-no-baseline" in line)


def checkout(tmp_path: Path) -> Path:
    """The files the generator reads and writes, copied from this checkout."""
    copy = tmp_path / "checkout"
    (copy / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", copy)
    for doc in (ROOT / "docs").glob("*.md"):
        shutil.copy(doc, copy / "docs")
    shutil.copytree(ROOT / benchtable.IMG, copy / benchtable.IMG)
    shutil.copytree(ROOT / "bench" / "results", copy / "bench" / "results")
    return copy


def test_a_new_or_removed_result_makes_the_generated_files_stale(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    copy = checkout(tmp_path)
    assert benchtable.stale(copy) == []
    (copy / "bench" / "results" / "autoscale-pod-reaction.json").write_text(json.dumps(SHAPES["autoscale-no-ratio"]))
    assert benchtable.stale(copy) == [Path("README.md"), benchtable.DOC, benchtable.IMG / "autoscale.svg"]
    for lag in (copy / "bench" / "results").glob("lag-*.json"):
        lag.unlink()
    assert benchtable.IMG / "lag.svg" in benchtable.stale(copy)
    monkeypatch.chdir(copy)
    assert benchtable.main() == 0
    assert benchtable.stale(copy) == []
    assert not (copy / benchtable.IMG / "lag.svg").exists()


def test_a_readme_without_its_markers_is_refused(tmp_path: Path) -> None:
    copy = checkout(tmp_path)
    readme = copy / "README.md"
    readme.write_text(readme.read_text().replace(benchtable.END, ""))
    with pytest.raises(ValueError, match=re.escape("README.md needs <!-- bench:start --> and then <!-- bench:end -->")):
        benchtable.generated(copy)
