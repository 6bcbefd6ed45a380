"""`kubectl floe VERB`: what each verb reads and writes, through the user's kubectl.

- status: the StreamingApp, its Deployment and pods (get), and the offsets rows with their lag:
  `kubectl exec <pod> -c app -- floe-job offsets` in one running replica (`floe_jobs.report`,
  which says why the rows are read there). Needs `pods/exec` for the rows; without it, or while
  no pod runs (a suspended app), the rest is shown and the reason the rows are not.
- suspend, resume, restart, reset-offsets: a merge patch of the app's spec (`views` says why
  the spec and not the Deployment).
- validate: `kubectl apply --server-side --dry-run=server` of the manifest, then `checks` on the
  defaulted object the API server returned.
- logs: `kubectl logs` over the app's pod selector, every line prefixed with its pod.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from floe_operator import model, render
from floe_operator.cli import args as cli_args
from floe_operator.cli import checks, views
from floe_operator.cli.kubectl import Kubectl, KubectlError, Target

KIND = f"{model.PLURAL}.{model.GROUP}"
SNAPSHOT_KIND = f"{model.SNAPSHOT_PLURAL}.{model.GROUP}"
FIELD_MANAGER = "kubectl-floe"


def _selector(app: dict[str, Any]) -> str:
    return str((app.get("status") or {}).get("labelSelector") or f"{render.APP_LABEL}={app['metadata']['name']}")


def _app(k: Kubectl, name: str) -> dict[str, Any]:
    app = k.get(KIND, name)
    if app is None:
        where = f" in namespace {k.target.namespace}" if k.target.namespace else ""
        raise KubectlError(f"StreamingApp {name!r} not found{where}")
    return app


def status(k: Kubectl, name: str, *, output: str, partitions: bool) -> int:
    app = _app(k, name)
    deployment = k.get("deployments.apps", name)
    pods = [p for p in k.list("pods", _selector(app)) if render.EXECUTOR_OF not in (p["metadata"].get("labels") or {})]
    rows: list[dict[str, Any]] | None = None
    source = error = None
    if partitions:
        pod = views.exec_pod(pods, render.CONTAINER)
        if pod is None:
            error = "no running pod to read them in (suspended, or not started)"
        else:
            try:
                out = k.run("exec", pod, "-c", render.CONTAINER, "--", "floe-job", "offsets")
                rows, source = list(json.loads(out)["partitions"]), f"pod/{pod}"
            except (KubectlError, ValueError, KeyError) as exc:
                error = f"kubectl exec {pod} -- floe-job offsets failed: {views.one_line(exc, 300)}"
    view = views.status_view(app, deployment=deployment, pods=pods, partitions=rows, partitions_from=source,
                             partitions_error=error)
    print(json.dumps(view, indent=2, sort_keys=True) if output == "json" else views.render_status(view))
    return 0


def patch(k: Kubectl, name: str, body: dict[str, Any], done: str) -> int:
    _app(k, name)  # a clear "not found" rather than kubectl's
    k.patch(KIND, name, body)
    print(f"streamingapp/{name} {done}")
    return 0


def restore(k: Kubectl, opts: Any) -> int:
    """`kubectl floe restore`: spec.stateRestore from a snapshot resource of the app or a location."""
    volume = None
    location = opts.location
    if opts.snapshot:
        snapshot = k.get(SNAPSHOT_KIND, opts.snapshot)
        if snapshot is None:
            raise KubectlError(f"StreamingAppSnapshot {opts.snapshot!r} not found")
        location, volume = views.snapshot_source(snapshot, opts.name)
    body = views.state_restore_patch(restore_id=opts.restore_id or f"restore-{views.now_stamp()}",
                                     location=location, claim=opts.claim, mount_path=opts.mount_path, volume=volume)
    return patch(k, opts.name, body, f"restore {body['spec']['stateRestore']['id']} from {location} requested: "
                 "its pods stop until it is done")


def validate(k: Kubectl, filename: str) -> int:
    text = sys.stdin.read() if filename == "-" else Path(filename).read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    apps = [d for d in docs if isinstance(d, dict) and d.get("kind") == model.KIND]
    if not apps:
        raise KubectlError(f"{filename} holds no StreamingApp (kind: {model.KIND})")
    failed = 0
    for doc in apps:
        name = (doc.get("metadata") or {}).get("name", "?")
        try:
            # forced: a dry run stores nothing, so fields another manager owns (GitOps, an earlier
            # kubectl apply) must not turn a valid change into a conflict
            defaulted = k.json("apply", "--server-side", "--dry-run=server", "--force-conflicts",
                               f"--field-manager={FIELD_MANAGER}", "-f", "-", stdin=yaml.safe_dump(doc))
        except KubectlError as exc:
            print(f"streamingapp/{name}: refused by the API server: {exc}", file=sys.stderr)
            failed += 1
            continue
        found = checks.problems(defaulted)
        if found:
            print(f"streamingapp/{name}: the API server accepts it, but the runtime would refuse it:", file=sys.stderr)
            for line in found:
                print(f"  {line}", file=sys.stderr)
            failed += 1
        else:
            print(f"streamingapp/{name} valid (server dry run and runtime configuration check)")
    return 1 if failed else 0


def logs(k: Kubectl, name: str, opts: Any) -> int:
    app = _app(k, name)
    argv = ["logs", "-l", _selector(app), "-c", render.CONTAINER, "--prefix", "--max-log-requests", "50"]
    if opts.follow:
        argv.append("--follow")
    tail = opts.tail if opts.tail is not None else (None if opts.follow else -1)
    if tail is not None:
        argv.append(f"--tail={tail}")
    if opts.since:
        argv.append(f"--since={opts.since}")
    if opts.previous:
        argv.append("--previous")
    return k.stream(argv)


def run(argv: Sequence[str]) -> int:
    opts = cli_args.parse(argv)
    k = Kubectl(Target(namespace=opts.namespace, context=opts.context, kubeconfig=opts.kubeconfig))
    if opts.verb == "status":
        return status(k, opts.name, output=opts.output, partitions=not opts.no_partitions)
    if opts.verb in ("suspend", "resume"):
        suspend = opts.verb == "suspend"
        return patch(k, opts.name, views.suspend_patch(suspend), "suspended" if suspend else "resumed")
    if opts.verb == "restart":
        nonce = opts.nonce or views.now_stamp()
        return patch(k, opts.name, views.restart_patch(nonce), f"restarting (spec.restartNonce={nonce})")
    if opts.verb == "reset-offsets":
        body = views.offset_reset_patch(reset_id=opts.reset_id or f"reset-{views.now_stamp()}", to=opts.to,
                                        timestamp=opts.timestamp, topics=opts.topic, offsets=opts.offset)
        app = _app(k, opts.name)
        code = patch(k, opts.name, body, f"offset reset {body['spec']['offsetReset']['id']} requested")
        if not (app.get("spec") or {}).get("suspend"):
            print(f"the reset waits until the app is suspended: kubectl floe suspend {opts.name}")
        return code
    if opts.verb == "restore":
        return restore(k, opts)
    if opts.verb == "validate":
        return validate(k, opts.filename)
    return logs(k, opts.name, opts)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except views.UsageError as exc:  # as argparse's own usage errors
        print(f"kubectl floe: {exc}", file=sys.stderr)
        return 2
    except (KubectlError, OSError, yaml.YAMLError) as exc:
        print(f"kubectl floe: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
