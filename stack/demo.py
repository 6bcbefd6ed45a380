"""`make demo`: Floe end to end on the local stack's node, one progress line per step.

It brings the stack up (with its node and the images built here), installs the Helm chart
into a namespace that enforces the restricted Pod Security Standard, so that the operator runs
in-cluster as a pod with the chart's ServiceAccount and RBAC, applies the word-count
StreamingApp as three pods in another restricted namespace, waits for them to be Running and
Ready, produces sample text, and prints the top words from the output topic and from Cassandra
next to the true counts, the app's lag as the operator pod's metrics report it, and its
`READY True`.

Each run uses fresh topics and a fresh keyspace (suffixed with the run id, date and time), so
the counts it prints are this run's alone. What an earlier run leaves behind is cleared first,
because each of these made a later run count wrong words or none and hang:

- the earlier app, deleted in the foreground, so its pods are gone before the new app's start
  (else they would keep counting the old topics next to the new ones);
- the app's internal topics (`<app id>-<stage>-repartition`, `<app id>-dlq`): they are named
  after the app, not the run, and a fresh keyspace replays them from the earliest offset, so
  the earlier run's words would be counted again.

A step that does not finish in time says what was stuck (pod states and their last log lines).
The app's lag, as the operator's metrics report it, is part of the result: no lag within
LAG_SECONDS fails the demo. `floe run` (local run mode) stays for job authors; the product is
shown on pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from floe_stack import envfile, podblock, stack
from floe_stack.layout import Layout

NAMESPACE = "floe-demo"
RELEASE_NAMESPACE = "floe-system"
# the chart's own CRDs (crds/), which the demo's release takes over when tests applied them first
CRDS = ("streamingapps.streaming.floe.dev", "streamingappsnapshots.streaming.floe.dev")
APP = "word-count"
LINES = 3000
TOP = 8
REPLICAS = 3
COUNT_SECONDS = 420
READY_SECONDS = 420
LAG_SECONDS = 120
DELETE_SECONDS = 120
PROGRESS_SECONDS = 15
METRICS_PORT = 8080  # the chart's operator.metricsPort
OPERATOR_SELECTOR = "app.kubernetes.io/instance=floe"
APP_SELECTOR = f"app.kubernetes.io/instance={APP}"
RESTRICTED = "pod-security.kubernetes.io/enforce"


class DemoError(RuntimeError):
    """A step failed; the message names the step and where its log is."""


class Steps:
    """Numbered progress lines: `[ n] title … done (s)`, with notes of a long step on lines of their own."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.n = 0
        self._open = False

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.n += 1
        t = time.monotonic()
        print(f"[{self.n:>2}] {title} …", end="", flush=True)
        self._open = True
        try:
            yield
        except BaseException:
            self._end(" failed")
            raise
        self._end(f" done ({time.monotonic() - t:.1f} s)")

    def note(self, text: str) -> None:
        """A line of progress inside the current step; the step's result then gets a line of its own."""
        if self._open:
            print(flush=True)
            self._open = False
        print(f"     {text}", flush=True)

    def _end(self, result: str) -> None:
        print(result if self._open else f"[{self.n:>2}] …{result}", flush=True)
        self._open = False


