"""Print pyproject.toml as the images build it: the product only, without the local stack.

The repository's one distribution holds the operator (floe_operator), the job runtime
(floe_jobs) and the local stack (floe_stack: the development cluster, local runs, the demo and
the docs generators). The images carry the first two. Neither imports floe_stack (an import
contract in `make lint` keeps it so), so the images build the wheel from this pyproject, which
leaves out floe_stack's package, package data and `floe-stack` command, and refuses to print
anything if floe_stack would still be packaged.

    python images/product_pyproject.py pyproject.toml > pyproject.product.toml
"""

from __future__ import annotations

import sys
import tomllib

STACK_PACKAGE, STACK_COMMAND = "floe_stack", "floe-stack"


def product(text: str) -> str:
    """`text` without the lines that package floe_stack; checked by parsing the result."""
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in (STACK_PACKAGE, STACK_COMMAND):
            continue
        if line.startswith("packages = "):
            line = line.replace(f', "{STACK_PACKAGE}"', "").replace(f'"{STACK_PACKAGE}", ', "")
        lines.append(line)
    out = "\n".join(lines) + "\n"
    parsed = tomllib.loads(out)
    setuptools = parsed["tool"]["setuptools"]
    packaged = [*setuptools["packages"], *setuptools.get("package-dir", {}), *setuptools.get("package-data", {})]
    if any(p.split(".")[0] == STACK_PACKAGE for p in packaged) or STACK_COMMAND in parsed["project"]["scripts"]:
        raise SystemExit(f"product_pyproject: {STACK_PACKAGE} is still packaged; update images/product_pyproject.py")
    return out


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(product(f.read()))
