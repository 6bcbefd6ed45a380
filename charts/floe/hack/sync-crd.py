#!/usr/bin/env python3
"""Write charts/floe/templates/crd-<name>.yaml from each crds/<name>.yaml.

crds/ is the one source of truth for Floe's CRDs (StreamingApp, StreamingAppSnapshot). The
chart's copy of each is that file with Helm's gate (crds.enabled), the chart's labels and the
keep policy (crds.keep) put around it; the spec is copied byte for byte. Run after every change
to a CRD; tests/unit/chart/test_crd_sync.py fails while a pair differs.

    python3 charts/floe/hack/sync-crd.py           # rewrite the templates
    python3 charts/floe/hack/sync-crd.py --check   # exit 1 when a template is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "crds" / "streamingapp.yaml"
# Every CRD of crds/ and its chart template.
PAIRS = [(source, ROOT / "charts" / "floe" / "templates" / f"crd-{source.name}")
         for source in sorted((ROOT / "crds").glob("*.yaml"))]

HEADER = """\
{{- if .Values.crds.enabled }}
# Generated from crds/%(file)s by charts/floe/hack/sync-crd.py; edit the source and
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


def render(source: str, *, source_path: Path = SOURCE) -> str:
    """The chart template for the CRD text `source` (read from `source_path`)."""
    lines = source.splitlines(keepends=True)
    try:
        spec_at = lines.index("spec:\n")
    except ValueError:
        raise SystemExit(f"{source_path}: no top-level 'spec:' line") from None
    head = "".join(lines[:spec_at])
    if not head.startswith("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n"):
        raise SystemExit(f"{source_path}: expected apiVersion, kind and metadata before spec, in that order")
    names = [ln.split(":", 1)[1].strip() for ln in lines[:spec_at] if ln.startswith("  name:")]
    if len(names) != 1:
        raise SystemExit(f"{source_path}: expected exactly one metadata.name")
    # The spec is plain text to Helm, except for the action delimiter.
    body = "".join(lines[spec_at:]).replace("{{", '{{ "{{" }}')
    if not body.endswith("\n"):
        body += "\n"
    return HEADER % {"name": names[0], "file": source_path.name} + body + FOOTER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the template is up to date")
    args = parser.parse_args(argv)
    stale = 0
    for source, target in PAIRS:
        want = render(source.read_text(), source_path=source)
        have = target.read_text() if target.exists() else ""
        if want == have:
            continue
        if args.check:
            print(f"{target.relative_to(ROOT)} is stale; run python3 charts/floe/hack/sync-crd.py", file=sys.stderr)
            stale = 1
        else:
            target.write_text(want)
            print(f"wrote {target.relative_to(ROOT)}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
