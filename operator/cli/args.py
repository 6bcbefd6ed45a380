"""The command line of `kubectl floe`: verbs, and kubectl's global flags accepted anywhere.

kubectl hands a plugin every argument after its name unchanged, so `kubectl floe status orders
-n team-a` and `kubectl floe -n team-a status orders` must both work: the global flags
(`-n/--namespace`, `--context`, `--kubeconfig`) are declared on the top parser and on every
verb, the verb's copy left unset unless given.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from floe_operator.cli import views

VERBS = ("status", "suspend", "resume", "restart", "reset-offsets", "restore", "validate", "logs")


def _globals(p: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    p.add_argument("-n", "--namespace", default=default, help="namespace of the app (kubectl's default when absent)")
    p.add_argument("--context", default=default, help="kubeconfig context to use")
    p.add_argument("--kubeconfig", default=default, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubectl floe",
        description="Day-2 operations on Floe StreamingApps, through your kubectl.",
    )
    _globals(p, top=True)
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        v = sub.add_parser(name, help=help_, description=help_)
        _globals(v, top=False)
        return v

    v = verb("status", "conditions, replicas, and every partition's owner, lag and last commit")
    v.add_argument("name")
    v.add_argument("-o", "--output", choices=("table", "json"), default="table", help="json: machine-readable")
    v.add_argument("--no-partitions", action="store_true",
                   help="skip the offsets rows (they are read with kubectl exec in one of the app's pods)")

    v = verb("suspend", "set spec.suspend: every replica drains and stops; spec.replicas is kept")
    v.add_argument("name")
    v = verb("resume", "clear spec.suspend: as many replicas as before run again")
    v.add_argument("name")

    v = verb("restart", "roll every pod (sets spec.restartNonce, which the operator puts on the pod template)")
    v.add_argument("name")
    v.add_argument("--nonce", help="the value to set (default: the current UTC time)")

    v = verb("reset-offsets", "write spec.offsetReset (it runs while the app is suspended)")
    v.add_argument("name")
    v.add_argument("--to", required=True, choices=views.RESET_TARGETS)
    v.add_argument("--timestamp", help="RFC 3339 time, with --to timestamp")
    v.add_argument("--topic", action="append", default=[], help="input topic to move (repeat; default: all)")
    v.add_argument("--offset", action="append", default=[], metavar="TOPIC:PARTITION=OFFSET",
                   help="with --to offsets: the next offset to read of a partition (repeat)")
    v.add_argument("--id", dest="reset_id", help="names this reset (default: reset-<UTC time>)")

    v = verb("restore", "write spec.stateRestore: the app goes back to a snapshot, in place (its pods stop meanwhile)")
    v.add_argument("name")
    source = v.add_mutually_exclusive_group(required=True)
    source.add_argument("--snapshot", help="a StreamingAppSnapshot of this app that succeeded")
    source.add_argument("--location", help="a snapshot's URI (file:///<mountPath>/<dir>, s3a://...)")
    v.add_argument("--claim", help="with a file:// --location: the PersistentVolumeClaim it lies on")
    v.add_argument("--mount-path", default="/snapshots", help="with --claim: where the Job mounts it")
    v.add_argument("--id", dest="restore_id", help="names this restore (default: restore-<UTC time>)")

    v = verb("validate", "server-side dry run of a manifest, then the runtime's own check of its configuration")
    v.add_argument("-f", "--filename", required=True, help="StreamingApp manifest ('-': stdin)")

    v = verb("logs", "logs of every replica, each line prefixed with its pod")
    v.add_argument("name")
    v.add_argument("-f", "--follow", action="store_true")
    v.add_argument("--tail", type=int, help="lines of each pod's recent log (default: all, or 10 with -f)")
    v.add_argument("--since", help="only newer lines, e.g. 10m")
    v.add_argument("--previous", action="store_true", help="the previous container's log (after a restart)")
    return p


def parse(argv: Sequence[str]) -> argparse.Namespace:
    return parser().parse_args(list(argv))
