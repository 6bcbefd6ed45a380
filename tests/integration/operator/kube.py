"""Small helpers the operator's integration tests use to drive the real API server.

Writes and commands go through kubectl, as a user's would. Reads (`get`, `list`), which tests
repeat every second or two while they wait, go straight to the API server over one kept-alive
connection of the same kubeconfig: a kubectl process costs about 90 ms of CPU, and a suite of
tests polling through thousands of them took minutes of the two cores the stack and the tests
share. The answer is the same object kubectl prints (`-o json`), looked up by the same names
(singular, plural or short, as `kubectl get` takes them).
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class Kubectl:
    def __init__(self, binary: str, kubeconfig: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self._reader: _Reader | None = None
        self._lock = threading.Lock()

    @property
    def reader(self) -> _Reader:
        with self._lock:
            if self._reader is None:
                self._reader = _Reader(self.kubeconfig)
            return self._reader

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; `timeout` must exceed any `--timeout` passed to kubectl itself."""
        proc = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, obj: dict[str, Any]) -> None:
        self.run("apply", "--server-side", "--field-manager=floe-tests", "-f", "-", stdin=yaml.safe_dump(obj))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The object as `kubectl get KIND NAME -n NAMESPACE -o json` prints it, or None when it
        does not exist (`--ignore-not-found`)."""
        return self.reader.get(kind, name, namespace)

    def list(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        """The items of `kubectl get KIND -n NAMESPACE [-l SELECTOR] -o json`."""
        return self.reader.list(kind, namespace, selector)


class _Reader:
    """GETs on the API server with the kubeconfig's credentials, and the discovery that maps a
    name kubectl takes (`pod`, `pods`, `hpa`, `streamingapp`) to its collection's path. A name
    not found is looked up again once, for a CRD established since the last discovery."""

    def __init__(self, kubeconfig: str) -> None:
        import kubernetes
        from floe_operator import k8s

        # the operator's own API calls (`k8s.Cluster`), over a client of the tests' kubeconfig
        self.cluster = k8s.Cluster(kubernetes.config.new_client_from_config(config_file=kubeconfig))
        self.paths: dict[str, tuple[str, str]] = {}

    def _json(self, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any] | None:
        """The decoded body of GET `path`, or None on 404."""
        status, parsed = self.cluster._call("GET", path, query=query, timeout=60)
        if status == 404:
            return None
        if not 200 <= status < 300 or not isinstance(parsed, dict):
            raise AssertionError(f"GET {path} failed: HTTP {status}: {str(parsed)[:500]}")
        return parsed

    def _discover(self) -> None:
        versions = [("/api/v1", "v1")]
        for group in (self._json("/apis") or {}).get("groups", []):
            gv = group["preferredVersion"]["groupVersion"]
            versions.append((f"/apis/{gv}", gv))
        for prefix, gv in versions:
            for res in (self._json(prefix) or {}).get("resources", []):
                if "/" in res["name"] or not res.get("namespaced"):
                    continue
                where = (f"{prefix}/namespaces/{{ns}}/{res['name']}", f"{gv}|{res['kind']}")
                for name in (res["name"], res.get("singularName") or res["kind"].lower(), *res.get("shortNames", [])):
                    # the core group's names first, as kubectl resolves them
                    self.paths.setdefault(name, where)

    def _where(self, kind: str) -> tuple[str, str]:
        key = kind.lower()
        if key not in self.paths:
            self._discover()
        if key not in self.paths:
            raise AssertionError(f"the API server serves no namespaced resource named {kind!r}")
        return self.paths[key]

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        collection, _ = self._where(kind)
        return self._json(f"{collection.format(ns=namespace)}/{name}")

    def list(self, kind: str, namespace: str, selector: str | None) -> list[dict[str, Any]]:
        collection, gv_kind = self._where(kind)
        found = self._json(collection.format(ns=namespace), [("labelSelector", selector)] if selector else None)
        api_version, kind_name = gv_kind.split("|")
        # a list's items carry no apiVersion and kind on the wire; kubectl's List gives them
        return [{"apiVersion": api_version, "kind": kind_name, **item} for item in (found or {}).get("items", [])]


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
