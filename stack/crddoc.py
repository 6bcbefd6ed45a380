"""Generate docs/crd-reference.md from the CRDs' schemas, so the reference never drifts from them.

    python -m floe_stack.crddoc > docs/crd-reference.md   # every CRD of crds/, StreamingApp first
    python -m floe_stack.crddoc crds/streamingapp.yaml    # one of them

A unit test regenerates it and compares.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml


def _type(node: Mapping[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"[]{_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), Mapping):
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _constraints(node: Mapping[str, Any]) -> str:
    parts: list[str] = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, label, strict in (("minimum", "≥", ">"), ("maximum", "≤", "<")):
        if key in node:
            exclusive = node.get(f"exclusive{key.capitalize()}") is True
            parts.append(f"{strict if exclusive else label} {node[key]}")
    for key, label in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("maxProperties", "max entries"),
    ):
        if key in node:
            parts.append(f"{label} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    if node.get("x-kubernetes-list-type") in ("set", "map"):
        keys = node.get("x-kubernetes-list-map-keys")
        parts.append("unique" + (f" by {', '.join(keys)}" if keys else ""))
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section(path: str, node: Mapping[str, Any], out: list[str]) -> None:
    props: Mapping[str, Any] = node.get("properties") or {}
    required = set(node.get("required") or [])
    out.append(f"### `{path}`\n")
    if node.get("description"):
        out.append(_cell(str(node["description"])) + "\n")
    if props:
        out.append("| Field | Type | Required | Default | Constraints | Description |")
        out.append("|---|---|---|---|---|---|")
        for name, sub in props.items():
            default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
            out.append(
                f"| `{name}` | {_type(sub)} | {'yes' if name in required else ''} | {_cell(default)} | "
                f"{_cell(_constraints(sub))} | {_cell(str(sub.get('description', '')))} |"
            )
        out.append("")
    rules = node.get("x-kubernetes-validations") or []
    if rules:
        out.append("Rules checked at admission:\n")
        out.extend(f"- {_cell(str(r.get('message', r['rule'])))}" for r in rules)
        out.append("")
    for name, sub in props.items():
        child = sub.get("items", {}) if sub.get("type") == "array" else sub
        if child.get("properties"):
            _section(f"{path}.{name}" + ("[]" if sub.get("type") == "array" else ""), child, out)
        elif sub.get("x-kubernetes-validations") and not sub.get("properties"):
            out.append(f"Rules on `{path}.{name}`:\n")
            out.extend(f"- {_cell(str(r.get('message', r['rule'])))}" for r in sub["x-kubernetes-validations"])
            out.append("")


# The CRDs of crds/, in the order the reference shows them.
CRDS = ("crds/streamingapp.yaml", "crds/streamingappsnapshot.yaml")
ROOT = Path(__file__).resolve().parents[1]


def _subresources(names: Mapping[str, Any], version: Mapping[str, Any]) -> str:
    found = version.get("subresources") or {}
    parts = ["status"] if "status" in found else []
    if "scale" in found:
        parts.append(f"scale (`kubectl scale {names['singular']} NAME --replicas=N`)")
    return ", ".join(parts) or "none"


def render_reference(crd: Mapping[str, Any], *, source: str = CRDS[0]) -> str:
    spec = crd["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    out = [
        f"# {spec['names']['kind']} reference ({spec['group']}/{version['name']})",
        "",
        f"Generated from `{source}` by `python -m floe_stack.crddoc`; do not edit by hand.",
        "",
        f"Short name `{', '.join(spec['names'].get('shortNames', []))}`, "
        f"categories {', '.join(spec['names'].get('categories', []))}. "
        f"Subresources: {_subresources(spec['names'], version)}.",
        "",
        "| Column | Source |",
        "|---|---|",
    ]
    out.extend(f"| {c['name']} | `{c['jsonPath']}` |" for c in version.get("additionalPrinterColumns", []))
    out.append("")
    if schema.get("x-kubernetes-validations"):
        out.append("Rules on the whole object:\n")
        out.extend(f"- {_cell(str(r['message']))}" for r in schema["x-kubernetes-validations"])
        out.append("")
    for top in ("spec", "status"):
        _section(top, schema["properties"][top], out)
    return "\n".join(out).rstrip() + "\n"


def render_references(sources: Sequence[str] = CRDS) -> str:
    """The reference of each CRD (paths relative to the repository), one after the other."""
    return "\n".join(render_reference(yaml.safe_load((ROOT / s).read_text()), source=s) for s in sources)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    sources = [str(Path(a).resolve().relative_to(ROOT)) if Path(a).is_absolute() else a for a in args] or CRDS
    sys.stdout.write(render_references(sources))


if __name__ == "__main__":
    main()
