"""`make demo` end to end on the node: chart, operator pod, StreamingApp pods, exact counts, lag, READY.

Run twice in a row in the same stack: what the first run leaves (its app, its Deployment, the app's
repartition topic) must not disturb the second."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..nodekit import kubectl, require_node

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.node
@pytest.mark.k8s
@pytest.mark.helm
@pytest.mark.kafka
@pytest.mark.cassandra
@pytest.mark.spark
def test_demo_counts_match_the_produced_text_run_after_run(stack_env: dict[str, str]) -> None:
    env = require_node(stack_env)
    try:
        _run_twice()
    finally:
        # The demo leaves its app running for the user; its pods would take the node's CPU from
        # the tests after this one.
        kubectl(env, "delete", "streamingapp", "--all", "-n", "floe-demo", "--wait=true", "--timeout=180s",
                timeout=200)


def _run_twice() -> None:
    for run in (1, 2):
        proc = subprocess.run([sys.executable, "-m", "floe_stack.demo"], cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
        out = f"run {run}:\n{proc.stdout}{proc.stderr}"
        assert proc.returncode == 0, out[-4000:]
        assert "Cassandra and the output topic match the text exactly: True" in out, out[-4000:]
        # The operator's lag loop measured the app, and it is caught up.
        lag_line = 'floe_consumergroup_lag{app="word-count"'
        assert lag_line in out and "summed over partitions = 0 records" in out, out[-4000:]
        assert re.search(r"^\s+word-count\s+True\s+3\s", out, re.MULTILINE), out[-4000:]
        # Every numbered step finished ("done (… s)"), those with progress notes on a line of their own.
        steps = [line for line in out.splitlines() if line.startswith("[")]
        numbers = {line[1:3] for line in steps}
        finished = {line[1:3] for line in steps if re.search(r" done \(\d+\.\d s\)$", line)}
        assert len(numbers) >= 11 and numbers == finished, steps
