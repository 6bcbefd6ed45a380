"""A stage that opens a store of a type its helper cannot use stops the replica at its start.

Fenced state lives in partitioned stores only: an `aggregate` into a global store, or a `latest`
into a versioned one, used to pass the warm-up (whose dry run touches no store) and fail at the
first real batch, over and over. Now the warm-up refuses them, and provisioning refuses a store
whose existing table has another type's layout: exit code 2, with a message naming the stage or
table, the store, its type and what to change, before the replica joins its group or commits a
batch. Real Kafka, Cassandra and Spark from the local stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from floe_jobs.exitcodes import EXIT_CONFIG
from floe_stack import localrun

from .conftest import NewApp

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

JOBS = Path(__file__).parent / "jobs" / "wrong_store_types.py"


def refused_at_start(replica: localrun.Replica, *, timeout: float = 240) -> tuple[int | None, str]:
    """The replica's exit code (None: still running after `timeout`) and its log."""
    replica.start()
    try:
        code: int | None = replica.wait(timeout)
    except Exception:
        code = None
    finally:
        replica.stop()
    return code, replica.log_path.read_text(errors="replace")


@pytest.mark.parametrize(
    ("job", "store", "declared", "wanted"),
    [
        (
            "aggregates_into_global",
            "totals",
            "global",
            "stage 'totals': aggregate(store='totals') keeps exactly-once state, fenced per input partition, which "
            "only a partitioned store holds, and store 'totals' is declared global: declare a partitioned store",
        ),
        (
            "latest_into_versioned",
            "history",
            "versioned-partitioned",
            "stage 'latest': latest(store='history') keeps exactly-once state, fenced per input partition, which "
            "only a partitioned store holds, and store 'history' is declared versioned-partitioned: declare a "
            "partitioned store",
        ),
    ],
)
def test_a_helper_over_a_store_of_the_wrong_type_stops_the_replica_at_warm_up(
    job: str, store: str, declared: str, wanted: str, new_app: NewApp
) -> None:
    app = new_app(
        "stype",
        entrypoint=f"{JOBS}:{job}",
        stores=[{"name": store, "type": declared}],
        input_name="lines",
        batch=500,
    )
    localrun.produce(app.bootstrap, app.topics[0], [f"w{i % 7}" for i in range(200)])
    code, log = refused_at_start(localrun.Replica(app, "r0"))
    assert code == EXIT_CONFIG, f"exit code {code}; log tail: {log[-2000:]}"
    assert f"floe-job: {wanted}" in log
    assert "Committed stage=" not in log
    assert "Assigned partitions" not in log  # refused before joining the group


def test_a_store_over_a_table_of_another_type_stops_the_replica_before_its_tables_change(
    new_app: NewApp, session: Any
) -> None:
    """Store `history` declared partitioned where its table was made versioned (by an earlier
    declaration, or the Java library): the table is left as it is, and the replica stops."""
    from floe_jobs.stores import schema

    app = new_app(
        "stable",
        entrypoint=f"{JOBS}:latest_into_versioned",
        stores=[{"name": "history", "type": "partitioned"}],
        input_name="lines",
        batch=500,
    )
    schema.provision(
        session,  # type: ignore[arg-type]
        keyspace=app.keyspace,
        replication=None,
        stores=[schema.StoreSpec(name="history", type="versioned-partitioned")],
    )
    localrun.produce(app.bootstrap, app.topics[0], [f"w{i % 7}" for i in range(200)])
    code, log = refused_at_start(localrun.Replica(app, "r0"))
    assert code == EXIT_CONFIG, f"exit code {code}; log tail: {log[-2000:]}"
    table = f"{app.keyspace}.history_kstreams_store"
    assert (
        f"store 'history' is declared partitioned, but its table {table} has the layout of a versioned-partitioned "
        "store" in log
    )
    assert "declare the store versioned-partitioned, or give it a new name" in log
    assert "Committed stage=" not in log
    assert schema.FENCE_COLUMN not in (schema.table_columns(session, app.keyspace, "history_kstreams_store") or set())  # type: ignore[arg-type]
