"""Typed errors of the state stores.

Every error names what a person needs to act on it: the store, the operation, the partition
and the key involved (as far as they are known), and for decode failures the schema version.
"""

from __future__ import annotations

from typing import Any


def _short(key: object, limit: int = 80) -> str:
    text = repr(key)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class StoreError(Exception):
    """Base class of every error raised by `floe_jobs.stores`."""

    def __init__(
        self,
        message: str,
        *,
        store: str | None = None,
        operation: str | None = None,
        partition: int | None = None,
        key: Any = None,
    ) -> None:
        self.store = store
        self.operation = operation
        self.partition = partition
        self.key = key
        parts = [message]
        context = []
        if store is not None:
            context.append(f"store={store}")
        if operation is not None:
            context.append(f"operation={operation}")
        if partition is not None:
            context.append(f"partition={partition}")
        if key is not None:
            context.append(f"key={_short(key)}")
        if context:
            parts.append("(" + " ".join(context) + ")")
        super().__init__(" ".join(parts))


class StoreConfigError(StoreError):
    """A store, table or connection setting is invalid; raised before any I/O where possible."""


class KeyspaceMissingError(StoreConfigError):
    """The keyspace does not exist and the caller asked not to create it."""


class TableMissingError(StoreConfigError):
    """The store's table does not exist and table creation is turned off."""


class UnsupportedOperationError(StoreError):
    """The operation is not possible on this store type (e.g. a range over a global store)."""


class StoreUnavailableError(StoreError):
    """Cassandra could not be reached or timed out, after every retry.

    `attempts` is how many times the statement was tried; `__cause__` is the last driver error.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int,
        store: str | None = None,
        operation: str | None = None,
        partition: int | None = None,
        key: Any = None,
    ) -> None:
        self.attempts = attempts
        super().__init__(
            f"{message} after {attempts} attempt(s)",
            store=store,
            operation=operation,
            partition=partition,
            key=key,
        )


class StoreQueryError(StoreError):
    """Cassandra rejected a statement (invalid request, unauthorized, ...); retrying will not help."""


class SerdeError(ValueError):
    """A value could not be encoded or decoded by a serde.

    Raised by the serdes themselves, which know nothing of stores; the stores wrap it in a
    `StoreDecodeError` that adds the store, key and partition.
    """

    def __init__(self, message: str, *, schema_version: int | None = None) -> None:
        self.schema_version = schema_version
        super().__init__(message)


class StoreDecodeError(StoreError):
    """A stored key or value failed to decode; names the store, key and schema version."""

    def __init__(
        self,
        message: str,
        *,
        schema_version: int | None = None,
        store: str | None = None,
        operation: str | None = None,
        partition: int | None = None,
        key: Any = None,
    ) -> None:
        self.schema_version = schema_version
        if schema_version is not None:
            message = f"{message} [schema_version={schema_version}]"
        super().__init__(message, store=store, operation=operation, partition=partition, key=key)
