"""A Floe release: what `make release` writes to ``build/release/<version>/``, so that a user can
install Floe from these files alone, with no registry and no checkout (docs/releasing.md).

- ``floe-<version>.tgz`` and ``index.yaml``: the chart as ``helm package`` makes it, and a chart
  repository index for it, for ``helm install floe-<version>.tgz`` or a web server's
  ``helm repo add``. The index names the chart at ``--chart-url`` (where the release is hosted).
- ``floe-<version>.oci/``: the same .tgz as an OCI image layout, with Helm's own media types,
  for registries: ``oras cp --from-oci-layout`` (or any OCI layout copier) pushes it, and
  ``helm install oci://…`` installs it from there.
- ``floe-job-<version>.oci.tar`` and ``floe-operator-<version>.oci.tar``: the two images as OCI
  archives, named with the references the chart's default values and the examples use, so that
  ``ctr -n k8s.io images import`` on a node (or ``skopeo copy oci-archive:…`` to a registry)
  puts them where a pod finds them. They are the stack's own builds (floe_stack.images), never
  built a second way; only the name in the archive's index changes.
- ``floe-job-<version>.cdx.json``, ``floe-operator-<version>.cdx.json``: a CycloneDX 1.5 SBOM of
  each image's Python packages (its hash-pinned lock) and, for the job image, the Maven jars
  its Dockerfile adds, so a scanner can tell what each image carries without unpacking it.
- ``streamingapp-crd-<version>.yaml`` and ``streamingappsnapshot-crd-<version>.yaml``: each CRD
  alone, for clusters that install them apart from the chart (``crds.enabled=false``, GitOps).
- ``SHA256SUMS``: the sha256 of every other file (``sha256sum -c SHA256SUMS``).

The version is pyproject.toml's ``[project] version``, the one place it is written; the chart's
version and appVersion and the image tags in examples and docs must equal it
(tests/unit/stack/test_release.py).

    python -m floe_stack.release [--registry ghcr.io/floe-dev] [--chart-url URL] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import uuid
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from floe_stack import artifacts, helm, images
from floe_stack.layout import Layout

REGISTRY = "ghcr.io/floe-dev"
# Where the chart's default values say the operator image is; a release for another registry
# (--registry) rewrites this one line of the packaged values.yaml.
CHART_IMAGE_LINE = f"  repository: {REGISTRY}/floe-operator\n"
# The .tgz's address in index.yaml: the release's download folder on GitHub unless told.
CHART_URL = "https://github.com/floe-dev/floe/releases/download/v{version}"
IMAGES = ("job", "operator")
LOCKS = {"job": "requirements/runtime.lock", "operator": "requirements/operator.lock"}

OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# Helm's media types for a chart in an OCI registry (registered with IANA, HIP 0017).
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
SUMS = "SHA256SUMS"
# Semantic Versioning 2.0.0's grammar (pre-release and build parts included).
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")


class ReleaseError(RuntimeError):
    """A release cannot be built; the message says what to change."""


# -- the version --------------------------------------------------------------------------------

def project_version(root: Path) -> str:
    """pyproject.toml's version, checked to be a semantic version (the chart needs one)."""
    with open(root / "pyproject.toml", "rb") as f:
        version = str(tomllib.load(f)["project"]["version"])
    if not SEMVER.fullmatch(version):
        raise ReleaseError(f"pyproject.toml's version {version!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    return version


def image_refs(registry: str, version: str) -> dict[str, str]:
    """The reference each image of a release carries: ``<registry>/floe-<name>:<version>``."""
    return {name: f"{registry.rstrip('/')}/floe-{name}:{version}" for name in IMAGES}


# -- checksums ------------------------------------------------------------------------------------

def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != SUMS)


def sha256sums(folder: Path) -> str:
    """``sha256sum``'s format over every file under ``folder`` but SHA256SUMS, by relative path."""
    return "".join(f"{images.sha256_file(folder / rel)}  {rel}\n" for rel in _files(folder))


def verify_sums(folder: Path, text: str) -> list[str]:
    """What does not match ``text`` (a SHA256SUMS): changed, missing and unlisted files."""
    listed: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    problems = [f"{rel}: missing" for rel in listed if not (folder / rel).is_file()]
    problems += [f"{rel}: sha256 differs" for rel, d in listed.items()
                 if (folder / rel).is_file() and images.sha256_file(folder / rel) != d]
    problems += [f"{rel}: not listed" for rel in _files(folder) if rel not in listed]
    return problems


# -- the chart as an OCI image layout ------------------------------------------------------------

