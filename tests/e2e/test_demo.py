"""`make demo` end to end: chart, operator, StreamingApp, replicas in local run mode, exact counts, lag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.k8s
@pytest.mark.helm
@pytest.mark.kafka
@pytest.mark.cassandra
@pytest.mark.spark
def test_demo_counts_match_the_produced_text(stack_env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "floe_stack.demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Cassandra and the output topic match the text exactly: True" in out, out[-4000:]
    # The lag line is printed when the operator has measured the app (lag 0 once caught up).
    assert ("= 0 records" in out) or ("has not reported lag" in out), out[-4000:]
    steps = [line for line in out.splitlines() if line.startswith("[")]
    assert len(steps) >= 10 and all(line.endswith(")") for line in steps if "…" in line), steps
