"""No function of the product's code runs past 60 lines (docs/architecture.md): a longer one is
split into functions named for what each part does, so that it can be read on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("jobs", "operator", "stack")
MAX_LINES = 60


def long_functions(source: str, *, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every function or method in `source` longer than `limit`,
    decorators left out and the docstring counted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((node.name, node.lineno, lines))
    return found


def test_a_function_over_the_limit_is_found_and_one_at_it_is_not() -> None:
    at_limit = "def f():\n" + "    x = 1\n" * (MAX_LINES - 1)
    over = "async def g():\n" + "    x = 1\n" * MAX_LINES
    nested = "class C:\n    def m(self):\n" + "        x = 1\n" * MAX_LINES
    assert long_functions(at_limit) == []
    assert long_functions(over) == [("g", 1, MAX_LINES + 1)]
    assert long_functions(nested) == [("m", 2, MAX_LINES + 1)]


def test_no_product_function_is_longer_than_60_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({lines} lines)"
        for wing in PRODUCT
        for path in sorted((ROOT / wing).rglob("*.py"))
        for name, line, lines in long_functions(path.read_text())
    ]
    assert too_long == [], "split these into functions named for what each part does: " + ", ".join(too_long)
