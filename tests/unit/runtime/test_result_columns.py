"""A fenced helper's result is built from the collected columns (`state.by_partition`,
`localdf.beside`): the helpers answer the sorted table's rows one each, in its order."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from floe_jobs import state
from floe_jobs.localdf import beside
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType


def _table(seed: int) -> pa.Table:
    rng = random.Random(seed)
    n = rng.randrange(0, 300)
    return pa.table(
        {
            "p": pa.array([rng.choice([4, 0, 2, 9]) for _ in range(n)], pa.int32()),
            "k": pa.array([rng.choice([f"w{rng.randrange(40)}", "é∂", None]) for _ in range(n)], pa.string()),
            "v": pa.array([rng.randrange(10) for _ in range(n)], pa.int64()),
        }
    )


def test_a_fenced_helpers_answers_come_in_the_order_of_the_partition_sorted_table() -> None:
    for seed in range(20):
        ordered = state.by_partition(_table(seed))
        # the fenced helpers' shape: group, then every partition's items answered in order
        answered = list(
            state._each_partition(state.group_table(ordered), lambda p, items: [(p, k, v) for k, v in items])
        )
        assert [(p, k) for p, k, _ in answered] == list(
            zip(ordered.column("partition").to_pylist(), ordered.column("key").to_pylist(), strict=True)
        )
        assert [v for _, _, v in answered] == ordered.column("value").to_pylist()


def test_by_partition_is_a_stable_sort_and_leaves_a_sorted_table_as_it_is() -> None:
    table = pa.table({"a": pa.array([2, 1, 2, 1], pa.int32()), "b": ["x", "y", "z", "w"], "c": [1, 2, 3, 4]})
    ordered = state.by_partition(table)
    assert ordered.column_names == ["partition", "key", "value"]
    assert ordered.column("key").to_pylist() == ["y", "w", "x", "z"]
    assert state.by_partition(ordered).column("key").to_pylist() == ["y", "w", "x", "z"]


def test_beside_puts_the_answers_next_to_the_partition_and_key_columns_in_spark_types() -> None:
    ordered = state.by_partition(pa.table({"p": pa.array([1, 0], pa.int32()), "k": ["b", "a"], "v": [5, 6]}))
    schema = StructType(
        [StructField("partition", IntegerType()), StructField("key", StringType()), StructField("keep", BooleanType())]
    )
    table = beside(ordered, [True, None], schema)
    assert table.to_pylist() == [{"partition": 0, "key": "a", "keep": True}, {"partition": 1, "key": "b", "keep": None}]
    long_schema = StructType([*schema.fields[:2], StructField("value", LongType())])
    assert beside(ordered, [7, 8], long_schema).column("value").type == pa.int64()
    with pytest.raises(ValueError, match="1 answers for 2 rows"):
        beside(ordered, [7], long_schema)
