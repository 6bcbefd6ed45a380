"""Benchmarks on the stack's node (`make up` with the node): seed 02's pod replacement, on pods.

    .venv/bin/python tests/bench/pod_bench.py [handover|rollout|autoscale] [--runs 5] [--protocols consumer classic]

handover-pod-<protocol>: two 3-replica word-count apps (6 input partitions each) run side by side
under the same steady load: one with leave-group-on-close on (the product's default), one with it
off (the baseline); every other setting is the product's default (session timeout 10 s, heartbeat
1 s, the shutdown and rollout the operator renders). Runs alternate between the two apps: `kubectl
delete pod` of the replica that owns the most partitions, then the longest time any partition of
the input topic or of the stateful stage's repartition topic goes without a committed batch, from
its last commit before the delete until the replacement pod has committed batches (and a window
after). Commits are read from Floe's offsets table every 100 ms. The operator runs as a local
process watching the bench's namespace; the apps run as pods from the job image built here.

handover-pod-rollout: the same two apps' longest gap during a rolling update, minReadySeconds at
its default against 0.

autoscale-pod-reaction (issue 35): one word-count app with native autoscaling (minReplicas 1,
maxReplicas 2, every other autoscaling field and the operator's lag interval at their defaults)
runs 1 pod at a steady low rate; then a surge one replica cannot keep up with (its batches capped
by spec.kafka.maxRecordsPerBatch, so a producer on this machine outruns it). Per run, seconds from
the surge's first record to the decision (spec.replicas 2, as a watch sees it), the Deployment's
scale, the new pod's creation, start, warm-up, assignment and first committed batch (its name in
the offsets table's owner column). Runs alternate with a baseline that scales by `kubectl scale`
at the surge's start, so the difference is the decision's. Between runs the input goes back to the
steady rate, the backlog is worked off, the app is scaled back to 1 and a run starts only from one
Ready pod with the lag near 0; the counts are checked exact at the end.
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
from collections.abc import Callable
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
STEADY_RATE = 120.0  # lines/s into every app's input
# a handover's longest gap: the median run's, and the worst run's
TARGET_S = 1.0
TARGET_MAX_S = 2.0
# issue 35: from lag starting to grow to the new pod's first commit, and the decision's share of it
AUTOSCALE_TARGET_S = 45.0
DECISION_TARGET_S = 15.0


def kubectl_command(env: dict[str, str], *args: str) -> list[str]:
    return [env["FLOE_KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", *args]


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    proc = subprocess.run(kubectl_command(env, *args),
                          capture_output=True, text=True, input=stdin, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def pods_of(env: dict[str, str], namespace: str, app: str, *, terminating: bool = False) -> list[dict[str, Any]]:
    """The app's pods; those being deleted only with `terminating`."""
    items: list[dict[str, Any]] = json.loads(kubectl(env, "get", "pods", "-n", namespace, "-o", "json", "-l",
                                                     f"app.kubernetes.io/instance={app}"))["items"]
    return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    from floe_stack import demo

    return demo.is_ready(pod)


