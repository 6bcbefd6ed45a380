"""The one place the operator talks to Cassandra: provisioning before a rollout, dropping on Delete.

The DDL itself belongs to the job runtime's libraries (`floe_jobs.stores` for the store
tables, `floe_jobs.offsets` for the offsets table), so the operator and a job always agree
on table names and layouts. This module adds what an operator needs around them: one
session per cluster shared by all apps (mirroring no schema: tables are looked up in
`system_schema` and remembered), one provisioning at a time per keyspace with the apps that
wait for it woken together, and errors sorted into "unreachable, retry later" and "rejected,
fix the spec".
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe_operator import model

if TYPE_CHECKING:
    from floe_jobs.stores.config import CassandraConfig

RECHECK_SECONDS = 30.0
"""How long `Provisioner.check` takes a cluster it could not reach for still unreachable."""


class CassandraUnavailable(Exception):
    """Cassandra could not be reached or did not answer in time; retrying may help."""


class CredentialsRejected(CassandraUnavailable):
    """Cassandra refused the app's credentials or the TLS handshake; the Secret must change (the
    operator asks again on its next pass, as for an unreachable cluster). `tls`: the handshake
    failed (CA, certificate dates or names), not the authentication."""

    def __init__(self, message: str, *, tls: bool = False) -> None:
        super().__init__(message)
        self.tls = tls


def _tls_refused(exc: BaseException) -> bool:
    """Whether the store library's refusal was every node's TLS handshake: it says so in the
    driver's error it replaced (kept as its context)."""
    from cassandra.cluster import NoHostAvailable
    from floe_jobs.stores.config import tls_failure

    cause = exc.__context__
    if not isinstance(cause, NoHostAvailable) or not isinstance(cause.errors, dict) or not cause.errors:
        return False
    return all(tls_failure(e) for e in cause.errors.values())


class ProvisioningRejected(Exception):
    """Cassandra (or the store library) refused the layout; the spec must change."""


@dataclass(frozen=True)
class Target:
    """How to reach one Cassandra cluster, with credentials resolved from Secrets: the key of the
    operator's shared sessions. It holds the store library's connection settings, the one shape
    every session is opened from, and equals what a replica of the app connects with
    (`floe_jobs.config`: `cassandra.connection()`)."""

    connection: CassandraConfig

    @property
    def where(self) -> str:
        """The contact points, for messages."""
        return f"{','.join(self.connection.hosts)}:{self.connection.port}"


