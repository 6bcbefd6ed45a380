"""Connection settings for Cassandra and the one function that opens a session.

`CassandraConfig` is the one connection shape: every session of the runtime, of the state
helpers and of the operator is opened from it. A Floe replica builds it from its typed
configuration (`floe_jobs.config`: `load().cassandra.connection()`), which declares the
environment variable of each setting; a program using the stores library on its own
constructs it directly.

| field                 | setting of floe_jobs.config (variable)                       | default        |
|-----------------------|--------------------------------------------------------------|----------------|
| hosts                 | cassandra.hosts (FLOE_CASSANDRA_HOSTS, comma list)           | 127.0.0.1      |
| port                  | cassandra.port (FLOE_CASSANDRA_PORT)                         | 9042           |
| local_datacenter      | cassandra.local_datacenter (FLOE_CASSANDRA_LOCAL_DC)         | (driver picks) |
| username / password   | cassandra.username / password (FLOE_CASSANDRA_USERNAME / _PASSWORD) | none    |
| tls                   | cassandra.tls (FLOE_CASSANDRA_TLS)                           | set by a CA    |
| tls_ca_pem            | cassandra.tls_ca_pem (FLOE_CASSANDRA_TLS_CA_PEM, PEM text)   | system CAs     |
| tls_verify_hostname   | cassandra.tls_verify_hostname (FLOE_CASSANDRA_TLS_VERIFY_HOSTNAME) | true     |
| consistency           | cassandra.consistency (FLOE_CASSANDRA_CONSISTENCY)           | LOCAL_QUORUM   |
| serial_consistency    | cassandra.serial_consistency (FLOE_CASSANDRA_SERIAL_CONSISTENCY) | LOCAL_SERIAL |
| ddl_consistency       | cassandra.ddl_consistency (FLOE_CASSANDRA_DDL_CONSISTENCY)   | ALL            |
| request_timeout       | cassandra.request_timeout (FLOE_CASSANDRA_REQUEST_TIMEOUT, s) | 10            |
| ddl_timeout           | cassandra.ddl_timeout (FLOE_CASSANDRA_DDL_TIMEOUT, s)        | 60             |
| connect_timeout       | cassandra.connect_timeout (FLOE_CASSANDRA_CONNECT_TIMEOUT, s) | 10            |
| protocol_version      | cassandra.protocol_version (FLOE_CASSANDRA_PROTOCOL_VERSION) | negotiated     |
| tls_ca                | (the library only: a PEM file)                               | none           |
| tls_cert / tls_key    | (the library only: PEM files of a client certificate)        | none           |

Credentials never appear in `repr`, logs or error messages.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

from cassandra import AuthenticationFailed, ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    TokenAwarePolicy,
)
from cassandra.query import tuple_factory
from floe_jobs.stores import floor
from floe_jobs.stores.errors import StoreConfigError

log = logging.getLogger(__name__)

DML_PROFILE = "floe-dml"
"""Execution profile of reads and writes: token-aware, DC-aware, `consistency`."""

DDL_PROFILE = "floe-ddl"
"""Execution profile of schema changes: consistency `ddl_consistency` (ALL), long timeout."""


def _consistency(name: str, setting: str) -> int:
    try:
        return int(ConsistencyLevel.name_to_value[name.upper()])
    except KeyError:
        known = ", ".join(sorted(ConsistencyLevel.name_to_value))
        raise StoreConfigError(f"{setting}: unknown consistency level {name!r}; known: {known}") from None


@dataclass(frozen=True)
class CassandraConfig:
    """Where Cassandra is and how to talk to it."""

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    local_datacenter: str | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_ca: str | None = None
    tls_ca_pem: str | None = field(default=None, repr=False)
    """The CA as PEM text (what a Secret holds), loaded from memory: no file to write."""
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_verify_hostname: bool = True
    consistency: str = "LOCAL_QUORUM"
    serial_consistency: str = "LOCAL_SERIAL"
    ddl_consistency: str = "ALL"
    request_timeout: float = 10.0
    ddl_timeout: float = 60.0
    connect_timeout: float = 10.0
    protocol_version: int | None = None
    """Native protocol version (5 for Cassandra 4/5, 4 for ScyllaDB); None negotiates (and the
    driver logs a warning each time it steps down from its newest version)."""
    schema_metadata: bool = True
    """Whether the driver mirrors the cluster's schema. Token-aware routing needs the mirror (it
    finds a keyspace's replicas through it); a session that only provisions and reads a few rows
    (the operator's) turns it off, which makes connecting to a cluster with many tables fast."""

    def __post_init__(self) -> None:
        if isinstance(self.hosts, str):
            object.__setattr__(self, "hosts", tuple(h.strip() for h in self.hosts.split(",") if h.strip()))
        else:
            object.__setattr__(self, "hosts", tuple(self.hosts))
        if not self.hosts:
            raise StoreConfigError("hosts (FLOE_CASSANDRA_HOSTS): at least one host is needed")
        if not 0 < self.port < 65536:
            raise StoreConfigError(f"port (FLOE_CASSANDRA_PORT): {self.port} is not a TCP port")
        if (self.username is None) != (self.password is None):
            raise StoreConfigError(
                "username and password (FLOE_CASSANDRA_USERNAME, FLOE_CASSANDRA_PASSWORD) go together"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise StoreConfigError("tls_cert and tls_key go together")
        for name in ("request_timeout", "ddl_timeout", "connect_timeout"):
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} (FLOE_CASSANDRA_{name.upper()}): must be positive seconds")
        if self.tls_ca is not None or self.tls_ca_pem is not None or self.tls_cert is not None:
            object.__setattr__(self, "tls", True)
        _consistency(self.consistency, "consistency (FLOE_CASSANDRA_CONSISTENCY)")
        _consistency(self.serial_consistency, "serial_consistency (FLOE_CASSANDRA_SERIAL_CONSISTENCY)")
        _consistency(self.ddl_consistency, "ddl_consistency (FLOE_CASSANDRA_DDL_CONSISTENCY)")
        # names that cannot keep the fence whatever the replication; against the keyspace's real
        # replication, `floor.check_keyspace` at a replica's start
        wrong = floor.level_error(self.consistency, self.serial_consistency)
        if wrong is not None:
            raise StoreConfigError(wrong)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the driver, or None without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca, cadata=self.tls_ca_pem)
        context.check_hostname = self.tls_verify_hostname
        if not self.tls_verify_hostname:
            # Hostname checks off still verifies the chain against the CA.
            context.verify_mode = ssl.CERT_REQUIRED
        if self.tls_cert is not None and self.tls_key is not None:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


