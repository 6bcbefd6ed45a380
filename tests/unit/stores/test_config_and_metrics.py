"""Connection settings checked where they are defined, secrets kept out of repr, metrics registration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from floe_jobs.stores import CassandraConfig, StoreConfigError, StoreMetrics, StoreOptions
from floe_jobs.stores.config import DDL_PROFILE, DML_PROFILE, execution_profiles
from floe_jobs.stores.errors import StoreDecodeError, StoreUnavailableError
from floe_jobs.stores.execution import RetryPolicy
from prometheus_client import CollectorRegistry


def test_defaults_and_tls_from_ca() -> None:
    config = CassandraConfig()
    assert (config.hosts, config.port, config.consistency, config.tls) == (("127.0.0.1",), 9042, "LOCAL_QUORUM", False)
    assert CassandraConfig(hosts="10.0.0.1, 10.0.0.2").hosts == ("10.0.0.1", "10.0.0.2")  # type: ignore[arg-type]
    assert CassandraConfig(tls_ca="/etc/ca.pem").tls is True


def test_credentials_stay_out_of_repr() -> None:
    config = CassandraConfig(username="floe", password="s3cr3t-pw")
    assert "s3cr3t-pw" not in repr(config)
    assert "floe'" not in repr(config) and "username" not in repr(config)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"username": "u"}, "FLOE_CASSANDRA_PASSWORD"),
        ({"consistency": "MOST"}, "FLOE_CASSANDRA_CONSISTENCY"),
        ({"serial_consistency": "ONE_OR_TWO"}, "FLOE_CASSANDRA_SERIAL_CONSISTENCY"),
        ({"ddl_timeout": -1.0}, "FLOE_CASSANDRA_DDL_TIMEOUT"),
        ({"hosts": " , "}, "FLOE_CASSANDRA_HOSTS"),
        ({"port": 0}, "FLOE_CASSANDRA_PORT"),
        ({"tls_cert": "/etc/c.pem"}, "tls_key"),
    ],
)
def test_bad_settings_name_their_variable(settings: dict[str, Any], message: str) -> None:
    """Every check of a connection is made here, once: the runtime's typed configuration builds
    this shape while it loads, so its errors name the variable a pod sets."""
    with pytest.raises(StoreConfigError, match=message):
        CassandraConfig(**settings)


def test_password_is_not_in_error_messages() -> None:
    with pytest.raises(StoreConfigError) as info:
        CassandraConfig(password="topsecret")
    assert "topsecret" not in str(info.value)


def test_execution_profiles_ddl_at_all() -> None:
    profiles = execution_profiles(CassandraConfig())
    assert profiles[DDL_PROFILE].consistency_level == 5  # ALL
    assert profiles[DML_PROFILE].consistency_level == 6  # LOCAL_QUORUM
    assert type(profiles[DML_PROFILE].load_balancing_policy).__name__ == "TokenAwarePolicy"
    assert profiles[DML_PROFILE].load_balancing_policy is not profiles[DDL_PROFILE].load_balancing_policy


def test_metrics_register_once_per_registry() -> None:
    registry = CollectorRegistry()
    metrics = StoreMetrics.for_registry(registry)
    assert StoreMetrics.for_registry(registry) is metrics
    bound = metrics.bind("s", "get")
    assert metrics.bind("s", "get") is bound
    bound.operations.inc()
    metrics.error("s", "get", TimeoutError())
    assert registry.get_sample_value("floe_store_operations_total", {"store": "s", "operation": "get"}) == 1
    assert registry.get_sample_value(
        "floe_store_errors_total", {"store": "s", "operation": "get", "error": "TimeoutError"}
    ) == 1
    assert StoreMetrics.for_registry(CollectorRegistry()) is not metrics


def test_errors_name_store_operation_partition_key() -> None:
    err = StoreUnavailableError("Cassandra unavailable", attempts=4, store="counts", operation="get",
                                partition=3, key="k")
    assert str(err) == (
        "Cassandra unavailable after 4 attempt(s) (store=counts operation=get partition=3 key='k')"
    )
    decode = StoreDecodeError("bad value", schema_version=7, store="s", key=b"\x00")
    assert "schema_version=7" in str(decode) and "store=s" in str(decode)


def test_options_and_retry_validation() -> None:
    with pytest.raises(StoreConfigError, match="concurrency"):
        StoreOptions(concurrency=0)
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3)
    assert [policy.delay(a) for a in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]


def test_cache_counters_are_exported_at_scrape_time() -> None:
    from floe_jobs.stores import CacheOptions, ReadCache

    registry = CollectorRegistry()
    metrics = StoreMetrics.for_registry(registry)
    first, second = ReadCache(CacheOptions()), ReadCache(CacheOptions())
    metrics.watch_cache("s", first)
    metrics.watch_cache("s", second)
    first.set("a", b"1")
    first.get("a")
    first.get("b")
    second.get("a")
    assert registry.get_sample_value("floe_store_cache_hits_total", {"store": "s"}) == 1
    assert registry.get_sample_value("floe_store_cache_misses_total", {"store": "s"}) == 2


def test_tls_context_from_files(tmp_path: Path) -> None:
    import shutil
    import ssl
    import subprocess

    openssl = shutil.which("openssl")
    assert openssl, "this test needs the openssl command to make a throwaway CA"
    ca_key, ca_pem = tmp_path / "ca.key", tmp_path / "ca.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(ca_key), "-out", str(ca_pem), "-days", "1", "-subj", "/CN=floe-test-ca"],
                   check=True, capture_output=True)
    config = CassandraConfig(
        tls_ca=str(ca_pem), tls_cert=str(ca_pem), tls_key=str(ca_key), tls_verify_hostname=False
    )
    context = config.ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is False
    assert len(context.get_ca_certs()) == 1
    assert CassandraConfig().ssl_context() is None
