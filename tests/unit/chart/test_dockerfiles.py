"""What can be checked of the images without building them (`make up` builds them).

Every file a Dockerfile copies from the build context (the repository root) exists, every
download is pinned by digest (ADD --checksum, or a `sha256sum -c` step naming the file), the
final stage runs as a non-root user, and the entrypoint is a console script that
pyproject.toml declares.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass

import pytest

from . import chartkit

IMAGES = chartkit.ROOT / "images"
DOCKERFILES = {"operator": IMAGES / "operator.Dockerfile", "job": IMAGES / "job.Dockerfile"}
ENTRYPOINTS = {"operator": "floe-operator", "job": "floe-job"}
PYPROJECT = tomllib.loads((chartkit.ROOT / "pyproject.toml").read_text())


@dataclass
class Instruction:
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with line continuations joined; heredoc bodies and comments dropped."""
    out: list[Instruction] = []
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines).strip()
        keyword, _, args = line.partition(" ")
        heredoc = re.search(r"<<-?'?([A-Z]+)'?", args)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break
        out.append(Instruction(keyword.upper(), args.strip()))
    return out


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    starts = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    return instructions[starts[-1] :]


def final(image: str, keyword: str) -> list[str]:
    """The arguments of every `keyword` instruction in the image's final stage."""
    return [ins.args for ins in final_stage(parse(DOCKERFILES[image].read_text())) if ins.keyword == keyword]


def checked_by_sha256sum(instructions: list[Instruction]) -> set[str]:
    """Files that a RUN step checks with `sha256sum -c` against a digest written in the Dockerfile."""
    names: set[str] = set()
    for ins in instructions:
        if ins.keyword == "RUN" and "sha256sum -c" in ins.args:
            names.update(re.findall(r"\b[0-9a-f]{64}\s+(\S+)", ins.args))
    return names


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_every_copied_path_exists(image: str) -> None:
    copies = 0
    instructions = parse(DOCKERFILES[image].read_text())
    checked = checked_by_sha256sum(instructions)
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(ins.args)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        for source in paths[:-1]:
            if re.match(r"https?://|\$\{MAVEN\}", source):
                pinned = any(f.startswith("--checksum=sha256:") for f in flags) or source.rsplit("/", 1)[1] in checked
                assert pinned, f"{image}: {source} is not pinned"
                continue
            assert (chartkit.ROOT / source).exists(), f"{image}: {source} does not exist in the build context"
            copies += 1
    assert copies >= 3


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_runs_as_a_non_root_user(image: str) -> None:
    users = final(image, "USER")
    assert users, f"{image}: the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"{image}: runs as {users[-1]}"
    assert user.isdigit(), "a numeric uid lets runAsNonRoot verify it without the image's /etc/passwd"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_entrypoint_is_a_console_script(image: str) -> None:
    entrypoints = final(image, "ENTRYPOINT")
    assert len(entrypoints) == 1
    argv = json.loads(entrypoints[0])  # exec form, so the script gets SIGTERM directly
    assert argv[0] == ENTRYPOINTS[image]
    assert argv[0] in PYPROJECT["project"]["scripts"]


def test_job_image_uid_matches_the_pods_default() -> None:
    crd = (chartkit.ROOT / "crds" / "streamingapp.yaml").read_text()
    default_uid = re.search(r"runAsUser:\n(?:\s+\w+:.*\n)*?\s+default: (\d+)", crd)
    assert default_uid, "spec.pod.runAsUser has no default in the CRD"
    users = final("job", "USER")
    assert users[-1].split(":")[0] == default_uid.group(1)


def test_operator_image_uid_matches_the_chart() -> None:
    values = (chartkit.CHART / "values.yaml").read_text()
    uid = re.search(r"runAsUser: (\d+)", values)
    assert uid
    users = final("operator", "USER")
    assert users[-1].split(":")[0] == uid.group(1)


def test_job_image_connector_matches_the_pinned_pyspark() -> None:
    pyspark = next(d for d in PYPROJECT["project"]["dependencies"] if d.startswith("pyspark"))
    version = pyspark.split("==")[1]
    text = DOCKERFILES["job"].read_text()
    jars = set(re.findall(r"/([\w.-]+\.jar) /opt/floe/jars/", text))
    assert f"spark-sql-kafka-0-10_2.13-{version}.jar" in jars
    assert f"spark-token-provider-kafka-0-10_2.13-{version}.jar" in jars
    env_jars = re.search(r"FLOE_SPARK_JARS=(\S+)", text)
    assert env_jars
    assert {p.rsplit("/", 1)[1] for p in env_jars.group(1).split(",")} == jars


def test_the_job_image_labels_its_release_and_the_config_schema_its_runtime_reads() -> None:
    from floe_jobs import config

    steps = parse(DOCKERFILES["job"].read_text())
    args = dict(s.args.split("=", 1) for s in steps if s.keyword == "ARG" and s.args.startswith("FLOE_"))
    assert args == {"FLOE_VERSION": PYPROJECT["project"]["version"], "FLOE_CONFIG_SCHEMA": str(config.CONFIG_SCHEMA)}
    pairs = [p.split("=", 1) for s in steps if s.keyword == "LABEL" for p in shlex.split(s.args, posix=False)]
    labels = {k: v.strip('"') for k, v in pairs}
    assert labels == {
        "org.opencontainers.image.version": "${FLOE_VERSION}",
        "dev.floe.config-schema": "${FLOE_CONFIG_SCHEMA}",
    }