class App:
    """One word-count StreamingApp on the node, fed steadily, its commits watched per partition."""

    def __init__(self, env: dict[str, str], namespace: str, *, name: str, protocol: str = "auto", leave: bool = True,
                 min_ready: int | None = None, replicas: int = REPLICAS, autoscaling: dict[str, Any] | None = None,
                 batch_records: int | None = None) -> None:
        from floe_operator import model
        from floe_stack import demo, localrun

        self.env, self.namespace, self.name, self.leave, self.replicas = env, namespace, name, leave, replicas
        run = uuid.uuid4().hex[:6]
        self.topic_in, topic_out = f"{name}-in-{run}", f"{name}-out-{run}"
        self.keyspace = f"{name.replace('-', '_')}_{run}"
        for topic in (self.topic_in, topic_out):
            localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic, PARTITIONS)
        body = demo.app_body(ROOT, env, namespace=namespace, topic_in=self.topic_in, topic_out=topic_out,
                             keyspace=self.keyspace, replicas=replicas)
        body["metadata"]["name"] = name
        spec = body["spec"]
        spec["kafka"]["groupProtocol"] = protocol
        spec["shutdown"]["leaveGroupOnClose"] = leave
        if min_ready is not None:
            spec["rollout"] = {"minReadySeconds": min_ready}
        if autoscaling is not None:
            spec["autoscaling"] = autoscaling
        if batch_records is not None:
            spec["kafka"]["maxRecordsPerBatch"] = batch_records
        self.min_ready = spec["rollout"]["minReadySeconds"]
        # three drivers per app share the node's two cores with the other app's three
        spec["spark"]["master"] = "local[1]"
        spec["resources"] = {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "1536Mi"}}
        self.body = body
        self.app_id = model.StreamingApp.from_body(body).app_id
        self.watched = {self.topic_in, f"{self.app_id}-words-repartition"}
        self.advances: dict[tuple[str, int], list[float]] = {}
        self.last: dict[tuple[str, int], int] = {}
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
        return [o.split("/")[0] for o in list(self.owner.values())]

    def lag(self, produced: int) -> int | None:
        """Records of the `produced` into the input not committed yet (its offsets count from 0:
        a new topic, no transactions); None until every input partition has committed."""
        committed = [n for (topic, _), n in list(self.last.items()) if topic == self.topic_in]
        return produced - sum(committed) if len(committed) == PARTITIONS else None

    def backlog(self, produced: int) -> int | None:
        """Records not committed yet by either stage: the input's lag and the repartition topic's
        (its end offsets against the counting stage's commits); None until every watched
        partition has committed. The counts are final only when this is 0 and the feed stopped."""
        from floe_stack import localrun

        lag = self.lag(produced)
        repartition = next(t for t in self.watched if t != self.topic_in)
        committed = {p: n for (topic, p), n in list(self.last.items()) if topic == repartition}
        if lag is None or len(committed) < PARTITIONS:
            return None
        ends = localrun.end_offsets(self.env["FLOE_KAFKA_BOOTSTRAP"], repartition)
        return lag + sum(max(0, end - committed.get(p, 0)) for p, end in ends.items())

    def steady(self, pods: list[dict[str, Any]], since: float) -> bool:
        """Every pod Ready and owning partitions, every watched partition committed since `since`."""
        names = {p["metadata"]["name"] for p in pods}
        return (len(pods) == self.replicas and all(is_ready(p) for p in pods)
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


def wait(check: Any, *, timeout: float, what: str, app: App | None = None,
         detail: Callable[[], str] | None = None) -> Any:
    """Poll `check` every second until it is true; on a timeout, say what was waited for, the
    app's pods and partition owners, and `detail()`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f"; pods: {pod_states(app)}; owners: {sorted(set(app.owners()))}" if app else "")
                       + (f"; {detail()}" if detail else ""))


def settle(app: App, steady_s: float) -> tuple[float, set[str]]:
    """Wait for the app to run steadily, watch `steady_s` of it; (its start, the pods' names)."""
    wait(lambda: app.steady(pods_of(app.env, app.namespace, app.name), time.monotonic() - 5), timeout=600,
         what=f"{app.name}: {app.replicas} Ready pods committing on every partition", app=app)
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


# the surge's reaction: spec.replicas as a watch prints it, one line per change
REPLICAS_PATH = 'jsonpath={.spec.replicas}{"\\n"}'
# a run starts with the lag below this many seconds of the steady input ("near 0": a batch or two)
NEAR_ZERO_S = 10.0


def app_object(app: App) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(kubectl(app.env, "get", "streamingapp", app.name, "-n", app.namespace,
                                             "-o", "json"))
    return got


def autoscaling_state(app: App, feed: Feed, *, produced_from: int, since: float) -> str:
    """What a stuck surge shows: the app's replicas and the autoscaler's last word, the lag, the
    rate the feed reached."""
    body = app_object(app)
    auto = body.get("status", {}).get("autoscaling") or {}
    rate = (feed.produced - produced_from) / max(1e-9, time.monotonic() - since)
    return (f"spec.replicas {body['spec'].get('replicas')}, status.autoscaling {auto.get('action')} "
            f"{auto.get('reason')}: {auto.get('message')} (inputs {auto.get('inputs')}), lag {app.lag(feed.produced)}, "
            f"input {rate:.0f} lines/s; if the lag does not grow, raise --surge-rate or lower --batch-records")


def react(app: App, feed: Feed, *, native: bool, surge_rate: float, steady_s: float, window_s: float,
          timeout_s: float) -> dict[str, Any]:
    """From 1 Ready replica with lag near 0, raise the input to `surge_rate`; seconds from the
    surge's first record to the decision to scale (the native autoscaler's, or a `kubectl scale`
    issued at once when not `native`), the Deployment's scale, and the new pod's start, warm-up,
    assignment and first committed batch (`podphases.scale_up`). Then back to the steady rate,
    the backlog worked off, and back to 1 replica."""
    from floe_operator.lag import loop

    env, ns, one, two = app.env, app.namespace, app.replicas, app.replicas + 1
    near_zero = NEAR_ZERO_S * STEADY_RATE
    wait(lambda: len(pods_of(env, ns, app.name, terminating=True)) == one
         and app_object(app)["spec"]["replicas"] == one, timeout=600,
         what=f"{app.name}: spec.replicas {one} and {one} pod, none terminating", app=app)
    _, before = settle(app, steady_s)
    wait(lambda: (lag := app.backlog(feed.produced)) is not None and lag <= near_zero, timeout=300,
         what=f"{app.name}: both stages' lag at most {near_zero:.0f} records", app=app,
         detail=lambda: f"backlog {app.backlog(feed.produced)}")
    lag_before = app.lag(feed.produced)
    capacity_before = (app_object(app).get("status", {}).get("autoscaling") or {}).get("capacityPerReplica")
    watches = {kind: podphases.Follower(kubectl_command(env, "get", kind, app.name, "-n", ns, "-w", "-o",
                                                        REPLICAS_PATH))
               for kind in ("streamingapp", "deployment")}
    try:
        wait(lambda: all(w.lines for w in watches.values()), timeout=30,
             what=f"{app.name}: the watches of the app's and the Deployment's spec.replicas printing")
        moves = len(app.moves)
        produced_from = feed.produced
        t_surge, t_surge_wall = feed.set_rate(surge_rate)
        if not native:
            kubectl(env, "scale", "streamingapp", app.name, "-n", ns, f"--replicas={two}")

        def committing() -> bool:
            new = {p["metadata"]["name"] for p in pods_of(env, ns, app.name)} - before
            return bool(new & set(app.owners()))

        wait(committing, timeout=timeout_s, app=app,
             what=f"{app.name}: a new pod committing after a surge of {surge_rate:g} lines/s "
             f"({'the native autoscaler' if native else 'kubectl scale'} to {two} replicas)",
             detail=lambda: autoscaling_state(app, feed, produced_from=produced_from, since=t_surge))
        t_new = time.monotonic()
        lag_at_commit = app.lag(feed.produced)
        surge_rate_reached = (feed.produced - produced_from) / (t_new - t_surge)
        auto = app_object(app).get("status", {}).get("autoscaling") or {}
        time.sleep(window_s)
        t_steady, _ = feed.set_rate(STEADY_RATE)
        pods = {p["metadata"]["name"]: p for p in pods_of(env, ns, app.name)}
        new_name = next(iter(set(pods) - before), None)
        since = f"--since={int(time.monotonic() - t_surge) + 5}s"
        new_log = (kubectl(env, "logs", new_name, "-n", ns, "--timestamps", since).splitlines()
                   if new_name else [])
    finally:
        replicas = {kind: w.stop() for kind, w in watches.items()}
    phases = podphases.scale_up(
        t_surge_wall,
        to=two,
        app_replicas=replicas["streamingapp"],
        deployment_replicas=replicas["deployment"],
        new_pod=pods.get(new_name) if new_name else None,
        new_log=new_log,
        moves=[(t - t_surge + t_surge_wall, tp, owner) for t, tp, owner in app.moves[moves:]],
    )
    result = {
        "scaled_by": "native" if native else "kubectl_scale",
        "capacity_per_replica_before": capacity_before,
        "lag_before": lag_before,
        "lag_at_new_pod_commit": lag_at_commit,
        "surge_lines_per_s": round(surge_rate_reached, 1),
        "surge_s": round(t_steady - t_surge, 3),
        "autoscaling_at_new_pod_commit": {k: auto.get(k) for k in ("action", "reason", "message")},
        "phases_s": phases,
        "load_average": load_average(),
    }
    # Back to one replica once the backlog is worked off and the autoscaler's rate window no longer
    # holds the surge (else it would take the surge's input for the current load and scale up again).
    wait(lambda: (lag := app.backlog(feed.produced)) is not None and lag <= near_zero, timeout=900,
         what=f"{app.name}: the surge's backlog worked off in both stages (at most {near_zero:.0f} records)",
         app=app, detail=lambda: f"backlog {app.backlog(feed.produced)}")
    options = loop.Options()
    time.sleep(max(0.0, t_steady + options.rate_seconds + 2 * options.interval_seconds - time.monotonic()))
    kubectl(env, "scale", "streamingapp", app.name, "-n", ns, f"--replicas={one}")
    return result


def reaction_summary(native: list[dict[str, Any]], scaled: list[dict[str, Any]]) -> dict[str, Any]:
    """The autoscale row's figures: value, the native runs' median seconds from the surge to the
    new pod's first commit; baseline, the same with `kubectl scale` at the surge's start (no
    decision to wait for); the decision's own delay; spreads and each phase's median."""

    def phase(runs: list[dict[str, Any]], name: str) -> list[float]:
        got = [r["phases_s"].get(name) for r in runs]
        if not got or any(v is None for v in got):
            raise ValueError(f"{name} missing from a run ({got}): a run ended without it, so no figure stands")
        return [float(v) for v in got]

    value_runs, baseline_runs = phase(native, "new_first_commit_s"), phase(scaled, "new_first_commit_s")
    decisions = phase(native, "decision_s")
    value, baseline = statistics.median(value_runs), statistics.median(baseline_runs)
    decision = statistics.median(decisions)
    return {
        "value": round(value, 3),
        "value_max": round(max(value_runs), 3),
        "baseline_value": round(baseline, 3),
        "ratio": round(value / baseline, 2) if baseline else None,
        "decision_s": round(decision, 3),
        "decision_share": round(decision / value, 2) if value else None,
        "target_met": value <= AUTOSCALE_TARGET_S and decision <= DECISION_TARGET_S,
        "spread": {"value": spread(value_runs), "baseline": spread(baseline_runs), "decision_s": spread(decisions)},
        "p50_s": round(statistics.median(value_runs), 3),
        "p99_s": round(percentile(value_runs, 0.99), 3),
        "phases_median_s": {"native": podphases.medians([r["phases_s"] for r in native]),
                            "kubectl_scale": podphases.medians([r["phases_s"] for r in scaled])},
    }


def operator(env: dict[str, str], namespace: str) -> subprocess.Popen[bytes]:
    log = Path(tempfile.gettempdir()) / "floe-pod-bench-operator.log"
    return subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "floe-operator"), "--namespace", namespace, "--metrics-port", "0",
         "--liveness-port", "0", "--resync-seconds", "10", "--no-kafka-check"],
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"], "FLOE_LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
    )


