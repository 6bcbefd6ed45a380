"""`floe-operator`: run the Floe operator, namespaced or cluster-wide.

Every flag has an environment variable, so the Helm chart configures the operator without
templating its command line.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import http.server
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import kopf
from floe_operator import handlers, k8s, leader, logformat, metricsauth, model
from prometheus_client import start_http_server

log = logging.getLogger(__name__)

# Exit status of a leader that lost its Lease: it stops at once, and its restart is a standby.
LOST_LEASE_EXIT = 3


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The flags, each defaulting to its environment variable (the chart sets those), in the order
    `--help` lists them: what one operator watches and serves, then how several replicas share
    the work (Kopf peering, or a Lease), then the lag loop and logging (level and format)."""
    env = os.environ
    parser = argparse.ArgumentParser(prog="floe-operator", description="Run the Floe StreamingApp operator.")
    _add_watch_flags(parser, env)
    _add_peering_flags(parser, env)
    _add_leader_election_flags(parser, env)
    _number(parser, env, "--lag-interval-seconds", var="FLOE_LAG_INTERVAL_SECONDS", default="5", kind=float,
            help="Seconds between lag measurements of all apps; 0 turns the lag loop and native autoscaling off")
    _number(parser, env, "--lag-status-window-seconds", var="FLOE_LAG_STATUS_WINDOW_SECONDS", default="120",
            kind=float, help="Seconds of lag observations a partition's Burrow status (WARN, STALL, STOP) is "
            "judged over: a partition stalls or stops once its offset has not moved for this long; at least "
            "two lag intervals")
    parser.add_argument(
        "--log-level",
        default=env.get("FLOE_LOG_LEVEL", "INFO"),
        help="Log level (env FLOE_LOG_LEVEL, default INFO).",
    )
    parser.add_argument(
        "--log-format",
        choices=logformat.LOG_FORMATS,
        default=env.get("FLOE_LOG_FORMAT") or "text",
        help="text: one readable line per record; json: one JSON object per line (time, level, logger, message, "
        "app, pod, exc_info) (env FLOE_LOG_FORMAT, default text).",
    )
    args = parser.parse_args(argv)
    if args.log_format not in logformat.LOG_FORMATS:  # argparse checks a flag's choices, not its env default
        parser.error(f"FLOE_LOG_FORMAT must be one of {', '.join(logformat.LOG_FORMATS)} (got {args.log_format!r})")
    from floe_operator.lag.scrape import WINDOW_OBSERVATIONS as STATUS_OBSERVATIONS

    interval, window = args.lag_interval_seconds, args.lag_status_window_seconds
    if interval > 0 and not 2 * interval <= window <= STATUS_OBSERVATIONS * interval:
        parser.error(
            f"--lag-status-window-seconds (FLOE_LAG_STATUS_WINDOW_SECONDS) must hold 2 to {STATUS_OBSERVATIONS} "
            f"lag intervals: between {2 * interval:g} and {STATUS_OBSERVATIONS * interval:g} at "
            f"--lag-interval-seconds {interval:g} (got {window:g})"
        )
    return args


def _number(parser: argparse.ArgumentParser, env: Mapping[str, str], flag: str, *, var: str, default: str,
            kind: type[int] | type[float], help: str, note: str = "") -> None:
    """A numeric flag whose default is its environment variable's value, else `default`; its help
    ends with both, and `note` after the default."""
    parser.add_argument(flag, type=kind, default=kind(env.get(var, default)),
                        help=f"{help} (env {var}, default {default}{note}).")


def _add_watch_flags(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """What one operator watches, how often it resyncs, the endpoints it serves, and whether it
    asks Kafka about topics."""
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[n for n in env.get("FLOE_WATCH_NAMESPACES", "").split(",") if n.strip()],
        help="Namespace to watch; repeat for several (env FLOE_WATCH_NAMESPACES, comma-separated). "
        "None means every namespace.",
    )
    _number(parser, env, "--resync-seconds", var="FLOE_RESYNC_SECONDS", default="60", kind=float,
            help="Seconds between resyncs of each app")
    _number(parser, env, "--metrics-port", var="FLOE_METRICS_PORT", default="8080", kind=int,
            help="Port of the Prometheus /metrics endpoint; 0 disables it")
    parser.add_argument(
        "--metrics-auth",
        choices=["none", "kubernetes"],
        default=env.get("FLOE_METRICS_AUTH", "none"),
        help="none: /metrics serves anyone who reaches the port; kubernetes: only bearers of a token the API "
        "server authenticates (TokenReview) and lets get /metrics (SubjectAccessReview) (env FLOE_METRICS_AUTH)",
    )
    _number(parser, env, "--liveness-port", var="FLOE_LIVENESS_PORT", default="8081", kind=int,
            help="Port of the /healthz liveness endpoint; 0 disables it")
    parser.add_argument(
        "--no-kafka-check",
        action="store_true",
        default=not _env_bool("FLOE_CHECK_KAFKA", True),
        help="Do not ask Kafka whether topics exist and how many partitions they have (env FLOE_CHECK_KAFKA=false).",
    )


