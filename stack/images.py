"""Container images built on this machine, where no image registry can be reached.

- ``pause``: the pod sandbox image containerd names as its ``sandbox_image``, a static C binary
  that sleeps until signalled and reaps zombies, in a one-layer OCI image written here.
- ``base``: Debian bookworm from ``debootstrap --variant=minbase`` with python3 and pip (the
  Release file's signature checked against Debian's archive keyring), standing
  in for ``python:3.11-slim-bookworm``; the Dockerfiles take it through their ``PYTHON_IMAGE``
  build argument, so the same files build FROM the public image anywhere else.
- ``job`` and ``operator``: ``images/*.Dockerfile`` built with ``buildah bud --pull=never`` on
  the host network. The host's CA bundle is mounted into each RUN step (this network
  intercepts TLS) and never lands in a layer.

Every image is kept as an OCI archive under ``$FLOE_CACHE/images``, named by a key over its
inputs, so an unchanged input never rebuilds; the node imports the archives into containerd.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from floe_stack.layout import Layout

SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
# The packages the image builds need on the host.
BUILD_DEBS = ("debootstrap", "debian-archive-keyring", "buildah", "gcc", "libc6-dev")
# debootstrap checks the suite's Release file against this keyring (and every package against
# the Release file's digests); naming it makes a missing keyring fail the build instead of a
# warning and an unchecked base.
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the Dockerfiles COPY from the repository (the build context is its root).
CONTEXT = ("pyproject.toml", "README.md", "LICENSE", "NOTICE", ".dockerignore", "operator", "jobs", "examples",
           "images/product_pyproject.py", "requirements")

PAUSE_C = r"""
/* The pod sandbox's process: holds the pod's namespaces, reaps orphans, exits on a signal. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction q = {0}, r = {0};
  q.sa_handler = quit;
  r.sa_handler = reap;
  r.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGINT, &q, 0);
  sigaction(SIGTERM, &q, 0);
  sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
"""

# Applied to the debootstrapped tree before it becomes a layer: no package lists or caches, no
# device nodes or host files, and pip may install into the system Python as in python:slim.
BASE_TRIM = (
    "var/lib/apt/lists", "var/cache/apt", "var/log", "dev", "proc", "sys", "run", "tmp",
    "etc/resolv.conf", "etc/hostname", "etc/hosts", "usr/lib/python3.11/EXTERNALLY-MANAGED",
)


class ImageError(RuntimeError):
    """An image could not be built or imported; the message says which and why."""


@dataclass(frozen=True)
class Image:
    """A built image: its reference (``localhost/floe/NAME:KEY``) and its OCI archive."""

    name: str
    ref: str
    archive: Path


def key(*parts: str | bytes) -> str:
    """A short content key over ``parts``: equal inputs give an equal key."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()[:16]


def tree_key(root: Path, paths: Iterable[str]) -> str:
    """A key over the files under ``paths`` (relative to ``root``), names and contents, leaving
    out Python caches that never reach an image."""
    h = hashlib.sha256()
    for rel in sorted(paths):
        top = root / rel
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc" or ".egg-info" in str(f):
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file, read a MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_oci_archive(
    dest: Path, *, ref: str, layers: Sequence[Path], config: Mapping[str, object], created_by: str
) -> None:
    """Write an OCI image archive (the layout of the OCI image spec, as one tar) holding one image
    named ``ref`` with uncompressed tar ``layers`` and the runtime ``config`` (Env, Entrypoint …).
    Each layer gets a history entry (builders that add layers, buildah among them, need one)."""
    digests = [sha256_file(p) for p in layers]
    epoch = "1970-01-01T00:00:00Z"
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": epoch, "config": dict(config),
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in digests]},
        "history": [{"created": epoch, "created_by": created_by} for _ in layers],
    }, sort_keys=True).encode()
    config_digest = hashlib.sha256(image_config).hexdigest()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": f"sha256:{config_digest}", "size": len(image_config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}",
                    "size": p.stat().st_size} for d, p in zip(digests, layers, strict=True)],
    }, sort_keys=True).encode()
    manifest_digest = hashlib.sha256(manifest).hexdigest()
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": f"sha256:{manifest_digest}",
            "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref},
        }],
    }, sort_keys=True).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    with tarfile.open(tmp, "w") as tar:
        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, fileobj=_BytesReader(data))

        add_bytes("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add_bytes("index.json", index)
        add_bytes(f"blobs/sha256/{manifest_digest}", manifest)
        add_bytes(f"blobs/sha256/{config_digest}", image_config)
        for d, p in zip(digests, layers, strict=True):
            info = tar.gettarinfo(str(p), arcname=f"blobs/sha256/{d}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(p, "rb") as f:
                tar.addfile(info, fileobj=f)
    os.replace(tmp, dest)


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        out, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return out


def _run(cmd: Sequence[str], *, what: str, log: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    full_env = dict(os.environ, **(env or {}))
    if log is None:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, env=full_env)
        out = proc.stdout + proc.stderr
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f:
            proc = subprocess.run(list(cmd), stdout=f, stderr=subprocess.STDOUT, text=True, env=full_env)
        out = log.read_text(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-20:])
        where = f"; the whole log: {log}" if log else ""
        raise ImageError(f"{what} failed (exit {proc.returncode}){where}:\n{tail}")
    return proc.stdout if log is None else ""


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (debootstrap and apt in builds use it too)."""
    if env := os.environ.get("FLOE_DEBIAN_MIRROR"):
        return env
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in src.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


class Images:
    """Builds (or finds in the cache) the pause, base, job and operator images."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.dir = layout.cache / "images"
        self.logs = layout.run / "logs"
        self.buildah_root = layout.cache / "buildah"

    def _archive(self, name: str, k: str) -> Image:
        return Image(name=name, ref=f"localhost/floe/{name}:{k}", archive=self.dir / f"{name}-{k}.oci.tar")

    # -- pause ------------------------------------------------------------------------------
    def pause(self) -> Image:
        gcc = _run(["gcc", "--version"], what="gcc --version").splitlines()[0]
        img = self._archive("pause", key(PAUSE_C, gcc, "history"))
        if img.archive.exists():
            return img
        with tempfile.TemporaryDirectory(dir=self._mkdir()) as tmp:
            work = Path(tmp)
            (work / "pause.c").write_text(PAUSE_C)
            _run(["gcc", "-static", "-Os", "-s", "-o", str(work / "pause"), str(work / "pause.c")],
                 what="compiling the pause binary")
            with tarfile.open(work / "layer.tar", "w") as tar:
                info = tar.gettarinfo(str(work / "pause"), arcname="pause")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                with open(work / "pause", "rb") as f:
                    tar.addfile(info, fileobj=f)
            write_oci_archive(img.archive, ref=img.ref, layers=[work / "layer.tar"],
                              config={"Entrypoint": ["/pause"], "User": "65535:65535"},
                              created_by="floe-stack: static pause binary")
        return img

    # -- base -------------------------------------------------------------------------------
    def base(self) -> Image:
        mirror = debian_mirror()
        img = self._archive("base", key(SUITE, "minbase", *BASE_PACKAGES, mirror, *BASE_TRIM, PATH_ENV, "history"))
        if img.archive.exists():
            return img
        with tempfile.TemporaryDirectory(dir=self._mkdir()) as tmp:
            root = Path(tmp) / "rootfs"
            _run(["debootstrap", "--variant=minbase", f"--keyring={DEBIAN_KEYRING}",
                  f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root), mirror],
                 what=f"debootstrap {SUITE} from {mirror}", log=self.logs / "image-base-debootstrap.log")
            for rel in BASE_TRIM:
                p = root / rel
                if p.is_dir() and not p.is_symlink():
                    for child in p.iterdir():
                        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
                elif p.exists() or p.is_symlink():
                    p.unlink()
            (root / "tmp").chmod(0o1777)
            layer = Path(tmp) / "layer.tar"
            _run(["tar", "--numeric-owner", "--sort=name", "--mtime=@0", "-C", str(root), "-cf", str(layer), "."],
                 what="packing the base image's layer")
            write_oci_archive(img.archive, ref=img.ref, layers=[layer],
                              config={"Env": [PATH_ENV, "LANG=C.UTF-8"], "Cmd": ["python3"]},
                              created_by=f"floe-stack: debootstrap --variant=minbase {SUITE}")
        return img

    # -- job and operator -------------------------------------------------------------------
    def _buildah(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.buildah_root / "storage"), "--runroot", str(self.buildah_root / "run"),
                *args]

    def dockerfile(self, name: str, base: Image, *, prune: bool = True) -> Image:
        """Build ``images/NAME.Dockerfile`` FROM ``base`` (cached by the Dockerfile, the base and
        the build context's files). ``prune`` drops the older builds of the image, which is right
        for the stack's own build; a release (floe_stack.release) builds from its checkout's tree
        next to the stack's images and leaves them be."""
        root = self.layout.root
        dockerfile = root / "images" / f"{name}.Dockerfile"
        img = self._archive(name, key(dockerfile.read_bytes(), base.ref, tree_key(root, CONTEXT)))
        if img.archive.exists():
            return img
        self._mkdir()
        self._ensure_in_buildah(base)
        volumes = ["-v", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"] if HOST_CA_BUNDLE.exists() else []
        _run(self._buildah("bud", "--pull=never", "--network", "host", "--layers",
                           "--build-arg", f"PYTHON_IMAGE={base.ref}", *volumes,
                           "-f", str(dockerfile), "-t", img.ref, str(root)),
             what=f"buildah bud {dockerfile.name}", log=self.logs / f"image-{name}-build.log")
        tmp = img.archive.with_name(f".{img.archive.name}.tmp")
        tmp.unlink(missing_ok=True)
        _run(self._buildah("push", img.ref, f"oci-archive:{tmp}:{img.ref}"), what=f"exporting {img.ref}")
        os.replace(tmp, img.archive)
        if prune:
            self._prune(img)
        return img

    def _prune(self, keep: Image) -> None:
        """Drop the older builds of ``keep``'s image: their archives and buildah's copies (the
        layers they share with ``keep`` stay, as buildah's build cache)."""
        for old in self.dir.glob(f"{keep.name}-*.oci.tar"):
            if old != keep.archive:
                old.unlink(missing_ok=True)
        listed = subprocess.run(self._buildah("images", "--format", "{{.Name}}:{{.Tag}}"),
                                capture_output=True, text=True).stdout.split()
        stale = [ref for ref in listed if ref.startswith(f"localhost/floe/{keep.name}:") and ref != keep.ref]
        if stale:
            subprocess.run(self._buildah("rmi", *stale), capture_output=True)

    def _ensure_in_buildah(self, base: Image) -> None:
        probe = subprocess.run(self._buildah("inspect", "--type", "image", base.ref), capture_output=True)
        if probe.returncode == 0:
            return
        image_id = _run(self._buildah("pull", "-q", f"oci-archive:{base.archive}"),
                        what=f"loading {base.archive.name} into buildah").strip().splitlines()[-1]
        _run(self._buildah("tag", image_id, base.ref), what=f"naming {base.ref}")

    def _mkdir(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir


def size_bytes(image: Image) -> int:
    return image.archive.stat().st_size
