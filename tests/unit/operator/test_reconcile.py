"""The reconcile pass with in-memory stand-ins for the API server, Kafka and Cassandra (a unit test:
it checks the decisions — what is applied, when nothing is — not the services themselves, which the
integration tests drive for real)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import pytest
from floe_operator import appids, cassandra, conditions, k8s, kafka, model, podfaults, reconcile, render, restorejob

from tests import material

from .conftest import load_case


class FakeCluster:
    def __init__(self, secrets: dict[str, dict[str, str]] | None = None) -> None:
        self.secrets = secrets or {}
        self.versions: dict[str, str] = {}
        self.applied: list[dict[str, Any]] = []
        self.urgent: list[str] = []
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.refused: set[str] = set()  # kinds whose apply the API server refuses (403)
        self.namespace_label_values: dict[str, str] | None = {"pod-security.kubernetes.io/enforce": "restricted"}

    async def secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        data = self.secrets.get(name)
        return (data, self.versions.get(name, "1")) if data is not None else None

    async def apply(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        if obj["kind"] in self.refused:
            kind = obj["kind"].lower() + "s"
            raise k8s.ApiError(403, f'{kind} "{obj["metadata"]["name"]}" is forbidden: User "op" cannot patch '
                                    f'resource "{kind}"', kind=obj["kind"], name=obj["metadata"]["name"])
        if urgent:
            self.urgent.append(obj["kind"])
        if obj["kind"] == "ConfigMap":
            await asyncio.sleep(0.01)  # a slow write: shows whether the Deployment waits for it
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("status", {})
        self.applied.append(stored)
        self.objects[(obj["kind"], obj["metadata"]["name"])] = stored
        return stored

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str, *, deferred: bool = False
    ) -> dict[str, Any] | None:
        return self.objects.get((kind, name))

    async def create(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        if urgent:
            self.urgent.append(obj["kind"])
        if (obj["kind"], obj["metadata"]["name"]) in self.objects:
            raise k8s.ApiError(409, "already exists", kind=obj["kind"], name=obj["metadata"]["name"])
        self.objects[(obj["kind"], obj["metadata"]["name"])] = stored = copy.deepcopy(dict(obj))
        return stored

    async def crd_exists(self, name: str) -> bool:
        return False

    async def namespace_labels(self, name: str) -> dict[str, str] | None:
        return self.namespace_label_values


    async def list_objects(self, api_version: str, kind: str, namespace: str, *, selector: str) -> list[dict[str, Any]]:
        wanted = dict(term.split("=") for term in selector.split(","))
        labelled = [p for p in self.pods if (p.get("metadata") or {}).get("labels", {}).items() >= wanted.items()]
        return labelled if kind == "Pod" else []

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, name), None)

    async def pod_names(self, namespace: str, selector: str) -> list[str]:
        pods = await self.list_objects("v1", "Pod", namespace, selector=selector)
        return sorted(p["metadata"]["name"] for p in pods)


class FakeKafka:
    def __init__(self, topics: dict[str, int] | None = None, down: bool = False) -> None:
        self.topics = topics or {}
        self.down = down
        self.members = 0  # of the app's consumer group

    async def partitions(self, target: kafka.Target, topics: list[str]) -> dict[str, int | None]:
        if self.down:
            raise kafka.KafkaUnavailable("cannot list topics at kafka:9092")
        return {t: self.topics.get(t) for t in topics}

    def forget(self, target: kafka.Target) -> None:
        pass

    def group_members_sync(self, target: kafka.Target, group: str) -> int:
        return self.members


class FakeProvisioner:
    def __init__(self, error: Exception | None = None, *, check_error: Exception | None = None) -> None:
        self.calls = 0
        self.checks = 0
        self.error = error
        self.check_error = check_error
        self.topics: list[str] = []

    async def provision(self, target: cassandra.Target, app: model.StreamingApp) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error

    async def check(self, target: cassandra.Target) -> None:
        self.checks += 1
        if self.check_error is not None:
            raise self.check_error

    async def recorded_topics(self, target: cassandra.Target, app: model.StreamingApp) -> list[str]:
        return self.topics  # none by default: a new app, or a restore in place that deleted them


def _deps(**kw: Any) -> reconcile.Deps:
    return reconcile.Deps(
        cluster=kw.get("cluster", FakeCluster()),  # type: ignore[arg-type]
        provisioner=kw.get("provisioner", FakeProvisioner()),  # type: ignore[arg-type]
        kafka=kw.get("kafka", FakeKafka({"lines": 4})),  # type: ignore[arg-type]
    )


def _children(cluster: FakeCluster) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for (kind, _), obj in cluster.objects.items():
        result.setdefault(kind, []).append(obj)
    return result


def _run(body: dict[str, Any], deps: reconcile.Deps, children: Mapping[str, Any]) -> reconcile.Outcome:
    return asyncio.run(reconcile.reconcile(body, deps=deps, children=children))


def test_first_pass_provisions_and_applies_everything() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    outcome = _run(load_case("minimal"), deps, {})
    assert outcome.fault is None
    assert sorted(outcome.applied) == [
        "ConfigMap/word-count-config",
        "Deployment/word-count",
        "NetworkPolicy/word-count",
        "PodDisruptionBudget/word-count",
        "Service/word-count",
    ]
    # a new app's Deployment does not wait for its ConfigMap; both go before the other writes
    assert [o["kind"] for o in cluster.applied].index("Deployment") < [o["kind"] for o in cluster.applied].index(
        "ConfigMap"
    )
    assert sorted(cluster.urgent) == ["ConfigMap", "Deployment", "Secret"]  # the query token's Secret too
    assert deps.provisioner.calls == 1  # type: ignore[attr-defined]
    assert outcome.status_patch["partitions"] == 4
    assert outcome.status_patch["provisionedHash"]


def test_second_pass_of_an_unchanged_app_writes_nothing() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    first = _run(body, deps, {})
    body["status"] = first.status_patch
    cluster.applied.clear()
    second = _run(body, deps, _children(cluster))
    assert cluster.applied == []
    assert second.status_patch == {}
    assert second.events == []
    assert deps.provisioner.calls == 1  # type: ignore[attr-defined]


def test_replicas_change_applies_only_the_deployment_with_the_same_template() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["status"] = _run(body, deps, {}).status_patch
    template = copy.deepcopy(cluster.objects[("Deployment", "word-count")]["spec"]["template"])
    cluster.applied.clear()
    body["spec"]["replicas"] = 3
    body["metadata"]["generation"] = 2
    _run(body, deps, _children(cluster))
    assert [o["kind"] for o in cluster.applied] == ["Deployment"]
    assert cluster.applied[0]["spec"]["replicas"] == 3
    assert cluster.applied[0]["spec"]["template"] == template


def test_a_changed_config_reaches_the_configmap_before_the_deployment_rolls() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["status"] = _run(body, deps, {}).status_patch
    cluster.applied.clear()
    body["spec"]["kafka"]["maxRecordsPerBatch"] = 1234
    body["metadata"]["generation"] = 2
    _run(body, deps, _children(cluster))
    assert [o["kind"] for o in cluster.applied] == ["ConfigMap", "Deployment"]


def test_drift_on_a_child_is_corrected() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["status"] = _run(body, deps, {}).status_patch
    cluster.objects[("Deployment", "word-count")]["spec"]["replicas"] = 7  # someone scaled the Deployment
    cluster.applied.clear()
    _run(body, deps, _children(cluster))
    assert [o["kind"] for o in cluster.applied] == ["Deployment"]


@pytest.mark.parametrize(
    ("deps_kw", "reason"),
    [
        ({"kafka": FakeKafka({})}, conditions.TOPIC_NOT_FOUND),
        ({"kafka": FakeKafka(down=True)}, conditions.KAFKA_UNAVAILABLE),
        ({"provisioner": FakeProvisioner(cassandra.CassandraUnavailable("no host"))}, conditions.CASSANDRA_UNAVAILABLE),
        (
            {"provisioner": FakeProvisioner(cassandra.ProvisioningRejected("bad option"))},
            conditions.PROVISIONING_FAILED,
        ),
    ],
)
def test_faults_block_the_rollout(deps_kw: dict[str, Any], reason: str) -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster, **deps_kw)
    outcome = _run(load_case("minimal"), deps, {})
    assert outcome.fault is not None and outcome.fault.reason == reason
    assert cluster.applied == []
    degraded = next(c for c in outcome.status_patch["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", reason)


def test_missing_secret_and_key() -> None:
    body = load_case("sasl-plaintext")
    outcome = _run(body, _deps(kafka=FakeKafka({"metrics.raw": 3})), {})
    assert outcome.fault == conditions.Fault(
        conditions.SECRET_NOT_FOUND,
        "Secret rollup-kafka not found in namespace obs; create it or fix the spec reference to it",
    )
    cluster = FakeCluster({"rollup-kafka": {"username": "u"}})
    outcome = _run(body, _deps(cluster=cluster, kafka=FakeKafka({"metrics.raw": 3})), {})
    assert outcome.fault == conditions.Fault(
        conditions.SECRET_KEY_NOT_FOUND,
        "Secret rollup-kafka has no key password (read into FLOE_KAFKA_SASL_PASSWORD); add it or fix the key in "
        "the spec reference",
    )


class RefusingKafka(FakeKafka):
    def __init__(self, *, tls: bool) -> None:
        super().__init__()
        self.tls = tls

    async def partitions(self, target: kafka.Target, topics: list[str]) -> dict[str, int | None]:
        raise kafka.CredentialsRejected(
            "Kafka at k:9093 refused the connection: ...; check kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD)",
            tls=self.tls,
        )


@pytest.mark.parametrize(
    ("deps_kw", "reason"),
    [
        ({"kafka": RefusingKafka(tls=False)}, conditions.KAFKA_CREDENTIALS_REJECTED),
        ({"kafka": RefusingKafka(tls=True)}, conditions.KAFKA_TLS_FAILED),
        (
            {"provisioner": FakeProvisioner(cassandra.CredentialsRejected("refused (FLOE_KAFKA_SASL_PASSWORD)"))},
            conditions.CASSANDRA_CREDENTIALS_REJECTED,
        ),
        (
            {"provisioner": FakeProvisioner(cassandra.CredentialsRejected("handshake", tls=True))},
            conditions.CASSANDRA_TLS_FAILED,
        ),
    ],
)
def test_a_refusal_names_the_secret_key_the_pods_read(deps_kw: dict[str, Any], reason: str) -> None:
    cluster = FakeCluster({"rollup-kafka": {"username": "u", "password": "p"}})
    kw = {"kafka": FakeKafka({"metrics.raw": 3}), **deps_kw}
    outcome = _run(load_case("sasl-plaintext"), _deps(cluster=cluster, **kw), {})
    assert outcome.fault is not None and outcome.fault.reason == reason
    assert cluster.applied == []
    if "FLOE_KAFKA_SASL_PASSWORD" in outcome.fault.message:
        assert "(FLOE_KAFKA_SASL_PASSWORD from Secret rollup-kafka key password)" in outcome.fault.message


def test_a_provisioned_app_whose_credentials_stop_working_is_degraded_but_not_for_an_outage() -> None:
    body = load_case("minimal")
    first = _run(body, _deps(), {})
    body["status"] = first.status_patch
    refused = FakeProvisioner(check_error=cassandra.CredentialsRejected("refused the credentials"))
    outcome = _run(body, _deps(provisioner=refused), {})
    assert refused.calls == 0 and refused.checks == 1
    assert outcome.fault is not None and outcome.fault.reason == conditions.CASSANDRA_CREDENTIALS_REJECTED
    # unreachable: the replicas wait it out; the app is not degraded for it
    down = FakeProvisioner(check_error=cassandra.CassandraUnavailable("no host"))
    outcome = _run(body, _deps(provisioner=down), {})
    assert outcome.fault is None and down.checks == 1


class RefusingCluster(FakeCluster):
    def __init__(self, status: int, message: str) -> None:
        super().__init__()
        self.refusal = k8s.ApiError(status, message, kind="Secret", name="rollup-kafka")

    async def secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        raise self.refusal


def test_an_unreadable_secret_degrades_the_app_with_what_to_change() -> None:
    body = load_case("sasl-plaintext")
    forbidden = 'secrets "rollup-kafka" is forbidden: User "system:serviceaccount:floe:floe" cannot get resource'
    cluster = RefusingCluster(403, forbidden)
    outcome = _run(body, _deps(cluster=cluster, kafka=FakeKafka({"metrics.raw": 3})), {})
    assert outcome.fault == conditions.Fault(
        conditions.SECRET_UNREADABLE,
        f"Reading Secret rollup-kafka in namespace obs failed (HTTP 403: {forbidden}); "
        "grant the operator's ServiceAccount get on Secrets in namespace obs",
    )
    assert cluster.applied == []  # nothing rolls out on a spec whose Secrets are unknown
    degraded = next(c for c in outcome.status_patch["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", conditions.SECRET_UNREADABLE)

    outcome = _run(body, _deps(cluster=RefusingCluster(0, "API server unreachable: timed out")), {})
    assert outcome.fault is not None and outcome.fault.message.endswith(
        "(HTTP 0: API server unreachable: timed out); retrying"
    )


def test_is_subset_tolerates_api_defaults_and_quantity_forms() -> None:
    desired = {"a": 1, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}, "args": [], "list": [{"x": 1}]}
    live = {"a": 1, "b": 2, "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"}}, "list": [{"x": 1, "y": 2}]}
    assert reconcile.is_subset(desired, live)
    assert not reconcile.is_subset({"a": 2}, live)
    assert not reconcile.is_subset({"list": [{"x": 1}, {"x": 2}]}, live)
    assert not reconcile.is_subset({"cpu": "1"}, {"cpu": "1000m"})  # quantities only under resources


def test_tables_to_drop_keeps_tables_shared_with_other_apps() -> None:
    app = model.StreamingApp.from_body(load_case("full"))
    other_body = load_case("full")
    other_body["metadata"].update(name="orders-v2", uid="other")
    other_body["spec"]["state"]["stores"] = [{"name": "customers", "type": "global"}]
    other = model.StreamingApp.from_body(other_body)
    tables = reconcile.tables_to_drop(app, [app, other])
    assert "customers_kstreams_store" not in tables
    assert "order_state_kstreams_store" in tables
    assert not [t for t in tables if t.startswith("floe_offsets")]  # shared by the keyspace: rows go, not the table


def test_render_children_are_deterministic() -> None:
    app = model.StreamingApp.from_body(load_case("full"))
    assert render.children(app) == render.children(app)


def test_deployment_mark_ignores_what_the_status_does_not_read() -> None:
    from floe_operator import handlers

    dep = {
        "metadata": {"generation": 2, "resourceVersion": "10", "annotations": {render.APPLIED_HASH: "abc"}},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 2, "replicas": 2, "readyReplicas": 0, "updatedReplicas": 2},
    }
    moved = copy.deepcopy(dep)
    moved["metadata"]["resourceVersion"] = "11"
    assert handlers._deployment_mark(dep) == handlers._deployment_mark(moved)
    moved["status"]["readyReplicas"] = 1
    assert handlers._deployment_mark(dep) != handlers._deployment_mark(moved)


def test_a_child_of_the_same_name_left_by_a_deleted_app_is_not_taken_for_ours() -> None:
    body = load_case("minimal")
    app = model.StreamingApp.from_body(body)
    ours = {"metadata": {"name": "x", "ownerReferences": [{"uid": app.uid}]}}
    old = {"metadata": {"name": "x", "ownerReferences": [{"uid": "a-deleted-app"}]}}
    assert reconcile._find({"Service": [old, ours]}, "Service", "x", app.uid) is ours
    assert reconcile._find({"Service": [old]}, "Service", "x", app.uid) is old
    assert reconcile._find({"Service": [old]}, "Service", "y", app.uid) is None


def test_a_rotated_secret_rolls_the_pods_and_its_content_never_reaches_the_template() -> None:
    body = load_case("sasl-plaintext")
    cluster = FakeCluster({"rollup-kafka": {"username": "u", "password": "hunter2"}})
    deps = _deps(cluster=cluster, kafka=FakeKafka({"metrics.raw": 3}))
    assert _run(body, deps, {}).fault is None
    first = cluster.objects[("Deployment", body["metadata"]["name"])]
    digest = first["spec"]["template"]["metadata"]["annotations"][render.SECRETS_HASH]
    assert "hunter2" not in str(first)

    # Unchanged Secret: nothing to apply.
    assert _run(body, deps, _children(cluster)).applied == []
    # The Secret is updated (new resourceVersion): the pod template changes, so the pods roll.
    cluster.versions["rollup-kafka"] = "2"
    outcome = _run(body, deps, _children(cluster))
    assert outcome.applied == [f"Deployment/{body['metadata']['name']}"]
    rolled = cluster.objects[("Deployment", body["metadata"]["name"])]
    assert rolled["spec"]["template"]["metadata"]["annotations"][render.SECRETS_HASH] != digest
    assert render.secrets_hash({}) is None


def test_only_the_apps_own_repartition_topics_are_deleted_with_it() -> None:
    app = model.StreamingApp.from_body(load_case("minimal"))
    prefix = app.app_id
    recorded = [
        *app.spec.kafka.topics,
        f"{prefix}-words-repartition",
        f"{prefix}-dlq",
        f"{prefix}x-words-repartition",  # another app whose id merely starts the same way
        "other-app-words-repartition",
    ]
    assert reconcile.repartition_topics(app, recorded) == [f"{prefix}-words-repartition"]


def _named(name: str, *, uid: str, created: str, stores: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body = load_case("full")
    body["metadata"].update(name=name, uid=uid, creationTimestamp=created)
    if stores is not None:
        body["spec"]["state"]["stores"] = stores
    return body


def test_a_younger_app_writing_an_elder_apps_store_is_refused_naming_both() -> None:
    elder = _named("orders", uid="a", created="2026-01-01T00:00:00Z")
    younger = _named("orders-v2", uid="b", created="2026-01-02T00:00:00Z")
    alone = _run(younger, _deps(), {}).fault  # alone, its store is its own (its Secrets are missing here)
    assert alone is not None and alone.reason == conditions.SECRET_NOT_FOUND
    cluster = FakeCluster()
    outcome = asyncio.run(
        reconcile.reconcile(younger, deps=_deps(cluster=cluster), children={}, others=[elder, younger])
    )
    assert outcome.fault is not None and outcome.fault.reason == conditions.STORE_IN_USE
    assert "'order_state' (table shop_orders.order_state_kstreams_store)" in outcome.fault.message
    assert "already written by StreamingApp shop/orders;" in outcome.fault.message
    assert cluster.applied == []  # nothing rolled out
    degraded = [c for c in outcome.status_patch["conditions"] if c["type"] == conditions.DEGRADED]
    assert degraded[0]["status"] == "True" and degraded[0]["reason"] == conditions.STORE_IN_USE
    # the elder keeps its store
    kept = asyncio.run(reconcile.reconcile(elder, deps=_deps(), children={}, others=[elder, younger])).fault
    assert kept is not None and kept.reason == conditions.SECRET_NOT_FOUND


def test_apps_sharing_only_global_stores_or_another_keyspace_are_not_refused() -> None:
    elder = _named("orders", uid="a", created="2026-01-01T00:00:00Z")
    global_only = _named(
        "orders-v2", uid="b", created="2026-01-02T00:00:00Z", stores=[{"name": "customers", "type": "global"}]
    )
    elsewhere = _named("orders-v3", uid="c", created="2026-01-03T00:00:00Z")
    elsewhere["spec"]["state"]["cassandra"]["keyspace"] = "other_keyspace"
    app = model.StreamingApp.from_body(global_only)
    assert reconcile.store_in_use(app, reconcile.neighbours(app, [elder, global_only])) is None
    app = model.StreamingApp.from_body(elsewhere)
    assert reconcile.neighbours(app, [elder, global_only, elsewhere]) == []


def test_an_app_without_a_partitioned_store_parses_no_other_app(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 apps on one keyspace: a pass of each parsed every other one for StoreInUse, 9 ms apiece
    others = [_named(f"orders-{i}", uid=f"u{i}", created="2026-01-01T00:00:00Z", stores=[]) for i in range(50)]
    app = model.StreamingApp.from_body(_named("lonely", uid="me", created="2026-01-02T00:00:00Z", stores=[]))
    parsed: list[str] = []
    real = model.StreamingApp.from_body

    def counted(body: Mapping[str, Any]) -> model.StreamingApp:
        parsed.append(body["metadata"]["name"])
        return real(body)

    monkeypatch.setattr(model.StreamingApp, "from_body", staticmethod(counted))
    checked = asyncio.run(reconcile._check(app, _deps(), others))
    assert checked.fault is not None and checked.fault.reason == conditions.SECRET_NOT_FOUND  # past StoreInUse
    assert parsed == []
    # one with a partitioned store parses only the neighbours that name one of its tables
    writer = others[7]
    writer["spec"]["state"]["stores"] = [{"name": "order_state"}]
    mine = model.StreamingApp.from_body(
        _named("orders-v2", uid="b", created="2026-01-02T00:00:00Z", stores=[{"name": "order_state"}])
    )
    parsed.clear()
    assert [o.name for o in reconcile.neighbours(mine, others, writing={"order_state_kstreams_store"})] == ["orders-7"]
    assert parsed == ["orders-7"]


def test_an_elder_app_on_its_way_out_does_not_hold_its_store() -> None:
    elder = _named("orders", uid="a", created="2026-01-01T00:00:00Z")
    elder["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    younger = _named("orders-v2", uid="b", created="2026-01-02T00:00:00Z")
    app = model.StreamingApp.from_body(younger)
    assert reconcile.neighbours(app, [elder, younger]) == []


def _executor_pod(name: str, *, scheduled: bool, app: str = "clicks") -> dict[str, Any]:
    labels = {"spark-role": "executor", render.EXECUTOR_OF: app}
    cond = {"type": "PodScheduled", "status": "True"}
    if not scheduled:
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu."}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "executor", "resources": {"requests": {"cpu": "2", "memory": "4505Mi"}}}]},
        "status": {"phase": "Pending" if not scheduled else "Running", "conditions": [cond]},
    }


def _with_executors(cluster: FakeCluster, pods: list[dict[str, Any]], app: str = "clicks") -> dict[str, Any]:
    """The children, with the executor pods' summaries as the operator's index holds them (by app)."""
    children: dict[str, Any] = _children(cluster)
    mine = [p for p in pods if p["metadata"]["labels"][render.EXECUTOR_OF] == app]
    children[reconcile.EXECUTOR_POD] = [podfaults.summary(p) for p in mine]
    return children


def test_executors_that_cannot_be_scheduled_make_the_app_degraded_naming_their_resources() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster, kafka=FakeKafka({"clicks": 4}))
    body = load_case("spark-k8s")
    first = _run(body, deps, {})
    assert first.fault is None
    assert conditions.find(first.status_patch["conditions"], conditions.DEGRADED)["status"] == "False"  # type: ignore[index]
    body["status"] = first.status_patch
    pods = [
        _executor_pod("clicks-1f-exec-1", scheduled=True),
        _executor_pod("clicks-1f-exec-2", scheduled=False),
        _executor_pod("other-exec-1", scheduled=False, app="other"),
    ]
    second = _run(body, deps, _with_executors(cluster, pods))
    degraded = conditions.find(second.status_patch["conditions"], conditions.DEGRADED)
    assert degraded is not None and degraded["status"] == "True"
    assert degraded["reason"] == conditions.EXECUTORS_UNSCHEDULABLE
    message = degraded["message"]
    assert "1 of 2 executor pod(s) cannot be scheduled" in message
    assert "cpu 2, memory 4505Mi" in message and "2 core(s), memory 4g" in message
    assert "clicks-1f-exec-2: 0/1 nodes are available: 1 Insufficient cpu." in message
    assert [e.reason for e in second.events] == [conditions.EXECUTORS_UNSCHEDULABLE]
    # the drivers are not blocked: nothing is withheld from them
    assert second.fault is None
    body["status"] = {**body["status"], **second.status_patch}
    third = _run(body, deps, _with_executors(cluster, [_executor_pod("clicks-1f-exec-2", scheduled=True)]))
    degraded = conditions.find(third.status_patch["conditions"], conditions.DEGRADED)
    assert degraded is not None and degraded["status"] == "False"


def test_a_k8s_master_without_the_spark_rbac_names_the_missing_permission() -> None:
    cluster = FakeCluster()
    cluster.refused = {"ServiceAccount", "Role", "RoleBinding"}
    deps = _deps(cluster=cluster, kafka=FakeKafka({"clicks": 4}))
    outcome = _run(load_case("spark-k8s"), deps, {})
    assert outcome.fault is not None and outcome.fault.reason == conditions.SPARK_RBAC_MISSING
    assert 'cannot patch resource "' in outcome.fault.message
    assert "rbac.sparkOnKubernetes=true" in outcome.fault.message
    assert not any(o["kind"] == "Deployment" for o in cluster.applied)  # nothing rolls out half-valid
    # any other refusal stays ApplyFailed
    cluster = FakeCluster()
    cluster.refused = {"Service"}
    outcome = _run(load_case("minimal"), _deps(cluster=cluster), {})
    assert outcome.fault is not None and outcome.fault.reason == conditions.APPLY_FAILED


@pytest.mark.parametrize(
    ("secret", "data", "named"),
    [
        (
            "kafka-ca",
            {"ca.crt": "hunter2, no certificate"},
            "kafka.ssl_ca_pem (FLOE_KAFKA_SSL_CA_PEM from Secret kafka-ca key ca.crt): no BEGIN CERTIFICATE block",
        ),
        ("audit-client-cert", {"tls.crt": material.CERT, "tls.key": material.CERT},
         "kafka.ssl_key_pem (FLOE_KAFKA_SSL_KEY_PEM from Secret audit-client-cert key tls.key): no private key in it"),
    ],
)
def test_unusable_tls_material_degrades_the_app_before_any_client_reads_it(
    secret: str, data: dict[str, str], named: str
) -> None:
    secrets = {"kafka-ca": {"ca.crt": material.CERT}, "audit-client-cert": {"tls.crt": material.CERT,
                                                                             "tls.key": material.KEY}}
    cluster = FakeCluster({**secrets, secret: data})
    kafka_check = FakeKafka({"audit.events": 3})
    outcome = _run(load_case("kafka-mtls"), _deps(cluster=cluster, kafka=kafka_check), {})
    assert outcome.fault is not None and outcome.fault.reason == conditions.KAFKA_TLS_FAILED
    assert outcome.fault.message.startswith(named)
    assert "hunter2" not in outcome.fault.message and cluster.applied == []


def test_the_first_pass_records_the_new_id_and_later_passes_keep_it() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    first = _run(body, deps, {})
    new_id = appids.new_id("team-a", "word-count")
    assert first.status_patch["appId"] == new_id
    assert f"app_id: {new_id}\n" in cluster.objects[("ConfigMap", "word-count-config")]["data"][render.CONFIG_FILE]
    body["status"] = first.status_patch
    assert "appId" not in _run(body, deps, _children(cluster)).status_patch


def test_an_app_an_older_operator_ran_keeps_its_legacy_id() -> None:
    cluster = FakeCluster()
    body = load_case("minimal")
    body["status"] = {"observedGeneration": 1}  # as an older operator left it: no appId
    outcome = _run(body, _deps(cluster=cluster), {})
    assert outcome.status_patch["appId"] == "team-a-word-count"
    rendered = cluster.objects[("ConfigMap", "word-count-config")]["data"][render.CONFIG_FILE]
    assert "app_id: team-a-word-count\n" in rendered


def test_an_app_whose_own_configmap_names_an_id_keeps_it_before_status_records_one() -> None:
    # an older operator applied the children and stopped before writing the status
    body = load_case("minimal")
    body["metadata"]["uid"] = "uid-1"
    old = model.StreamingApp.from_body({**body, "status": {"observedGeneration": 1}})
    owned = render.stamp(render.config_map(old))
    outcome = _run(body, _deps(), {"ConfigMap": [owned]})
    assert outcome.status_patch["appId"] == "team-a-word-count"
    # a ConfigMap of the same name that another app (uid) owns says nothing about this one
    foreign = copy.deepcopy(owned)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "uid-0"
    assert _run(body, _deps(), {"ConfigMap": [foreign]}).status_patch["appId"] == appids.new_id("team-a", "word-count")


def test_a_younger_app_with_an_elder_apps_id_is_refused_naming_both() -> None:
    elder = load_case("minimal")
    elder["metadata"].update(namespace="ptn-a", name="orders", uid="a", creationTimestamp="2026-01-01T00:00:00Z")
    elder["status"] = {"observedGeneration": 3}
    younger = load_case("minimal")
    younger["metadata"].update(namespace="ptn", name="a-orders", uid="b", creationTimestamp="2026-01-02T00:00:00Z")
    younger["status"] = {"observedGeneration": 3}
    cluster = FakeCluster()
    outcome = asyncio.run(
        reconcile.reconcile(younger, deps=_deps(cluster=cluster), children={}, others=[elder, younger])
    )
    assert outcome.fault is not None and outcome.fault.reason == conditions.APP_ID_CONFLICT == "AppIdConflict"
    assert "StreamingApp ptn/a-orders has app id ptn-a-orders" in outcome.fault.message
    assert "StreamingApp ptn-a/orders (created earlier)" in outcome.fault.message
    assert cluster.applied == []
    degraded = conditions.find(outcome.status_patch["conditions"], conditions.DEGRADED)
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "AppIdConflict")
    # the elder goes on
    kept = FakeCluster()
    outcome = asyncio.run(reconcile.reconcile(elder, deps=_deps(cluster=kept), children={}, others=[elder, younger]))
    assert outcome.fault is None
    assert kept.applied


class RacingCluster(FakeCluster):
    """A RoleBinding refused while its Role is not stored, as the API server does for a writer
    without `bind`; `flaky` kinds refused with 404 the first time whatever the order."""

    def __init__(self, flaky: set[str] | None = None) -> None:
        super().__init__()
        self.flaky = set(flaky or ())

    async def apply(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        missing = k8s.ApiError(404, f'roles.rbac.authorization.k8s.io "{name}" not found', kind=kind, name=name)
        if kind in self.flaky:
            self.flaky.discard(kind)
            raise missing
        if kind == "RoleBinding" and ("Role", obj["roleRef"]["name"]) not in self.objects:
            raise missing
        await asyncio.sleep(0.01)
        return await super().apply(obj, urgent=urgent)


def test_the_drivers_rolebinding_is_applied_after_its_role() -> None:
    cluster = RacingCluster()
    outcome = _run(load_case("spark-k8s"), _deps(cluster=cluster, kafka=FakeKafka({"clicks": 4})), {})
    assert outcome.fault is None
    kinds = [o["kind"] for o in cluster.applied]
    assert kinds.index("Role") < kinds.index("RoleBinding") < kinds.index("Deployment")
    degraded = conditions.find(outcome.status_patch["conditions"], conditions.DEGRADED)
    assert degraded is not None and degraded["status"] == "False"


def test_a_transient_refusal_is_applied_again_before_any_condition_says_degraded() -> None:
    cluster = RacingCluster(flaky={"RoleBinding", "Service"})
    outcome = _run(load_case("spark-k8s"), _deps(cluster=cluster, kafka=FakeKafka({"clicks": 4})), {})
    assert outcome.fault is None and not cluster.flaky
    assert {"RoleBinding", "Service", "Deployment"} <= {o["kind"] for o in cluster.applied}
    # a refusal that does not go away is reported
    cluster = FakeCluster()
    cluster.refused = {"Service"}
    outcome = _run(load_case("minimal"), _deps(cluster=cluster), {})
    assert outcome.fault is not None and outcome.fault.reason == conditions.APPLY_FAILED


class CountingCluster(FakeCluster):
    """Counts the reads of Secrets by `get` (the query token's)."""

    def __init__(self, secrets: dict[str, dict[str, str]] | None = None) -> None:
        super().__init__(secrets)
        self.secret_reads = 0

    async def get(
        self, api_version: str, kind: str, namespace: str, name: str, *, deferred: bool = False
    ) -> dict[str, Any] | None:
        self.secret_reads += kind == "Secret"
        return await super().get(api_version, kind, namespace, name, deferred=deferred)


def test_a_new_apps_query_token_is_created_without_a_read_first() -> None:
    cluster = CountingCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    outcome = _run(body, deps, {})
    assert outcome.fault is None
    assert ("Secret", "word-count-query") in cluster.objects
    assert cluster.secret_reads == 0  # one round trip before the Deployment, not two
    assert "Secret" in cluster.urgent  # and it goes before other apps' Services and status writes
    # a later pass (status written, the Deployment there) reads it and writes nothing
    token = cluster.objects[("Secret", "word-count-query")]["stringData"]["token"]
    body["status"] = {"observedGeneration": 1}
    _run(body, deps, _children(cluster))
    assert cluster.secret_reads == 1
    assert cluster.objects[("Secret", "word-count-query")]["stringData"]["token"] == token
    # a new app whose Secret is there already (made by an earlier pass) keeps it
    del body["status"]
    assert _run(body, deps, {}).fault is None
    assert cluster.objects[("Secret", "word-count-query")]["stringData"]["token"] == token


def test_the_query_token_secret_is_made_once_and_kept() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    assert _run(load_case("minimal"), deps, {}).fault is None
    secret = cluster.objects[("Secret", "word-count-query")]
    token = secret["stringData"]["token"]
    assert len(token) >= 40 and secret["metadata"]["ownerReferences"][0]["kind"] == "StreamingApp"
    assert _run(load_case("minimal"), deps, {}).fault is None
    assert cluster.objects[("Secret", "word-count-query")]["stringData"]["token"] == token
    env = {e["name"]: e for e in cluster.objects[("Deployment", "word-count")]["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    assert env["FLOE_METRICS_QUERY_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "word-count-query"


# --- a generation held back: a snapshot before its upgrade, a new app's restore ----------------

SETTLED = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1}


def _settle(cluster: FakeCluster) -> None:
    """The Deployment's rollout complete, as the Deployment controller would report it."""
    deployment = cluster.objects[("Deployment", "word-count")]
    deployment.setdefault("metadata", {})["generation"] = 1
    deployment["status"] = dict(SETTLED)


def _images(cluster: FakeCluster) -> list[str]:
    return [c["image"] for c in cluster.objects[("Deployment", "word-count")]["spec"]["template"]["spec"]["containers"]]


def _pass(body: dict[str, Any], deps: reconcile.Deps, cluster: FakeCluster) -> reconcile.Outcome:
    outcome = _run(body, deps, _children(cluster))
    body["status"] = {**body.get("status", {}), **outcome.status_patch}
    return outcome


def test_a_new_image_runs_the_old_spec_until_its_snapshot_succeeded_then_drops_what_it_no_longer_asks_for() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["spec"]["rollout"]["upgradeMode"] = "snapshot"
    body["spec"]["snapshots"] = {"location": "s3a://backups/wc"}
    _pass(body, deps, cluster)
    _settle(cluster)
    _pass(body, deps, cluster)
    assert body["status"]["lastReady"]["generation"] == 1
    old_image = body["spec"]["image"]
    # generation 2: a new image, and no NetworkPolicy any more
    body["metadata"]["generation"] = 2
    body["spec"]["image"] = old_image + "-2"
    body["spec"]["networkPolicy"] = {"enabled": False}
    held = _pass(body, deps, cluster)
    snapshot = cluster.objects[(model.SNAPSHOT_KIND, "word-count-upgrade-2")]
    assert snapshot["spec"]["location"] == "s3a://backups/wc/word-count-upgrade-2"
    assert old_image in _images(cluster) and old_image + "-2" not in _images(cluster)
    assert ("NetworkPolicy", "word-count") in cluster.objects
    ready = conditions.find(body["status"]["conditions"], conditions.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", conditions.SNAPSHOT_BEFORE_UPGRADE)
    assert held.fault is None
    snapshot["status"] = {"phase": "Succeeded"}
    _pass(body, deps, cluster)
    assert old_image + "-2" in _images(cluster)
    assert ("NetworkPolicy", "word-count") not in cluster.objects
    # retention may delete the snapshot before generation 2 is Ready: it neither waits again nor
    # takes another
    del cluster.objects[(model.SNAPSHOT_KIND, "word-count-upgrade-2")]
    _pass(body, deps, cluster)
    assert (model.SNAPSHOT_KIND, "word-count-upgrade-2") not in cluster.objects
    assert old_image + "-2" in _images(cluster)


def test_a_new_app_from_a_snapshot_gets_its_pods_only_once_its_restore_job_succeeded() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["spec"]["restoreFrom"] = {"location": "s3a://backups/wc/nightly-1"}
    first = _pass(body, deps, cluster)
    assert ("Deployment", "word-count") not in cluster.objects
    assert ("ConfigMap", "word-count-config") in cluster.objects  # what the restore's pod reads
    job = cluster.objects[("Job", "word-count-restore")]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:3] == ["restore", "--from",
                                                                            "s3a://backups/wc/nightly-1"]
    assert first.status_patch["restore"]["phase"] == "Pending"
    ready = conditions.find(body["status"]["conditions"], conditions.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", conditions.RESTORING)
    _pass(body, deps, cluster)
    assert ("Deployment", "word-count") not in cluster.objects
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "completionTime": "2026-11-29T07:00:00Z"}
    done = _pass(body, deps, cluster)
    assert ("Deployment", "word-count") in cluster.objects
    assert done.status_patch["restore"]["phase"] == "Succeeded"
    cluster.objects.pop(("Job", "word-count-restore"))  # its TTL ran out: nothing is restored again
    _pass(body, deps, cluster)
    assert ("Job", "word-count-restore") not in cluster.objects


def test_a_refused_restore_keeps_the_app_without_pods_and_says_why() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["spec"]["restoreFrom"] = {"location": "s3a://backups/wc/none"}
    _pass(body, deps, cluster)
    job = cluster.objects[("Job", "word-count-restore")]
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    outcome = _pass(body, deps, cluster)
    assert ("Deployment", "word-count") not in cluster.objects
    degraded = conditions.find(body["status"]["conditions"], conditions.DEGRADED)
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", conditions.RESTORE_FAILED)
    assert outcome.status_patch["restore"]["phase"] == "Failed"


# --- a restore in place: spec.stateRestore, and a rollback's state -------------------------------

COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}], "completionTime": "2026-11-29T07:00:00Z"}


