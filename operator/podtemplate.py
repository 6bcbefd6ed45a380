"""spec.podTemplate: what a user may add to the pods Floe renders, and what stays Floe's.

Pure, like `render`, which calls `merge` last: the user's sidecars, init containers, volumes,
topology spread constraints, labels and annotations are added to Floe's pod; the container
named `app` in spec.podTemplate.spec.containers is Floe's own container, of which the user may
set only volumeMounts, envFrom and securityContext. Everything Floe must own (the container's
command, image, environment, ports, probes, lifecycle, resources, the config and tmp mounts)
is refused, and so is anything outside the Pod Security Standards' restricted profile: the
container securityContext fields are an allow-list, AppArmor and seccomp profiles must be
RuntimeDefault or Localhost, and every container drops all capabilities whatever the template
says (`merge`), adding at most NET_BIND_SERVICE.

The CRD's CEL rules refuse most of it at admission; `problems` repeats every check in Python,
so an object admitted by an older CRD (or one CEL cannot express) gets a Degraded condition
naming the field instead of a Deployment the API server or the pod security admission rejects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from floe_operator import model

FIELD = "spec.podTemplate"
# What a user may set on Floe's container; the rest of it is Floe's.
APP_FIELDS = ("name", "volumeMounts", "envFrom", "securityContext")
# Where to set instead what Floe owns on its container.
OWNED_ELSEWHERE = {
    "image": "spec.image",
    "imagePullPolicy": "spec.imagePullPolicy",
    "env": "spec.env",
    "resources": "spec.resources",
    "lifecycle": "spec.shutdown",
}
# Volume sources the restricted profile allows (Pod Security Standards).
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
ADDABLE_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
# The container securityContext fields a template may set (an allow-list: seLinuxOptions,
# windowsOptions and whatever Kubernetes adds next are refused until they are read).
CONTAINER_SECURITY_FIELDS = frozenset(
    {
        "allowPrivilegeEscalation",
        "appArmorProfile",
        "capabilities",
        "privileged",
        "procMount",
        "readOnlyRootFilesystem",
        "runAsGroup",
        "runAsNonRoot",
        "runAsUser",
        "seccompProfile",
    }
)
POD_SECURITY_FIELDS = frozenset({"fsGroup", "fsGroupChangePolicy", "supplementalGroups", "seccompProfile"})
CONFINED_PROFILES = ("RuntimeDefault", "Localhost")
# Annotations that set a container's AppArmor or seccomp profile the old way, beside the fields.
PROFILE_ANNOTATIONS = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)


@dataclass(frozen=True)
class Owned:
    """What Floe's rendered pod holds that the template must not touch."""

    container: str
    volumes: frozenset[str]
    mount_paths: frozenset[str]
    ports: frozenset[int]


def _container_security(where: str, ctx: Mapping[str, Any]) -> list[str]:
    out = [
        f"{where}.{key}: not allowed; a template may set only {', '.join(sorted(CONTAINER_SECURITY_FIELDS))}"
        for key in sorted(ctx)
        if key not in CONTAINER_SECURITY_FIELDS
    ]
    for profile in ("seccompProfile", "appArmorProfile"):
        kind = (ctx.get(profile) or {}).get("type")
        if kind is not None and kind not in CONFINED_PROFILES:
            out.append(
                f"{where}.{profile}.type: {kind} is outside the restricted profile (RuntimeDefault or Localhost)"
            )
    if ctx.get("procMount", "Default") != "Default":
        out.append(f"{where}.procMount: only Default (restricted profile)")
    if ctx.get("privileged") is True:
        out.append(f"{where}.privileged: privileged containers are outside the restricted profile")
    if ctx.get("allowPrivilegeEscalation") is True:
        out.append(f"{where}.allowPrivilegeEscalation: must be false (restricted profile)")
    if ctx.get("runAsNonRoot") is False:
        out.append(f"{where}.runAsNonRoot: must not be false; Floe's pods run as non-root")
    if ctx.get("runAsUser") == 0:
        out.append(f"{where}.runAsUser: must not be 0 (root)")
    caps = ctx.get("capabilities") or {}
    extra = sorted(set(caps.get("add") or []) - ADDABLE_CAPABILITIES)
    if extra:
        out.append(f"{where}.capabilities.add: {', '.join(extra)} not allowed; only NET_BIND_SERVICE may be added")
    # capabilities.drop needs no check: `merge` drops ALL on every container, whatever it says
    return out