class Feed:
    """Lines into every app's input topic from one producer, `rate` lines/s in ticks of 0.1 s,
    round-robin over the partitions. Every app gets the same lines, so one count of them is every
    app's truth. The rate can change while it runs (`set_rate`: a surge, and back)."""

    TICK = 0.1

    def __init__(
        self, env: dict[str, str], topics: list[str], *, rate: float = STEADY_RATE, lines: list[str] | None = None
    ) -> None:
        from floe_stack import localrun

        self.bootstrap, self.topics, self.rate = env["FLOE_KAFKA_BOOTSTRAP"], topics, rate
        self.lines = lines if lines is not None else localrun.word_lines(50_000, seed=3)
        self.produced = 0  # lines into each topic
        self.errors: list[str] = []
        self.undelivered = 0
        self.failed: BaseException | None = None
        self.changed_at = (0.0, 0.0)
        self._wanted: float | None = None
        self._changed = threading.Event()

    def set_rate(self, rate: float) -> tuple[float, float]:
        """Change the rate; returns once the first tick at it has started producing, with that
        tick's (monotonic, wall) time: for a surge, the time of its first record above the old rate."""
        self._changed.clear()
        self._wanted = rate
        if not self._changed.wait(30):
            raise TimeoutError(f"the feed did not take up the rate of {rate:g} lines/s within 30 s"
                               + (f": it stopped ({self.failed!r})" if self.failed else ""))
        return self.changed_at

    def sent(self) -> list[str]:
        """The lines produced so far into each topic, in order."""
        return [self.lines[k % len(self.lines)] for k in range(self.produced)]

    def truth(self) -> Counter[str]:
        """Every word's count in the lines produced so far (into each topic)."""
        from floe_stack import localrun

        cycles, rest = divmod(self.produced, len(self.lines))
        truth = localrun.word_truth(self.lines[:rest])
        if cycles:
            for word, n in localrun.word_truth(self.lines).items():
                truth[word] += cycles * n
        return truth

    def check(self) -> None:
        """After `run` returned: it ran to the end and every record was delivered, or the counts
        could not be exact."""
        if self.failed is not None:
            raise RuntimeError(f"the feed stopped early: {self.failed!r}") from self.failed
        if self.errors or self.undelivered:
            raise RuntimeError(f"the feed lost records: {self.undelivered} undelivered, delivery errors "
                               f"{self.errors[:3]}; the counts cannot be checked")

    def run(self, stop: threading.Event) -> None:
        try:
            self._run(stop)
        except BaseException as exc:
            self.failed = exc
            raise

    def _run(self, stop: threading.Event) -> None:
        from confluent_kafka import KafkaError, Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20})
        parts = {t: len(producer.list_topics(t, timeout=10).topics[t].partitions) for t in self.topics}

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        due, last = 0.0, time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            due += self.rate * (now - last)
            last = now
            if self._wanted is not None:
                self.rate, self._wanted = self._wanted, None
                due = self.rate * self.TICK
                self.changed_at = (now, time.time())
                self._changed.set()
            n = int(due)
            due -= n
            for k in range(self.produced, self.produced + n):
                value = self.lines[k % len(self.lines)].encode()
                for topic in self.topics:
                    while True:
                        try:
                            producer.produce(topic, value=value, partition=k % parts[topic], on_delivery=delivered)
                            break
                        except BufferError:  # the local queue is full: let it drain
                            producer.poll(0.1)
            self.produced += n
            producer.poll(0)
            stop.wait(max(0.0, self.TICK - (time.monotonic() - now)))
        self.undelivered = producer.flush(60)


