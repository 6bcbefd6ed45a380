"""The stack's one node, so that pods run for real: containerd and runc from Debian, the bridge
CNI plugin, and the kubelet and kube-proxy of the control plane's release. Part of the
stack unless ``FLOE_NODE=0`` (``make up NODE=0``).

The node borrows from the host, and ``down`` gives back:
- a bridge (``floe0``, 10.244.0.1/24) for pods, made before any service starts, because Kafka,
  Cassandra and the API server also listen on its address for pods. The CNI config has
  ``ipMasq: false`` and routes pods only to their subnet and the Service range, and a FORWARD
  guard drops anything from or to the pod subnet that would leave it: pods reach the node's
  bridge and each other, nothing else.
- kernel settings the kubelet and the bridge plugin change (``vm.overcommit_memory``,
  ``kernel.panic``, ``kernel.panic_on_oops``, ``net.ipv4.ip_forward`` and kin): recorded before
  the first start, restored by ``down``.
- pod network namespaces (``/run/netns/cni-*``), iptables chains (``KUBE-*`` and the guard), shim
  sockets, the kubelet's cgroups and its fixed host paths (``/var/lib/kubelet``,
  ``/var/log/containers``).

Only one node can run on a machine (the bridge and the chains are the host's); a second checkout
that tries gets an error naming the holder.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from floe_stack import artifacts, component, images, kube, ports, procs
from floe_stack.layout import ETCD_VERSION, KUBE_VERSION, NODE_BRIDGE, NODE_BRIDGE_IP, POD_CIDR, Layout

CONTAINERD, KUBELET, KUBE_PROXY = "containerd", "kubelet", "kube-proxy"
CLOSED_PORT = "127.0.0.1:9"  # discard: nothing listens there
DEBS = ("containerd", "runc", "containernetworking-plugins", "iptables", "conntrack")
CNI_BIN = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"
GUARD_CHAIN = "FLOE-NODE"
# What the kubelet sets when it starts (protectKernelDefaults off) and the bridge plugin turns on.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward")
# Host paths the kubelet uses whatever its root dir; removed on down when the node made them.
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/run/containerd")
SHIM_SOCKETS = Path("/run/containerd/s")
# Shared host folders the node may create; removed on down only if it made them and they are empty.
SHARED_DIRS = ("/run/netns",)


def node_name() -> str:
    return socket.gethostname().lower()


def _run(cmd: list[str], *, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise component.StackError(f"{what} failed: {' '.join(cmd)}\n{(proc.stdout + proc.stderr).strip()[-1500:]}")
    return proc


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


class Paths:
    """Where one checkout's node keeps its files."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.dir = layout.run / "node"
        self.state = self.dir / "host-state.json"
        self.sock = self.dir / "containerd.sock"
        self.cni_conf = self.dir / "cni"
        self.ipam = self.dir / "ipam"
        self.containerd_root = layout.data / "containerd"
        self.containerd_state = self.dir / "containerd-state"
        self.kubelet_root = layout.data / "kubelet"
        self.pod_logs = layout.data / "pod-logs"
        self.registry_hosts = self.dir / "registry-hosts"


def cni_config(ipam_dir: Path) -> dict[str, object]:
    """The pod network: the bridge plugin on ``floe0`` with host-local addresses, no masquerade,
    and routes to nothing but the pod subnet (connected) and the Service range."""
    return {
        "cniVersion": "0.4.0",
        "name": "floe",
        "plugins": [{
            "type": "bridge", "bridge": NODE_BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_BRIDGE_IP}]],
                     "routes": [{"dst": kube.SERVICE_CIDR}], "dataDir": str(ipam_dir)},
        }],
    }


def containerd_config(paths: Paths, *, sandbox_image: str) -> str:
    return f"""\
version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{paths.sock}"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # Root here lacks CAP_SYS_RESOURCE: without this, runc fails to set a container's
  # oom_score_adj below its own and reports only "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        Root = "{paths.containerd_state / 'runc'}"
        SystemdCgroup = false
  # Images are imported, never pulled: every registry is a closed port on loopback.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{paths.registry_hosts}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{paths.cni_conf}"
    max_conf_num = 1
"""


