"""The chart's CRD template is generated from crds/streamingapp.yaml, the one source of truth."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

from . import chartkit

SCRIPT = chartkit.CHART / "hack" / "sync-crd.py"


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("floe_chart_sync_crd", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chart_crd_template_is_in_sync_with_crds_dir() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_generator_wraps_the_source_verbatim() -> None:
    sync = _sync_module()
    source = (chartkit.ROOT / "crds" / "streamingapp.yaml").read_text()
    template = sync.render(source)
    assert template.startswith("{{- if .Values.crds.enabled }}\n")
    assert template.endswith("{{- end }}\n")
    assert "helm.sh/resource-policy: keep" in template
    spec = source[source.index("\nspec:\n") + 1 :]
    assert spec.replace("{{", '{{ "{{" }}') in template


def test_generator_escapes_template_delimiters() -> None:
    sync = _sync_module()
    source = (
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x.example.com\n"
        "spec:\n  description: 'uses {{ braces }}'\n"
    )
    assert "description: 'uses {{ \"{{\" }} braces }}'" in sync.render(source)
