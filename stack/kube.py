"""A Kubernetes control plane of one release: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, built from the Go module proxy and run on loopback.

Certificates, the service-account signing key and the kubeconfigs are generated per
checkout (``.floe/kube``), and so is etcd's data: cluster state belongs to one checkout and
would not match another checkout's keys. Without the node (``FLOE_NODE=0``, see node.py) Pods
stay Pending, but every controller that works on API objects alone (Deployments → ReplicaSets,
garbage collection, namespaces, service accounts) runs for real. With the node, the API server
also listens on the node's bridge and advertises that address, so the ``kubernetes`` Service
leads pods to it, and it reaches the kubelet by the node's hostname.
"""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

from floe_stack import artifacts, component, procs
from floe_stack.layout import ETCD_VERSION, KUBE_VERSION, NODE_BRIDGE_IP, Layout, node_enabled

ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER = "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise component.StackError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


class Kube:
    name = "kubernetes"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.dir = layout.run / "kube"

        def ours(name: str) -> bool:
            return procs.running_pid(layout, name) is not None

        self.etcd_port = book.get("etcd", 2379, owned_by_us=ours(ETCD))
        self.etcd_peer_port = book.get("etcd_peer", 2380, owned_by_us=ours(ETCD))
        self.port = book.get("kube_apiserver", 6443, owned_by_us=ours(APISERVER))
        self.cm_port = book.get("kube_controller_manager", 10257, owned_by_us=ours(CONTROLLER_MANAGER))
        self.sched_port = book.get("kube_scheduler", 10259, owned_by_us=ours(SCHEDULER))

    # -- install ---------------------------------------------------------------------------
    def install(self) -> None:
        artifacts.go_build_kube(self.layout, kube_version=KUBE_VERSION, etcd_version=ETCD_VERSION)

    def bin(self, name: str) -> str:
        return str(self.layout.bin / name)

    # -- certificates and kubeconfigs -------------------------------------------------------
    def cert(self, name: str, subject: str, *, server: bool = False) -> None:
        """Issue ``name``.crt/.key from the checkout's CA, unless one with the same extensions exists."""
        d = self.dir
        ext = d / f"{name}.ext"
        if server:
            want = (
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth,clientAuth\n"
                "subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                f"DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:{SERVICE_IP},IP:{NODE_BRIDGE_IP}\n"
            )
        else:
            want = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=clientAuth\n")
        if (d / f"{name}.crt").exists() and ext.exists() and ext.read_text() == want:
            return
        _openssl("genrsa", "-out", str(d / f"{name}.key"), "2048")
        _openssl("req", "-new", "-key", str(d / f"{name}.key"), "-subj", subject, "-out", str(d / f"{name}.csr"))
        ext.write_text(want)
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", str(ext), "-out", str(d / f"{name}.crt"))

    def write_kubeconfig(self, name: str, cert: str) -> Path:
        d = self.dir
        path = d / f"{name}.kubeconfig"
        path.write_text(
            f"""apiVersion: v1
kind: Config
clusters:
- name: floe-local
  cluster:
    server: https://127.0.0.1:{self.port}
    certificate-authority: {d / 'ca.crt'}
users:
- name: {name}
  user:
    client-certificate: {d / f'{cert}.crt'}
    client-key: {d / f'{cert}.key'}
contexts:
- name: floe-local
  context: {{cluster: floe-local, user: {name}, namespace: default}}
current-context: floe-local
"""
        )
        path.chmod(0o600)
        return path

    def apply(self, objects: list[dict[str, object]], *, what: str) -> None:
        """Server-side apply of ``objects`` as the stack (``what`` names them in an error)."""
        docs = "\n---\n".join(json.dumps(o) for o in objects)
        proc = subprocess.run([self.bin("kubectl"), f"--kubeconfig={self.kubeconfig}", "apply", "--server-side",
                               "--field-manager=floe-stack", "-f", "-"], input=docs, capture_output=True, text=True)
        if proc.returncode != 0:
            raise component.StackError(f"applying {what} failed: {proc.stderr.strip()}")

    def delete(self, objects: list[dict[str, object]], *, what: str) -> None:
        """Delete ``objects`` when they exist (``what`` names them in an error)."""
        docs = "\n---\n".join(json.dumps(o) for o in objects)
        proc = subprocess.run([self.bin("kubectl"), f"--kubeconfig={self.kubeconfig}", "delete", "--ignore-not-found",
                               "-f", "-"], input=docs, capture_output=True, text=True)
        if proc.returncode != 0:
            raise component.StackError(f"deleting {what} failed: {proc.stderr.strip()}")

    def _pki(self) -> None:
        d = self.dir
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700)
        if not (d / "ca.crt").exists():
            _openssl("genrsa", "-out", str(d / "ca.key"), "2048")
            _openssl("req", "-x509", "-new", "-key", str(d / "ca.key"), "-days", "3650", "-subj", "/CN=floe-local-ca",
                     "-out", str(d / "ca.crt"))
        if not (d / "sa.key").exists():
            _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
            _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
        self.cert("apiserver", "/CN=kube-apiserver", server=True)
        self.cert("admin", "/O=system:masters/CN=floe-admin")
        self.cert("controller-manager", "/CN=system:kube-controller-manager")
        self.cert("scheduler", "/CN=system:kube-scheduler")
        self.cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
        self.write_kubeconfig("admin", "admin")
        self.write_kubeconfig("controller-manager", "controller-manager")
        self.write_kubeconfig("scheduler", "scheduler")

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    # -- processes ---------------------------------------------------------------------------
    def start(self) -> None:
        self._pki()
        self._start_etcd()
        self._start_apiserver()
        self.wait_apiserver(timeout=120)
        self._start_controllers()

    def _start_etcd(self) -> None:
        etcd_data = self.layout.run / "data" / "etcd"
        if not procs.running_pid(self.layout, ETCD):
            etcd_data.parent.mkdir(parents=True, exist_ok=True)
            procs.start(self.layout, ETCD, [
                self.bin("etcd"), "--name", "floe", "--data-dir", str(etcd_data),
                "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
                "--initial-cluster", f"floe=http://127.0.0.1:{self.etcd_peer_port}",
                "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn",
                "--unsafe-no-fsync",
            ], marker=str(etcd_data))

    def _start_apiserver(self) -> None:
        d = self.dir
        if not procs.running_pid(self.layout, APISERVER):
            if node_enabled():
                # Pods reach the API server on the node's bridge (through the `kubernetes`
                # Service, whose endpoint is the advertised address); the API server reaches
                # the kubelet by the node's hostname, which maps to loopback.
                where = ["--bind-address=0.0.0.0", f"--advertise-address={NODE_BRIDGE_IP}",
                         "--kubelet-preferred-address-types=Hostname,InternalIP",
                         f"--kubelet-client-certificate={d / 'apiserver-kubelet-client.crt'}",
                         f"--kubelet-client-key={d / 'apiserver-kubelet-client.key'}"]
            else:
                where = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]
            procs.start(self.layout, APISERVER, [
                self.bin(APISERVER),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                *where, f"--secure-port={self.port}",
                f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                f"--cert-dir={d / 'apiserver-certs'}",
                "--v=1",
            ], marker=f"--secure-port={self.port}")

    def _start_controllers(self) -> None:
        """The controller-manager and the scheduler, each unless it runs already."""
        d = self.dir
        if not procs.running_pid(self.layout, CONTROLLER_MANAGER):
            cm = self.write_kubeconfig("controller-manager", "controller-manager")
            procs.start(self.layout, CONTROLLER_MANAGER, [
                self.bin(CONTROLLER_MANAGER), f"--kubeconfig={cm}",
                f"--authentication-kubeconfig={cm}", f"--authorization-kubeconfig={cm}",
                "--bind-address=127.0.0.1", f"--secure-port={self.cm_port}",
                f"--service-account-private-key-file={d / 'sa.key'}", f"--root-ca-file={d / 'ca.crt'}",
                "--use-service-account-credentials=true", "--leader-elect=false",
                f"--cert-dir={d / 'controller-manager-certs'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--v=1",
            ], marker=f"--secure-port={self.cm_port}")
        if not procs.running_pid(self.layout, SCHEDULER):
            sc = self.write_kubeconfig("scheduler", "scheduler")
            procs.start(self.layout, SCHEDULER, [
                self.bin(SCHEDULER), f"--kubeconfig={sc}",
                f"--authentication-kubeconfig={sc}", f"--authorization-kubeconfig={sc}",
                "--bind-address=127.0.0.1", f"--secure-port={self.sched_port}", "--leader-elect=false",
                f"--cert-dir={d / 'scheduler-certs'}", "--v=1",
            ], marker=f"--secure-port={self.sched_port}")

    def _get(self, path: str, port: int) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.dir / "ca.crt"))
        if port != self.port:  # controller-manager and scheduler serve self-signed certificates
            ctx = ssl._create_unverified_context()
        return component.answers(f"https://127.0.0.1:{port}{path}", context=ctx)

    def wait_apiserver(self, timeout: float) -> None:
        component.wait_until(lambda: self._get("/readyz", self.port), what="kube-apiserver", timeout=timeout,
                             alive=component.alive(self.layout, APISERVER), log=str(self.layout.log(APISERVER)))

    def wait_ready(self, timeout: float) -> None:
        self.wait_apiserver(timeout)
        for name, port in ((CONTROLLER_MANAGER, self.cm_port), (SCHEDULER, self.sched_port)):
            component.wait_until(lambda p=port: self._get("/healthz", p), what=name, timeout=timeout,  # type: ignore[misc]
                                 alive=component.alive(self.layout, name), log=str(self.layout.log(name)))

    def env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "FLOE_KUBECTL": self.bin("kubectl"),
            "FLOE_KUBE_VERSION": KUBE_VERSION,
            "FLOE_KUBE_APISERVER": f"https://127.0.0.1:{self.port}",
        }

    def processes(self) -> list[str]:
        return [ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER]

    def describe(self) -> str:
        return (f"Kubernetes {KUBE_VERSION}: kube-apiserver https://127.0.0.1:{self.port}, etcd {ETCD_VERSION} "
                f"127.0.0.1:{self.etcd_port}, controller-manager :{self.cm_port}, scheduler :{self.sched_port}")
