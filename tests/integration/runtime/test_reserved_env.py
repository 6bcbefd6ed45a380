"""A replica started as the operator renders it stops at once, exit 2, naming a FLOE_ variable
that came from elsewhere (an envFrom ConfigMap or Secret in a pod); the same replica without it
gets past its configuration. The replicas are real `floe-job` processes, started the way local
run mode (`floe run`) starts them from the rendered Deployment and ConfigMap."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from floe_jobs.exitcodes import EXIT_CONFIG, EXIT_OK
from floe_operator import local

ROOT = Path(__file__).resolve().parents[3]
WORD_COUNT = ROOT / "examples" / "word-count" / "streamingapp.yaml"


def _no_secrets(namespace: str, name: str, key: str) -> str:
    raise AssertionError(f"unexpected secret read {namespace}/{name}/{key}")


def replica_env(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    body = yaml.safe_load(WORD_COUNT.read_text())
    body["metadata"]["namespace"] = "team-a"
    deployment, cm = local.rendered(body)
    mounts = local.materialize_config_maps(deployment["spec"]["template"], {cm["metadata"]["name"]: cm}, tmp_path)
    (proc,) = local.local_processes(
        deployment, mounts=mounts, replicas=1, read_secret=_no_secrets, base_env={"PATH": "/usr/bin:/bin"}
    )
    return proc.argv, proc.env


def check(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv, "--check"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_a_replica_as_rendered_gets_past_its_configuration(tmp_path: Path) -> None:
    argv, env = replica_env(tmp_path)
    proc = check(argv, env)
    assert proc.returncode == EXIT_OK, proc.stderr


def test_a_replica_with_a_foreign_floe_variable_exits_2_naming_it(tmp_path: Path) -> None:
    argv, env = replica_env(tmp_path)
    env["FLOE_KAFKA_EXTRA"] = '{"enable.ssl.certificate.verification": "false"}'
    proc = check(argv, env)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "FLOE_KAFKA_EXTRA: set, but not by the operator" in proc.stderr


def test_a_replica_with_a_misspelt_floe_variable_exits_2_naming_it(tmp_path: Path) -> None:
    argv, env = replica_env(tmp_path)
    env.pop("FLOE_ENV_NAMES", None)  # a replica started by hand: the check for unknown names only
    env["FLOE_KAFKA_MAX_RECORD_PER_BATCH"] = "10"
    proc = check(argv, env)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "FLOE_KAFKA_MAX_RECORD_PER_BATCH: no setting has this variable" in proc.stderr