# containerd's fallback for every registry without a directory of its own (all of them).
NO_REGISTRY_HOSTS = f"""server = "http://{CLOSED_PORT}"
[host."http://{CLOSED_PORT}"]
  capabilities = ["pull", "resolve"]
"""

# An admission policy of the stack's API server: pods run only images built here (localhost/…),
# so no pod, whatever a test or a user applies, makes the node reach for a registry elsewhere.
LOCAL_IMAGES_POLICY = "floe-local-images-only"
LOCAL_IMAGES_MESSAGE = ("this stack's node runs only the images built here (localhost/floe/…, see FLOE_JOB_IMAGE "
                        "in .floe/stack.env); it has no registry to pull others from")


def local_images_policy() -> list[dict[str, object]]:
    """A ValidatingAdmissionPolicy and its binding that refuse pods with images outside localhost/."""
    images = ("object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
              " + (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : [])")
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": LOCAL_IMAGES_POLICY},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE", "UPDATE"],
                                                          "resources": ["pods"]}]},
                  "validations": [{"expression": f"({images}).all(c, c.image.startsWith('localhost/'))",
                                   "message": LOCAL_IMAGES_MESSAGE}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": LOCAL_IMAGES_POLICY},
         "spec": {"policyName": LOCAL_IMAGES_POLICY, "validationActions": ["Deny"]}},
    ]


def kubelet_config(paths: Paths, *, port: int, healthz_port: int, ca: Path, resolv: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # this kind of machine has cgroup v1
        "failSwapOn": False,
        "address": "127.0.0.1", "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "containerRuntimeEndpoint": f"unix://{paths.sock}",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        # Cluster DNS (dns.py) on the bridge; pods' own resolv.conf lists it and the cluster's
        # search path, and nothing from the host (there is no upstream resolver).
        "clusterDNS": [NODE_BRIDGE_IP],
        "clusterDomain": "cluster.local",
        "resolvConf": str(resolv),
        "podLogsDir": str(paths.pod_logs),
        "volumePluginDir": str(paths.kubelet_root / "volume-plugins"),
        # Images are imported, not pulled: nothing may collect them.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False,
    }


