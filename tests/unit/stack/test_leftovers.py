"""Which topics a scope of the tests removes (`tests/leftovers.py`): its own, never a neighbour's."""

from __future__ import annotations

from tests import leftovers


def test_a_scope_matches_its_topics_by_name_and_by_prefix_only() -> None:
    made = leftovers.Leftovers(topics={"floe-op-it-1a2b3c"}, prefixes={"wc-0123abcd", "floe-sec-9f8e7d-"})
    existing = {
        "floe-op-it-1a2b3c",  # a module's input topic, by name
        "floe-op-it-1a2b3c0",  # a name recorded is no prefix
        "wc-0123abcd-lines", "wc-0123abcd-dlq", "wc-0123abcd-words-repartition",  # an app's, by its id
        "floe-sec-9f8e7d-wc-77aa11bb-5c5c5c5c5c-output",  # an app of a recorded namespace
        "wc-0123abce-lines", "floe-sec-9f8e7e-wc-x-output", "__consumer_offsets",  # others'
    }
    assert made.matching(existing) == [
        "floe-op-it-1a2b3c",
        "floe-sec-9f8e7d-wc-77aa11bb-5c5c5c5c5c-output",
        "wc-0123abcd-dlq",
        "wc-0123abcd-lines",
        "wc-0123abcd-words-repartition",
    ]


def test_scopes_nest_and_record_in_the_innermost_open_one() -> None:
    outer = leftovers.open_scope()
    inner = leftovers.open_scope()
    leftovers.topic("t-inner")
    recorded_inner = (set(inner.topics), set(outer.topics))
    inner.topics.clear()  # nothing to remove: this made nothing on a stack
    leftovers.close_scope(inner)
    leftovers.keyspace("ks_outer")
    recorded_outer = set(outer.keyspaces)
    outer.keyspaces.clear()
    leftovers.close_scope(outer)
    assert recorded_inner == ({"t-inner"}, set()) and recorded_outer == {"ks_outer"}
