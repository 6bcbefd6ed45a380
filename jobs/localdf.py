"""Rows between the driver's Python and Spark's JVM, as Arrow columns, without Python workers.

`spark.createDataFrame(list)` parallelises pickled rows: every job over the result starts Python
workers to unpickle them, which costs more than the job itself on a small machine, whatever the
number of rows. Here the rows become one Arrow table in the driver (C loops over the
columns) and Spark reads its record batches in the JVM: every job over the DataFrame stays
there. Before this, the rows went as JSON text that Spark parsed (base64 for binary values):
about ten times the Python work per row, and a parse in every job.

Every table crosses as record batches in an RDD, whatever
`spark.sql.execution.arrow.localRelationThreshold` says (`_RecordBatches`): below it Spark would
make a local relation, whose projections run interpreted over the rows and whose rows every task
carries through Java serialization. The threshold keeps governing the job's own
`createDataFrame` calls.

The other way, `collect_rows` fetches a DataFrame's rows as Arrow record batches (one socket
stream, no per-row pickling) and turns the columns into plain Python tuples.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType


def arrow_schema(schema: StructType) -> Any:
    """Spark's own mapping of the schema to Arrow; None when a type has no Arrow equivalent."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True)
    except Exception:
        return None


LOCAL_RELATION_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"


class _RecordBatches:
    """Holds the threshold at 0 while any of Floe's crossings is inside `createDataFrame`.

    Spark reads the threshold in the JVM when the table arrives (`ArrowConverters.toDataFrame`),
    so it is a session setting, not an argument: the first crossing in sets it to 0 and the last
    one out puts back what it found, so that lanes crossing side by side never restore each
    other's 0. Where it is already 0 (Floe's default) a crossing only reads it. A job's own call
    that runs meanwhile on another lane gets record batches too: the same rows, another plan."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._found: str | None = None

    @contextlib.contextmanager
    def held(self, spark: SparkSession) -> Iterator[None]:
        with self._lock:
            if self._inside == 0:
                self._found = spark.conf.get(LOCAL_RELATION_THRESHOLD, None)
                if self._found != "0":
                    spark.conf.set(LOCAL_RELATION_THRESHOLD, "0")
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0 and self._found != "0":
                    if self._found is None:
                        spark.conf.unset(LOCAL_RELATION_THRESHOLD)
                    else:
                        spark.conf.set(LOCAL_RELATION_THRESHOLD, self._found)


_RECORD_BATCHES = _RecordBatches()


def local_dataframe(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType) -> DataFrame:
    """A DataFrame of `rows` (tuples in `schema`'s field order) whose jobs need no Python worker.

    Binary values may be bytes or bytearray, timestamps timezone-aware datetimes, structs tuples."""
    table = arrow_table(rows, schema)
    if table is None:
        return spark.createDataFrame(list(rows), schema, verifySchema=False)
    with _RECORD_BATCHES.held(spark):
        return spark.createDataFrame(table, schema)


def arrow_dataframe(spark: SparkSession, table: Any, schema: StructType) -> DataFrame:
    """A DataFrame of an Arrow table whose columns are `schema`'s, read by Spark in the JVM."""
    # one chunk: from a table of several, Spark 4.0's createDataFrame kept only some of the rows
    with _RECORD_BATCHES.held(spark):
        return spark.createDataFrame(table.combine_chunks(), schema)


def arrow_table(rows: Sequence[Sequence[Any]], schema: StructType) -> Any:
    """`rows` as one Arrow table of `schema` (C loops over the columns); None when a type of
    `schema` has no Arrow equivalent."""
    import pyarrow as pa

    arrow = arrow_schema(schema)
    if arrow is None:
        return None
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema.fields]
    return pa.Table.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, arrow, strict=True)], schema=arrow
    )


def beside(table: Any, answers: Sequence[Any], schema: StructType) -> Any:
    """An Arrow table of `schema`: the first two columns of `table`, then `answers` (one per
    row of `table`, in its order) as the third; None when a type of `schema` has no Arrow
    equivalent. A helper's result this way reuses the collected partition and key columns
    instead of turning every row's key back into Arrow (`floe_jobs.api.Batch._apply`)."""
    import pyarrow as pa

    arrow = arrow_schema(schema)
    if arrow is None:
        return None
    if len(answers) != table.num_rows:
        raise ValueError(f"{len(answers)} answers for {table.num_rows} rows")
    return pa.Table.from_arrays(
        [
            table.column(0).cast(arrow.field(0).type),
            table.column(1).cast(arrow.field(1).type),
            pa.array(answers, type=arrow.field(2).type),
        ],
        schema=arrow,
    )


def collect_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """Every row of `df` as a tuple of plain Python values (one Spark job, Arrow transfer)."""
    table = df.toArrow()
    if table.num_rows == 0:
        return []
    return list(zip(*(column.to_pylist() for column in table.columns), strict=True))
