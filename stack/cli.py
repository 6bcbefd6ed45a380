"""`floe-stack up|down|status|clean`: the commands behind `make up`, `make down`, `make status`
and `make clean`."""

from __future__ import annotations

import argparse
import shutil
import sys

from floe_stack import artifacts, component, node, stack
from floe_stack.layout import Layout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="floe-stack", description="Floe's local stack on loopback.")
    parser.add_argument("command", choices=["up", "down", "status", "clean"])
    args = parser.parse_args(argv)
    layout = Layout.discover()
    try:
        if args.command == "up":
            stack.up(layout)
        elif args.command == "down":
            stack.down(layout)
        elif args.command == "clean":
            stack.down(layout)
            shutil.rmtree(layout.data, ignore_errors=True)
            shutil.rmtree(layout.run, ignore_errors=True)
            print(f"floe-stack: removed {layout.data} and {layout.run} (downloads and builds stay cached)")
        else:
            rows = stack.status(layout)
            total = 0
            for name, pid, rss in rows:
                total += rss
                state = f"up    pid {pid:<8} rss {rss / 2**20:7.0f} MiB" if pid else "down"
                print(f"{name:<24} {state}")
            print(f"{'total':<24}                    rss {total / 2**20:7.0f} MiB")
            if line := node.summary(layout):
                print(line)
            if layout.env_file.exists():
                print(f"env file: {layout.env_file}")
            return 0 if all(pid for _, pid, _ in rows) else 1
    except (component.StackError, artifacts.ArtifactError) as exc:
        print(f"floe-stack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
