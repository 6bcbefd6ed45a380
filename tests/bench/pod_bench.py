"""Benchmarks on the stack's node (`make up` with the node): seed 02's pod replacement, on pods.

    .venv/bin/python tests/bench/pod_bench.py [--runs 3] [--protocols consumer classic]

handover-pod-<protocol>: two 3-replica word-count apps (6 input partitions each) run side by side
under the same steady load: one with leave-group-on-close on (the product's default), one with it
off (the baseline); every other setting is the product's default (session timeout 10 s, heartbeat
1 s, the shutdown and rollout the operator renders). Runs alternate between the two apps: `kubectl
delete pod` of the replica that owns the most partitions, then the longest time any partition of
the input topic or of the stateful stage's repartition topic goes without a committed batch, from
its last commit before the delete until the replacement pod has committed batches (and a window
after). Commits are read from Floe's offsets table every 100 ms. The operator runs as a local
process watching the bench's namespace; the apps run as pods from the job image built here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import podphases
import yaml
from runtime_bench import (  # run as a script: its own folder is on the path
    ROOT,
    drop_and_close,
    gaps_around,
    load_average,
    percentile,
    session_for,
    spread,
    stack_env,
    write_result,
)

PARTITIONS = 6
REPLICAS = 3
# a handover's longest gap: the median run's, and the worst run's
TARGET_S = 1.0
TARGET_MAX_S = 2.0


def kubectl_command(env: dict[str, str], *args: str) -> list[str]:
    return [env["FLOE_KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", *args]


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(kubectl_command(env, *args),
                          capture_output=True, text=True, input=stdin, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def pods_of(env: dict[str, str], namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl(env, "get", "pods", "-n", namespace, "-o", "json", "-l",
                                                     f"app.kubernetes.io/instance={app}"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    from floe_stack import demo

    return demo.is_ready(pod)


class App:
    """One word-count StreamingApp on the node, fed steadily, its commits watched per partition."""

    def __init__(self, env: dict[str, str], namespace: str, *, name: str, protocol: str = "auto", leave: bool = True,
                 min_ready: int | None = None) -> None:
        from floe_operator import model
        from floe_stack import demo, localrun

        self.env, self.namespace, self.name, self.leave = env, namespace, name, leave
        run = uuid.uuid4().hex[:6]
        self.topic_in, topic_out = f"{name}-in-{run}", f"{name}-out-{run}"
        self.keyspace = f"{name.replace('-', '_')}_{run}"
        for topic in (self.topic_in, topic_out):
            localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic, PARTITIONS)
        body = demo.app_body(ROOT, env, namespace=namespace, topic_in=self.topic_in, topic_out=topic_out,
                             keyspace=self.keyspace, replicas=REPLICAS)
        body["metadata"]["name"] = name
        spec = body["spec"]
        spec["kafka"]["groupProtocol"] = protocol
        spec["shutdown"]["leaveGroupOnClose"] = leave
        if min_ready is not None:
            spec["rollout"] = {"minReadySeconds": min_ready}
        self.min_ready = spec["rollout"]["minReadySeconds"]
        # three drivers per app share the node's two cores with the other app's three
        spec["spark"]["master"] = "local[1]"
        spec["resources"] = {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "1536Mi"}}
        self.body = body
        self.app_id = model.StreamingApp.from_body(body).app_id
        self.watched = {self.topic_in, f"{self.app_id}-words-repartition"}
        self.advances: dict[tuple[str, int], list[float]] = {}
        self.last: dict[tuple[str, int], int] = {}
        self.truth: Counter[str] = Counter()
        self.owner: dict[tuple[str, int], str] = {}
        # (when, partition, the pod that now owns it): the new owner's first commit of it
        self.moves: list[tuple[float, tuple[str, int], str]] = []

    def apply(self) -> None:
        kubectl(self.env, "apply", "-f", "-", stdin=yaml.safe_dump(self.body))

    def poll(self, session: Any, now: float) -> None:
        """Record a commit time for every watched partition whose committed offset moved."""
        from floe_jobs import offsets

        with contextlib.suppress(Exception):  # the table may not exist yet
            rows = offsets.progress(session, keyspace=self.keyspace, app_id=self.app_id)
            for tp, (nxt, _, _, owner, *_) in rows.items():
                if tp[0] not in self.watched:
                    continue
                if self.owner.get(tp, owner) != owner:
                    self.moves.append((now, tp, owner.split("/")[0]))
                self.owner[tp] = owner
                if self.last.get(tp) != nxt:
                    self.last[tp] = nxt
                    self.advances.setdefault(tp, []).append(now)

    def owners(self) -> list[str]:
        return [o.split("/")[0] for o in self.owner.values()]

    def steady(self, pods: list[dict[str, Any]], since: float) -> bool:
        """Every pod Ready and owning partitions, every watched partition committed since `since`."""
        names = {p["metadata"]["name"] for p in pods}
        return (len(pods) == REPLICAS and all(is_ready(p) for p in pods)
                and len(self.advances) == 2 * PARTITIONS
                and all(times and times[-1] >= since for times in self.advances.values())
                and names <= set(self.owners()))


def pod_states(app: App) -> str:
    """Each pod of the app with its phase, readiness and why its container waits, if it does."""
    out = []
    for pod in pods_of(app.env, app.namespace, app.name):
        waiting = [s["state"]["waiting"].get("reason", "") for s in pod["status"].get("containerStatuses") or []
                   if "waiting" in s.get("state", {})]
        out.append(f"{pod['metadata']['name']} {pod['status'].get('phase')} ready={is_ready(pod)}"
                   + (f" waiting={','.join(waiting)}" if waiting else ""))
    return "; ".join(out) or "no pods"


def wait(check: Any, *, timeout: float, what: str, app: App | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f"; pods: {pod_states(app)}; owners: {sorted(set(app.owners()))}" if app else ""))


def settle(app: App, steady_s: float) -> tuple[float, set[str]]:
    """Wait for the app to run steadily, watch `steady_s` of it; (its start, the pods' names)."""
    wait(lambda: app.steady(pods_of(app.env, app.namespace, app.name), time.monotonic() - 5), timeout=600,
         what=f"{app.name}: {REPLICAS} Ready pods committing on every partition", app=app)
    steady_from = time.monotonic()
    time.sleep(steady_s)
    return steady_from, {p["metadata"]["name"] for p in pods_of(app.env, app.namespace, app.name)}


def replace_one(app: App, *, steady_s: float, window_s: float) -> dict[str, Any]:
    """Delete the pod owning the most partitions; gaps until its replacement has committed, and
    where the time went (`podphases.handover`)."""
    steady_from, before = settle(app, steady_s)
    owned = app.owners()
    owned_before = {tp: owner.split("/")[0] for tp, owner in app.owner.items()}
    victim = max(before, key=owned.count)
    follow = podphases.LogFollower(kubectl_command(app.env, "logs", victim, "-n", app.namespace))
    time.sleep(1)  # the follow has started
    moves = len(app.moves)
    t_del = time.monotonic()
    t_del_wall = time.time()
    kubectl(app.env, "delete", "pod", victim, "-n", app.namespace, "--wait=false")

    def replaced() -> bool:
        pods = pods_of(app.env, app.namespace, app.name)
        new = {p["metadata"]["name"] for p in pods} - before
        return bool(new) and bool(new & set(app.owners())) and app.steady(pods, t_del)

    wait(replaced, timeout=600, what=f"{app.name}: a replacement of the deleted {victim} committing", app=app)
    t_joined = time.monotonic()
    time.sleep(window_s)
    pods = {p["metadata"]["name"]: p for p in pods_of(app.env, app.namespace, app.name)}
    since = f"--since={int(time.monotonic() - t_del) + 5}s"
    logs = {name: kubectl(app.env, "logs", name, "-n", app.namespace, "--timestamps", since).splitlines()
            for name in pods}
    new_name = next(iter(set(pods) - before), None)
    phases = podphases.handover(
        t_del_wall,
        victim=victim,
        victim_log=follow.stop(),
        survivor_logs={n: lines for n, lines in logs.items() if n in before},
        new_pod=pods.get(new_name) if new_name else None,
        new_log=logs.get(new_name, []) if new_name else [],
        owned_before=owned_before,
        moves=[(t - t_del + t_del_wall, tp, owner) for t, tp, owner in app.moves[moves:]],
    )
    return {
        "leave_group_on_close": app.leave,
        **gaps_around(app.advances, t_term=t_del, t_end=time.monotonic(), steady_from=steady_from),
        "partitions_of_deleted_pod": owned.count(victim),
        "replacement_committing_s": round(t_joined - t_del, 3),
        "phases_s": phases,
        "load_average": load_average(),
    }


def roll(app: App, run: int, *, steady_s: float, window_s: float) -> dict[str, Any]:
    """Change spec.spark.conf (new pods, one at a time); gaps and length of the whole rollout."""
    steady_from, before = settle(app, steady_s)
    moves = len(app.moves)
    t_patch = time.monotonic()
    patch = {"spec": {"spark": {"conf": {"spark.floe.bench.rollout": str(run)}}}}
    kubectl(app.env, "patch", "streamingapp", app.name, "-n", app.namespace, "--type=merge", "-p", json.dumps(patch))

    def rolled() -> bool:
        pods = pods_of(app.env, app.namespace, app.name)
        return not ({p["metadata"]["name"] for p in pods} & before) and app.steady(pods, time.monotonic() - 5)

    wait(rolled, timeout=900, what=f"{app.name}: every pod replaced and committing", app=app)
    t_done = time.monotonic()
    time.sleep(window_s)
    return {
        "min_ready_seconds": app.min_ready,
        **gaps_around(app.advances, t_term=t_patch, t_end=time.monotonic(), steady_from=steady_from),
        "rollout_s": round(t_done - t_patch, 3),
        "ownership_moves": len(app.moves) - moves,
        "load_average": load_average(),
    }


def operator(env: dict[str, str], namespace: str) -> subprocess.Popen[bytes]:
    log = Path(tempfile.gettempdir()) / "floe-pod-bench-operator.log"
    return subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "floe-operator"), "--namespace", namespace, "--metrics-port", "0",
         "--liveness-port", "0", "--resync-seconds", "10", "--no-kafka-check"],
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"], "FLOE_LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
    )


