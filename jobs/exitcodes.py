"""Exit codes of `floe-job`, in one place: the CLI returns them, the runner exits with them.

Whoever reads a replica's exit status (a person at `kubectl get pods`, a test) tells a failing
job from a bad setting, an unreachable dependency and an aborted drain by it.
"""

EXIT_OK = 0  # stopped gracefully (SIGTERM, drained and committed)
EXIT_FAILED = 1  # batches kept failing
EXIT_CONFIG = 2  # invalid configuration or entrypoint
EXIT_UNREACHABLE = 3  # Kafka or Cassandra unreachable (or an input topic missing) at start
EXIT_ABORTED = 4  # aborted during a drain (deadline or second SIGTERM); the batch is replayed by the next owner
