"""Typed view of a StreamingApp, so the rest of the operator never digs through raw dicts.

The CRD (crds/streamingapp.yaml) is the source of truth for field names, defaults and
bounds; the API server applies its defaults before the operator sees an object. The
defaults repeated here let the pure renderers work on hand-written specs in tests, and a
unit test keeps them equal to the CRD's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from floe_jobs import config
from floe_operator import appids
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

GROUP = "streaming.floe.dev"
VERSION = "v1alpha1"
PLURAL = "streamingapps"
KIND = "StreamingApp"
API_VERSION = f"{GROUP}/{VERSION}"
# The Kopf index of every StreamingApp's latest body by (namespace, name), kept by the reconciler's
# handlers and read by the lag loop too: one watch of the apps for both.
APPS_INDEX = "apps_idx"
FIELD_MANAGER = "floe-operator"
# `streaming.floe.dev/reconcile: paused` on a StreamingApp: the operator changes nothing of the
# app (children, Cassandra, query token, scale, offsets) until it is removed, and reports status.
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
RECONCILE_PAUSED = "paused"

StoreType = config.StoreType
IntOrString = int | str


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class JobSpec(_Model):
    entrypoint: str
    args: list[str] = Field(default_factory=list)


class SecretKeyRef(_Model):
    name: str
    key: str = "ca.crt"


class ClientCertSecretRef(_Model):
    name: str
    cert_key: str = "tls.crt"
    key_key: str = "tls.key"


class CredentialsSecretRef(_Model):
    name: str
    username_key: str = "username"
    password_key: str = "password"


class KafkaTls(_Model):
    verify_hostname: bool = True
    ca_secret_ref: SecretKeyRef | None = None
    client_cert_secret_ref: ClientCertSecretRef | None = None


class KafkaSasl(_Model):
    mechanism: config.SaslMechanism = "SCRAM-SHA-512"
    credentials_secret_ref: CredentialsSecretRef


class KafkaSecurity(_Model):
    protocol: config.SecurityProtocol = "PLAINTEXT"
    tls: KafkaTls | None = None
    sasl: KafkaSasl | None = None


class KafkaSpec(_Model):
    bootstrap_servers: str
    topics: list[str]
    output_topics: list[str] = Field(default_factory=list)
    consumer_group: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "latest"
    group_protocol: Literal["auto", "consumer", "classic"] = "auto"
    max_records_per_batch: int = 100000
    max_bytes_per_batch: int = 67108864
    spark_read_min_records: int | None = None
    repartition_rows_per_record: int | None = None
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    # Kafka client properties (floe_jobs.kafkaprops): the CRD refuses the keys Floe owns
    properties: dict[str, str] = Field(default_factory=dict)


class Replication(_Model):
    strategy: Literal["SimpleStrategy", "NetworkTopologyStrategy"] = "SimpleStrategy"
    replication_factor: int = 1
    datacenters: dict[str, int] = Field(default_factory=dict)


class CassandraTls(_Model):
    enabled: bool = False
    verify_hostname: bool = True
    ca_secret_ref: SecretKeyRef | None = None


class CassandraSpec(_Model):
    hosts: list[str]
    port: int = 9042
    local_datacenter: str = "datacenter1"
    keyspace: str
    replication: Replication = Field(default_factory=Replication)
    credentials_secret_ref: CredentialsSecretRef | None = None
    tls: CassandraTls = Field(default_factory=CassandraTls)
    consistency: str | None = None
    serial_consistency: str | None = None
    request_timeout_seconds: float | None = None
    connect_timeout_seconds: float | None = None
    protocol_version: int | None = None

    def tuning(self) -> dict[str, Any]:
        """The session settings the spec sets, under the runtime's names (`floe_jobs.config`):
        the same for the replicas' floe.yaml and the operator's own session. Unset ones are left
        out, so both keep the store library's defaults."""
        given = {
            "consistency": self.consistency,
            "serial_consistency": self.serial_consistency,
            "request_timeout": self.request_timeout_seconds,
            "connect_timeout": self.connect_timeout_seconds,
            "protocol_version": self.protocol_version,
        }
        return {name: value for name, value in given.items() if value is not None}


class StoreSpec(_Model):
    name: str
    type: StoreType = "partitioned"
    ttl_seconds: int | None = None
    table_options: dict[str, Any] | None = None


class StateSpec(_Model):
    cassandra: CassandraSpec
    stores: list[StoreSpec] = Field(default_factory=list)
    deletion_policy: Literal["Retain", "Delete"] = "Retain"
    cache_max_keys: int | None = None


