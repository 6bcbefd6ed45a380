"""Pure builders of every object a StreamingApp owns, and of the job's configuration.

Nothing here does I/O or imports the Kubernetes client: each function maps the typed app
(plus facts handed in) to plain dicts, so the golden-file tests pin the exact output and a
change to a child is a reviewable diff. Names are deterministic and every child carries an
owner reference to its app, so the garbage collector removes it with the app.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any, TypedDict

import yaml
from floe_jobs import config
from floe_operator import model, podtemplate

FIELD_MANAGER = model.FIELD_MANAGER
APP_LABEL = f"{model.GROUP}/app"
APPLIED_HASH = f"{model.GROUP}/applied-hash"
CONFIG_HASH = f"{model.GROUP}/config-hash"
# Digest of the versions of the Secrets the pods read: a rotated credential rolls the pods.
SECRETS_HASH = f"{model.GROUP}/secrets-hash"
# spec.restartNonce on the pod template: a new value rolls the pods, and changes nothing else.
RESTART_NONCE = f"{model.GROUP}/restart-nonce"
MANAGED_BY = "app.kubernetes.io/managed-by"

CONFIG_DIR = "/etc/floe"
CONFIG_FILE = "floe.yaml"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_FILE}"
CONTAINER = "app"
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
# The executor pods' template (k8s:// master): a second file of the ConfigMap, which the driver reads.
EXECUTOR_TEMPLATE_FILE = "executor-pod.yaml"
EXECUTOR_TEMPLATE_PATH = f"{CONFIG_DIR}/{EXECUTOR_TEMPLATE_FILE}"
EXECUTOR_CONTAINER = "executor"
# Marks an app's executor pods. They never carry the app's selector label: the Deployment, the
# Services, the PodDisruptionBudget and the scale subresource count drivers only.
EXECUTOR_OF = f"{model.GROUP}/executor-of"

Manifest = dict[str, Any]


class Process(TypedDict):
    """How the runtime is started: the pod's container and a local run use exactly this."""

    command: list[str]
    args: list[str]
    env: list[dict[str, Any]]


# Names of children. Kept short enough for the 52-character app names the CRD allows.


def config_map_name(app: model.StreamingApp) -> str:
    return f"{app.name}-config"


def deployment_name(app: model.StreamingApp) -> str:
    return app.name


def service_name(app: model.StreamingApp) -> str:
    return app.name


def driver_service_name(app: model.StreamingApp) -> str:
    return f"{app.name}-driver"


def spark_ui_service_name(app: model.StreamingApp) -> str:
    return f"{app.name}-spark-ui"


def spark_service_account_name(app: model.StreamingApp) -> str:
    return f"{app.name}-spark"


def selector_labels(app: model.StreamingApp) -> dict[str, str]:
    """Labels that pick the app's pods; part of the Deployment's immutable selector."""
    return {APP_LABEL: app.name}


