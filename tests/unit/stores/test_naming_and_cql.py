"""Table naming and the DDL the stores render (pure)."""

from __future__ import annotations

import pytest
from floe_jobs.stores import StoreConfigError, StoreSpec, keyspace_cql, table_cql, table_name
from floe_jobs.stores.schema import fence_column_cql, render_options, table_options


@pytest.mark.parametrize(
    ("store", "table"),
    [
        ("word-count", "word_count_kstreams_store"),
        ("TEXT3.word-count2", "text3_word_count2_kstreams_store"),
        ("clicks-global", "clicks_global_kstreams_store"),
        ("a b/c", "a_b_c_kstreams_store"),
        ("Ünïcode", "_n_code_kstreams_store"),
    ],
)
def test_default_table_name_matches_the_java_library(store: str, table: str) -> None:
    assert table_name(store) == table


def test_partitioned_table_has_the_java_columns_plus_the_fence() -> None:
    cql = table_cql("app", StoreSpec("word-count", "partitioned"))
    assert cql == (
        "CREATE TABLE IF NOT EXISTS app.word_count_kstreams_store (partition int, key blob, "
        "time timestamp, value blob, floe_batch bigint, PRIMARY KEY ((partition), key)) "
        "WITH compaction = {'class': 'LeveledCompactionStrategy'}"
    )


def test_global_table() -> None:
    cql = table_cql("app", StoreSpec("clicks-global", "global"))
    assert "app.clicks_global_kstreams_store (key blob, time timestamp, value blob, PRIMARY KEY (key))" in cql
    assert "floe_batch" not in cql


def test_versioned_tables_cluster_on_valid_to() -> None:
    part = table_cql("app", StoreSpec("v", "versioned-partitioned"))
    glob = table_cql("app", StoreSpec("v", "versioned-global"))
    assert "PRIMARY KEY ((partition), key, validTo)" in part
    assert "validFrom timestamp, validTo timestamp" in part
    assert "PRIMARY KEY ((key), validTo)" in glob


def test_ttl_and_table_options() -> None:
    spec = StoreSpec(
        "s", "global", ttl_seconds=86400,
        table_options={"compaction": {"class": "SizeTieredCompactionStrategy"}, "comment": "it's",
                       "gc_grace_seconds": 3600, "cdc": False},
    )
    assert table_options(spec)["default_time_to_live"] == 86400
    cql = table_cql("app", spec)
    assert cql.endswith(
        "WITH cdc = false AND comment = 'it''s' AND compaction = {'class': 'SizeTieredCompactionStrategy'} "
        "AND default_time_to_live = 86400 AND gc_grace_seconds = 3600"
    )


def test_table_name_override_and_function() -> None:
    assert "app.custom (" in table_cql("app", StoreSpec("s", "global", table="custom"))
    assert "app.x_s (" in table_cql("app", StoreSpec("s", "global"), table_name_fn=lambda n: "x_" + n)


def test_invalid_names_and_options_are_rejected_before_io() -> None:
    with pytest.raises(StoreConfigError, match="keyspace"):
        table_cql("bad-ks", StoreSpec("s", "global"))
    with pytest.raises(StoreConfigError, match="48"):
        table_cql("app", StoreSpec("x" * 40, "global"))
    with pytest.raises(StoreConfigError, match="option name"):
        render_options({"drop table x; --": 1})
    with pytest.raises(StoreConfigError, match="unknown store type"):
        StoreSpec("s", "window")  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="ttl"):
        StoreSpec("s", "global", ttl_seconds=-1)


def test_keyspace_cql() -> None:
    assert keyspace_cql("app") == (
        "CREATE KEYSPACE IF NOT EXISTS app WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': '1'}"
    )
    nts = keyspace_cql("app", {"class": "NetworkTopologyStrategy", "dc1": 3})
    assert "{'class': 'NetworkTopologyStrategy', 'dc1': '3'}" in nts
    with pytest.raises(StoreConfigError, match="class"):
        keyspace_cql("app", {"dc1": 3})


def test_fence_column_cql() -> None:
    assert fence_column_cql("app", "t_kstreams_store") == "ALTER TABLE app.t_kstreams_store ADD floe_batch bigint"