def _run(argv: list[str], *, env: dict[str, str], input: str | None = None) -> str:
    proc = subprocess.run(argv, env=env, input=input, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DemoError(f"{' '.join(argv[:3])} … failed:\n{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _wait(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    log: Path | None = None,
    progress: Callable[[], None] | None = None,
    explain: Callable[[], str] | None = None,
    pods: Callable[[], Iterable[dict[str, Any]]] | None = None,
) -> None:
    """Poll `check` every second; call `progress` every PROGRESS_SECONDS; on timeout say what was
    stuck. With `pods` (the pods `check` needs running, as last read): stop as soon as one has been
    blocked for `podblock.BLOCKED_SECONDS` (unschedulable, its image missing, its container
    crash-looping), with the cluster's reason, instead of waiting out `timeout`."""
    start = time.monotonic()
    shown = start
    watch = podblock.PodWatch(blocked_seconds=podblock.BLOCKED_SECONDS, tolerate=())
    where = f"; see {log}" if log else ""
    while time.monotonic() - start < timeout:
        if check():
            return
        blocked = watch.check(pods(), time.monotonic()) if pods is not None else None
        if blocked is not None:
            why = f"\n{explain()}" if explain is not None else ""
            raise DemoError(f"{what} cannot happen: {blocked}{where}{why}")
        if progress is not None and time.monotonic() - shown >= PROGRESS_SECONDS:
            progress()
            shown = time.monotonic()
        time.sleep(1)
    why = f"\n{explain()}" if explain is not None else ""
    raise DemoError(f"{what} did not happen within {timeout:.0f} s{where}{why}")


def _repartition_topics(names: Iterable[str], app_id: str) -> list[str]:
    """The app's repartition topics among `names` (`<app id>-<stage>-repartition`, see `floe_jobs.config`)."""
    return sorted(t for t in names if t.startswith(f"{app_id}-") and t.endswith("-repartition"))


def _drop_internal_topics(bootstrap: str, app_id: str) -> list[str]:
    """Delete the app's repartition and dead-letter topics (named after the app id, see
    `floe_jobs.config`) and wait until the brokers no longer list them."""
    from confluent_kafka.admin import AdminClient
    from floe_stack import localrun

    def internal(name: str) -> bool:
        return bool(_repartition_topics([name], app_id)) or name == f"{app_id}-dlq"

    done = localrun.delete_topics(bootstrap, internal)
    failed = {t: e for t, e in done.items() if e is not None}
    if failed:
        raise DemoError(f"deleting topics failed: {failed}")
    if done:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: not [t for t in admin.list_topics(timeout=10).topics if internal(t)],
              what=f"deleting topics {', '.join(done)}", timeout=60)
    return sorted(done)


def _adopt_crd(env: dict[str, str], kubectl: str) -> None:
    """Each of Floe's CRDs applied earlier with kubectl (the operator's tests do) is handed over to
    the Helm release the way Helm documents: by its ownership label and annotations."""
    for name in CRDS:
        crd = f"crd/{name}"
        got = subprocess.run([kubectl, "get", crd, "-o", "json"], env=env, capture_output=True, text=True)
        if got.returncode != 0:
            continue
        labels = json.loads(got.stdout)["metadata"].get("labels") or {}
        if labels.get("app.kubernetes.io/managed-by") == "Helm":
            continue
        _run([kubectl, "label", "--overwrite", crd, "app.kubernetes.io/managed-by=Helm"], env=env)
        _run([kubectl, "annotate", "--overwrite", crd, "meta.helm.sh/release-name=floe",
              f"meta.helm.sh/release-namespace={RELEASE_NAMESPACE}"], env=env)


def app_body(root: Path, env: dict[str, str], *, namespace: str, topic_in: str, topic_out: str, keyspace: str,
             replicas: int = REPLICAS) -> dict[str, Any]:
    """The word-count example as it is, pointed at the job image built here, at the addresses
    pods reach Kafka and Cassandra on (the node's bridge), and at this run's topics and keyspace."""
    body: dict[str, Any] = yaml.safe_load((root / "examples" / "word-count" / "streamingapp.yaml").read_text())
    body["metadata"]["namespace"] = namespace
    spec = body["spec"]
    spec.update(image=env["FLOE_JOB_IMAGE"], imagePullPolicy="Never", replicas=replicas)
    spec["kafka"].update(bootstrapServers=env["FLOE_KAFKA_BOOTSTRAP_PODS"], topics=[topic_in], outputTopics=[topic_out])
    spec["state"]["cassandra"].update(hosts=env["FLOE_CASSANDRA_HOSTS_PODS"].split(","),
                                      port=int(env["FLOE_CASSANDRA_PORT"]), keyspace=keyspace)
    # The demo's state is disposable: the next run deletes this app, and its keyspace with it.
    spec["state"]["deletionPolicy"] = "Delete"
    return body


def restricted_namespace(env: dict[str, str], kubectl: str, name: str) -> None:
    """Create (or keep) `name`, enforcing the restricted Pod Security Standard."""
    ns = _run([kubectl, "create", "namespace", name, "--dry-run=client", "-o", "yaml"], env=env)
    _run([kubectl, "apply", "-f", "-"], env=env, input=ns)
    _run([kubectl, "label", "--overwrite", "namespace", name, f"{RESTRICTED}=restricted"], env=env)


