"""Fixtures of the node's tests: the stack's settings with the node required, and a namespace
of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests import leftovers

from ...nodekit import kubectl, require_node


@pytest.fixture(scope="module")
def node_env(stack_env: dict[str, str]) -> dict[str, str]:
    return require_node(stack_env)


@pytest.fixture
def namespace(node_env: dict[str, str]) -> Iterator[str]:
    name = leftovers.prefix(f"floe-node-it-{uuid.uuid4().hex[:6]}")  # its apps' topics start with it
    kubectl(node_env, "create", "namespace", name)
    yield name
    kubectl(node_env, "delete", "namespace", name, "--wait=false")
