"""Two `floe-operator` processes elect a leader through a Lease on the real API server.

The leader is SIGKILLed: the standby takes over within the lease duration plus a retry period
(not before), and reconciles an app created after the takeover. A SIGTERMed leader releases
the Lease, so the standby takes over at once. A leader whose Lease another holder took exits
(fencing). Throughout, a sampler reads each process's own `floe_operator_leader` gauge every
0.1 s, and the leaders' intervals from their logs must not overlap either.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from ..processes import OperatorProcess, start_operator
from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

LEASE = "floe-it-leader"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5
BECAME = re.compile(r"^(\S+ \S+) INFO floe_operator\.leader Became leader", re.M)


@dataclass
class Operator:
    identity: str
    run: OperatorProcess
    ended: float | None = None  # time.time() when it stopped leading (killed, stopped, fenced)

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.run.proc

    def text(self) -> str:
        return self.run.text()

    def became_leader(self) -> list[float]:
        return [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f").timestamp() for m in BECAME.findall(self.text())]

    def leads(self) -> bool:
        """This process's own view (its gauge); a process that is gone leads nothing."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.run.metrics_port}/metrics", timeout=1) as r:
                body = r.read().decode()
        except OSError:
            return False
        return re.search(r"^floe_operator_leader 1\.0$", body, re.M) is not None


@dataclass
class Cluster:
    operators: list[Operator] = field(default_factory=list)
    both_leading: list[float] = field(default_factory=list)
    samples: int = 0


@pytest.fixture
def cluster(kube: Kubectl, namespace: str, tmp_path: Path) -> Iterator[tuple[Cluster, Any]]:
    state = Cluster()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            leading = [o for o in list(state.operators) if o.proc.poll() is None and o.leads()]
            state.samples += 1
            if len(leading) > 1:
                state.both_leading.append(time.time())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    yield state, tmp_path
    stop.set()
    sampler.join()
    for op in state.operators:
        if op.proc.poll() is None:
            op.proc.kill()
            op.proc.wait()


def start(state: Cluster, tmp_path: Path, kubeconfig: str, namespace: str, identity: str) -> Operator:
    run = start_operator(
        kubeconfig,
        tmp_path / f"{identity}-{len(state.operators)}.log",
        FLOE_WATCH_NAMESPACES=namespace,
        FLOE_RESYNC_SECONDS="2",
        FLOE_LAG_INTERVAL_SECONDS="0",
        FLOE_CHECK_KAFKA="false",
        FLOE_LEADER_ELECTION="true",
        FLOE_LEASE_NAME=LEASE,
        FLOE_LEASE_NAMESPACE=namespace,
        FLOE_LEADER_IDENTITY=identity,
        FLOE_LEASE_DURATION_SECONDS=str(LEASE_DURATION),
        FLOE_RENEW_DEADLINE_SECONDS=str(RENEW_DEADLINE),
        FLOE_RETRY_PERIOD_SECONDS=str(RETRY_PERIOD),
    )
    op = Operator(identity=identity, run=run)
    state.operators.append(op)
    return op


def holder(api: Any, namespace: str) -> str:
    try:
        lease = api.read_namespaced_lease(LEASE, namespace)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str(lease.spec.holder_identity or "")


def deployment_of(kube: Kubectl, name: str, namespace: str) -> bool:
    return kube.get("deployment", name, namespace) is not None