def pods(env: dict[str, str], kubectl: str, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of `selector` that are not being deleted."""
    items: list[dict[str, Any]] = json.loads(
        _run([kubectl, "-n", namespace, "get", "pods", "-l", selector, "-o", "json"], env=env))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
    return pod.get("status", {}).get("phase") == "Running" and conditions.get("Ready") == "True"


def pod_states(items: list[dict[str, Any]]) -> str:
    """`name phase ready restarts [waiting reason]` per pod, for progress lines and failures."""
    out = []
    for pod in items:
        statuses = pod.get("status", {}).get("containerStatuses") or []
        restarts = sum(s.get("restartCount", 0) for s in statuses)
        waiting = [s["state"]["waiting"].get("reason", "") for s in statuses if "waiting" in s.get("state", {})]
        why = f" {','.join(waiting)}" if waiting else ""
        ready = "Ready" if is_ready(pod) else "not Ready"
        out.append(f"{pod['metadata']['name']} {pod['status'].get('phase')} {ready}, {restarts} restarts{why}")
    return "; ".join(out) or "no pods"


def metric_sum(url: str, name: str, labels: dict[str, str]) -> float | None:
    """The sum of the series `name{labels…}` at a /metrics `url`; None when there is none (or no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())]
    return sum(values) if values else None


@dataclass(frozen=True)
class Run:
    """One run of the demo: the stack's settings and this run's names."""

    root: Path
    env: dict[str, str]
    run_id: str

    @property
    def kubectl(self) -> str:
        return self.env["FLOE_KUBECTL"]

    @property
    def bootstrap(self) -> str:
        return self.env["FLOE_KAFKA_BOOTSTRAP"]

    @property
    def topic_in(self) -> str:
        return f"word-count-input-{self.run_id}"

    @property
    def topic_out(self) -> str:
        return f"word-count-output-{self.run_id}"

    @property
    def keyspace(self) -> str:
        return f"word_count_demo_{self.run_id}"

    def app_body(self) -> dict[str, Any]:
        return app_body(self.root, self.env, namespace=NAMESPACE, topic_in=self.topic_in, topic_out=self.topic_out,
                        keyspace=self.keyspace)


def main() -> int:
    from floe_operator import model

    layout = Layout.discover()
    steps = Steps()
    try:
        with steps.step("Starting the local stack (Kafka, Cassandra, Kubernetes with its node, images, Helm)"):
            if not stack.all_running(layout) or not layout.env_file.exists():
                stack.up(layout, say=lambda _m: None)
            env = dict(os.environ, **envfile.read(layout.env_file))
            if env.get("FLOE_NODE") != "1":
                raise DemoError("the stack runs without its node (FLOE_NODE=0), so no pod can run: "
                                "run `make down`, then `make demo` without NODE=0")
        run = Run(root=layout.root, env=env, run_id=time.strftime("%y%m%d%H%M%S"))
        body = run.app_body()
        app_id = model.StreamingApp.from_body(body).app_id
        metrics_url = _install_operator(steps, run)
        _apply_app(steps, run, body, app_id)
        _count_words(steps, run, app_id)
        _check_lag_and_ready(steps, run, metrics_url)
    except DemoError as exc:
        print(f"floe demo: {exc}", file=sys.stderr)
        return 1
    print(f"floe demo: finished in {time.monotonic() - steps.t0:.0f} s; the app and the stack are still up "
          "(make down stops them)")
    print("try next:")
    print(f"  source .floe/stack.env && $FLOE_KUBECTL -n {NAMESPACE} get pods -w   # in one shell, then in another:")
    print(f"  $FLOE_KUBECTL -n {NAMESPACE} delete pod <one of them>   # the Deployment replaces it; counts stay exact")
    print(f"  $FLOE_KUBECTL -n {NAMESPACE} scale streamingapp {APP} --replicas 6")
    print("  make bench    # handover, throughput and store benchmarks (bench/results/)")
    print("  make test     # every test against this stack")
    return 0


