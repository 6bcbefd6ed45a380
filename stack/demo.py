"""`make demo`: Floe end to end on the local stack, one progress line per step.

It brings the stack up, installs the Helm chart (CRD and RBAC), runs the operator on this
machine as the chart's ServiceAccount, applies the word-count StreamingApp, runs the replicas
of the Deployment the operator rendered in local run mode (the stack has no kubelet), produces
sample text, and prints the top words from the output topic and from Cassandra next to the
true counts, and the app's lag as the operator's metrics report it.

Each run uses fresh topics and a fresh keyspace (suffixed with the run id, date and time), so
the counts it prints are this run's alone. What an earlier run leaves behind is cleared first,
because each of these made a later run count wrong words or none and hang:

- processes of an earlier run that was killed before it could stop them (operator, replicas);
- the earlier app, deleted in the foreground, so its Deployment and ConfigMap are gone before
  the new app's are rendered (else `floe run` could start replicas from the old Deployment,
  reading the old topics);
- the app's internal topics (`<app id>-<stage>-repartition`, `<app id>-dlq`): they are named
  after the app, not the run, and a fresh keyspace replays them from the earliest offset, so
  the earlier run's words would be counted again.

A step that does not finish in time says what was stuck. The app's lag, as the operator's
metrics report it, is part of the result: no lag within LAG_SECONDS fails the demo.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from floe_stack import envfile, ports, stack
from floe_stack.layout import Layout

NAMESPACE = "floe-demo"
RELEASE_NAMESPACE = "floe-system"
APP = "word-count"
LINES = 3000
TOP = 8
COUNT_SECONDS = 420
LAG_SECONDS = 120
PROGRESS_SECONDS = 15


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
) -> None:
    """Poll `check` every second; call `progress` every PROGRESS_SECONDS; on timeout say what was stuck."""
    start = time.monotonic()
    shown = start
    while time.monotonic() - start < timeout:
        if check():
            return
        if progress is not None and time.monotonic() - shown >= PROGRESS_SECONDS:
            progress()
            shown = time.monotonic()
        time.sleep(1)
    where = f"; see {log}" if log else ""
    why = f"\n{explain()}" if explain is not None else ""
    raise DemoError(f"{what} did not happen within {timeout:.0f} s{where}{why}")


def _tail(path: Path, since: int, lines: int = 20) -> str:
    """The last lines `path` got since byte offset `since` (the logs are appended to by every run)."""
    with open(path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return "\n".join("       | " + line for line in text.splitlines()[-lines:])


class Leftovers:
    """Process groups this demo started, recorded so that a later run can stop them if this one
    was killed before it could (a SIGKILLed demo leaves its operator and replicas running, and
    they would keep reconciling and consuming next to the new ones)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, children: list[subprocess.Popen[bytes]]) -> None:
        self.path.write_text(json.dumps([c.pid for c in children]))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def stop(self) -> list[int]:
        """SIGTERM the recorded groups still running a Floe command, SIGKILL after 60 s; the pids stopped."""
        pids = json.loads(self.path.read_text()) if self.path.exists() else []
        alive = [pid for pid in pids if _runs_floe(pid)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        for pid in alive:
            while _group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            if _group_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self.clear()
        return alive


def _runs_floe(pid: int) -> bool:
    """The pid still belongs to a Floe command (pids are reused)."""
    try:
        return b"floe" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _repartition_topics(names: Iterable[str], app_id: str) -> list[str]:
    """The app's repartition topics among `names` (`<app id>-<stage>-repartition`, see `floe_jobs.config`)."""
    return sorted(t for t in names if t.startswith(f"{app_id}-") and t.endswith("-repartition"))


def _drop_internal_topics(bootstrap: str, app_id: str) -> list[str]:
    """Delete the app's repartition and dead-letter topics (named after the app id, see
    `floe_jobs.config`) and wait until the brokers no longer list them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def internal() -> list[str]:
        names = admin.list_topics(timeout=10).topics
        return _repartition_topics(names, app_id) + [t for t in names if t == f"{app_id}-dlq"]

    found = internal()
    if found:
        for fut in admin.delete_topics(found, operation_timeout=30).values():
            fut.result()
        _wait(lambda: not internal(), what=f"deleting topics {', '.join(found)}", timeout=60)
    return found


def _adopt_crd(env: dict[str, str], kubectl: str) -> None:
    """A CRD applied earlier with kubectl (the operator's tests do) is handed over to the Helm
    release the way Helm documents: by its ownership label and annotations."""
    crd = "crd/streamingapps.streaming.floe.dev"
    got = subprocess.run([kubectl, "get", crd, "-o", "json"], env=env, capture_output=True, text=True)
    if got.returncode != 0:
        return
    labels = json.loads(got.stdout)["metadata"].get("labels") or {}
    if labels.get("app.kubernetes.io/managed-by") == "Helm":
        return
    _run([kubectl, "label", "--overwrite", crd, "app.kubernetes.io/managed-by=Helm"], env=env)
    _run([kubectl, "annotate", "--overwrite", crd, "meta.helm.sh/release-name=floe",
          f"meta.helm.sh/release-namespace={RELEASE_NAMESPACE}"], env=env)


def token_kubeconfig(env: dict[str, str], kubectl: str, path: Path, *, namespace: str, account: str) -> Path:
    """A kubeconfig that authenticates as ServiceAccount `namespace/account`, so a process runs with
    exactly the RBAC granted to it (the demo's operator: what the chart grants)."""
    token = _run([kubectl, "-n", namespace, "create", "token", account, "--duration=2h"], env=env).strip()
    admin = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "floe-operator", "user": {"token": token}}],
        "contexts": [{"name": "floe", "context": {"cluster": cluster["name"], "user": "floe-operator"}}],
        "current-context": "floe",
    }))
    path.chmod(0o600)
    return path