def chart_metadata(chart_tgz: bytes) -> dict[str, Any]:
    """Chart.yaml of a packaged chart, as parsed (the top folder's Chart.yaml)."""
    with tarfile.open(fileobj=io.BytesIO(chart_tgz), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.name.count("/") == 1 and member.name.endswith("/Chart.yaml"):
                f = tar.extractfile(member)
                assert f is not None
                meta: dict[str, Any] = yaml.safe_load(f.read())
                return meta
    raise ReleaseError("the chart package has no Chart.yaml")


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def chart_oci_layout(chart_tgz: bytes) -> dict[str, bytes]:
    """The files of an OCI image layout holding the packaged chart as Helm pushes one: a
    manifest whose config is Chart.yaml as JSON (``HELM_CONFIG``) and whose one layer is the
    .tgz (``HELM_CHART_LAYER``), tagged with the chart's version. Paths relative to the layout."""
    meta = chart_metadata(chart_tgz)
    config_digest, config = _blob(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    layer_digest, layer = _blob(chart_tgz)
    annotations = {"org.opencontainers.image.title": str(meta["name"]),
                   "org.opencontainers.image.version": str(meta["version"])}
    if meta.get("description"):
        annotations["org.opencontainers.image.description"] = str(meta["description"])
    if meta.get("home"):
        annotations["org.opencontainers.image.url"] = str(meta["home"])
    manifest_digest, manifest = _blob(json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": HELM_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": HELM_CHART_LAYER, "digest": layer_digest, "size": len(layer)}],
        "annotations": annotations,
    }, sort_keys=True, separators=(",", ":")).encode())
    index = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": len(manifest),
                       "annotations": {REF_NAME: str(meta["version"])}}],
    }, sort_keys=True, separators=(",", ":")).encode()
    files = {"oci-layout": OCI_LAYOUT, "index.json": index}
    for digest, data in ((manifest_digest, manifest), (config_digest, config), (layer_digest, layer)):
        files[f"blobs/sha256/{digest.split(':', 1)[1]}"] = data
    return files


def write_files(folder: Path, files: Mapping[str, bytes]) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


# -- the image archives ----------------------------------------------------------------------------

def renamed_index(index: bytes, ref: str) -> bytes:
    """An OCI archive's index.json with its one image named ``ref``, by the OCI annotation
    (skopeo, buildah) and containerd's own (``ctr images import`` names the image after it)."""
    doc = json.loads(index)
    manifests = doc.get("manifests") or []
    if len(manifests) != 1:
        raise ReleaseError(f"an image archive's index.json lists {len(manifests)} manifests, not one")
    annotations = dict(manifests[0].get("annotations") or {})
    annotations.update({REF_NAME: ref, CONTAINERD_NAME: ref})
    manifests[0]["annotations"] = annotations
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def rename_archive(src: Path, dest: Path, ref: str) -> str:
    """Copy the OCI archive ``src`` to ``dest`` with its image named ``ref`` (only index.json
    changes: the manifest, config and layers stay byte for byte, and so does the image's
    digest); the manifest's digest."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w") as tout:
        digest = ""
        for member in tin:
            f = tin.extractfile(member) if member.isfile() else None
            if member.name.removeprefix("./") == "index.json":
                assert f is not None
                data = renamed_index(f.read(), ref)
                digest = json.loads(data)["manifests"][0]["digest"]
                info = tarfile.TarInfo("index.json")
                info.size, info.mode, info.mtime = len(data), 0o644, member.mtime
                tout.addfile(info, io.BytesIO(data))
            else:
                tout.addfile(member, f)
    if not digest:
        raise ReleaseError(f"{src} has no index.json: not an OCI archive")
    return digest


# -- SBOM --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Package:
    """One component of an image: a PyPI package, a Maven artifact, or a jar that does not say
    its Maven coordinates (named after its file)."""

    name: str
    version: str
    group: str = ""  # Maven's groupId; empty for PyPI and for a jar without coordinates
    kind: str = "pypi"  # pypi, maven or jar
    classifier: str = ""  # a Maven artifact's classifier (jline-3.27.1-jdk8.jar: jdk8)

    @property
    def purl(self) -> str | None:
        """The package URL; None for a jar whose group is unknown (purl's maven type needs one)."""
        if self.kind == "maven":
            classifier = f"classifier={self.classifier}&" if self.classifier else ""
            return f"pkg:maven/{self.group}/{self.name}@{self.version}?{classifier}type=jar"
        if self.kind == "pypi":
            return f"pkg:pypi/{self.name}@{self.version}"
        return None

    @property
    def ref(self) -> str:
        return self.purl or f"jar:{self.name}@{self.version}"


LOCK_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", re.MULTILINE)
MAVEN_ADD = re.compile(r"^ADD\b.*?\$\{MAVEN\}/(\S+)/([^/\s]+)/([^/\s]+)/\2-\3\.jar\s", re.MULTILINE)


def locked_packages(lock: str) -> list[Package]:
    """Every pin of a hash-pinned lock (``name==version``), names normalised as PyPI's (PEP 503)."""
    return [Package(re.sub(r"[-_.]+", "-", name).lower(), version) for name, version in LOCK_PIN.findall(lock)]


def maven_jars(dockerfile: str) -> list[Package]:
    """The Maven artifacts a Dockerfile ADDs from ``${MAVEN}/<group path>/<artifact>/<version>/``."""
    return [Package(artifact, version, group=path.replace("/", "."), kind="maven")
            for path, artifact, version in MAVEN_ADD.findall(dockerfile)]


JAR_FILE = re.compile(r"(.+?)-(\d[^/]*)\.jar")


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    return {k.strip(): v.strip() for k, v in pairs}


def jar_package(path: str, data: bytes) -> Package:
    """The component a jar file is: its Maven coordinates from the ``pom.properties`` that names
    this very file (a shaded jar carries its dependencies' too), else name and version from the
    file name."""
    base = path.rsplit("/", 1)[-1]
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as jar:
            poms = [n for n in jar.namelist() if n.startswith("META-INF/maven/") and n.endswith("/pom.properties")]
            for name in poms:
                props = _properties(jar.read(name).decode("utf-8", errors="replace"))
                group, artifact, version = (props.get(k, "") for k in ("groupId", "artifactId", "version"))
                stem = f"{artifact}-{version}"
                if group and artifact and version and (base == f"{stem}.jar" or base.startswith(f"{stem}-")):
                    classifier = base[len(stem) + 1:-len(".jar")] if base != f"{stem}.jar" else ""
                    return Package(artifact, version, group=group, kind="maven", classifier=classifier)
    except zipfile.BadZipFile:
        pass
    m = JAR_FILE.fullmatch(base)
    return Package(m.group(1), m.group(2), kind="jar") if m else Package(base.removesuffix(".jar"), "", kind="jar")


def image_jars(archive: Path) -> list[Package]:
    """Every jar in the layers of the one image of the OCI archive ``archive`` (pyspark's, the
    Kafka connector's), as components."""
    found: set[Package] = set()
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> IO[bytes]:
            f = outer.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}")
            if f is None:
                raise ReleaseError(f"{archive} lacks the blob {digest}")
            return f

        index_file = outer.extractfile("index.json")
        if index_file is None:
            raise ReleaseError(f"{archive} has no index.json: not an OCI archive")
        manifest = json.load(blob(json.load(index_file)["manifests"][0]["digest"]))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as tar:
                for member in tar:
                    if member.isfile() and member.name.endswith(".jar"):
                        f = tar.extractfile(member)
                        assert f is not None
                        found.add(jar_package(member.name, f.read()))
    return sorted(found, key=lambda p: (p.group, p.name, p.version))


