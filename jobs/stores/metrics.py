"""Prometheus metrics of the state stores, registrable on any CollectorRegistry.

One `StoreMetrics` per registry (`StoreMetrics.for_registry`) holds the metric families;
every store binds its labelled children once, so the hot path does no label lookups.

| metric                                      | labels                     |
|---------------------------------------------|----------------------------|
| floe_store_operations_total                 | store, operation           |
| floe_store_operation_duration_seconds       | store, operation           |
| floe_store_keys_total (keys read/written)   | store, operation           |
| floe_store_errors_total                     | store, operation, error    |
| floe_store_retries_total                    | store, operation           |
| floe_store_cache_hits_total                 | store                      |
| floe_store_cache_misses_total               | store                      |
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from floe_jobs.stores.cache import ReadCache
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

# Cassandra round trips on a healthy cluster sit between ~0.2 ms and tens of ms; batched
# operations over thousands of keys reach seconds.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


@dataclass(frozen=True)
class OperationMetrics:
    """The children of one (store, operation) pair."""

    operations: Counter
    duration: Histogram
    keys: Counter
    retries: Counter


class StoreMetrics:
    """The metric families of the stores on one registry."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, StoreMetrics] = weakref.WeakKeyDictionary()
    _lock = threading.RLock()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.operations = Counter(
            "floe_store_operations_total", "State store operations.", ["store", "operation"], registry=registry
        )
        self.duration = Histogram(
            "floe_store_operation_duration_seconds",
            "State store operation latency, retries included.",
            ["store", "operation"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.keys = Counter(
            "floe_store_keys_total", "Keys read or written by store operations.", ["store", "operation"],
            registry=registry,
        )
        self.errors = Counter(
            "floe_store_errors_total",
            "State store operations that failed, by error type.",
            ["store", "operation", "error"],
            registry=registry,
        )
        self.retries = Counter(
            "floe_store_retries_total", "Statements retried after a transient Cassandra error.",
            ["store", "operation"], registry=registry,
        )
        self._caches: weakref.WeakSet[ReadCache] = weakref.WeakSet()
        self._cache_names: weakref.WeakKeyDictionary[ReadCache, str] = weakref.WeakKeyDictionary()
        registry.register(_CacheCollector(self))
        self._bound: dict[tuple[str, str], OperationMetrics] = {}

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> StoreMetrics:
        """The one `StoreMetrics` of `registry` (default: prometheus_client's global one)."""
        registry = REGISTRY if registry is None else registry
        with cls._lock:
            metrics = cls._by_registry.get(registry)
            if metrics is None:
                metrics = cls(registry)
                cls._by_registry[registry] = metrics
            return metrics

    def bind(self, store: str, operation: str) -> OperationMetrics:
        key = (store, operation)
        bound = self._bound.get(key)
        if bound is None:
            bound = OperationMetrics(
                operations=self.operations.labels(store, operation),
                duration=self.duration.labels(store, operation),
                keys=self.keys.labels(store, operation),
                retries=self.retries.labels(store, operation),
            )
            self._bound[key] = bound
        return bound

    def error(self, store: str, operation: str, error: BaseException) -> None:
        self.errors.labels(store, operation, type(error).__name__).inc()

    def watch_cache(self, store: str, cache: ReadCache) -> None:
        """Exports the hit and miss counts of `cache` under `store` (read at scrape time, so
        the hot path only bumps plain integers)."""
        with self._lock:
            self._caches.add(cache)
            self._cache_names[cache] = store

    def cache_counts(self) -> dict[str, tuple[int, int]]:
        """(hits, misses) per store name, summed over its caches."""
        totals: dict[str, tuple[int, int]] = {}
        with self._lock:
            caches = [(self._cache_names[c], c) for c in list(self._caches)]
        for name, cache in caches:
            hits, misses = totals.get(name, (0, 0))
            totals[name] = (hits + cache.hits, misses + cache.misses)
        return totals


class _CacheCollector(Collector):
    """Yields the read cache counters of one StoreMetrics at scrape time."""

    def __init__(self, metrics: StoreMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        hits = CounterMetricFamily("floe_store_cache_hits", "Read cache hits.", labels=["store"])
        misses = CounterMetricFamily("floe_store_cache_misses", "Read cache misses.", labels=["store"])
        for store, (h, m) in sorted(self.metrics.cache_counts().items()):
            hits.add_metric([store], h)
            misses.add_metric([store], m)
        return [hits, misses]

    def describe(self) -> Iterable[Metric]:
        return [
            CounterMetricFamily("floe_store_cache_hits", "Read cache hits.", labels=["store"]),
            CounterMetricFamily("floe_store_cache_misses", "Read cache misses.", labels=["store"]),
        ]
