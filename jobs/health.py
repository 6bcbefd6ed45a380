"""Liveness, readiness and Prometheus metrics of a replica, on one HTTP port.

- `/healthz`: 200 while every batch loop (one per lane of stages) turns (an iteration, batch or
  idle wait, within `metrics.stall_seconds`), else 503: one stuck lane is enough to fail it.
- `/readyz`: 200 once the replica is in the group and every batch loop has completed a pass
  over its partitions (each batch committed, or nothing to read) since its last assignment
  change, or it owns nothing; 503 before that, after a pass failed until one succeeds again,
  while shutting down, and while a batch loop waits for Cassandra or Kafka to come back
  (`floe_jobs.outages`).
- `/metrics`: prometheus-client's text format (the default registry, so store metrics that
  register there are exported too).

The `app` label of the `floe_job_*` series is the StreamingApp's name, the value the operator's
series (`floe_consumergroup_*`, `floe_app_*`) carry, so that the two join on (namespace, app);
`namespace` is the scrape target's (a ServiceMonitor's, or the pod's), never exported here, so
it cannot clash with the target's or be set by the job's own code to another namespace. The
batch loop labels its series with `ReplicaContext.metrics_app` (`FloeConfig.metrics_app`).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

RECORDS_IN = Counter(
    "floe_job_records_in", "Input records read by batches (a run of re-keyed rows counts as its rows)", ["app", "stage"]
)
RECORDS_OUT = Counter(
    "floe_job_records_out",
    "Records written to output and repartition topics (a run of re-keyed rows counts as its rows)",
    ["app", "stage"],
)
RECORDS_DLQ = Counter("floe_job_records_dead_lettered", "Undecodable records sent to the dead-letter topic", ["app"])
RECORDS_DEDUPED = Counter(
    "floe_job_repartition_records_skipped", "Repartition records dropped as already applied (replays)", ["app"]
)
BATCHES = Counter("floe_job_batches", "Completed batches", ["app", "stage", "kind"])
BATCH_SECONDS = Histogram(
    "floe_job_batch_duration_seconds",
    "Duration of a batch from plan to commit",
    ["app", "stage"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300),
)
BATCH_RECORDS = Histogram(
    "floe_job_batch_records",
    "Records per batch (a run of re-keyed rows counts as its rows)",
    ["app", "stage"],
    buckets=(1, 10, 100, 1_000, 10_000, 50_000, 100_000, 500_000, 1_000_000),
)
OWNED = Gauge(
    "floe_job_owned_partitions",
    "Partitions this replica owns, of every topic its group reads (input and repartition)",
    ["app"],
)
COMMITTED = Gauge("floe_job_committed_offset", "Next offset committed in Cassandra", ["app", "topic", "partition"])
END_OFFSET = Gauge(
    "floe_job_end_offset", "End offset seen at planning (last stable offset)", ["app", "topic", "partition"]
)
REBALANCES = Gauge("floe_job_rebalances", "Assignment changes seen by this replica", ["app"])
STATE_CACHE_KEYS = Gauge(
    "floe_job_state_cache_keys", "State rows kept of owned partitions (state.cache_max_keys)", ["app"]
)
DEPENDENCY_UNAVAILABLE = Gauge(
    "floe_job_dependency_unavailable",
    "1 while a batch loop waits for this dependency (cassandra, kafka) to be reachable again",
    ["app", "dependency"],
)
LAST_BATCH = Gauge("floe_job_last_success_timestamp_seconds", "Time of the last committed batch", ["app"])


class Health:
    """State the probes read; written by the batch loop."""

    def __init__(self, *, stall_seconds: float, app: str = "") -> None:
        self.stall_seconds = stall_seconds
        self.app = app
        self._started = time.monotonic()
        # last turn of each batch loop, by lane name
        self.last_loops: dict[str, float] = {}
        self.in_group = False
        self.owned = 0
        self.batch_since_assignment = False
        self.stopping = False
        # batch loops waiting for an unreachable dependency: lane name -> dependency
        self.waiting: dict[str, str] = {}
        self._waiting_lock = threading.Lock()

    def beat(self, loop: str = "main") -> None:
        self.last_loops[loop] = time.monotonic()

    @property
    def last_loop(self) -> float:
        """When the stalest batch loop last turned (start-up time before any turned)."""
        return min(self.last_loops.values(), default=self._started)

    def alive(self) -> bool:
        return time.monotonic() - self.last_loop < self.stall_seconds

    def waiting_for(self, loop: str, dependency: str | None) -> None:
        """Loop `loop` waits for `dependency` to come back (None: it does not wait any more)."""
        with self._waiting_lock:
            before = set(self.waiting.values())
            if dependency is None:
                self.waiting.pop(loop, None)
            else:
                self.waiting[loop] = dependency
            after = set(self.waiting.values())
            for name in before | after:
                DEPENDENCY_UNAVAILABLE.labels(self.app, name).set(1 if name in after else 0)

    def ready(self) -> bool:
        if self.stopping or not self.in_group or self.waiting:
            return False
        return self.owned == 0 or self.batch_since_assignment

    def snapshot(self) -> dict[str, Any]:
        return {
            "alive": self.alive(),
            "ready": self.ready(),
            "in_group": self.in_group,
            "owned_partitions": self.owned,
            "stopping": self.stopping,
            "waiting_for": sorted(set(self.waiting.values())),
            "seconds_since_loop": round(time.monotonic() - self.last_loop, 3),
        }


def serve(health: Health, *, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok = health.alive() if path == "/healthz" else health.ready()
                body = json.dumps(health.snapshot()).encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="floe-health", daemon=True).start()
    return server