def _install_operator(steps: Steps, run: Run) -> str:
    """Restricted namespaces, the chart with the operator as a pod; the operator pod's metrics URL."""
    env, kubectl = run.env, run.kubectl
    with steps.step(f"Namespaces {RELEASE_NAMESPACE} and {NAMESPACE}, enforcing the restricted Pod Security "
                    "Standard"):
        for name in (RELEASE_NAMESPACE, NAMESPACE):
            restricted_namespace(env, kubectl, name)

    repository, tag = env["FLOE_OPERATOR_IMAGE"].rsplit(":", 1)
    with steps.step(f"Installing the Helm chart: CRD, least-privilege RBAC and the operator as a pod "
                    f"({env['FLOE_OPERATOR_IMAGE']})"):
        _adopt_crd(env, kubectl)
        _run([env["FLOE_HELM"], "upgrade", "--install", "floe", str(run.root / "charts" / "floe"), "-n",
              RELEASE_NAMESPACE, "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
              "--set", "image.pullPolicy=Never", "--set", f"operator.watchNamespaces={{{NAMESPACE}}}",
              "--set", "operator.lagIntervalSeconds=5", "--wait", "--timeout=5m"], env=env)
        _run([kubectl, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev",
              "--timeout=60s"], env=env)
        operator_pods: list[dict[str, Any]] = []

        def operator_ready() -> bool:
            nonlocal operator_pods
            operator_pods = pods(env, kubectl, RELEASE_NAMESPACE, OPERATOR_SELECTOR)
            return len(operator_pods) == 1 and is_ready(operator_pods[0])

        _wait(operator_ready, what="one Ready operator pod", timeout=180,
              explain=lambda: f"     {pod_states(operator_pods)}", pods=lambda: operator_pods)
        operator_pod = operator_pods[0]
    steps.note(f"operator pod {operator_pod['metadata']['name']} at {operator_pod['status']['podIP']}")
    return f"http://{operator_pod['status']['podIP']}:{METRICS_PORT}/metrics"


def _apply_app(steps: Steps, run: Run, body: dict[str, Any], app_id: str) -> None:
    """Clear what an earlier run left, create this run's topics, apply the app, wait for its pods."""
    from floe_stack import localrun

    env, kubectl = run.env, run.kubectl
    with steps.step("Deleting the earlier run's app (its pods and keyspace) and the app's internal topics"):
        # Foreground: the app goes only after its Deployment, so no earlier pod still counts the
        # earlier run's topics into a keyspace of its own. Its finalizer needs the operator.
        _run([kubectl, "-n", NAMESPACE, "delete", "streamingapp", APP, "--ignore-not-found", "--wait=false",
              "--cascade=foreground"], env=env)
        left = _unfinalized(env, kubectl, timeout=DELETE_SECONDS)
        if left:
            steps.note(left)
        dropped = _drop_internal_topics(run.bootstrap, app_id)
        if dropped:
            steps.note(f"deleted topics {', '.join(dropped)}")

    with steps.step(f"Creating topics {run.topic_in} (6 partitions) and {run.topic_out}"):
        localrun.create_topic(run.bootstrap, run.topic_in, 6)
        localrun.create_topic(run.bootstrap, run.topic_out, 6)

    with steps.step(f"Applying the word-count StreamingApp in namespace {NAMESPACE} ({REPLICAS} replicas, "
                    f"{env['FLOE_JOB_IMAGE']})"):
        _run([kubectl, "apply", "-f", "-"], env=env, input=yaml.safe_dump(body))

    app_pods: list[dict[str, Any]] = []

    def app_ready() -> bool:
        nonlocal app_pods
        app_pods = pods(env, kubectl, NAMESPACE, APP_SELECTOR)
        return len(app_pods) == REPLICAS and all(is_ready(p) for p in app_pods)

    with steps.step(f"Waiting for {REPLICAS} pods Running and Ready (Spark starts, each replica joins the group)"):
        _wait(app_ready, what=f"{REPLICAS} Ready pods of {APP}", timeout=READY_SECONDS,
              progress=lambda: steps.note(pod_states(app_pods)),
              explain=lambda: f"     {pod_states(app_pods)}\n{_pod_logs(env, kubectl, app_pods)}",
              pods=lambda: app_pods)
    print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps,deployments,pods", "-o", "wide"],
                       env=env)))


