"""Unit tests are pure: `make unit` runs them with no stack. Every fixture that reaches the stack
(Kafka, Cassandra, Kubernetes, Spark's jars) goes through `stack_env`, which here fails the test
that asks for it instead of starting the stack."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def stack_env() -> dict[str, str]:
    pytest.fail("a unit test asked for the local stack; it belongs under tests/integration")