def _replicas(cluster: FakeCluster) -> int:
    return int(cluster.objects[("Deployment", "word-count")]["spec"]["replicas"])


def _pod(body: dict[str, Any], name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {render.APP_LABEL: body["metadata"]["name"]}}}


def _job_args(cluster: FakeCluster, name: str) -> list[str]:
    return list(cluster.objects[("Job", name)]["spec"]["template"]["spec"]["containers"][0]["args"])


def test_a_restore_in_place_holds_the_pods_at_zero_runs_its_job_once_they_are_gone_then_resumes() -> None:
    cluster = FakeCluster()
    kafka_ = FakeKafka({"lines": 4})
    deps = _deps(cluster=cluster, kafka=kafka_)
    body = load_case("minimal")
    body["spec"]["replicas"] = 2
    _pass(body, deps, cluster)
    _settle(cluster)
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 2
    cluster.pods = [_pod(body, "word-count-1"), _pod(body, "word-count-2")]
    kafka_.members = 2
    body["spec"]["stateRestore"] = {"id": "undo-1", "location": "s3a://backups/wc/nightly-1"}
    body["metadata"]["generation"] = 2
    waiting = _pass(body, deps, cluster)
    assert _replicas(cluster) == 0
    assert not [k for k in cluster.objects if k[0] == "Job"], "the Job ran while the app's pods were there"
    assert waiting.status_patch["stateRestore"]["phase"] == "Waiting"
    ready = conditions.find(body["status"]["conditions"], conditions.READY)
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", conditions.RESTORING)
    assert "word-count-1" in ready["message"]
    assert conditions.find(body["status"]["conditions"], conditions.SUSPENDED) is None
    cluster.pods = []
    _pass(body, deps, cluster)
    assert not [k for k in cluster.objects if k[0] == "Job"], "the Job ran while the consumer group had members"
    kafka_.members = 0
    started = _pass(body, deps, cluster)
    name = started.status_patch["stateRestore"]["job"]
    assert _job_args(cluster, name)[:4] == ["restore", "--from", "s3a://backups/wc/nightly-1", "--replace"]
    assert started.status_patch["stateRestore"]["phase"] == "Pending" and _replicas(cluster) == 0
    cluster.objects[("Job", name)]["status"] = dict(COMPLETE)
    done = _pass(body, deps, cluster)
    assert done.status_patch["stateRestore"]["phase"] == "Succeeded"
    assert _replicas(cluster) == 2
    cluster.objects.pop(("Job", name))  # its TTL ran out: the id is not run again
    _pass(body, deps, cluster)
    assert ("Job", name) not in cluster.objects and _replicas(cluster) == 2
    # a new id is another restore
    body["spec"]["stateRestore"] = {"id": "undo-2", "location": "s3a://backups/wc/nightly-2"}
    again = _pass(body, deps, cluster)
    assert again.status_patch["stateRestore"]["id"] == "undo-2" and _replicas(cluster) == 0


