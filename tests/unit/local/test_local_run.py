"""Local run mode starts replicas with exactly the pod template's command and environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from floe_operator import local, render

ROOT = Path(__file__).resolve().parents[3]
WORD_COUNT = ROOT / "examples" / "word-count" / "streamingapp.yaml"


def _app(**spec_overrides: object) -> dict[str, object]:
    body = yaml.safe_load(WORD_COUNT.read_text())
    body["metadata"]["namespace"] = "team-a"
    body["spec"].update(spec_overrides)
    return body


def _no_secrets(namespace: str, name: str, key: str) -> str:
    raise AssertionError(f"unexpected secret read {namespace}/{name}/{key}")


def test_replicas_run_the_rendered_command_with_the_rendered_config(tmp_path: Path) -> None:
    deployment, cm = local.rendered(_app())
    mounts = local.materialize_config_maps(deployment["spec"]["template"], {cm["metadata"]["name"]: cm}, tmp_path)
    ports = iter(range(9501, 9507))
    procs = local.local_processes(deployment, mounts=mounts, replicas=3, read_secret=_no_secrets,
                                  base_env={"PATH": "/bin"}, ports=lambda: next(ports), scratch=tmp_path / "s")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"] + container.get("args", [])
    assert [[Path(p.argv[0]).name, *p.argv[1:]] for p in procs] == [argv] * 3
    assert [p.name for p in procs] == ["word-count-local-0", "word-count-local-1", "word-count-local-2"]
    config_path = Path(procs[0].env["FLOE_CONFIG"])
    assert config_path.is_relative_to(tmp_path)
    assert config_path.read_text() == cm["data"][render.CONFIG_FILE]
    # each replica its own metrics and query ports: processes share one network namespace
    assert [(p.env["FLOE_METRICS_PORT"], p.env["FLOE_METRICS_QUERY_PORT"]) for p in procs] == [
        ("9501", "9502"),
        ("9503", "9504"),
        ("9505", "9506"),
    ]
    assert procs[1].env["FLOE_POD_NAME"] == "word-count-local-1"
    scratch = {p.env["SPARK_LOCAL_DIRS"] for p in procs}
    assert len(scratch) == 3 and all(Path(d).is_dir() for d in scratch), "replicas must not share Spark's dirs"
    assert procs[1].env["FLOE_POD_NAMESPACE"] == "team-a"
    assert all(p.env["FLOE_LOCAL_RUN"] == "true" and p.env["PATH"] == "/bin" for p in procs)
    rendered_names = {e["name"] for e in container["env"]}
    # all but the query token, whose Secret only the operator makes (a local endpoint is open),
    # and the list of Secret references, which named only that token here
    assert rendered_names - {local.QUERY_TOKEN_ENV, "FLOE_SECRET_REFS"} <= set(procs[0].env)
    assert "FLOE_SECRET_REFS" in rendered_names and "FLOE_SECRET_REFS" not in procs[0].env
    assert local.QUERY_TOKEN_ENV in rendered_names and local.QUERY_TOKEN_ENV not in procs[0].env
    assert all(p.env["FLOE_METRICS_QUERY_AUTH"] == "none" for p in procs)


def test_secret_references_are_resolved_through_the_reader(tmp_path: Path) -> None:
    body = _app()
    body["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": "cass-creds"}
    deployment, cm = local.rendered(body)
    mounts = local.materialize_config_maps(deployment["spec"]["template"], {cm["metadata"]["name"]: cm}, tmp_path)
    seen: list[tuple[str, str, str]] = []

    def reader(namespace: str, name: str, key: str) -> str:
        seen.append((namespace, name, key))
        return f"secret-{key}"

    (proc,) = local.local_processes(deployment, mounts=mounts, replicas=1, read_secret=reader, base_env={})
    assert proc.env["FLOE_CASSANDRA_USERNAME"] == "secret-username"
    assert proc.env["FLOE_CASSANDRA_PASSWORD"] == "secret-password"
    assert {s[:2] for s in seen} == {("team-a", "cass-creds")}
    assert "secret-password" not in cm["data"][render.CONFIG_FILE]


def test_a_missing_config_map_is_a_clear_error(tmp_path: Path) -> None:
    deployment, _ = local.rendered(_app())
    with pytest.raises(local.LocalRunError, match="mounts ConfigMap"):
        local.materialize_config_maps(deployment["spec"]["template"], {}, tmp_path)


def test_cli_rejects_a_file_that_is_not_a_streamingapp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cm.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert local.main(["run", "--manifest", str(bad)]) == 2
    assert "is not a StreamingApp manifest" in capsys.readouterr().err


def test_cli_print_lists_each_replica(capsys: pytest.CaptureFixture[str]) -> None:
    assert local.main(["run", "--manifest", str(WORD_COUNT), "--replicas", "2", "--print"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["word-count-local-0", "word-count-local-1"]
    assert all("floe-job" in line and "FLOE_CONFIG" in line for line in out)


def _replica(name: str, code: str) -> local.LocalProcess:
    import os
    import sys

    return local.LocalProcess(name, [sys.executable, "-c", code], {**os.environ, "FLOE_METRICS_PORT": "0"})


def test_a_drain_while_a_replica_waits_out_its_restart_backoff_exits_0(tmp_path: Path) -> None:
    """SIGINT drains what runs; a replica that crashed earlier and waits to be started again is not
    a failure of the drain."""
    import threading
    import time

    sup = local.Supervisor(
        [_replica("r0", "raise SystemExit(3)"), _replica("r1", "import time; time.sleep(60)")],
        grace_seconds=10,
        cwd=tmp_path,
    )
    def drain_in_the_backoff() -> None:
        deadline = time.monotonic() + 60
        while sup.restarts["r0"] < 1 and time.monotonic() < deadline:  # r0 crashed, waits to restart
            time.sleep(0.05)
        sup.stopping.set()

    threading.Thread(target=drain_in_the_backoff).start()
    assert sup.run() == 0
    assert sup.restarts == {"r0": 1, "r1": 0}


def test_a_replica_that_fails_its_drain_makes_the_run_fail(tmp_path: Path) -> None:
    import threading
    import time

    ready = tmp_path / "handler-installed"
    code = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(4)); "
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)"
    )
    sup = local.Supervisor([_replica("r0", code)], grace_seconds=10, cwd=tmp_path)

    def drain_once_the_handler_is_in() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        sup.stopping.set()

    threading.Thread(target=drain_once_the_handler_is_in).start()
    assert sup.run() == 1
