"""`make demo`: bring the stack up and show how to reach each component.

The word-count walk-through (operator, StreamingApp, replicas, counts) joins this as the
operator and job runtime land; until then the demo proves the stack and says how to use it.
"""

from __future__ import annotations

from floe_stack import envfile, stack
from floe_stack.layout import Layout


def main() -> None:
    layout = Layout.discover()
    env = envfile.read(layout.env_file) if stack.all_running(layout) else stack.up(layout, say=lambda _m: None)
    print("floe demo: the local stack is up")
    print(f"  Kafka      {env['FLOE_KAFKA_BOOTSTRAP']}  (Kafka {env['FLOE_KAFKA_VERSION']}, KRaft)")
    print(f"  Cassandra  {env['FLOE_CASSANDRA_HOSTS']}:{env['FLOE_CASSANDRA_PORT']}  (CQL)")
    print(f"  Kubernetes {env['FLOE_KUBE_APISERVER']}  (v{env['FLOE_KUBE_VERSION']})")
    print(f"  Helm       {env['FLOE_HELM']}")
    print(f"  Spark      {len(env['FLOE_SPARK_JARS'].split(','))} connector jars for Spark {env['FLOE_SPARK_VERSION']}")
    print("try next:")
    print(f"  source {layout.env_file}")
    print(f"  {env['FLOE_KUBECTL']} --kubeconfig {env['KUBECONFIG']} get namespaces")
    print("  make status   # processes and memory")
    print("  make test     # every test against this stack")


if __name__ == "__main__":
    main()
