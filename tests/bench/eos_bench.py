"""What exactly-once output to Kafka costs a batch, on the local stack's broker (Kafka only).

    .venv/bin/python tests/bench/eos_bench.py [--runs 5] [--sizes 1000,10000,50000]

The figures behind docs/runtime.md, "Exactly-once output: design". For batches of word-count
output records (key: a word, value: its count as a UTF-8 decimal) over 6 partitions, produced as
`floe_jobs.kafkaio.KafkaSink` produces them (same producer settings, one `produce` call a record,
murmur2 partitioner), with the variants alternated within each run:

- idempotent: produce + flush, what KafkaSink does now (at-least-once);
- txn: begin, produce, commit with one long-lived transactional producer;
- txn+marker: the design's batch: begin, produce, flush (the records are acknowledged and
  invisible: this is where the Cassandra commit goes), the progress marker
  (`send_offsets_to_transaction` of the batch's input ranges to the stage's marker group), then
  commit. Its parts are timed too, and after the commit returns, how long until a
  read_committed reader's end (the last stable offset) covers the batch on every partition.

Each timed batch follows `--gap` seconds of idle (0.2 by default), standing for the read and
state work that separates two writes of a stage: back to back (`--gap 0`, rows named
`batch-<n>-back-to-back`), a transaction's AddPartitionsToTxn can meet the last one still
completing (CONCURRENT_TRANSACTIONS, which librdkafka retries after 20 ms).

and, per run, the takeover's costs:
- init: `init_transactions` of a transactional.id never used (a new producer's first call);
- fence: `init_transactions` of an id whose previous producer left a transaction open with
  records in it (an owner that died or paused mid-batch): the broker aborts that transaction
  before the call returns; then how long until the last stable offset passes its records;
- fence_idle: `init_transactions` of an id whose previous producer committed its last
  transaction (an owner killed after its claim or in its state: nothing open);
- settled: a takeover's first step, the markers of 6 partitions (one OffsetFetch).

Writes bench/results/eos-<name>.json (min/median/max of the runs, load average). The Cassandra
side of the design adds no round trip (docs/runtime.md says why); its existing cost is
`store-fence-6`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import runtime_bench  # run as a script: its own folder is on the path
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from runtime_bench import percentile

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 6
DISTINCT_WORDS = 20_000


def stack_bootstrap() -> str:
    from floe_stack import envfile

    path = ROOT / ".floe" / "stack.env"
    if not path.exists():
        sys.exit("the local stack is not up (no .floe/stack.env): run `make up`")
    return envfile.read(path)["FLOE_KAFKA_BOOTSTRAP"]


def sink_settings(bootstrap: str, client_id: str) -> dict[str, Any]:
    """KafkaSink's producer settings (floe_jobs.kafkaio.KafkaSink.__init__), idempotent."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 2_000_000,
        "delivery.report.only.error": True,
        "enable.idempotence": True,
    }


def create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(n, num_partitions=PARTITIONS, replication_factor=1) for n in names]
    for fut in admin.create_topics(new).values():
        fut.result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(n in md.topics and len(md.topics[n].partitions) == PARTITIONS for n in names):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topics {names} did not appear")


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(names).values():
        with contextlib.suppress(KafkaException):
            fut.result()


def records(n: int, salt: int) -> tuple[list[str], list[str]]:
    """Word-count output rows: a word and its count, as KafkaSink gets them (str columns)."""
    keys = [f"w{(i * 7919 + salt) % DISTINCT_WORDS:05d}" for i in range(n)]
    values = [str(1 + (i + salt) % 997) for i in range(n)]
    return keys, values


