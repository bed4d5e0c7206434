"""Lookups with insert-if-not-exists (Fluss's ``Lookup.enableInsertIfNotExists``, ``TableLookup.createLookuper``,
``ReplicaManager.lookups``): a missing key is inserted with only its key (the auto-increment column numbered,
every other column null) and its new row returned; primary-key lookups only; refused when the lookuper is made
for a table with a NOT NULL column that is neither key nor auto-increment."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake import InvalidConfigError, PartitionNotExistError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def conn(root: Path) -> fl.Connection:
    connection = fl.connect(root)
    connection.create_database("d")
    return connection


def _mapping(conn: fl.Connection, *, buckets: int = 1, **options: object) -> fl.Table:
    conn.create_table("d.uid_mapping", schema={"uid": "STRING", "uid_int32": "INT", "note": "STRING"},
                      primary_key=["uid"], bucket_num=buckets, options={"auto-increment.fields": "uid_int32", **options})
    return conn.get_table("d.uid_mapping")


def test_missing_keys_are_inserted_numbered_and_returned(conn: fl.Connection) -> None:
    table = _mapping(conn)
    table.upsert([{"uid": "known", "note": "kept"}])
    lookuper = table.new_lookup(insert_if_not_exists=True)
    out = lookuper.lookup([{"uid": u} for u in ["user_a", "known", "user_b", "user_a"]], with_found=True)
    assert out.rows() == [("user_a", 2, None, True), ("known", 1, "kept", True), ("user_b", 3, None, True),
                          ("user_a", 2, None, True)]
    assert table.to_polars().sort("uid_int32").rows() == [("known", 1, "kept"), ("user_a", 2, None),
                                                          ("user_b", 3, None)]
    log = table.scan_log().select("_change_type", "uid", "uid_int32").rows()
    assert log == [("+I", "known", 1), ("+I", "user_a", 2), ("+I", "user_b", 3)]  # an existing key: no record
    assert lookuper.lookup([{"uid": "user_b"}]).rows() == [("user_b", 3, None)]
    assert table.scan_log().height == 3  # found keys write nothing
    assert table.new_lookup().lookup([{"uid": "user_c"}], with_found=True).get_column("_found").to_list() == [False]
    assert table.to_polars().height == 3  # a plain lookuper never inserts


def test_lookup_one_inserts_too(conn: fl.Connection) -> None:
    table = _mapping(conn)
    lookuper = table.new_lookup(insert_if_not_exists=True)
    assert lookuper.lookup_one({"uid": "x"}) == {"uid": "x", "uid_int32": 1, "note": None}
    assert lookuper.lookup_one({"uid": "x"}) == {"uid": "x", "uid_int32": 1, "note": None}
    assert lookuper.lookup_one({"uid": "y"}) == {"uid": "y", "uid_int32": 2, "note": None}
    assert table.new_lookup().lookup_one({"uid": "z"}) is None


def test_many_buckets_and_offsets(conn: fl.Connection) -> None:
    table = _mapping(conn, buckets=4)
    keys = [{"uid": f"u{i}"} for i in range(40)]
    out = table.new_lookup(insert_if_not_exists=True).lookup(keys, with_offsets=True)
    assert out.get_column("uid").to_list() == [k["uid"] for k in keys]  # key order kept
    assert out.get_column("uid_int32").is_unique().all() and out.get_column("uid_int32").null_count() == 0
    assert out.get_column("_offset").null_count() == 0
    state = dict(table.to_polars().select("uid", "uid_int32").iter_rows())
    assert state == dict(out.select("uid", "uid_int32").iter_rows())


def test_a_table_without_auto_increment_gets_key_only_rows(conn: fl.Connection) -> None:
    conn.create_table("d.seen", schema={"id": "BIGINT", "first": "STRING"}, primary_key=["id"])
    table = conn.get_table("d.seen")
    out = table.new_lookup(insert_if_not_exists=True).lookup(pl.DataFrame({"id": [5, 6]}), with_found=True)
    assert out.rows() == [(5, None, True), (6, None, True)]


@pytest.mark.parametrize("engine", [{"table.merge-engine": "first_row"},
                                    {"table.merge-engine": "aggregation", "fields.note.agg": "listagg"}])
def test_other_merge_engines_insert_and_never_touch_existing_rows(conn: fl.Connection, engine: dict) -> None:
    table = _mapping(conn, **engine)
    table.upsert([{"uid": "a", "note": "x"}])
    out = table.new_lookup(insert_if_not_exists=True).lookup([{"uid": "a"}, {"uid": "b"}])
    assert out.rows() == [("a", 1, "x"), ("b", 2, None)]
    assert table.scan_log().get_column("_change_type").to_list() == ["+I", "+I"]


def test_two_connections_inserting_one_key_agree(conn: fl.Connection, root: Path) -> None:
    first = _mapping(conn).new_lookup(insert_if_not_exists=True)
    other = fl.connect(root).get_table("d.uid_mapping").new_lookup(insert_if_not_exists=True)
    a = first.lookup([{"uid": "k"}])
    b = other.lookup([{"uid": "k"}, {"uid": "m"}])
    c = first.lookup([{"uid": "m"}])
    assert a.rows() == [("k", 1, None)] and b.rows() == [("k", 1, None), ("m", 2, None)]
    assert c.rows() == [("m", 2, None)]
    assert fl.connect(root).get_table("d.uid_mapping").scan_log().height == 2


def test_partitioned_table_creates_missing_partitions(conn: fl.Connection, root: Path) -> None:
    conn.create_table("d.p", schema={"day": "STRING", "uid": "STRING", "n": "BIGINT"}, primary_key=["day", "uid"],
                      partition_keys=["day"], bucket_num=2, options={"auto-increment.fields": "n"})
    table = conn.get_table("d.p")
    out = table.new_lookup(insert_if_not_exists=True).lookup(
        [{"day": "20240101", "uid": "a"}, {"day": "20240102", "uid": "a"}, {"day": "20240101", "uid": "a"}])
    assert [p.name for p in table.list_partitions()] == ["20240101", "20240102"]
    n = out.get_column("n").to_list()
    assert n[0] == n[2] and len({n[0], n[1]}) == 2
    strict = fl.connect(root, dynamic_partition_creation=False).get_table("d.p")
    before = strict.to_polars()
    with pytest.raises(PartitionNotExistError, match="20240103.*dynamic partition creation is off"):
        strict.new_lookup(insert_if_not_exists=True).lookup(
            [{"day": "20240101", "uid": "new"}, {"day": "20240103", "uid": "a"}])
    assert strict.to_polars().equals(before)  # refused before any key was inserted


def test_refused_configurations_name_the_problem(conn: fl.Connection) -> None:
    conn.create_table("d.strict", descriptor=fl.TableDescriptor(fl.Schema.of(
        {"uid": "STRING", "n": "INT", "label": "STRING"}, primary_key=["uid"], not_null=["label"]),
        options={"auto-increment.fields": "n"}))
    with pytest.raises(InvalidConfigError, match=r"NOT NULL columns \['label'\].*make them nullable"):
        conn.get_table("d.strict").new_lookup(insert_if_not_exists=True)
    auto_not_null = fl.Schema.of({"uid": "STRING", "n": "INT"}, primary_key=["uid"], not_null=["n"])
    conn.create_table("d.ok", descriptor=fl.TableDescriptor(auto_not_null, options={"auto-increment.fields": "n"}))
    assert conn.get_table("d.ok").new_lookup(insert_if_not_exists=True).lookup_one({"uid": "a"}) == {"uid": "a",
                                                                                                   "n": 1}
    conn.create_table("d.log", schema={"uid": "STRING"})
    with pytest.raises(fl.UnsupportedOperationError, match="log table"):
        conn.get_table("d.log").new_lookup(insert_if_not_exists=True)
    assert conn.get_table("d.strict").to_polars().height == 0


def test_a_bad_partition_value_creates_no_partition(conn: fl.Connection) -> None:
    conn.create_table("d.p", schema={"day": "STRING", "uid": "STRING", "n": "BIGINT"}, primary_key=["day", "uid"],
                      partition_keys=["day"], options={"auto-increment.fields": "n"})
    table = conn.get_table("d.p")
    with pytest.raises(fl.InvalidPartitionError):
        table.new_lookup(insert_if_not_exists=True).lookup(
            [{"day": "20240101", "uid": "a"}, {"day": "no spaces allowed", "uid": "a"}])
    assert table.list_partitions() == [] and table.to_polars().height == 0