def _load_balancing(config: CassandraConfig) -> TokenAwarePolicy:
    # One policy instance per profile: the driver keeps per-policy host state.
    return TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=config.local_datacenter or ""))


def execution_profiles(config: CassandraConfig) -> dict[object, ExecutionProfile]:
    """The default, DML and DDL execution profiles `connect` installs (rows as plain tuples).

    Default and DML share the DML consistency and request timeout; DDL has its own consistency
    and timeout (schema changes wait for agreement)."""
    dml = _consistency(config.consistency, "consistency")
    serial = _consistency(config.serial_consistency, "serial_consistency")
    ddl = _consistency(config.ddl_consistency, "ddl_consistency")

    def profile(consistency: int, timeout: float) -> ExecutionProfile:
        return ExecutionProfile(
            load_balancing_policy=_load_balancing(config),
            consistency_level=consistency,
            serial_consistency_level=serial,
            request_timeout=timeout,
            row_factory=tuple_factory,
        )

    return {
        EXEC_PROFILE_DEFAULT: profile(dml, config.request_timeout),
        DML_PROFILE: profile(dml, config.request_timeout),
        DDL_PROFILE: profile(ddl, config.ddl_timeout),
    }


def tls_failure(error: BaseException) -> bool:
    """Whether a node's connect error is its TLS handshake failing (an unknown CA, an expired or
    misnamed certificate): the driver reports a failed verification as an OSError carrying
    ssl's text, not as an ssl.SSLError."""
    return isinstance(error, ssl.SSLError) or (isinstance(error, OSError) and "[SSL" in str(error))