def _metric_sum(port: int, name: str, labels: dict[str, str]) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def main() -> int:
    from floe_jobs import localrun
    from floe_operator import model

    layout = Layout.discover()
    root = layout.root
    bin_dir = Path(sys.executable).parent
    steps = Steps()
    run_id = time.strftime("%y%m%d%H%M%S")
    logs = layout.run / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    leftovers = Leftovers(layout.run / "demo-children.json")

    try:
        with steps.step("Starting the local stack (Kafka, Cassandra, Kubernetes, Helm, Spark connector)"):
            if not stack.all_running(layout) or not layout.env_file.exists():
                stack.up(layout, say=lambda _m: None)
            env = dict(os.environ, **envfile.read(layout.env_file))
        kubectl, helm = env["FLOE_KUBECTL"], env["FLOE_HELM"]
        bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
        topic_in, topic_out = f"word-count-input-{run_id}", f"word-count-output-{run_id}"
        keyspace = f"word_count_demo_{run_id}"
        body = _app_body(root, env, topic_in=topic_in, topic_out=topic_out, keyspace=keyspace)
        app_id = model.StreamingApp.from_body(body).app_id

        with steps.step("Stopping what an earlier run left running (operator, replicas)"):
            stopped = leftovers.stop()
            if stopped:
                steps.note(f"stopped process groups {stopped} of an earlier run that was killed before it could")

        with steps.step("Installing the Helm chart: CRD, ServiceAccount and least-privilege RBAC"):
            _adopt_crd(env, kubectl)
            ns = _run([kubectl, "create", "namespace", NAMESPACE, "--dry-run=client", "-o", "yaml"], env=env)
            _run([kubectl, "apply", "-f", "-"], env=env, input=ns)
            _run([helm, "upgrade", "--install", "floe", str(root / "charts" / "floe"), "-n", RELEASE_NAMESPACE,
                  "--create-namespace", "--set", "replicaCount=0", "--set", f"operator.watchNamespaces={{{NAMESPACE}}}",
                  "--wait"], env=env)
            _run([kubectl, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev",
                  "--timeout=60s"], env=env)

        op_log = logs / "demo-operator.log"
        op_since = op_log.stat().st_size if op_log.exists() else 0
        metrics_port = ports.free_port()
        with steps.step(f"Running the operator on this machine as ServiceAccount {RELEASE_NAMESPACE}/floe "
                        f"(metrics :{metrics_port})"):
            op_env = dict(env, KUBECONFIG=str(token_kubeconfig(env, kubectl, layout.run / "demo-operator.kubeconfig",
                                                            namespace=RELEASE_NAMESPACE, account="floe")),
                          FLOE_LAG_INTERVAL_SECONDS="5")
            with open(op_log, "ab") as out:
                children.append(subprocess.Popen(
                    [str(bin_dir / "floe-operator"), "--namespace", NAMESPACE, "--metrics-port", str(metrics_port),
                     "--liveness-port", str(ports.free_port())],
                    env=op_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            leftovers.record(children)
            _wait(lambda: ports.accepts(metrics_port), what="the operator's metrics endpoint", timeout=60, log=op_log)
        operator = children[0]

        with steps.step("Deleting the earlier run's app, its Deployment and the app's internal topics"):
            # Foreground: the app goes only after its Deployment and ConfigMap (blockOwnerDeletion),
            # so `floe run` below cannot read the earlier run's Deployment. Its finalizer needs the operator.
            _run([kubectl, "-n", NAMESPACE, "delete", "streamingapp", APP, "--ignore-not-found", "--wait=true",
                  "--cascade=foreground", "--timeout=120s"], env=env)
            dropped = _drop_internal_topics(bootstrap, app_id)
            if dropped:
                steps.note(f"deleted topics {', '.join(dropped)}")

        with steps.step(f"Creating topics {topic_in} (6 partitions) and {topic_out}"):
            localrun.create_topic(bootstrap, topic_in, 6)
            localrun.create_topic(bootstrap, topic_out, 6)

        with steps.step(f"Applying the word-count StreamingApp in namespace {NAMESPACE}"):
            _run([kubectl, "apply", "-f", "-"], env=env, input=yaml.safe_dump(body))
            app_uid = _run([kubectl, "-n", NAMESPACE, "get", "streamingapp", APP, "-o", "jsonpath={.metadata.uid}"],
                           env=env).strip()

        with steps.step("Waiting for the operator: Cassandra tables provisioned, Deployment rendered"):
            _wait(lambda: _rendered_for(env, kubectl, app_uid), what="the Deployment of this run's app", timeout=90,
                  log=op_log, explain=lambda: _operator_state(operator, op_log, op_since))
        print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps,deployments,configmaps,services,pdb"],
                           env=env)))

        run_log = logs / "demo-replicas.log"
        run_since = run_log.stat().st_size if run_log.exists() else 0
        title = f"Running the Deployment's 2 replicas in local run mode (floe run; log {run_log})"
        with steps.step(title), open(run_log, "ab") as out:
            children.append(subprocess.Popen(
                [str(bin_dir / "floe"), "run", "--deployment", f"{NAMESPACE}/{APP}"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root, start_new_session=True))
            leftovers.record(children)
        replicas = children[1]

        lines = localrun.word_lines(LINES, seed=int(run_id))
        truth = localrun.word_truth(lines)
        with steps.step(f"Producing {LINES} lines of sample text ({sum(truth.values())} words) to {topic_in}"):
            localrun.produce(bootstrap, topic_in, lines)

        with steps.step("Waiting until every word is counted (Spark starts, groups form, batches commit)"):
            from cassandra.cluster import Cluster

            cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
            session = cluster.connect()
            counting = Counting(session, bootstrap, keyspace=keyspace, app_id=app_id, topic_in=topic_in)

            def progress() -> None:
                counted = sum(counting.store().values())
                steps.note(f"{counted} of {sum(truth.values())} words counted; {counting.partitions_summary()}")

            def explain() -> str:
                return (f"{counting.stuck()}\n{_replicas_state(replicas, run_log, run_since)}\n"
                        f"     last lines of {run_log}:\n{_tail(run_log, run_since)}")

            try:
                _wait(lambda: counting.store() == dict(truth), what="the counts in Cassandra to match the text",
                      timeout=COUNT_SECONDS, log=run_log, progress=progress, explain=explain)
                from_cassandra = counting.store()
            finally:
                cluster.shutdown()

        from_topic: dict[str, int] = {}

        def topic_matches() -> bool:
            nonlocal from_topic
            output = localrun.last_values(localrun.read_topic(bootstrap, topic_out, timeout=10))
            from_topic = {k: int(v) for k, v in output.items()}
            return from_topic == dict(truth)

        with steps.step(f"Reading the latest count of every word from {topic_out}"):
            _wait(topic_matches, what="the output topic to carry every final count", timeout=120, log=run_log,
                  explain=lambda: f"     {len(from_topic)} words in the topic, {len(truth)} in the text")
        top = truth.most_common(TOP)
        print(f"     {'word':<12}{'true count':>11}{'output topic':>14}{'Cassandra':>11}")
        for word, count in top:
            print(f"     {word:<12}{count:>11}{from_topic.get(word, 0):>14}{from_cassandra.get(word, 0):>11}")
        exact = from_cassandra == dict(truth) and from_topic == dict(truth)
        print(f"     {len(truth)} distinct words; Cassandra and the output topic match the text exactly: {exact}")
        if not exact:
            raise DemoError("the counts did not match the produced text")

        labels = {"namespace": NAMESPACE, "app": APP, "topic": topic_in}

        def lag() -> float | None:
            return _metric_sum(metrics_port, "floe_consumergroup_lag", labels)

        def lag_explain() -> str:
            seen = lag()
            state = (f"     the operator has not reported lag for {APP}" if seen is None
                     else f"     the lag the operator reports stayed at {seen:.0f} records")
            return f"{state}\n{_operator_state(operator, op_log, op_since)}"

        with steps.step(f"Reading the app's lag from the operator's metrics (at most {LAG_SECONDS} s)"):
            _wait(lambda: lag() == 0.0, what="lag 0 in the operator's metrics", timeout=LAG_SECONDS, log=op_log,
                  explain=lag_explain)
        lag_s = _metric_sum(metrics_port, "floe_consumergroup_lag_seconds", labels)
        print(f"     floe_consumergroup_lag{{app=\"{APP}\",topic=\"{topic_in}\"}} summed over partitions = "
              f"0 records, time lag {lag_s or 0:.1f} s")
        print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps"], env=env)))
    except DemoError as exc:
        print(f"floe demo: {exc}", file=sys.stderr)
        return 1
    finally:
        for child in reversed(children):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        for child in reversed(children):
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
        leftovers.clear()
    print(f"floe demo: finished in {time.monotonic() - steps.t0:.0f} s; the stack is still up (make down stops it)")
    print("try next:")
    print(f"  source .floe/stack.env && $FLOE_KUBECTL -n {NAMESPACE} describe streamingapp {APP}")
    print(f"  floe run --deployment {NAMESPACE}/{APP} --replicas 3   # run the replicas again, then kill one")
    print("  make bench    # handover, throughput and store benchmarks (bench/results/)")
    print("  make test     # every test against this stack")
    return 0


def _app_body(root: Path, env: dict[str, str], *, topic_in: str, topic_out: str, keyspace: str) -> dict[str, Any]:
    """The word-count example pointed at the local stack and at this run's topics and keyspace."""
    body: dict[str, Any] = yaml.safe_load((root / "examples" / "word-count" / "streamingapp.yaml").read_text())
    body["metadata"]["namespace"] = NAMESPACE
    spec = body["spec"]
    spec["replicas"] = 2
    spec["kafka"].update(bootstrapServers=env["FLOE_KAFKA_BOOTSTRAP"], topics=[topic_in], outputTopics=[topic_out])
    spec["state"]["cassandra"].update(hosts=env["FLOE_CASSANDRA_HOSTS"].split(","),
                                      port=int(env["FLOE_CASSANDRA_PORT"]), keyspace=keyspace)
    # The demo's state is disposable: the next run deletes this app, and its keyspace with it.
    spec["state"]["deletionPolicy"] = "Delete"
    return body


def _rendered_for(env: dict[str, str], kubectl: str, app_uid: str) -> bool:
    """The Deployment exists, is owned by this run's app (not an earlier one) and carries its config."""
    out = subprocess.run([kubectl, "-n", NAMESPACE, "get", "deployment", APP, "-o", "json"], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return False
    dep = json.loads(out.stdout)
    owners = {ref.get("uid") for ref in dep["metadata"].get("ownerReferences") or []}
    container = dep["spec"]["template"]["spec"]["containers"][0]
    return app_uid in owners and any(e.get("name") == "FLOE_CONFIG" for e in container.get("env", []))


def _operator_state(operator: subprocess.Popen[bytes], log: Path, since: int) -> str:
    code = operator.poll()
    state = "the operator is running" if code is None else f"the operator exited with code {code}"
    return f"     {state}; last lines of {log}:\n{_tail(log, since)}"


def _replicas_state(replicas: subprocess.Popen[bytes], log: Path, since: int) -> str:
    """Which replicas exited (floe run restarts them, and says so in its log)."""
    code = replicas.poll()
    with open(log, "rb") as f:
        f.seek(since)
        exits = [line for line in f.read().decode(errors="replace").splitlines()
                 if line.startswith("floe run:") and " exited " in line]
    state = "floe run is running" if code is None else f"floe run exited with code {code}"
    died = "; ".join(exits[-6:]) if exits else "no replica exited"
    return f"     {state}; {died}"


class Counting:
    """What the counting step reads: the store, and how far each partition's offsets have come."""

    def __init__(self, session: Any, bootstrap: str, *, keyspace: str, app_id: str, topic_in: str) -> None:
        self.session = session
        self.bootstrap = bootstrap
        self.keyspace = keyspace
        self.app_id = app_id
        self.topic_in = topic_in

    def store(self) -> dict[Any, Any]:
        from floe_jobs import localrun

        try:
            return localrun.read_store(self.session, self.keyspace, "word-count", key_serde="str", value_serde="long")
        except Exception:  # keyspace or table not created yet
            return {}

    def _behind(self) -> dict[str, list[str]]:
        """Topic → its partitions not yet processed to their end ("p: next/end" or "p: no processed offsets")."""
        from confluent_kafka.admin import AdminClient
        from floe_jobs import localrun, offsets

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
