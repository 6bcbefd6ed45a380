"""Store specs, table naming, CQL rendering and idempotent provisioning.

The rendering functions are pure, so the operator can show and test the exact DDL it will
run. The table layouts are those of kafka-streams-cassandra-state-store, plus one nullable
`floe_batch bigint` column on partitioned tables that carries the exactly-once fence (extra
columns do not disturb the Java library, which selects its columns by name).

Provisioning is safe when several processes run it at once: every statement is
`IF NOT EXISTS`, all DDL goes to one deterministic coordinator (so concurrent creations of
the same table serialize on that node instead of racing across nodes with different table
ids), schema agreement is awaited after every change, and "already exists" answers count as
success.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, get_args

from cassandra import AlreadyExists, InvalidRequest, OperationTimedOut
from cassandra.cluster import NoHostAvailable, Session
from cassandra.query import ValueSequence
from floe_jobs.config import StoreType as StoreType
from floe_jobs.stores.config import DDL_PROFILE
from floe_jobs.stores.errors import KeyspaceMissingError, StoreConfigError, StoreUnavailableError
from floe_jobs.stores.execution import profile_or_default

log = logging.getLogger(__name__)

STORE_TYPES: tuple[str, ...] = get_args(StoreType)

FENCE_COLUMN = "floe_batch"
# Compaction by default: Cassandra 5.0's Unified Compaction Strategy where the cluster has it, the
# Leveled strategy on older Cassandra and on ScyllaDB (which reports release 3.0.8). State tables
# are rewritten key by key every batch, so most of a node's compaction work is merging versions of
# the same rows, which UCS does with less of the node's CPU (docs/stores.md, "Compaction").
DEFAULT_TABLE_OPTIONS: Mapping[str, object] = {"compaction": {"class": "LeveledCompactionStrategy"}}
UNIFIED_TABLE_OPTIONS: Mapping[str, object] = {"compaction": {"class": "UnifiedCompactionStrategy"}}
# the first Cassandra release with the Unified Compaction Strategy
_UNIFIED_SINCE = 5

# Cassandra caps keyspace and table names at 48 characters.
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_OPTION_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLE_NAME_CHARS = re.compile(r"[^a-z0-9_]")


def table_name(store_name: str) -> str:
    """The default table of a store: `<name lowercased, [^a-z0-9_] -> _>_kstreams_store`.

    The same rule as kafka-streams-cassandra-state-store's default, so both share tables.
    """
    return _TABLE_NAME_CHARS.sub("_", store_name.lower()) + "_kstreams_store"


TableNameFn = Callable[[str], str]


@dataclass(frozen=True)
class StoreSpec:
    """What a store is: its name, type, default TTL and extra table options.

    `table` overrides the table name for this store; `history_retention_ms` is the history
    retention of versioned stores (ignored by the others).
    """

    name: str
    type: StoreType
    ttl_seconds: int | None = None
    table_options: dict[str, object] | None = None
    table: str | None = None
    history_retention_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if not self.name:
            raise StoreConfigError("a store needs a non-empty name")
        if self.type not in STORE_TYPES:
            raise StoreConfigError(
                f"unknown store type {self.type!r}; known: {', '.join(STORE_TYPES)}", store=self.name
            )
        if self.ttl_seconds is not None and self.ttl_seconds < 0:
            raise StoreConfigError(f"ttl_seconds must be >= 0, got {self.ttl_seconds}", store=self.name)
        if self.history_retention_ms < 0:
            raise StoreConfigError(
                f"history_retention_ms must be >= 0, got {self.history_retention_ms}", store=self.name
            )

    @property
    def versioned(self) -> bool:
        return self.type.startswith("versioned-")

    def table_for(self, table_name_fn: TableNameFn = table_name) -> str:
        return self.table or table_name_fn(self.name)


def check_identifier(name: str, what: str) -> str:
    """Returns `name` when it is a valid unquoted CQL identifier, else raises StoreConfigError."""
    if not _IDENTIFIER.match(name):
        raise StoreConfigError(
            f"{what} {name!r} is not a valid Cassandra name: letters, digits and _, starting "
            "with a letter, at most 48 characters"
        )
    return name


def _literal(value: object, option: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_literal(str(k), option)}: {_literal(v, option)}" for k, v in value.items())
        return "{" + items + "}"
    raise StoreConfigError(f"table option {option}: cannot render {type(value).__name__} {value!r} as CQL")


def render_options(options: Mapping[str, object]) -> str:
    """`k = v AND ...` for a table's WITH clause, keys in a stable order."""
    parts = []
    for name in sorted(options):
        if not _OPTION_NAME.match(name):
            raise StoreConfigError(f"table option name {name!r} is not a CQL option name")
        parts.append(f"{name} = {_literal(options[name], name)}")
    return " AND ".join(parts)


