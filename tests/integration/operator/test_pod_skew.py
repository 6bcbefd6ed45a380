"""Version skew on the stack's node: the operator renders a configuration of a newer config schema
than the app image's runtime reads (the operator of a later release, made here by stamping the
rendered file with the next schema and the keys that schema would add).

A key the runtime lacks and may not leave out stops the pod at start; the app's Degraded
condition (CrashLooping) quotes the runtime's termination message, which names the key, both
schemas and the runtime's release. With only keys the file lists as optional, the same image
leaves them out, says so in its log, and runs: the pod becomes Ready.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import config
from floe_operator import render
from floe_stack import demo

from ...nodekit import require_node, word_count_app
from ..waiting import wait_for
from .conftest import running_operator
from .kube import Kubectl, condition

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

NEWER = config.CONFIG_SCHEMA + 1


def test_a_newer_operators_key_stops_an_older_image_with_both_schemas_on_the_app_and_optional_keys_do_not(
    kube: Kubectl, namespace: str, stack_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = require_node(stack_env)
    body = word_count_app(env, namespace=namespace, name="skew", partitions=2, replicas=1)
    app = body["metadata"]["name"]
    required = {"on": True}
    rendered_by_this_release = render.job_config

    def newer_operator(streaming_app: Any) -> dict[str, Any]:
        rendered = rendered_by_this_release(streaming_app)
        later = {
            **rendered,
            "config_schema": NEWER,
            "optional_keys": [*rendered.get("optional_keys", []), "metrics.exemplars"],
            "metrics": {**rendered["metrics"], "exemplars": True},
        }
        if required["on"]:
            later["kafka"] = {**rendered["kafka"], "output_guarantee": "exactlyOnce"}
        return later

    monkeypatch.setattr(render, "job_config", newer_operator)

    def pods() -> list[dict[str, Any]]:
        return [
            p
            for p in kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")
            if not p["metadata"].get("deletionTimestamp")
        ]

    with running_operator(kube, namespace, resync_seconds=5):
        kube.apply(body)

        def crash_looping() -> dict[str, Any] | None:
            cond = condition(kube.get("streamingapp", app, namespace) or {}, "Degraded")
            return cond if cond.get("status") == "True" and cond.get("reason") == "CrashLooping" else None

        cond = wait_for(crash_looping, timeout=300, what="Degraded/CrashLooping on the app", every=2)
        message = cond["message"]
        assert "last exit code 2" in message, message
        assert "kafka.output_guarantee: not known to this runtime" in message, message
        assert f"rendered for config schema {NEWER}" in message, message
        assert f"reads config schema {config.CONFIG_SCHEMA}" in message, message
        assert f"floe {config.runtime_version()}" in message and "spec.image" in message, message

        # The spec no longer asks for what the image cannot do: only optional keys are left, and
        # a change of the spec rolls the pod with the new file.
        required["on"] = False
        body["spec"]["shutdown"] = {**body["spec"].get("shutdown", {}), "drainTimeoutSeconds": 21}
        kube.apply(body)

        def ready_pod() -> dict[str, Any] | None:
            live = pods()
            return live[0] if len(live) == 1 and demo.is_ready(live[0]) else None

        pod = wait_for(ready_pod, timeout=480, what="the app's pod Ready on the optional keys", every=2)
        logs = kube.run("logs", pod["metadata"]["name"], "-n", namespace).stdout
        assert "Left out optional keys=['metrics.exemplars']" in logs
        assert f"of config schema {NEWER} (this runtime reads {config.CONFIG_SCHEMA})" in logs