def test_a_failed_restore_in_place_keeps_the_app_at_zero_and_its_job_is_followed_even_if_the_request_goes() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    _pass(body, deps, cluster)
    _settle(cluster)
    body["spec"]["stateRestore"] = {"id": "undo-1", "location": "s3a://backups/wc/nightly-1"}
    started = _pass(body, deps, cluster)
    name = started.status_patch["stateRestore"]["job"]
    # the request is removed while its Job runs: the Job is still followed, and holds the pods
    del body["spec"]["stateRestore"]
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 0
    cluster.objects[("Job", name)]["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    body["spec"]["stateRestore"] = {"id": "undo-1", "location": "s3a://backups/wc/nightly-1"}
    failed = _pass(body, deps, cluster)
    assert failed.status_patch["stateRestore"]["phase"] == "Failed" and _replicas(cluster) == 0
    degraded = conditions.find(body["status"]["conditions"], conditions.DEGRADED)
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", conditions.RESTORE_FAILED)
    cluster.objects.pop(("Job", name))  # its TTL ran out: the failure stands, and nothing is retried unasked
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 0, "a failed restore in place let the pods run while its id stands"
    assert ("Job", name) not in cluster.objects
    assert body["status"]["stateRestore"]["phase"] == "Failed"
    body["spec"]["stateRestore"] = {"id": "undo-2", "location": "s3a://backups/wc/nightly-2"}
    retried = _pass(body, deps, cluster)
    record = retried.status_patch["stateRestore"]
    assert record["id"] == "undo-2" and record["phase"] == "Pending"
    # the whole record is written, so the failure's message of undo-1 does not stay beside it
    assert set(record) == set(restorejob.RECORD_FIELDS) and record["message"] is None


def test_a_failed_restore_in_place_without_positions_holds_the_app_after_its_request_is_removed() -> None:
    """The restore deletes the app's positions first and writes them again last: a failure in
    between leaves half-written tables, which no removal of spec.stateRestore may run the app on."""
    cluster = FakeCluster()
    provisioner = FakeProvisioner()
    deps = _deps(cluster=cluster, provisioner=provisioner)
    body = load_case("minimal")
    _pass(body, deps, cluster)
    _settle(cluster)
    assert _replicas(cluster) == 1
    body["spec"]["stateRestore"] = {"id": "undo-1", "location": "s3a://backups/wc/nightly-1"}
    name = _pass(body, deps, cluster).status_patch["stateRestore"]["job"]
    cluster.objects[("Job", name)]["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    assert _pass(body, deps, cluster).status_patch["stateRestore"]["phase"] == "Failed"
    del body["spec"]["stateRestore"]
    body["metadata"]["generation"] = 2
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 0, "the app ran on what a failed restore left once its request was removed"
    cluster.objects.pop(("Job", name))  # its TTL ran out
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 0, "the app ran on what a failed restore left once its Job was gone"
    degraded = conditions.find(body["status"]["conditions"], conditions.DEGRADED)
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", conditions.RESTORE_FAILED)
    assert "removing spec.stateRestore does not run the app" in degraded["message"]
    # positions there: the failure came before the restore deleted anything, so the app runs again
    provisioner.topics = ["lines"]
    _pass(body, deps, cluster)
    assert _replicas(cluster) == 1
    assert ("Job", name) not in cluster.objects, "the failed restore ran again unasked"


def _bad_image_after_its_snapshot(body: dict[str, Any], deps: reconcile.Deps, cluster: FakeCluster) -> str:
    """Generation 2: a new image, rolled out once its snapshot succeeded; the image before it."""
    old_image = str(body["spec"]["image"])
    body["metadata"]["generation"] = 2
    body["spec"]["image"] = old_image + "-bad"
    _pass(body, deps, cluster)
    cluster.objects[(model.SNAPSHOT_KIND, "word-count-upgrade-2")]["status"] = {"phase": "Succeeded"}
    _pass(body, deps, cluster)
    return old_image


def _past_its_deadline(cluster: FakeCluster) -> None:
    """Generation 2's rollout made no progress within its deadline, as the Deployment controller says."""
    deployment = cluster.objects[("Deployment", "word-count")]
    deployment["metadata"]["generation"] = 2
    deployment["status"] = {**SETTLED, "observedGeneration": 2, "updatedReplicas": 0, "conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}


def test_a_rolled_back_upgrade_restores_the_snapshot_taken_before_it_then_runs_the_last_ready_spec() -> None:
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["spec"]["rollout"].update({"upgradeMode": "snapshot", "autoRollback": True})
    body["spec"]["snapshots"] = {"location": "s3a://backups/wc"}
    _pass(body, deps, cluster)
    _settle(cluster)
    _pass(body, deps, cluster)
    old_image = _bad_image_after_its_snapshot(body, deps, cluster)
    assert old_image + "-bad" in _images(cluster)
    _past_its_deadline(cluster)
    rolled = _pass(body, deps, cluster)
    assert body["status"]["rolledBack"]["generation"] == 2
    assert old_image in _images(cluster) and _replicas(cluster) == 0
    record = rolled.status_patch["rollbackRestore"]
    assert (record["id"], record["from"]) == ("rollback-2", "s3a://backups/wc/word-count-upgrade-2")
    assert _job_args(cluster, record["job"])[:4] == ["restore", "--from", "s3a://backups/wc/word-count-upgrade-2",
                                                     "--replace"]
    # the restore's pod runs the last Ready generation's image, which wrote the snapshot
    job = cluster.objects[("Job", record["job"])]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == old_image
    job["status"] = dict(COMPLETE)
    _pass(body, deps, cluster)
    assert body["status"]["rollbackRestore"]["phase"] == "Succeeded"
    assert old_image in _images(cluster) and _replicas(cluster) == 1
    rolled_back = conditions.find(body["status"]["conditions"], conditions.ROLLED_BACK)
    assert rolled_back is not None and rolled_back["status"] == "True"


def test_a_declared_restore_done_before_a_rollback_is_not_run_again_after_it() -> None:
    """spec.stateRestore undo-1 done; later a failed upgrade is rolled back with its snapshot
    restored; once the next generation is tried, undo-1 (still in the spec) must not run again:
    the rollback's record does not hide the declared one."""
    cluster = FakeCluster()
    deps = _deps(cluster=cluster)
    body = load_case("minimal")
    body["spec"]["rollout"].update({"upgradeMode": "snapshot", "autoRollback": True})
    body["spec"]["snapshots"] = {"location": "s3a://backups/wc"}
    body["spec"]["stateRestore"] = {"id": "undo-1", "location": "s3a://backups/wc/nightly-1"}
    first = _pass(body, deps, cluster)
    undo = first.status_patch["stateRestore"]["job"]
    cluster.objects[("Job", undo)]["status"] = dict(COMPLETE)
    _pass(body, deps, cluster)
    assert body["status"]["stateRestore"]["phase"] == "Succeeded"
    _settle(cluster)
    _pass(body, deps, cluster)
    # generation 2 fails after its snapshot; it is rolled back and the snapshot restored
    old_image = _bad_image_after_its_snapshot(body, deps, cluster)
    _past_its_deadline(cluster)
    rolled = _pass(body, deps, cluster)
    cluster.objects[("Job", rolled.status_patch["rollbackRestore"]["job"])]["status"] = dict(COMPLETE)
    _pass(body, deps, cluster)
    assert body["status"]["rollbackRestore"]["phase"] == "Succeeded"
    assert body["status"]["stateRestore"]["id"] == "undo-1"
    # generation 3 is tried: no rollback any more, and undo-1 stays done
    cluster.objects.pop(("Job", undo))  # its TTL ran out
    body["metadata"]["generation"] = 3
    body["spec"]["image"] = old_image + "-3"
    _pass(body, deps, cluster)
    assert ("Job", undo) not in cluster.objects, "spec.stateRestore undo-1 ran a second time"
    assert _replicas(cluster) == 1
