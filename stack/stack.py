"""Bringing the whole local stack up, reporting on it, and taking it down."""

from __future__ import annotations

import time
from collections.abc import Callable

from floe_stack import cassandra, component, dns, envfile, helm, kafka, kube, node, procs, prometheus, spark
from floe_stack.layout import Layout, node_enabled

Factory = Callable[[Layout, component.PortBook], component.Component]
COMPONENTS: tuple[Factory, ...] = (
    kafka.Kafka, cassandra.Cassandra, kube.Kube, helm.Helm, spark.SparkConnector, prometheus.Prometheus,
)
# With the node (unless FLOE_NODE=0): its bridge before every service, so they can listen on
# its address; containerd, kubelet and kube-proxy after the control plane, and cluster DNS;
# then the images.
NODE_FIRST: tuple[Factory, ...] = (node.Bridge,)
NODE_LAST: tuple[Factory, ...] = (node.Node, dns.ClusterDNS, node.NodeImages)


def components(*, with_node: bool) -> tuple[Factory, ...]:
    return (*NODE_FIRST, *COMPONENTS, *NODE_LAST) if with_node else COMPONENTS


def _components(
    layout: Layout, book: component.PortBook, *, with_node: bool | None = None
) -> list[component.Component]:
    with_node = node_enabled() if with_node is None else with_node
    return [make(layout, book) for make in components(with_node=with_node)]


def _names(layout: Layout) -> list[str]:
    """The stack's processes; the node's too while it runs, even when FLOE_NODE=0 is set now."""
    book = component.PortBook.load(layout)
    with_node = node_enabled() or node.Paths(layout).state.exists()
    return [p for c in _components(layout, book, with_node=with_node) for p in c.processes()]


def all_running(layout: Layout) -> bool:
    return all(procs.running_pid(layout, n) is not None for n in _names(layout))


def up(layout: Layout, *, say: Callable[[str], None] = print) -> dict[str, str]:
    """Install (from the cache when warm), start what is not running, wait until everything
    answers, write the env file. Running it again is a no-op that reports the stack."""
    t0 = time.monotonic()
    book = component.PortBook.load(layout)
    comps = _components(layout, book)
    book.save()
    for note in book.notes:
        say(f"floe-stack: {note}")
    was_running = {n: procs.running_pid(layout, n) is not None for c in comps for n in c.processes()}
    for c in comps:
        t = time.monotonic()
        c.install()
        say(f"floe-stack: {c.name} installed ({time.monotonic() - t:.1f} s)")
    for c in comps:
        c.start()
    env: dict[str, str] = {"FLOE_CACHE": str(layout.cache), "FLOE_BIN": str(layout.bin)}
    for c in comps:
        c.wait_ready(timeout=240)
        env.update(c.env())
        say(f"floe-stack: ready  {c.describe()}")
    if not node_enabled() and not was_running.get(kube.APISERVER, False):
        # etcd outlives `make down`: a stack that ran with the node keeps the node's admission
        # policy, which without the node would refuse every pod whose image was not built here
        # (checked when the API server starts: only the node, started with it, applies the policy)
        control_plane = next(c for c in comps if isinstance(c, kube.Kube))
        control_plane.delete(node.local_images_policy(), what="the node's admission policy")
    envfile.write(layout.env_file, env)
    restarted = [n for n, running in was_running.items() if not running]
    if not restarted:
        say("floe-stack: everything was already running")
    else:
        say(f"floe-stack: started {', '.join(restarted)}")
    say(f"floe-stack: up in {time.monotonic() - t0:.1f} s; env file {layout.env_file}")
    return env


def status(layout: Layout) -> list[tuple[str, int | None, int]]:
    """(process, pid or None, RSS bytes) for every process of the stack."""
    rows = []
    for name in _names(layout):
        pid = procs.running_pid(layout, name)
        rows.append((name, pid, procs.rss_bytes(pid) if pid else 0))
    return rows


def down(layout: Layout, *, say: Callable[[str], None] = print) -> None:
    """Stop the processes this checkout started, by pid file, in reverse start order; the node
    first (whatever FLOE_NODE says now), giving back what it took from the host, and the
    secured Cassandra node, which tests start."""
    node.teardown(layout, say=say)
    for name in [cassandra.SECURED, *reversed(_names(layout))]:
        if procs.stop(layout, name):
            say(f"floe-stack: stopped {name}")
