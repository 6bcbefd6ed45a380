"""Pure builders of the autoscaler children for spec.autoscaling.mode HPA and KEDA.

Both target the StreamingApp itself through its scale subresource (not the Deployment), so
whichever autoscaler runs, spec.replicas stays the one number the reconcile rolls out.

The unit of lag both use is one full micro-batch per replica: a replica with more than
`spec.kafka.maxRecordsPerBatch` records queued is behind, so the target is
`AverageValue = maxRecordsPerBatch` of summed lag per replica. No new field is needed and
the threshold follows the batch size the app is tuned for.

- HPA (autoscaling/v2): an External metric `floe_consumergroup_sum_lag` selected by the
  app's label, served by a metrics adapter (e.g. prometheus-adapter) from the operator's
  /metrics. maxReplicas is capped at the input partitions unless allowIdle.
- KEDA (keda.sh/v1alpha1 ScaledObject): KEDA's own Kafka trigger on the app's consumer
  group (the runtime commits to the group after Cassandra), with a TriggerAuthentication
  pointing at the same Secrets as the pods when the cluster needs credentials. Rendered
  only when KEDA's CRD is installed. Its `fallback` (spec.autoscaling.fallbackReplicas and
  fallbackFailureThreshold) holds the app at a known size while KEDA cannot read the lag:
  KEDA then feeds the HPA the target times the fallback replicas, which works only for a trigger whose
  metric is an AverageValue, as the Kafka trigger's is by default (no metricType is set).

A suspended app (spec.suspend) has no HPA (it is removed, and made again on resume) and a
paused ScaledObject (`autoscaling.keda.sh/paused: "true"`, which keeps KEDA from writing
replicas), so no autoscaler undoes the suspension.

Scale-down behaviour mirrors the native autoscaler: stabilizationWindowSeconds, then at
most half the replicas per minute; scale-up is immediate, at most doubling per 30 s.
"""

from __future__ import annotations

from typing import Any

from floe_operator import model, render

Manifest = dict[str, Any]

KEDA_CRD = "scaledobjects.keda.sh"
HPA_API = "autoscaling/v2"
KEDA_API = "keda.sh/v1alpha1"
LAG_METRIC = "floe_consumergroup_sum_lag"
POLLING_SECONDS = 15
KEDA_PAUSED = "autoscaling.keda.sh/paused"

# Kinds of the autoscaler children an app may own, to remove those the spec no longer asks for.
CHILD_KINDS: tuple[tuple[str, str], ...] = (
    (HPA_API, "HorizontalPodAutoscaler"),
    (KEDA_API, "ScaledObject"),
    (KEDA_API, "TriggerAuthentication"),
)

_SASL = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}


def hpa_name(app: model.StreamingApp) -> str:
    return app.name


def scaled_object_name(app: model.StreamingApp) -> str:
    return app.name


def trigger_auth_name(app: model.StreamingApp) -> str:
    return f"{app.name}-kafka"


def lag_threshold(app: model.StreamingApp) -> int:
    """Summed lag per replica the HPA and KEDA aim for: one full batch."""
    return app.spec.kafka.max_records_per_batch


def quantity(value: int) -> str:
    """An integer in the API server's canonical quantity form (20000 -> "20k"), so live equals desired."""
    suffixes = ("", "k", "M", "G", "T", "P", "E")
    exp = 0
    while value and value % 1000 == 0 and exp < len(suffixes) - 1:
        value //= 1000
        exp += 1
    return f"{value}{suffixes[exp]}"


def max_replicas(app: model.StreamingApp, partitions: int | None) -> int:
    auto = app.spec.autoscaling
    assert auto is not None
    if auto.allow_idle or not partitions:
        return auto.max_replicas
    return max(1, min(auto.max_replicas, partitions))


def _target_ref(app: model.StreamingApp) -> dict[str, str]:
    return {"apiVersion": model.API_VERSION, "kind": model.KIND, "name": app.name}


def behavior(app: model.StreamingApp) -> dict[str, Any]:
    auto = app.spec.autoscaling
    assert auto is not None
    return {
        "scaleDown": {
            "stabilizationWindowSeconds": auto.stabilization_window_seconds,
            "selectPolicy": "Min",
            "policies": [
                {"type": "Percent", "value": 50, "periodSeconds": 60},
                {"type": "Pods", "value": 1, "periodSeconds": 60},
            ],
        },
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 30},
                {"type": "Pods", "value": 2, "periodSeconds": 30},
            ],
        },
    }


def hpa(app: model.StreamingApp, *, partitions: int | None = None) -> Manifest:
    """An autoscaling/v2 HPA on the app's summed lag (External metric, AverageValue per replica)."""
    auto = app.spec.autoscaling
    assert auto is not None
    top = max_replicas(app, partitions)
    return {
        "apiVersion": HPA_API,
        "kind": "HorizontalPodAutoscaler",
        "metadata": render.object_meta(app, hpa_name(app)),
        "spec": {
            "scaleTargetRef": _target_ref(app),
            # The HPA cannot go below one replica (without the HPAScaleToZero feature gate).
            "minReplicas": min(max(1, auto.min_replicas), top),
            "maxReplicas": top,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": LAG_METRIC,
                            "selector": {"matchLabels": {"namespace": app.namespace, "app": app.name}},
                        },
                        "target": {"type": "AverageValue", "averageValue": quantity(lag_threshold(app))},
                    },
                }
            ],
            "behavior": behavior(app),
        },
    }


