"""Fetching and building the stack's software from package registries, atomically.

Everything lands in a temporary directory first and is renamed into the cache only when it
is complete, so an interrupted or failed run never leaves a half-filled (poisoned) cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from floe_stack.layout import Layout

MAVEN_CENTRAL = "Maven Central"
GO_PROXY = "the Go module proxy"


class ArtifactError(RuntimeError):
    """A download or build failed; the message names the artifact and its registry."""


# Some poms (Spark's) declare extra repositories on hosts this machine cannot reach; a
# mirror of everything onto Maven Central keeps resolution on the one registry we use.
CENTRAL_ONLY_SETTINGS = """\
<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""


def _pom(coords: Sequence[str], excludes: Sequence[str]) -> str:
    deps = []
    for c in coords:
        group, artifact, version = c.split(":")
        exclusions = "".join(
            f"<exclusion><groupId>{e.split(':')[0]}</groupId><artifactId>{e.split(':')[1]}</artifactId></exclusion>"
            for e in excludes
        )
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>dev.floe.stack</groupId><artifactId>fetch</artifactId><version>0</version>"
        "<packaging>pom</packaging>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def maven_jars(
    layout: Layout,
    name: str,
    coords: Sequence[str],
    *,
    excludes: Sequence[str] = (),
) -> Path:
    """Resolve ``coords`` (group:artifact:version) and their runtime dependencies from Maven
    Central into ``<cache>/jars/<name>`` and return that directory."""
    dest = layout.jars / name
    if (dest / ".complete").exists():
        return dest
    layout.jars.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.jars, prefix=f".{name}-") as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(_pom(coords, excludes))
        (work / "settings.xml").write_text(CENTRAL_ONLY_SETTINGS)
        out = work / "lib"
        # -C (--strict-checksums): a jar or pom whose digest does not match the .sha1 Maven
        # Central publishes beside it fails the fetch (Maven only warns by default).
        cmd = [
            "mvn", "-B", "-q", "-C", "-s", str(work / "settings.xml"), "-f", str(work / "pom.xml"),
            "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
            f"-DoutputDirectory={out}", "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ArtifactError(
                f"could not fetch {', '.join(coords)} and dependencies from {MAVEN_CENTRAL} "
                f"(mvn exit {proc.returncode}):\n{tail}"
            )
        (out / ".complete").write_text("\n".join(coords) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(out, dest)
    return dest


def go_checksum_problem(go_env: dict[str, str]) -> str | None:
    """What, in ``go env``'s settings, would let a Go module in unchecked; None when every module
    is checked against go.sum and the Go checksum database (the default). The stack's Go
    builds write go.mod wrappers without a committed go.sum, so the database is the check."""
    if go_env.get("GOSUMDB", "").strip() in ("", "off"):
        return "GOSUMDB is off: unset it (the default, sum.golang.org) so Go checks every module's hash"
    for name in ("GONOSUMDB", "GOPRIVATE", "GOINSECURE"):
        if go_env.get(name, "").strip():
            return f"{name}={go_env[name]} exempts modules from the checksum database: unset it for the stack's builds"
    return None


def check_go_checksums() -> None:
    """Refuse a Go build that would take modules the checksum database did not check."""
    if shutil.which("go") is None:
        return  # the build itself says that Go is missing
    names = ["GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOINSECURE"]
    proc = subprocess.run(["go", "env", "-json", *names], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArtifactError(f"go env failed (is Go installed?):\n{proc.stderr[-1000:]}")
    problem = go_checksum_problem(json.loads(proc.stdout))
    if problem:
        raise ArtifactError(f"refusing to build from {GO_PROXY}: {problem}")


def go_build_kube(layout: Layout, *, kube_version: str, etcd_version: str, target: str = "all") -> None:
    """Build etcd and the Kubernetes control plane (``target`` "all"), or the node's kubelet and
    kube-proxy (``target`` "node"), with the Go toolchain (build-kube.sh)."""
    check_go_checksums()
    script = Path(__file__).with_name("build-kube.sh")
    env = dict(os.environ, FLOE_CACHE=str(layout.cache), KUBE_VERSION=kube_version, ETCD_VERSION=etcd_version)
    proc = subprocess.run(["bash", str(script), target], env=env)
    if proc.returncode != 0:
        raise ArtifactError(
            f"could not build Kubernetes v{kube_version} ({target}) / etcd v{etcd_version} from {GO_PROXY} "
            f"(see the output above)"
        )


def go_install(
    layout: Layout, *, package: str, version: str, binary: str, ldflags: str = "", tags: str = ""
) -> Path:
    """``go install package@version`` into a temporary GOBIN, then move the binary into the cache.
    ``tags`` are Go build tags (comma-separated); like ``ldflags`` they are part of the stamp, so
    changing either rebuilds."""
    target = layout.bin / binary
    flags = ldflags + (f" tags={tags}" if tags else "")
    stamp = layout.bin / f".{binary}-v{version}-{hashlib.sha1(flags.encode()).hexdigest()[:8]}"
    if stamp.exists() and target.exists():
        return target
    check_go_checksums()
    layout.bin.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.bin, prefix=f".{binary}-") as tmp:
        env = dict(os.environ, GOBIN=tmp, CGO_ENABLED="0")
        proc = subprocess.run(
            ["go", "install", "-trimpath", *([f"-tags={tags}"] if tags else []), f"-ldflags=-s -w {ldflags}".strip(),
             f"{package}@v{version}"],
            env=env, capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise ArtifactError(f"could not build {package}@v{version} from {GO_PROXY}:\n{proc.stderr[-2000:]}")
        os.replace(Path(tmp) / binary, target)
    stamp.touch()
    return target


def _deb_installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip().endswith("installed")


def debian_packages(packages: Sequence[str]) -> None:
    """Install whichever of ``packages`` are missing with apt-get (Debian's packages), so a new
    machine gets what the node needs from the project itself."""
    missing = [p for p in packages if not _deb_installed(p)]
    if not missing:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ArtifactError(
                f"could not install {', '.join(missing)} from Debian's packages ({' '.join(cmd[:2])}):\n{tail}")
