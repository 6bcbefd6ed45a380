"""The stack's env file (`.floe/stack.env`): how tests, the demo and users find the stack.

Plain `KEY=value` lines, so a shell can `source` it and Python can read it without a parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write(path: Path, values: Mapping[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{k}={v}\n" for k, v in sorted(values.items())))
    tmp.replace(path)


def read(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip()
    return values


def ensure_stack(root: Path) -> dict[str, str]:
    """The running stack's env, bringing the stack up first if any part of it is down."""
    from floe_stack import stack
    from floe_stack.layout import Layout

    layout = Layout.discover(root)
    if not stack.all_running(layout) or not layout.env_file.exists():
        stack.up(layout)
    return read(layout.env_file)
