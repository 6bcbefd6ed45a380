"""Every child an app should have, from its spec and what the cluster told the reconcile.

The renderers are split by wing (`render` builds the app's own children, `lag.scalers` the HPA
and KEDA ones), but the reconcile applies and compares them as one list, and the golden files
pin that list. `desired` is the one place that joins them, so what a pass would apply can be
rendered, and tested, without a cluster: the few things only the cluster knows arrive as `Facts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from floe_operator import model, render
from floe_operator.lag import scalers

Manifest = render.Manifest


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What the cluster told the reconcile, and nothing of the spec.

    A CRD counts as present only when it was asked about: the reconcile asks only when the spec
    wants the child, so False also stands for "not asked".
    """

    # The Prometheus Operator's ServiceMonitor CRD is installed.
    service_monitor_crd: bool
    # KEDA's ScaledObject CRD is installed.
    keda_crd: bool
    # Input partitions, summed over the input topics; None when unknown (the HPA then keeps
    # maxReplicas as the spec says).
    partitions: int | None
    # resourceVersion by name of each Secret the pods read; their digest rolls the pods when one changes.
    secret_versions: Mapping[str, str] = field(default_factory=dict)


def desired(app: model.StreamingApp, facts: Facts) -> list[Manifest]:
    """Every child in apply order, hash-stamped: the app's own (the Deployment last among them),
    then its autoscaler's. Pure: same app and facts, same list."""
    own = render.children(
        app,
        service_monitor_available=facts.service_monitor_crd,
        secrets_digest=render.secrets_hash(facts.secret_versions),
    )
    return own + scalers.children(app, keda_available=facts.keda_crd, partitions=facts.partitions)
