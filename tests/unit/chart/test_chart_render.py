"""The chart renders valid Kubernetes objects for every supported combination of values.

`helm lint` and `helm template` run for real; every rendered object of a built-in kind is
validated against the Kubernetes 1.34 OpenAPI schemas (kubernetes-validate, strict: unknown
fields fail). Objects of kinds that CRDs define (ServiceMonitor, Kopf's peerings) have no
schema there and are checked field by field instead.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from . import chartkit
from .chartkit import by_kind, one

pytestmark = pytest.mark.helm

K8S_VERSION = "1.34.0"
# Kinds defined by CRDs: kubernetes-validate has no schema for them.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "ClusterKopfPeering", "KopfPeering"}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watch-namespaces": {"operator": {"watchNamespaces": ["team-a", "team-b"]}},
    "crds-disabled": {"crds": {"enabled": False}},
    "two-replicas": {
        "replicaCount": 2,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "podDisruptionBudget": {"enabled": True},
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
    },
    "two-replicas-namespaced": {
        "replicaCount": 2,
        "leaderElection": {"enabled": False},
        "peering": {"enabled": True},
        "operator": {"watchNamespaces": ["team-a", "team-b"]},
    },
    "service-monitor": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "no-spark-on-kubernetes": {"rbac": {"sparkOnKubernetes": False}},
    "everything": {
        "commonLabels": {"team": "platform"},
        "image": {"digest": "sha256:" + "a" * 64},
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccount": {"annotations": {"iam.example.com/role": "floe"}},
        "rbac": {"sparkOnKubernetes": True},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Floe"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
        "serviceMonitor": {"enabled": True, "relabelings": [{"action": "labeldrop", "regex": "pod"}]},
        "operator": {"extraEnv": [{"name": "EXTRA", "value": "1"}], "extraArgs": ["--log-level", "DEBUG"]},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "podAnnotations": {"example.com/a": "b"},
        "podLabels": {"example.com/team": "platform"},
    },
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_passes(helm: str, tmp_path: Any, name: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUE_SETS[name]))
    proc = subprocess.run(
        [helm, "lint", "--strict", str(chartkit.CHART), "--values", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_match_kubernetes_schemas(render: chartkit.Render, name: str) -> None:
    docs = render(VALUE_SETS[name])
    assert docs
    validated = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        validated += 1
    assert validated >= 5  # ServiceAccount, ClusterRole, ClusterRoleBinding, Service, Deployment


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_object_carries_the_standard_labels(render: chartkit.Render, name: str) -> None:
    for doc in render(VALUE_SETS[name]):
        labels = doc["metadata"].get("labels") or {}
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        assert labels.get("app.kubernetes.io/name") == "floe", where
        assert labels.get("app.kubernetes.io/instance") == chartkit.RELEASE, where
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", where
        assert labels.get("app.kubernetes.io/version"), where
        assert re.fullmatch(r"floe-\d+\.\d+\.\d+.*", labels.get("helm.sh/chart", "")), where


def test_objects_of_crd_kinds_are_well_formed(render: chartkit.Render) -> None:
    docs = render(VALUE_SETS["everything"] | {"leaderElection": {"enabled": False}, "peering": {"enabled": True}})
    sm = one(docs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    endpoint = sm["spec"]["endpoints"][0]
    assert endpoint["port"] == "http-metrics"
    assert endpoint["honorLabels"] is True
    svc = one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [chartkit.NAMESPACE]}
    rule = one(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in alerts} == {
        "FloeLagGrowing",
        "FloePartitionStalled",
        "FloeAppDegraded",
        "FloeReplicasNotReady",
        "FloeLagMetricsStale",
        "FloeOperatorDown",
        "FloeSnapshotFailed",
        "FloeSnapshotOverdue",
    }
    runbooks = (chartkit.ROOT / "docs" / "alerts.md").read_text().lower()
    for r in alerts:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        anchor = r["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor == r["alert"].lower() and f"## {r['alert'].lower()}" in runbooks, r["alert"]
    assert by_kind(render(), "PrometheusRule") == []
    # The object the pods meet in, and its pre-delete twin that makes Helm delete it on uninstall.
    hooks = {}
    for peering in by_kind(docs, "ClusterKopfPeering"):
        assert peering["apiVersion"] == "kopf.dev/v1"
        assert peering["metadata"]["name"] == "default"
        annotations = peering["metadata"]["annotations"]
        hooks[annotations["helm.sh/hook"]] = annotations["helm.sh/hook-delete-policy"]
    assert hooks == {
        "post-install,post-upgrade": "before-hook-creation",
        "pre-delete": "before-hook-creation,hook-succeeded",
    }


def test_names_are_cut_to_63_characters(render: chartkit.Render) -> None:
    release = "a-long-release-name-of-the-streaming-platform-team-xy"  # 53, Helm's limit
    values = {"nameOverride": "streaming-operator", "grafanaDashboard": {"enabled": True}}
    docs = render(values, release=release)
    for doc in docs:
        name = doc["metadata"]["name"]
        assert len(name) <= 63, name
        assert not name.endswith("-"), name
    assert one(docs, "Deployment")["metadata"]["name"] == f"{release}-streaming-operator"[:63].rstrip("-")
    assert one(docs, "Deployment")["metadata"]["labels"]["app.kubernetes.io/name"] == "streaming-operator"


def test_fullname_override_and_release_containing_the_chart_name(render: chartkit.Render) -> None:
    assert one(render({"fullnameOverride": "streaming-operator"}), "Deployment")["metadata"]["name"] == (
        "streaming-operator"
    )
    assert one(render(release="floe"), "Deployment")["metadata"]["name"] == "floe"
    assert one(render(release="prod"), "Deployment")["metadata"]["name"] == "prod-floe"


def test_crds_are_installed_and_kept_by_default(render: chartkit.Render) -> None:
    crds = {c["metadata"]["name"]: c for c in by_kind(render(), "CustomResourceDefinition")}
    sources = [yaml.safe_load(p.read_text()) for p in sorted((chartkit.ROOT / "crds").glob("*.yaml"))]
    assert sorted(crds) == sorted(s["metadata"]["name"] for s in sources)
    for source in sources:
        crd = crds[source["metadata"]["name"]]
        assert crd["spec"] == source["spec"]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}


def test_crd_keep_off_and_crds_off(render: chartkit.Render) -> None:
    for crd in by_kind(render({"crds": {"keep": False}}), "CustomResourceDefinition"):
        assert "annotations" not in crd["metadata"]
    assert by_kind(render({"crds": {"enabled": False}}), "CustomResourceDefinition") == []
    assert (
        by_kind(
            render(
                {
                    "crds": {"enabled": False},
                    "leaderElection": {"enabled": False},
                    "peering": {"enabled": True},
                    "replicaCount": 2,
                }
            ),
            "CustomResourceDefinition",
        )
        == []
    ), "crds.enabled=false must also leave out the peering CRDs"


def test_two_replicas_need_leader_election_or_peering(render: chartkit.Render) -> None:
    with pytest.raises(chartkit.RenderError, match=r"replicaCount > 1 needs leaderElection.enabled=true"):
        render({"replicaCount": 2, "leaderElection": {"enabled": False}})
    with pytest.raises(chartkit.RenderError, match=r"exclude each other"):
        render({"peering": {"enabled": True}})
    docs = render(VALUE_SETS["two-replicas-namespaced"])
    dep = one(docs, "Deployment")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FLOE_PEERING"]["value"] == "true"
    assert env["FLOE_LEADER_ELECTION"]["value"] == "false"
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    crds = {c["metadata"]["name"] for c in by_kind(docs, "CustomResourceDefinition")}
    assert {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= crds
    assert by_kind(docs, "Lease") == []


def test_two_replicas_elect_a_leader_through_the_charts_lease(render: chartkit.Render) -> None:
    docs = render(VALUE_SETS["two-replicas"])
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FLOE_PEERING"]["value"] == "false"
    assert env["FLOE_LEADER_ELECTION"]["value"] == "true"
    lease = one(docs, "Lease")
    assert lease["apiVersion"] == "coordination.k8s.io/v1"
    assert (lease["metadata"]["name"], lease["metadata"]["namespace"]) == ("floe", chartkit.NAMESPACE)
    assert lease["spec"] == {}, "the pods own the spec; Helm must not reset it on upgrade"
    assert "helm.sh/hook" not in (lease["metadata"].get("annotations") or {}), "a hook would outlive the release"
    assert env["FLOE_LEASE_NAME"]["value"] == lease["metadata"]["name"]
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert [env[k]["value"] for k in ("FLOE_LEASE_DURATION_SECONDS", "FLOE_RENEW_DEADLINE_SECONDS")] == ["15", "10"]
    assert env["FLOE_RETRY_PERIOD_SECONDS"]["value"] == "2"
    assert by_kind(docs, "ClusterKopfPeering") == [] and by_kind(docs, "KopfPeering") == []
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    tsc = dep["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert tsc["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    with pytest.raises(chartkit.RenderError, match=r"leaseDurationSeconds > renewDeadlineSeconds"):
        render({"leaderElection": {"renewDeadlineSeconds": 20}})


def test_namespaced_peering_objects_live_in_each_watched_namespace(render: chartkit.Render) -> None:
    docs = render(VALUE_SETS["two-replicas-namespaced"])
    assert {p["metadata"]["namespace"] for p in by_kind(docs, "KopfPeering")} == {"team-a", "team-b"}
    assert by_kind(docs, "ClusterKopfPeering") == []


def test_operator_pod_meets_the_restricted_pod_security_standard(render: chartkit.Render) -> None:
    pod = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}


def test_operator_reads_every_environment_variable_the_chart_sets(render: chartkit.Render) -> None:
    main = (chartkit.ROOT / "operator" / "main.py").read_text()
    container = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    floe_env = [e["name"] for e in container["env"] if e["name"].startswith("FLOE_")]
    assert len(floe_env) >= 6
    for name in floe_env:
        assert f'"{name}"' in main, f"{name} is set by the chart but operator/main.py does not read it"


def test_operator_settings_reach_the_container(render: chartkit.Render) -> None:
    values = {
        "operator": {
            "watchNamespaces": ["team-a", "team-b"],
            "resyncSeconds": 30,
            "lagIntervalSeconds": 15,
            "checkKafka": False,
            "logLevel": "DEBUG",
            "logFormat": "json",
            "metricsPort": 9090,
            "healthPort": 9091,
        },
        "service": {"port": 9090},
    }
    docs = render(values)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLOE_WATCH_NAMESPACES"] == "team-a,team-b"
    assert env["FLOE_RESYNC_SECONDS"] == "30"
    assert env["FLOE_LAG_INTERVAL_SECONDS"] == "15"
    assert env["FLOE_CHECK_KAFKA"] == "false"
    assert env["FLOE_LOG_LEVEL"] == "DEBUG"
    assert env["FLOE_LOG_FORMAT"] == "json"
    assert env["FLOE_METRICS_PORT"] == "9090"
    assert env["FLOE_LIVENESS_PORT"] == "9091"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http-metrics": 9090, "http-health": 9091}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-health"}
    assert one(docs, "Service")["spec"]["ports"][0]["targetPort"] == "http-metrics"


def test_image_reference(render: chartkit.Render) -> None:
    image = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    app_version = yaml.safe_load((chartkit.CHART / "Chart.yaml").read_text())["appVersion"]
    assert image == f"ghcr.io/floe-dev/floe-operator:{app_version}"
    digest = "sha256:" + "b" * 64
    image = one(render({"image": {"digest": digest}}), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert image["image"] == f"ghcr.io/floe-dev/floe-operator@{digest}"


def test_dashboard_configmap_carries_the_dashboard_and_the_sidecar_label(render: chartkit.Render) -> None:
    docs = render({"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}})
    (cm,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    shipped = cm["data"]["floe.json"]
    assert shipped.strip() == (chartkit.CHART / "dashboards" / "floe.json").read_text().strip()
    assert by_kind(render(), "ConfigMap") == []