def kube_proxy_config(*, kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "clusterCIDR": POD_CIDR,
        "bindAddress": "127.0.0.1",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{NODE_BRIDGE_IP}/32"],
        # Leave the host's conntrack table settings as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def referenced_images(listing: dict[str, Any]) -> set[str]:
    """Every container and init container image named by a list of pods and of workloads."""
    found: set[str] = set()
    for item in listing.get("items") or []:
        spec = item.get("spec") or {}
        pod = spec if item.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
        for key in ("containers", "initContainers"):
            found.update(c["image"] for c in pod.get(key) or [] if c.get("image"))
    return found


def _iptables(family: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([family, "-w", *args], capture_output=True, text=True)


def guard() -> None:
    """FORWARD's first rule drops whatever would carry pod traffic past the pod subnet (the bridge
    plugin turns ip_forward on; pods talk to the host and each other without it). kube-proxy
    prepends its own jumps when it starts, so the node puts the guard back in front after it."""
    if _iptables("iptables", "-n", "-L", GUARD_CHAIN).returncode != 0:
        _run(["iptables", "-w", "-N", GUARD_CHAIN], what="iptables")
        for rule in (["-s", POD_CIDR, "-d", POD_CIDR, "-j", "RETURN"],
                     ["-s", POD_CIDR, "-j", "DROP"], ["-d", POD_CIDR, "-j", "DROP"]):
            _run(["iptables", "-w", "-A", GUARD_CHAIN, *rule], what="iptables")
    first = _iptables("iptables", "-S", "FORWARD", "1").stdout.strip()
    if first != f"-A FORWARD -j {GUARD_CHAIN}":
        while _iptables("iptables", "-D", "FORWARD", "-j", GUARD_CHAIN).returncode == 0:
            pass
        _run(["iptables", "-w", "-I", "FORWARD", "1", "-j", GUARD_CHAIN], what="iptables")


# The checkout whose node holds the bridge, machine-wide (the bridge is too): named when another
# checkout's `make up` finds the bridge taken, so the user knows where to run `make down`.
HOLDER = Path("/run/floe-node-holder")


def read_holder() -> Path | None:
    try:
        return Path(HOLDER.read_text().strip())
    except OSError:
        return None


def holder_message(holder: Path | None) -> str:
    """Why this checkout cannot start a node, and where to stop the one that runs."""
    head = f"the bridge {NODE_BRIDGE} exists but this checkout did not make it: only one node can run on a machine"
    if holder is None:
        return f"{head}; another checkout's node holds it: run `make down` in that checkout first"
    if not (holder / ".floe" / "node" / "host-state.json").exists():
        return (f"{head}; it was made by {holder}, which no longer records it: run `ip link delete "
                f"{NODE_BRIDGE}` (and `make down` there if that checkout still exists)")
    return f"{head}; the node of {holder} holds it: run `make down` there first (`make -C {holder} down`)"


class Bridge:
    """The pod bridge, the FORWARD guard and the record of the host settings the node changes.
    It comes first in the stack, so that services can listen on the bridge's address."""

    name = "node-network"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.paths = Paths(layout)

    def install(self) -> None:
        artifacts.debian_packages(DEBS)

    def start(self) -> None:
        p = self.paths
        exists = Path(f"/sys/class/net/{NODE_BRIDGE}").exists()
        if exists and not p.state.exists():
            raise component.StackError(holder_message(read_holder()))
        if not p.state.exists():
            p.dir.mkdir(parents=True, exist_ok=True)
            state = {
                "sysctl": {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS},
                "host_paths_made": [h for h in HOST_PATHS if not Path(h).exists()],
                "shared_dirs_made": [h for h in SHARED_DIRS if not Path(h).exists()],
                "started": time.time(),
            }
            p.state.write_text(json.dumps(state, indent=2) + "\n")
        HOLDER.write_text(str(self.layout.root) + "\n")
        if not exists:
            _run(["ip", "link", "add", NODE_BRIDGE, "type", "bridge"], what="creating the pod bridge")
        if NODE_BRIDGE_IP not in _run(["ip", "-4", "-o", "addr", "show", "dev", NODE_BRIDGE], what="ip addr").stdout:
            _run(["ip", "addr", "add", f"{NODE_BRIDGE_IP}/{POD_CIDR.split('/')[1]}", "dev", NODE_BRIDGE],
                 what="addressing the pod bridge")
        _run(["ip", "link", "set", NODE_BRIDGE, "up"], what="bringing the pod bridge up")
        guard()

    def wait_ready(self, timeout: float) -> None:
        if not Path(f"/sys/class/net/{NODE_BRIDGE}").exists():
            raise component.StackError(f"the pod bridge {NODE_BRIDGE} is missing")

    def env(self) -> dict[str, str]:
        return {"FLOE_NODE_BRIDGE_IP": NODE_BRIDGE_IP, "FLOE_POD_CIDR": POD_CIDR}

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        return f"pod network: bridge {NODE_BRIDGE} {NODE_BRIDGE_IP}, pods {POD_CIDR}, no masquerade"


class Node:
    """containerd, the kubelet and kube-proxy (after the control plane, which they register with)."""

    name = "node"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.paths = Paths(layout)
        self.kube = kube.Kube(layout, book)

        kubelet = procs.running_pid(layout, KUBELET) is not None
        proxy = procs.running_pid(layout, KUBE_PROXY) is not None
        self.kubelet_port = book.get("kubelet", 10250, owned_by_us=kubelet)
        self.kubelet_healthz = book.get("kubelet_healthz", 10248, owned_by_us=kubelet)
        self.proxy_healthz = book.get("kube_proxy_healthz", 10256, owned_by_us=proxy)
        self.proxy_metrics = book.get("kube_proxy_metrics", 10249, owned_by_us=proxy)
        self.images = images.Images(layout)
        self.book = book

    def install(self) -> None:
        artifacts.debian_packages(DEBS + images.BUILD_DEBS)
        artifacts.go_build_kube(self.layout, kube_version=KUBE_VERSION, etcd_version=ETCD_VERSION, target="node")
        self.pause = self.images.pause()

    def bin(self, name: str) -> str:
        return str(self.layout.bin / name)

    def ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.paths.sock), "--namespace", "k8s.io", *args]

    def imported(self) -> set[str]:
        proc = subprocess.run(self.ctr("images", "ls", "-q"), capture_output=True, text=True)
        return set(proc.stdout.split()) if proc.returncode == 0 else set()

    def import_image(self, image: images.Image) -> None:
        """Put an image into containerd's k8s.io namespace (unpacked for the CRI's snapshotter)."""
        if image.ref in self.imported():
            return
        _run(self.ctr("images", "import", "--snapshotter", "overlayfs", str(image.archive)),
             what=f"importing {image.ref} into containerd")
        have = self.imported()
        if image.ref not in have:
            raise component.StackError(f"{image.archive} was imported but containerd does not list {image.ref}")
        self.prune_older(image, have)

    def prune_older(self, image: images.Image, have: set[str] | None = None) -> list[str]:
        """Remove the older builds of `image` that nothing names any more; what was removed."""
        repo = image.ref.rsplit(":", 1)[0]
        imported = self.imported() if have is None else have
        stale = [ref for ref in imported if ref.startswith(f"{repo}:") and ref != image.ref]
        in_use = self.images_in_use()
        unused = sorted(ref for ref in stale if in_use is not None and ref not in in_use)
        if unused:
            subprocess.run(self.ctr("images", "rm", *unused), capture_output=True)
        return unused

    def images_in_use(self) -> set[str] | None:
        """Images that pods, ReplicaSets or Deployments name (what a pod started later may
        need: a replacement of a running app's pod starts from its ReplicaSet's template); None
        when the API server cannot tell, and then nothing is removed. An older build of an image
        stays until nothing names it: removing it under a running app left that app's next pod
        in ErrImageNeverPull."""
        proc = subprocess.run(
            [self.bin("kubectl"), f"--kubeconfig={self.kube.kubeconfig}", "get", "pods,replicasets,deployments",
             "--all-namespaces", "-o", "json"], capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        return referenced_images(json.loads(proc.stdout))

    def _check_services_on_bridge(self) -> None:
        """Pods need the services on the bridge; one started before the node was enabled is not.
        A service that does not answer on loopback either is still starting (this `up` started it,
        on the bridge too): only one that serves loopback alone is refused."""
        chosen = self.book.chosen
        wanted = {"the API server": (self.kube.port, self.kube.port),
                  "Kafka": (chosen.get("kafka"), chosen.get("kafka_pods")),
                  "Cassandra": (chosen.get("cassandra"), chosen.get("cassandra"))}
        for what, (loopback, port) in wanted.items():
            if port and loopback and ports.accepts(loopback) and not ports.accepts(port, host=NODE_BRIDGE_IP):
                raise component.StackError(
                    f"{what} does not listen on the node's bridge ({NODE_BRIDGE_IP}:{port}): it was started "
                    "without the node; run `make down`, then `make up`")

    def start(self) -> None:
        p = self.paths
        self._check_services_on_bridge()
        for d in (p.dir, p.cni_conf, p.containerd_state, p.kubelet_root, p.pod_logs):
            d.mkdir(parents=True, exist_ok=True)
        (p.cni_conf / "10-floe.conflist").write_text(json.dumps(cni_config(p.ipam), indent=2) + "\n")
        (p.registry_hosts / "_default").mkdir(parents=True, exist_ok=True)
        (p.registry_hosts / "_default" / "hosts.toml").write_text(NO_REGISTRY_HOSTS)
        if not procs.running_pid(self.layout, CONTAINERD):
            conf = p.dir / "containerd.toml"
            conf.write_text(containerd_config(p, sandbox_image=self.pause.ref))
            procs.start(self.layout, CONTAINERD, ["containerd", "--config", str(conf)], marker=str(conf))
        component.wait_until(lambda: subprocess.run(self.ctr("version"), capture_output=True).returncode == 0,
                             what="containerd", timeout=60, alive=component.alive(self.layout, CONTAINERD),
                             log=str(self.layout.log(CONTAINERD)))
        self.import_image(self.pause)
        self._certs()
        if not procs.running_pid(self.layout, KUBELET):
            resolv = p.dir / "resolv.conf"
            resolv.write_text("")
            conf = p.dir / "kubelet.json"
            conf.write_text(json.dumps(kubelet_config(
                p, port=self.kubelet_port, healthz_port=self.kubelet_healthz, ca=self.kube.dir / "ca.crt",
                resolv=resolv), indent=2) + "\n")
            procs.start(self.layout, KUBELET, [
                self.bin(KUBELET), f"--config={conf}", f"--kubeconfig={self.kube.dir / 'kubelet.kubeconfig'}",
                f"--root-dir={p.kubelet_root}", f"--hostname-override={node_name()}",
                f"--node-ip={NODE_BRIDGE_IP}", "--v=1",
            ], marker=str(conf))
        if not procs.running_pid(self.layout, KUBE_PROXY):
            conf = p.dir / "kube-proxy.json"
            conf.write_text(json.dumps(kube_proxy_config(
                kubeconfig=self.kube.dir / "kube-proxy.kubeconfig", healthz_port=self.proxy_healthz,
                metrics_port=self.proxy_metrics), indent=2) + "\n")
            procs.start(self.layout, KUBE_PROXY, [
                self.bin(KUBE_PROXY), f"--config={conf}", f"--hostname-override={node_name()}", "--v=1",
            ], marker=str(conf))

    def _certs(self) -> None:
        name = node_name()
        self.kube.cert("kubelet", f"/O=system:nodes/CN=system:node:{name}")
        self.kube.cert("kube-proxy", "/CN=system:kube-proxy")
        self.kube.write_kubeconfig("kubelet", "kubelet")
        self.kube.write_kubeconfig("kube-proxy", "kube-proxy")

    def node_ready(self) -> bool:
        proc = subprocess.run(
            [self.bin("kubectl"), f"--kubeconfig={self.kube.kubeconfig}", "get", "node", node_name(), "-o",
             "jsonpath={.status.conditions[?(@.type=='Ready')].status}"], capture_output=True, text=True)
        return proc.returncode == 0 and proc.stdout.strip() == "True"

    def _healthz(self, port: int) -> Callable[[], bool]:
        return lambda: component.answers(f"http://127.0.0.1:{port}/healthz")

    def wait_ready(self, timeout: float) -> None:
        component.wait_until(self._healthz(self.kubelet_healthz), what="kubelet", timeout=timeout,
                             alive=component.alive(self.layout, KUBELET), log=str(self.layout.log(KUBELET)))
        component.wait_until(self.node_ready, what=f"node {node_name()} (Ready)", timeout=timeout,
                             alive=component.alive(self.layout, KUBELET), log=str(self.layout.log(KUBELET)))
        component.wait_until(self._healthz(self.proxy_healthz), what="kube-proxy", timeout=timeout,
                             alive=component.alive(self.layout, KUBE_PROXY), log=str(self.layout.log(KUBE_PROXY)))
        guard()
        self.kube.apply(local_images_policy(), what="the node's admission policy")

    def env(self) -> dict[str, str]:
        return {
            "FLOE_NODE": "1", "FLOE_NODE_NAME": node_name(), "FLOE_CONTAINERD_ADDRESS": str(self.paths.sock),
            "FLOE_PAUSE_IMAGE": self.pause.ref,
            "FLOE_KUBE_APISERVER_PODS": f"https://{kube.SERVICE_IP}:443",
        }

    def processes(self) -> list[str]:
        return [CONTAINERD, KUBELET, KUBE_PROXY]

    def describe(self) -> str:
        return (f"node {node_name()}: containerd {self.paths.sock}, kubelet 127.0.0.1:{self.kubelet_port}, "
                f"kube-proxy (iptables), pause {self.pause.ref}")


class NodeImages:
    """The job and operator images, built here and imported into the node's containerd."""

    name = "images"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.node = Node(layout, book)
        self.built: dict[str, images.Image] = {}

    def install(self) -> None:
        imgs = images.Images(self.layout)
        artifacts.debian_packages(images.BUILD_DEBS)
        base = imgs.base()
        self.built = {"job": imgs.dockerfile("job", base), "operator": imgs.dockerfile("operator", base)}

    def start(self) -> None:
        for image in self.built.values():
            self.node.import_image(image)

    def wait_ready(self, timeout: float) -> None:
        have = self.node.imported()
        missing = [i.ref for i in self.built.values() if i.ref not in have]
        if missing:
            raise component.StackError(f"containerd lacks {', '.join(missing)}")

    def env(self) -> dict[str, str]:
        return {f"FLOE_{name.upper()}_IMAGE": image.ref for name, image in self.built.items()}

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        return ", ".join(f"{i.ref} ({images.size_bytes(i) / 2**20:.0f} MiB)" for i in self.built.values())


def summary(layout: Layout) -> str | None:
    """One line for `make status`: the node's readiness and its pods, or None without a node."""
    if procs.running_pid(layout, KUBELET) is None:
        return None
    kubeconfig = layout.run / "kube" / "admin.kubeconfig"
    kubectl = str(layout.bin / "kubectl")
    ready = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "get", "node", node_name(), "-o",
         "jsonpath={.status.conditions[?(@.type=='Ready')].status}"], capture_output=True, text=True)
    pods = subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", "get", "pods", "-A", f"--field-selector=spec.nodeName={node_name()}",
         "-o", "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}"], capture_output=True, text=True)
    phases = pods.stdout.split()
    running = sum(1 for p in phases if p == "Running")
    state = "Ready" if ready.stdout.strip() == "True" else f"not Ready ({ready.stdout.strip() or ready.stderr.strip()})"
    pods_line = f"{running} of {len(phases)} pods Running"
    return f"node {node_name()}: {state}, {pods_line}, bridge {NODE_BRIDGE} {NODE_BRIDGE_IP}"