def label_selector(app: model.StreamingApp) -> str:
    """The selector in string form, for status.labelSelector and the scale subresource."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(app).items()))


def common_labels(app: model.StreamingApp) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": app.name,
        "app.kubernetes.io/instance": app.name,
        "app.kubernetes.io/component": "streaming-app",
        "app.kubernetes.io/part-of": "floe",
        MANAGED_BY: FIELD_MANAGER,
        **selector_labels(app),
    }


def owner_reference(app: model.StreamingApp) -> dict[str, Any]:
    return controller_reference(model.KIND, app.name, app.uid)


def controller_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """An owner reference to a Floe resource that controls the child: the garbage collector
    removes the child with it, and blocks the owner's foreground deletion until it has."""
    return {
        "apiVersion": model.API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(app: model.StreamingApp, name: str, *, labels: Mapping[str, str] | None = None) -> Manifest:
    """The metadata of every child: its deterministic name, the app's namespace and labels, and
    the owner reference that lets the garbage collector remove it with the app."""
    return {
        "name": name,
        "namespace": app.namespace,
        "labels": dict(labels) if labels is not None else common_labels(app),
        "ownerReferences": [owner_reference(app)],
    }


# The job's configuration: the one mapping from the spec to what the runtime reads.


def job_config(app: model.StreamingApp) -> dict[str, Any]:
    """The runtime's configuration (`floe_jobs.config`), mounted as floe.yaml; never a secret.

    Keys: config_schema, optional_keys (the dispensable settings rendered, which a runtime of an
    older schema may leave out), app_id, app_name, kafka.{bootstrap_servers, topics, output_topics, group_id,
    starting_offsets, max_records_per_batch, max_bytes_per_batch, spark_read_min_records,
    repartition_rows_per_record and group_protocol (when set), session_timeout_ms,
    heartbeat_interval_ms, leave_group_on_close, security_protocol,
    sasl_mechanism (with SASL), extra (spec.kafka.properties, when any)},
    cassandra.{hosts, port, local_datacenter, keyspace, tls (when
    on), consistency, serial_consistency, request_timeout, connect_timeout, protocol_version
    (each when set)}, stores[{name, type, ttl_seconds, table_options}], state.cache_max_keys (when set),
    spark.{master, conf, driver_batch_max_records (when set)}, shutdown.drain_timeout_seconds,
    metrics.{port, query_port, stall_seconds}, logging.format (when not text), job.{entrypoint, args, errors
    (when not stop)}: settings of
    `floe_jobs.config.FloeConfig`, which loads them; a key it does not declare (or a secret)
    raises `ConfigError` here, so the two sides cannot drift apart unnoticed.
    Credentials and TLS material reach the runtime as FLOE_* environment variables from
    Secrets (see `process`).
    """
    spec = app.spec
    cache = spec.state.cache_max_keys
    state = {} if cache is None else {"state": {"cache_max_keys": cache}}
    # rendered only when not the default, so adding the setting rolled no running app
    errors = {} if spec.errors == "stop" else {"errors": spec.errors}
    logs = {} if spec.logging.format == "text" else {"logging": {"format": spec.logging.format}}
    limit = spec.spark.driver_batch_max_records
    driver_batches = {} if limit is None else {"driver_batch_max_records": limit}
    rendered: dict[str, Any] = {
        "app_id": app.app_id,
        # the `app` label of the replicas' series: the name the operator's series carry
        "app_name": app.name,
        "kafka": _kafka_config(app),
        "cassandra": _cassandra_config(app),
        "stores": [
            {
                "name": s.name,
                "type": s.type,
                "ttl_seconds": s.ttl_seconds,
                "table_options": dict(s.table_options) if s.table_options else None,
            }
            for s in spec.state.stores
        ],
        "spark": {"master": spec.spark.master, "conf": spark_conf(app), **driver_batches},
        **state,
        "shutdown": {"drain_timeout_seconds": spec.shutdown.drain_timeout_seconds},
        "metrics": {
            "port": spec.metrics.port,
            "query_port": spec.metrics.query_port,
            "stall_seconds": spec.metrics.stall_seconds,
        },
        **logs,
        "job": {"entrypoint": spec.job.entrypoint, "args": list(spec.job.args), **errors},
    }
    stamped = _schema_stamped(rendered)
    problems = config.file_problems(stamped)
    if problems:
        raise config.ConfigError(f"the runtime would refuse the rendered {CONFIG_FILE}: {'; '.join(problems)}")
    return stamped


def _schema_stamped(rendered: dict[str, Any]) -> dict[str, Any]:
    """`rendered` after the schema it was rendered for and the dispensable keys it holds, which
    a runtime of an older schema may leave out (`floe_jobs.config.CONFIG_SCHEMA`;
    docs/releasing.md, "Version skew")."""
    optional = config.optional_keys(rendered)
    return {"config_schema": config.CONFIG_SCHEMA, **({"optional_keys": optional} if optional else {}), **rendered}


def _kafka_config(app: model.StreamingApp) -> dict[str, Any]:
    """The runtime's `kafka` section. Optional keys are rendered only when set, so that adding a
    setting to the CRD rolls no running app and an older runtime never meets a key it lacks."""
    spec = app.spec
    kafka = spec.kafka
    security: dict[str, Any] = {"security_protocol": kafka.security.protocol}
    if kafka.security.sasl is not None:
        security["sasl_mechanism"] = kafka.security.sasl.mechanism
    if kafka.security.tls is not None and not kafka.security.tls.verify_hostname:
        security["ssl_verify_hostname"] = False
    reads = {} if kafka.spark_read_min_records is None else {"spark_read_min_records": kafka.spark_read_min_records}
    protocol = {} if kafka.group_protocol == "auto" else {"group_protocol": kafka.group_protocol}
    rows = kafka.repartition_rows_per_record
    rekeyed = {} if rows is None else {"repartition_rows_per_record": rows}
    # the runtime's kafka.extra; only when set, so adding spec.kafka.properties rolled no running app
    props = {"extra": dict(sorted(kafka.properties.items()))} if kafka.properties else {}
    return {
        "bootstrap_servers": kafka.bootstrap_servers,
        "topics": list(kafka.topics),
        "output_topics": list(kafka.output_topics),
        "group_id": app.consumer_group,
        "starting_offsets": kafka.starting_offsets,
        "max_records_per_batch": kafka.max_records_per_batch,
        "max_bytes_per_batch": kafka.max_bytes_per_batch,
        **reads,
        **rekeyed,
        **protocol,
        "session_timeout_ms": spec.shutdown.session_timeout_ms,
        "heartbeat_interval_ms": spec.shutdown.heartbeat_interval_ms,
        "leave_group_on_close": spec.shutdown.leave_group_on_close,
        **security,
        **props,
    }


def _cassandra_config(app: model.StreamingApp) -> dict[str, Any]:
    """The runtime's `cassandra` section: where the state lives; TLS flags only when TLS is on."""
    cass = app.spec.state.cassandra
    tls: dict[str, Any] = {"tls": True} if cass.tls.enabled else {}
    if cass.tls.enabled and not cass.tls.verify_hostname:
        tls["tls_verify_hostname"] = False
    return {
        "hosts": list(cass.hosts),
        "port": cass.port,
        "local_datacenter": cass.local_datacenter,
        "keyspace": cass.keyspace,
        **tls,
        **cass.tuning(),
    }


def spark_conf(app: model.StreamingApp) -> dict[str, str]:
    """Spark settings: Floe's defaults for a read-only container, then the user's conf."""
    spark = app.spec.spark
    conf: dict[str, str] = {
        "spark.app.name": app.app_id,
        "spark.driver.cores": str(spark.driver.cores),
        "spark.driver.memory": spark.driver.memory,
        "spark.local.dir": "/tmp/spark",
        "spark.jars.ivy": "/tmp/.ivy2",
        "spark.ui.enabled": "false",
    }
    if spark.ui.enabled:
        # read-only: a stage killed from the UI would only fail a batch the replica then retries
        conf.update({"spark.ui.enabled": "true", "spark.ui.port": str(spark.ui.port),
                     "spark.ui.killEnabled": "false"})
    if spark.on_kubernetes:
        executor = spark.executor or model.SparkExecutor()
        conf.update(
            {
                "spark.submit.deployMode": "client",
                "spark.kubernetes.namespace": app.namespace,
                "spark.kubernetes.container.image": app.spec.image,
                "spark.kubernetes.authenticate.driver.serviceAccountName": pod_service_account(app) or "",
                "spark.executor.instances": str(executor.instances),
                "spark.executor.cores": str(executor.cores),
                "spark.executor.memory": executor.memory,
                "spark.driver.bindAddress": "0.0.0.0",
                "spark.driver.port": str(DRIVER_PORT),
                "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
                "spark.kubernetes.container.image.pullPolicy": app.spec.image_pull_policy,
                "spark.kubernetes.executor.podTemplateFile": EXECUTOR_TEMPLATE_PATH,
                "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
                # The drivers run in client mode beside a Service and no claims of Spark's own:
                # nothing for Spark to delete at stop, and nothing its Role would let it delete.
                "spark.kubernetes.driver.service.deleteOnTermination": "false",
                "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
                "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
                # driver and executors authenticate each other with the secret Spark generates per
                # replica and encrypt their traffic: tasks carry the stores' and Kafka's credentials
                **config.SPARK_WIRE_SECURITY,
            }
        )
    conf.update(spark.conf)
    return dict(sorted(conf.items()))


# libyaml's emitter where PyYAML was built with it: the same text, in less time.
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.lru_cache(maxsize=4096)
def _yaml_text(canonical: str) -> str:
    """YAML of a JSON document, remembered: every pass over an app renders its ConfigMap, and
    emitting YAML costs milliseconds, a fifth of the operator's CPU in a burst, when it has not
    changed since the last pass."""
    return yaml.dump(json.loads(canonical), Dumper=_YAML_DUMPER, sort_keys=True, default_flow_style=False)


def _yaml_of(value: Any) -> str:
    return _yaml_text(json.dumps(value, sort_keys=True, separators=(",", ":")))


def config_map(app: model.StreamingApp) -> Manifest:
    data = {CONFIG_FILE: _yaml_of(job_config(app))}
    if app.spec.spark.on_kubernetes:
        data[EXECUTOR_TEMPLATE_FILE] = _yaml_of(executor_pod_template(app))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(app, config_map_name(app)),
        "data": data,
    }