def _add_peering_flags(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Several replicas through Kopf peering: the highest-priority live one works."""
    parser.add_argument(
        "--peering",
        action="store_true",
        default=_env_bool("FLOE_PEERING", False),
        help="Coordinate several operator replicas through Kopf peering (needs its CRDs; env FLOE_PEERING).",
    )
    parser.add_argument(
        "--peering-name",
        default=env.get("FLOE_PEERING_NAME", "default"),
        help="Name of the Kopf peering object the replicas meet in (env FLOE_PEERING_NAME, default 'default').",
    )
    parser.add_argument(
        "--peering-priority",
        type=int,
        default=int(env["FLOE_PEERING_PRIORITY"]) if env.get("FLOE_PEERING_PRIORITY") else None,
        help="This replica's peering priority; the highest live replica works, the others stand by "
        "(env FLOE_PEERING_PRIORITY; default derived from POD_ID, so replicas differ).",
    )


def _add_leader_election_flags(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """Several replicas through a coordination.k8s.io Lease: the holder works, the others stand by
    until its renewals stop."""
    parser.add_argument(
        "--leader-election",
        action="store_true",
        default=_env_bool("FLOE_LEADER_ELECTION", False),
        help="Run only while holding a coordination.k8s.io Lease, so that of several replicas one works "
        "and the others stand by (env FLOE_LEADER_ELECTION). Not together with --peering.",
    )
    parser.add_argument(
        "--lease-name",
        default=env.get("FLOE_LEASE_NAME", "floe-operator"),
        help="Name of the Lease (env FLOE_LEASE_NAME, default 'floe-operator').",
    )
    parser.add_argument(
        "--lease-namespace",
        default=env.get("FLOE_LEASE_NAMESPACE") or env.get("POD_NAMESPACE", ""),
        help="Namespace of the Lease (env FLOE_LEASE_NAMESPACE, default the pod's POD_NAMESPACE).",
    )
    _number(parser, env, "--lease-duration-seconds", var="FLOE_LEASE_DURATION_SECONDS", default="15", kind=float,
            help="How long standbys wait after the leader's last renewal before taking the Lease")
    _number(parser, env, "--renew-deadline-seconds", var="FLOE_RENEW_DEADLINE_SECONDS", default="10", kind=float,
            help="How long the leader keeps working without a renewal before it exits",
            note="; shorter than the lease duration")
    _number(parser, env, "--retry-period-seconds", var="FLOE_RETRY_PERIOD_SECONDS", default="2", kind=float,
            help="Seconds between renewals, and between a standby's tries")


class _QuietRoutine(logging.Filter):
    """Drops Kopf's per-object note for every resync tick and Deployment status change."""

    ROUTINE = (
        "Timer 'resync' succeeded",
        "Handler 'deployment_changed' succeeded",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and record.getMessage().startswith(self.ROUTINE))


def build_registry(args: argparse.Namespace) -> kopf.OperatorRegistry:
    """The reconcile handlers, plus the lag loop unless it is turned off."""
    options = handlers.Options(resync_seconds=args.resync_seconds, check_kafka=not args.no_kafka_check)
    registry = handlers.build_registry(options)
    if args.lag_interval_seconds > 0:
        from floe_operator.lag import loop as lag_loop

        lag_loop.register(
            registry,
            lag_loop.Options(
                interval_seconds=args.lag_interval_seconds, status_window_seconds=args.lag_status_window_seconds
            ),
        )
    return registry


def _limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas: the API and Cassandra worker threads would otherwise
    each grow an arena, multiplying the resident memory for no speed gain (same as MALLOC_ARENA_MAX)."""
    if os.environ.get("MALLOC_ARENA_MAX") or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def _return_freed_memory(every: float = 30.0) -> None:
    """Hand memory freed after a burst (hundreds of apps created at once) back to the system.

    glibc keeps freed heap pages for reuse, so without this the operator's resident memory stays
    at its peak for good; `malloc_trim` releases them (a few milliseconds per call).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return

    def loop() -> None:
        while True:
            time.sleep(every)
            trim(0)

    threading.Thread(target=loop, name="floe-malloc-trim", daemon=True).start()


def peering_priority(pod_id: str | None = None) -> int:
    """A priority that differs between replicas: Kopf pauses every operator that sees a live peer
    of equal or higher priority, so replicas with one shared priority would all stand still."""
    ident = pod_id or os.environ.get("POD_ID") or socket.gethostname()
    return int(hashlib.sha256(ident.encode()).hexdigest()[:6], 16)


def peering_options(args: argparse.Namespace) -> dict[str, Any]:
    """Kopf's peering settings, only when peering is on: given to a standalone operator, a peering
    name makes Kopf wait for that peering object instead of working."""
    if not args.peering:
        return {}
    priority = args.peering_priority if args.peering_priority is not None else peering_priority()
    return {"peering_name": args.peering_name, "priority": priority}


def leader_identity(environ: Mapping[str, str] | None = None) -> str:
    """This replica's name in the Lease: its pod's name, else host and process id."""
    env = os.environ if environ is None else environ
    return (
        env.get("FLOE_LEADER_IDENTITY")
        or env.get("POD_NAME")
        or env.get("POD_ID")
        or f"{socket.gethostname()}-{os.getpid()}"
    )


def lease_config(args: argparse.Namespace) -> leader.Config:
    return leader.Config(
        name=args.lease_name,
        namespace=args.lease_namespace,
        identity=leader_identity(),
        lease_duration=args.lease_duration_seconds,
        renew_deadline=args.renew_deadline_seconds,
        retry_period=args.retry_period_seconds,
    )


@contextmanager
def standby_health(port: int) -> Iterator[None]:
    """Answer the liveness probe while standing by: Kopf serves /healthz only once it runs."""
    if not port:
        yield
        return

    class Healthz(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path.startswith("/healthz") else 404)
            self.end_headers()
            self.wfile.write(b"standby\n")

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Healthz)
    thread = threading.Thread(target=server.serve_forever, name="floe-standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def lose_lease(reason: str) -> None:
    """Fencing: a leader that lost its Lease must not write again, and Kopf's handlers and the lag
    loop cannot all be stopped mid-call; end the process now (Kubernetes restarts it as a standby)."""
    log.critical("Lost the leader Lease (%s); exiting so that nothing more is written", reason)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(LOST_LEASE_EXIT)


def lead(elector: leader.Elector, *, liveness_port: int) -> bool:
    """Stand by until this replica holds the Lease (True), or until SIGTERM/SIGINT (False)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    cfg = elector.config
    log.info(
        "Taking part in leader election lease=%s/%s identity=%s lease_duration=%g renew_deadline=%g retry_period=%g",
        cfg.namespace,
        cfg.name,
        cfg.identity,
        cfg.lease_duration,
        cfg.renew_deadline,
        cfg.retry_period,
    )
    try:
        with standby_health(liveness_port):
            acquired = elector.acquire(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if acquired:
        elector.hold(lose_lease)
    return acquired


def wait_until_served(
    cluster: k8s.Cluster, namespace: str | None, *, timeout: float = 120.0, pause: float = 1.0
) -> None:
    """Wait while the API server answers StreamingApp LISTs with 429/503/no answer.

    Right after the CRD is created or changed, its storage "is (re)initializing" and a watch
    gets an ERROR event; Kopf takes any ERROR other than 410 as fatal for that watch, so an
    operator started at that moment would stop watching apps. Any other answer (200, or 404
    when the CRD is missing, which Kopf reports itself) ends the wait.
    """
    path = f"/apis/{model.API_VERSION}/" + (f"namespaces/{namespace}/" if namespace else "") + model.PLURAL
    deadline = time.monotonic() + timeout
    while True:
        status, message = cluster.list_status_sync(path)
        if status not in (0, 429, 503):
            return
        if time.monotonic() > deadline:
            log.warning("StreamingApps not served after %.0f s (%s %s); starting anyway", timeout, status, message)
            return
        log.info("Waiting for the API server to serve StreamingApps (%s %s)", status, message)
        time.sleep(pause)


def main(argv: Sequence[str] | None = None) -> None:
    _limit_malloc_arenas()
    _return_freed_memory()
    args = parse_args(argv)
    logformat.configure(args.log_level, args.log_format)
    logging.getLogger("kopf.objects").addFilter(_QuietRoutine())
    namespaces = [n.strip() for n in args.namespace if n.strip()]
    elector: leader.Elector | None = None
    if args.leader_election:
        config = lease_config(args)
        problems = (["--peering and --leader-election exclude each other"] if args.peering else []) + config.problems()
        if problems:
            sys.exit(f"floe-operator: leader election: {'; '.join(problems)}")
        elector = leader.Elector(config, k8s.Cluster(k8s.load_client(pool_size=2)))
    wait_until_served(k8s.Cluster(k8s.load_client(pool_size=1)), namespaces[0] if namespaces else None)
    registry = build_registry(args)
    if args.metrics_port and args.metrics_auth == "kubernetes":
        reviewer = k8s.Cluster(k8s.load_client(pool_size=2))
        metricsauth.serve(args.metrics_port, metricsauth.kubernetes_authorizer(reviewer))
    elif args.metrics_port:
        start_http_server(args.metrics_port)
    if elector is not None and not lead(elector, liveness_port=args.liveness_port):
        log.info("Stopped while standing by")
        return
    try:
        kopf.run(
            registry=registry,
            standalone=not args.peering,
            **peering_options(args),
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None,
        )
    finally:
        # Kopf has stopped every handler and loop: nothing writes any more, a standby may take over now.
        if elector is not None:
            elector.release()


if __name__ == "__main__":
    main()
