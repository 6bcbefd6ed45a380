"""`make demo`: Floe end to end on the local stack, one progress line per step.

It brings the stack up, installs the Helm chart (CRD and RBAC), runs the operator on this
machine as the chart's ServiceAccount, applies the word-count StreamingApp, runs the replicas
of the Deployment the operator rendered in local run mode (the stack has no kubelet), produces
sample text, and prints the top words from the output topic and from Cassandra next to the
true counts, and the app's lag as the operator's metrics report it.

Each run uses fresh topics and a fresh keyspace (suffixed with the run id), so the counts it
prints are this run's alone; the previous run's app is deleted first (deletionPolicy Delete
drops its keyspace).
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
from collections.abc import Callable, Iterator
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


class DemoError(RuntimeError):
    """A step failed; the message names the step and where its log is."""


class Steps:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.n = 0

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.n += 1
        t = time.monotonic()
        print(f"[{self.n:>2}] {title} …", end="", flush=True)
        try:
            yield
        except BaseException:
            print(" failed", flush=True)
            raise
        print(f" done ({time.monotonic() - t:.1f} s)", flush=True)


def _run(argv: list[str], *, env: dict[str, str], input: str | None = None) -> str:
    proc = subprocess.run(argv, env=env, input=input, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DemoError(f"{' '.join(argv[:3])} … failed:\n{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _wait(check: Callable[[], bool], *, what: str, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    where = f"; see {log}" if log else ""
    raise DemoError(f"{what} did not happen within {timeout:.0f} s{where}")


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


def _token_kubeconfig(env: dict[str, str], kubectl: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the chart's ServiceAccount, so the operator runs with
    exactly the RBAC the chart grants."""
    token = _run([kubectl, "-n", RELEASE_NAMESPACE, "create", "token", "floe", "--duration=2h"], env=env).strip()
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

    layout = Layout.discover()
    root = layout.root
    bin_dir = Path(sys.executable).parent
    steps = Steps()
    run_id = time.strftime("%H%M%S")
    logs = layout.run / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []

    try:
        with steps.step("Starting the local stack (Kafka, Cassandra, Kubernetes, Helm, Spark connector)"):
            if not stack.all_running(layout) or not layout.env_file.exists():
                stack.up(layout, say=lambda _m: None)
            env = dict(os.environ, **envfile.read(layout.env_file))
        kubectl, helm = env["FLOE_KUBECTL"], env["FLOE_HELM"]
        bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]

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
        metrics_port = ports.free_port()
        with steps.step(f"Running the operator on this machine as ServiceAccount {RELEASE_NAMESPACE}/floe "
                        f"(metrics :{metrics_port})"):
            op_env = dict(env, KUBECONFIG=str(_token_kubeconfig(env, kubectl, layout.run / "demo-operator.kubeconfig")),
                          FLOE_LAG_INTERVAL_SECONDS="5")
            with open(op_log, "ab") as out:
                children.append(subprocess.Popen(
                    [str(bin_dir / "floe-operator"), "--namespace", NAMESPACE, "--metrics-port", str(metrics_port),
                     "--liveness-port", str(ports.free_port())],
                    env=op_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            _wait(lambda: ports.accepts(metrics_port), what="the operator's metrics endpoint", timeout=60, log=op_log)

        topic_in, topic_out = f"word-count-input-{run_id}", f"word-count-output-{run_id}"
        keyspace = f"word_count_demo_{run_id}"
        with steps.step(f"Creating topics {topic_in} (6 partitions) and {topic_out}"):
            localrun.create_topic(bootstrap, topic_in, 6)
            localrun.create_topic(bootstrap, topic_out, 6)

        with steps.step(f"Applying the word-count StreamingApp in namespace {NAMESPACE}"):
            body = yaml.safe_load((root / "examples" / "word-count" / "streamingapp.yaml").read_text())
            body["metadata"]["namespace"] = NAMESPACE
            spec = body["spec"]
            spec["replicas"] = 2
            spec["kafka"].update(bootstrapServers=bootstrap, topics=[topic_in], outputTopics=[topic_out])
            spec["state"]["cassandra"].update(hosts=env["FLOE_CASSANDRA_HOSTS"].split(","),
                                              port=int(env["FLOE_CASSANDRA_PORT"]), keyspace=keyspace)
            # The demo's state is disposable: the previous run's app goes, and its keyspace with it.
            spec["state"]["deletionPolicy"] = "Delete"
            _run([kubectl, "-n", NAMESPACE, "delete", "streamingapp", APP, "--ignore-not-found", "--wait=true",
                  "--timeout=120s"], env=env)
            _run([kubectl, "apply", "-f", "-"], env=env, input=yaml.safe_dump(body))

        with steps.step("Waiting for the operator: Cassandra tables provisioned, Deployment rendered"):
            def deployment_ready() -> bool:
                out = subprocess.run([kubectl, "-n", NAMESPACE, "get", "deployment", APP, "-o", "json"], env=env,
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    return False
                dep = json.loads(out.stdout)
                want = dep["spec"]["template"]["spec"]["containers"][0]
                return any(e.get("name") == "FLOE_CONFIG" for e in want.get("env", []))
            _wait(deployment_ready, what="the Deployment", timeout=90, log=op_log)
        print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps,deployments,configmaps,services,pdb"],
                           env=env)))

        run_log = logs / "demo-replicas.log"
        title = f"Running the Deployment's 2 replicas in local run mode (floe run; log {run_log})"
        with steps.step(title), open(run_log, "ab") as out:
            children.append(subprocess.Popen(
                [str(bin_dir / "floe"), "run", "--deployment", f"{NAMESPACE}/{APP}"],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=root, start_new_session=True))

        lines = localrun.word_lines(LINES, seed=int(run_id))
        truth = localrun.word_truth(lines)
        with steps.step(f"Producing {LINES} lines of sample text ({sum(truth.values())} words) to {topic_in}"):
            localrun.produce(bootstrap, topic_in, lines)

        with steps.step("Waiting until every word is counted (Spark starts, groups form, batches commit)"):
            from cassandra.cluster import Cluster

            cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
            session = cluster.connect()

            def store() -> dict[Any, Any]:
                try:
                    return localrun.read_store(session, keyspace, "word-count", key_serde="str", value_serde="long")
                except Exception:
                    return {}
            _wait(lambda: store() == dict(truth), what="the counts in Cassandra to match the text", timeout=420,
                  log=run_log)
            from_cassandra = store()
            cluster.shutdown()

        from_topic: dict[str, int] = {}

        def topic_matches() -> bool:
            nonlocal from_topic
            output = localrun.last_values(localrun.read_topic(bootstrap, topic_out, timeout=10))
            from_topic = {k: int(v) for k, v in output.items()}
            return from_topic == dict(truth)

        with steps.step(f"Reading the latest count of every word from {topic_out}"):
            _wait(topic_matches, what="the output topic to carry every final count", timeout=120, log=run_log)
        top = truth.most_common(TOP)
        print(f"     {'word':<12}{'true count':>11}{'output topic':>14}{'Cassandra':>11}")
        for word, count in top:
            print(f"     {word:<12}{count:>11}{from_topic.get(word, 0):>14}{from_cassandra.get(word, 0):>11}")
        exact = from_cassandra == dict(truth) and from_topic == dict(truth)
        print(f"     {len(truth)} distinct words; Cassandra and the output topic match the text exactly: {exact}")

        labels = {"namespace": NAMESPACE, "app": APP, "topic": topic_in}
        with steps.step("Reading the app's lag from the operator's metrics"), contextlib.suppress(DemoError):
            _wait(lambda: _metric_sum(metrics_port, "floe_consumergroup_lag", labels) == 0.0,
                  what="lag 0 in the operator's metrics", timeout=120, log=op_log)
        lag = _metric_sum(metrics_port, "floe_consumergroup_lag", labels)
        lag_s = _metric_sum(metrics_port, "floe_consumergroup_lag_seconds", labels)
        if lag is None:
            print(f"     the operator has not reported lag for {APP} yet; see {op_log}")
        else:
            print(f"     floe_consumergroup_lag{{app=\"{APP}\",topic=\"{topic_in}\"}} summed over partitions = "
                  f"{lag:.0f} records, time lag {lag_s or 0:.1f} s")
        print(_indent(_run([kubectl, "-n", NAMESPACE, "get", "streamingapps"], env=env)))
        if not exact:
            raise DemoError("the counts did not match the produced text")
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
    print(f"floe demo: finished in {time.monotonic() - steps.t0:.0f} s; the stack is still up (make down stops it)")
    print("try next:")
    print(f"  source .floe/stack.env && $FLOE_KUBECTL -n {NAMESPACE} describe streamingapp {APP}")
    print(f"  floe run --deployment {NAMESPACE}/{APP} --replicas 3   # run the replicas again, then kill one")
    print("  make bench    # handover, throughput and store benchmarks (bench/results/)")
    print("  make test     # every test against this stack")
    return 0


def _indent(text: str) -> str:
    return "\n".join("     " + line for line in text.rstrip().splitlines())


if __name__ == "__main__":
    sys.exit(main())