def side_by_side(env: dict[str, str], apps: list[App], step: Any, runs: int) -> dict[str, list[dict[str, Any]]]:
    """Run both apps under the same steady load, `step(app, i)` alternated between them `runs`
    times; then check every app's counts are exact. Results by app name."""
    from floe_stack import demo, localrun

    namespace = apps[0].namespace
    kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / "streamingapp.yaml"))
    kubectl(env, "wait", "--for=condition=Established", "--timeout=60s", "crd/streamingapps.streaming.floe.dev")
    demo.restricted_namespace(env, env["FLOE_KUBECTL"], namespace)
    op = operator(env, namespace)
    session = session_for(env)
    stop = threading.Event()
    lines = localrun.word_lines(50_000, seed=3)

    def feed() -> None:
        i = 0
        while not stop.is_set():
            chunk = lines[i : i + 12]
            for app in apps:
                localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], app.topic_in, chunk)
                app.truth.update(localrun.word_truth(chunk))
            i = (i + 12) % (len(lines) - 12)
            stop.wait(0.1)

    def watch() -> None:
        while not stop.is_set():
            now = time.monotonic()
            for app in apps:
                app.poll(session, now)
            stop.wait(0.1)

    results: dict[str, list[dict[str, Any]]] = {app.name: [] for app in apps}
    feeder, watcher = threading.Thread(target=feed, daemon=True), threading.Thread(target=watch, daemon=True)
    try:
        for app in apps:
            app.apply()
        feeder.start()
        watcher.start()
        for i in range(runs):
            for app in apps:
                results[app.name].append(step(app, i))
                print(app.name, i, json.dumps(results[app.name][-1]), flush=True)
        stop.set()
        feeder.join()
        for app in apps:
            exact = wait(lambda app=app: localrun.read_store(session, app.keyspace, "word-count", key_serde="str",
                                                           value_serde="long") == dict(app.truth),
                         timeout=300, what=f"{app.name}: counts in Cassandra equal to the text produced")
            for run in results[app.name]:
                run["counts_exact_after"] = exact
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            kubectl(env, "delete", "streamingapp", "--all", "-n", namespace, "--wait=true", "--timeout=180s",
                    timeout=200)
        op.terminate()
        op.wait(30)
        kubectl(env, "delete", "namespace", namespace, "--wait=false")
        drop_and_close(session, [a.keyspace for a in apps])
    return results


