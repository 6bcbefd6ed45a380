"""Spark for the local replicas: Kafka's connector and the driver JVM's class archive.

The connector is `spark-sql-kafka-0-10` matching the installed pyspark, with its dependencies,
as jar files that the job runtime hands to Spark (`spark.jars`). Artifacts that pyspark already
ships (in any version) are left out, so Spark never sees two copies of a class.

The class archive is what the job image carries too (`floe_jobs.classarchive`): written once per
pyspark class path, Java build and training code, it takes about a quarter of the CPU out of each local
replica's start, so tests that start many replicas pay less for each.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
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


def archive_key(root: Path) -> str:
    """What a class archive is valid for: the JVM checks pyspark's jars (their paths, sizes and
    times) and its own build; the training code decides what is in it."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    stamps = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in jars.glob("*.jar"))
    training = (root / "jobs" / "classarchive.py").read_bytes() + (root / "jobs" / "sparkio.py").read_bytes()
    h = hashlib.sha256("|".join([str(jars), java, os.environ.get("JAVA_HOME", ""), *stamps]).encode())
    h.update(training)
    return h.hexdigest()[:16]


def write_class_archive(path: Path) -> None:
    """Run the runtime's training (`floe-job class-archive`) into `path`, dropping this checkout's older archives."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob("*.jsa"):
        old.unlink()
    done = subprocess.run([sys.executable, "-m", "floe_jobs.cli", "class-archive", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise component.StackError(f"writing the class archive {path} failed: {done.stderr[-2000:]}")


class SparkConnector:
    name = "spark-kafka"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.version = pyspark_version()
        self.jars: list[Path] = []
        # found by `install` (its key asks Java for its build): a stack only listed or stopped
        # needs no Java
        self.class_archive: Path | None = None

    def install(self) -> None:
        d = artifacts.maven_jars(
            self.layout,
            f"spark-sql-kafka-{self.version}",
            [f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{self.version}"],
        )
        shipped = pyspark_artifacts()
        self.jars = sorted(p for p in d.glob("*.jar") if artifact_name(p.name) not in shipped)
        # one directory per checkout (its venv is in the key): another clone never removes it
        self.class_archive = self.layout.data / "spark-classes" / f"{archive_key(self.layout.root)}.jsa"
        if not self.class_archive.is_file():
            write_class_archive(self.class_archive)

    def start(self) -> None:
        """A set of jars: nothing to run."""

    def wait_ready(self, timeout: float) -> None:
        if not any(p.name.startswith("spark-sql-kafka") for p in self.jars):
            raise component.StackError("the spark-sql-kafka connector jar is missing; run `make up`")

    def env(self) -> dict[str, str]:
        return {
            "FLOE_SPARK_JARS": ",".join(str(p) for p in self.jars),
            "FLOE_SPARK_VERSION": self.version,
            **({"FLOE_SPARK_CLASS_ARCHIVE": str(self.class_archive)} if self.class_archive else {}),
        }

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        archive = f"; class archive {self.class_archive.name}" if self.class_archive else ""
        return f"Spark {self.version} Kafka connector: {len(self.jars)} jars{archive}"
