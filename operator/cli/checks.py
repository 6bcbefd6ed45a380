"""`kubectl floe validate`'s second half: the runtime's own check of what the operator would render.

The API server's dry run (the first half) applies the CRD's schema, defaults and CEL rules. What
it cannot know is whether the replicas would start: the operator turns the spec into floe.yaml
(`floe_operator.render.job_config`) and each replica loads that with `floe_jobs.config`, whose
checks (topic and store names, Spark settings, keyspace, …) go further than the schema; and
before rendering, the operator refuses a pod template (spec.podTemplate) that the schema cannot
fully check (`floe_operator.podtemplate.problems`: a sidecar on a port of Floe's container, a
volume named like Floe's). Running the same functions here on the defaulted object the dry run
returned tells the user now, not as a Degraded condition or a crash-looping pod later. Errors
name the spec field, and for the runtime's checks also the floe.yaml key they were made on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic
from floe_jobs import config
from floe_operator import model, podtemplate, render

# floe.yaml's sections and the spec fields they are rendered from (render.job_config)
SECTIONS = {
    "app_id": "metadata.name",
    "kafka": "spec.kafka",
    "cassandra": "spec.state.cassandra",
    "stores": "spec.state.stores",
    "state": "spec.state",
    "spark": "spec.spark",
    "shutdown": "spec.shutdown",
    "metrics": "spec.metrics",
    "job": "spec.job",
}


def spec_field(runtime_line: str) -> str:
    """A line of a runtime ConfigError (`kafka.topics.0: …`) with the spec field it comes from."""
    head, sep, rest = runtime_line.partition(":")
    key = head.split(" ", 1)[0]
    section = SECTIONS.get(key.split(".", 1)[0])
    return f"{section} (floe.yaml {key}):{rest}" if section and sep else runtime_line


def _model_problems(exc: pydantic.ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        out.append(f"spec.{loc}: {err['msg']}" if loc else f"spec: {err['msg']}")
    return out


def problems(body: Mapping[str, Any]) -> list[str]:
    """What the operator or the runtime would refuse in this StreamingApp; [] when nothing."""
    meta = dict(body.get("metadata") or {})
    meta.setdefault("namespace", "default")
    try:
        app = model.StreamingApp.from_body({**body, "metadata": meta})
    except pydantic.ValidationError as exc:
        return _model_problems(exc)
    except KeyError as exc:
        return [f"metadata.{exc.args[0]} is required"]
    # what the operator refuses before it renders (Degraded InvalidSpec / InvalidPodTemplate): the
    # pod template's fields the schema cannot check, and Spark settings an older CRD let through
    found = [f"spec.spark.conf: {p}" for p in config.spark_conf_problems(app.spec.spark.conf, rendered=False)]
    found += podtemplate.problems(app, render.pod_template_owned(app))
    if found:
        return found
    try:
        rendered = render.job_config(app)
        config.from_dict(rendered)
    except config.ConfigError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()] or [str(exc)]
        return [spec_field(ln) for ln in lines]
    return []
