"""Fixtures for the snapshot tests: the runtime tests' apps (fresh topics and keyspace per app)."""

from tests.integration.runtime.conftest import (  # noqa: F401 - fixtures, registered by import
    dropped_keyspaces,
    new_app,
    session,
    word_count_app,
)