def default_table_options(release_version: str | None) -> Mapping[str, object]:
    """The default options of a new store table on a node that reports `release_version`
    (`system.local`): UCS from Cassandra 5.0 on, LCS before it, on ScyllaDB and when unknown."""
    major = (release_version or "").split(".", 1)[0]
    if major.isdigit() and int(major) >= _UNIFIED_SINCE:
        return UNIFIED_TABLE_OPTIONS
    return DEFAULT_TABLE_OPTIONS


def release_version(session: Session) -> str | None:
    """The Cassandra release of the node `session` reads `system.local` from."""
    row = session.execute("SELECT release_version FROM system.local").one()
    return None if row is None else str(row[0])


def table_options(spec: StoreSpec, defaults: Mapping[str, object] = DEFAULT_TABLE_OPTIONS) -> dict[str, object]:
    """The effective options of a store's table: `defaults` (`default_table_options`), then
    `table_options`, then the TTL."""
    options: dict[str, object] = dict(defaults)
    options.update(spec.table_options or {})
    if spec.ttl_seconds is not None:
        options["default_time_to_live"] = spec.ttl_seconds
    return options


def keyspace_cql(keyspace: str, replication: Mapping[str, object] | None = None) -> str:
    """`CREATE KEYSPACE IF NOT EXISTS`; replication defaults to SimpleStrategy with one replica.

    Production clusters pass NetworkTopologyStrategy with a factor per data center.
    """
    check_identifier(keyspace, "keyspace")
    replication = replication or {"class": "SimpleStrategy", "replication_factor": 1}
    if "class" not in replication:
        raise StoreConfigError(f"keyspace {keyspace}: replication needs a 'class', got {dict(replication)}")
    # Cassandra wants every replication value as a string literal except the map itself.
    rendered = "{" + ", ".join(
        f"{_literal(str(k), 'replication')}: {_literal(str(v), 'replication')}" for k, v in replication.items()
    ) + "}"
    return f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {rendered}"


def table_cql(keyspace: str, spec: StoreSpec, *, table_name_fn: TableNameFn = table_name,
              defaults: Mapping[str, object] = DEFAULT_TABLE_OPTIONS) -> str:
    """`CREATE TABLE IF NOT EXISTS` for a store, column layout compatible with the Java library;
    `defaults`: the options before the store's own (`default_table_options`)."""
    check_identifier(keyspace, "keyspace")
    table = check_identifier(spec.table_for(table_name_fn), f"table of store {spec.name!r}")
    if spec.type == "partitioned":
        columns = (
            "partition int, key blob, time timestamp, value blob, "
            f"{FENCE_COLUMN} bigint, PRIMARY KEY ((partition), key)"
        )
    elif spec.type == "global":
        columns = "key blob, time timestamp, value blob, PRIMARY KEY (key)"
    elif spec.type == "versioned-partitioned":
        columns = (
            "partition int, key blob, validFrom timestamp, validTo timestamp, time timestamp, "
            "value blob, PRIMARY KEY ((partition), key, validTo)"
        )
    else:
        columns = (
            "key blob, validFrom timestamp, validTo timestamp, time timestamp, value blob, "
            "PRIMARY KEY ((key), validTo)"
        )
    options = render_options(table_options(spec, defaults))
    return f"CREATE TABLE IF NOT EXISTS {keyspace}.{table} ({columns}) WITH {options}"


def fence_column_cql(keyspace: str, table: str) -> str:
    """Adds the fence column to a partitioned table created without it (e.g. by the Java library)."""
    check_identifier(keyspace, "keyspace")
    check_identifier(table, "table")
    return f"ALTER TABLE {keyspace}.{table} ADD {FENCE_COLUMN} bigint"


# --- execution ---------------------------------------------------------------------------

_TRANSIENT = (OperationTimedOut, NoHostAvailable)


def _coordinator(session: Session) -> Any:
    """The one host every DDL statement goes to: the first live host by address."""
    hosts = [h for h in session.cluster.metadata.all_hosts() if h.is_up is not False]
    if not hosts:
        return None
    return sorted(hosts, key=lambda h: str(h.endpoint))[0]