class SparkDriver(_Model):
    cores: int = 1
    memory: str = "1g"


class SparkExecutor(_Model):
    instances: int = 2
    cores: int = 1
    memory: str = "1g"


class SparkUI(_Model):
    """spec.spark.ui: Spark's web UI, served by every replica and reached through one Service."""

    enabled: bool = False
    port: int = 4040


class SparkSpec(_Model):
    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)
    driver: SparkDriver = Field(default_factory=SparkDriver)
    executor: SparkExecutor | None = None
    driver_batch_max_records: int | None = None
    ui: SparkUI = Field(default_factory=SparkUI)

    @property
    def on_kubernetes(self) -> bool:
        """Whether each driver starts executor pods of its own."""
        return self.master.startswith("k8s://")


class ShutdownSpec(_Model):
    termination_grace_period_seconds: int = 60
    pre_stop_delay_seconds: int = 0
    drain_timeout_seconds: int = 30
    leave_group_on_close: bool = True
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 1000


class RolloutSpec(_Model):
    min_ready_seconds: int = 10
    max_surge: IntOrString = 1
    max_unavailable: IntOrString = 0
    # the Deployment's deadline: a rollout with no progress for this long is failed
    progress_deadline_seconds: int = 600
    # a new generation whose pods fail runs the last Ready generation's spec again (`rollback`)
    auto_rollback: bool = False
    # snapshot: a new image or job rolls out only once a snapshot of the running one succeeded
    upgrade_mode: Literal["direct", "snapshot"] = "direct"


class AutoscalingSpec(_Model):
    mode: Literal["Native", "HPA", "KEDA"] = "Native"
    min_replicas: int = 1
    max_replicas: int
    catch_up_seconds: int = 300
    target_utilization: int = 70
    allow_idle: bool = False
    stabilization_window_seconds: int = 300
    # KEDA mode: the replicas KEDA scales to once its Kafka scaler failed this many times in a row
    fallback_replicas: int | None = None
    fallback_failure_threshold: int = 3

    @property
    def keda_fallback_replicas(self) -> int:
        """fallbackReplicas, else minReplicas but at least 1: a fallback to none would stop the
        app for as long as KEDA cannot read the lag."""
        return self.fallback_replicas if self.fallback_replicas is not None else max(self.min_replicas, 1)


def _default_resources() -> dict[str, dict[str, IntOrString]]:
    return {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}


class PodSpec(_Model):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    service_account_name: str | None = None
    image_pull_secrets: list[dict[str, str]] = Field(default_factory=list)
    priority_class_name: str | None = None
    run_as_user: int = 185


class ServiceMonitorSpec(_Model):
    enabled: bool = False
    interval: str = "30s"
    labels: dict[str, str] = Field(default_factory=dict)


class MetricsSpec(_Model):
    port: int = 9400
    query_port: int = 9401
    stall_seconds: int = 300
    liveness_period_seconds: int = 10
    liveness_failure_threshold: int = 6
    service_monitor: ServiceMonitorSpec = Field(default_factory=ServiceMonitorSpec)


class LoggingSpec(_Model):
    format: Literal["text", "json"] = "text"


# The namespace the Prometheus Operator's and most monitoring charts install into; the API server
# labels every namespace with its own name, so this selects it without anyone labelling it.
MONITORING_NAMESPACE_LABELS = {"kubernetes.io/metadata.name": "monitoring"}


class NetworkPolicySpec(_Model):
    """Who may reach the app's pods (`render.network_policy`): the app's own pods on any port,
    the monitoring namespaces on the metrics port, the query clients on the query port."""

    enabled: bool = True
    metrics_namespace_labels: dict[str, str] = Field(default_factory=lambda: dict(MONITORING_NAMESPACE_LABELS))
    # None: the app's own namespace only
    query_namespace_labels: dict[str, str] | None = None


# --- platform controls: suspend, restart, offset reset, pod template ---------------------


class OffsetPosition(_Model):
    """One explicit position of spec.offsetReset (to: offsets)."""

    topic: str
    partition: int
    offset: int


class OffsetResetSpec(_Model):
    """A one-shot move of the app's committed input offsets; runs once per `id`."""

    id: str
    to: Literal["earliest", "latest", "timestamp", "offsets"]
    timestamp: str | None = None
    topics: list[str] = Field(default_factory=list)
    offsets: list[OffsetPosition] = Field(default_factory=list)


class PodTemplateMeta(_Model):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class PodTemplateSpecPart(_Model):
    """The parts of a PodSpec a user may add to Floe's (see `render.merge_pod_template`)."""

    containers: list[dict[str, Any]] = Field(default_factory=list)
    init_containers: list[dict[str, Any]] = Field(default_factory=list)
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    topology_spread_constraints: list[dict[str, Any]] = Field(default_factory=list)
    security_context: dict[str, Any] = Field(default_factory=dict)