def produce_all(producer: Producer, topic: str, keys: list[str], values: list[str]) -> None:
    """KafkaSink._produce_columns' loop: one call a record, waiting for room when the queue is full."""
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    produce = producer.produce
    for key, value in zip(keys, values, strict=True):
        try:
            produce(topic, value, key, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            produce(topic, value, key, on_delivery=delivered)
    if errors:
        raise RuntimeError(f"{len(errors)} records failed: {errors[0]}")


class Ends:
    """A partition's end as a read_committed reader sees it (the last stable offset) and as a
    read_uncommitted one does (the high watermark), all partitions in one request each."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def get(self, level: IsolationLevel) -> dict[int, int]:
        futs = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in self.tps}, isolation_level=level)
        return {tp.partition: fut.result().offset for tp, fut in futs.items()}

    def wait_stable(self, written: dict[int, int], timeout: float = 60.0) -> float:
        """Seconds until the last stable offset reaches `written` (offsets after the batch's last
        record) on every partition."""
        start = time.perf_counter()
        while time.perf_counter() - start < timeout:
            lso = self.get(IsolationLevel.READ_COMMITTED)
            if all(lso[p] >= written[p] for p in written):
                return time.perf_counter() - start
            time.sleep(0.001)
        raise TimeoutError("the last stable offset did not pass the batch")


def spread(values: list[float]) -> dict[str, float]:
    """A row's spread to the microsecond (a batch's write costs milliseconds)."""
    return runtime_bench.spread(values, digits=6)


def write_result(name: str, result: dict[str, Any]) -> Path:
    return runtime_bench.write_result("eos", name, result)


class Bench:
    def __init__(self, bootstrap: str, runs: int) -> None:
        self.bootstrap = bootstrap
        self.runs = runs
        tag = uuid.uuid4().hex[:8]
        self.tag = tag
        self.out = f"eos-bench-{tag}-output"
        self.src = f"eos-bench-{tag}-input"
        self.fence_topic = f"eos-bench-{tag}-fence"
        create_topics(bootstrap, [self.out, self.src, self.fence_topic])
        self.idem = Producer(sink_settings(bootstrap, "eos-bench-idempotent"))
        self.txn = Producer({**sink_settings(bootstrap, "eos-bench-txn"), "transactional.id": f"eos-bench-{tag}-txn"})
        self.txn.init_transactions(30)
        # the stage's marker group: a consumer that never subscribes gives its group metadata
        # (no member, generation -1), as the runtime's marker would be sent
        self.marker_group = f"eos-bench-{tag}-marker"
        self.marker_consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": self.marker_group, "enable.auto.commit": False}
        )
        self.ends = Ends(bootstrap, self.out)
        # a takeover's marker read: committed offsets without waiting for stable ones
        self.marker_reader = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": self.marker_group, "isolation.level": "read_uncommitted"}
        )
        self.seq = 0

    def close(self) -> None:
        self.idem.flush(10)
        self.marker_consumer.close()
        self.marker_reader.close()
        delete_topics(self.bootstrap, [self.out, self.src, self.fence_topic])

    # -- per-batch variants -----------------------------------------------------------------

    def run_idempotent(self, keys: list[str], values: list[str]) -> dict[str, float]:
        t0 = time.perf_counter()
        produce_all(self.idem, self.out, keys, values)
        left = self.idem.flush(60)
        t1 = time.perf_counter()
        assert left == 0
        return {"total": t1 - t0}

    def run_txn(self, keys: list[str], values: list[str]) -> dict[str, float]:
        t0 = time.perf_counter()
        self.txn.begin_transaction()
        produce_all(self.txn, self.out, keys, values)
        self.txn.commit_transaction(60)
        t1 = time.perf_counter()
        return {"total": t1 - t0}

    def run_txn_marker(self, keys: list[str], values: list[str]) -> dict[str, float]:
        self.seq += 1
        offsets = [TopicPartition(self.src, p, self.seq * 1000, metadata=f"seq={self.seq}") for p in range(PARTITIONS)]
        t0 = time.perf_counter()
        self.txn.begin_transaction()
        produce_all(self.txn, self.out, keys, values)
        t_produced = time.perf_counter()
        left = self.txn.flush(60)
        assert left == 0
        t_flushed = time.perf_counter()
        self.txn.send_offsets_to_transaction(offsets, self.marker_consumer.consumer_group_metadata(), 30)
        t_marked = time.perf_counter()
        self.txn.commit_transaction(60)
        t1 = time.perf_counter()
        # outside the batch's time: how long until read_committed readers see it all
        written = self.ends.get(IsolationLevel.READ_UNCOMMITTED)
        t_query = time.perf_counter()
        # the high watermark was read after the commit: it may include the commit markers, so
        # the batch is visible once the stable end reaches the last data record + 1, i.e. the
        # high watermark less the marker when it is there; waiting for (high - 1) is the
        # conservative lower bound, and the stable end equals the high watermark once markers land
        visible = self.ends.wait_stable({p: w - 1 for p, w in written.items()}) + (t_query - t1)
        return {
            "total": t1 - t0,
            "produce": t_produced - t0,
            "flush": t_flushed - t_produced,
            "marker": t_marked - t_flushed,
            "commit": t1 - t_marked,
            "visible_after_commit": visible,
        }

    # -- takeover ---------------------------------------------------------------------------

    def run_init(self) -> float:
        p = Producer(
            {
                **sink_settings(self.bootstrap, "eos-bench-init"),
                "transactional.id": f"eos-bench-{self.tag}-init-{uuid.uuid4().hex[:8]}",
            }
        )
        t0 = time.perf_counter()
        p.init_transactions(30)
        t1 = time.perf_counter()
        del p
        return t1 - t0

    def run_settled_check(self) -> float:
        """A takeover's first step: the markers of 6 partitions, one OffsetFetch."""
        tps = [TopicPartition(self.src, p) for p in range(PARTITIONS)]
        t0 = time.perf_counter()
        got = self.marker_reader.committed(tps, timeout=10)
        t1 = time.perf_counter()
        assert all(tp.offset >= 0 for tp in got), got
        return t1 - t0

    def run_fence_idle(self, keys: list[str], values: list[str]) -> float:
        """init_transactions of an id whose previous producer committed its last transaction
        (a plan in flight with nothing written yet: killed after its claim or in its state)."""
        tid = f"eos-bench-{self.tag}-idle-{uuid.uuid4().hex[:8]}"
        old = Producer({**sink_settings(self.bootstrap, "eos-bench-old"), "transactional.id": tid})
        old.init_transactions(30)
        old.begin_transaction()
        produce_all(old, self.fence_topic, keys, values)
        old.commit_transaction(30)
        time.sleep(0.2)  # its markers written, as when a takeover comes seconds later
        new = Producer({**sink_settings(self.bootstrap, "eos-bench-new"), "transactional.id": tid})
        t0 = time.perf_counter()
        new.init_transactions(60)
        t1 = time.perf_counter()
        del old, new
        return t1 - t0

    def run_fence(self, keys: list[str], values: list[str]) -> dict[str, float]:
        """A producer leaves a transaction open with records in it; a new producer of the same
        transactional.id calls init_transactions (the takeover)."""
        tid = f"eos-bench-{self.tag}-fence-{uuid.uuid4().hex[:8]}"
        before = Ends(self.bootstrap, self.fence_topic)
        old = Producer(
            {
                **sink_settings(self.bootstrap, "eos-bench-old"),
                "transactional.id": tid,
                "transaction.timeout.ms": 60_000,
            }
        )
        old.init_transactions(30)
        old.begin_transaction()
        produce_all(old, self.fence_topic, keys, values)
        assert old.flush(60) == 0
        written = before.get(IsolationLevel.READ_UNCOMMITTED)
        new = Producer({**sink_settings(self.bootstrap, "eos-bench-new"), "transactional.id": tid})
        t0 = time.perf_counter()
        new.init_transactions(60)
        t1 = time.perf_counter()
        stable = before.wait_stable(written)
        try:  # the old producer is fenced now: its commit must fail
            old.commit_transaction(10)
            fenced = False
        except KafkaException as exc:
            fenced = exc.args[0].fatal() or "fenced" in str(exc).lower()
        del old, new
        return {"init": t1 - t0, "stable_after_init": stable, "old_fenced": float(fenced)}