Step = Callable[[App, int, Feed], dict[str, Any]]


def drained(app: App, session: Any, produced: int, *, stalled_s: float = 120) -> None:
    """Wait until both stages have committed everything produced, for as long as the backlog keeps
    shrinking: a backlog that has not shrunk for `stalled_s` fails, with what is left. Polls the
    offsets itself: the watcher has stopped with the feed."""
    best, since = None, time.monotonic()
    while True:
        app.poll(session, time.monotonic())
        if (left := app.backlog(produced)) == 0:
            return
        if left is not None and (best is None or left < best):
            best, since = left, time.monotonic()
        if time.monotonic() - since > stalled_s:
            raise TimeoutError(f"{app.name}: {left} records not committed, none for {stalled_s:.0f} s; "
                               f"pods: {pod_states(app)}; owners: {sorted(set(app.owners()))}")
        time.sleep(1)


def side_by_side(env: dict[str, str], apps: list[App], step: Step, runs: int) -> dict[str, list[dict[str, Any]]]:
    """Run the apps under the same steady load, `step(app, i, feed)` alternated between them `runs`
    times; then check every app's counts are exact. Results by app name."""
    from floe_stack import demo, localrun

    namespace = apps[0].namespace
    kubectl(env, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / "streamingapp.yaml"))
    kubectl(env, "wait", "--for=condition=Established", "--timeout=60s", "crd/streamingapps.streaming.floe.dev")
    demo.restricted_namespace(env, env["FLOE_KUBECTL"], namespace)
    op = operator(env, namespace)
    session = session_for(env)
    stop = threading.Event()
    feed = Feed(env, [app.topic_in for app in apps])

    def watch() -> None:
        while not stop.is_set():
            now = time.monotonic()
            for app in apps:
                app.poll(session, now)
            stop.wait(0.1)

    results: dict[str, list[dict[str, Any]]] = {app.name: [] for app in apps}
    feeder = threading.Thread(target=feed.run, args=(stop,), daemon=True)
    watcher = threading.Thread(target=watch, daemon=True)
    try:
        for app in apps:
            app.apply()
        feeder.start()
        watcher.start()
        for i in range(runs):
            for app in apps:
                results[app.name].append(step(app, i, feed))
                print(app.name, i, json.dumps(results[app.name][-1]), flush=True)
        stop.set()
        feeder.join()
        feed.check()
        truth = dict(feed.truth())
        for app in apps:
            drained(app, session, feed.produced)
            exact = wait(lambda app=app: localrun.read_store(session, app.keyspace, "word-count", key_serde="str",
                                                           value_serde="long") == truth,
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
        results = side_by_side(env, apps, lambda app, _i, _feed: replace_one(app, steady_s=args.steady,
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
    results = side_by_side(env, apps, lambda app, i, _feed: roll(app, i, steady_s=args.steady, window_s=args.window),
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


def bench_autoscale(env: dict[str, str], args: argparse.Namespace) -> None:
    from floe_operator import model
    from floe_operator.lag import decide, loop

    namespace = f"floe-bench-pods-{uuid.uuid4().hex[:6]}"
    autoscaling = {"mode": "Native", "minReplicas": 1, "maxReplicas": 2}
    app = App(env, namespace, name="scale-up", replicas=1, autoscaling=autoscaling, batch_records=args.batch_records)
    policy = decide.Policy.from_spec(model.AutoscalingSpec.model_validate(autoscaling))
    interval = loop.Options().interval_seconds

    def step(app: App, i: int, feed: Feed) -> dict[str, Any]:
        # alternated, `kubectl scale` first: every native run follows a surge the autoscaler measured
        return react(app, feed, native=i % 2 == 1, surge_rate=args.surge_rate, steady_s=args.steady,
                     window_s=args.window, timeout_s=args.surge_timeout)

    runs = side_by_side(env, [app], step, 2 * args.runs)[app.name]
    native = [r for r in runs if r["scaled_by"] == "native"]
    scaled = [r for r in runs if r["scaled_by"] == "kubectl_scale"]
    summary = reaction_summary(native, scaled)
    write_result("autoscale", "pod-reaction", {
        "metric": "seconds from the start of a surge of input (the first record above the steady "
        f"{STEADY_RATE:g} lines/s; the surge {args.surge_rate:g} lines/s, more than one replica works off) to the "
        "first committed batch of the pod the native autoscaler adds, word count on pods (6 input partitions, "
        "`local[1]`, batches capped at spec.kafka.maxRecordsPerBatch "
        f"{args.batch_records} so that a producer on this machine outruns one replica), spec.autoscaling "
        "{mode: Native, minReplicas: 1, maxReplicas: 2} with every other field at its default (targetUtilization "
        f"{round(policy.target_utilization * 100)}, catchUpSeconds {policy.catch_up_seconds:g}, "
        f"stabilizationWindowSeconds {policy.stabilization_seconds:g}), the operator's lag interval "
        f"{interval:g} s (its default); each run from 1 Ready replica with lag near 0; value: median of "
        f"{args.runs} native runs, baseline: `kubectl scale` to 2 at the surge's start, runs alternated; "
        "decision_s: the native runs' median from the surge to spec.replicas 2; lower is better, "
        "ratio = value / baseline (1.0: the decision costs nothing)",
        "unit": "s",
        "value": summary["value"],
        "value_max": summary["value_max"],
        "baseline": "`kubectl scale streamingapp --replicas 2` at the surge's start, otherwise the same app and "
        "surge: everything but the autoscaler's decision",
        "baseline_value": summary["baseline_value"],
        "ratio": summary["ratio"],
        "decision_s": summary["decision_s"],
        "decision_share": summary["decision_share"],
        "target": f"value <= {AUTOSCALE_TARGET_S:g} s to the first commit, decision_s <= {DECISION_TARGET_S:g} s",
        "target_met": summary["target_met"],
        "spread": summary["spread"],
        "p50_s": summary["p50_s"],
        "p99_s": summary["p99_s"],
        "latency": "p50_s/p99_s: seconds from the surge to the new pod's first commit, over the native runs",
        "phases_median_s": summary["phases_median_s"],
        "command": f".venv/bin/python tests/bench/pod_bench.py autoscale --runs {args.runs} "
        f"--surge-rate {args.surge_rate:g} --batch-records {args.batch_records}",
        "load_average_1m": load_average()[0],
        "cpu_count": os.cpu_count(),
        "runs": {"native": native, "kubectl_scale": scaled},
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("areas", nargs="*", choices=list(AREAS), default=list(AREAS))
    parser.add_argument("--runs", type=int, default=5, help="pod deletions, rollouts or surges per side (default 5)")
    parser.add_argument("--protocols", nargs="+", default=["consumer", "classic"], choices=["consumer", "classic"])
    parser.add_argument("--steady", type=float, default=10, help="seconds of steady commits before a step")
    parser.add_argument("--window", type=float, default=5, help="seconds watched after the new pods commit")
    # as test_pod_scaling's burst on this node: several times what one replica with 200-record
    # batches works off, and light enough for the producer beside it on the same two cores
    parser.add_argument("--surge-rate", type=float, default=4000, help="lines/s of an autoscale surge")
    parser.add_argument("--batch-records", type=int, default=200,
                        help="spec.kafka.maxRecordsPerBatch of the autoscale app: one replica's pace")
    parser.add_argument("--surge-timeout", type=float, default=300,
                        help="seconds a surge may take until a new pod commits")
    args = parser.parse_args(argv)
    # a stopped bench still deletes its apps (their finalizers need its operator) and namespace
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = stack_env()
    if env.get("FLOE_NODE") != "1":
        # deselected on purpose: `make up NODE=0` left the node out
        print("pod_bench: skipped, the stack runs without its node (NODE=0); `make down && make up` to bench on pods")
        return 0
    for area in args.areas:
        AREAS[area](env, args)
    return 0


AREAS = {"handover": bench_handover, "rollout": bench_rollout, "autoscale": bench_autoscale}


if __name__ == "__main__":
    sys.exit(main())
