"""Bad specs are rejected by the real API server at admission, with a message that says what to change."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from .kube import Kubectl

pytestmark = pytest.mark.k8s

GOOD: dict[str, Any] = {
    "apiVersion": "streaming.floe.dev/v1alpha1",
    "kind": "StreamingApp",
    "metadata": {"name": "bad"},
    "spec": {
        "image": "registry.example.com/floe/app:1",
        "job": {"entrypoint": "app.main:transform"},
        "kafka": {"bootstrapServers": "kafka:9092", "topics": ["in"]},
        "state": {"cassandra": {"hosts": ["cassandra"], "keyspace": "app"}},
    },
}


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is _DELETE:
            del node[parts[-1]]
        else:
            node[parts[-1]] = value

    return change


_DELETE = object()


def _chain(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        for one in changes:
            one(obj)

    return change


def _sidecar_security(context: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _set(
        "spec.podTemplate", {"spec": {"containers": [{"name": "proxy", "image": "p", "securityContext": context}]}}
    )



def _levels(consistency: str, replication: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return _chain(
        _set("spec.state.cassandra.consistency", consistency), _set("spec.state.cassandra.replication", replication)
    )


FLOOR_ONE = "spec.state.cassandra.consistency ONE keeps the fence of exactly-once state only with one copy of each row"
FLOOR_LOCAL_ONE = (
    "spec.state.cassandra.consistency LOCAL_ONE keeps the fence of exactly-once state only with one copy of each row "
    "in the local datacenter"
)

# (case id, change, text the API server's message must contain)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("no-image", _set("spec.image", _DELETE), "spec.image: Required value"),
    ("image-with-space", _set("spec.image", "app: 1"), "spec.image must not contain whitespace"),
    (
        "bad-entrypoint",
        _set("spec.job.entrypoint", "run my job"),
        "spec.job.entrypoint must be 'package.module:function'",
    ),
    (
        "negative-replicas",
        _set("spec.replicas", -1),
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
    ),
    ("too-many-replicas", _set("spec.replicas", 5000), "should be less than or equal to 1000"),
    (
        "no-topics",
        _set("spec.kafka.topics", []),
        "spec.kafka.topics: Invalid value: 0: spec.kafka.topics in body should have at least 1 items",
    ),
    ("bad-topic-name", _set("spec.kafka.topics", ["bad topic!"]), "spec.kafka.topics[0] in body should match"),
    ("duplicate-topics", _set("spec.kafka.topics", ["in", "in"]), 'spec.kafka.topics[1]: Duplicate value: "in"'),
    (
        "output-is-input",
        _set("spec.kafka.outputTopics", ["in"]),
        "a topic must not be both in spec.kafka.topics and in spec.kafka.outputTopics",
    ),
    (
        "bootstrap-without-port",
        _set("spec.kafka.bootstrapServers", "kafka"),
        "spec.kafka.bootstrapServers must be a comma-separated list of host:port",
    ),
    (
        "bad-starting-offsets",
        _set("spec.kafka.startingOffsets", "middle"),
        'Unsupported value: "middle": supported values: "earliest", "latest"',
    ),
    (
        "sasl-protocol-without-sasl",
        _set("spec.kafka.security", {"protocol": "SASL_SSL"}),
        "spec.kafka.security.sasl is required when protocol is SASL_PLAINTEXT or SASL_SSL",
    ),
    (
        "tls-without-ssl",
        _set("spec.kafka.security", {"tls": {"caSecretRef": {"name": "ca"}}}),
        "spec.kafka.security.tls needs protocol SSL or SASL_SSL",
    ),
    (
        "bad-keyspace",
        _set("spec.state.cassandra.keyspace", "Orders-KS"),
        "spec.state.cassandra.keyspace must be lowercase letters, digits and '_'",
    ),
    (
        "serial-consistency-not-serial",
        _set("spec.state.cassandra.serialConsistency", "LOCAL_QUORUM"),
        'spec.state.cassandra.serialConsistency: Unsupported value: "LOCAL_QUORUM": supported values: "SERIAL", '
        '"LOCAL_SERIAL"',
    ),
    (
        "zero-request-timeout",
        _set("spec.state.cassandra.requestTimeoutSeconds", 0),
        "spec.state.cassandra.requestTimeoutSeconds: Invalid value: 0: spec.state.cassandra.requestTimeoutSeconds "
        "in body should be greater than 0",
    ),
    (
        "nts-without-datacenters",
        _set("spec.state.cassandra.replication", {"strategy": "NetworkTopologyStrategy"}),
        "spec.state.cassandra.replication.datacenters is required with NetworkTopologyStrategy",
    ),
    ("one-over-three-copies", _levels("ONE", {"strategy": "SimpleStrategy", "replicationFactor": 3}), FLOOR_ONE),
    (
        "one-over-two-datacenters",
        _levels("ONE", {"strategy": "NetworkTopologyStrategy", "datacenters": {"dc1": 1, "dc2": 1}}),
        FLOOR_ONE,
    ),
    (
        "local-one-over-three-local-copies",
        _levels("LOCAL_ONE", {"strategy": "NetworkTopologyStrategy", "datacenters": {"datacenter1": 3, "dc2": 1}}),
        FLOOR_LOCAL_ONE,
    ),
    (
        "local-one-over-two-copies",
        _levels("LOCAL_ONE", {"strategy": "SimpleStrategy", "replicationFactor": 2}),
        FLOOR_LOCAL_ONE,
    ),
    (
        "bad-store-type",
        _set("spec.state.stores", [{"name": "s", "type": "rocksdb"}]),
        'spec.state.stores[0].type: Unsupported value: "rocksdb"',
    ),
    (
        "duplicate-stores",
        _set("spec.state.stores", [{"name": "s"}, {"name": "s"}]),
        "spec.state.stores[1]: Duplicate value",
    ),
    (
        "bad-store-name",
        _set("spec.state.stores", [{"name": "Counts!"}]),
        "a store name must be lowercase letters, digits, '_', '-' or '.'",
    ),
    (
        "zero-ttl",
        _set("spec.state.stores", [{"name": "s", "ttlSeconds": 0}]),
        "spec.state.stores[0].ttlSeconds in body should be greater than or equal to 1",
    ),
    (
        "bad-deletion-policy",
        _set("spec.state.deletionPolicy", "Orphan"),
        'spec.state.deletionPolicy: Unsupported value: "Orphan"',
    ),
    (
        "drain-exceeds-grace",
        _set("spec.shutdown", {"drainTimeoutSeconds": 60, "terminationGracePeriodSeconds": 60}),
        "spec.shutdown.preStopDelaySeconds + drainTimeoutSeconds must be less than terminationGracePeriodSeconds",
    ),
    (
        "heartbeat-too-slow",
        _set("spec.shutdown", {"sessionTimeoutMs": 6000, "heartbeatIntervalMs": 3000}),
        "spec.shutdown.heartbeatIntervalMs must be at most a third of sessionTimeoutMs",
    ),
    (
        "rollout-cannot-progress",
        _set("spec.rollout", {"maxSurge": 0, "maxUnavailable": "0%"}),
        "spec.rollout.maxSurge and maxUnavailable must not both be zero",
    ),
    (
        "bad-max-surge",
        _set("spec.rollout", {"maxSurge": "lots"}),
        "spec.rollout.maxSurge must be a non-negative number or a percentage",
    ),
    (
        "snapshot-interval-too-short",
        _set("spec.snapshots", {"location": "s3a://backups/wc", "interval": "30s"}),
        "spec.snapshots.interval must be a duration of at least 1m",
    ),
    (
        "snapshot-interval-in-days",
        _set("spec.snapshots", {"location": "s3a://backups/wc", "interval": "1d"}),
        "spec.snapshots.interval must be a duration of at least 1m, such as 30m, 6h or 1h30m",
    ),
    (
        "snapshot-file-location-without-volume",
        _set("spec.snapshots", {"location": "file:///snapshots/wc", "interval": "1h"}),
        "spec.snapshots.volume is required with a file:// location",
    ),
    (
        "snapshot-location-outside-its-volume",
        _set("spec.snapshots", {"location": "file:///data/wc", "interval": "1h",
                                "volume": {"claimName": "backups", "mountPath": "/snapshots"}}),
        "spec.snapshots.location must be a path below spec.snapshots.volume.mountPath",
    ),
    (
        "snapshot-keep-none",
        _set("spec.snapshots", {"location": "s3a://backups/wc", "interval": "1h", "keep": 0}),
        "spec.snapshots.keep",
    ),
    (
        "autoscaling-min-above-max",
        _set("spec.autoscaling", {"minReplicas": 5, "maxReplicas": 2}),
        "spec.autoscaling.minReplicas must be less than or equal to maxReplicas",
    ),
    (
        "keda-fallback-outside-bounds",
        _set("spec.autoscaling", {"mode": "KEDA", "minReplicas": 2, "maxReplicas": 4, "fallbackReplicas": 6}),
        "spec.autoscaling.fallbackReplicas must lie between minReplicas and maxReplicas",
    ),
    (
        "bad-autoscaling-mode",
        _set("spec.autoscaling", {"mode": "VPA", "maxReplicas": 2}),
        'spec.autoscaling.mode: Unsupported value: "VPA"',
    ),
    ("bad-spark-master", _set("spec.spark", {"master": "yarn"}), "spec.spark.master must be local, local[N], local[*]"),
    (
        "spark-conf-sets-master",
        _set("spec.spark", {"conf": {"spark.master": "local"}}),
        "spec.spark.conf must not set spark.master or spark.app.name",
    ),
    (
        "spark-conf-sets-redaction",
        _set("spec.spark", {"conf": {"spark.sql.redaction.options.regex": "nothing"}}),
        "spec.spark.conf must not set spark.redaction.regex or spark.sql.redaction.options.regex",
    ),
    (
        "spark-conf-turns-off-authentication",
        _set("spec.spark", {"conf": {"spark.authenticate": "false"}}),
        "spec.spark.conf must not set spark.authenticate* or spark.network.crypto.* keys",
    ),
    (
        "spark-conf-turns-off-encryption",
        _set("spec.spark", {"conf": {"spark.network.crypto.enabled": "false"}}),
        "spec.spark.conf must not set spark.authenticate* or spark.network.crypto.* keys",
    ),
    (
        "executor-without-k8s",
        _set("spec.spark", {"executor": {"instances": 2}}),
        "spec.spark.executor needs a k8s:// spec.spark.master",
    ),
    (
        "reserved-env",
        _set("spec.env", [{"name": "FLOE_CONFIG", "value": "/x"}]),
        "env names starting with FLOE_ are reserved for the operator",
    ),
    (
        "env-value-and-source",
        _set("spec.env", [{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "an env entry takes value or valueFrom, not both",
    ),
    (
        "managed-pod-label",
        _set("spec.pod", {"labels": {"app.kubernetes.io/name": "x"}}),
        "spec.pod.labels must not set app.kubernetes.io/ or streaming.floe.dev/ labels",
    ),
    (
        "requests-above-limits",
        _set("spec.resources", {"requests": {"memory": "4Gi"}, "limits": {"memory": "2Gi"}}),
        "spec.resources.requests must not exceed spec.resources.limits",
    ),
    (
        "bad-quantity",
        _set("spec.resources", {"requests": {"cpu": "lots"}}),
        "a resource request must be a quantity like 500m, 1 or 2Gi",
    ),
    (
        "privileged-metrics-port",
        _set("spec.metrics", {"port": 80}),
        "spec.metrics.port in body should be greater than or equal to 1024",
    ),
    (
        "query-port-equals-metrics-port",
        _set("spec.metrics", {"port": 9400, "queryPort": 9400}),
        "metrics.queryPort must be 0 (no query endpoint) or a port from 1024 to 65535 other than metrics.port",
    ),
    (
        "privileged-query-port",
        _set("spec.metrics", {"queryPort": 443}),
        "metrics.queryPort must be 0 (no query endpoint) or a port from 1024 to 65535 other than metrics.port",
    ),
    ("name-too-long", _set("metadata.name", "a" * 60), "metadata.name must be at most 52 characters"),
    ("no-state", _set("spec.state", _DELETE), "spec.state: Required value"),
    # spec.offsetReset
    (
        "reset-timestamp-missing",
        _set("spec.offsetReset", {"id": "r1", "to": "timestamp"}),
        "spec.offsetReset.timestamp is required with to timestamp",
    ),
    (
        "reset-timestamp-not-a-time",
        _set("spec.offsetReset", {"id": "r1", "to": "timestamp", "timestamp": "yesterday"}),
        "spec.offsetReset.timestamp",
    ),
    (
        "reset-offsets-missing",
        _set("spec.offsetReset", {"id": "r1", "to": "offsets"}),
        "spec.offsetReset.offsets is required with to offsets",
    ),
    (
        "reset-unknown-target",
        _set("spec.offsetReset", {"id": "r1", "to": "beginning"}),
        'spec.offsetReset.to: Unsupported value: "beginning"',
    ),
    (
        "reset-foreign-topic",
        _set(
            "spec.offsetReset", {"id": "r1", "to": "offsets", "offsets": [{"topic": "x", "partition": 0, "offset": 1}]}
        ),
        "spec.offsetReset.offsets must name topics of spec.kafka.topics",
    ),
    (
        "reset-foreign-topics",
        _set("spec.offsetReset", {"id": "r1", "to": "latest", "topics": ["x"]}),
        "spec.offsetReset.topics must be topics of spec.kafka.topics",
    ),
    ("reset-no-id", _set("spec.offsetReset", {"to": "latest"}), "spec.offsetReset.id: Required value"),
    # spec.podTemplate
    (
        "template-app-command",
        _set("spec.podTemplate", {"spec": {"containers": [{"name": "app", "command": ["sh"]}]}}),
        'spec.podTemplate.spec.containers[0]: Invalid value: "object": spec.podTemplate.spec.containers: of the '
        "container named app (Floe's own) only volumeMounts, envFrom and securityContext may be set",
    ),
    (
        "template-config-mount",
        _set(
            "spec.podTemplate",
            {"spec": {"containers": [{"name": "app", "volumeMounts": [{"name": "x", "mountPath": "/etc/floe"}]}]}},
        ),
        "must not use the volumes config or tmp nor cover or sit in /etc/floe or /tmp",
    ),
    (
        "template-sidecar-without-image",
        _set("spec.podTemplate", {"spec": {"containers": [{"name": "proxy"}]}}),
        "spec.podTemplate.spec.containers needs an image for every sidecar",
    ),
    (
        "template-privileged-sidecar",
        _set(
            "spec.podTemplate",
            {"spec": {"containers": [{"name": "proxy", "image": "p", "securityContext": {"privileged": True}}]}},
        ),
        'spec.podTemplate.spec.containers[0].securityContext: Invalid value: "object": securityContext.privileged',
    ),
    (
        "template-capability",
        _set(
            "spec.podTemplate",
            {
                "spec": {
                    "initContainers": [
                        {"name": "init", "image": "p", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
                    ]
                }
            },
        ),
        "securityContext.capabilities.add may hold only NET_BIND_SERVICE",
    ),
    (
        "template-host-path",
        _set("spec.podTemplate", {"spec": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}),
        "spec.podTemplate.spec.volumes must not use hostPath",
    ),
    (
        "template-floe-volume-name",
        _set("spec.podTemplate", {"spec": {"volumes": [{"name": "config", "emptyDir": {}}]}}),
        "spec.podTemplate.spec.volumes must not be named config or tmp",
    ),
    (
        "template-init-named-app",
        _set("spec.podTemplate", {"spec": {"initContainers": [{"name": "app", "image": "p"}]}}),
        "spec.podTemplate.spec.initContainers must not be named app",
    ),
    (
        "template-run-as-root",
        _set("spec.podTemplate", {"spec": {"securityContext": {"runAsUser": 0}}}),
        'unknown field "spec.podTemplate.spec.securityContext.runAsUser"',
    ),
    (
        "template-floe-label",
        _set("spec.podTemplate", {"metadata": {"labels": {"streaming.floe.dev/app": "x"}}}),
        "spec.podTemplate.metadata.labels must not set app.kubernetes.io/ or streaming.floe.dev/ labels",
    ),
    ("restart-nonce-too-long", _set("spec.restartNonce", "x" * 200), "spec.restartNonce: Too long"),
    (
        "spark-ui-on-metrics-port",
        _set("spec.spark.ui", {"enabled": True, "port": 9400}),
        "spec.spark.ui.port must differ from spec.metrics.port and spec.metrics.queryPort",
    ),
    (
        "spark-ui-on-driver-port",
        _set("spec.spark.ui", {"enabled": True, "port": 7078}),
        "spec.spark.ui.port must not be 7078 or 7079",
    ),
    # The tenant boundary (docs/security.md): no other ServiceAccount's rights, no Spark setting
    # that changes pod shape or identity, nothing outside the restricted profile.
    (
        "k8s-master-with-service-account",
        _chain(
            _set("spec.spark.master", "k8s://https://10.0.0.1:6443"), _set("spec.pod.serviceAccountName", "default")
        ),
        'spec.pod.serviceAccountName: Invalid value: "object": spec.pod.serviceAccountName must not be set with '
        "a k8s:// spec.spark.master",
    ),
    (
        "spark-conf-executor-volume",
        _set("spec.spark.conf", {"spark.kubernetes.executor.volumes.hostPath.root.mount.path": "/host"}),
        'spec.spark.conf: Invalid value: "object": spec.spark.conf may set only these spark.kubernetes.* keys',
    ),
    (
        "spark-conf-service-account",
        _set("spec.spark.conf", {"spark.kubernetes.authenticate.driver.serviceAccountName": "admin"}),
        'spec.spark.conf: Invalid value: "object": spec.spark.conf may set only these spark.kubernetes.* keys',
    ),
    (
        "spark-conf-namespace",
        _set("spec.spark.conf", {"spark.kubernetes.namespace": "kube-system"}),
        'spec.spark.conf: Invalid value: "object": spec.spark.conf may set only these spark.kubernetes.* keys',
    ),
    (
        "spark-conf-executor-template",
        _set("spec.spark.conf", {"spark.kubernetes.executor.podTemplateFile": "/tmp/privileged.yaml"}),
        'spec.spark.conf: Invalid value: "object": spec.spark.conf may set only these spark.kubernetes.* keys',
    ),
    (
        "spark-java-options-spark-property",
        _set("spec.spark.conf", {"spark.executor.extraJavaOptions": "-XX:+UseG1GC -Dspark.kubernetes.namespace=x"}),
        'spec.spark.conf: Invalid value: "object": spec.spark.conf: spark.driver.extraJavaOptions, '
        "spark.executor.extraJavaOptions and their defaultJavaOptions must not hold -Dspark.* system properties",
    ),
    (
        "spark-java-options-quoted-property",
        _set("spec.spark.conf", {"spark.driver.extraJavaOptions": "-D'spark.redaction.regex=none'"}),
        "must not hold -Dspark.* system properties",
    ),
    (
        "template-apparmor-unconfined",
        _sidecar_security({"appArmorProfile": {"type": "Unconfined"}}),
        'spec.podTemplate.spec.containers[0].securityContext.appArmorProfile: Invalid value: "object": '
        "securityContext.appArmorProfile.type must be RuntimeDefault or Localhost",
    ),
    (
        "template-seccomp-unconfined",
        _sidecar_security({"seccompProfile": {"type": "Unconfined"}}),
        'spec.podTemplate.spec.containers[0].securityContext.seccompProfile: Invalid value: "object": '
        "securityContext.seccompProfile.type must be RuntimeDefault or Localhost",
    ),
    (
        "template-proc-mount-unmasked",
        _sidecar_security({"procMount": "Unmasked"}),
        'spec.podTemplate.spec.containers[0].securityContext.procMount: Invalid value: "string": '
        "securityContext.procMount must be Default",
    ),
    (
        "template-app-proc-mount-unmasked",
        _set(
            "spec.podTemplate",
            {"spec": {"containers": [{"name": "app", "securityContext": {"procMount": "Unmasked"}}]}},
        ),
        "spec.podTemplate.spec.containers[0].securityContext.procMount: Invalid value",
    ),
    (
        "template-se-linux-options",
        _sidecar_security({"seLinuxOptions": {"type": "spc_t"}}),
        'unknown field "spec.podTemplate.spec.containers[0].securityContext.seLinuxOptions"',
    ),
    (
        "template-init-escalation",
        _set(
            "spec.podTemplate",
            {
                "spec": {
                    "initContainers": [
                        {"name": "i", "image": "p", "securityContext": {"allowPrivilegeEscalation": True}}
                    ]
                }
            },
        ),
        'spec.podTemplate.spec.initContainers[0].securityContext: Invalid value: "object": '
        "securityContext.allowPrivilegeEscalation must not be true",
    ),
    (
        "template-sidecar-root",
        _sidecar_security({"runAsUser": 0}),
        'spec.podTemplate.spec.containers[0].securityContext: Invalid value: "object": '
        "securityContext must not run as root",
    ),
    (
        "pod-apparmor-annotation",
        _set("spec.pod.annotations", {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}),
        'spec.pod.annotations: Invalid value: "object": spec.pod.annotations must not set AppArmor or seccomp',
    ),
    (
        "template-seccomp-annotation",
        _set(
            "spec.podTemplate",
            {"metadata": {"annotations": {"container.seccomp.security.alpha.kubernetes.io/app": "unconfined"}}},
        ),
        'spec.podTemplate.metadata.annotations: Invalid value: "object": spec.podTemplate.metadata.annotations must '
        "not set AppArmor or seccomp",
    ),
]


def test_there_are_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_is_rejected(
    kube: Kubectl, namespace: str, change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    obj = copy.deepcopy(GOOD)
    obj["metadata"]["namespace"] = namespace
    change(obj)
    proc = kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert proc.returncode != 0, f"accepted: {json.dumps(obj['spec'])}"
    assert expected in proc.stderr, proc.stderr


def test_the_good_spec_is_accepted(kube: Kubectl, namespace: str) -> None:
    obj = copy.deepcopy(GOOD)
    obj["metadata"]["namespace"] = namespace
    kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj))


def test_what_the_boundary_allows_is_accepted(kube: Kubectl, namespace: str) -> None:
    """The allow-lists leave room for what an app legitimately sets: executor tuning, JVM flags,
    a sidecar that binds a low port under a confined profile."""
    obj = copy.deepcopy(GOOD)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["spark"] = {
        "master": "k8s://https://10.0.0.1:6443",
        "conf": {
            "spark.kubernetes.executor.request.cores": "500m",
            "spark.kubernetes.allocation.batch.size": "4",
            "spark.executor.extraJavaOptions": "-XX:+UseG1GC -Dlog4j2.level=warn",
            "spark.sql.shuffle.partitions": "8",
        },
    }
    obj["spec"]["pod"] = {"annotations": {"owner": "team-a"}}
    obj["spec"]["snapshots"] = {"location": "file:///snapshots/wc", "interval": "1h30m", "keep": 3,
                                "volume": {"claimName": "backups"}}
    obj["spec"]["podTemplate"] = {
        "spec": {
            "containers": [
                {
                    "name": "proxy",
                    "image": "p",
                    "securityContext": {
                        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                        "appArmorProfile": {"type": "RuntimeDefault"},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "proxy.json"},
                        "procMount": "Default",
                        "runAsUser": 1000,
                    },
                }
            ]
        }
    }
    kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj))


@pytest.mark.parametrize(
    ("consistency", "replication"),
    [
        ("ONE", {"strategy": "SimpleStrategy", "replicationFactor": 1}),
        ("ONE", {"strategy": "NetworkTopologyStrategy", "datacenters": {"dc1": 1}}),
        ("LOCAL_ONE", {"strategy": "NetworkTopologyStrategy", "datacenters": {"datacenter1": 1, "dc2": 3}}),
        ("QUORUM", {"strategy": "SimpleStrategy", "replicationFactor": 3}),
        ("LOCAL_QUORUM", {"strategy": "NetworkTopologyStrategy", "datacenters": {"datacenter1": 3, "dc2": 3}}),
    ],
    ids=["one-one-copy", "one-one-datacenter-copy", "local-one-one-local-copy", "quorum", "local-quorum"],
)
def test_levels_that_keep_the_fence_are_accepted(
    kube: Kubectl, namespace: str, consistency: str, replication: dict[str, Any]
) -> None:
    obj = copy.deepcopy(GOOD)
    obj["metadata"]["namespace"] = namespace
    _levels(consistency, replication)(obj)
    kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj))


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"spec": {"state": {"cassandra": {"keyspace": "other"}}}}, "spec.state.cassandra.keyspace is immutable"),
        (
            {"spec": {"state": {"stores": [{"name": "s", "type": "global"}]}}},
            "the type of a store is immutable; add a store with a new name instead",
        ),
    ],
    ids=["keyspace", "store-type"],
)
def test_immutable_fields(kube: Kubectl, namespace: str, patch: dict[str, Any], expected: str) -> None:
    obj = copy.deepcopy(GOOD)
    obj["metadata"] = {
        "name": f"immutable-{'ks' if 'cassandra' in json.dumps(patch) else 'store'}",
        "namespace": namespace,
    }
    obj["spec"]["state"]["stores"] = [{"name": "s", "type": "partitioned"}]
    kube.run("create", "-f", "-", stdin=yaml.safe_dump(obj))
    try:
        proc = kube.run(
            "patch",
            "streamingapp",
            obj["metadata"]["name"],
            "-n",
            namespace,
            "--type=merge",
            "-p",
            json.dumps(patch),
            check=False,
        )
        assert proc.returncode != 0
        assert expected in proc.stderr, proc.stderr
    finally:
        kube.run("delete", "streamingapp", obj["metadata"]["name"], "-n", namespace, "--wait=false")