def _run_ddl(session: Session, statement: str, *, attempts: int, what: str) -> None:
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            session.execute(
                statement, execution_profile=profile_or_default(session, DDL_PROFILE), host=_coordinator(session)
            )
            return
        except AlreadyExists:
            return
        except InvalidRequest as exc:
            if "already exist" in str(exc).lower():
                return
            raise StoreConfigError(f"Cassandra rejected DDL {what or statement!r}: {exc}") from exc
        except _TRANSIENT as exc:
            if attempt == attempts:
                raise StoreUnavailableError(
                    f"DDL failed: {what or statement}: {exc}", attempts=attempt, operation="provision"
                ) from exc
            log.warning("Retried DDL after transient error what=%s attempt=%d error=%s", what, attempt, exc)
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def execute_ddl(session: Session, statement: str, *, attempts: int = 5, what: str = "") -> None:
    """Runs one DDL statement on the DDL profile, retrying transient errors, then waits for
    schema agreement. "Already exists" counts as success (another process won the race)."""
    _run_ddl(session, statement, attempts=attempts, what=what)
    wait_for_schema_agreement(session)


def execute_ddl_together(session: Session, statements: Mapping[str, str], *, attempts: int = 5) -> None:
    """Runs independent DDL statements (what → statement) at once, then waits for agreement once.

    A new keyspace's tables do not depend on each other: sent together, the coordinator applies
    them back to back instead of waiting a round trip and an agreement check between them.
    """
    if len(statements) <= 1:
        for what, statement in statements.items():
            execute_ddl(session, statement, attempts=attempts, what=what)
        return
    with ThreadPoolExecutor(max_workers=len(statements), thread_name_prefix="floe-ddl") as pool:
        futures = [
            pool.submit(_run_ddl, session, statement, attempts=attempts, what=what)
            for what, statement in statements.items()
        ]
        for future in futures:
            future.result()
    wait_for_schema_agreement(session)


def wait_for_schema_agreement(session: Session, *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not session.cluster.control_connection.wait_for_schema_agreement():
        if time.monotonic() > deadline:
            raise StoreUnavailableError("schema agreement not reached", attempts=1, operation="provision")
        time.sleep(0.5)


def columns_of(session: Session, keyspace: str, tables: Sequence[str]) -> dict[str, set[str]]:
    """Table → column names, for those of `tables` that exist in `keyspace` (one query).

    Reads `system_schema` instead of the driver's schema mirror, so it is always current and
    works on sessions that keep no mirror (the operator's: mirroring a shared cluster's whole
    schema costs memory and makes every connect slow).
    """
    if not tables:
        return {}
    rows = session.execute(
        "SELECT table_name, column_name FROM system_schema.columns WHERE keyspace_name = %s AND table_name IN %s",
        (keyspace, ValueSequence([t.lower() for t in tables])),
    )
    found: dict[str, set[str]] = {}
    for row in rows:
        found.setdefault(row[0], set()).add(row[1])
    return found


def table_columns(session: Session, keyspace: str, table: str) -> set[str] | None:
    """The column names of a table, or None when it does not exist."""
    return columns_of(session, keyspace, [table]).get(table.lower())


def ensure_fence_column(session: Session, keyspace: str, table: str, *, columns: set[str] | None = None) -> None:
    """Adds `floe_batch` to a partitioned table that lacks it (tables made by the Java library).

    `columns`: the table's columns when already read (skips the lookup).
    """
    columns = table_columns(session, keyspace, table) if columns is None else columns
    if columns is None or FENCE_COLUMN in columns:
        return
    log.info("Added fence column keyspace=%s table=%s column=%s", keyspace, table, FENCE_COLUMN)
    execute_ddl(session, fence_column_cql(keyspace, table), what=f"add {FENCE_COLUMN} to {keyspace}.{table}")


def layout_of(columns: set[str]) -> str:
    """The store type whose table has these columns (`table_cql`'s layouts): versioned tables
    have `validto`, partitioned ones `partition`."""
    names = {c.lower() for c in columns}
    partitioned = "partition" in names
    if "validto" in names:
        return "versioned-partitioned" if partitioned else "versioned-global"
    return "partitioned" if partitioned else "global"


def layout_errors(stores: Sequence[StoreSpec], present: Mapping[str, set[str]], keyspace: str,
                  table_name_fn: TableNameFn = table_name) -> list[str]:
    """Stores whose existing table (`present`: table → columns) has another type's layout. `CREATE
    TABLE IF NOT EXISTS` leaves such a table as it is, and a store opened over it reads and writes
    columns it does not have, or (a partitioned store over a versioned table) the wrong rows."""
    out = []
    for spec in stores:
        table = spec.table_for(table_name_fn)
        columns = present.get(table.lower())
        if columns is None:
            continue
        found = layout_of(columns)
        if found != spec.type:
            out.append(
                f"store {spec.name!r} is declared {spec.type}, but its table {keyspace}.{table} has the layout of a "
                f"{found} store (columns {', '.join(sorted(columns))}): declare the store {found}, or give it "
                "a new name (a new table); a store's type cannot change over an existing table"
            )
    return out


def keyspace_exists(session: Session, keyspace: str) -> bool:
    rows = session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,))
    return rows.one() is not None


