"""Local run mode: an app's replicas as processes on this machine, started exactly as its pods.

`floe run --manifest app.yaml --replicas 3` renders the Deployment and ConfigMap the operator
would apply; `floe run --deployment ns/name` reads the ones it did apply from the API server.
Either way the replicas get the pod template's command, arguments and environment, with the
few substitutions a process needs where a pod has its own network and files:

- the ConfigMap mounted into the pod is written to a temporary directory, and environment
  values pointing into its mount path point there instead;
- `fieldRef` values take local answers (pod name `<deployment>-local-<i>`, pod IP 127.0.0.1);
- `secretKeyRef` values are read from the API server (never printed);
- each replica gets its own metrics and query ports (`FLOE_METRICS_PORT`,
  `FLOE_METRICS_QUERY_PORT`), since processes share one
  network namespace, its own scratch directory standing in for the pod's emptyDir `/tmp`
  (`TMPDIR`, and `SPARK_LOCAL_DIRS`, which Spark prefers to `spark.local.dir`), and
  `FLOE_LOCAL_RUN=true` so logs and metrics say what they are;
- `FLOE_SPARK_JARS` comes from the local stack, standing in for the job image's jars.

This is the inner loop for job authors and how the demo runs pods while the local stack has
no kubelet. Like a Deployment, a replica that fails is started again (with backoff); SIGINT or
SIGTERM sends SIGTERM to every replica, which drain and leave the group, and SIGKILL follows
after the pod's terminationGracePeriodSeconds.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from floe_jobs import config
from floe_operator import model, render

Manifest = dict[str, Any]
SecretReader = Callable[[str, str, str], str]


class LocalRunError(RuntimeError):
    """The app cannot run locally as given; the message says what to change."""


class SecretMissing(LocalRunError):
    """A referenced Secret or key does not exist (an optional reference then leaves its variable
    unset, as the kubelet does)."""


@dataclass(frozen=True)
class LocalProcess:
    """One replica: the argv and environment a pod's container would run with."""

    name: str
    argv: list[str]
    env: dict[str, str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendered(body: Mapping[str, Any]) -> tuple[Manifest, Manifest]:
    """The Deployment and ConfigMap the operator renders for a StreamingApp manifest."""
    app = model.StreamingApp.from_body(body)
    cm = render.config_map(app)
    return render.deployment(app, config_digest=render.config_hash(cm)), cm


def materialize_config_maps(template: Manifest, config_maps: Mapping[str, Manifest], into: Path) -> dict[str, str]:
    """Write every ConfigMap volume the container mounts under ``into``; return mountPath → local dir."""
    spec = template["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts: dict[str, str] = {}
    for mount in _container(template).get("volumeMounts", []):
        volume = volumes.get(mount["name"], {})
        if "configMap" not in volume:
            continue
        cm_name = volume["configMap"]["name"]
        if cm_name not in config_maps:
            raise LocalRunError(f"the pod mounts ConfigMap {cm_name!r}, which was not found")
        local = into / mount["name"]
        local.mkdir(parents=True, exist_ok=True)
        for key, text in (config_maps[cm_name].get("data") or {}).items():
            (local / key).write_text(text)
        mounts[mount["mountPath"].rstrip("/")] = str(local)
    return mounts


def _container(template: Manifest) -> Manifest:
    containers = template["spec"]["containers"]
    for c in containers:
        if c["name"] == render.CONTAINER:
            return dict(c)
    return dict(containers[0])


def local_processes(
    deployment: Manifest,
    *,
    mounts: Mapping[str, str],
    replicas: int,
    read_secret: SecretReader,
    base_env: Mapping[str, str],
    ports: Callable[[], int] = free_port,
    scratch: Path | None = None,
) -> list[LocalProcess]:
    """The replicas of ``deployment`` as local processes (pure but for ``read_secret``/``ports``)."""
    template = deployment["spec"]["template"]
    container = _container(template)
    namespace = deployment["metadata"].get("namespace", "default")
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if not argv:
        raise LocalRunError("the pod template's container has no command; the runtime needs `floe-job`")
    argv[0] = _executable(argv[0])
    serves_queries = any(p.get("name") == "query" for p in container.get("ports") or [])
    out = []
    for i in range(replicas):
        name = f"{deployment['metadata']['name']}-local-{i}"
        fields = {"metadata.name": name, "metadata.namespace": namespace, "status.podIP": "127.0.0.1",
                  "spec.nodeName": socket.gethostname()}
        env = dict(base_env)
        for item in container.get("env", []):
            env[item["name"]] = _env_value(item, fields=fields, namespace=namespace, mounts=mounts,
                                           read_secret=read_secret)
        env["FLOE_METRICS_PORT"] = str(ports())
        if serves_queries:
            env["FLOE_METRICS_QUERY_PORT"] = str(ports())
        env["FLOE_LOCAL_RUN"] = "true"
        if config.ENV_NAMES_ENV in env:
            # the local run stands in for the operator: the ports, jars and marker it adds are its own
            env[config.ENV_NAMES_ENV] = ",".join(sorted(k for k in env if k.startswith("FLOE_")))
        if scratch is not None:
            tmp = scratch / name
            (tmp / "spark").mkdir(parents=True, exist_ok=True)
            env["TMPDIR"] = str(tmp)
            env["SPARK_LOCAL_DIRS"] = str(tmp / "spark")
        out.append(LocalProcess(name=name, argv=argv, env=env))
    return out


def _executable(command: str) -> str:
    """The image puts the console scripts on PATH; locally they sit next to this Python."""
    if os.sep in command or shutil.which(command):
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.exists() else command


def _env_value(
    item: Mapping[str, Any],
    *,
    fields: Mapping[str, str],
    namespace: str,
    mounts: Mapping[str, str],
    read_secret: SecretReader,
) -> str:
    if "value" in item:
        value = str(item["value"])
        for mount, local in mounts.items():
            if value == mount or value.startswith(mount + "/"):
                return local + value[len(mount):]
        return value
    source = item.get("valueFrom", {})
    if "fieldRef" in source:
        path = source["fieldRef"]["fieldPath"]
        if path not in fields:
            raise LocalRunError(f"env {item['name']}: fieldRef {path} has no local value")
        return fields[path]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        try:
            return read_secret(namespace, ref["name"], ref["key"])
        except SecretMissing:
            if ref.get("optional"):
                return ""  # unset to the runtime, which names the Secret key it misses
            raise
    raise LocalRunError(f"env {item['name']}: only value, fieldRef and secretKeyRef are supported locally")


# -- talking to the API server (only for --deployment and for secrets) -------------------------


def _api() -> Any:
    from kubernetes import client, config

    try:
        # KUBECONFIG as it is now: the client reads it once, when it is first imported
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the client raises several types for a missing or broken kubeconfig
        raise LocalRunError(f"cannot load a kubeconfig (set KUBECONFIG): {exc}") from exc
    return client


def api_secret_reader() -> SecretReader:
    def read(namespace: str, name: str, key: str) -> str:
        client = _api()
        try:
            secret = client.CoreV1Api().read_namespaced_secret(name, namespace)
        except client.exceptions.ApiException as exc:
            error = SecretMissing if exc.status == 404 else LocalRunError
            raise error(f"Secret {namespace}/{name} could not be read ({exc.reason}); create it") from exc
        if key not in (secret.data or {}):
            raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(secret.data[key]).decode()

    return read


def applied(namespace: str, name: str) -> tuple[Manifest, dict[str, Manifest]]:
    """The Deployment ``namespace/name`` and the ConfigMaps its pods mount, from the API server."""
    client = _api()
    api = client.ApiClient()
    try:
        dep = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    except client.exceptions.ApiException as exc:
        raise LocalRunError(f"Deployment {namespace}/{name} could not be read ({exc.reason})") from exc
    deployment: Manifest = api.sanitize_for_serialization(dep)
    config_maps: dict[str, Manifest] = {}
    for volume in deployment["spec"]["template"]["spec"].get("volumes", []):
        if "configMap" in volume:
            cm_name = volume["configMap"]["name"]
            cm = client.CoreV1Api(api).read_namespaced_config_map(cm_name, namespace)
            config_maps[cm_name] = api.sanitize_for_serialization(cm)
    return deployment, config_maps


# -- running -------------------------------------------------------------------------------------


def _pump(stream: IO[bytes], prefix: str) -> None:
    for line in iter(stream.readline, b""):
        sys.stdout.write(f"[{prefix}] {line.decode(errors='replace')}")
        sys.stdout.flush()


class Supervisor:
    """Keeps the replicas running like a Deployment would, and drains them on a signal."""

    def __init__(self, procs: Sequence[LocalProcess], *, grace_seconds: float, cwd: Path) -> None:
        self.specs = list(procs)
        self.grace = grace_seconds
        self.cwd = cwd
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = {p.name: 0 for p in procs}
        self.stopping = threading.Event()

    def _start(self, spec: LocalProcess) -> None:
        proc = subprocess.Popen(spec.argv, env=spec.env, cwd=self.cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        threading.Thread(target=_pump, args=(proc.stdout, spec.name), daemon=True).start()
        self.running[spec.name] = proc
        query = f", queries :{spec.env['FLOE_METRICS_QUERY_PORT']}" if "FLOE_METRICS_QUERY_PORT" in spec.env else ""
        print(f"floe run: started {spec.name} (local run, pid {proc.pid}, metrics :{spec.env['FLOE_METRICS_PORT']}"
              f"{query})", flush=True)

    def run(self) -> int:
        for spec in self.specs:
            self._start(spec)
        by_name = {s.name: s for s in self.specs}
        while not self.stopping.is_set():
            for name, proc in list(self.running.items()):
                code = proc.poll()
                if code is None:
                    continue
                if code == 0:
                    print(f"floe run: {name} exited 0", flush=True)
                    del self.running[name]
                    continue
                # gone until restarted: a drain during the backoff has nothing of it to wait for
                del self.running[name]
                self.restarts[name] += 1
                backoff = min(30.0, 2.0 ** self.restarts[name])
                print(f"floe run: {name} exited {code}; restarting in {backoff:.0f} s", flush=True)
                if self.stopping.wait(backoff):
                    break
                self._start(by_name[name])
            if not self.running:
                return 0
            self.stopping.wait(0.5)
        return self.drain()

    def drain(self) -> int:
        for proc in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        worst = 0
        for name, proc in self.running.items():
            try:
                code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                print(f"floe run: {name} did not stop within {self.grace:.0f} s; killed", flush=True)
            worst = worst or code
        return 0 if worst in (0, -signal.SIGTERM) else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="floe run", description=__doc__.split("\n\n")[0] if __doc__ else None)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--manifest", type=Path, help="a StreamingApp YAML file, rendered as the operator would")
    src.add_argument("--deployment", metavar="NAMESPACE/NAME", help="a Deployment the operator applied")
    p.add_argument("--replicas", type=int, help="how many replicas (default: the Deployment's)")
    p.add_argument("--namespace", default="default", help="namespace for --manifest (pod fields, secrets)")
    p.add_argument("--print", action="store_true", help="print each replica's command and variable names, then exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        args = args[1:]
    opts = _parser().parse_args(args)
    try:
        if opts.manifest is not None:
            body = yaml.safe_load(opts.manifest.read_text())
            if not isinstance(body, dict) or body.get("kind") != "StreamingApp":
                raise LocalRunError(f"{opts.manifest} is not a StreamingApp manifest (kind: StreamingApp)")
            body.setdefault("metadata", {}).setdefault("namespace", opts.namespace)
            deployment, cm = rendered(body)
            config_maps = {cm["metadata"]["name"]: cm}
        else:
            namespace, _, name = str(opts.deployment).rpartition("/")
            deployment, config_maps = applied(namespace or "default", name)
        replicas = opts.replicas if opts.replicas is not None else int(deployment["spec"].get("replicas") or 1)
        if replicas < 1:
            raise LocalRunError(f"--replicas must be at least 1, not {replicas}")
        tmp = Path(tempfile.mkdtemp(prefix="floe-run-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # the replicas' config copies and scratch
        mounts = materialize_config_maps(deployment["spec"]["template"], config_maps, tmp)
        # A pod sees only what its template sets: FLOE_* settings of this shell are left out.
        base = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        base["FLOE_SPARK_JARS"] = os.environ.get("FLOE_SPARK_JARS") or _stack_jars()
        procs = local_processes(deployment, mounts=mounts, replicas=replicas, read_secret=api_secret_reader(),
                                base_env=base, scratch=tmp / "scratch")
    except (LocalRunError, OSError, ValueError) as exc:
        print(f"floe run: {exc}", file=sys.stderr)
        return 2
    if opts.print:
        for p in procs:
            names = sorted(k for k in p.env if k.startswith("FLOE_"))
            print(f"{p.name}: {' '.join(p.argv)}  env: {', '.join(names)}")
        return 0
    grace = float(deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds") or 30)
    sup = Supervisor(procs, grace_seconds=grace, cwd=Path.cwd())
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sup.stopping.set())
    return sup.run()


def _stack_jars() -> str:
    """The local stack's connector jars (what the job image carries), if the stack is up."""
    env_file = Path(os.environ.get("FLOE_ROOT", Path.cwd())) / ".floe" / "stack.env"
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if line.startswith("FLOE_SPARK_JARS="):
                return line.split("=", 1)[1]
    return ""


if __name__ == "__main__":
    sys.exit(main())
