"""The images' pyproject: the product's packages and commands, the local stack left out."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("product_pyproject", ROOT / "images" / "product_pyproject.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_images_package_the_operator_and_the_runtime_only() -> None:
    full = tomllib.loads((ROOT / "pyproject.toml").read_text())
    product = tomllib.loads(_script().product((ROOT / "pyproject.toml").read_text()))
    assert product["tool"]["setuptools"]["packages"] == [
        p for p in full["tool"]["setuptools"]["packages"] if not p.startswith("floe_stack")]
    assert "floe_stack" not in product["tool"]["setuptools"]["package-dir"]
    assert set(product["project"]["scripts"]) == set(full["project"]["scripts"]) - {"floe-stack"}
    # everything else is the repository's own
    assert product["project"]["dependencies"] == full["project"]["dependencies"]
    assert product["project"]["version"] == full["project"]["version"]


def test_a_layout_the_script_does_not_know_is_refused() -> None:
    text = (ROOT / "pyproject.toml").read_text().replace(
        '"floe_jobs.stores", "floe_stack"]', '"floe_jobs.stores",\n  "floe_stack",\n]')
    with pytest.raises(SystemExit, match="floe_stack is still packaged"):
        _script().product(text)


def test_every_package_of_the_product_is_packaged() -> None:
    """A sub-package left out of the list is missing from the images' wheel: `floe-job snapshot`
    failed with ModuleNotFoundError in the app image while floe_jobs.snapshots was."""
    full = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for name, folder in full["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found == set(full["packages"])
