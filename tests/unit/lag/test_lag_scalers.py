"""The HPA and KEDA renderers: what they say, and that it validates against the schemas.

The HPA is checked with kubernetes-validate (strict: unknown fields are errors). The KEDA
objects are checked against the structural schema in keda-crds.yaml (written from the
fields KEDA documents) with unknown fields forbidden; the integration test applies both to
the API server.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from floe_operator import model, render
from floe_operator.lag import scalers

HERE = Path(__file__).parent
K8S_VERSION = "1.34.0"


def app(**autoscaling: Any) -> model.StreamingApp:
    kafka: dict[str, Any] = autoscaling.pop("kafka", {})
    body = {
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"], "maxRecordsPerBatch": 20000, **kafka},
            "state": {"cassandra": {"hosts": ["cassandra"], "keyspace": "shop"}},
            "autoscaling": {"maxReplicas": 20, **autoscaling},
        },
    }
    return model.StreamingApp.from_body(body)


def strict(schema: Any) -> Any:
    """The CRD schema as JSON Schema with unknown fields forbidden where the schema lists fields."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node.setdefault("additionalProperties", False)
            for value in list(node.values()):
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def keda_schemas() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((HERE / "keda-crds.yaml").read_text()))
    return {d["spec"]["names"]["kind"]: strict(d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) for d in docs}


def test_native_renders_nothing_and_hpa_mode_one_hpa() -> None:
    assert scalers.children(app(mode="Native"), keda_available=True) == []
    objs = scalers.children(app(mode="HPA"), keda_available=False, partitions=12)
    assert [o["kind"] for o in objs] == ["HorizontalPodAutoscaler"]
    assert render.APPLIED_HASH in objs[0]["metadata"]["annotations"]


def test_hpa_targets_the_app_on_the_external_lag_metric_and_validates() -> None:
    hpa = scalers.hpa(app(mode="HPA", minReplicas=0, stabilizationWindowSeconds=600), partitions=12)
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "streaming.floe.dev/v1alpha1",
        "kind": "StreamingApp",
        "name": "orders",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 12)  # capped at partitions; HPA floor is 1
    metric = spec["metrics"][0]["external"]
    assert metric["metric"] == {
        "name": "floe_consumergroup_sum_lag",
        "selector": {"matchLabels": {"namespace": "shop", "app": "orders"}},
    }
    assert metric["target"] == {"type": "AverageValue", "averageValue": "20k"}
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert hpa["metadata"]["ownerReferences"][0]["kind"] == "StreamingApp"
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    # allowIdle lifts the partition cap
    assert scalers.hpa(app(mode="HPA", allowIdle=True), partitions=12)["spec"]["maxReplicas"] == 20


def test_quantities_are_canonical() -> None:
    assert [scalers.quantity(v) for v in (0, 1500, 20000, 100000, 1000000, 2500000)] == [
        "0",
        "1500",
        "20k",
        "100k",
        "1M",
        "2500k",
    ]


def test_keda_only_when_its_crd_exists() -> None:
    assert scalers.children(app(mode="KEDA"), keda_available=False) == []
    objs = scalers.children(app(mode="KEDA"), keda_available=True)
    assert [o["kind"] for o in objs] == ["ScaledObject"]


def test_scaled_object_has_the_kafka_trigger_and_validates() -> None:
    so = scalers.scaled_object(app(mode="KEDA", minReplicas=0, allowIdle=False, kafka={"startingOffsets": "earliest"}))
    spec = so["spec"]
    assert spec["scaleTargetRef"]["kind"] == "StreamingApp"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 20)
    trigger = spec["triggers"][0]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"] == {
        "bootstrapServers": "kafka:9092",
        "consumerGroup": "floe.shop.orders",
        "topic": "orders",
        "lagThreshold": "20000",
        "offsetResetPolicy": "earliest",
        "allowIdleConsumers": "false",
    }
    assert "authenticationRef" not in trigger
    jsonschema.validate(so, keda_schemas()["ScaledObject"])


def test_the_scaled_object_falls_back_to_min_replicas_after_three_failures_by_default() -> None:
    so = scalers.scaled_object(app(mode="KEDA", minReplicas=2))
    assert so["spec"]["fallback"] == {"failureThreshold": 3, "replicas": 2}
    # KEDA's fallback works only on an AverageValue metric: the trigger keeps KEDA's default type
    assert "metricType" not in so["spec"]["triggers"][0]
    jsonschema.validate(so, keda_schemas()["ScaledObject"])


def test_the_fallback_is_never_zero_replicas_when_min_replicas_is() -> None:
    so = scalers.scaled_object(app(mode="KEDA", minReplicas=0))
    assert so["spec"]["fallback"] == {"failureThreshold": 3, "replicas": 1}


def test_the_fallback_follows_the_spec() -> None:
    so = scalers.scaled_object(app(mode="KEDA", minReplicas=1, fallbackReplicas=4, fallbackFailureThreshold=6))
    assert so["spec"]["fallback"] == {"failureThreshold": 6, "replicas": 4}
    jsonschema.validate(so, keda_schemas()["ScaledObject"])


def test_secured_kafka_gets_a_trigger_authentication_on_the_same_secrets() -> None:
    security = {
        "protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"name": "kafka-user"}},
        "tls": {"caSecretRef": {"name": "kafka-ca"}},
    }
    objs = scalers.children(app(mode="KEDA", kafka={"security": security, "topics": ["a", "b"]}), keda_available=True)
    auth, so = objs
    assert auth["kind"] == "TriggerAuthentication"
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "username", "name": "kafka-user", "key": "username"},
        {"parameter": "password", "name": "kafka-user", "key": "password"},
        {"parameter": "ca", "name": "kafka-ca", "key": "ca.crt"},
    ]
    meta = so["spec"]["triggers"][0]["metadata"]
    assert (meta["sasl"], meta["tls"]) == ("scram_sha512", "enable")
    assert "topic" not in meta  # several topics: KEDA sums every topic of the group
    assert so["spec"]["triggers"][0]["authenticationRef"] == {"name": "orders-kafka"}
    schemas = keda_schemas()
    jsonschema.validate(auth, schemas["TriggerAuthentication"])
    jsonschema.validate(so, schemas["ScaledObject"])


def test_the_strict_schema_catches_a_misspelt_field() -> None:
    so = scalers.scaled_object(app(mode="KEDA"))
    so["spec"]["maxReplicas"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(so, keda_schemas()["ScaledObject"])
