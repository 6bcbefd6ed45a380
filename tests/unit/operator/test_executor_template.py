"""The executor pod template of apps with a k8s:// master: a valid Pod that a namespace
enforcing the restricted Pod Security Standard admits, with the drivers' scheduling
constraints, found by the driver where Spark's settings say, and never counted as a driver."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml
from floe_operator import model, render

from .conftest import load_case

K8S_CASES = ["spark-k8s", "spark-k8s-restricted"]


def app_of(name: str) -> model.StreamingApp:
    return model.StreamingApp.from_body(load_case(name))


def template_of(app: model.StreamingApp) -> dict[str, Any]:
    """The template as the driver reads it: the ConfigMap's file at the path Spark is given."""
    conf = render.spark_conf(app)
    path = conf["spark.kubernetes.executor.podTemplateFile"]
    directory, _, file = path.rpartition("/")
    deployment = render.deployment(app, config_digest="x")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounted.get(directory) == "config", f"{directory} is not where the ConfigMap is mounted"
    parsed: dict[str, Any] = yaml.safe_load(render.config_map(app)["data"][file])
    return parsed


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the restricted Pod Security Standard (v1.34) refuses in a pod, for the fields a
    template sets; Spark adds only emptyDir and configMap volumes, env, args and ports."""
    spec = pod["spec"]
    found = []
    pod_sc = spec.get("securityContext") or {}
    for c in spec["containers"]:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation must be false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            found.append(f"{name}: capabilities must drop ALL")
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot")
        if (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            found.append(f"{name}: seccompProfile RuntimeDefault")
        if sc.get("privileged"):
            found.append(f"{name}: privileged")
    if pod_sc.get("runAsUser") == 0:
        found.append("runAsUser 0")
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "persistentVolumeClaim"}:
            found.append(f"volume {v['name']}: {kinds}")
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(key)
    return found


@pytest.mark.parametrize("name", K8S_CASES)
def test_the_template_is_a_valid_pod_the_restricted_standard_admits(name: str) -> None:
    pod = template_of(app_of(name))
    kubernetes_validate.validate(pod, "1.34", strict=True)
    assert restricted_violations(pod) == []
    # the same as Spark will make it: its local dir in an emptyDir, its conf in a ConfigMap
    spark_adds = [{"name": "spark-local-dir-1", "emptyDir": {}}, {"name": "spark-conf-volume-exec", "configMap": {}}]
    merged = {**pod, "spec": {**pod["spec"], "volumes": [*pod["spec"]["volumes"], *spark_adds]}}
    assert restricted_violations(merged) == []


@pytest.mark.parametrize("name", K8S_CASES)
def test_executors_run_as_the_drivers_do(name: str) -> None:
    app = app_of(name)
    pod = template_of(app)
    driver = render.deployment(app, config_digest="x")["spec"]["template"]["spec"]
    (executor,) = pod["spec"]["containers"]
    assert executor["name"] == render.spark_conf(app)["spark.kubernetes.executor.podTemplateContainerName"]
    assert pod["spec"]["securityContext"] == driver["securityContext"]
    assert executor["securityContext"] == driver["containers"][0]["securityContext"]
    assert executor["image"] == app.spec.image == render.spark_conf(app)["spark.kubernetes.container.image"]
    # Spark sets the container's pull policy from its own setting, over the template's
    assert executor["imagePullPolicy"] == render.spark_conf(app)["spark.kubernetes.container.image.pullPolicy"]
    assert executor["imagePullPolicy"] == app.spec.image_pull_policy
    # Spark adds the argument `executor` to the image's command: `floe-job executor`
    assert executor["command"] == ["floe-job"] and "args" not in executor
    # the root filesystem is read-only: /tmp is an emptyDir, and Spark's local dir is below it
    assert {m["mountPath"] for m in executor["volumeMounts"]} == {"/tmp"}
    assert render.spark_conf(app)["spark.local.dir"].startswith("/tmp/")
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_scheduling_constraints_follow_the_drivers_but_not_their_pod_anti_affinity() -> None:
    app = app_of("spark-k8s-restricted")
    spec = template_of(app)["spec"]
    assert spec["nodeSelector"] == {"node-pool": "streaming"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "streaming", "effect": "NoSchedule"}
    assert spec["tolerations"] == [toleration]
    assert spec["priorityClassName"] == "streaming"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert set(spec["affinity"]) == {"nodeAffinity"}
    assert spec["securityContext"]["runAsUser"] == 1001


def test_executors_never_carry_the_drivers_selector() -> None:
    app = app_of("spark-k8s-restricted")
    labels = template_of(app)["metadata"]["labels"]
    selector = render.selector_labels(app)
    assert not any(labels.get(k) == v for k, v in selector.items())
    assert labels[render.EXECUTOR_OF] == app.name
    assert labels["team"] == "analytics"  # the user's own pod labels come along
    assert template_of(app)["metadata"]["annotations"] == {"cost-centre": "42"}


def test_a_local_master_has_no_template_and_no_executor_settings() -> None:
    app = app_of("minimal")
    assert list(render.config_map(app)["data"]) == [render.CONFIG_FILE]
    assert not [k for k in render.spark_conf(app) if k.startswith("spark.kubernetes.")]


def test_a_changed_template_rolls_the_drivers() -> None:
    body = load_case("spark-k8s")
    before = render.config_hash(render.config_map(model.StreamingApp.from_body(body)))
    body["spec"]["pod"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    after = render.config_hash(render.config_map(model.StreamingApp.from_body(body)))
    assert before != after


def test_the_driver_batch_limit_reaches_the_runtime_only_when_set() -> None:
    assert render.job_config(app_of("spark-k8s-restricted"))["spark"]["driver_batch_max_records"] == 5000
    assert "driver_batch_max_records" not in render.job_config(app_of("spark-k8s"))["spark"]
