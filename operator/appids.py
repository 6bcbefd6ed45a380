"""App ids: the one name under which an app's replicas keep their offsets and internal topics.

The runtime derives from the app id (`floe_jobs.config`): the app's rows of the keyspace's
offsets table (partition key `app_id`), the dead-letter topic `<app-id>-dlq`, the repartition
topics `<app-id>-<name>-repartition`, and Spark's application name; an offset reset and
`deletionPolicy: Delete` act on exactly those. So no two apps may ever share one. It must be
a DNS label (the runtime refuses anything else), which also keeps it a valid topic prefix and
label value.

Two formats exist:

- **legacy** `<namespace>-<name>`, cut to 54 characters plus an 8-hex digest past 63. It is
  ambiguous: `ptn-a/orders` and `ptn/a-orders` both get `ptn-a-orders`. Apps an older operator
  reconciled keep it, since their offsets rows and topics carry it.
- **current** `<namespace>-<name>-<10 hex of sha256("<namespace>/<name>")>`, the readable part cut
  to 52 characters. The digest is of the unambiguous `<namespace>/<name>` (a namespace holds no
  '/'), so two apps get the same id only if sha256 collides in 40 bits or a name is made to end in
  another app's digest; a current id never equals a cut legacy id (their last segments are 10
  and 8 hex long). What no format can rule out (a name crafted to equal another app's id) the
  reconcile refuses (`conflict`).

Which one an app has is decided once and recorded in `status.appId`; every later pass, the lag
loop and the finalizer read it from there (`app_id_of`). The signal that an app is *existing*,
i.e. reconciled by an operator that predates `status.appId`, is `status.observedGeneration`
without `status.appId`: every operator version writes observedGeneration on every pass that
writes status, the first included, and never without looking at the app. Status is written
only through the status subresource, so users and GitOps tools applying the manifest never
touch it. The reconcile adds one more signal that needs the app's children (`running_id`): the
app's own ConfigMap names the id its replicas run under, which covers an older operator that
applied the children and was stopped before it wrote the status.

The lag loop finds an app's repartition topics in the app's own offsets rows
(`is_repartition_topic`), not in the spec (which names no stages: they are the job's code) nor
in the cluster's topic list (see `repartition_topics` for why).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

MAX_LENGTH = 63
DIGEST_HEX = 10
LEGACY_DIGEST_HEX = 8
# What the runtime accepts (`floe_jobs.config.FloeConfig.app_id`): a DNS label.
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def legacy_id(namespace: str, name: str) -> str:
    """The id operators before status.appId gave every app: `<namespace>-<name>`, cut with a
    digest past 63 characters. Ambiguous; kept only for the apps that run under it."""
    full = f"{namespace}-{name}"
    if len(full) <= MAX_LENGTH:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:LEGACY_DIGEST_HEX]
    return f"{full[: MAX_LENGTH - LEGACY_DIGEST_HEX - 1].rstrip('-')}-{digest}"


def new_id(namespace: str, name: str) -> str:
    """The id of a new app: readable `<namespace>-<name>` (cut to fit) and a digest of the
    unambiguous `<namespace>/<name>`, at most 63 characters."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:DIGEST_HEX]
    readable = f"{namespace}-{name}"[: MAX_LENGTH - DIGEST_HEX - 1].rstrip("-")
    return f"{readable}-{digest}"


def valid(app_id: Any) -> bool:
    """Whether `app_id` is one the runtime accepts (a DNS label)."""
    return isinstance(app_id, str) and bool(_DNS_LABEL.match(app_id))


def app_id_of(namespace: str, name: str, status: Mapping[str, Any]) -> str:
    """The app's id from what its object says: the one recorded in status.appId; else, for an
    app an older operator reconciled (observedGeneration without appId), the legacy id it runs
    under; else the id of a new app."""
    recorded = status.get("appId")
    if valid(recorded):
        return str(recorded)
    if status.get("observedGeneration") is not None:
        return legacy_id(namespace, name)
    return new_id(namespace, name)


def running_id(config_map: Mapping[str, Any] | None, config_file: str) -> str | None:
    """The app id the app's replicas read from its ConfigMap (`config_file` of its data), or None
    when there is no ConfigMap or it names no valid id."""
    text = ((config_map or {}).get("data") or {}).get(config_file)
    if not isinstance(text, str):
        return None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    found = loaded.get("app_id") if isinstance(loaded, dict) else None
    return str(found) if valid(found) else None


REPARTITION_SUFFIX = "-repartition"


def is_repartition_topic(app_id: str, topic: str) -> bool:
    """Whether `topic` has the form of one of the app's repartition topics,
    `<app id>-<name>-repartition` (`floe_jobs.config.FloeConfig.repartition_topic`), with a
    non-empty name."""
    prefix = f"{app_id}-"
    return (
        topic.startswith(prefix)
        and topic.endswith(REPARTITION_SUFFIX)
        and len(topic) > len(prefix) + len(REPARTITION_SUFFIX)
    )


def repartition_topics(app_id: str, recorded: Iterable[str], inputs: Iterable[str]) -> tuple[str, ...]:
    """The app's repartition topics among `recorded`, the topics of its own offsets rows (the
    rows of partition key `app_id`), sorted; an input topic never counts as one.

    The rows are the source, not a match over the cluster's topic names: ownership by name alone
    is ambiguous (the topic `a-1-x-y-repartition` fits both app `a-1`, name `x-y`, and app `a-1-x`,
    name `y`), while a row belongs to exactly one app, its partition key. Rows also hold the
    topics the app no longer reads as input (a topic taken out of spec.kafka.topics keeps its
    rows), so the name is checked too, and `inputs` are left out (an app may read another app's
    repartition topic as its input: that is input lag, counted as such). A repartition partition
    no stage has committed yet has no row; like an input partition committed nowhere, it would
    count no lag anyway."""
    skip = set(inputs)
    return tuple(sorted({t for t in recorded if t not in skip and is_repartition_topic(app_id, t)}))


def folded(app_id: str) -> str:
    """The id as Kafka compares topic names: '.' and '_' collide in its metric names, so topics
    differing only there are refused or confused. Ids are DNS labels and hold neither today; the
    comparison is still Kafka's, so a looser format could not slip two apps past it."""
    return app_id.replace(".", "_")


def _rank(meta: Mapping[str, Any]) -> tuple[str, str, str]:
    """Elder first: creation time (RFC 3339, so strings order as times), then namespace/name."""
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def sharers(app_id: str, uid: str, others: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(namespace, name) of every other app whose id equals `app_id` after Kafka's folding, elder
    first. `others` are raw bodies of every watched app; the app itself (`uid`) is skipped. Apps on
    their way out count: while one's finalizer runs it still acts on its id."""
    mine = folded(app_id)
    found = []
    for body in others:
        meta = body.get("metadata") or {}
        if meta.get("uid") == uid:
            continue
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if folded(app_id_of(namespace, name, body.get("status") or {})) == mine:
            found.append((_rank(meta), namespace, name))
    return [(namespace, name) for _, namespace, name in sorted(found)]


def conflict(app_id: str, meta: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(namespace, name) of the eldest other app with the same id as the app of metadata `meta`,
    if it is elder than that app, else None: only the younger of two is refused, so the elder
    keeps running."""
    rank = _rank(meta)
    elders = [body for body in others if _rank(body.get("metadata") or {}) < rank]
    found = sharers(app_id, str(meta.get("uid") or ""), elders)
    return found[0] if found else None
