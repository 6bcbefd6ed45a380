"""Older builds of an image on the stack's node: a rebuild removes them only once nothing names
them. A Deployment (zero replicas, so no pod runs) that names an older tag keeps it through the
prune, as a running app's ReplicaSet keeps the tag its next pod will need; once the Deployment is
gone the same prune removes it. Real containerd and API server."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from floe_stack import component, images, node
from floe_stack.layout import Layout

from ...nodekit import kubectl, require_node

pytestmark = [pytest.mark.node, pytest.mark.k8s]


def test_an_older_build_named_by_a_deployment_survives_the_prune_and_goes_after(stack_env: dict[str, str]) -> None:
    env = require_node(stack_env)
    layout = Layout.discover(Path(__file__).resolve().parents[3])
    the_node = node.Node(layout, component.PortBook.load(layout))
    current = images.Image(name="job", ref=env["FLOE_JOB_IMAGE"], archive=Path("/nonexistent"))
    older = f"{current.ref.rsplit(':', 1)[0]}:older-{uuid.uuid4().hex[:8]}"
    subprocess.run(the_node.ctr("images", "tag", current.ref, older), check=True, capture_output=True)
    name, namespace = f"keeps-{uuid.uuid4().hex[:6]}", "default"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": older}]}}},
    }
    kubectl(env, "apply", "-f", "-", input=json.dumps(deployment))
    try:
        assert older not in the_node.prune_older(current)
        assert older in the_node.imported(), "a tag a Deployment names was removed"
    finally:
        kubectl(env, "delete", "deployment", name, "-n", namespace, "--wait=true")
    assert older in the_node.prune_older(current)
    assert older not in the_node.imported(), "a tag nothing names was kept"