# -- down ------------------------------------------------------------------------------------

def teardown(layout: Layout, *, say: Callable[[str], None] = print) -> None:
    """Stop the node and give back what it took from the host. A no-op for a checkout whose node
    never started (its record of the host's settings is the sign that it did)."""
    p = Paths(layout)
    if not p.state.exists():
        for name in (KUBE_PROXY, KUBELET, CONTAINERD):
            if procs.stop(layout, name):
                say(f"floe-stack: stopped {name}")
        return
    state = json.loads(p.state.read_text())
    for name in (KUBE_PROXY, KUBELET):
        if procs.stop(layout, name):
            say(f"floe-stack: stopped {name}")
    if procs.running_pid(layout, CONTAINERD):
        _remove_containers(p)
    if procs.stop(layout, CONTAINERD):
        say(f"floe-stack: stopped {CONTAINERD}")
    _unmount_under(p.kubelet_root)
    _unmount_under(p.containerd_state)
    for ns in Path("/run/netns").glob("cni-*") if Path("/run/netns").exists() else []:
        subprocess.run(["ip", "netns", "delete", ns.name], capture_output=True)
    if Path(f"/sys/class/net/{NODE_BRIDGE}").exists():
        subprocess.run(["ip", "link", "delete", NODE_BRIDGE], capture_output=True)
    shutil.rmtree(p.ipam, ignore_errors=True)
    for family in ("iptables", "ip6tables"):
        remove_chains(family)
    _remove_stale_shim_sockets()
    _remove_pod_cgroups()
    for name, value in state.get("sysctl", {}).items():
        try:
            _sysctl_path(name).write_text(value + "\n")
        except OSError as exc:
            say(f"floe-stack: could not restore {name.replace('/', '.')}={value}: {exc}")
    for path in state.get("host_paths_made", []):
        _unmount_under(Path(path))
        shutil.rmtree(path, ignore_errors=True)
    for path in state.get("shared_dirs_made", []):
        with contextlib.suppress(OSError):
            Path(path).rmdir()
    p.state.unlink()
    if read_holder() == layout.root:
        HOLDER.unlink(missing_ok=True)
    say("floe-stack: node cleaned up (bridge, netns, iptables chains, kernel settings restored)")


