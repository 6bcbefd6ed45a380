"""An app's lag counts its repartition topics: which topics they are, the sums, status.lag, and
the native autoscaler's samples and decision."""

from __future__ import annotations

from floe_operator import appids
from floe_operator.lag import decide, scale, status
from floe_operator.lag import scrape as lag_scrape

APP_ID = "shop-counts-0123456789"
INPUT = "lines"
REPARTITION = f"{APP_ID}-words-repartition"


def test_repartition_topics_are_the_apps_rows_of_that_form_not_its_inputs() -> None:
    recorded = [
        INPUT,
        REPARTITION,
        f"{APP_ID}-totals-repartition",
        f"{APP_ID}-repartition",  # no name between id and suffix: not one the runtime makes
        f"{APP_ID}-dlq",
        "old-input",  # an input taken out of spec.kafka.topics keeps its rows
        "other-app-0123456789-words-repartition",
        REPARTITION,
    ]
    assert appids.repartition_topics(APP_ID, recorded, [INPUT]) == (f"{APP_ID}-totals-repartition", REPARTITION)
    # another app's repartition topic read as input is input, counted once
    assert appids.repartition_topics(APP_ID, recorded, [INPUT, REPARTITION]) == (f"{APP_ID}-totals-repartition",)


def test_committed_rows_of_an_app_keep_its_repartition_rows_furthest_behind() -> None:
    rows = [
        ("split/lines", 0, 900, None),
        (f"count/{REPARTITION}", 0, 5, None),
        (f"count/{REPARTITION}", 1, 7, None),
        (f"audit/{REPARTITION}", 1, 3, None),  # two stages read it: the one behind counts
        ("split/old-input", 0, 50, None),
        (f"count/{APP_ID}-dlq", 0, 1, None),
    ]
    got = lag_scrape.committed_rows(rows, {INPUT}, app_id=APP_ID)
    assert {tp: r.next_offset for tp, r in got.items()} == {
        (INPUT, 0): 900,
        (REPARTITION, 0): 5,
        (REPARTITION, 1): 3,
    }
    # without the app id, as before: the input only
    assert set(lag_scrape.committed_rows(rows, {INPUT})) == {(INPUT, 0)}


def part(topic: str, partition: int, end: int, committed: int) -> lag_scrape.PartitionLag:
    return lag_scrape.PartitionLag(
        topic, partition, end, committed, "cassandra", end - committed, 0.0, True, "OK", repartition=topic != INPUT
    )


def app_lag(at: float, *parts: lag_scrape.PartitionLag) -> lag_scrape.AppLag:
    return lag_scrape.AppLag(
        "ns",
        "counts",
        at,
        parts,
        end_total=sum(p.end for p in parts),
        committed_total=sum(p.committed or 0 for p in parts),
    )


def test_the_apps_lag_is_input_plus_repartition_lag_and_status_names_the_share() -> None:
    result = app_lag(
        1000.0,
        part(INPUT, 0, 100, 62),
        part(INPUT, 1, 100, 100),
        part(REPARTITION, 0, 3000, 1000),
        part(REPARTITION, 1, 3000, 2500),
    )
    assert (result.total, result.repartition_total, result.input_partitions) == (38 + 2500, 2500, 2)
    lag = status.lag_status(result, 1000.0, written={})
    assert (lag["records"], lag["repartitionRecords"]) == (2538, 2500)
    assert lag["topics"] == {INPUT: {"records": 38, "seconds": 0}, REPARTITION: {"records": 2500, "seconds": 0}}
    # an app without repartition topics has no share in its status
    assert "repartitionRecords" not in status.lag_status(app_lag(1000.0, part(INPUT, 0, 100, 62)), 1000.0, written={})


def test_a_share_no_longer_measured_is_cleared_from_status() -> None:
    from floe_operator import model

    body = {
        "apiVersion": model.API_VERSION,
        "kind": model.KIND,
        "metadata": {"name": "counts", "namespace": "ns", "uid": "u"},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "kafka": {"bootstrapServers": "k:9092", "topics": [INPUT]},
            "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}},
        },
        "status": {"lag": {"records": 5, "repartitionRecords": 5, "topics": {INPUT: {}, REPARTITION: {}}}},
    }
    app = model.StreamingApp.from_body(body)
    result = app_lag(1000.0, part(INPUT, 0, 100, 100))
    lag = status.lag_status(result, 1000.0, written={})
    status.clear_gone(lag, app, result)
    assert lag["repartitionRecords"] is None and lag["topics"][REPARTITION] is None


# --- the native autoscaler ------------------------------------------------------------------

POLICY = decide.Policy(min_replicas=1, max_replicas=4, stabilization_seconds=60.0, tick_seconds=10.0)


def after_a_burst(*, with_repartition: bool) -> list[decide.Sample]:
    """Samples of 13 ticks after a burst: the input caught up and quiet, the stage after the
    re-key working off 3,000 records per partition at 5 records/s a partition."""
    samples = []
    for i in range(13):
        at = 1000.0 + 10 * i
        parts = [part(INPUT, p, 100, 100) for p in range(2)]
        if with_repartition:
            parts += [part(REPARTITION, p, 3000, 50 * i) for p in range(2)]
        samples.append(scale.sample_of(app_lag(at, *parts), at=at, replicas=2))
    return samples


def test_a_repartition_backlog_holds_the_replicas_the_input_alone_would_scale_down() -> None:
    ctx = decide.Context(now=1120.0, replicas=2, partitions=2, capacity=100.0)

    counted = after_a_burst(with_repartition=True)
    assert (counted[-1].lag, counted[-1].repartition_lag) == (2 * (3000 - 600), 2 * (3000 - 600))
    decision = decide.decide(counted, POLICY, ctx)
    assert decision.action == "Hold" and decision.reason in (decide.AT_LIMIT, decide.WORKING_OFF_BACKLOG), decision
    assert decision.inputs["repartitionLag"] == 4800

    # the same app measured on its input alone, as before: caught up, so it scaled down
    input_only = decide.decide(after_a_burst(with_repartition=False), POLICY, ctx)
    assert (input_only.action, input_only.reason, input_only.replicas) == ("ScaleDown", decide.LOW_LOAD, 1)


def test_a_nearly_drained_repartition_backlog_no_longer_holds() -> None:
    """The backlog counts as an input one does: once the replicas would drain it within
    saturation_seconds, the app steps down."""
    samples = []
    for i in range(13):
        at = 1000.0 + 10 * i
        parts = [part(INPUT, p, 100, 100) for p in range(2)] + [part(REPARTITION, p, 3000, 2990) for p in range(2)]
        samples.append(scale.sample_of(app_lag(at, *parts), at=at, replicas=2))
    decision = decide.decide(samples, POLICY, decide.Context(now=1120.0, replicas=2, partitions=2, capacity=100.0))
    assert (decision.action, decision.reason) == ("ScaleDown", decide.LOW_LOAD)


def test_samples_are_dropped_when_the_partitions_summed_change() -> None:
    mem = scale.ScaleMemory()
    before = app_lag(1000.0, part(INPUT, 0, 100, 100))
    scale.keep_comparable(mem, before)
    mem.samples.append(scale.sample_of(before, at=1000.0, replicas=1))
    scale.keep_comparable(mem, before)
    assert len(mem.samples) == 1
    # a repartition topic first counted: its offsets would read as a burst of input and consumption
    scale.keep_comparable(mem, app_lag(1010.0, part(INPUT, 0, 100, 100), part(REPARTITION, 0, 5000, 4000)))
    assert not mem.samples