def sbom(*, image: str, ref: str, version: str, digest: str, packages: Sequence[Package]) -> dict[str, Any]:
    """A CycloneDX 1.5 BOM of the image ``image`` (``ref``, manifest ``digest``): Floe itself and
    ``packages``. The serial number is derived from the image's digest, so rebuilding a release
    from the same images writes the same file."""
    repository, _, _tag = ref.rpartition(":")
    # purl's oci type: the version is the manifest digest, its colon percent-encoded.
    image_purl = f"pkg:oci/floe-{image}@{digest.replace(':', '%3A')}?repository_url={repository}&tag={version}"
    components: list[dict[str, Any]] = [{
        "type": "application", "bom-ref": f"floe@{version}", "name": "floe", "version": version,
        "licenses": [{"license": {"id": "Apache-2.0"}}],
        "description": "the operator and the job runtime, installed in the image from this release's sources",
    }]
    # A jar without coordinates of its own that the Dockerfile adds by its coordinates is that artifact.
    known = {(p.name, p.version) for p in packages if p.kind == "maven"}
    unique = {p.ref: p for p in packages if p.kind != "jar" or (p.name, p.version) not in known}
    for p in sorted(unique.values(), key=lambda p: (p.kind, p.group, p.name, p.version)):
        component: dict[str, Any] = {"type": "library", "bom-ref": p.ref, "name": p.name}
        if p.version:
            component["version"] = p.version
        if p.group:
            component["group"] = p.group
        if p.purl:
            component["purl"] = p.purl
        components.append(component)
    return {
        "bomFormat": "CycloneDX", "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, image_purl)}", "version": 1,
        "metadata": {
            "component": {"type": "container", "bom-ref": image_purl, "name": f"floe-{image}", "version": version,
                          "purl": image_purl},
            "tools": {"components": [{"type": "application", "name": "floe_stack.release", "version": version}]},
        },
        "components": components,
        "dependencies": [{"ref": image_purl, "dependsOn": [c["bom-ref"] for c in components]}],
    }