def _annotation_problems(where: str, annotations: Mapping[str, str]) -> list[str]:
    return [
        f"{where}[{key}]: AppArmor and seccomp profiles are Floe's (RuntimeDefault); set "
        f"{FIELD}.spec.containers[].securityContext instead"
        for key in sorted(annotations)
        if key.startswith(PROFILE_ANNOTATIONS)
    ]


def problems(app: model.StreamingApp, owned: Owned) -> list[str]:
    """Why spec.podTemplate cannot be merged, one message per field; [] when it can."""
    part = app.spec.pod_template.spec
    out: list[str] = []
    volumes = {str(v.get("name", "")) for v in part.volumes}
    for i, volume in enumerate(part.volumes):
        where = f"{FIELD}.spec.volumes[{i}]"
        name = str(volume.get("name", ""))
        if name in owned.volumes:
            out.append(f"{where}.name: {name!r} is Floe's own volume; choose another name")
        sources = [k for k in volume if k != "name"]
        for source in sources:
            if source not in RESTRICTED_VOLUMES:
                out.append(f"{where}.{source}: this volume type is outside the restricted profile")
    seen: set[str] = set()
    for field, containers in (("containers", part.containers), ("initContainers", part.init_containers)):
        for i, c in enumerate(containers):
            where = f"{FIELD}.spec.{field}[{i}]"
            name = str(c.get("name", ""))
            if name in seen:
                out.append(f"{where}.name: {name!r} is used by another container")
            seen.add(name)
            if name == owned.container and field == "initContainers":
                out.append(f"{where}.name: {name!r} is Floe's container; name init containers otherwise")
            if name == owned.container and field == "containers":
                out.extend(_app_problems(c, where, owned, volumes))
                continue
            out.extend(_container_security(f"{where}.securityContext", c.get("securityContext") or {}))
            for j, port in enumerate(c.get("ports") or []):
                if port.get("hostPort"):
                    out.append(f"{where}.ports[{j}].hostPort: host ports are outside the restricted profile")
                if field == "containers" and port.get("containerPort") in owned.ports:
                    out.append(
                        f"{where}.ports[{j}].containerPort: {port.get('containerPort')} is a port of Floe's container"
                    )
    out.extend(_annotation_problems(f"{FIELD}.metadata.annotations", app.spec.pod_template.metadata.annotations))
    out.extend(_annotation_problems("spec.pod.annotations", app.spec.pod.annotations))
    pod_ctx = part.security_context
    for key in sorted(set(pod_ctx) - POD_SECURITY_FIELDS - {"runAsUser", "runAsGroup", "runAsNonRoot"}):
        out.append(f"{FIELD}.spec.securityContext.{key}: not allowed; only {', '.join(sorted(POD_SECURITY_FIELDS))}")
    if pod_ctx.get("runAsNonRoot") is False:
        out.append(f"{FIELD}.spec.securityContext.runAsNonRoot: must not be false; Floe's pods run as non-root")
    kind = (pod_ctx.get("seccompProfile") or {}).get("type")
    if kind is not None and kind not in CONFINED_PROFILES:
        out.append(f"{FIELD}.spec.securityContext.seccompProfile.type: {kind} is outside the restricted profile")
    for key in ("runAsUser", "runAsGroup", "runAsNonRoot"):
        if key in pod_ctx:
            out.append(f"{FIELD}.spec.securityContext.{key}: set by Floe; use spec.pod.runAsUser")
    return out