class PodTemplate(_Model):
    metadata: PodTemplateMeta = Field(default_factory=PodTemplateMeta)
    spec: PodTemplateSpecPart = Field(default_factory=PodTemplateSpecPart)


class SnapshotVolume(_Model):
    """spec.volume: the PersistentVolumeClaim a file:// location lies on (and nothing else: any
    other volume source would let whoever may create a snapshot mount what they may not)."""

    claim_name: str
    mount_path: str = "/snapshots"


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def duration_seconds(text: str) -> float:
    """Seconds of a duration as the CRD admits it (e.g. 30m, 6h, 1h30m, 1.5h): spec.snapshots.interval."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


class ScheduledSnapshots(_Model):
    """spec.snapshots: snapshots of the app taken on a schedule, the newest `keep` kept
    (`snapshotschedule`)."""

    location: str
    # None: no periodic snapshots (only those before an upgrade, with upgradeMode snapshot)
    interval: str | None = None
    volume: SnapshotVolume | None = None
    keep: int = 7
    writers: dict[str, str] = Field(default_factory=dict)
    settle_timeout_seconds: int = 120
    active_deadline_seconds: int = 3600


class RestoreFrom(_Model):
    """spec.restoreFrom: the snapshot a new app starts from (`restorejob`)."""

    location: str
    volume: SnapshotVolume | None = None


class StateRestore(_Model):
    """spec.stateRestore: a snapshot restored into this app in place, once per `id` (`restorejob`)."""

    id: str
    location: str
    volume: SnapshotVolume | None = None


class AppSpec(_Model):
    image: str
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    job: JobSpec
    replicas: int = 1
    kafka: KafkaSpec
    state: StateSpec
    spark: SparkSpec = Field(default_factory=SparkSpec)
    shutdown: ShutdownSpec = Field(default_factory=ShutdownSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    autoscaling: AutoscalingSpec | None = None
    resources: dict[str, dict[str, IntOrString]] = Field(default_factory=_default_resources)
    env: list[dict[str, Any]] = Field(default_factory=list)
    pod: PodSpec = Field(default_factory=PodSpec)
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    network_policy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec)
    # a record its stage keeps failing on: its partition stops, or it is dead-lettered
    errors: Literal["stop", "deadLetter"] = "stop"
    # platform controls
    suspend: bool = False
    restart_nonce: str | None = None
    offset_reset: OffsetResetSpec | None = None
    pod_template: PodTemplate = Field(default_factory=PodTemplate)
    snapshots: ScheduledSnapshots | None = None
    restore_from: RestoreFrom | None = None
    state_restore: StateRestore | None = None

    @property
    def running_replicas(self) -> int:
        """The replicas the Deployment runs: none while suspended, else spec.replicas."""
        return 0 if self.suspend else self.replicas


class StreamingApp(_Model):
    """One StreamingApp: identity, generation, spec and the status last written."""

    name: str
    namespace: str
    uid: str
    generation: int = 1
    # metadata.creationTimestamp (RFC 3339, so strings order as times): the elder of two apps
    # that would write one store table keeps it
    created: str = ""
    spec: AppSpec
    status: dict[str, Any] = Field(default_factory=dict)
    # The app id its own ConfigMap names (what its replicas run under), when the reconcile found
    # one and status records none yet (`appids.running_id`); never read from the body.
    running_id: str | None = None
    # the value of its RECONCILE_ANNOTATION, when it has one
    reconcile_annotation: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> StreamingApp:
        """Build from a raw object as the API server returns it (raises pydantic.ValidationError)."""
        meta = body.get("metadata", {})
        return cls(
            **_identity(body),
            created=str(meta.get("creationTimestamp") or ""),
            spec=AppSpec.model_validate(dict(body.get("spec") or {})),
            reconcile_annotation=(meta.get("annotations") or {}).get(RECONCILE_ANNOTATION),
        )

    @property
    def app_id(self) -> str:
        """The app's id for the runtime (offsets rows, dead-letter and repartition topics, Spark's
        app name): the one recorded in status.appId, else the one its replicas run under, else as
        `appids.app_id_of` decides it. A DNS label, and no two apps share one (`appids`)."""
        if self.running_id is not None and not appids.valid(self.status.get("appId")):
            return self.running_id
        return appids.app_id_of(self.namespace, self.name, self.status)

    @property
    def reconcile_paused(self) -> bool:
        """The operator leaves the app as it is: `streaming.floe.dev/reconcile: paused`."""
        return self.reconcile_annotation == RECONCILE_PAUSED

    @property
    def restoring_in_place(self) -> bool:
        """Whether status.stateRestore or status.rollbackRestore says a restore in place holds the
        pods at zero now, waiting for them to stop or with its Job under way (`restorejob`):
        nothing may scale the app."""
        return any((self.status.get(field) or {}).get("phase") in ("Waiting", "Pending", "Running")
                   for field in ("stateRestore", "rollbackRestore"))

    @property
    def consumer_group(self) -> str:
        return self.spec.kafka.consumer_group or f"floe.{self.namespace}.{self.name}"


_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def referenced_secrets(spec: AppSpec) -> dict[str, list[str]]:
    """Secret name → keys the app's pods need; the operator checks they exist before a rollout."""
    refs: dict[str, list[str]] = {}

    def add(name: str, key: str) -> None:
        refs.setdefault(name, [])
        if key not in refs[name]:
            refs[name].append(key)

    sec = spec.kafka.security
    if sec.sasl is not None:
        cred = sec.sasl.credentials_secret_ref
        add(cred.name, cred.username_key)
        add(cred.name, cred.password_key)
    if sec.tls is not None:
        if sec.tls.ca_secret_ref is not None:
            add(sec.tls.ca_secret_ref.name, sec.tls.ca_secret_ref.key)
        if sec.tls.client_cert_secret_ref is not None:
            cc = sec.tls.client_cert_secret_ref
            add(cc.name, cc.cert_key)
            add(cc.name, cc.key_key)
    cass = spec.state.cassandra
    if cass.credentials_secret_ref is not None:
        add(cass.credentials_secret_ref.name, cass.credentials_secret_ref.username_key)
        add(cass.credentials_secret_ref.name, cass.credentials_secret_ref.password_key)
    if cass.tls.ca_secret_ref is not None:
        add(cass.tls.ca_secret_ref.name, cass.tls.ca_secret_ref.key)
    for entry in spec.env:
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and not ref.get("optional", False):
            add(ref["name"], str(ref.get("key", "")))
    # Secrets the pod template mounts or loads whole: they must exist, whatever their keys.
    for source in _template_env_from(spec):
        ref = source.get("secretRef")
        if isinstance(ref, dict) and isinstance(ref.get("name"), str) and not ref.get("optional", False):
            refs.setdefault(ref["name"], [])
    for volume in spec.pod_template.spec.volumes:
        ref = volume.get("secret")
        if isinstance(ref, dict) and isinstance(ref.get("secretName"), str) and not ref.get("optional", False):
            refs.setdefault(ref["secretName"], [])
    return {name: keys for name, keys in refs.items() if _SECRET_NAME.match(name)}