def image_packages(root: Path, image: str) -> list[Package]:
    """What an image's SBOM lists from the sources: its lock's pins, and the Maven jars the job
    image's Dockerfile adds (``build`` adds every jar found in the built image)."""
    packages = locked_packages((root / LOCKS[image]).read_text())
    if image == "job":
        packages += maven_jars((root / "images" / "job.Dockerfile").read_text())
    return packages


# -- the build ---------------------------------------------------------------------------------------

# What a release folder holds, so that rebuilding one never removes anything else.
# the CRDs of crds/, each also released alone as <name>-crd-<version>.yaml
CRD_FILES = ("streamingapp", "streamingappsnapshot")
RELEASE_NAME = re.compile(r"floe-.+|streamingapp(snapshot)?-crd-.+\.yaml|index\.yaml|" + re.escape(SUMS))


def replaceable(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but what a release writes (an earlier or interrupted
    build of one), and may be emptied."""
    return all(RELEASE_NAME.fullmatch(p.name) for p in folder.iterdir())


def _run(cmd: Sequence[str], *, what: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReleaseError(f"{what} failed (exit {proc.returncode}): {(proc.stdout + proc.stderr).strip()[-1500:]}")


def _chart(root: Path, helm_bin: Path, out: Path, *, version: str, registry: str, chart_url: str) -> Path:
    """``helm package`` the chart with the release's version (and, for another registry, its
    operator image repository), then ``helm repo index`` the folder."""
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / "floe"
        shutil.copytree(root / "charts" / "floe", staged)
        if registry != REGISTRY:
            values = (staged / "values.yaml").read_text()
            if values.count(CHART_IMAGE_LINE) != 1:
                raise ReleaseError(f"charts/floe/values.yaml has no single line {CHART_IMAGE_LINE.strip()!r} to "
                                   "point at --registry; update floe_stack.release.CHART_IMAGE_LINE")
            repository = image_refs(registry, version)["operator"].rsplit(":", 1)[0]
            (staged / "values.yaml").write_text(values.replace(CHART_IMAGE_LINE, f"  repository: {repository}\n"))
        _run([str(helm_bin), "package", str(staged), "--destination", str(out), "--version", version,
              "--app-version", version], what="helm package")
    _run([str(helm_bin), "repo", "index", str(out), "--url", chart_url.format(version=version)], what="helm repo index")
    return out / f"floe-{version}.tgz"


def build(layout: Layout, *, registry: str = REGISTRY, chart_url: str = CHART_URL, out: Path | None = None,
          say: Any = print) -> Path:
    """Build the release of ``layout.root``'s tree into ``out`` (``build/release/<version>``,
    emptied first) and return the folder. Builds what is missing first: helm, the images."""
    root = layout.root
    version = project_version(root)
    out = out or root / "build" / "release" / version
    if out.exists():
        if not replaceable(out):
            raise ReleaseError(f"{out} holds files no release writes; remove it or choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    helm.build(layout)
    chart = _chart(root, layout.bin / "helm", out, version=version, registry=registry, chart_url=chart_url)
    write_files(out / f"floe-{version}.oci", chart_oci_layout(chart.read_bytes()))
    for crd in CRD_FILES:
        shutil.copyfile(root / "crds" / f"{crd}.yaml", out / f"{crd}-crd-{version}.yaml")
    say(f"release: chart {chart.name}, index.yaml, floe-{version}.oci/")

    artifacts.debian_packages(images.BUILD_DEBS)
    built = images.Images(layout)
    base = built.base()
    refs = image_refs(registry, version)
    for name in IMAGES:
        say(f"release: image {name} (built once per change of its inputs; minutes when it is)")
        image = built.dockerfile(name, base, prune=False)
        archive = out / f"floe-{name}-{version}.oci.tar"
        digest = rename_archive(image.archive, archive, refs[name])
        packages = image_packages(root, name) + image_jars(archive)
        doc = sbom(image=name, ref=refs[name], version=version, digest=digest, packages=packages)
        (out / f"floe-{name}-{version}.cdx.json").write_text(json.dumps(doc, indent=2) + "\n")
        say(f"release: {archive.name} ({refs[name]}, {digest}), {len(doc['components'])} SBOM components")
    (out / SUMS).write_text(sha256sums(out))
    return out


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m floe_stack.release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default=os.environ.get("FLOE_RELEASE_REGISTRY") or REGISTRY,
                        help=f"the images' registry and the chart's default operator repository (default {REGISTRY})")
    parser.add_argument("--chart-url", default=os.environ.get("FLOE_RELEASE_CHART_URL") or CHART_URL,
                        help="where the chart .tgz will be served, for index.yaml; {version} is replaced "
                             f"(default {CHART_URL})")
    parser.add_argument("--out", type=Path, help="the release folder (default build/release/<version>)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        out = build(Layout.discover(), registry=args.registry, chart_url=args.chart_url, out=args.out)
    except (ReleaseError, images.ImageError) as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    print(f"release: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