def test_describe_renders_the_whole_provisioning() -> None:
    from floe_jobs.stores.schema import describe, options_json

    script = describe([StoreSpec("a", "partitioned"), StoreSpec("b", "versioned-global", ttl_seconds=60)], "app")
    lines = script.splitlines()
    assert lines[0].startswith("CREATE KEYSPACE IF NOT EXISTS app")
    assert lines[1].startswith("CREATE TABLE IF NOT EXISTS app.a_kstreams_store")
    assert lines[2].startswith("CREATE TABLE IF NOT EXISTS app.b_kstreams_store")
    assert all(line.endswith(";") for line in lines)
    assert options_json(StoreSpec("b", "global", ttl_seconds=60)) == (
        '{"compaction": {"class": "LeveledCompactionStrategy"}, "default_time_to_live": 60}'
    )
    assert "'UnifiedCompactionStrategy'" in describe([StoreSpec("a", "partitioned")], "app", release="5.0.6")


@pytest.mark.parametrize(
    ("release", "compaction"),
    [
        ("5.0.6", "UnifiedCompactionStrategy"),
        ("5.1-SNAPSHOT", "UnifiedCompactionStrategy"),
        ("6.0.0", "UnifiedCompactionStrategy"),
        ("4.1.7", "LeveledCompactionStrategy"),
        ("4.0.15", "LeveledCompactionStrategy"),
        ("3.0.8", "LeveledCompactionStrategy"),  # what ScyllaDB reports
        ("", "LeveledCompactionStrategy"),
        (None, "LeveledCompactionStrategy"),
    ],
)
def test_new_tables_compact_with_ucs_from_cassandra_5_and_leveled_before(release: str | None, compaction: str) -> None:
    from floe_jobs.stores.schema import default_table_options

    cql = table_cql("app", StoreSpec("s", "partitioned"), defaults=default_table_options(release))
    assert cql.endswith(f"WITH compaction = {{'class': '{compaction}'}}")


def test_a_stores_own_compaction_wins_over_the_releases_default() -> None:
    from floe_jobs.stores.schema import default_table_options

    spec = StoreSpec("s", "global", table_options={"compaction": {"class": "SizeTieredCompactionStrategy"}})
    assert table_options(spec, default_table_options("5.0.6"))["compaction"] == {
        "class": "SizeTieredCompactionStrategy"
    }


def test_a_fenced_row_reads_with_the_highest_write_timestamp_of_its_cells() -> None:
    from floe_jobs.stores.kv import _cell

    # (key,) value, fence, WRITETIME(value), WRITETIME(fence), WRITETIME(time)
    assert _cell((b"k", b"v", 3, 10, 10, 10), 1, True) == (b"v", 3, 10)
    # another writer rewrote value and time an hour ahead and left the fence
    assert _cell((b"v", 3, 3_600_000_010, 10, 3_600_000_010), 0, True) == (b"v", 3, 3_600_000_010)
    # a fenced delete: the value cell is a tombstone, which has no write time
    assert _cell((None, 4, None, 20, 20), 0, True) == (None, 4, 20)
    # a row written by the Java library: no fence
    assert _cell((b"v", None, 30, None, 30), 0, True) == (b"v", None, 30)
    assert _cell((b"v",), 0, False) == (b"v", None, None)


@pytest.mark.parametrize("declared", ["partitioned", "global", "versioned-partitioned", "versioned-global"])
def test_a_store_table_is_known_by_its_layout(declared: str) -> None:
    """Each type's table (as `table_cql` makes it) reads back as that type; a store declared with
    another type over it is refused, naming the store, both types and what to change."""
    import re

    from floe_jobs.stores.schema import STORE_TYPES, StoreSpec, layout_errors, layout_of, table_cql

    cql = table_cql("ks", StoreSpec(name="s", type=declared))  # type: ignore[arg-type]
    body = cql.split("(", 1)[1].split("PRIMARY KEY")[0]
    columns = {m.group(1).lower() for m in re.finditer(r"(\w+) \w+,", body)}
    assert layout_of(columns) == declared
    for other in STORE_TYPES:
        errors = layout_errors([StoreSpec(name="s", type=other)], {"s_kstreams_store": columns}, "ks")  # type: ignore[arg-type]
        if other == declared:
            assert errors == []
        else:
            assert len(errors) == 1
            wanted = f"store 's' is declared {other}, but its table ks.s_kstreams_store has the layout of a {declared}"
            assert wanted in errors[0]
            assert f"declare the store {declared}, or give it a new name" in errors[0]