def _app_problems(c: Mapping[str, Any], where: str, owned: Owned, volumes: set[str]) -> list[str]:
    out = []
    for key in c:
        if key not in APP_FIELDS:
            instead = OWNED_ELSEWHERE.get(key)
            hint = f"; set {instead} instead" if instead else ""
            out.append(f"{where}.{key}: Floe owns this field of its container {owned.container!r}{hint}")
    for j, mount in enumerate(c.get("volumeMounts") or []):
        name, path = str(mount.get("name", "")), str(mount.get("mountPath", "")).rstrip("/")
        if name in owned.volumes:
            out.append(f"{where}.volumeMounts[{j}].name: {name!r} is Floe's own mount")
        elif name not in volumes:
            out.append(f"{where}.volumeMounts[{j}].name: no volume {name!r} in {FIELD}.spec.volumes")
        if any(path == p or path.startswith(p + "/") or p.startswith(path + "/") for p in owned.mount_paths):
            out.append(f"{where}.volumeMounts[{j}].mountPath: {path} would cover or sit in one of Floe's mounts")
    out.extend(_container_security(f"{where}.securityContext", c.get("securityContext") or {}))
    return out


def _drop_all(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """`ctx` with every capability dropped: what a container adds (NET_BIND_SERVICE at most) is
    all it has, and a template that sets capabilities or drop cannot keep the others."""
    return {**ctx, "capabilities": {**(ctx.get("capabilities") or {}), "drop": ["ALL"]}}


def _restricted(container: Mapping[str, Any]) -> dict[str, Any]:
    """A sidecar or init container with the restricted profile's settings where it sets none,
    and all capabilities dropped whatever it sets."""
    ctx = {"allowPrivilegeEscalation": False, **(container.get("securityContext") or {})}
    return {**container, "securityContext": _drop_all(ctx)}


def _merge_app(floe: Mapping[str, Any], mine: Mapping[str, Any] | None) -> dict[str, Any]:
    if mine is None:
        return dict(floe)
    merged = dict(floe)
    if mine.get("volumeMounts"):
        merged["volumeMounts"] = [*floe.get("volumeMounts", []), *mine["volumeMounts"]]
    if mine.get("envFrom"):
        merged["envFrom"] = list(mine["envFrom"])
    ctx = mine.get("securityContext") or {}
    if ctx:
        base = dict(floe.get("securityContext") or {})
        caps = {**(base.get("capabilities") or {}), **(ctx.get("capabilities") or {})}
        merged["securityContext"] = _drop_all({**base, **ctx, "capabilities": caps})
    return merged


def merge(pod_spec: Mapping[str, Any], app: model.StreamingApp, *, selector: Mapping[str, str]) -> dict[str, Any]:
    """Floe's pod spec with spec.podTemplate.spec added (call only when `problems` is empty)."""
    part = app.spec.pod_template.spec
    containers: Sequence[dict[str, Any]] = pod_spec["containers"]
    own = containers[0]["name"]
    mine = next((c for c in part.containers if c.get("name") == own), None)
    merged: dict[str, Any] = dict(pod_spec)
    merged["containers"] = [
        _merge_app(containers[0], mine),
        *containers[1:],
        *(_restricted(c) for c in part.containers if c.get("name") != own),
    ]
    if part.init_containers:
        merged["initContainers"] = [_restricted(c) for c in part.init_containers]
    if part.volumes:
        merged["volumes"] = [*pod_spec.get("volumes", []), *(dict(v) for v in part.volumes)]
    if part.topology_spread_constraints:
        merged["topologySpreadConstraints"] = [
            {"labelSelector": {"matchLabels": dict(selector)}, **c} for c in part.topology_spread_constraints
        ]
    if part.security_context:
        merged["securityContext"] = {**pod_spec.get("securityContext", {}), **part.security_context}
    return merged