def provision(
    session: Session,
    *,
    keyspace: str,
    replication: dict[str, object] | None,
    stores: Sequence[StoreSpec],
    create_keyspace: bool = True,
    table_name_fn: TableNameFn = table_name,
    extra_tables: Mapping[str, str] | None = None,
) -> None:
    """Creates the keyspace (when asked and absent) and every store's table; idempotent.

    `extra_tables` (table → its `CREATE TABLE IF NOT EXISTS`) are made alongside the stores',
    e.g. the offsets table. Existing tables are left as they are (options are not altered),
    except that partitioned tables lacking the fence column get it added; a store whose existing
    table has another type's layout is a `StoreConfigError`. The tables' statements
    are sent together: a new keyspace costs its own schema change plus one round of table
    creations.
    """
    check_identifier(keyspace, "keyspace")
    names = [spec.table_for(table_name_fn) for spec in stores]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise StoreConfigError(f"several stores map to the same table(s): {', '.join(duplicates)}")
    defaults = default_table_options(release_version(session)) if stores else DEFAULT_TABLE_OPTIONS
    wanted = {
        table: (f"{keyspace}.{table} of store {spec.name}",
                table_cql(keyspace, spec, table_name_fn=table_name_fn, defaults=defaults))
        for spec, table in zip(stores, names, strict=True)
    }
    for table, statement in (extra_tables or {}).items():
        wanted.setdefault(check_identifier(table, "table"), (f"{keyspace}.{table}", statement))
    if create_keyspace:
        execute_ddl(session, keyspace_cql(keyspace, replication), what=f"keyspace {keyspace}")
    elif not keyspace_exists(session, keyspace):
        raise KeyspaceMissingError(
            f"keyspace {keyspace} does not exist and create_keyspace is off; create it or turn "
            "keyspace creation on"
        )
    # Every table's statement is sent, even for tables system_schema already lists: while another
    # process's creation of a table is under way, its rows can be visible there before the table
    # can be used, and only a statement of our own returns after the creation is applied (an
    # existing table costs one round trip and no schema change).
    execute_ddl_together(session, {what: statement for what, statement in wanted.values()})
    log.debug("Ensured tables keyspace=%s tables=%s", keyspace, ",".join(wanted))
    # every store's table as it really is: one of another type's layout is refused before the
    # fence column is added to it or any store opens it
    present = columns_of(session, keyspace, names)
    wrong = layout_errors(stores, present, keyspace, table_name_fn)
    if wrong:
        raise StoreConfigError("; ".join(wrong))
    fenced = [table for spec, table in zip(stores, names, strict=True) if spec.type == "partitioned"]
    for table in fenced:
        if table in present:
            ensure_fence_column(session, keyspace, table, columns=present[table])


def describe(stores: Sequence[StoreSpec], keyspace: str, replication: dict[str, object] | None = None,
             *, release: str | None = None) -> str:
    """All DDL of a provisioning on a node of Cassandra `release`, as one CQL script (for dry
    runs and reviews)."""
    defaults = default_table_options(release)
    lines = [keyspace_cql(keyspace, replication) + ";"]
    lines += [table_cql(keyspace, spec, defaults=defaults) + ";" for spec in stores]
    return "\n".join(lines)


def options_json(spec: StoreSpec, *, release: str | None = None) -> str:
    """The effective table options on a node of Cassandra `release` as JSON (stable, for status
    fields and logs)."""
    return json.dumps(table_options(spec, default_table_options(release)), sort_keys=True)
