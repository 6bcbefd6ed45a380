"""The Spark session of a replica: one per process, for its whole life.

Batches reuse it (no session, context or JVM per batch); their records come from and go to
Kafka through the driver (`floe_jobs.kafkaio`), so the Kafka connector jars (`spark.jars`) are
only needed by stages that read or write Kafka with Spark themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

from floe_jobs import jvmnames, kafkasec
from floe_jobs.config import SPARK_WIRE_SECURITY, FloeConfig
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def kubernetes_driver_conf(cfg: FloeConfig) -> dict[str, str]:
    """What a driver under a `k8s://` master learns only in its pod (nothing otherwise).

    Executor pods reach the driver at its pod's IP (`pod.ip`), never by name: a pod's hostname
    does not resolve, and the driver listens on every interface of the pod. Naming the driver's
    pod (`pod.name`) makes it the owner of its executor pods, so the garbage collector removes
    them with it, whatever ends the driver. The driver and its executors authenticate each other
    and encrypt what they exchange (`config.SPARK_WIRE_SECURITY`): set here too, after the app's
    conf, so that a configuration not rendered by the operator runs with them as well."""
    if not cfg.spark.master.startswith("k8s://"):
        return {}
    conf = {"spark.driver.bindAddress": "0.0.0.0"}
    if cfg.pod.ip:
        conf["spark.driver.host"] = cfg.pod.ip
    else:
        log.warning(
            "No pod IP (FLOE_POD_IP) under master=%s: executors reach the driver only if its hostname resolves",
            cfg.spark.master,
        )
    if cfg.pod.name:
        conf["spark.kubernetes.driver.pod.name"] = cfg.pod.name
    else:
        log.warning(
            "No pod name (FLOE_POD_NAME) under master=%s: executor pods outlive their driver", cfg.spark.master
        )
    return conf


DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    # small batches: adaptive execution re-plans every shuffle as a job of its own, which
    # costs more than it saves on batches this size
    "spark.sql.adaptive.enabled": "false",
    # The client JIT only (C1): a replica's JVM runs small jobs whose code is compiled again
    # and again as plans change, and C2's compiler threads take a large share of the JVM's
    # CPU, on the cores the batches need (docs/runtime.md, "Where the CPU goes").
    "spark.driver.extraJavaOptions": "-XX:+UseG1GC -XX:TieredStopAtLevel=1",
    # DataFrames made from Arrow tables stay Arrow record batches in an RDD. Below this
    # threshold (48 MiB by default) Spark would turn them into a local relation: the
    # optimizer then runs each projection over the rows in interpreted code, and every job
    # ships the rows inside its tasks through Java serialization. Floe's own crossings (a
    # batch's records, a helper's results) do so whatever the setting (`floe_jobs.localdf`);
    # this default gives a job's own `createDataFrame` calls the same (docs/runtime.md,
    # "DataFrames made from Arrow stay Arrow").
    "spark.sql.execution.arrow.localRelationThreshold": "0",
    "spark.python.worker.reuse": "true",
    # PySpark's DataFrame debugging context: with it on, every Column function call (F.col,
    # F.lit, ...) also sets and clears its Python call site in the JVM, a session lookup and a
    # setting read first: about ten round trips to the JVM per call (docs/runtime.md, "Fewer
    # round trips to the JVM"). An app that wants the call sites in its query errors sets it
    # back to true in spark.conf.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.task.maxFailures": "1",
    "spark.ui.showConsoleProgress": "false",
    # lanes of stages submit jobs side by side, each from its own pool: share the cores
    # between them task by task instead of queueing one lane's job behind another's
    "spark.scheduler.mode": "FAIR",
    # Kafka source and sink options carry the JAAS line and the client key: a plan that shows
    # its options (the sink's command, the SQL tab) shows them redacted
    "spark.sql.redaction.options.regex": kafkasec.REDACTED_OPTIONS,
}
"""The Spark settings a replica runs with unless its app sets them (`spark.conf`)."""

CLASS_ARCHIVE_OPTION = "spark.driver.defaultJavaOptions"
"""Where the class archive's JVM option goes: Spark's option for what a platform sets under
every app's own `spark.driver.extraJavaOptions`, so an app that sets those keeps the archive."""

IMAGE_CLASS_ARCHIVE = "/opt/floe/spark-classes.jsa"
"""The job image's class archive (images/job.Dockerfile), used when `spark.class_archive` is unset.
A path rather than a variable of the image: an operator lists every FLOE_ variable a pod may
have, and one older than the image would refuse a new one."""


def class_archive(setting: str) -> str:
    """The class archive the driver's JVM maps (`floe_jobs.classarchive`): the one configured, or
    the image's where it has one; "" for none. A configured file that is missing is logged, and
    the JVM then loads every class from the jars, as without an archive."""
    if not setting:
        return IMAGE_CLASS_ARCHIVE if os.path.isfile(IMAGE_CLASS_ARCHIVE) else ""
    if not os.path.isfile(setting):
        log.warning("No class archive at %s (spark.class_archive): the JVM starts without it", setting)
        return ""
    return setting


def archive_option(path: str) -> dict[str, str]:
    """The driver's JVM option that maps the class archive at `path` (none for "")."""
    return {CLASS_ARCHIVE_OPTION: f"-XX:SharedArchiveFile={path}"} if path else {}


def session_conf(cfg: FloeConfig, archive: str = "") -> dict[str, str]:
    """Every Spark setting of a replica's session: Floe's defaults, the class archive (a path,
    `class_archive`), what the driver learns in its pod, the app's `spark.conf`, the wire security
    and the jars."""
    wire = SPARK_WIRE_SECURITY if cfg.spark.master.startswith("k8s://") else {}
    conf = {
        **DEFAULTS,
        **archive_option(archive),
        **kubernetes_driver_conf(cfg),
        **cfg.spark.conf,
        **wire,
    }
    if cfg.spark.jars:
        existing = conf.get("spark.jars", "")
        conf["spark.jars"] = ",".join([j for j in [existing, *cfg.spark.jars] if j])
    return conf


def build_session(cfg: FloeConfig, *, app_name: str) -> SparkSession:
    archive = class_archive(cfg.spark.class_archive)
    conf = session_conf(cfg, archive)
    spark = start_session(cfg.spark.master, app_name, conf)
    # an app's own spark.driver.defaultJavaOptions replaces the option: nothing to report then
    if archive and conf.get(CLASS_ARCHIVE_OPTION) == archive_option(archive)[CLASS_ARCHIVE_OPTION]:
        if archive_mapped(spark, archive):
            log.info("The JVM maps the class archive %s", archive)
        else:
            log.warning(
                "The JVM did not map the class archive %s and loads its classes from the jars: the file was "
                "written by another Java build or over another class path, or is no archive; write it again "
                "with `floe-job class-archive FILE`",
                archive,
            )
    return spark


def archive_mapped(spark: SparkSession, path: str) -> bool:
    """Whether the session's JVM has the archive at `path` mapped (its /proc maps)."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
            return any(line.rstrip().endswith(path) for line in maps)
    except OSError:
        return False


def start_session(master: str, app_name: str, conf: dict[str, str]) -> SparkSession:
    """The process's session (and its JVM) under these settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jvmnames.keep()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    # The JVM starts in Spark's scratch directory: Spark 4 makes its session's `artifacts/`
    # directory relative to the JVM's working directory, which in a pod is the image's read-only
    # root filesystem (every collect then logged a failure and batches failed).
    workdir = conf.get("spark.local.dir", "").split(",")[0] or tempfile.gettempdir()
    os.makedirs(workdir, exist_ok=True)
    with contextlib.chdir(workdir):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
