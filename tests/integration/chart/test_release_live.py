"""A release installs from its artifacts alone (marker ``node``): the release is built as
`make release` builds it, its sums check, both image archives go into the node's containerd with
`ctr images import` as a user would load them on a node, and the packaged chart (the .tgz, not
charts/floe) installs the operator into a fresh namespace with the chart's default image, which
must be the imported one: no `--set image.*`.

The stack's node admits only images named ``localhost/…`` (an admission policy: it has no
registry), so this release is built for the registry ``localhost/floe-release``; `make release`
differs only in that name (docs/releasing.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from floe_stack import demo, release
from floe_stack.layout import Layout

from ...nodekit import require_node
from .livekit import ROOT, Run

REGISTRY = "localhost/floe-release"

pytestmark = [pytest.mark.node, pytest.mark.helm, pytest.mark.k8s]


@pytest.mark.timeout(1800)
def test_a_release_installs_on_the_node_from_its_artifacts_alone(
    stack_env: dict[str, str], kubectl: str, helm: str, run: Run, namespaces: Callable[[str], str],
    tmp_path: Path,
) -> None:
    env = require_node(stack_env)
    out = release.build(Layout.discover(ROOT), registry=REGISTRY, out=tmp_path / "release")
    version = release.project_version(ROOT)
    refs = release.image_refs(REGISTRY, version)
    ctr = ["ctr", "--address", env["FLOE_CONTAINERD_ADDRESS"], "--namespace", "k8s.io"]
    ns = namespaces("floe-release")
    name = f"floe-rel-{uuid.uuid4().hex[:5]}"
    installed = False
    try:
        # What a user does with the folder: check it, load the images on the node, install the package.
        sums = subprocess.run(["sha256sum", "-c", "--quiet", release.SUMS], cwd=out, capture_output=True, text=True)
        assert sums.returncode == 0, f"sha256sum -c {release.SUMS}: {sums.stdout}{sums.stderr}"
        for image in release.IMAGES:
            run(*ctr, "images", "import", str(out / f"floe-{image}-{version}.oci.tar"), timeout=600)
        listed = run(*ctr, "images", "ls", "-q").stdout.split()
        assert {refs["job"], refs["operator"]} <= set(listed), f"containerd lists {listed}, not {refs}"

        # The CRD is shared with the other tests and the demo's release: applied from the release's
        # own copy, and left out of this release (crds.enabled=false), as test_pods does.
        for crd in release.CRD_FILES:
            run(kubectl, "apply", "-f", str(out / f"{crd}-crd-{version}.yaml"))
        run(kubectl, "wait", "--for=condition=Established", *(f"crd/{name}" for name in demo.CRDS), "--timeout=60s")
        run(kubectl, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
        installed = True
        run(helm, "install", name, str(out / f"floe-{version}.tgz"), "--namespace", ns,
            "--set", "crds.enabled=false", "--set", f"operator.watchNamespaces={{{ns}}}")
        selector = f"app.kubernetes.io/instance={name}"
        waited = run(kubectl, "-n", ns, "wait", "deployment", "-l", selector, "--for=condition=Available",
                     "--timeout=300s", check=False, timeout=330)
        if waited.returncode != 0:
            pods = run(kubectl, "-n", ns, "get", "pods,events", "-o", "wide", check=False).stdout
            raise AssertionError(f"the operator's Deployment is not Available:\n{waited.stderr}\n{pods}")
        pods = json.loads(run(kubectl, "-n", ns, "get", "pods", "-l", selector, "-o", "json").stdout)["items"]
        images = {c["image"] for p in pods for c in p["spec"]["containers"]}
        assert images == {refs["operator"]}, f"the operator runs {images}, not the release's {refs['operator']}"
        run(helm, "uninstall", name, "--namespace", ns, "--wait", timeout=300)
        installed = False
    finally:
        if installed:
            run(helm, "uninstall", name, "--namespace", ns, check=False, timeout=300)
        subprocess.run([*ctr, "images", "rm", *refs.values()], capture_output=True)
        shutil.rmtree(out, ignore_errors=True)
