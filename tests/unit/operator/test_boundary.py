"""The tenant boundary in the operator's pure parts (docs/security.md): the drivers' Role is
bound to Floe's ServiceAccount only and grants what Spark's scheduler backend uses; spark.conf
and pod templates that an older CRD let through are reported, never rendered; every container
drops all capabilities; the CRD and the runtime hold one allow-list of spark.kubernetes.* keys."""

from __future__ import annotations

import copy
import re
from typing import Any

from floe_jobs import config
from floe_operator import conditions, model, podtemplate, reconcile, render

from . import crdtools
from .conftest import load_case


def k8s_app(**pod: Any) -> model.StreamingApp:
    body = copy.deepcopy(load_case("spark-k8s"))
    body["spec"].setdefault("pod", {}).update(pod)
    return model.StreamingApp.from_body(body)


def app_with(spec: dict[str, Any]) -> model.StreamingApp:
    body = load_case("minimal")
    body["spec"].update(spec)
    return model.StreamingApp.from_body(body)


def test_the_role_binding_names_only_floes_service_account_even_for_an_old_spec_naming_another() -> None:
    app = k8s_app(serviceAccountName="default")
    by_kind = {o["kind"]: o for o in render.spark_rbac(app)}
    assert by_kind["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{app.name}-spark", "namespace": app.namespace}
    ]
    assert by_kind["ServiceAccount"]["metadata"]["name"] == f"{app.name}-spark"
    pod = render.deployment(app, config_digest="x")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{app.name}-spark"
    assert render.spark_conf(app)["spark.kubernetes.authenticate.driver.serviceAccountName"] == f"{app.name}-spark"


def test_an_old_spec_naming_a_service_account_under_a_k8s_master_is_reported() -> None:
    fault = reconcile.spark_fault(k8s_app(serviceAccountName="default"))
    assert fault is not None and fault.reason == "InvalidSpec"
    assert fault.message.startswith("spec.pod.serviceAccountName: not with a k8s:// spec.spark.master")


def test_the_drivers_role_grants_only_pods_and_configmaps() -> None:
    rules = {tuple(r["resources"]): sorted(r["verbs"]) for r in render.SPARK_DRIVER_RULES}
    assert rules == {
        ("pods",): ["create", "delete", "deletecollection", "get", "list", "patch", "watch"],
        ("configmaps",): ["create", "deletecollection"],
    }


def test_floe_turns_off_what_spark_would_delete_without_a_grant() -> None:
    conf = render.spark_conf(k8s_app())
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"


def test_the_crd_allows_the_spark_kubernetes_keys_the_runtime_allows() -> None:
    conf = crdtools.schema()["properties"]["spec"]["properties"]["spark"]["properties"]["conf"]
    (rule,) = [r["rule"] for r in conf["x-kubernetes-validations"] if "spark.kubernetes." in r["rule"]]
    assert tuple(sorted(re.findall(r"'(spark\.kubernetes\.[^']+)'", rule))) == tuple(
        sorted(config.SPARK_KUBERNETES_TUNING)
    )


def test_every_spark_kubernetes_key_floe_renders_is_one_it_refuses_from_the_author() -> None:
    rendered = {k for k in render.spark_conf(k8s_app()) if k.startswith("spark.kubernetes.")}
    assert rendered == set(config.SPARK_KUBERNETES_FLOE)
    assert not rendered & set(config.SPARK_KUBERNETES_TUNING)


def test_an_old_spec_with_a_pod_shaping_spark_key_is_reported() -> None:
    app = app_with({"spark": {"conf": {"spark.kubernetes.executor.volumes.hostPath.x.mount.path": "/h"}}})
    fault = reconcile.spark_fault(app)
    assert fault is not None
    assert fault.message.startswith("spec.spark.conf: spark.kubernetes.executor.volumes.hostPath.x.mount.path may not")


def test_spark_properties_in_java_options_are_refused_even_quoted() -> None:
    for options in ("-Dspark.master=local", "-XX:+UseG1GC -D'spark.redaction.regex=x'", '-Ds"park".x=1'):
        problems = config.spark_conf_problems({"spark.executor.extraJavaOptions": options}, rendered=False)
        assert problems and problems[0].startswith("spark.executor.extraJavaOptions may not hold -Dspark.*"), options
    assert config.spark_conf_problems({"spark.driver.extraJavaOptions": "-Dlog4j2.level=warn"}, rendered=False) == []


