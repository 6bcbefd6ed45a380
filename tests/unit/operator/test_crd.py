"""The CRD itself: structural, documented everywhere, and its generated reference is current."""

from __future__ import annotations

from typing import Any

from floe_stack import crddoc

from . import crdtools


def _walk(node: dict[str, Any], path: str, out: list[tuple[str, dict[str, Any]]]) -> None:
    out.append((path, node))
    for name, sub in (node.get("properties") or {}).items():
        _walk(sub, f"{path}.{name}", out)
    if isinstance(node.get("items"), dict):
        _walk(node["items"], f"{path}[]", out)
    if isinstance(node.get("additionalProperties"), dict):
        _walk(node["additionalProperties"], f"{path}{{}}", out)


def _nodes() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    _walk(crdtools.schema(), "", out)
    return out


def test_every_field_has_a_description() -> None:
    missing = [
        path
        for path, node in _nodes()
        if path.count(".") >= 1 and not path.endswith(("{}", "[]", ".metadata")) and not node.get("description")
    ]
    assert missing == []


def test_schema_is_structural() -> None:
    untyped = [
        path
        for path, node in _nodes()
        if "type" not in node
        and not node.get("x-kubernetes-int-or-string")
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ]
    assert untyped == []


def test_subresources_and_columns() -> None:
    version = crdtools.crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.labelSelector",
    }
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Ready", "Replicas", "Lag", "Age"]
    assert crdtools.crd()["spec"]["names"]["shortNames"] == ["stapp"]


def test_reference_doc_is_in_sync() -> None:
    expected = crddoc.render_references()
    actual = (crdtools.ROOT / "docs" / "crd-reference.md").read_text()
    assert actual == expected, "regenerate: python -m floe_stack.crddoc > docs/crd-reference.md"


def test_the_reference_covers_every_crd() -> None:
    assert sorted(crddoc.CRDS) == sorted(f"crds/{p.name}" for p in (crdtools.ROOT / "crds").glob("*.yaml"))


def test_an_object_default_agrees_with_its_fields_own_defaults() -> None:
    """An object's default applies when the object is absent and each field's own default when
    the object is given without that field: the two must say the same, or a spec that sets one
    field of the object quietly gets other values for the rest."""
    disagree = []
    for path, node in _nodes():
        whole = node.get("default")
        if not isinstance(whole, dict):
            continue
        for name, sub in (node.get("properties") or {}).items():
            if name in whole and "default" in sub and sub["default"] != whole[name]:
                disagree.append(f"{path}.{name}: {whole[name]!r} in the object's default, {sub['default']!r} its own")
    assert disagree == []


def test_the_status_conditions_description_names_every_condition_type_the_operator_writes() -> None:
    """`kubectl explain` is where a user looks up a condition they see in status: every type the
    operator sets is named there."""
    from floe_operator import conditions as c

    written = (*c.OWNED_TYPES, c.PARTITIONS_STOPPED, c.SUSPENDED, c.OFFSET_RESET, c.RECONCILE_PAUSED, c.POD_SECURITY)
    described = crdtools.schema()["properties"]["status"]["properties"]["conditions"]["description"]
    assert [t for t in written if t not in described] == []
