"""`floe-stack up|down|status`: the commands behind `make up`, `make down` and `make status`."""

from __future__ import annotations

import argparse
import sys

from floe_stack import artifacts, component, stack
from floe_stack.layout import Layout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="floe-stack", description="Floe's local stack on loopback.")
    parser.add_argument("command", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    layout = Layout.discover()
    try:
        if args.command == "up":
            stack.up(layout)
        elif args.command == "down":
            stack.down(layout)
        else:
            rows = stack.status(layout)
            total = 0
            for name, pid, rss in rows:
                total += rss
                state = f"up    pid {pid:<8} rss {rss / 2**20:7.0f} MiB" if pid else "down"
                print(f"{name:<24} {state}")
            print(f"{'total':<24}                    rss {total / 2**20:7.0f} MiB")
            if layout.env_file.exists():
                print(f"env file: {layout.env_file}")
            return 0 if all(pid for _, pid, _ in rows) else 1
    except (component.StackError, artifacts.ArtifactError) as exc:
        print(f"floe-stack: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
