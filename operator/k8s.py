"""The one place the operator calls the Kubernetes API (besides Kopf's own watching).

Children are written with server-side apply under the field manager `floe-operator`,
forcing ownership, so the operator's view of every field it sets wins and fields it stops
setting are removed. Every write is counted by kind and verb (Prometheus), which is how the
"an unchanged resync writes nothing" contract is watched in production.

The official client is synchronous; each call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import kubernetes
import urllib3
from floe_operator import model
from prometheus_client import Counter

log = logging.getLogger(__name__)

WRITES = Counter(
    "floe_operator_kube_writes",
    "Write calls the operator made to the Kubernetes API, by kind and verb",
    ["kind", "verb"],
)
READS = Counter("floe_operator_kube_reads", "Read calls the operator made to the Kubernetes API", ["kind"])

# What the API server keeps of an Event's message (longer ones are cut, with a marker).
EVENT_MESSAGE_LIMIT = 1024
EVENT_SOURCE = "floe-operator"

# kind → (API path prefix, plural). Only the kinds Floe writes or reads.
_RESOURCES: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("v1", "Secret"): "/api/v1/namespaces/{ns}/secrets",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "ServiceAccount"): "/api/v1/namespaces/{ns}/serviceaccounts",
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("policy/v1", "PodDisruptionBudget"): "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    ("rbac.authorization.k8s.io/v1", "Role"): "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    ("keda.sh/v1alpha1", "ScaledObject"): "/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects",
    ("keda.sh/v1alpha1", "TriggerAuthentication"): "/apis/keda.sh/v1alpha1/namespaces/{ns}/triggerauthentications",
    (model.API_VERSION, model.KIND): f"/apis/{model.API_VERSION}/namespaces/{{ns}}/{model.PLURAL}",
    (model.API_VERSION, model.SNAPSHOT_KIND): f"/apis/{model.API_VERSION}/namespaces/{{ns}}/{model.SNAPSHOT_PLURAL}",
    # A StreamingAppSnapshot's Job (`snapshotjob`).
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
    # The operator's own leader-election Lease (`leader`), in the operator's namespace.
    ("coordination.k8s.io/v1", "Lease"): "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
}


class ApiError(Exception):
    """A failed API call, with the HTTP status and the API server's message."""

    def __init__(self, status: int, message: str, *, kind: str = "", name: str = "") -> None:
        super().__init__(f"{kind} {name}: HTTP {status}: {message}" if kind else f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def load_client(*, pool_size: int = 32) -> kubernetes.client.ApiClient:
    """An API client from the in-cluster service account, else from KUBECONFIG."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=os.environ.get("KUBECONFIG") or None, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(configuration)


def path_of(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    try:
        base = _RESOURCES[(api_version, kind)].format(ns=namespace)
    except KeyError:
        raise ValueError(f"Floe does not manage {kind} ({api_version})") from None
    return f"{base}/{name}" if name else base


class Urgency:
    """Orders writes when many apps arrive at once: while urgent calls (the Deployments and what
    their pods mount) are queued or running, the others (Services, PodDisruptionBudgets, status)
    wait, for at most `patience` seconds so that they are never starved.

    The API server is the bottleneck of a burst, and it serves requests in arrival order; without
    this, each app's Deployment queues behind every other app's Service, PDB and status writes.
    Events and the reads of passes over apps already rolled out (children no watch delivers, the
    query token Secret) wait too.
    """

    def __init__(self, *, patience: float = 5.0) -> None:
        self.patience = patience
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def first(self) -> AsyncIterator[None]:
        self._pending += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._pending -= 1
            if not self._pending:
                self._idle.set()

    async def after(self) -> None:
        if self._pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self.patience)


def event_manifest(
    involved: Mapping[str, Any], type_: str, reason: str, message: str, *, now: datetime, instance: str = EVENT_SOURCE
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (a StreamingApp body), as `kubectl describe` shows it."""
    meta = involved.get("metadata") or {}
    if len(message) > EVENT_MESSAGE_LIMIT:
        message = message[: EVENT_MESSAGE_LIMIT - 3] + "..."
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    micro = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'streamingapp')}.", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion", model.API_VERSION),
            "kind": involved.get("kind", model.KIND),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": EVENT_SOURCE},
        "reportingComponent": EVENT_SOURCE,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": micro,
        "action": reason,
        "count": 1,
    }


