"""The pure parts of a release (floe_stack.release): the chart's OCI layout, the renamed image
archives, the SBOMs and the checksums; and the one version every file that names one agrees with.
`tests/integration/chart/test_release_live.py` installs a built release on the node."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from floe_stack import images, release
from floe_stack.layout import Layout

ROOT = Path(__file__).resolve().parents[3]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE_TAG = re.compile(r"ghcr\.io/floe-dev/floe-(?:job|operator):([\w.+-]+)")
# Folders that hold no source (builds, caches, the stack's runtime files, measured results), and
# the tests, whose made-up releases carry made-up versions.
NOT_SOURCE = {".git", ".venv", "build", ".floe", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__",
              "floe.egg-info", "results", "tests"}


def _sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


# -- one version ------------------------------------------------------------------------------------

def test_the_chart_version_and_app_version_are_pyprojects() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "floe" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION), (
        "charts/floe/Chart.yaml's version and appVersion must equal pyproject.toml's version "
        f"{VERSION} (docs/releasing.md)")


def test_every_image_tag_written_in_the_repository_is_pyprojects_version() -> None:
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*"):
        if not path.is_file() or NOT_SOURCE & set(path.relative_to(ROOT).parts):
            continue
        if path.suffix not in {".md", ".yaml", ".yml", ".Dockerfile", ".py", ".json", ".tpl", ".txt"}:
            continue
        for tag in IMAGE_TAG.findall(path.read_text(errors="replace")):
            found.setdefault(tag, set()).add(str(path.relative_to(ROOT)))
    assert any("examples/word-count/streamingapp.yaml" in files for files in found.values())
    wrong = {tag: sorted(files) for tag, files in found.items() if tag != VERSION}
    assert not wrong, f"image tags other than pyproject.toml's version {VERSION}: {wrong}"


def test_the_version_is_semantic_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    assert release.project_version(ROOT) == VERSION
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "floe"\nversion = "0.2"\n')
    with pytest.raises(release.ReleaseError, match=r"'0.2' is not a semantic version"):
        release.project_version(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "floe"\nversion = "1.0.0-rc.1"\n')
    assert release.project_version(tmp_path) == "1.0.0-rc.1"


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert headings and headings[0] == "Unreleased", "CHANGELOG.md starts with an ## [Unreleased] section"
    assert all(release.SEMVER.fullmatch(h) for h in headings[1:]), headings


def test_the_license_is_the_apache_license_2_0_unmodified() -> None:
    # The sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt.
    digest = hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest()
    assert digest == "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
    assert "The Floe authors" in (ROOT / "NOTICE").read_text()


# -- the chart as an OCI layout ---------------------------------------------------------------------

CHART_YAML = {"apiVersion": "v2", "name": "floe", "version": "1.2.3", "appVersion": "1.2.3",
              "description": "d", "home": "https://example.org/floe"}


def _chart_tgz() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("floe/Chart.yaml", yaml.safe_dump(CHART_YAML).encode()), ("floe/values.yaml", b"{}\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_the_chart_oci_layout_digests_and_media_types_are_consistent() -> None:
    tgz = _chart_tgz()
    files = release.chart_oci_layout(tgz)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {f"sha256:{rel.rsplit('/', 1)[1]}": data for rel, data in files.items() if rel.startswith("blobs/")}
    assert all(_sha(data) == digest for digest, data in blobs.items()), "a blob is not stored under its digest"
    index = json.loads(files["index.json"])
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    [entry] = index["manifests"]
    assert entry["annotations"] == {"org.opencontainers.image.ref.name": "1.2.3"}
    manifest_bytes = blobs[entry["digest"]]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    assert manifest["mediaType"] == entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = manifest["config"]
    assert config["mediaType"] == "application/vnd.cncf.helm.config.v1+json"
    assert config["size"] == len(blobs[config["digest"]])
    assert json.loads(blobs[config["digest"]]) == CHART_YAML
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    assert (layer["digest"], layer["size"]) == (_sha(tgz), len(tgz))
    assert blobs[layer["digest"]] == tgz
    assert set(blobs) == {entry["digest"], config["digest"], layer["digest"]}
    assert manifest["annotations"]["org.opencontainers.image.version"] == "1.2.3"


def test_the_chart_default_image_line_is_there_to_point_at_another_registry() -> None:
    values = (ROOT / "charts" / "floe" / "values.yaml").read_text()
    assert values.count(release.CHART_IMAGE_LINE) == 1
    assert yaml.safe_load(values)["image"]["repository"] == release.image_refs(release.REGISTRY, VERSION)[
        "operator"].rsplit(":", 1)[0]


# -- the image archives -----------------------------------------------------------------------------

def test_a_renamed_archive_names_its_image_for_ctr_and_skopeo_and_keeps_every_blob(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    src = tmp_path / "src.oci.tar"
    images.write_oci_archive(src, ref="localhost/floe/job:abc", layers=[layer], config={"Cmd": ["hello"]},
                             created_by="test")
    dest = tmp_path / "dest.oci.tar"
    ref = "ghcr.io/floe-dev/floe-job:1.2.3"
    digest = release.rename_archive(src, dest, ref)

    def members(path: Path) -> dict[str, bytes]:
        with tarfile.open(path) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]

    before, after = members(src), members(dest)
    assert set(before) == set(after)
    assert {n for n in before if before[n] != after[n]} == {"index.json"}
    [entry] = json.loads(after["index.json"])["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == ref
    assert entry["annotations"]["io.containerd.image.name"] == ref
    assert entry["digest"] == digest == _sha(after[f"blobs/sha256/{digest.split(':')[1]}"])


def test_an_archive_of_several_images_is_refused() -> None:
    index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": "sha256:a"}, {"digest": "sha256:b"}]})
    with pytest.raises(release.ReleaseError, match="lists 2 manifests"):
        release.renamed_index(index.encode(), "x/y:1")


# -- SBOM ----------------------------------------------------------------------------------------------

def _lock_pins(lock: str) -> set[str]:
    return {line.split("==")[0] for line in (ROOT / "requirements" / lock).read_text().splitlines()
            if "==" in line and not line.startswith((" ", "#"))}


def _sbom(image: str) -> dict[str, object]:
    ref = release.image_refs(release.REGISTRY, VERSION)[image]
    return release.sbom(image=image, ref=ref, version=VERSION, digest="sha256:" + "0" * 64,
                        packages=release.image_packages(ROOT, image))


def test_the_job_sbom_has_every_locked_python_package_and_every_maven_jar() -> None:
    doc = _sbom("job")
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.5")
    assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", str(doc["serialNumber"]))
    components = doc["components"]
    assert isinstance(components, list)
    purls = {c["purl"] for c in components if "purl" in c}
    assert all(c["type"] == "library" for c in components if "purl" in c)
    pypi = {p.split("/", 1)[1].split("@")[0] for p in purls if p.startswith("pkg:pypi/")}
    assert pypi == _lock_pins("runtime.lock") and "pyspark" in pypi
    dockerfile = (ROOT / "images" / "job.Dockerfile").read_text()
    env_jars = re.search(r"FLOE_SPARK_JARS=(\S+)", dockerfile)
    assert env_jars
    jars = {p.rsplit("/", 1)[1] for p in env_jars.group(1).split(",")}
    maven = {p for p in purls if p.startswith("pkg:maven/")}
    assert len(maven) == len(jars) == 4
    for purl in maven:
        group, artifact, version = re.fullmatch(r"pkg:maven/([^/]+)/([^@]+)@([^?]+)\?type=jar", purl).groups()  # type: ignore[union-attr]
        assert f"{artifact}-{version}.jar" in jars
        assert f"${{MAVEN}}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar" in dockerfile
    assert "pkg:maven/org.apache.kafka/kafka-clients@3.9.0?type=jar" in maven


def test_the_operator_sbom_has_its_own_lock_without_pyspark_or_jars() -> None:
    doc = _sbom("operator")
    purls = {c["purl"] for c in doc["components"] if "purl" in c}  # type: ignore[attr-defined]
    assert {p.split("/", 1)[1].split("@")[0] for p in purls} == _lock_pins("operator.lock")
    assert not any(p.startswith("pkg:maven/") or "pyspark" in p for p in purls)
    meta = doc["metadata"]["component"]  # type: ignore[index]
    assert meta["type"] == "container" and meta["name"] == "floe-operator"
    assert meta["purl"] == ("pkg:oci/floe-operator@sha256%3A" + "0" * 64
                            + f"?repository_url=ghcr.io/floe-dev/floe-operator&tag={VERSION}")


def test_a_locked_name_is_normalised_and_its_version_read_without_hashes() -> None:
    lock = "Foo_Bar.baz==1.0 \\\n    --hash=sha256:00\n    # via x\nqux==2.0rc1 ; python_version >= '3'\n"
    assert [(p.name, p.version) for p in release.locked_packages(lock)] == [("foo-bar-baz", "1.0"), ("qux", "2.0rc1")]


def _jar(entries: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as jar:
        for name, text in entries.items():
            jar.writestr(name, text)
    return buf.getvalue()


def _pom(group: str, artifact: str, version: str) -> str:
    return f"#Generated by Maven\ngroupId={group}\nartifactId={artifact}\nversion={version}\n"


def test_a_jar_is_named_by_its_own_pom_properties_else_by_its_file_name() -> None:
    shaded = _jar({"META-INF/maven/com.google.guava/guava/pom.properties": _pom("com.google.guava", "guava", "33.0"),
                   "META-INF/maven/org.apache.spark/spark-core_2.13/pom.properties":
                       _pom("org.apache.spark", "spark-core_2.13", "4.0.0")})
    own = release.jar_package("pyspark/jars/spark-core_2.13-4.0.0.jar", shaded)
    assert own.purl == "pkg:maven/org.apache.spark/spark-core_2.13@4.0.0?type=jar"
    classified = release.jar_package("jars/jline-3.27.1-jdk8.jar", _jar({
        "META-INF/maven/org.jline/jline/pom.properties": _pom("org.jline", "jline", "3.27.1")}))
    assert classified.purl == "pkg:maven/org.jline/jline@3.27.1?classifier=jdk8&type=jar"
    bare = release.jar_package("jars/scala-library-2.13.16.jar", _jar({"scala/Predef.class": ""}))
    assert (bare.name, bare.version, bare.purl, bare.ref) == ("scala-library", "2.13.16", None,
                                                              "jar:scala-library@2.13.16")


def test_the_jars_of_an_image_archive_are_found_in_its_layers(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        for name, data in (
            ("opt/floe/jars/kafka-clients-3.9.0.jar",
             _jar({"META-INF/maven/org.apache.kafka/kafka-clients/pom.properties":
                   _pom("org.apache.kafka", "kafka-clients", "3.9.0")})),
            ("usr/lib/pyspark/jars/RoaringBitmap-1.3.0.jar", _jar({})),
            ("opt/floe/jars/commons-pool2-2.12.0.jar", _jar({})),
            ("usr/lib/readme.txt", b"not a jar"),
        ):
            raw = data if isinstance(data, bytes) else data.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    archive = tmp_path / "image.oci.tar"
    images.write_oci_archive(archive, ref="localhost/floe/job:abc", layers=[layer], config={}, created_by="test")
    found = release.image_jars(archive)
    kafka = "pkg:maven/org.apache.kafka/kafka-clients@3.9.0?type=jar"
    assert [p.ref for p in found] == ["jar:RoaringBitmap@1.3.0", "jar:commons-pool2@2.12.0", kafka]
    added = release.maven_jars("ADD ${MAVEN}/org/apache/kafka/kafka-clients/3.9.0/kafka-clients-3.9.0.jar /x/\n"
                               "ADD ${MAVEN}/org/apache/commons/commons-pool2/2.12.0/commons-pool2-2.12.0.jar /x/\n")
    assert [p.ref for p in added] == [kafka, "pkg:maven/org.apache.commons/commons-pool2@2.12.0?type=jar"]
    doc = release.sbom(image="job", ref="x/floe-job:1", version="1", digest="sha256:" + "0" * 64,
                       packages=[*found, *added])
    refs = [c["bom-ref"] for c in doc["components"]]
    assert len(refs) == len(set(refs)) == 4, "a jar the Dockerfile adds and the image holds is listed once"
    assert "jar:commons-pool2@2.12.0" not in refs, "a jar the Dockerfile adds is listed by its coordinates"


# -- checksums ----------------------------------------------------------------------------------------

def test_the_sums_verify_and_name_what_changed(tmp_path: Path) -> None:
    (tmp_path / "a.tgz").write_bytes(b"chart")
    (tmp_path / "x.oci" / "blobs").mkdir(parents=True)
    (tmp_path / "x.oci" / "blobs" / "b").write_bytes(b"blob")
    sums = release.sha256sums(tmp_path)
    (tmp_path / release.SUMS).write_text(sums)
    assert release.verify_sums(tmp_path, sums) == []
    # coreutils reads the same file, as a user runs it
    check = subprocess.run(["sha256sum", "-c", release.SUMS], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    (tmp_path / "a.tgz").write_bytes(b"tampered")
    (tmp_path / "extra").write_bytes(b"")
    (tmp_path / "x.oci" / "blobs" / "b").unlink()
    assert sorted(release.verify_sums(tmp_path, sums)) == ["a.tgz: sha256 differs", "extra: not listed",
                                                           "x.oci/blobs/b: missing"]


def test_only_a_release_folder_is_emptied_for_a_new_build(tmp_path: Path) -> None:
    for name in ("floe-1.2.3.tgz", "floe-1.2.3.oci", "index.yaml", "streamingapp-crd-1.2.3.yaml",
                 "streamingappsnapshot-crd-1.2.3.yaml", release.SUMS):
        (tmp_path / name).touch()
    assert release.replaceable(tmp_path)
    (tmp_path / "notes.txt").touch()
    assert not release.replaceable(tmp_path)
    with pytest.raises(release.ReleaseError, match="holds files no release writes"):
        release.build(Layout(root=ROOT, cache=tmp_path / "cache"), out=tmp_path)


def test_every_crd_of_the_chart_is_released_alone() -> None:
    crds = ROOT / "crds"
    assert sorted(f"{name}.yaml" for name in release.CRD_FILES) == sorted(p.name for p in crds.glob("*.yaml"))


def test_the_demo_and_the_chart_tests_adopt_every_crd_of_the_chart() -> None:
    from floe_stack import demo

    names = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in (ROOT / "crds").glob("*.yaml")}
    assert set(demo.CRDS) == names