def test_standby_takes_over_from_a_killed_leader_and_a_fenced_leader_exits(
    cluster: tuple[Cluster, Path], kube: Kubectl, kubeconfig: str, namespace: str, spec_args: dict[str, Any]
) -> None:
    state, tmp_path = cluster
    api = kubernetes.client.CoordinationV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))

    a = start(state, tmp_path, kubeconfig, namespace, "op-a")
    wait_for(lambda: a.became_leader(), timeout=60, what=f"op-a to lead; log:\n{a.text()[-3000:]}")
    assert holder(api, namespace) == "op-a"
    b = start(state, tmp_path, kubeconfig, namespace, "op-b")
    wait_for(lambda: "Standing by" in b.text(), timeout=60, what=f"op-b to stand by; log:\n{b.text()[-3000:]}")

    # The leader reconciles; the standby never starts Kopf (no handler, no loop).
    kube.apply(app_manifest("before", **spec_args))
    wait_for(lambda: deployment_of(kube, "before", namespace), timeout=90, what="the leader to create a Deployment")
    assert "Started floe-operator" in a.text()
    time.sleep(3 * RETRY_PERIOD)
    assert "Started floe-operator" not in b.text() and not b.became_leader(), b.text()[-3000:]

    # SIGKILL: nothing released; the standby waits out the lease duration, then takes it.
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    a.ended = killed = time.time()
    wait_for(lambda: b.became_leader(), timeout=30, what=f"op-b to take over; log:\n{b.text()[-3000:]}")
    took = b.became_leader()[0] - killed
    assert LEASE_DURATION - RETRY_PERIOD - 0.5 <= took <= LEASE_DURATION + RETRY_PERIOD + 2.0, took
    assert holder(api, namespace) == "op-b"
    lease = api.read_namespaced_lease(LEASE, namespace)
    assert lease.spec.lease_transitions == 1

    # The new leader reconciles an app created after the takeover.
    kube.apply(app_manifest("after", **spec_args))
    wait_for(lambda: deployment_of(kube, "after", namespace), timeout=90, what="the new leader to reconcile")

    # SIGTERM: the leader releases the Lease and a standby takes it at its next try.
    c = start(state, tmp_path, kubeconfig, namespace, "op-c")
    wait_for(lambda: "Standing by" in c.text(), timeout=60, what=f"op-c to stand by; log:\n{c.text()[-3000:]}")
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=60) == 0, b.text()[-3000:]
    stopped = time.time()
    assert "Released the Lease" in b.text()
    wait_for(lambda: c.became_leader(), timeout=30, what=f"op-c to take over; log:\n{c.text()[-3000:]}")
    # Well before the lease duration: the release, not an expiry, handed it over (Kopf's own
    # shutdown happens before the release, so count from the release's log line).
    released = datetime.strptime(
        re.findall(r"^(\S+ \S+) INFO floe_operator\.leader Released the Lease", b.text(), re.M)[0],
        "%Y-%m-%d %H:%M:%S,%f",
    ).timestamp()
    assert c.became_leader()[0] - released < LEASE_DURATION - RETRY_PERIOD, (released, c.became_leader(), stopped)
    b.ended = released

    # Fencing: someone else holds the Lease now; the leader exits at its next renewal.
    def steal() -> bool:
        lease = api.read_namespaced_lease(LEASE, namespace)
        lease.spec.holder_identity = "thief"
        lease.spec.renew_time = datetime.now().astimezone()
        try:
            api.replace_namespaced_lease(LEASE, namespace, lease)
        except kubernetes.client.ApiException as exc:
            if exc.status == 409:  # the leader renewed in between
                return False
            raise
        return True

    wait_for(steal, timeout=10, what="a write of the Lease that wins over the leader's renewals", every=0.05)
    stolen = time.time()
    assert c.proc.wait(timeout=RETRY_PERIOD + 10) == 3, c.text()[-3000:]
    c.ended = time.time()
    assert c.ended - stolen <= RETRY_PERIOD + 3.0
    assert "Lost the leader Lease (the Lease is held by thief)" in c.text()

    # No two leaders at any sampled instant, nor in the intervals the logs give.
    assert state.samples > 50
    assert not state.both_leading, state.both_leading
    intervals = sorted((op.became_leader()[0], op.ended or time.time()) for op in (a, b, c))
    for (_, end), (begin, _) in itertools.pairwise(intervals):
        assert end <= begin, intervals
