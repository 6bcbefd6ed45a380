"""CPU seconds of one word-count throughput run, by process and by JVM thread.

    .venv/bin/python tests/bench/cpu_by_thread.py floe|ss [--words 10000] [--lines 100000]
        [--jvm-options "..."] [--logs DIR]

Runs one Floe replica (`floe`) or the Structured Streaming baseline (`ss`) as the throughput
benchmark does, sampling every process's CPU time and that of every thread of the Spark JVMs
and Cassandra from /proc every 0.3 s (`cpusample`), so processes that end during the run
still count. Prints the run's result, CPU seconds per process kind, and the Spark JVMs' and
Cassandra's CPU seconds per thread name (numbers dropped: "C2 CompilerThread0" and
"C2 CompilerThread1" add up). `--jvm-options` replaces the driver JVM's options of both
systems, e.g. to compare JIT settings. JVM start-up is included.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import runtime_bench as rb  # run as a script: its own folder is on the path
import workloads
from cpusample import Sampler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["floe", "ss"])
    parser.add_argument("--words", type=int, default=10_000, help="vocabulary the lines draw from")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--jvm-options", default=None, help="driver JVM options of both systems")
    parser.add_argument("--logs", type=Path, default=None, help="keep the Floe replica's log here")
    args = parser.parse_args()
    # Floe's tuning on both sides (the throughput rows' floe-tuning), JVM options as asked
    conf = {**rb.COMMON_CONF, **rb.TUNINGS["floe-tuning"]}
    if args.jvm_options:
        conf["spark.driver.extraJavaOptions"] = args.jvm_options
    env = rb.stack_env()
    lines = workloads.vocab_lines(args.lines, args.words, seed=5)
    wc = workloads.WORD_COUNT
    sampler = Sampler(threads=True)
    if args.system == "floe":
        result = rb.floe_throughput(env, lines, workload=wc, batch=args.batch, conf=conf, logs=args.logs)
    else:
        result = rb.ss_throughput(env, lines, workload=wc, batch=args.batch, conf=conf)
    by_kind = sampler.stop()
    print(json.dumps({"run": result, "cpu_s_by_process": by_kind, "cpu_s_by_thread": sampler.by_thread()}, indent=2))


if __name__ == "__main__":
    main()