def target_of(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> Target:
    """The app's cluster; `secrets` maps Secret name → decoded data (checked to exist by the
    reconcile; CredentialsRejected when a key of the credentials Secret is missing after all)."""
    from floe_jobs.stores.config import CassandraConfig
    from floe_jobs.stores.errors import StoreConfigError

    cass = app.spec.state.cassandra
    username = password = ca_pem = None
    if cass.credentials_secret_ref is not None:
        data = secrets.get(cass.credentials_secret_ref.name, {})
        username = data.get(cass.credentials_secret_ref.username_key)
        password = data.get(cass.credentials_secret_ref.password_key)
    if cass.tls.ca_secret_ref is not None:
        ca_pem = secrets.get(cass.tls.ca_secret_ref.name, {}).get(cass.tls.ca_secret_ref.key)
    try:
        connection = CassandraConfig(
            hosts=tuple(cass.hosts),
            port=cass.port,
            local_datacenter=cass.local_datacenter,
            username=username,
            password=password,
            tls=cass.tls.enabled,
            tls_ca_pem=ca_pem,
            tls_verify_hostname=cass.tls.verify_hostname,
            **cass.tuning(),
        )
    except StoreConfigError as exc:
        raise CredentialsRejected(f"spec.state.cassandra.credentialsSecretRef: {exc}") from None
    return Target(connection)


def replication_of(app: model.StreamingApp) -> dict[str, object]:
    rep = app.spec.state.cassandra.replication
    if rep.strategy == "NetworkTopologyStrategy":
        return {"class": "NetworkTopologyStrategy", **{dc: n for dc, n in sorted(rep.datacenters.items())}}
    return {"class": "SimpleStrategy", "replication_factor": rep.replication_factor}


def layout_hash(app: model.StreamingApp) -> str:
    """Digest of everything provisioning depends on; provisioning reruns when it changes."""
    cass = app.spec.state.cassandra
    layout = {
        "hosts": sorted(cass.hosts),
        "port": cass.port,
        "keyspace": cass.keyspace,
        "replication": replication_of(app),
        "stores": [s.model_dump(mode="json") for s in app.spec.state.stores],
        "app_id": app.app_id,
    }
    return hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest()[:16]


def store_tables(app: model.StreamingApp) -> dict[str, str]:
    """Store name → table name, as the store library names them."""
    from floe_jobs.stores import schema

    return {s.name: schema.table_name(s.name) for s in app.spec.state.stores}


def _needed_tables(app: model.StreamingApp) -> list[str]:
    from floe_jobs import offsets
    from floe_jobs.stores import schema

    return [offsets.TABLE, *(schema.table_name(s.name) for s in app.spec.state.stores)]


def _covers(tables: Mapping[str, set[str]], app: model.StreamingApp) -> bool:
    """Whether `tables` (table → columns) holds every table this app needs, fence column and
    the offsets table's newer columns included.

    Lets an app whose tables exist (a re-created app, a new app on shared stores) skip the DDL
    round trips; anything missing goes through the store library as usual.
    """
    from floe_jobs import offsets
    from floe_jobs.stores import schema

    if offsets.TABLE not in tables or offsets.missing_columns(tables[offsets.TABLE]):
        return False
    for store in app.spec.state.stores:
        columns = tables.get(schema.table_name(store.name))
        if columns is None or (store.type == "partitioned" and schema.FENCE_COLUMN not in columns):
            return False
    return True


class Provisioner:
    """Shared sessions (one per cluster) and serialized DDL."""

    def __init__(self, *, connect_timeout: float = 5.0, concurrency: int = 4) -> None:
        self._sessions: dict[Target, Any] = {}
        self._locks: dict[Target, threading.Lock] = {}
        self._guard = threading.Lock()
        self._connect_timeout = connect_timeout
        # The store library's DDL is safe to run concurrently; this only bounds the load on Cassandra.
        # Waiting happens in the event loop, so a queued provisioning never holds a worker thread.
        self._concurrency = concurrency
        self._slots: asyncio.Semaphore | None = None
        # (cluster, keyspace) → table → columns, as last read or made by this operator.
        self._tables: dict[tuple[Target, str], dict[str, set[str]]] = {}
        # (cluster, keyspace) → set when the provisioning running there ends.
        self._running: dict[tuple[Target, str], asyncio.Event] = {}
        # cluster → when `check` last found it unreachable
        self._unreachable: dict[Target, float] = {}

    def _lock(self, target: Target) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(target, threading.Lock())

    def session(self, target: Target) -> Any:
        """The one session of `target`'s cluster, opened on first use (also for the lag reads)."""
        with self._lock(target):
            session = self._sessions.get(target)
            if session is not None and not session.is_shutdown:
                return session
            return self._connect(target)

    def _connect(self, target: Target) -> Any:
        from cassandra.cluster import NoHostAvailable, OperationTimedOut
        from floe_jobs.stores import config
        from floe_jobs.stores.errors import StoreConfigError

        # the operator's sessions only provision and read a few rows: no schema mirror, and a
        # short connect so an unreachable cluster does not hold a reconcile long
        cfg = dataclasses.replace(
            target.connection, connect_timeout=self._connect_timeout, ddl_timeout=30.0, schema_metadata=False
        )
        try:
            session = config.connect(cfg)
        except StoreConfigError as exc:
            raise CredentialsRejected(str(exc), tls=_tls_refused(exc)) from exc
        except (NoHostAvailable, OperationTimedOut, OSError) as exc:
            raise CassandraUnavailable(f"cannot connect to Cassandra at {target.where}: {exc}") from exc
        self._sessions[target] = session
        return session

    async def check(self, target: Target) -> None:
        """Reach `target` (its open session, or a new one): CredentialsRejected when it refuses the
        app's credentials or TLS material. A cluster found unreachable within the last
        `RECHECK_SECONDS` is not tried again (CassandraUnavailable at once), so apps checked one
        after the other do not each wait out a connect timeout."""
        session = self._sessions.get(target)
        if session is not None and not session.is_shutdown:
            return
        failed = self._unreachable.get(target)
        if failed is not None and time.monotonic() - failed < RECHECK_SECONDS:
            raise CassandraUnavailable(f"Cassandra at {target.where} was unreachable")
        try:
            await asyncio.to_thread(self.session, target)
        except CredentialsRejected:
            raise
        except CassandraUnavailable:
            self._unreachable[target] = time.monotonic()
            raise
        self._unreachable.pop(target, None)

    def provision_sync(self, target: Target, app: model.StreamingApp) -> None:
        from cassandra import DriverException, InvalidRequest, Unauthorized
        from cassandra.cluster import NoHostAvailable, OperationTimedOut
        from floe_jobs import offsets
        from floe_jobs.stores import errors, schema

        keyspace = app.spec.state.cassandra.keyspace
        stores = [
            schema.StoreSpec(
                name=s.name,
                type=s.type,
                ttl_seconds=s.ttl_seconds,
                table_options=dict(s.table_options) if s.table_options else None,
            )
            for s in app.spec.state.stores
        ]
        session = self.session(target)
        known = (target, keyspace)
        try:
            tables = schema.columns_of(session, keyspace, _needed_tables(app))
            if not _covers(tables, app):
                schema.provision(
                    session,
                    keyspace=keyspace,
                    replication=replication_of(app),
                    stores=stores,
                    extra_tables={offsets.TABLE: offsets.table_cql(keyspace)},
                )
                offsets.upgrade(session, keyspace=keyspace)
                tables = schema.columns_of(session, keyspace, _needed_tables(app))
        except (errors.StoreConfigError, InvalidRequest, Unauthorized) as exc:
            raise ProvisioningRejected(f"keyspace {keyspace}: {exc}") from exc
        except (errors.StoreUnavailableError, NoHostAvailable, OperationTimedOut, DriverException) as exc:
            raise CassandraUnavailable(f"keyspace {keyspace}: {exc}") from exc
        self._tables.setdefault(known, {}).update(tables)

    def _slot(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._concurrency)
        return self._slots

    async def provision(self, target: Target, app: model.StreamingApp) -> None:
        """Keyspace, store tables and offsets table, created if absent (idempotent)."""
        known = (target, app.spec.state.cassandra.keyspace)
        # One provisioning at a time per keyspace: apps arriving together mostly need the same
        # keyspace and tables, so the first one creates them and the others, woken together when
        # it ends, find them known without a round trip or a worker thread.
        while not _covers(self._tables.get(known, {}), app):
            running = self._running.get(known)
            if running is not None:
                await running.wait()
                continue
            done = self._running[known] = asyncio.Event()
            try:
                async with self._slot():
                    await asyncio.to_thread(self.provision_sync, target, app)
            finally:
                del self._running[known]
                done.set()
            return

    def drop_sync(self, target: Target, *, keyspace: str, tables: list[str]) -> None:
        from cassandra import DriverException
        from cassandra.cluster import NoHostAvailable, OperationTimedOut
        from floe_jobs.stores import errors, schema

        schema.check_identifier(keyspace, "keyspace")
        session = self.session(target)
        for table in tables:
            schema.check_identifier(table, "table")
            try:
                schema.execute_ddl(session, f"DROP TABLE IF EXISTS {keyspace}.{table}", what=f"drop {keyspace}.{table}")
            except (errors.StoreUnavailableError, NoHostAvailable, OperationTimedOut, DriverException) as exc:
                raise CassandraUnavailable(f"dropping {keyspace}.{table}: {exc}") from exc
            self._tables.get((target, keyspace), {}).pop(table, None)

    def _offsets_call(self, target: Target, app: model.StreamingApp, what: str, call: Any) -> Any:
        from cassandra import DriverException
        from cassandra.cluster import NoHostAvailable, OperationTimedOut

        session = self.session(target)
        try:
            return call(session, keyspace=app.spec.state.cassandra.keyspace, app_id=app.app_id)
        except (NoHostAvailable, OperationTimedOut, DriverException) as exc:
            raise CassandraUnavailable(f"{what} of {app.app_id}: {exc}") from exc

    async def recorded_topics(self, target: Target, app: model.StreamingApp) -> list[str]:
        """Topics the app has offsets for (its repartition topics included)."""
        from floe_jobs import offsets

        return await asyncio.to_thread(self._offsets_call, target, app, "reading the topics", offsets.recorded_topics)

    async def forget_offsets(self, target: Target, app: model.StreamingApp) -> None:
        """Delete the app's rows from its keyspace's offsets table (the table is shared: it stays)."""
        from floe_jobs import offsets

        await asyncio.to_thread(self._offsets_call, target, app, "deleting the offsets", offsets.forget)

    async def reset_offsets(
        self, target: Target, app: model.StreamingApp, positions: Mapping[tuple[str, int], int], *, owner: str
    ) -> list[Any] | None:
        """Move the app's committed offsets (`floe_jobs.offsets.reset`, conditional writes); the
        moved rows, or None when a row changed while they were read (try again)."""
        from floe_jobs import offsets

        def call(session: Any, *, keyspace: str, app_id: str) -> list[Any] | None:
            return offsets.reset(session, keyspace=keyspace, app_id=app_id, positions=positions, owner=owner)

        return await asyncio.to_thread(self._offsets_call, target, app, "resetting the offsets", call)

    async def drop(self, target: Target, *, keyspace: str, tables: list[str]) -> None:
        """Drop tables (absent ones are fine); the keyspace itself is never dropped."""
        async with self._slot():
            await asyncio.to_thread(self.drop_sync, target, keyspace=keyspace, tables=tables)

    def close(self) -> None:
        for session in self._sessions.values():
            session.cluster.shutdown()
        self._sessions.clear()
