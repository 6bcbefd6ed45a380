"""The throughput benchmark's workloads: what each side runs, the input it reads and how its
answer is checked.

Each workload is one of Floe's built-in state helpers against the Structured Streaming query that
does the same with Spark's own state (RocksDB, changelog checkpointing, in runtime_bench.py):
- word count: `rekey(combine="count")` + `aggregate` vs `groupBy(word).count()`, update mode;
- dedup: `dedup` over a store with a one-hour TTL vs `dropDuplicatesWithinWatermark` with a
  one-hour watermark on the record timestamp, append mode;
- latest: `latest` (last value by offset) vs `groupBy(key).agg(max_by(value, offset))`, update
  mode (a declarative aggregate: Spark keeps it in its state store without Python per row).
The answers are checked after each run's clock stops, on both sides, so that a faster wrong
answer fails the run instead of scoring.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# A record: a line of text (produced round-robin, no key) or a (key, value) pair (produced keyed).
Record = str | tuple[str, str]

SS_WORD_COUNT = r"""
words = src.select(F.explode(F.split(F.lower(F.col("value").cast("string")), r"[^\p{L}\p{N}']+")).alias("word"))
counts = words.where("word != ''").groupBy("word").count()
result = counts.select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))
mode = "update"
"""

SS_DEDUP = r"""
result = (src.withWatermark("timestamp", "1 hour").dropDuplicatesWithinWatermark(["key"])
          .select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value")))
mode = "append"
"""

SS_LATEST = r"""
result = (src.groupBy(F.col("key").cast("string").alias("key"))
          .agg(F.max_by(F.col("value").cast("string"), F.col("offset")).alias("value")))
mode = "update"
"""


@dataclass(frozen=True)
class Workload:
    """One state helper, as Floe runs it (`entrypoint`, `stores`) and as Structured Streaming
    does (`ss_query`: Python that turns the Kafka source `src` into `result` and sets `mode`)."""

    name: str
    what: str  # for the metric text: "word count over N lines (D distinct words)" etc.
    entrypoint: str
    stores: list[dict[str, Any]] = field(default_factory=list)
    ss_query: str = ""
    # topics, beyond the input, a run must drain before it is done (re-key topics)
    internal_topics: tuple[str, ...] = ()
    baseline: str = ""

    def drained(self, app_id: str, input_topic: str) -> list[str]:
        return [input_topic, *(f"{app_id}-{t}" for t in self.internal_topics)]


WORD_COUNT = Workload(
    name="word-count",
    what="word count over {count:,} lines ({distinct:,} distinct words)",
    entrypoint=str(ROOT / "examples/word-count/word_count.py"),
    stores=[{"name": "word-count", "type": "partitioned"}],
    ss_query=SS_WORD_COUNT,
    internal_topics=("words-repartition",),
    baseline="Spark Structured Streaming groupBy().count()",
)
DEDUP = Workload(
    name="dedup",
    what="dedup over {count:,} keyed records ({distinct:,} distinct ids, one-hour window)",
    entrypoint=str(ROOT / "examples/dedup/dedup.py"),
    stores=[{"name": "seen-ids", "type": "partitioned", "ttl_seconds": 3600}],
    ss_query=SS_DEDUP,
    baseline="Spark Structured Streaming dropDuplicatesWithinWatermark(key), one-hour watermark",
)
LATEST = Workload(
    name="latest",
    what="latest value per key over {count:,} keyed records ({distinct:,} distinct keys)",
    entrypoint=str(ROOT / "tests/bench/jobs/latest.py"),
    stores=[{"name": "latest", "type": "partitioned"}],
    ss_query=SS_LATEST,
    baseline="Spark Structured Streaming groupBy(key).agg(max_by(value, offset))",
)


def vocab_lines(n: int, vocab: int, *, seed: int) -> list[Record]:
    """Word-count input: `n` lines of 1-12 words drawn from `vocab` words."""
    rng = random.Random(seed)
    return [" ".join(f"v{rng.randrange(vocab):07d}" for _ in range(rng.randint(1, 12))) for _ in range(n)]


def repeated_ids(n: int, distinct: int, *, seed: int) -> list[Record]:
    """Dedup input: every one of `distinct` ids once, plus `n - distinct` repeats of random ones,
    shuffled; key = value = the id."""
    rng = random.Random(seed)
    ids = [f"id{i:08d}" for i in range(distinct)]
    records = ids + [ids[rng.randrange(distinct)] for _ in range(max(0, n - distinct))]
    rng.shuffle(records)
    return [(i, i) for i in records]


def key_updates(n: int, distinct: int, *, seed: int) -> list[Record]:
    """Latest input: every one of `distinct` keys at least once, `n` updates in all, shuffled;
    each value names its key and its update's sequence number, so the last one is known."""
    rng = random.Random(seed)
    keys = [f"k{i:08d}" for i in range(distinct)]
    order = keys + [keys[rng.randrange(distinct)] for _ in range(max(0, n - distinct))]
    rng.shuffle(order)
    return [(k, f"{k}:{seq}") for seq, k in enumerate(order)]


def distinct_of(workload: Workload, records: list[Record]) -> int:
    if workload is WORD_COUNT:
        return len({w for line in records for w in str(line).split()})
    return len({r[0] for r in records if isinstance(r, tuple)})


def expected(workload: Workload, records: list[Record]) -> dict[str, str]:
    """The final answer per key: a word's count, an id's (only) value, a key's last value."""
    if workload is WORD_COUNT:
        counts: Counter[str] = Counter(w for line in records for w in str(line).lower().split() if w)
        return {w: str(c) for w, c in counts.items()}
    out: dict[str, str] = {}
    for r in records:
        assert isinstance(r, tuple)
        if workload is DEDUP:
            out.setdefault(r[0], r[1])
        else:
            out[r[0]] = r[1]  # keyed: one partition per key, so produce order is offset order
    return out


def compare(where: str, got: dict[str, str], want: dict[str, str]) -> None:
    """Raise if `got` is not exactly `want`, naming a few keys that differ."""
    if got == want:
        return
    wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    extra = sorted(set(got) - set(want))
    raise AssertionError(
        f"{where}: {len(wrong)} of {len(want)} keys wrong or missing, e.g. {dict(list(wrong.items())[:5])} "
        f"(got, want); {len(extra)} keys not in the input, e.g. {extra[:5]}"
    )


def check_output(
    workload: Workload, records: list[Record], output: list[tuple[bytes | None, bytes | None]]
) -> dict[str, int]:
    """The output topic's records against the input: the latest value of each key is the
    expected answer; dedup also emits each id exactly once (a repeat that got through is a
    duplicate, counted and failed)."""
    want = expected(workload, records)
    decoded = [(k.decode(), v.decode()) for k, v in output if k is not None and v is not None]
    latest: dict[str, str] = {}
    for k, v in decoded:
        latest[k] = v
    compare("output", latest, want)
    checked = {"output_keys_checked": len(latest), "output_records": len(decoded)}
    if workload is DEDUP:
        duplicates = len(decoded) - len(latest)
        if duplicates:
            raise AssertionError(f"output: {duplicates} duplicate records of {len(latest)} ids")
        checked["output_duplicates"] = duplicates
    return checked


def check_store(workload: Workload, records: list[Record], read: Callable[[str, str, str], dict[Any, Any]]) -> int:
    """Floe's store against the input, read through `read(store, key_serde, value_serde)`: a
    word's count, a key's last value, or (dedup) every id remembered."""
    want = expected(workload, records)
    store = workload.stores[0]["name"]
    if workload is DEDUP:
        seen = read(store, "str", "long")
        compare("store", {k: want.get(k, "not in the input") for k in seen}, want)
        return len(seen)
    got = read(store, "str", "long" if workload is WORD_COUNT else "str")
    compare("store", {k: str(v) for k, v in got.items()}, want)
    return len(got)
