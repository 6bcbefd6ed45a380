"""The hash-pinned locks under requirements/ agree with pyproject.toml, and are what installs use.

pyproject.toml keeps version ranges; `make venv` and the images install from the locks with
`pip --require-hashes`, so a dependency added to pyproject.toml but not locked would break the
install (or, worse, be left out of the images). These tests say so first, with the command that
regenerates the locks.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
REQS = ROOT / "requirements"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REGENERATE = "run `make lock` and commit requirements/*.lock"
LOCKS = ("build", "runtime", "operator", "dev")
# What the operator's image leaves out (its lock and the import contracts agree).
NOT_IN_OPERATOR = "pyspark"


@dataclass
class Pin:
    version: str
    hashes: list[str] = field(default_factory=list)
    via: list[str] = field(default_factory=list)


def parse_lock(text: str) -> dict[str, Pin]:
    """Each entry of a pip-style lock: `name==version \\` then `--hash=sha256:...` lines, then
    `# via` comments. Any other requirement form (a range, a URL, an option) is an error."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            via = stripped.lstrip("#").strip()
            if current is not None and via and via != "via":
                current.via.append(via.removeprefix("via ").strip())
            continue
        if stripped.startswith("--hash="):
            assert current is not None, f"a hash before any requirement: {stripped}"
            current.hashes.append(stripped.removeprefix("--hash=").rstrip(" \\"))
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*\\?", stripped)
        assert m, f"not an exact pin (name==version): {stripped!r}"
        current = pins.setdefault(canonicalize_name(m.group(1)), Pin(m.group(2)))
    return pins


def lock(name: str) -> dict[str, Pin]:
    path = REQS / f"{name}.lock"
    assert path.exists(), f"requirements/{name}.lock is missing: {REGENERATE}"
    return parse_lock(path.read_text())


def runtime_deps() -> list[Requirement]:
    return [Requirement(d) for d in PYPROJECT["project"]["dependencies"]]


def dev_deps() -> list[Requirement]:
    return [Requirement(d) for d in PYPROJECT["project"]["optional-dependencies"]["dev"]]


def build_deps() -> list[Requirement]:
    listed = [ln.split("#")[0].strip() for ln in (REQS / "build.in").read_text().splitlines()]
    return [Requirement(d) for d in [*PYPROJECT["build-system"]["requires"], *listed] if d]


def assert_locked(lock_name: str, reqs: list[Requirement], source: str) -> None:
    pins = lock(lock_name)
    for req in reqs:
        pin = pins.get(canonicalize_name(req.name))
        assert pin is not None, f"{req} ({source}) is not in requirements/{lock_name}.lock: {REGENERATE}"
        assert req.specifier.contains(pin.version, prereleases=True), (
            f"requirements/{lock_name}.lock pins {req.name}=={pin.version}, outside {req} ({source}): {REGENERATE}")


@pytest.mark.parametrize("name", LOCKS)
def test_every_entry_is_an_exact_pin_with_a_sha256(name: str) -> None:
    pins = lock(name)
    assert pins, f"requirements/{name}.lock pins nothing"
    for pkg, pin in pins.items():
        assert pin.hashes, f"requirements/{name}.lock: {pkg}=={pin.version} has no --hash: {REGENERATE}"
        for h in pin.hashes:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", h), f"requirements/{name}.lock: {pkg}: {h} is not a sha256"


def test_the_runtime_lock_pins_every_dependency_of_pyproject() -> None:
    assert_locked("runtime", runtime_deps(), "pyproject.toml [project] dependencies")


def test_the_dev_lock_pins_the_dependencies_and_the_dev_tools() -> None:
    assert_locked("dev", runtime_deps() + dev_deps(), "pyproject.toml dependencies and the dev extra")


def test_the_build_lock_pins_the_build_backend_and_tools() -> None:
    assert_locked("build", build_deps(), "pyproject.toml [build-system] and requirements/build.in")


def test_the_operator_lock_is_the_runtime_lock_without_pyspark() -> None:
    assert_locked("operator", [r for r in runtime_deps() if canonicalize_name(r.name) != NOT_IN_OPERATOR],
                  "pyproject.toml dependencies but pyspark")
    operator, runtime = lock("operator"), lock("runtime")
    assert NOT_IN_OPERATOR not in operator, "the operator's image must not get pyspark"
    for pkg, pin in operator.items():
        assert pkg in runtime and runtime[pkg].version == pin.version, (
            f"requirements/operator.lock pins {pkg}=={pin.version}, the job's lock "
            f"{runtime[pkg].version if pkg in runtime else 'nothing'}: {REGENERATE}")


def test_the_venv_runs_what_the_images_run() -> None:
    dev, runtime = lock("dev"), lock("runtime")
    differ = {p: (pin.version, dev[p].version if p in dev else None) for p, pin in runtime.items()
              if p not in dev or dev[p].version != pin.version}
    assert not differ, f"runtime vs dev lock versions differ: {differ}: {REGENERATE}"


def test_no_locked_package_is_left_over_from_a_removed_dependency() -> None:
    for name, reqs in (("runtime", runtime_deps()), ("dev", runtime_deps() + dev_deps())):
        direct = {canonicalize_name(r.name) for r in reqs}
        for pkg, pin in lock(name).items():
            if pin.via == ["floe (pyproject.toml)"]:
                assert pkg in direct, (
                    f"requirements/{name}.lock still pins {pkg}, which pyproject.toml dropped: {REGENERATE}")


def test_the_venv_and_the_images_install_from_the_locks_with_hashes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install -q --require-hashes -r requirements/build.lock" in makefile
    assert "pip install -q --require-hashes --no-build-isolation -r requirements/dev.lock" in makefile
    assert "pip install -q --no-deps --no-build-isolation -e ." in makefile
    for image, name in (("job", "runtime"), ("operator", "operator")):
        text = (ROOT / "images" / f"{image}.Dockerfile").read_text()
        assert f"COPY requirements/{name}.lock /tmp/" in text, image
        assert f"--require-hashes --no-build-isolation --wheel-dir /deps -r /tmp/{name}.lock" in text, image
        assert "--require-hashes -r /tmp/build.lock" in text, image


def test_parse_lock_refuses_a_range() -> None:
    with pytest.raises(AssertionError, match="not an exact pin"):
        parse_lock("kopf>=1.45 \\\n    --hash=sha256:" + "0" * 64 + "\n")
