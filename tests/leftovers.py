"""What the tests leave on the shared stack — Kafka topics and Cassandra keyspaces — removed when
the fixture scope that made it ends.

The broker is shared by every run: topics left by earlier tests (thousands after a few runs) make
every metadata and ListOffsets request of every later test larger and slower. So each test, each
module and each session holds a `Leftovers` while it runs (an autouse fixture of
`tests/conftest.py` for a test, the hooks of `Plugin` for a module and the session), and what is
made meanwhile is recorded in the innermost one:

* every topic created through `localrun.create_topic`, by name;
* every name drawn from `localrun.unique` (an app id, a topic, a namespace) as a topic prefix, so
  the topics an app creates for itself (`<app id>-dlq`, `<app id>-words-repartition`) go too;
* what a fixture names itself (`topic`, `prefix`, `keyspace` below): namespaces whose apps'
  topics are `<namespace>-<app>-...`, keyspaces of pod apps, topics made with the AdminClient.

pytest sets up a test's module and session fixtures before its function fixtures, and an autouse
fixture first among those of its scope, so a module fixture's topic is recorded in the module's record
and outlives the test that first asked for it. A prefix is a name drawn at random for one test
(8 or 6 hex digits), so deleting by it never touches a test that runs beside this one on another
worker. A failed delete is no failure of the test: it is logged and given as a warning.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

log = logging.getLogger(__name__)


class LeftoverWarning(UserWarning):
    """A topic or keyspace a test made could not be removed."""


@dataclass(eq=False)  # scopes are told apart by identity: two empty ones are not the same scope
class Leftovers:
    """What one scope made; `clean` removes it."""

    topics: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    keyspaces: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.topics or self.prefixes or self.keyspaces)

    def matching(self, existing: set[str]) -> list[str]:
        """The topics of `existing` this scope made."""
        return sorted(t for t in existing if t in self.topics or any(t.startswith(p) for p in self.prefixes))

    def clean(self, env: Mapping[str, str]) -> None:
        try:
            if self.topics or self.prefixes:
                delete_topics(env["FLOE_KAFKA_BOOTSTRAP"], self)
            if self.keyspaces:
                drop_keyspaces(env, sorted(self.keyspaces))
        except Exception as exc:  # the stack may be down; the next run's scopes clean their own
            complain(f"could not remove what the test made ({self}): {exc!r}")


def complain(message: str) -> None:
    log.warning(message)
    warnings.warn(message, LeftoverWarning, stacklevel=2)


def delete_topics(bootstrap: str, made: Leftovers) -> None:
    from floe_stack import localrun

    for name, exc in localrun.delete_topics(bootstrap, lambda t: bool(made.matching({t}))).items():
        if exc is not None:
            complain(f"topic {name} left on the broker: {exc}")


def drop_keyspaces(env: Mapping[str, str], names: list[str]) -> None:
    from cassandra.cluster import Cluster

    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    try:
        session = cluster.connect()
        for name in names:
            try:
                session.execute(f'DROP KEYSPACE IF EXISTS "{name}"', timeout=120)
            except Exception as exc:
                complain(f"keyspace {name} left in Cassandra: {exc!r}")
    finally:
        cluster.shutdown()


_scopes: list[Leftovers] = []


def _current() -> Leftovers | None:
    return _scopes[-1] if _scopes else None


def topic(name: str) -> str:
    """Record a topic made outside `localrun.create_topic`; returns it."""
    if (scope := _current()) is not None:
        scope.topics.add(name)
    return name


def prefix(name: str) -> str:
    """Record a prefix of topics made meanwhile (a namespace, an app id); returns it."""
    if (scope := _current()) is not None:
        scope.prefixes.add(name)
    return name


def keyspace(name: str) -> str:
    """Record a keyspace made meanwhile; returns it."""
    if (scope := _current()) is not None:
        scope.keyspaces.add(name)
    return name


# The stack's settings, once a test has asked for them (the `stack_env` fixture): nothing is made
# on a stack no test used, so there is nothing to clean without them.
STACK: dict[str, str] = {}


def open_scope() -> Leftovers:
    """Record what is made from now on in a new innermost scope."""
    made = Leftovers()
    _scopes.append(made)
    return made


def close_scope(made: Leftovers) -> None:
    """Stop recording in `made` and remove what it holds from the stack."""
    if made in _scopes:
        _scopes.remove(made)
        if made and STACK:
            made.clean(STACK)


class Plugin:
    """The module and session scopes, kept by pytest's hooks: a module-scoped autouse fixture
    would put every test in its module's xdist group (`tests/lanes.py`). A module's scope opens
    before its first test's fixtures and closes after the teardown that finalizes its module
    fixtures (the next test is in another module, or there is none)."""

    def __init__(self) -> None:
        self.session = open_scope()
        self.module: tuple[str, Leftovers] | None = None

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        path = item.nodeid.split("::", 1)[0]
        if self.module is None or self.module[0] != path:
            if self.module is not None:
                close_scope(self.module[1])
            self.module = (path, open_scope())
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, None, None]:
        yield
        if self.module is not None and (nextitem is None or nextitem.nodeid.split("::", 1)[0] != self.module[0]):
            close_scope(self.module[1])
            self.module = None

    def pytest_sessionfinish(self) -> None:
        if self.module is not None:
            close_scope(self.module[1])
            self.module = None
        close_scope(self.session)


def instrument(localrun: Any) -> Callable[[], None]:
    """Record `localrun.create_topic`'s topics and `localrun.unique`'s names; returns the undo."""
    create, unique = localrun.create_topic, localrun.unique

    def create_topic(bootstrap: str, name: str, partitions: int) -> None:
        create(bootstrap, topic(name), partitions)

    def unique_name(p: str) -> str:
        return prefix(unique(p))

    localrun.create_topic, localrun.unique = create_topic, unique_name

    def undo() -> None:
        localrun.create_topic, localrun.unique = create, unique

    return undo
