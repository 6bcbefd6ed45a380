"""Round trips between the driver's Python and its JVM on the real Spark, counted at the Py4J
client: a replica's session names each class and static method once (`floe_jobs.jvmnames`) and
sends no debugging call sites (`floe_jobs.sparkio.DEFAULTS`), and its answers are Spark's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import functions as F

pytestmark = [pytest.mark.spark]


@pytest.fixture
def round_trips(spark: Any) -> Iterator[Callable[[Callable[[], Any]], tuple[list[str], Any]]]:
    """The commands the session's Py4J client sends while a function runs, and its result."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    original = client.send_command

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return original(command, *args, **kwargs)

    def run(fn: Callable[[], Any]) -> tuple[list[str], Any]:
        sent.clear()
        client.send_command = counting
        try:
            result = fn()
        finally:
            del client.send_command
        return list(sent), result

    yield run


def test_a_column_function_named_again_costs_one_round_trip(spark: Any, round_trips: Any) -> None:
    F.col("warm")  # the first use names the class and its method
    sent, column = round_trips(lambda: F.col("id"))
    assert len(sent) == 1, f"F.col took {len(sent)} round trips: {sent}"
    assert spark.range(3).select((column + 1).alias("n")).toArrow().column("n").to_pylist() == [1, 2, 3]


def test_a_static_method_named_again_costs_one_round_trip_and_answers_each_call(spark: Any, round_trips: Any) -> None:
    system = spark._jvm.java.lang.System
    system.setProperty("floe.test.round.trips", "first")
    system.getProperty("floe.test.round.trips")  # named once
    sent, first = round_trips(lambda: spark._jvm.java.lang.System.getProperty("floe.test.round.trips"))
    system.setProperty("floe.test.round.trips", "second")
    again, second = round_trips(lambda: spark._jvm.java.lang.System.getProperty("floe.test.round.trips"))
    assert (first, second) == ("first", "second")
    assert (len(sent), len(again)) == (1, 1), (sent, again)


def test_a_static_field_is_read_from_the_jvm_every_time(spark: Any, round_trips: Any) -> None:
    integer = spark._jvm.java.lang.Integer
    assert integer.MAX_VALUE == 2**31 - 1
    sent, value = round_trips(lambda: integer.MAX_VALUE)
    assert (len(sent), value) == (1, 2**31 - 1)


def test_a_replicas_session_sends_no_debugging_call_sites(spark: Any, round_trips: Any) -> None:
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    F.lit(1)
    sent, _ = round_trips(lambda: F.lit(2))
    assert len(sent) == 1 and not [c for c in sent if "PySparkCurrentOrigin" in c], sent
