#!/usr/bin/env python3
"""Write charts/floe/templates/crd-streamingapp.yaml from crds/streamingapp.yaml.

crds/streamingapp.yaml is the one source of truth for the StreamingApp CRD. The chart's copy
is that file with Helm's gate (crds.enabled), the chart's labels and the keep policy
(crds.keep) put around it; the spec is copied byte for byte. Run after every change to the
CRD; tests/unit/chart/test_crd_sync.py fails while the two differ.

    python3 charts/floe/hack/sync-crd.py           # rewrite the template
    python3 charts/floe/hack/sync-crd.py --check   # exit 1 when the template is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "crds" / "streamingapp.yaml"
TARGET = ROOT / "charts" / "floe" / "templates" / "crd-streamingapp.yaml"

HEADER = """\
{{- if .Values.crds.enabled }}
# Generated from crds/streamingapp.yaml by charts/floe/hack/sync-crd.py; edit the source and
# run the script instead of editing this file.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %(name)s
  labels:
    {{- include "floe.labels" . | nindent 4 }}
    app.kubernetes.io/component: crd
  {{- if .Values.crds.keep }}
  annotations:
    helm.sh/resource-policy: keep
  {{- end }}
"""
FOOTER = "{{- end }}\n"


def render(source: str) -> str:
    """The chart template for the CRD text `source`."""
    lines = source.splitlines(keepends=True)
    try:
        spec_at = lines.index("spec:\n")
    except ValueError:
        raise SystemExit(f"{SOURCE}: no top-level 'spec:' line") from None
    head = "".join(lines[:spec_at])
    if not head.startswith("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n"):
        raise SystemExit(f"{SOURCE}: expected apiVersion, kind and metadata before spec, in that order")
    names = [ln.split(":", 1)[1].strip() for ln in lines[:spec_at] if ln.startswith("  name:")]
    if len(names) != 1:
        raise SystemExit(f"{SOURCE}: expected exactly one metadata.name")
    # The spec is plain text to Helm, except for the action delimiter.
    body = "".join(lines[spec_at:]).replace("{{", '{{ "{{" }}')
    if not body.endswith("\n"):
        body += "\n"
    return HEADER % {"name": names[0]} + body + FOOTER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the template is up to date")
    args = parser.parse_args(argv)
    want = render(SOURCE.read_text())
    have = TARGET.read_text() if TARGET.exists() else ""
    if args.check:
        if want != have:
            print(f"{TARGET.relative_to(ROOT)} is stale; run python3 charts/floe/hack/sync-crd.py", file=sys.stderr)
            return 1
        return 0
    if want != have:
        TARGET.write_text(want)
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