def _remove_containers(p: Paths) -> None:
    """Kill and remove every task and container in the k8s.io namespace, so no shim or pod
    process outlives the node."""
    base = ["ctr", "--address", str(p.sock), "--namespace", "k8s.io"]
    tasks = subprocess.run([*base, "tasks", "ls", "-q"], capture_output=True, text=True).stdout.split()
    for t in tasks:
        subprocess.run([*base, "tasks", "kill", "--signal", "SIGKILL", t], capture_output=True)
    deadline = time.monotonic() + 20
    for t in tasks:
        while subprocess.run([*base, "tasks", "delete", t], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    for c in subprocess.run([*base, "containers", "ls", "-q"], capture_output=True, text=True).stdout.split():
        subprocess.run([*base, "containers", "delete", c], capture_output=True)


def _unmount_under(root: Path) -> None:
    """Unmount everything mounted below ``root`` (secret volumes, overlay roots), deepest first."""
    prefix = str(root.resolve()) + "/"
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target.startswith(prefix) or target == prefix[:-1]:
            mounts.append(target)
    for target in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def chains_to_remove(rules: str) -> tuple[list[list[str]], list[str]]:
    """From one table of ``iptables-save`` output: the rules in built-in chains that jump to a
    node chain (to delete), and the node's chains (``KUBE-*`` and the guard) to flush and drop."""
    ours = ("KUBE-", GUARD_CHAIN)
    chains: list[str] = []
    jumps: list[list[str]] = []
    for line in rules.splitlines():
        if line.startswith(":"):
            name = line[1:].split()[0]
            if name.startswith(ours):
                chains.append(name)
        elif line.startswith("-A "):
            parts = shlex.split(line)  # comments are quoted: "kubernetes service portals"
            chain = parts[1]
            if not chain.startswith(ours) and "-j" in parts and parts[parts.index("-j") + 1].startswith(ours):
                jumps.append(parts[1:])
    return jumps, chains


def remove_chains(family: str) -> None:
    for table in ("filter", "nat", "mangle"):
        proc = subprocess.run([f"{family}-save", "-t", table], capture_output=True, text=True)
        if proc.returncode != 0:
            continue
        jumps, chains = chains_to_remove(proc.stdout)
        for rule in jumps:
            _iptables(family, "-t", table, "-D", *rule)
        for chain in chains:
            _iptables(family, "-t", table, "-F", chain)
        for chain in chains:
            _iptables(family, "-t", table, "-X", chain)


def _remove_pod_cgroups() -> None:
    """The kubelet's cgroup trees (``kubepods`` in each hierarchy), empty once its pods are gone."""
    for top in Path("/sys/fs/cgroup").glob("*/kubepods*"):
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _remove_stale_shim_sockets() -> None:
    """Shim sockets whose shim is gone (a shim removes its own when it exits cleanly)."""
    if not SHIM_SOCKETS.exists():
        return
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    listening = {line.split()[-1] for line in lines if len(line.split()) > 7}
    for sock in SHIM_SOCKETS.iterdir():
        if not any(str(sock) in entry for entry in listening):
            sock.unlink(missing_ok=True)