def _needs_auth(app: model.StreamingApp) -> bool:
    sec = app.spec.kafka.security
    tls_refs = sec.tls is not None and (sec.tls.ca_secret_ref is not None or sec.tls.client_cert_secret_ref is not None)
    return sec.sasl is not None or tls_refs


def trigger_authentication(app: model.StreamingApp) -> Manifest:
    """KEDA's view of the Kafka credentials: the same Secrets and keys the pods mount."""
    sec = app.spec.kafka.security
    refs: list[dict[str, str]] = []
    if sec.sasl is not None:
        cred = sec.sasl.credentials_secret_ref
        refs.append({"parameter": "username", "name": cred.name, "key": cred.username_key})
        refs.append({"parameter": "password", "name": cred.name, "key": cred.password_key})
    if sec.tls is not None:
        if sec.tls.ca_secret_ref is not None:
            refs.append({"parameter": "ca", "name": sec.tls.ca_secret_ref.name, "key": sec.tls.ca_secret_ref.key})
        if sec.tls.client_cert_secret_ref is not None:
            cc = sec.tls.client_cert_secret_ref
            refs.append({"parameter": "cert", "name": cc.name, "key": cc.cert_key})
            refs.append({"parameter": "key", "name": cc.name, "key": cc.key_key})
    return {
        "apiVersion": KEDA_API,
        "kind": "TriggerAuthentication",
        "metadata": render.object_meta(app, trigger_auth_name(app)),
        "spec": {"secretTargetRef": refs},
    }


def scaled_object(app: model.StreamingApp) -> Manifest:
    """A KEDA ScaledObject with the Kafka trigger on the app's consumer group."""
    auto = app.spec.autoscaling
    assert auto is not None
    kafka = app.spec.kafka
    metadata: dict[str, str] = {
        "bootstrapServers": kafka.bootstrap_servers,
        "consumerGroup": app.consumer_group,
        "lagThreshold": str(lag_threshold(app)),
        "offsetResetPolicy": kafka.starting_offsets,
        "allowIdleConsumers": "true" if auto.allow_idle else "false",
    }
    if len(kafka.topics) == 1:
        # With several topics KEDA sums the lag of every topic the group has committed on.
        metadata["topic"] = kafka.topics[0]
    sec = kafka.security
    if sec.sasl is not None:
        metadata["sasl"] = _SASL[sec.sasl.mechanism]
    if sec.protocol in ("SSL", "SASL_SSL"):
        metadata["tls"] = "enable"
    trigger: dict[str, Any] = {"type": "kafka", "name": "lag", "metadata": metadata}
    if _needs_auth(app):
        trigger["authenticationRef"] = {"name": trigger_auth_name(app)}
    meta = render.object_meta(app, scaled_object_name(app))
    if app.spec.suspend:
        meta["annotations"] = {KEDA_PAUSED: "true"}
    return {
        "apiVersion": KEDA_API,
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": _target_ref(app),
            "pollingInterval": POLLING_SECONDS,
            "cooldownPeriod": auto.stabilization_window_seconds,
            "minReplicaCount": auto.min_replicas,
            "maxReplicaCount": auto.max_replicas,
            "fallback": {"failureThreshold": auto.fallback_failure_threshold, "replicas": auto.keda_fallback_replicas},
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior(app)}},
            "triggers": [trigger],
        },
    }


def wants_keda(app: model.StreamingApp) -> bool:
    """Whether the spec asks for KEDA (then the caller checks that KEDA's CRD is installed)."""
    return app.spec.autoscaling is not None and app.spec.autoscaling.mode == "KEDA"


def children(app: model.StreamingApp, *, keda_available: bool, partitions: int | None = None) -> list[Manifest]:
    """The autoscaler children the spec asks for, hash-stamped like every other child (none for Native)."""
    auto = app.spec.autoscaling
    if auto is None or auto.mode == "Native":
        return []
    if auto.mode == "HPA":
        return [] if app.spec.suspend else [render.stamp(hpa(app, partitions=partitions))]
    if not keda_available:
        return []
    objects = [trigger_authentication(app)] if _needs_auth(app) else []
    objects.append(scaled_object(app))
    return [render.stamp(o) for o in objects]


# (apiVersion, kind, name) of every autoscaler child an app may own, to remove those the spec no longer asks for.
def candidates(app: model.StreamingApp) -> list[tuple[str, str, str]]:
    return [
        (HPA_API, "HorizontalPodAutoscaler", hpa_name(app)),
        (KEDA_API, "ScaledObject", scaled_object_name(app)),
        (KEDA_API, "TriggerAuthentication", trigger_auth_name(app)),
    ]
