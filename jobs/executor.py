"""`floe-job executor`: a Spark executor in a pod that a replica's driver started.

With a `k8s://` master, each driver asks the API server for executor pods of the app's image;
Spark starts them with the image's entrypoint and the single argument `executor`, and describes
the executor in the pod's environment (driver URL, executor id, cores, memory, application id,
the pod's IP and name, JVM options). Spark's own images read that in a shell script; Floe's
image has `floe-job` as its entrypoint, so this module reads the same variables and replaces
the process with the executor JVM, run from the jars of the image's pyspark installation.

The pod's root filesystem is read-only: the JVM starts in Spark's scratch directory
(`SPARK_LOCAL_DIRS`, an emptyDir), where an executor writes the jars and files it fetches from
the driver. Python workers use this image's interpreter (`PYSPARK_PYTHON`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"

# What Spark's executor pod must carry, with the backend argument each becomes.
REQUIRED = {
    "SPARK_DRIVER_URL": "--driver-url",
    "SPARK_EXECUTOR_ID": "--executor-id",
    "SPARK_EXECUTOR_CORES": "--cores",
    "SPARK_APPLICATION_ID": "--app-id",
    "SPARK_EXECUTOR_POD_IP": "--hostname",
}
# Set by the Spark releases that have them; passed on when present.
OPTIONAL = {
    "SPARK_RESOURCE_PROFILE_ID": "--resourceProfileId",
    "SPARK_EXECUTOR_POD_NAME": "--podName",
}
_JAVA_OPT = re.compile(r"^SPARK_JAVA_OPT_(\d+)$")
_MEMORY = re.compile(r"^[1-9][0-9]*[kKmMgGtT]?$")


class ExecutorError(ValueError):
    """The pod's environment does not describe an executor; the message names the variable."""


@dataclass(frozen=True)
class Launch:
    """What to run: the command line, its environment and its working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


def spark_home(environ: Mapping[str, str]) -> Path:
    """`SPARK_HOME`, or the pyspark package of this interpreter (a pip install carries Spark's jars)."""
    if environ.get("SPARK_HOME"):
        return Path(environ["SPARK_HOME"])
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ExecutorError("no Spark installation: SPARK_HOME is unset and pyspark is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def java_options(environ: Mapping[str, str]) -> list[str]:
    """`SPARK_JAVA_OPT_<n>` in the order of n: one JVM argument each, as Spark numbered them."""
    numbered = [(int(m.group(1)), value) for name, value in environ.items() if (m := _JAVA_OPT.match(name))]
    return [value for _, value in sorted(numbered)]


def classpath(environ: Mapping[str, str], home: Path) -> str:
    """Spark's conf dir (Spark mounts the executor's there), the user's classpath
    (`spark.executor.extraClassPath`), Spark's jars, then any extra and distribution classpath."""
    parts = [
        environ.get("HADOOP_CONF_DIR", ""),
        environ.get("SPARK_CONF_DIR", ""),
        environ.get("SPARK_CLASSPATH", ""),
        str(home / "jars" / "*"),
        environ.get("SPARK_EXTRA_CLASSPATH", ""),
        environ.get("SPARK_DIST_CLASSPATH", ""),
    ]
    return ":".join(p for p in parts if p)


def java_binary(environ: Mapping[str, str]) -> str:
    java_home = environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


def work_dir(environ: Mapping[str, str]) -> str:
    """The first of Spark's local dirs (an emptyDir Spark mounts), else the temporary directory."""
    first = environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return first or environ.get("TMPDIR") or "/tmp"


def launch(environ: Mapping[str, str], *, home: Path | None = None, python: str | None = None) -> Launch:
    """The executor JVM's command line from the pod's environment; raises ExecutorError naming
    what is missing or malformed."""
    missing = [name for name in REQUIRED if not environ.get(name)]
    memory = environ.get("SPARK_EXECUTOR_MEMORY", "")
    if not memory:
        missing.append("SPARK_EXECUTOR_MEMORY")
    if missing:
        raise ExecutorError(
            f"not started by a Spark driver: {', '.join(missing)} unset (a k8s:// master's driver sets them on "
            "the executor pods it creates)"
        )
    if not _MEMORY.match(memory):
        raise ExecutorError(f"SPARK_EXECUTOR_MEMORY={memory!r} is not a JVM memory size such as 1024m")
    if not environ["SPARK_EXECUTOR_CORES"].isdigit():
        raise ExecutorError(f"SPARK_EXECUTOR_CORES={environ['SPARK_EXECUTOR_CORES']!r} is not a whole number")
    home = home or spark_home(environ)
    argv = [
        java_binary(environ),
        *java_options(environ),
        f"-Xms{memory}",
        f"-Xmx{memory}",
        "-cp",
        classpath(environ, home),
        BACKEND,
    ]
    for name, flag in REQUIRED.items():
        argv += [flag, environ[name]]
    for name, flag in OPTIONAL.items():
        if environ.get(name):
            argv += [flag, environ[name]]
    env = dict(environ)
    # The driver names its interpreter in every Python task; this is the fallback of workers
    # started without one, so they run this image's Python with Floe and pyspark installed.
    env.setdefault("PYSPARK_PYTHON", python or sys.executable)
    return Launch(argv=argv, env=env, cwd=work_dir(environ))


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Replace this process with the executor JVM (so it receives the pod's signals itself);
    returns 2 when the environment is not an executor's."""
    if argv:
        print(f"floe-job executor: takes no arguments, got {' '.join(argv)}", file=sys.stderr)
        return 2
    try:
        run = launch(os.environ if environ is None else environ)
    except ExecutorError as exc:
        print(f"floe-job executor: {exc}", file=sys.stderr)
        return 2
    os.makedirs(run.cwd, exist_ok=True)
    os.chdir(run.cwd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(run.argv[0], run.argv, run.env)
    return 0  # not reached: exec replaced the process