def _count_words(steps: Steps, run: Run, app_id: str) -> None:
    """Produce sample text, wait for its counts in Cassandra and in the output topic, and print the
    top words next to the truth."""
    from floe_stack import localrun

    env, bootstrap = run.env, run.bootstrap
    lines = localrun.word_lines(LINES, seed=int(run.run_id))
    truth = localrun.word_truth(lines)
    with steps.step(f"Producing {LINES} lines of sample text ({sum(truth.values())} words) to {run.topic_in}"):
        localrun.produce(bootstrap, run.topic_in, lines)

    with steps.step("Waiting until every word is counted (batches read, counted and committed by the pods)"):
        from cassandra.cluster import Cluster

        cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
        session = cluster.connect()
        counting = Counting(session, bootstrap, keyspace=run.keyspace, app_id=app_id, topic_in=run.topic_in)

        def progress() -> None:
            counted = sum(counting.store().values())
            steps.note(f"{counted} of {sum(truth.values())} words counted; {counting.partitions_summary()}")

        def explain() -> str:
            now = pods(env, run.kubectl, NAMESPACE, APP_SELECTOR)
            return f"{counting.stuck()}\n     {pod_states(now)}\n{_pod_logs(env, run.kubectl, now)}"

        try:
            _wait(lambda: counting.store() == dict(truth), what="the counts in Cassandra to match the text",
                  timeout=COUNT_SECONDS, progress=progress, explain=explain)
            from_cassandra = counting.store()
        finally:
            cluster.shutdown()

    from_topic: dict[str, int] = {}

    def topic_matches() -> bool:
        nonlocal from_topic
        output = localrun.last_values(localrun.read_topic(bootstrap, run.topic_out, timeout=10))
        from_topic = {k: int(v) for k, v in output.items()}
        return from_topic == dict(truth)

    with steps.step(f"Reading the latest count of every word from {run.topic_out}"):
        _wait(topic_matches, what="the output topic to carry every final count", timeout=120,
              explain=lambda: f"     {len(from_topic)} words in the topic, {len(truth)} in the text")
    top = truth.most_common(TOP)
    print(f"     {'word':<12}{'true count':>11}{'output topic':>14}{'Cassandra':>11}")
    for word, count in top:
        print(f"     {word:<12}{count:>11}{from_topic.get(word, 0):>14}{from_cassandra.get(word, 0):>11}")
    exact = from_cassandra == dict(truth) and from_topic == dict(truth)
    print(f"     {len(truth)} distinct words; Cassandra and the output topic match the text exactly: {exact}")
    if not exact:
        raise DemoError("the counts did not match the produced text")


def _check_lag_and_ready(steps: Steps, run: Run, metrics_url: str) -> None:
    """The app's lag, as the operator pod's metrics report it, falls to 0, and the app is Ready."""
    env, kubectl = run.env, run.kubectl
    labels = {"namespace": NAMESPACE, "app": APP, "topic": run.topic_in}

    def lag_explain() -> str:
        seen = metric_sum(metrics_url, "floe_consumergroup_lag", labels)
        return (f"     the operator has not reported lag for {APP} at {metrics_url}" if seen is None
                else f"     the lag the operator reports stayed at {seen:.0f} records")

    with steps.step(f"Reading the app's lag from the operator pod's metrics (at most {LAG_SECONDS} s)"):
        _wait(lambda: metric_sum(metrics_url, "floe_consumergroup_lag", labels) == 0.0,
              what="lag 0 in the operator's metrics", timeout=LAG_SECONDS, explain=lag_explain)
    lag_s = metric_sum(metrics_url, "floe_consumergroup_lag_seconds", labels)
    print(f"     floe_consumergroup_lag{{app=\"{APP}\",topic=\"{run.topic_in}\"}} summed over partitions = "
          f"0 records, time lag {lag_s or 0:.1f} s")

    def app_condition_ready() -> bool:
        got = _run([kubectl, "-n", NAMESPACE, "get", "streamingapp", APP, "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}"], env=env)
        return got.strip() == "True"

    with steps.step("Waiting for the StreamingApp's Ready condition"):
        _wait(app_condition_ready, what=f"READY True on streamingapp {APP}", timeout=120)
    print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps"], env=env)))


