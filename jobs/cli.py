"""`floe-job`: run one replica of a Floe streaming app.

    floe-job [--config FILE] [--entrypoint module:function | file.py[:attr]] [--check]
    floe-job executor      (in an executor pod that a k8s:// master's driver started; see
                            floe_jobs.executor)
    floe-job offsets       (the app's offsets rows and their lag as JSON, read-only; see
                            floe_jobs.report: what `kubectl floe status` runs in a pod)
    floe-job snapshot --to URI   (a consistent cut of the running app's stores and positions, as
                                  Parquet with a manifest; see floe_jobs.snapshots)
    floe-job restore --from URI  (that snapshot into a new app, which then resumes at the cut)
    floe-job delete-snapshot --at URI  (that snapshot's data, if it is one of this app's)
    floe-job class-archive FILE  (the driver JVM's class archive, from a training run; see
                                  floe_jobs.classarchive)

Exit codes: 0 stopped gracefully; 1 batches kept failing; 2 invalid configuration;
3 Kafka or Cassandra unreachable (or an input topic missing) at start; 4 aborted during a
drain (deadline or second SIGTERM; the batch is replayed by the next owner). They are
defined in `floe_jobs.exitcodes`.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys

from floe_jobs import config as config_mod
from floe_jobs import logformat
from floe_jobs.exitcodes import EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE

# Python's cycle collector runs a young collection every 700 net allocations by default; a batch
# allocates a few objects per record (messages, tuples, encoded keys), so a large batch would run
# it thousands of times. Garbage without cycles is freed at once either way, so collecting cycles
# less often costs little memory. Figures: docs/runtime.md, "What a batch costs".
GC_THRESHOLDS = (50_000, 20, 100)

TERMINATION_LOG = "/dev/termination-log"
"""Where the kubelet reads a container's last words (the default terminationMessagePath); the
operator quotes them in the app's CrashLooping condition (`floe_operator.podfaults`), so a
configuration the runtime refuses (a key of a newer operator among them) is named on the app."""


def _refuse(message: str, code: int) -> int:
    """Exit with `code` after saying why on stderr and, in a pod, in the termination log."""
    print(message, file=sys.stderr)
    if os.path.exists(TERMINATION_LOG):
        try:
            with open(TERMINATION_LOG, "w", encoding="utf-8") as f:
                f.write(message[:4096])
        except OSError:
            pass
    return code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="floe-job", description="Run one replica of a Floe streaming app.")
    p.add_argument("--config", help="YAML config file (default: $FLOE_CONFIG); FLOE_* variables override it")
    p.add_argument("--entrypoint", help="override job.entrypoint")
    p.add_argument("--check", action="store_true", help="validate the configuration and the entrypoint, then exit")
    p.add_argument("--help-config", action="store_true", help="list every key with its environment variable")
    p.add_argument("--log-level", default=os.environ.get("FLOE_LOG_LEVEL", "INFO"))
    return p


def _subcommand(argv: list[str]) -> int | None:
    """Run a command that is not a replica (each imported only when asked for); None otherwise."""
    if argv[:1] == ["executor"]:
        # Spark starts its executor pods with the image's entrypoint and this one argument
        from floe_jobs import executor

        return executor.main(argv[1:])
    if argv[:1] == ["offsets"]:
        from floe_jobs import report

        return report.main(argv[1:])
    if argv[:1] == ["class-archive"]:
        from floe_jobs import classarchive

        return classarchive.main(argv[1:])
    if argv[:1] in (["snapshot"], ["restore"], ["delete-snapshot"]):
        from floe_jobs.snapshots import cli as snapshots_cli

        return snapshots_cli.main(argv)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    code = _subcommand(argv)
    if code is not None:
        return code
    args = _parser().parse_args(argv)
    if args.help_config:
        print(config_mod.describe())
        return EXIT_OK
    # text until the configuration says otherwise (`floe_jobs.logformat`): a config error stays readable
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=logformat.TEXT_FORMAT,
    )
    from floe_jobs import outages

    for handler in logging.getLogger().handlers:
        handler.addFilter(outages.RepeatedClientErrors())
    gc.set_threshold(*GC_THRESHOLDS)
    env = dict(os.environ)
    if args.entrypoint:
        config_mod.own_variable(env, "FLOE_JOB_ENTRYPOINT", args.entrypoint)
    try:
        cfg = config_mod.load(path=args.config, environ=env)
    except config_mod.ConfigError as exc:
        return _refuse(f"floe-job: {exc}", EXIT_CONFIG)
    logformat.apply(cfg.logging.format, app=cfg.app_id, pod=cfg.pod.name or socket.gethostname())
    # the configuration holds them now: Spark's JVM and Python workers, started below, must not
    config_mod.scrub_secrets(os.environ)

    from floe_jobs import api, runner, startup
    from floe_jobs.stores.errors import StoreConfigError

    try:
        target, _ = startup.load_entrypoint(cfg.job.entrypoint)
        job = api.as_job(target)
        if args.check:
            print(f"floe-job: configuration valid; job stages: {[s.name for s in job.stages]}")
            return EXIT_OK
        r = runner.Runner(cfg, job)
        r.install_signals()
        r.start()
    except (startup.StartupError, StoreConfigError, TypeError, ValueError) as exc:
        # a refused credential or certificate names its variable: say which Secret key it came from
        code = EXIT_UNREACHABLE if isinstance(exc, startup.StartupError) else EXIT_CONFIG
        return _refuse(f"floe-job: {cfg.sourced(str(exc))}", code)
    return r.run()


if __name__ == "__main__":
    sys.exit(main())
