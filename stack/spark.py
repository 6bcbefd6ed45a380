"""Spark's Kafka connector: `spark-sql-kafka-0-10` matching the installed pyspark, with its
dependencies, as jar files that the job runtime hands to Spark (`spark.jars`).

Artifacts that pyspark already ships (in any version) are left out, so Spark never sees two
copies of a class.
"""

from __future__ import annotations

import re
from pathlib import Path

from floe_stack import artifacts, component
from floe_stack.layout import SCALA_BINARY, Layout


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def artifact_name(jar: str) -> str:
    """`scala-library-2.13.15.jar` → `scala-library`: the artifact, whatever its version."""
    match = re.match(r"^(.*)-\d+(?:\.\d+)+(?:[.-]\w+)*\.jar$", jar)
    return match.group(1) if match else jar


def pyspark_artifacts() -> set[str]:
    import pyspark

    return {artifact_name(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


class SparkConnector:
    name = "spark-kafka"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.version = pyspark_version()
        self.jars: list[Path] = []

    def install(self) -> None:
        d = artifacts.maven_jars(
            self.layout,
            f"spark-sql-kafka-{self.version}",
            [f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{self.version}"],
        )
        shipped = pyspark_artifacts()
        self.jars = sorted(p for p in d.glob("*.jar") if artifact_name(p.name) not in shipped)

    def start(self) -> None:
        """A set of jars: nothing to run."""

    def wait_ready(self, timeout: float) -> None:
        if not any(p.name.startswith("spark-sql-kafka") for p in self.jars):
            raise component.StackError("the spark-sql-kafka connector jar is missing; run `make up`")

    def env(self) -> dict[str, str]:
        return {"FLOE_SPARK_JARS": ",".join(str(p) for p in self.jars), "FLOE_SPARK_VERSION": self.version}

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        return f"Spark {self.version} Kafka connector: {len(self.jars)} jars"