def membership() -> tuple[float, float]:
    from floe_operator import model

    shutdown = model.ShutdownSpec()
    return shutdown.session_timeout_ms / 1000, shutdown.heartbeat_interval_ms / 1000


def bench_handover(env: dict[str, str], args: argparse.Namespace) -> None:
    session_s, heartbeat_s = membership()
    for protocol in args.protocols:
        namespace = f"floe-bench-pods-{uuid.uuid4().hex[:6]}"
        apps = [App(env, namespace, name=f"ho-{'on' if leave else 'off'}", protocol=protocol, leave=leave)
                for leave in (True, False)]
        results = side_by_side(env, apps, lambda app, _i: replace_one(app, steady_s=args.steady,
                                                                      window_s=args.window), args.runs)
        on, off = results["ho-on"], results["ho-off"]
        worst = max(r["max_gap_s"] for r in on)
        value, baseline = statistics.median(r["max_gap_s"] for r in on), statistics.median(r["max_gap_s"] for r in off)
        gaps = [g for r in on for g in r["per_partition_gap_s"].values()]
        write_result("handover", f"pod-{'kip848' if protocol == 'consumer' else 'classic'}", {
            "metric": "longest time any partition of the input or of the stateful stage's repartition topic goes "
            "without a committed batch, from `kubectl delete pod` of the replica owning the most partitions of a "
            f"3-pod word count until its replacement pod commits ({protocol} protocol, session timeout "
            f"{session_s:g} s, heartbeat {heartbeat_s:g} s: the product's defaults); value: leave-group-on-close "
            "on, baseline: off, two apps side by side under the same load, deletions alternated, median of "
            f"{args.runs} runs each; lower is better, ratio = baseline / value",
            "unit": "s",
            "value": round(value, 3),
            "baseline": "leave-group-on-close off, otherwise the same app and settings (the deleted pod's "
            f"partitions wait for the {session_s:g} s session timeout)",
            "baseline_value": round(baseline, 3),
            "ratio": round(baseline / value, 2) if value else None,
            "value_max": round(worst, 3),
            "target": f"value <= {TARGET_S:g} s and value_max <= {TARGET_MAX_S:g} s",
            "target_met": value <= TARGET_S and worst <= TARGET_MAX_S,
            "spread": {"value": spread([r["max_gap_s"] for r in on]),
                       "baseline": spread([r["max_gap_s"] for r in off])},
            "p50_s": round(statistics.median(gaps), 3),
            "p99_s": round(percentile(gaps, 0.99), 3),
            "phases_median_s": {"leave_on": podphases.medians([r["phases_s"] for r in on]),
                                "leave_off": podphases.medians([r["phases_s"] for r in off])},
            "command": f".venv/bin/python tests/bench/pod_bench.py handover --protocols {protocol} --runs {args.runs}",
            "load_average_1m": load_average()[0],
            "cpu_count": os.cpu_count(),
            "runs": {"leave_on": on, "leave_off": off},
        })