def executor_labels(app: model.StreamingApp) -> dict[str, str]:
    """Labels of the app's executor pods (Spark adds spark-role=executor and its own ids)."""
    return {
        "app.kubernetes.io/name": app.name,
        "app.kubernetes.io/component": "spark-executor",
        "app.kubernetes.io/part-of": "floe",
        EXECUTOR_OF: app.name,
    }


def executor_pod_template(app: model.StreamingApp) -> Manifest:
    """The pod Spark starts each executor from (`spark.kubernetes.executor.podTemplateFile`).

    It carries what the drivers' pods carry, so that a namespace that admits the drivers admits
    their executors: the pod's and the container's security context (non-root, read-only root
    filesystem, no capabilities, RuntimeDefault seccomp), node selector, tolerations, node
    affinity, priority class, image pull secrets, the image, its pull policy and command, and
    the emptyDir on /tmp (Spark mounts its local dir, `spark.local.dir`, below it). Spark adds
    the rest: the `executor` argument and the environment, memory (request and limit: executor
    memory plus overhead) and CPU request from `spec.spark.executor`, and the owner reference
    to the driver's pod. Executors never call the API server, so no token is mounted.
    """
    driver = deployment(app, config_digest="")["spec"]["template"]["spec"]
    (main,) = (c for c in driver["containers"] if c["name"] == CONTAINER)
    mounts = [m for m in main["volumeMounts"] if m["mountPath"] == "/tmp"]
    container: dict[str, Any] = {
        "name": EXECUTOR_CONTAINER,
        **{key: main[key] for key in ("image", "imagePullPolicy", "command", "securityContext")},
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": driver["securityContext"],
        "containers": [container],
        "volumes": [v for v in driver["volumes"] if v["name"] in {m["name"] for m in mounts}],
    }
    pod_spec.update(placement(driver))
    labels = {k: v for k, v in app.spec.pod.labels.items() if k != APP_LABEL}
    metadata: dict[str, Any] = {"labels": {**labels, **executor_labels(app)}}
    if app.spec.pod.annotations:
        metadata["annotations"] = dict(app.spec.pod.annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def placement(driver: Mapping[str, Any]) -> dict[str, Any]:
    """Where a pod that works for the app's drivers runs and pulls from, taken from the drivers'
    rendered pod spec: node selector, tolerations, image pull secrets, priority class and node
    affinity. Node affinity only: the drivers' pod (anti-)affinity terms speak of the drivers'
    labels, which the executors and the snapshot Job's pod do not carry."""
    out = {key: driver[key] for key in ("nodeSelector", "tolerations", "imagePullSecrets", "priorityClassName")
           if key in driver}
    node_affinity = (driver.get("affinity") or {}).get("nodeAffinity")
    if node_affinity:
        out["affinity"] = {"nodeAffinity": node_affinity}
    return out


def config_hash(cm: Manifest) -> str:
    """Digest of the ConfigMap's data; stamped on the pod template so a config change rolls the pods."""
    return _digest(cm["data"])


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    # optional: a missing Secret or key leaves the variable unset instead of keeping the container
    # from being created, so the replica starts and says which setting and Secret key to fix
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}


