"""Rows between the driver's Python and Spark's JVM, as Arrow columns, without Python workers.

`spark.createDataFrame(list)` parallelises pickled rows: every job over the result starts Python
workers to unpickle them, which costs more than the job itself on a small machine, whatever the
number of rows. Here the rows become one Arrow table in the driver (C loops over the
columns) and Spark reads its record batches in the JVM: every job over the DataFrame stays
there. Before this, the rows went as JSON text that Spark parsed (base64 for binary values):
about ten times the Python work per row, and a parse in every job.

The other way, `collect_rows` fetches a DataFrame's rows as Arrow record batches (one socket
stream, no per-row pickling) and turns the columns into plain Python tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def local_dataframe(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: StructType) -> DataFrame:
    """A DataFrame of `rows` (tuples in `schema`'s field order) whose jobs need no Python worker.

    Binary values may be bytes or bytearray, timestamps timezone-aware datetimes, structs tuples."""
    table = arrow_table(rows, schema)
    if table is None:
        return spark.createDataFrame(list(rows), schema, verifySchema=False)
    return spark.createDataFrame(table, schema)


def arrow_dataframe(spark: SparkSession, table: Any, schema: StructType) -> DataFrame:
    """A DataFrame of an Arrow table whose columns are `schema`'s, read by Spark in the JVM."""
    # one chunk: from a table of several, Spark 4.0's createDataFrame kept only some of the rows
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
