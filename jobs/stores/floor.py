"""The consistency floor: the levels that keep the fence for a keyspace's replication.

Exactly-once state rests on reads that see the last write: a batch reads each key's fence
(`floe_batch`) and the offsets rows before it writes, and a stale owner is refused because the
rows it reads carry the newer owner's claim. A read at level L sees a write at level L only when
the replicas that answer the one and acknowledge the other overlap: 2 x (replicas of L) >
replication factor. Quorum levels (QUORUM, LOCAL_QUORUM, EACH_QUORUM, ALL) always overlap;
ONE, TWO and THREE only while they are a majority of every copy of a row (ONE: replication
factor 1), LOCAL_ONE only while the local datacenter holds one copy. Below that, the fenced
read can miss the last batch's write and the batch is applied twice: such a level is refused,
with what to change, instead of silently weakening the guarantee.

The conditional writes (claims and commits of the offsets rows) run Paxos at the serial
consistency, which must be SERIAL or LOCAL_SERIAL; LOCAL_SERIAL runs among the local
datacenter's copies, so it needs that datacenter to hold some (every replica of an app routes
to the same local datacenter, so their rounds meet there).

`level_error` checks the names alone (configuration, `CassandraConfig`); `floor_error` checks
them against a replication (pure); `check_keyspace` reads the keyspace's real replication from
`system_schema` at a replica's start and raises `StoreConfigError` before anything is read.
The StreamingApp CRD refuses the same combinations at admission from its
`spec.state.cassandra.replication`, which is only what a keyspace Floe creates gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from floe_jobs.stores.errors import StoreConfigError

QUORUM_LEVELS = frozenset({"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"})
# levels that wait for a fixed number of replicas: of all copies, or (LOCAL_ONE) of the local DC's
COUNTED_LEVELS: Mapping[str, int] = {"ONE": 1, "TWO": 2, "THREE": 3, "LOCAL_ONE": 1}
SERIAL_LEVELS = frozenset({"SERIAL", "LOCAL_SERIAL"})

CONSISTENCY_SETTING = (
    "cassandra.consistency (FLOE_CASSANDRA_CONSISTENCY; a StreamingApp's spec.state.cassandra.consistency)"
)
SERIAL_SETTING = (
    "cassandra.serial_consistency (FLOE_CASSANDRA_SERIAL_CONSISTENCY; a StreamingApp's "
    "spec.state.cassandra.serialConsistency)"
)


@dataclass(frozen=True)
class Replication:
    """Copies of each row of a keyspace: `factors` is {"": n} for SimpleStrategy, a factor per
    datacenter for NetworkTopologyStrategy, and empty for a strategy whose copies are unknown."""

    strategy: str
    factors: Mapping[str, int]

    @classmethod
    def from_schema(cls, replication: Mapping[str, str]) -> Replication:
        """From `system_schema.keyspaces.replication` (class, then factors as strings)."""
        strategy = str(replication.get("class", "")).rsplit(".", 1)[-1]
        if strategy == "SimpleStrategy":
            return cls(strategy, {"": _copies(replication.get("replication_factor", "0"))})
        if strategy == "NetworkTopologyStrategy":
            return cls(strategy, {dc: _copies(n) for dc, n in replication.items() if dc != "class"})
        return cls(strategy, {})

    @property
    def total(self) -> int:
        return sum(self.factors.values())

    def local(self, datacenter: str | None) -> int:
        """Copies in `datacenter` (SimpleStrategy: every copy counts as local)."""
        if self.strategy == "SimpleStrategy":
            return self.total
        return self.factors.get(datacenter or "", 0)

    def describe(self) -> str:
        if self.strategy == "SimpleStrategy":
            return f"SimpleStrategy, replication factor {self.total}"
        if self.strategy == "NetworkTopologyStrategy":
            return "NetworkTopologyStrategy, " + ", ".join(f"{dc} {n}" for dc, n in sorted(self.factors.items()))
        return self.strategy or "unknown strategy"


def _copies(value: Any) -> int:
    # a factor may read "3" or, with transient replication, "3/1" (full copies first)
    try:
        return int(str(value).split("/", 1)[0])
    except ValueError:
        return 0


def level_error(consistency: str, serial_consistency: str) -> str | None:
    """What is wrong with the level names whatever the replication (None: nothing)."""
    level, serial = consistency.upper(), serial_consistency.upper()
    if level == "ANY" or level in SERIAL_LEVELS:
        return (
            f"{CONSISTENCY_SETTING}: {level} is not a level of both reads and writes; the fence needs one: "
            "use LOCAL_QUORUM (the default) or QUORUM"
        )
    if serial not in SERIAL_LEVELS:
        return f"{SERIAL_SETTING}: {serial} is not a serial level; use LOCAL_SERIAL (the default) or SERIAL"
    return None


def floor_error(
    consistency: str, serial_consistency: str, replication: Replication, *, keyspace: str, datacenter: str | None
) -> str | None:
    """Why `consistency` / `serial_consistency` cannot keep the fence of `keyspace` under
    `replication`, reached from `datacenter`, and what to set instead; None when they can."""
    named = level_error(consistency, serial_consistency)
    if named is not None:
        return named
    level, serial = consistency.upper(), serial_consistency.upper()
    where = f"keyspace {keyspace} ({replication.describe()})"
    local_levels = [name for name in (level, serial) if name.startswith("LOCAL_")]
    if local_levels and replication.strategy == "NetworkTopologyStrategy" and replication.local(datacenter) == 0:
        return (
            f"{', '.join(local_levels)} run in the local datacenter {datacenter or '(unknown)'}, where {where} "
            "keeps no copy: set cassandra.local_datacenter (spec.state.cassandra.localDatacenter) to a datacenter "
            "of the keyspace's replication, or use QUORUM and SERIAL"
        )
    if level not in COUNTED_LEVELS:
        return None
    needed = COUNTED_LEVELS[level]
    copies = replication.local(datacenter) if level == "LOCAL_ONE" else replication.total
    if not replication.factors:
        return (
            f"{CONSISTENCY_SETTING}: {level} keeps the fence only when it reaches a majority of a row's copies, "
            f"and the copies of {where} are not known; use LOCAL_QUORUM (the default) or QUORUM"
        )
    if 2 * needed > copies:
        return None
    counted = "the local datacenter's" if level == "LOCAL_ONE" else "the"
    return (
        f"{CONSISTENCY_SETTING}: {level} cannot keep the fence of {where}: a read at {level} waits for "
        f"{needed} of {counted} {copies} copies of a row and may miss the last write at {level}, so a replayed "
        f"batch could be applied twice; use LOCAL_QUORUM (the default) or QUORUM, or keep {level} only with "
        f"a replication of at most {2 * needed - 1} {'copy' if needed == 1 else 'copies'}"
    )


def keyspace_replication(session: Any, keyspace: str) -> Replication | None:
    """The keyspace's replication from `system_schema`; None when it does not exist."""
    row = session.execute(
        "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,)
    ).one()
    return None if row is None else Replication.from_schema(dict(row[0]))


def local_datacenter(session: Any, configured: str | None) -> str | None:
    """The datacenter a session's requests stay in: the configured one, else the contact node's
    (the driver's DC-aware routing takes the first node it reaches as local)."""
    if configured:
        return configured
    row = session.execute("SELECT data_center FROM system.local").one()
    return None if row is None else str(row[0])


def check_keyspace(
    session: Any, *, keyspace: str, consistency: str, serial_consistency: str, datacenter: str | None
) -> None:
    """Raise `StoreConfigError` when the levels cannot keep the fence of `keyspace` as it really
    is replicated. Reads only the schema tables: a level that is refused reads no state. A
    keyspace that does not exist yet passes: the replica creates it with one copy, under which
    every level keeps the fence."""
    replication = keyspace_replication(session, keyspace)
    if replication is None:
        return
    error = floor_error(
        consistency,
        serial_consistency,
        replication,
        keyspace=keyspace,
        datacenter=local_datacenter(session, datacenter),
    )
    if error is not None:
        raise StoreConfigError(error)