def secret_refs(env: list[dict[str, Any]]) -> dict[str, config.SecretRef]:
    """Variable → the Secret name and key it is set from, for each Secret reference of `env`."""
    return {
        item["name"]: config.SecretRef(name=ref["name"], key=ref["key"])
        for item in env
        if (ref := item.get("valueFrom", {}).get("secretKeyRef")) is not None
    }


def _secret_refs_env(env: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The variable that names the Secret references of `env` for the runtime (never a value)."""
    refs = {name: ref.model_dump() for name, ref in secret_refs(env).items()}
    if not refs:
        return None
    return {"name": config.env_name("secret_refs"), "value": json.dumps(refs, sort_keys=True, separators=(",", ":"))}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def process(app: model.StreamingApp, *, config_path: str = CONFIG_PATH) -> Process:
    """Command, arguments and environment of the runtime.

    Secrets are only ever referenced (secretKeyRef), never copied. Every variable is named by
    the runtime's configuration model (`config.env_name`), which loads each of them. A local
    run passes its own config_path and resolves the secret and field references itself.
    """
    spec = app.spec
    env: list[dict[str, Any]] = [
        {"name": config.CONFIG_ENV, "value": config_path},
        _field_env(config.env_name("pod", "name"), "metadata.name"),
        _field_env(config.env_name("pod", "namespace"), "metadata.namespace"),
        _field_env(config.env_name("pod", "ip"), "status.podIP"),
    ]
    sec = spec.kafka.security
    if sec.sasl is not None:
        cred = sec.sasl.credentials_secret_ref
        env.append(_secret_env(config.env_name("kafka", "sasl_username"), cred.name, cred.username_key))
        env.append(_secret_env(config.env_name("kafka", "sasl_password"), cred.name, cred.password_key))
    if sec.tls is not None:
        if sec.tls.ca_secret_ref is not None:
            ca = sec.tls.ca_secret_ref
            env.append(_secret_env(config.env_name("kafka", "ssl_ca_pem"), ca.name, ca.key))
        if sec.tls.client_cert_secret_ref is not None:
            cc = sec.tls.client_cert_secret_ref
            env.append(_secret_env(config.env_name("kafka", "ssl_cert_pem"), cc.name, cc.cert_key))
            env.append(_secret_env(config.env_name("kafka", "ssl_key_pem"), cc.name, cc.key_key))
    cass = spec.state.cassandra
    if cass.credentials_secret_ref is not None:
        ref = cass.credentials_secret_ref
        env.append(_secret_env(config.env_name("cassandra", "username"), ref.name, ref.username_key))
        env.append(_secret_env(config.env_name("cassandra", "password"), ref.name, ref.password_key))
    if cass.tls.ca_secret_ref is not None:
        ca = cass.tls.ca_secret_ref
        env.append(_secret_env(config.env_name("cassandra", "tls_ca_pem"), ca.name, ca.key))
    if spec.metrics.query_port:
        # the store query endpoint answers only this token (`query_token_secret`)
        token_env = config.env_name("metrics", "query_token")
        env.append(_secret_env(token_env, query_token_secret_name(app), QUERY_TOKEN_KEY))
    if (refs := _secret_refs_env(env)) is not None:
        env.append(refs)
    # What the operator set (and the job image), nothing else: a FLOE_ variable from an envFrom
    # source stops the replica.
    owned = sorted({e["name"] for e in env} | {config.ENV_NAMES_ENV, *config.IMAGE_ENV})
    env.append({"name": config.ENV_NAMES_ENV, "value": ",".join(owned)})
    env.extend(dict(e) for e in spec.env)
    return {"command": ["floe-job"], "args": [], "env": env}


def pod_service_account(app: model.StreamingApp) -> str | None:
    """The pods' ServiceAccount: under a k8s:// master always the one Floe creates for the app,
    the only one its drivers' Role is bound to (the CRD refuses spec.pod.serviceAccountName
    there); otherwise spec.pod.serviceAccountName, or none (no token mounted)."""
    if app.spec.spark.on_kubernetes:
        return spark_service_account_name(app)
    if app.spec.pod.service_account_name:
        return app.spec.pod.service_account_name
    return None


def _probe(path: str, *, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def _container_ports(spec: model.AppSpec) -> list[dict[str, Any]]:
    """Metrics always; the query server, the Spark UI and the driver's ports when turned on."""
    ports: list[dict[str, Any]] = [{"name": "http", "containerPort": spec.metrics.port, "protocol": "TCP"}]
    if spec.metrics.query_port:
        ports.append({"name": "query", "containerPort": spec.metrics.query_port, "protocol": "TCP"})
    if spec.spark.ui.enabled:
        ports.append({"name": "spark-ui", "containerPort": spec.spark.ui.port, "protocol": "TCP"})
    if spec.spark.on_kubernetes:
        ports.append({"name": "spark-driver", "containerPort": DRIVER_PORT, "protocol": "TCP"})
        ports.append({"name": "spark-blockmgr", "containerPort": BLOCK_MANAGER_PORT, "protocol": "TCP"})
    return ports


