"""Floe's local stack: real Kafka, Cassandra, Kubernetes control plane, Helm and Spark's
Kafka connector, built from package registries and run as plain processes on loopback."""