def bench_rollout(env: dict[str, str], args: argparse.Namespace) -> None:
    from floe_operator import model

    default = model.RolloutSpec().min_ready_seconds
    namespace = f"floe-bench-pods-{uuid.uuid4().hex[:6]}"
    apps = [App(env, namespace, name=f"roll-{m}s", min_ready=m) for m in (default, 0)]
    results = side_by_side(env, apps, lambda app, i: roll(app, i, steady_s=args.steady, window_s=args.window),
                           args.runs)
    with_, without = results[apps[0].name], results[apps[1].name]
    value = statistics.median(r["max_gap_s"] for r in with_)
    baseline = statistics.median(r["max_gap_s"] for r in without)
    write_result("handover", "pod-rollout", {
        "metric": "longest time any partition of the input or of the stateful stage's repartition topic goes "
        f"without a committed batch during a rolling update of a 3-pod word count (spec.spark.conf changed; "
        f"maxSurge 1, maxUnavailable 0), from the change until every new pod commits; value: minReadySeconds "
        f"{default} (the product's default), baseline: minReadySeconds 0, two apps side by side under the same "
        f"load, rollouts alternated, median of {args.runs} each; lower is better, ratio = baseline / value",
        "unit": "s",
        "value": round(value, 3),
        # the worst run too: one rollout's gap can pass every run of the baseline
        "value_max": round(max(r["max_gap_s"] for r in with_), 3),
        "baseline": "minReadySeconds 0: the next pod is replaced as soon as the last is Ready, so the group's "
        "rebalances follow each other",
        "baseline_value": round(baseline, 3),
        "ratio": round(baseline / value, 2) if value else None,
        "target": "value <= baseline_value (the median run's longest gap is no longer with minReadySeconds)",
        "target_met": value <= baseline,
        "spread": {"value": spread([r["max_gap_s"] for r in with_]),
                   "baseline": spread([r["max_gap_s"] for r in without]),
                   "rollout_s": spread([r["rollout_s"] for r in with_]),
                   "baseline_rollout_s": spread([r["rollout_s"] for r in without])},
        # gaps, as the other handover rows: every partition's gap of every run with minReadySeconds
        # (the rollouts' durations are in spread.rollout_s)
        "p50_s": round(statistics.median(gaps := [g for r in with_ for g in r["per_partition_gap_s"].values()]), 3),
        "p99_s": round(percentile(gaps, 0.99), 3),
        "latency": "p50_s/p99_s: every partition's longest gap, over every run with minReadySeconds",
        "command": f".venv/bin/python tests/bench/pod_bench.py rollout --runs {args.runs}",
        "load_average_1m": load_average()[0],
        "cpu_count": os.cpu_count(),
        "runs": {"min_ready": with_, "no_min_ready": without},
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("areas", nargs="*", choices=["handover", "rollout"], default=["handover", "rollout"])
    parser.add_argument("--runs", type=int, default=5, help="pod deletions or rollouts per side (default 5)")
    parser.add_argument("--protocols", nargs="+", default=["consumer", "classic"], choices=["consumer", "classic"])
    parser.add_argument("--steady", type=float, default=10, help="seconds of steady commits before a step")
    parser.add_argument("--window", type=float, default=5, help="seconds watched after the new pods commit")
    args = parser.parse_args(argv)
    # a stopped bench still deletes its apps (their finalizers need its operator) and namespace
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = stack_env()
    if env.get("FLOE_NODE") != "1":
        # deselected on purpose: `make up NODE=0` left the node out
        print("pod_bench: skipped, the stack runs without its node (NODE=0); `make down && make up` to bench on pods")
        return 0
    for area in args.areas:
        {"handover": bench_handover, "rollout": bench_rollout}[area](env, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