def refused_by_every_node(exc: NoHostAvailable) -> bool:
    """Whether every node answered and refused the credentials or the TLS handshake: settings to
    change, not an outage to wait out."""
    errors = list(exc.errors.values()) if isinstance(exc.errors, dict) else []
    return bool(errors) and all(isinstance(e, AuthenticationFailed) or tls_failure(e) for e in errors)


def _refused(config: CassandraConfig, exc: NoHostAvailable) -> str | None:
    """What to fix when every node refused the credentials or the TLS handshake (retrying will
    not help), naming the settings; None when some node was merely unreachable."""
    errors = list(exc.errors.values()) if isinstance(exc.errors, dict) else []
    if not errors:
        return None
    where = f"Cassandra at {','.join(config.hosts)}:{config.port}"
    if all(isinstance(e, AuthenticationFailed) for e in errors):
        if config.username is None:
            return (
                f"{where} requires authentication: set cassandra.username and cassandra.password "
                "(FLOE_CASSANDRA_USERNAME, FLOE_CASSANDRA_PASSWORD; the StreamingApp's "
                "spec.state.cassandra.credentialsSecretRef)"
            )
        server = str(errors[0]).rsplit("message=", 1)[-1].strip('"')
        return (
            f"{where} refused the credentials of cassandra.username {config.username!r}: {server}; check "
            "cassandra.username and cassandra.password (FLOE_CASSANDRA_USERNAME, FLOE_CASSANDRA_PASSWORD; the "
            "StreamingApp's spec.state.cassandra.credentialsSecretRef)"
        )
    if all(tls_failure(e) for e in errors):
        return (
            f"{where}: TLS handshake failed ({errors[0]}); check cassandra.tls_ca_pem (FLOE_CASSANDRA_TLS_CA_PEM; "
            "spec.state.cassandra.tls.caSecretRef): the CA must have signed the nodes' certificates, which must name "
            "the address connected to (or set FLOE_CASSANDRA_TLS_VERIFY_HOSTNAME=false) and not have expired"
        )
    return None


def connect(config: CassandraConfig, *, keyspace: str | None = None) -> Session:
    """Opens a session: token-aware and DC-aware routing, `floe-dml`/`floe-ddl` profiles.

    Close it with `session.cluster.shutdown()`.
    """
    auth = None
    if config.username is not None and config.password is not None:
        auth = PlainTextAuthProvider(username=config.username, password=config.password)
    extra: dict[str, Any] = {}
    if config.protocol_version is not None:
        extra["protocol_version"] = config.protocol_version
    cluster = Cluster(
        contact_points=list(config.hosts),
        port=config.port,
        execution_profiles=execution_profiles(config),
        auth_provider=auth,
        ssl_context=config.ssl_context(),
        connect_timeout=config.connect_timeout,
        control_connection_timeout=config.connect_timeout,
        # The driver notices a node is back only when it tries again: attempts 30 s apart left
        # replicas waiting up to 30 s after a restarted node answered. A connect attempt to a
        # down node every 5 s costs next to nothing.
        reconnection_policy=ExponentialReconnectionPolicy(base_delay=0.5, max_delay=5.0),
        max_schema_agreement_wait=int(config.ddl_timeout),
        schema_metadata_enabled=config.schema_metadata,
        **extra,
    )
    try:
        session = cluster.connect(keyspace)
    except NoHostAvailable as exc:
        cluster.shutdown()
        refused = _refused(config, exc)
        if refused is not None:
            raise StoreConfigError(refused) from None
        raise
    except Exception:
        cluster.shutdown()
        raise
    log.info(
        "Connected to Cassandra hosts=%s port=%d local_dc=%s tls=%s auth=%s",
        ",".join(config.hosts), config.port, config.local_datacenter or "-", config.tls, auth is not None,
    )
    return session