def alternate(variants: list[tuple[str, Callable[[], Any]]], runs: int, gap: float = 0.0) -> dict[str, list[Any]]:
    """Each variant once per run, the order rotated run to run, `gap` seconds of idle before
    each (not timed)."""
    out: dict[str, list[Any]] = {name: [] for name, _ in variants}
    for r in range(runs):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for name, fn in order:
            time.sleep(gap)
            out[name].append(fn())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument(
        "--gap",
        type=float,
        default=0.2,
        help="idle seconds before each timed batch, standing for the read and state work between two writes "
        "of a stage (0: back to back, the next transaction starts as the last one's markers are written)",
    )
    parser.add_argument("--dry", action="store_true", help="measure, print, write no result files")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    command = "python tests/bench/eos_bench.py " + " ".join(sys.argv[1:])
    bench = Bench(stack_bootstrap(), args.runs)
    results: list[tuple[str, dict[str, Any]]] = []
    try:
        # warm every client (connections, producer ids, the coordinator's transaction log)
        warm_k, warm_v = records(1000, 0)
        bench.run_idempotent(warm_k, warm_v)
        bench.run_txn(warm_k, warm_v)
        bench.run_txn_marker(warm_k, warm_v)
        bench.run_init()
        for n in sizes:
            keys, values = records(n, n)
            got = alternate(
                [
                    ("idempotent", lambda k=keys, v=values: bench.run_idempotent(k, v)),
                    ("txn", lambda k=keys, v=values: bench.run_txn(k, v)),
                    ("txn_marker", lambda k=keys, v=values: bench.run_txn_marker(k, v)),
                ],
                args.runs,
                args.gap,
            )
            idem = [g["total"] for g in got["idempotent"]]
            txn = [g["total"] for g in got["txn"]]
            marked = [g["total"] for g in got["txn_marker"]]
            value, baseline = statistics.median(marked), statistics.median(idem)
            paired = statistics.median(m / i for m, i in zip(marked, idem, strict=True))
            parts = {k: spread([g[k] for g in got["txn_marker"]]) for k in got["txn_marker"][0]}
            label = f"{n // 1000}k" + ("" if args.gap else "-back-to-back")
            results.append(
                (
                    f"batch-{label}",
                    {
                        "metric": (
                            f"seconds to write one batch of {n:,} word-count output records over "
                            f"{PARTITIONS} partitions exactly-once (begin, produce, flush, progress marker, commit) "
                            "vs at-least-once "
                            "(idempotent produce + flush, what KafkaSink does now); ratio exactly-once/at-least-once, "
                            "lower is better"
                        ),
                        "unit": "s",
                        "value": round(value, 6),
                        "baseline": "idempotent produce + flush (KafkaSink's settings), same records, same broker",
                        "baseline_value": round(baseline, 6),
                        "ratio": round(value / baseline, 4),
                        "target": "ratio <= 1.11 (the write step at >= 0.9x the at-least-once rate)",
                        "target_ratio": 1.11,
                        "target_met": value / baseline <= 1.11,
                        "paired_ratio_median": round(paired, 4),
                        "p50_s": round(percentile(marked, 0.5), 6),
                        "p99_s": round(percentile(marked, 0.99), 6),
                        "added_ms_per_batch": round((value - baseline) * 1000, 2),
                        "records": n,
                        "gap_s": args.gap,
                        "partitions": PARTITIONS,
                        "txn_without_marker": spread(txn),
                        "txn_without_marker_ratio": round(statistics.median(txn) / baseline, 4),
                        "parts_s": parts,
                        "spread": {"value": spread(marked), "baseline": spread(idem)},
                    },
                )
            )
        keys, values = records(1000, 1)
        takeover = alternate(
            [
                ("init", bench.run_init),
                ("fence", lambda: bench.run_fence(keys, values)),
                ("fence_idle", lambda: bench.run_fence_idle(keys, values)),
                ("settled", bench.run_settled_check),
            ],
            args.runs,
        )
        inits = takeover["init"]
        fence_init = [g["init"] for g in takeover["fence"]]
        stable = [g["stable_after_init"] for g in takeover["fence"]]
        budget = 0.5
        results.append(
            (
                "takeover",
                {
                    "metric": (
                        "seconds the fence of a takeover after a crash or a pause takes (not on a graceful handover's "
                        "path): init_transactions of the "
                        "previous owner's transactional.id while that owner left a transaction of 1,000 records open "
                        "(the broker aborts it first) vs the handover budget of the target (exactly-once within "
                        "0.5 s of at-least-once); lower is better"
                    ),
                    "unit": "s",
                    "value": round(statistics.median(fence_init), 6),
                    "baseline": "the handover target's budget: 0.5 s over at-least-once",
                    "baseline_value": budget,
                    "ratio": round(statistics.median(fence_init) / budget, 4),
                    "target": "value <= 0.5 s",
                    "target_ratio": 1.0,
                    "target_met": statistics.median(fence_init) <= budget,
                    "p50_s": round(percentile(fence_init, 0.5), 6),
                    "p99_s": round(percentile(fence_init, 0.99), 6),
                    "init_new_id": spread(inits),
                    "fence_no_open_transaction": spread(takeover["fence_idle"]),
                    "settled_check_offsetfetch": spread(takeover["settled"]),
                    "stable_after_fence": spread(stable),
                    "old_producer_fenced": all(g["old_fenced"] for g in takeover["fence"]),
                    "spread": {"value": spread(fence_init)},
                },
            )
        )
    finally:
        bench.close()
    load = round(os.getloadavg()[0], 2)
    for name, result in results:
        result.update({"command": command, "load_average_1m": load, "cpu_count": os.cpu_count()})
        if args.dry:
            print(name, json.dumps(result, indent=2))
        else:
            write_result(name, result)


if __name__ == "__main__":
    main()