def _template_env_from(spec: AppSpec) -> list[dict[str, Any]]:
    """envFrom entries of every container of spec.podTemplate (Floe's own and the sidecars)."""
    part = spec.pod_template.spec
    return [e for c in (*part.containers, *part.init_containers) for e in c.get("envFrom") or [] if isinstance(e, dict)]


def indexed_bodies(index: Mapping[tuple[str, str], Any] | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    """The latest body of every app in the apps index (a Kopf index holds a store of bodies per key)."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for key, store in index.items() if index is not None else []:
        for body in store:
            found[key] = body
            break
    return found


# --- StreamingAppSnapshot: one consistent cut of an app, taken by a Job -------------------

SNAPSHOT_KIND = "StreamingAppSnapshot"
SNAPSHOT_PLURAL = "streamingappsnapshots"


class SnapshotSpec(_Model):
    app: str
    location: str
    volume: SnapshotVolume | None = None
    writers: dict[str, str] = Field(default_factory=dict)
    settle_timeout_seconds: int = 120
    active_deadline_seconds: int = 3600
    # what deleting the resource does to the data at `location`
    deletion_policy: Literal["Retain", "Delete"] = "Retain"


class StreamingAppSnapshot(_Model):
    """One StreamingAppSnapshot: identity, the immutable spec and the status last written."""

    name: str
    namespace: str
    uid: str
    generation: int = 1
    spec: SnapshotSpec
    status: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> StreamingAppSnapshot:
        return cls(**_identity(body), spec=SnapshotSpec.model_validate(dict(body.get("spec") or {})))


def _identity(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every Floe resource's model reads from an object's metadata, and its status."""
    meta = body.get("metadata", {})
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta.get("uid", ""),
        "generation": meta.get("generation", 1),
        "status": dict(body.get("status") or {}),
    }
