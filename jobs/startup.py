"""What a replica checks and sets up before its first batch, and what makes it refuse to start.

The job's entry point, the topics (input ones must exist, repartition and dead-letter ones are
created), the tables, the query endpoint. A dependency that stays unreachable, or a missing
topic or file, is a `StartupError` naming the setting to look at, which `floe-job` turns into
its exit code for an unreachable dependency; refused credentials are not retried.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin import AdminClient
from floe_jobs import api, kafkaaccess, offsets
from floe_jobs.config import FloeConfig
from floe_jobs.stores.errors import StoreConfigError

log = logging.getLogger("floe_jobs")


class StartupError(RuntimeError):
    """A dependency is unreachable or missing at start; the message says which."""


def load_entrypoint(spec: str) -> tuple[Any, ModuleType]:
    """`package.module:attr`, or `path/to/file.py[:attr]` (attr defaults to `job`, then `main`)."""
    target, _, attr = spec.partition(":") if not spec.endswith(".py") else (spec, "", "")
    if target.endswith(".py") or os.sep in target:
        path = Path(target)
        if not path.is_file():
            raise StartupError(f"job.entrypoint (FLOE_JOB_ENTRYPOINT): file {path} does not exist")
        name = "floe_user_" + "".join(c if c.isalnum() else "_" for c in path.stem)
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise StartupError(f"job.entrypoint: cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        # The module is not importable on Spark's Python workers: ship its functions by value.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise StartupError(f"job.entrypoint (FLOE_JOB_ENTRYPOINT): cannot import {target!r}: {exc}") from exc
    for name in [attr] if attr else ["job", "main"]:
        if hasattr(module, name):
            return getattr(module, name), module
    raise StartupError(f"job.entrypoint: {module.__name__} has no attribute {attr or 'job or main'!r}")


def retry(what: str, fn: Any, *, attempts: int = 6, first_delay: float = 1.0) -> Any:
    """`fn()`, tried again with a growing delay while `what` is unreachable; a `StartupError`
    naming it after the last attempt. Refused credentials are not retried."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (StoreConfigError, kafkaaccess.SecurityError):
            raise  # refused credentials or certificates: the settings must change, not the weather
        except Exception as exc:
            if attempt == attempts:
                raise StartupError(f"{what} unreachable after {attempts} attempts: {exc}") from exc
            log.warning("Retrying what=%s attempt=%d error=%s", what, attempt, exc)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    raise AssertionError("unreachable")


def ensure_topics(cfg: FloeConfig, admin: AdminClient, job: api.Job) -> dict[str, int]:
    """Check the input topics exist; create the repartition and dead-letter topics if absent."""
    md = retry(
        f"Kafka at {cfg.kafka.bootstrap_servers} (kafka.bootstrap_servers)",
        lambda: admin.list_topics(timeout=10),
    )
    counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
    missing = [t for t in cfg.kafka.topics if t not in counts]
    if missing:
        raise StartupError(f"kafka.topics: input topics {missing} do not exist on {cfg.kafka.bootstrap_servers}")
    width = max(counts[t] for t in cfg.kafka.topics)
    wanted = {cfg.repartition_topic(s.source): width for s in job.stages if s.source is not None}
    wanted.setdefault(cfg.dlq_topic, 1)
    create = [
        kafka_admin.NewTopic(name, num_partitions=n, replication_factor=-1)  # type: ignore[attr-defined]
        for name, n in wanted.items()
        if name not in counts
    ]
    if create:
        for name, fut in admin.create_topics(create, operation_timeout=30).items():
            try:
                fut.result()
                log.info("Created topic=%s", name)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise StartupError(f"cannot create topic {name}: {exc}") from exc
        md = admin.list_topics(timeout=10)
        counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
    return counts


def provision(cfg: FloeConfig, session: Any) -> None:
    """The stores' tables and the offsets table, created or brought up to date before any batch."""
    from floe_jobs.stores import schema

    ks = cfg.cassandra.keyspace
    specs = [
        schema.StoreSpec(name=s.name, type=s.type, ttl_seconds=s.ttl_seconds, table_options=s.table_options)
        for s in cfg.stores
    ]
    schema.provision(
        session,
        keyspace=ks,
        replication=None,
        stores=specs,
        extra_tables={offsets.TABLE: offsets.table_cql(ks)},
    )
    offsets.upgrade(session, keyspace=ks)


def serve_queries(cfg: FloeConfig, job: api.Job, session: Any) -> None:
    """The stores' read-only HTTP query endpoint, on its own port and event loop thread."""
    import asyncio

    from aiohttp import web
    from floe_jobs.stores import (
        GlobalStore,
        GlobalView,
        PartitionedStore,
        PartitionedView,
        StoreOptions,
        endpoints,
        schema,
        serdes,
    )

    views: dict[str, Any] = {}
    specs = {s.name: s for s in cfg.stores}
    for name, (key_serde, value_serde) in job.queries.items():
        if name not in specs:
            raise StartupError(f"the job exposes store {name!r} but stores has no such entry")
        spec = schema.StoreSpec(name=name, type=specs[name].type)
        kwargs: dict[str, Any] = {
            "keyspace": cfg.cassandra.keyspace,
            "key_serde": serdes.by_name(key_serde),
            "value_serde": serdes.by_name(value_serde),
            "options": StoreOptions(create_table=False),
        }
        if spec.type == "global":
            views[name] = GlobalView(GlobalStore(session, spec, **kwargs))
        else:
            views[name] = PartitionedView(PartitionedStore(session, spec, **kwargs))
    port = cfg.metrics.query_port

    def serve() -> None:
        loop = asyncio.new_event_loop()
        token = cfg.metrics.query_token.get_secret_value() if cfg.metrics.query_token else None
        runner = web.AppRunner(
            endpoints.make_app(views, token=token, open_access=cfg.metrics.query_auth == "none")
        )
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "0.0.0.0", port).start())
        log.info("Serving store queries port=%d stores=%s auth=%s", port, sorted(views), cfg.metrics.query_auth)
        if cfg.metrics.query_auth == "token" and cfg.metrics.query_token is None:
            log.warning("No FLOE_METRICS_QUERY_TOKEN: the store query endpoint refuses every request")
        loop.run_forever()

    threading.Thread(target=serve, name="floe-queries", daemon=True).start()
