"""`floe-job executor` (what Spark runs in an executor pod) and the driver's settings under a
k8s:// master: pure pieces, no JVM started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from floe_jobs import cli, config, executor, sparkio

HOME = Path("/usr/lib/python3/dist-packages/pyspark")

# What Spark 4's driver puts in an executor pod's environment (BasicExecutorFeatureStep), with
# the numbered JVM options out of order, as a pod's environment may list them.
POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.244.0.7:7078",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-application-1700000000000",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_IP": "10.244.0.9",
    "SPARK_EXECUTOR_POD_NAME": "floe-wc-6b1f-exec-2",
    "SPARK_LOCAL_DIRS": "/tmp/spark",
    "SPARK_USER": "spark",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.blockManager.port=7079",
    "SPARK_JAVA_OPT_2": "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "SPARK_JAVA_OPT_0": "-XX:+IgnoreUnrecognizedVMOptions",
    "SPARK_JAVA_OPT_1": "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "JAVA_HOME": "/opt/java",
    "HOME": "/tmp",
}


def test_the_command_line_is_spark_s_executor_backend_from_the_pod_environment() -> None:
    run = executor.launch(POD_ENV, home=HOME, python="/usr/bin/python3")
    assert run.argv == [
        "/opt/java/bin/java",
        "-XX:+IgnoreUnrecognizedVMOptions",
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "-Dspark.driver.blockManager.port=7079",
        "-Xms1024m",
        "-Xmx1024m",
        "-cp",
        f"/opt/spark/conf:{HOME}/jars/*",
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
        "--driver-url", "spark://CoarseGrainedScheduler@10.244.0.7:7078",
        "--executor-id", "2",
        "--cores", "1",
        "--app-id", "spark-application-1700000000000",
        "--hostname", "10.244.0.9",
        "--resourceProfileId", "0",
        "--podName", "floe-wc-6b1f-exec-2",
    ]  # fmt: skip
    assert run.cwd == "/tmp/spark"  # the emptyDir Spark mounts: the root filesystem is read-only
    assert run.env["PYSPARK_PYTHON"] == "/usr/bin/python3"
    assert run.env["SPARK_USER"] == "spark"


def test_classpath_keeps_the_user_s_and_extra_entries_around_spark_s_jars() -> None:
    env = {**POD_ENV, "SPARK_CLASSPATH": "/opt/app/extra.jar", "SPARK_EXTRA_CLASSPATH": "/opt/x/*"}
    del env["SPARK_CONF_DIR"]
    run = executor.launch(env, home=HOME)
    assert run.argv[run.argv.index("-cp") + 1] == f"/opt/app/extra.jar:{HOME}/jars/*:/opt/x/*"


def test_a_python_the_pod_names_is_kept_and_optional_arguments_are_left_out() -> None:
    env = {k: v for k, v in POD_ENV.items() if k not in ("SPARK_RESOURCE_PROFILE_ID", "SPARK_EXECUTOR_POD_NAME")}
    run = executor.launch({**env, "PYSPARK_PYTHON": "/opt/venv/bin/python"}, home=HOME)
    assert run.env["PYSPARK_PYTHON"] == "/opt/venv/bin/python"
    assert "--podName" not in run.argv and "--resourceProfileId" not in run.argv
    assert run.argv[-2:] == ["--hostname", "10.244.0.9"]


def test_without_java_home_java_comes_from_the_path_and_without_local_dirs_work_is_in_tmp() -> None:
    env = {k: v for k, v in POD_ENV.items() if k not in ("JAVA_HOME", "SPARK_LOCAL_DIRS")}
    run = executor.launch(env, home=HOME)
    assert run.argv[0] == "java"
    assert run.cwd == "/tmp"


def test_spark_home_is_the_installed_pyspark_unless_set() -> None:
    assert (executor.spark_home({}) / "jars").is_dir()
    assert executor.spark_home({"SPARK_HOME": "/opt/spark"}) == Path("/opt/spark")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"SPARK_DRIVER_URL": ""}, "SPARK_DRIVER_URL"),
        ({"SPARK_EXECUTOR_ID": None, "SPARK_APPLICATION_ID": None}, "SPARK_EXECUTOR_ID, SPARK_APPLICATION_ID"),
        ({"SPARK_EXECUTOR_MEMORY": None}, "SPARK_EXECUTOR_MEMORY unset"),
        ({"SPARK_EXECUTOR_MEMORY": "1 GB"}, "SPARK_EXECUTOR_MEMORY='1 GB' is not a JVM memory size"),
        ({"SPARK_EXECUTOR_CORES": "0.5"}, "SPARK_EXECUTOR_CORES='0.5' is not a whole number"),
    ],
)
def test_an_environment_that_is_not_an_executor_s_is_refused_by_name(change: dict[str, Any], named: str) -> None:
    env = {k: v for k, v in {**POD_ENV, **change}.items() if v is not None}
    with pytest.raises(executor.ExecutorError) as info:
        executor.launch(env, home=HOME)
    assert named in str(info.value)


def test_floe_job_executor_execs_the_jvm_in_the_scratch_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, list[str], dict[str, str], str]] = []
    monkeypatch.setattr(executor.os, "execvpe", lambda f, a, e: calls.append((f, a, e, str(Path.cwd()))))
    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "spark"
    for name, value in {**POD_ENV, "SPARK_LOCAL_DIRS": f"{scratch},/elsewhere", "SPARK_HOME": str(HOME)}.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["executor"]) == 0
    ((file, argv, env, cwd),) = calls
    assert file == "/opt/java/bin/java" and argv[0] == file
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in argv
    assert cwd == str(scratch) and scratch.is_dir()
    assert env["SPARK_DRIVER_URL"] == POD_ENV["SPARK_DRIVER_URL"]


def test_floe_job_executor_outside_an_executor_pod_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SPARK_DRIVER_URL", raising=False)
    monkeypatch.setattr(executor.os, "execvpe", lambda *a: pytest.fail("must not exec"))
    assert cli.main(["executor"]) == 2
    assert "SPARK_DRIVER_URL" in capsys.readouterr().err
    assert cli.main(["executor", "--cores", "2"]) == 2
    assert "takes no arguments" in capsys.readouterr().err


def _cfg(master: str, **pod: str) -> config.FloeConfig:
    return config.from_dict(
        {
            "app_id": "team-a-clicks",
            "kafka": {"bootstrap_servers": "kafka:9092", "topics": ["clicks"]},
            "cassandra": {"keyspace": "analytics"},
            "job": {"entrypoint": "clicks.main:job"},
            "spark": {"master": master},
            "pod": pod,
        }
    )


def test_a_driver_under_a_k8s_master_is_reached_at_its_pod_ip_and_owns_its_executors() -> None:
    cfg = _cfg("k8s://https://10.96.0.1:443", name="clicks-7d9f-x2", ip="10.244.0.7")
    assert sparkio.kubernetes_driver_conf(cfg) == {
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.host": "10.244.0.7",
        "spark.kubernetes.driver.pod.name": "clicks-7d9f-x2",
    }


def test_a_local_master_gets_no_driver_address_and_a_pod_without_fields_only_binds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert sparkio.kubernetes_driver_conf(_cfg("local[*]", name="p", ip="10.244.0.7")) == {}
    assert sparkio.kubernetes_driver_conf(_cfg("k8s://https://10.96.0.1:443")) == {
        "spark.driver.bindAddress": "0.0.0.0"
    }
    assert "FLOE_POD_IP" in caplog.text and "FLOE_POD_NAME" in caplog.text
