"""Cassandra-backed state stores for Floe jobs.

Partitioned, global and versioned key-value stores whose tables are compatible with
kafka-streams-cassandra-state-store, with exactly-once fencing, serdes (including versioned
values with reader-side upgrades), a read cache, Prometheus metrics, and read-only
interactive queries over HTTP. Usable as a plain library:

    from floe_jobs import stores
    session = stores.connect(stores.CassandraConfig(hosts=("10.0.0.1",), local_datacenter="dc1"))
    counts = stores.PartitionedStore(session, "word-counts", keyspace="app",
                                     key_serde=stores.serdes.STR, value_serde=stores.serdes.LONG)
    counts.put(0, "kafka", 1)

See docs/stores.md.
"""

from floe_jobs.stores import serdes
from floe_jobs.stores.base import StoreOptions
from floe_jobs.stores.cache import CacheOptions, ReadCache
from floe_jobs.stores.config import DDL_PROFILE, DML_PROFILE, CassandraConfig, connect
from floe_jobs.stores.errors import (
    KeyspaceMissingError,
    SerdeError,
    StoreConfigError,
    StoreDecodeError,
    StoreError,
    StoreQueryError,
    StoreUnavailableError,
    TableMissingError,
    UnsupportedOperationError,
)
from floe_jobs.stores.execution import RetryPolicy
from floe_jobs.stores.keys import prefix_upper_bound
from floe_jobs.stores.kv import GlobalStore, PartitionedStore
from floe_jobs.stores.metrics import StoreMetrics
from floe_jobs.stores.schema import (
    FENCE_COLUMN,
    StoreSpec,
    StoreType,
    keyspace_cql,
    provision,
    table_cql,
    table_name,
)
from floe_jobs.stores.versioned import (
    PUT_NOT_DONE,
    VALID_TO_UNDEFINED,
    VersionedGlobalStore,
    VersionedPartitionedStore,
    VersionedRecord,
)
from floe_jobs.stores.views import GlobalView, PartitionedView

__all__ = [
    "DDL_PROFILE",
    "DML_PROFILE",
    "FENCE_COLUMN",
    "PUT_NOT_DONE",
    "VALID_TO_UNDEFINED",
    "CacheOptions",
    "CassandraConfig",
    "GlobalStore",
    "GlobalView",
    "KeyspaceMissingError",
    "PartitionedStore",
    "PartitionedView",
    "ReadCache",
    "RetryPolicy",
    "SerdeError",
    "StoreConfigError",
    "StoreDecodeError",
    "StoreError",
    "StoreMetrics",
    "StoreOptions",
    "StoreQueryError",
    "StoreSpec",
    "StoreType",
    "StoreUnavailableError",
    "TableMissingError",
    "UnsupportedOperationError",
    "VersionedGlobalStore",
    "VersionedPartitionedStore",
    "VersionedRecord",
    "connect",
    "keyspace_cql",
    "prefix_upper_bound",
    "provision",
    "serdes",
    "table_cql",
    "table_name",
]
