"""The node's configs, its clean-up parsing and the OCI archives images.py writes, without a node."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
from floe_stack import images, kube, node, stack
from floe_stack.layout import NODE_BRIDGE, NODE_BRIDGE_IP, POD_CIDR, Layout


@pytest.fixture
def paths(tmp_path: Path) -> node.Paths:
    return node.Paths(Layout(root=tmp_path / "repo", cache=tmp_path / "cache"))


def test_the_node_is_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    assert node.Node not in stack.components(with_node=False)
    assert node.Bridge not in stack.components(with_node=False)
    with_node = stack.components(with_node=True)
    assert with_node[0] is node.Bridge, "the bridge must exist before services listen on its address"
    assert with_node.index(node.Node) > with_node.index(kube.Kube)


def test_pods_reach_only_their_subnet_and_the_service_range(tmp_path: Path) -> None:
    (plugin,) = node.cni_config(tmp_path / "ipam")["plugins"]  # type: ignore[misc]
    assert plugin["type"] == "bridge" and plugin["bridge"] == NODE_BRIDGE
    assert plugin["ipMasq"] is False
    assert plugin["ipam"]["ranges"] == [[{"subnet": POD_CIDR, "gateway": NODE_BRIDGE_IP}]]
    assert plugin["ipam"]["routes"] == [{"dst": kube.SERVICE_CIDR}], "no default route out of the pod"
    assert plugin["ipam"]["dataDir"] == str(tmp_path / "ipam")


def test_containerd_restricts_oom_score_adj_and_uses_the_local_pause_image(paths: node.Paths) -> None:
    conf = node.containerd_config(paths, sandbox_image="localhost/floe/pause:abc")
    assert "restrict_oom_score_adj = true" in conf
    assert 'sandbox_image = "localhost/floe/pause:abc"' in conf
    assert f'address = "{paths.sock}"' in conf
    assert f'root = "{paths.containerd_root}"' in conf
    assert "SystemdCgroup = false" in conf


def test_kubelet_listens_on_loopback_with_cgroupfs(paths: node.Paths, tmp_path: Path) -> None:
    conf = node.kubelet_config(paths, port=1, healthz_port=2, ca=tmp_path / "ca.crt", resolv=tmp_path / "r")
    assert conf["cgroupDriver"] == "cgroupfs" and conf["failCgroupV1"] is False and conf["failSwapOn"] is False
    assert conf["address"] == "127.0.0.1" and conf["healthzBindAddress"] == "127.0.0.1"
    assert conf["readOnlyPort"] == 0
    assert conf["imageGCHighThresholdPercent"] == 100, "imported images cannot be pulled again"
    assert conf["containerRuntimeEndpoint"] == f"unix://{paths.sock}"


IPTABLES_SAVE = """\
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:DOCKER - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j DOCKER
-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A FORWARD -j FLOE-NODE
COMMIT
"""


def test_down_removes_only_the_node_chains_and_the_jumps_to_them() -> None:
    jumps, chains = node.chains_to_remove(IPTABLES_SAVE)
    assert chains == ["KUBE-SERVICES", "KUBE-SVC-NPX46M4PTMTKRN6Y"]
    assert jumps == [
        ["PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"],
        ["FORWARD", "-j", "FLOE-NODE"],
    ]


def test_teardown_of_a_checkout_whose_node_never_ran_touches_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    node.teardown(Layout(root=tmp_path / "repo", cache=tmp_path / "cache"), say=said.append)
    assert said == []


def test_image_keys_follow_their_inputs(tmp_path: Path) -> None:
    assert images.key("a", "b") == images.key("a", "b") != images.key("ab")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    before = images.tree_key(tmp_path, ["pkg"])
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert images.tree_key(tmp_path, ["pkg"]) == before, "caches never reach an image"
    (tmp_path / "pkg" / "m.py").write_text("x = 2\n")
    assert images.tree_key(tmp_path, ["pkg"]) != before


def test_oci_archive_is_a_valid_layout(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    (tmp_path / "hello").write_text("hi\n")
    with tarfile.open(layer, "w") as tar:
        tar.add(tmp_path / "hello", arcname="hello")
    archive = tmp_path / "img.oci.tar"
    images.write_oci_archive(archive, ref="localhost/floe/t:1", layers=[layer], config={"Cmd": ["/hello"]},
                             created_by="test")
    with tarfile.open(archive) as tar:
        blobs = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    for name, data in blobs.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(blobs["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/floe/t:1"
    manifest = json.loads(blobs[f"blobs/sha256/{entry['digest'].split(':')[1]}"])
    config = json.loads(blobs[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["rootfs"]["diff_ids"] == [layer["digest"] for layer in manifest["layers"]]
    assert len(config["history"]) == len(manifest["layers"]), "buildah needs a history entry per layer"
    assert config["config"] == {"Cmd": ["/hello"]}


def test_images_named_by_pods_and_workload_templates_are_in_use() -> None:
    listing = {"items": [
        {"kind": "Pod", "spec": {"containers": [{"image": "localhost/floe/job:a"}],
                                 "initContainers": [{"image": "localhost/floe/init:a"}]}},
        {"kind": "ReplicaSet", "spec": {"template": {"spec": {"containers": [{"image": "localhost/floe/job:old"}]}}}},
        {"kind": "Deployment",
         "spec": {"template": {"spec": {"containers": [{"image": "localhost/floe/operator:b"}]}}}},
        {"kind": "Deployment", "spec": {}},
    ]}
    assert node.referenced_images(listing) == {
        "localhost/floe/job:a", "localhost/floe/init:a", "localhost/floe/job:old", "localhost/floe/operator:b"}


def test_a_taken_bridge_names_the_checkout_whose_node_holds_it(tmp_path: Path) -> None:
    holder = tmp_path / "other-clone"
    (holder / ".floe" / "node").mkdir(parents=True)
    (holder / ".floe" / "node" / "host-state.json").write_text("{}")
    assert f"`make -C {holder} down`" in node.holder_message(holder)


def test_a_bridge_whose_holder_is_gone_says_how_to_remove_it(tmp_path: Path) -> None:
    message = node.holder_message(tmp_path / "deleted-clone")
    assert "no longer records it" in message and f"ip link delete {node.NODE_BRIDGE}" in message


def test_a_bridge_of_an_unknown_checkout_still_says_what_to_do() -> None:
    assert "run `make down` in that checkout first" in node.holder_message(None)