class Cluster:
    """Thin async facade over the API calls the reconciler needs."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self._client = client
        self._crd_cache: dict[str, tuple[float, bool]] = {}
        self._namespace_cache: dict[str, tuple[float, dict[str, str] | None]] = {}
        # Secrets' data as last read (monotonic time, data or None when absent), by (namespace, name):
        # the reconcile reads an app's Secrets on every pass, and the lag loop reuses those reads.
        self._secrets_read: dict[tuple[str, str], tuple[float, dict[str, str] | None]] = {}
        self._urgent = Urgency()
        # which operator replica posts Events (the pod's name in a cluster)
        self._instance = os.environ.get("POD_NAME", EVENT_SOURCE)

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> tuple[int, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, _ = self._client.param_serialize(
            method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            response = self._client.call_api(method, url, headers, body, _request_timeout=timeout)
            data = response.read()  # type: ignore[no-untyped-call]
        except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            # No HTTP answer at all (connection refused, timeout, TLS): status 0, retried by the caller.
            raise ApiError(0, f"API server unreachable: {exc}") from exc  # type: ignore[no-untyped-call]
        text = data.decode() if isinstance(data, bytes) else str(data or "")
        parsed: Any = json.loads(text) if text.startswith("{") else text
        return int(response.status), parsed

    def _checked(self, status: int, parsed: Any, *, kind: str, name: str) -> dict[str, Any]:
        if 200 <= status < 300 and isinstance(parsed, dict):
            return parsed
        message = parsed.get("message", "") if isinstance(parsed, dict) else str(parsed)[:500]
        raise ApiError(status, message, kind=kind, name=name)

    # --- writes -----------------------------------------------------------------------

    def apply_sync(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = path_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        WRITES.labels(kind=obj["kind"], verb="apply").inc()
        status, parsed = self._call(
            "PATCH",
            path,
            body=dict(obj),
            query=[("fieldManager", model.FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )
        return self._checked(status, parsed, kind=obj["kind"], name=meta["name"])

    async def apply(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        """Server-side apply of a whole child; returns the object as stored. Urgent applies (what
        a pod needs to exist) go to the API server before the others (see `Urgency`)."""
        if urgent:
            async with self._urgent.first():
                return await asyncio.to_thread(self.apply_sync, obj)
        await self._urgent.after()
        return await asyncio.to_thread(self.apply_sync, obj)

    def patch_status_sync(
        self, namespace: str, name: str, status: Mapping[str, Any], *, kind: str = model.KIND
    ) -> dict[str, Any]:
        WRITES.labels(kind=kind, verb="patch-status").inc()
        path = path_of(model.API_VERSION, kind, namespace, name) + "/status"
        code, parsed = self._call(
            "PATCH", path, body={"status": dict(status)}, content_type="application/merge-patch+json"
        )
        return self._checked(code, parsed, kind=kind, name=name)

    async def patch_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, kind: str = model.KIND
    ) -> dict[str, Any]:
        """Merge-patch the status subresource of a StreamingApp, or of another Floe kind (`kind`),
        after any urgent apply."""
        await self._urgent.after()
        return await asyncio.to_thread(functools.partial(self.patch_status_sync, namespace, name, status, kind=kind))

    def scale_sync(self, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        WRITES.labels(kind=model.KIND, verb="scale").inc()
        path = path_of(model.API_VERSION, model.KIND, namespace, name) + "/scale"
        code, parsed = self._call(
            "PATCH", path, body={"spec": {"replicas": replicas}}, content_type="application/merge-patch+json"
        )
        return self._checked(code, parsed, kind=model.KIND, name=name)

    async def scale(self, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        """Set a StreamingApp's replicas through its scale subresource (as an HPA would)."""
        return await asyncio.to_thread(self.scale_sync, namespace, name, replicas)

    def post_event_sync(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        event = event_manifest(involved, type_, reason, message, now=datetime.now(UTC), instance=self._instance)
        WRITES.labels(kind="Event", verb="create").inc()
        code, parsed = self._call("POST", f"/api/v1/namespaces/{event['metadata']['namespace']}/events", body=event)
        self._checked(code, parsed, kind="Event", name=reason)

    async def post_event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an Event on a StreamingApp. Best effort: an Event that cannot be posted is logged,
        never a reason to fail the reconcile or the lag loop that reports it. Posted by the
        operator itself rather than through Kopf, whose event queue exists only inside its
        handlers, not in the resync and lag loops."""
        if not (involved.get("metadata") or {}).get("name"):
            return
        await self._urgent.after()  # no pod waits for an Event
        try:
            await asyncio.to_thread(self.post_event_sync, involved, type_, reason, message)
        except ApiError as exc:
            log.warning("Posting an event failed reason=%s error=%s", reason, exc)

    def delete_sync(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        WRITES.labels(kind=kind, verb="delete").inc()
        status, parsed = self._call(
            "DELETE", path_of(api_version, kind, namespace, name), body={"propagationPolicy": "Background"}
        )
        if status != 404:
            self._checked(status, parsed, kind=kind, name=name)

    async def create(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        """Create an object (POST); ApiError 409 when it exists already. Urgent as for `apply`."""
        if urgent:
            async with self._urgent.first():
                return await asyncio.to_thread(self.create_sync, obj)
        return await asyncio.to_thread(self.create_sync, obj)

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete a child; absent is fine."""
        await asyncio.to_thread(self.delete_sync, api_version, kind, namespace, name)

    def create_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        """Create an object (POST); 409 when it exists already."""
        meta = obj["metadata"]
        WRITES.labels(kind=obj["kind"], verb="create").inc()
        status, parsed = self._call(
            "POST", path_of(obj["apiVersion"], obj["kind"], meta["namespace"]), body=dict(obj), timeout=timeout
        )
        return self._checked(status, parsed, kind=obj["kind"], name=meta["name"])

    def create_cluster_sync(self, path: str, body: Mapping[str, Any], *, timeout: float = 10) -> dict[str, Any]:
        """POST a cluster-scoped review (TokenReview, SubjectAccessReview) and return the answer."""
        WRITES.labels(kind=str(body.get("kind", "")), verb="create").inc()
        status, parsed = self._call("POST", path, body=dict(body), timeout=timeout)
        return self._checked(status, parsed, kind=str(body.get("kind", "")), name="")

    def replace_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        """Replace an object (PUT). With `metadata.resourceVersion` set this is optimistic
        concurrency: 409 when someone else wrote the object since that version was read."""
        meta = obj["metadata"]
        WRITES.labels(kind=obj["kind"], verb="update").inc()
        status, parsed = self._call(
            "PUT",
            path_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
            body=dict(obj),
            timeout=timeout,
        )
        return self._checked(status, parsed, kind=obj["kind"], name=meta["name"])

    # --- reads ------------------------------------------------------------------------

    def get_sync(
        self, api_version: str, kind: str, namespace: str, name: str, *, timeout: float = 30
    ) -> dict[str, Any] | None:
        READS.labels(kind=kind).inc()
        status, parsed = self._call("GET", path_of(api_version, kind, namespace, name), timeout=timeout)
        if status == 404:
            return None
        return self._checked(status, parsed, kind=kind, name=name)

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str, *, deferred: bool = False
    ) -> dict[str, Any] | None:
        """One object, or None when it does not exist. `deferred`: a read no new app's Deployment
        waits for, sent after the urgent calls (see `Urgency`)."""
        if deferred:
            await self._urgent.after()
        return await asyncio.to_thread(self.get_sync, api_version, kind, namespace, name)

    def list_sync(self, api_version: str, kind: str, namespace: str, *, selector: str) -> list[dict[str, Any]]:
        READS.labels(kind=kind).inc()
        status, parsed = self._call("GET", path_of(api_version, kind, namespace), query=[("labelSelector", selector)])
        items: list[dict[str, Any]] = self._checked(status, parsed, kind=kind, name=selector).get("items") or []
        return items

    async def list_objects(self, api_version: str, kind: str, namespace: str, *, selector: str) -> list[dict[str, Any]]:
        """The objects of a kind in a namespace that match a label selector."""
        return await asyncio.to_thread(self.list_sync, api_version, kind, namespace, selector=selector)

    async def secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """A Secret's decoded data (values never logged) and its resourceVersion; None when absent."""
        secret = await self.get("v1", "Secret", namespace, name)
        if secret is None:
            self._secrets_read[(namespace, name)] = (time.monotonic(), None)
            return None
        data = secret.get("data") or {}
        decoded = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
        decoded.update(secret.get("stringData") or {})
        self._secrets_read[(namespace, name)] = (time.monotonic(), decoded)
        return decoded, str((secret.get("metadata") or {}).get("resourceVersion", ""))

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's decoded data (values never logged), or None when it does not exist."""
        found = await self.secret(namespace, name)
        return found[0] if found is not None else None

    async def recent_secret_data(self, namespace: str, name: str, *, max_age: float) -> dict[str, str] | None:
        """A Secret's data as read within `max_age` seconds (by anyone: the reconcile reads an app's
        Secrets on every pass), else read now. When that read fails, a Secret read before stays
        good while the API server is briefly unavailable; one never read raises `ApiError`."""
        cached = self._secrets_read.get((namespace, name))
        if cached is not None and time.monotonic() - cached[0] < max_age:
            return cached[1]
        try:
            return await self.secret_data(namespace, name)
        except ApiError as exc:
            if cached is None:
                raise
            log.warning("Reading Secret %s/%s failed; using the last read error=%s", namespace, name, exc)
            return cached[1]

    async def pod_names(self, namespace: str, selector: str) -> list[str]:
        """Names of the pods matching a label selector, terminating ones included."""
        pods = await self.list_objects("v1", "Pod", namespace, selector=selector)
        return sorted(str((p.get("metadata") or {}).get("name", "")) for p in pods)

    def list_status_sync(self, path: str) -> tuple[int, str]:
        """HTTP status and message of a one-item LIST at `path` (0 when no answer at all)."""
        try:
            status, parsed = self._call("GET", path, query=[("limit", "1")])
        except ApiError as exc:
            return exc.status, exc.message
        return status, parsed.get("message", "") if isinstance(parsed, dict) else ""

    def crd_exists_sync(self, name: str) -> bool:
        READS.labels(kind="CustomResourceDefinition").inc()
        status, _ = self._call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return status == 200

    def namespace_labels_sync(self, name: str) -> dict[str, str] | None:
        READS.labels(kind="Namespace").inc()
        status, parsed = self._call("GET", f"/api/v1/namespaces/{name}")
        if status != 200 or not isinstance(parsed, dict):
            return None
        return {str(k): str(v) for k, v in ((parsed.get("metadata") or {}).get("labels") or {}).items()}

    async def namespace_labels(self, name: str, *, ttl: float = 60.0) -> dict[str, str] | None:
        """A namespace's labels, cached for `ttl` seconds so a pass over many apps reads each
        namespace about once a minute; None when they cannot be read (a 403 among others)."""
        cached = self._namespace_cache.get(name)
        if cached is not None and time.monotonic() - cached[0] < ttl:
            return cached[1]
        labels = await asyncio.to_thread(self.namespace_labels_sync, name)
        self._namespace_cache[name] = (time.monotonic(), labels)
        return labels

    async def crd_exists(self, name: str, *, ttl: float = 300.0) -> bool:
        """Whether a CRD is installed; cached for `ttl` seconds (a 403 counts as absent)."""
        cached = self._crd_cache.get(name)
        if cached is not None and time.monotonic() - cached[0] < ttl:
            return cached[1]
        exists = await asyncio.to_thread(self.crd_exists_sync, name)
        self._crd_cache[name] = (time.monotonic(), exists)
        return exists
