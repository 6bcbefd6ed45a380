"""The PartitionsStopped condition from the operator's lag loop (Kopf's runner, the real API server,
Kafka and Cassandra): a partition stopped by a poison record, recorded in the offsets row the
way a replica records it (`OffsetsTable.commit` with a stop), is named on the app; the condition
turns False once a later commit moves the partition past the record."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kopf.testing
import pytest
import yaml
from floe_jobs import offsets, planning
from floe_operator import handlers, model
from floe_operator.lag import loop as lag_loop
from prometheus_client import REGISTRY

from ..waiting import wait_for
from .test_lag_operator import run

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]


@pytest.fixture(scope="module")
def namespace(kubectl: str, kubeconfig: str) -> Iterator[str]:
    from .test_lag_operator import ROOT

    run(kubectl, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds/streamingapp.yaml"))
    run(kubectl, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
        "crd/streamingapps.streaming.floe.dev")
    name = f"floe-lag-stop-{uuid.uuid4().hex[:6]}"
    run(kubectl, kubeconfig, "create", "namespace", name)
    yield name
    run(kubectl, kubeconfig, "delete", "namespace", name, "--wait=false")


STAGE = "count"  # the stage whose rows these are (rows are kept per stage)


def _commit(table: offsets.OffsetsTable, topic: str, start: int, end: int, *, stop: str | None = None) -> None:
    """One batch of partition 0 planned, claimed and committed as a replica does; `stop`: the
    commit records a poison record's stop at `end`."""
    rows = table.read([topic], stage=STAGE)
    row = rows[(topic, 0)]
    stamp = planning.stamp_for(row, now_us=time.time_ns() // 1000)
    plan = planning.PartitionPlan(topic, 0, row.committed_seq + 1, start, end, replay=False, stamp=stamp)
    assert table.claim([plan], rows, stage=STAGE)
    assert table.commit([plan], stops={(topic, 0): stop} if stop else None, stage=STAGE)


def test_a_stopped_partition_is_named_on_the_app_until_it_moves_on(
    namespace: str,
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    cql: Any,
    app_manifest: Callable[..., dict[str, Any]],
) -> None:
    topic = make_topic(2)
    keyspace = f"it_lag_stop_{uuid.uuid4().hex[:6]}"
    body = app_manifest("poisoned", namespace, topics=[topic], keyspace=keyspace, replicas=0)
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=5.0, started=started))
    lag_loop.register(registry, lag_loop.Options(interval_seconds=1.0, status_seconds=1.0))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", namespace], registry=registry, timeout=60)

    def get() -> dict[str, Any]:
        return json.loads(run(kubectl, kubeconfig, "get", "streamingapp", "poisoned", "-n", namespace, "-o", "json"))

    def stopped_condition(status: str) -> dict[str, Any] | None:
        for cond in (get().get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PartitionsStopped" and cond.get("status") == status:
                return dict(cond)
        return None

    def stopped_series() -> float | None:
        labels = {"namespace": namespace, "app": "poisoned"}
        return REGISTRY.get_sample_value("floe_app_partitions_stopped", labels)

    try:
        with runner:
            assert started.wait(timeout=30)
            run(kubectl, kubeconfig, "apply", "--server-side", "--field-manager=floe-tests", "-f", "-",
                stdin=yaml.safe_dump(body))
            wait_for(lambda: (get().get("status") or {}).get("keyspace"), timeout=60, what="state provisioned")
            app = model.StreamingApp.from_body(get())
            table = offsets.OffsetsTable(cql, keyspace=keyspace, app_id=app.app_id, owner="r0/test")
            table.create(
                [planning.OffsetRow(topic, 0, next_offset=0), planning.OffsetRow(topic, 1, next_offset=0)], stage=STAGE
            )
            # nothing stopped yet: no such condition on the app
            _commit(table, topic, 0, 10)
            time.sleep(3)
            assert stopped_condition("True") is None and stopped_condition("False") is None

            _commit(table, topic, 10, 40, stop="ValueError: cannot split line POISON")
            cond = wait_for(lambda: stopped_condition("True"), timeout=30, what="PartitionsStopped True")
            assert cond["reason"] == "PoisonRecord"
            # and counted in the operator's series, for an alert
            wait_for(lambda: stopped_series() == 1, timeout=10, what="floe_app_partitions_stopped 1")
            assert f"topic {topic} partition 0 stopped at offset 40: ValueError: cannot split line POISON" in (
                cond["message"]
            )
            # the reconcile's own conditions are still there beside it
            types = {c["type"] for c in get()["status"]["conditions"]}
            assert {"Ready", "Degraded", "PartitionsStopped"} <= types

            # a replica of a fixed job commits past the record: the mark and the condition clear
            _commit(table, topic, 40, 45)
            cond = wait_for(lambda: stopped_condition("False"), timeout=30, what="PartitionsStopped False")
            assert cond["reason"] == "NoneStopped"
            wait_for(lambda: stopped_series() == 0, timeout=10, what="floe_app_partitions_stopped 0")
            run(kubectl, kubeconfig, "delete", "streamingapp", "poisoned", "-n", namespace, "--wait=true",
                "--timeout=100s")
    finally:
        cql.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    assert runner.exception is None, runner.exception