def _app_container(app: model.StreamingApp) -> dict[str, Any]:
    """The replica's container: the restricted security context, probes on /healthz and /readyz,
    the ConfigMap and a writable /tmp as its only mounts, and preStop when asked for."""
    spec = app.spec
    proc = process(app)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": proc["command"],
        "env": proc["env"],
        "ports": _container_ports(spec),
        "resources": {k: dict(v) for k, v in sorted(spec.resources.items())},
        # Probed every second: a replica is ready the moment it has warmed up and joined its
        # group, and a rollout (or a scale-up) waits for the kubelet to see it; probed every 5 s,
        # the pod was Ready up to 10 s late (the startup probe, then the readiness probe). A probe
        # is one local HTTP GET answered from memory. The startup budget stays 5 minutes, and a
        # replica still goes unready after about as long as before (10 failed probes, not 3 x 5 s),
        # so a pass slowed by a rebalance on a busy node does not take it out of rotation.
        "startupProbe": _probe("/healthz", period=1, failures=300),
        "readinessProbe": _probe("/readyz", period=1, failures=10),
        "livenessProbe": _probe(
            "/healthz", period=spec.metrics.liveness_period_seconds, failures=spec.metrics.liveness_failure_threshold
        ),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    if proc["args"]:
        container["args"] = proc["args"]
    if spec.shutdown.pre_stop_delay_seconds > 0:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": spec.shutdown.pre_stop_delay_seconds}}}
    return container