def test_the_runtime_accepts_floes_own_keys_but_the_author_may_not_set_them() -> None:
    conf = {"spark.kubernetes.namespace": "a", "spark.kubernetes.executor.request.cores": "1"}
    assert config.spark_conf_problems(conf, rendered=True) == []
    assert [p.split(" ")[0] for p in config.spark_conf_problems(conf, rendered=False)] == ["spark.kubernetes.namespace"]


def template_app(container: dict[str, Any], **metadata: Any) -> model.StreamingApp:
    return app_with({"podTemplate": {"metadata": metadata, "spec": {"containers": [container]}}})


def test_unconfined_profiles_unmasked_proc_and_selinux_are_reported_per_field() -> None:
    app = template_app(
        {
            "name": "proxy",
            "image": "p",
            "securityContext": {
                "appArmorProfile": {"type": "Unconfined"},
                "seccompProfile": {"type": "Unconfined"},
                "procMount": "Unmasked",
                "seLinuxOptions": {"type": "spc_t"},
            },
        }
    )
    found = podtemplate.problems(app, render.pod_template_owned(app))
    where = "spec.podTemplate.spec.containers[0].securityContext"
    assert [f.split(":")[0] for f in found] == [
        f"{where}.seLinuxOptions",
        f"{where}.seccompProfile.type",
        f"{where}.appArmorProfile.type",
        f"{where}.procMount",
    ]


def test_profile_annotations_are_reported() -> None:
    app = template_app(
        {"name": "proxy", "image": "p"},
        annotations={"container.apparmor.security.beta.kubernetes.io/app": "unconfined"},
    )
    found = podtemplate.problems(app, render.pod_template_owned(app))
    assert found == [
        "spec.podTemplate.metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]: AppArmor and "
        "seccomp profiles are Floe's (RuntimeDefault); set spec.podTemplate.spec.containers[].securityContext instead"
    ]


def test_every_container_drops_all_capabilities_whatever_the_template_says() -> None:
    app = app_with(
        {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {"name": "app", "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": []}}},
                        {
                            "name": "proxy",
                            "image": "p",
                            "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                        },
                    ],
                    "initContainers": [
                        {"name": "init", "image": "p", "securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}
                    ],
                }
            }
        }
    )
    assert podtemplate.problems(app, render.pod_template_owned(app)) == []
    pod = render.deployment(app, config_digest="x")["spec"]["template"]["spec"]
    for container in [*pod["containers"], *pod["initContainers"]]:
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], container["name"]


def test_pod_security_is_true_only_where_the_namespace_enforces_a_standard() -> None:
    label = conditions.ENFORCE_LABEL
    assert conditions.pod_security("a", {label: "restricted"})[:2] == ("True", "Enforced")
    assert conditions.pod_security("a", {label: "baseline"})[:2] == ("True", "Enforced")
    status, reason, message = conditions.pod_security("team-a", {label: "privileged"})
    assert (status, reason) == ("False", "NotEnforced")
    assert message.startswith(
        "Namespace team-a does not enforce the restricted Pod Security Standard "
        "(pod-security.kubernetes.io/enforce=privileged)"
    )
    assert conditions.pod_security("a", {})[:2] == ("False", "NotEnforced")
    assert conditions.pod_security("a", None)[:2] == ("Unknown", "NamespaceUnreadable")


def test_the_rendered_list_names_each_floe_variable_rendered_and_the_images_own() -> None:
    app = model.StreamingApp.from_body(load_case("sasl-plaintext"))
    env = render.process(app)["env"]
    (listed,) = [e["value"] for e in env if e["name"] == config.ENV_NAMES_ENV]
    assert set(listed.split(",")) == {e["name"] for e in env} | {"FLOE_SPARK_JARS"}
    image_env = {"FLOE_SPARK_JARS": "/opt/floe/jars/a.jar"}  # images/job.Dockerfile sets it
    pod_env = {e["name"]: "x" for e in env} | image_env | {config.ENV_NAMES_ENV: listed}
    assert config.foreign_variables(pod_env) == []