def _unfinalized(env: dict[str, str], kubectl: str, *, timeout: float) -> str | None:
    """Wait for the earlier app to be gone. One whose finalizer keeps failing (its Cassandra is not
    reachable from the operator's pod: an app of a demo that ran before the stack had its node
    pointed at loopback) is let go by removing the finalizer, and the note says what was left behind."""
    def gone() -> bool:
        got = subprocess.run([kubectl, "-n", NAMESPACE, "get", "streamingapp", APP, "-o", "name"], env=env,
                             capture_output=True, text=True)
        return got.returncode != 0 and "NotFound" in got.stderr

    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if gone():
            return None
        time.sleep(1)
    app = json.loads(_run([kubectl, "-n", NAMESPACE, "get", "streamingapp", APP, "-o", "json"], env=env))
    progress = json.loads(app["metadata"].get("annotations", {}).get("streaming.floe.dev/finalize", "{}") or "{}")
    keyspace = app["spec"]["state"]["cassandra"]["keyspace"]
    _run([kubectl, "-n", NAMESPACE, "patch", "streamingapp", APP, "--type=merge", "-p",
          '{"metadata":{"finalizers":null}}'], env=env)
    _wait(gone, what=f"the earlier {APP} to be deleted", timeout=60)
    return (f"the earlier app could not be finalized within {timeout:.0f} s "
            f"({progress.get('message', 'no message')}); its finalizer was removed and keyspace {keyspace} "
            "was left behind")


def _pod_logs(env: dict[str, str], kubectl: str, items: list[dict[str, Any]], lines: int = 15) -> str:
    """The last lines of each pod's log (and of its previous container, if it restarted)."""
    out = []
    for pod in items:
        name = pod["metadata"]["name"]
        for previous in ("--previous=false", "--previous=true"):
            proc = subprocess.run([kubectl, "-n", pod["metadata"]["namespace"], "logs", name, previous,
                                   f"--tail={lines}"], env=env, capture_output=True, text=True)
            if proc.returncode == 0 and proc.stdout.strip():
                which = "previous container" if previous.endswith("true") else "log"
                out.append(f"     {which} of {name}:\n" + "\n".join("       | " + line
                                                                   for line in proc.stdout.splitlines()))
    return "\n".join(out)


class Counting:
    """What the counting step reads: the store, and how far each partition's offsets have come."""

    def __init__(self, session: Any, bootstrap: str, *, keyspace: str, app_id: str, topic_in: str) -> None:
        self.session = session
        self.bootstrap = bootstrap
        self.keyspace = keyspace
        self.app_id = app_id
        self.topic_in = topic_in

    def store(self) -> dict[Any, Any]:
        from floe_stack import localrun

        try:
            return localrun.read_store(self.session, self.keyspace, "word-count", key_serde="str", value_serde="long")
        except Exception:  # keyspace or table not created yet
            return {}

    def _behind(self) -> dict[str, list[str]]:
        """Topic → its partitions not yet processed to their end ("p: next/end" or "p: no processed offsets")."""
        from confluent_kafka.admin import AdminClient
        from floe_jobs import offsets
        from floe_stack import localrun

        names = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=10).topics
        topics = [self.topic_in, *_repartition_topics(names, self.app_id)]
        try:
            rows = offsets.progress(self.session, keyspace=self.keyspace, app_id=self.app_id)
        except Exception:  # the keyspace is not there yet
            rows = {}
        out: dict[str, list[str]] = {}
        for topic in topics:
            ends = sorted(localrun.end_offsets(self.bootstrap, topic).items())
            out[topic] = [f"{p}: no processed offsets" if (topic, p) not in rows else f"{p}: {rows[topic, p][0]}/{end}"
                          for p, end in ends if end > 0 and ((topic, p) not in rows or rows[topic, p][0] < end)]
        return out

    def partitions_summary(self) -> str:
        return "; ".join(f"{topic}: {len(late)} partitions behind" for topic, late in self._behind().items())

    def stuck(self) -> str:
        late = {topic: parts for topic, parts in self._behind().items() if parts}
        if not late:
            return "     every partition is processed to its end"
        return "\n".join(f"     {topic} partitions behind: {', '.join(parts)}" for topic, parts in late.items())


def _indent(text: str) -> str:
    return "\n".join("     " + line for line in text.rstrip().splitlines())


if __name__ == "__main__":
    sys.exit(main())