def _pod_spec(app: model.StreamingApp) -> dict[str, Any]:
    """The pod around the container, before spec.podTemplate is merged in: spec.pod's scheduling
    and identity fields, set only when given."""
    spec = app.spec
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": spec.shutdown.termination_grace_period_seconds,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": spec.pod.run_as_user,
            "runAsGroup": spec.pod.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_app_container(app)],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map_name(app)}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    service_account = pod_service_account(app)
    # Always explicit: dropping the field would let the API server keep the old name through
    # the deprecated serviceAccount alias.
    pod_spec["serviceAccountName"] = service_account or "default"
    if service_account is None:
        pod_spec["automountServiceAccountToken"] = False
    if spec.pod.node_selector:
        pod_spec["nodeSelector"] = dict(spec.pod.node_selector)
    if spec.pod.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.pod.tolerations]
    if spec.pod.affinity:
        pod_spec["affinity"] = dict(spec.pod.affinity)
    if spec.pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [dict(s) for s in spec.pod.image_pull_secrets]
    if spec.pod.priority_class_name:
        pod_spec["priorityClassName"] = spec.pod.priority_class_name
    return pod_spec


def _pod_annotations(app: model.StreamingApp, *, config_digest: str, secrets_digest: str | None) -> dict[str, str]:
    """Scrape hints and the digests that roll the pods when their config, Secrets or restart
    nonce change; Floe's own keys win over spec.pod's, which win over spec.podTemplate's."""
    spec = app.spec
    annotations = {
        **spec.pod.annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.metrics.port),
        "prometheus.io/path": "/metrics",
        CONFIG_HASH: config_digest,
    }
    if secrets_digest is not None:
        annotations[SECRETS_HASH] = secrets_digest
    if spec.restart_nonce:
        annotations[RESTART_NONCE] = spec.restart_nonce
    return dict(sorted({**spec.pod_template.metadata.annotations, **annotations}.items()))


def deployment(app: model.StreamingApp, *, config_digest: str, secrets_digest: str | None = None) -> Manifest:
    """The app's pods: stateless, rolling one at a time, draining on shutdown."""
    spec = app.spec
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(app, deployment_name(app)),
        "spec": {
            "replicas": spec.running_replicas,
            "revisionHistoryLimit": 5,
            "minReadySeconds": spec.rollout.min_ready_seconds,
            "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
            "selector": {"matchLabels": selector_labels(app)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": spec.rollout.max_surge,
                    "maxUnavailable": spec.rollout.max_unavailable,
                },
            },
            "template": {
                "metadata": {
                    "labels": {**spec.pod_template.metadata.labels, **spec.pod.labels, **common_labels(app)},
                    "annotations": _pod_annotations(app, config_digest=config_digest, secrets_digest=secrets_digest),
                },
                "spec": podtemplate.merge(_pod_spec(app), app, selector=selector_labels(app)),
            },
        },
    }


def pod_template_owned(app: model.StreamingApp) -> podtemplate.Owned:
    """What spec.podTemplate must leave alone in the pod `deployment` renders."""
    ports = {app.spec.metrics.port, app.spec.metrics.query_port} - {0}
    if app.spec.spark.on_kubernetes:
        ports |= {DRIVER_PORT, BLOCK_MANAGER_PORT}
    if app.spec.spark.ui.enabled:
        ports.add(app.spec.spark.ui.port)
    return podtemplate.Owned(
        container=CONTAINER,
        volumes=frozenset({"config", "tmp"}),
        mount_paths=frozenset({CONFIG_DIR, "/tmp"}),
        ports=frozenset(ports),
    )


def service(app: model.StreamingApp) -> Manifest:
    """Headless Service of the runtime's HTTP port: metrics, health and the state query endpoint.

    Headless because every pod answers every query (the state is in Cassandra) and Prometheus
    scrapes each pod anyway: no virtual IP to allocate and program for hundreds of apps.
    """
    ports = [{"name": "http", "port": app.spec.metrics.port, "targetPort": "http", "protocol": "TCP"}]
    if app.spec.metrics.query_port:
        ports.append({"name": "query", "port": app.spec.metrics.query_port, "targetPort": "query", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(app, service_name(app)),
        "spec": {"type": "ClusterIP", "clusterIP": "None", "selector": selector_labels(app), "ports": ports},
    }


def spark_ui_service(app: model.StreamingApp) -> Manifest:
    """Service of Spark's UI (spec.spark.ui). Each replica has a UI of its own (its driver's jobs),
    so the Service keeps a client on one replica (client-IP affinity); `kubectl port-forward
    svc/<name>` picks one pod."""
    port = app.spec.spark.ui.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(app, spark_ui_service_name(app)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(app),
            "sessionAffinity": "ClientIP",
            "ports": [{"name": "spark-ui", "port": port, "targetPort": "spark-ui", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(app: model.StreamingApp) -> Manifest:
    """One pod at a time may be evicted, so a node drain never takes the whole group at once."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(app, app.name),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(app)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def service_monitor(app: model.StreamingApp) -> Manifest:
    sm = app.spec.metrics.service_monitor
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": object_meta(app, app.name, labels={**sm.labels, **common_labels(app)}),
        "spec": {
            "selector": {"matchLabels": selector_labels(app)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": sm.interval}],
        },
    }


# What a driver in client mode does with the API server (Spark 4's Kubernetes scheduler backend:
# ExecutorPodsAllocator, the watch and polling snapshot sources, ExecutorPodsLifecycleManager,
# KubernetesClusterSchedulerBackend), and nothing more. RBAC cannot narrow a rule to the pods a
# driver labels, so these hold for every pod and ConfigMap of the namespace: docs/security.md.
SPARK_DRIVER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        # create: the executor pods. get: the driver's own pod (spark.kubernetes.driver.pod.name),
        # the owner of its executors, and its readiness. list and watch: the snapshots of the
        # executor pods. patch: the executor-id label Spark puts on each executor pod. delete: a
        # finished or lost executor's pod. deletecollection: the executor pods by label, at stop
        # and when requested pods never showed up or are no longer wanted.
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        # create: the executors' Spark config map, at start. deletecollection: it again, by label, at stop.
        "verbs": ["create", "deletecollection"],
    },
    # No services: in client mode the driver creates none (Floe renders the drivers' Service) and
    # spark.kubernetes.driver.service.deleteOnTermination is false. No persistentvolumeclaims: the
    # volumes that would need them are refused in spec.spark.conf, and ownPersistentVolumeClaim is false.
]


def spark_rbac(app: model.StreamingApp) -> list[Manifest]:
    """What each driver needs to start and stop its executor pods (k8s:// master only), bound to
    the ServiceAccount Floe creates for the app and to no other: binding it to a ServiceAccount
    the author names (the namespace's default) would hand every pod of that account these rights."""
    name = spark_service_account_name(app)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(app, name)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": object_meta(app, name),
            "rules": SPARK_DRIVER_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": object_meta(app, name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": app.namespace}],
        },
    ]


def driver_service(app: model.StreamingApp) -> Manifest:
    """Headless Service over the drivers, so executors resolve and reach them."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(app, driver_service_name(app)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(app),
            "ports": [
                {"name": "spark-driver", "port": DRIVER_PORT, "targetPort": DRIVER_PORT, "protocol": "TCP"},
                {
                    "name": "spark-blockmgr",
                    "port": BLOCK_MANAGER_PORT,
                    "targetPort": BLOCK_MANAGER_PORT,
                    "protocol": "TCP",
                },
            ],
        },
    }


QUERY_TOKEN_KEY = "token"


def query_token_secret_name(app: model.StreamingApp) -> str:
    return f"{app.name}-query"


def query_token_secret(app: model.StreamingApp, token: str) -> Manifest:
    """The Secret holding the bearer token of the app's store query endpoint. Created once with
    a random token (`reconcile.ensure_query_token`) and never re-rendered, so it is not among
    `children`: a client reads it through RBAC on this Secret, the pods through secretKeyRef."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(app, query_token_secret_name(app)),
        "type": "Opaque",
        "stringData": {QUERY_TOKEN_KEY: token},
    }


def network_policy_name(app: model.StreamingApp) -> str:
    return app.name


def network_peer_labels(app: model.StreamingApp) -> dict[str, str]:
    """Labels every pod of the app carries, replicas (`deployment`) and executors
    (`executor_pod_template`) alike: what the NetworkPolicy selects and admits."""
    return {"app.kubernetes.io/name": app.name, "app.kubernetes.io/part-of": "floe"}


def _namespaces(labels: Mapping[str, str] | None) -> dict[str, Any]:
    """A peer of the pods of the namespaces `labels` select; None: the app's own namespace."""
    if labels is None:
        return {"podSelector": {}}
    return {"namespaceSelector": {"matchLabels": dict(labels)} if labels else {}}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def network_policy(app: model.StreamingApp) -> Manifest:
    """Ingress to the app's pods (spec.networkPolicy): its own pods on every port (the drivers'
    RPC and block manager ports, the executors' ports, which Spark picks at random), the
    monitoring namespaces on the metrics port, the query clients on the query and Spark UI
    ports. Egress is left open: the pods reach Kafka, Cassandra and the API server wherever
    they are. Where no network plugin enforces NetworkPolicies it changes nothing."""
    spec = app.spec
    pods = {"podSelector": {"matchLabels": network_peer_labels(app)}}
    ingress: list[dict[str, Any]] = [
        {"from": [pods]},
        {"from": [_namespaces(spec.network_policy.metrics_namespace_labels)], "ports": _tcp(spec.metrics.port)},
    ]
    clients = [p for p in (spec.metrics.query_port, spec.spark.ui.port if spec.spark.ui.enabled else 0) if p]
    if clients:
        ingress.append({"from": [_namespaces(spec.network_policy.query_namespace_labels)], "ports": _tcp(*clients)})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(app, network_policy_name(app)),
        "spec": {"podSelector": {"matchLabels": network_peer_labels(app)}, "policyTypes": ["Ingress"],
                 "ingress": ingress},
    }


def children(
    app: model.StreamingApp, *, service_monitor_available: bool = False, secrets_digest: str | None = None
) -> list[Manifest]:
    """Every child in apply order (the Deployment last, once what it mounts exists), hash-stamped.

    `secrets_digest` stands for the versions of the Secrets the pods read (None: no Secret).
    """
    cm = config_map(app)
    objects: list[Manifest] = [cm]
    if app.spec.spark.on_kubernetes:
        objects.extend(spark_rbac(app))
        objects.append(driver_service(app))
    objects.append(service(app))
    if app.spec.spark.ui.enabled:
        objects.append(spark_ui_service(app))
    objects.append(pod_disruption_budget(app))
    if app.spec.network_policy.enabled:
        objects.append(network_policy(app))
    if app.spec.metrics.service_monitor.enabled and service_monitor_available:
        objects.append(service_monitor(app))
    objects.append(deployment(app, config_digest=config_hash(cm), secrets_digest=secrets_digest))
    return [stamp(obj) for obj in objects]


def secrets_hash(versions: Mapping[str, str]) -> str | None:
    """Digest of Secret name → resourceVersion (never of their content); None for no Secret."""
    if not versions:
        return None
    text = ",".join(f"{name}@{version}" for name, version in sorted(versions.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stamp(obj: Manifest) -> Manifest:
    """Record the digest of the desired object on it, so an unchanged child is never re-applied."""
    meta = obj["metadata"]
    digest = _digest(obj)
    return {**obj, "metadata": {**meta, "annotations": {**meta.get("annotations", {}), APPLIED_HASH: digest}}}


def applied_hash(obj: Mapping[str, Any]) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(APPLIED_HASH)
    return value if isinstance(value, str) else None


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
