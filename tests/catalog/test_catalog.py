"""Catalog: databases, tables, option defaults written at creation, ALTER TABLE and name validation."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake import (
    DatabaseAlreadyExistError,
    DatabaseNotEmptyError,
    DatabaseNotExistError,
    InvalidAlterError,
    InvalidConfigError,
    InvalidNameError,
    Schema,
    TableAlreadyExistError,
    TableDescriptor,
    TableNotExistError,
    TablePath,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The store folder (one level below tmp_path so a name escaping the store would show up in tmp_path)."""
    return tmp_path / "store"


@pytest.fixture
def conn(root: Path) -> fl.Connection:
    return fl.connect(root)


# ---------------------------------------------------------------------------------------------- databases
def test_create_list_drop_databases(conn: fl.Connection) -> None:
    assert conn.list_databases() == []
    conn.create_database("sales")
    conn.create_database("ads")
    assert conn.list_databases() == ["ads", "sales"]
    assert conn.database_exists("sales") and not conn.database_exists("hr")
    conn.drop_database("ads")
    assert conn.list_databases() == ["sales"]
    assert not conn.database_exists("ads")


def test_create_database_twice(conn: fl.Connection) -> None:
    conn.create_database("sales")
    with pytest.raises(DatabaseAlreadyExistError, match="ignore_if_exists"):
        conn.create_database("sales")
    conn.create_database("sales", ignore_if_exists=True)
    assert conn.list_databases() == ["sales"]


def test_create_database_if_exists_keeps_tables(conn: fl.Connection) -> None:
    conn.create_database("sales")
    conn.create_table("sales.orders", schema={"id": "INT"})
    conn.create_database("sales", ignore_if_exists=True)
    assert conn.list_tables("sales") == ["orders"]


def test_drop_missing_database(conn: fl.Connection) -> None:
    with pytest.raises(DatabaseNotExistError, match="'nope'"):
        conn.drop_database("nope")
    conn.drop_database("nope", ignore_if_not_exists=True)
    assert conn.list_databases() == []


def test_drop_database_not_empty_then_cascade(conn: fl.Connection) -> None:
    conn.create_database("sales")
    conn.create_table("sales.orders", schema={"id": "INT", "amount": "DOUBLE"})
    conn.create_table("sales.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"])
    conn.get_table("sales.orders").append([{"id": 1, "amount": 2.0}])
    with pytest.raises(DatabaseNotEmptyError, match="cascade=True") as err:
        conn.drop_database("sales")
    assert "orders" in str(err.value) and "users" in str(err.value)
    # nothing was dropped
    assert conn.list_tables("sales") == ["orders", "users"]
    assert conn.get_table("sales.orders").to_polars().to_dicts() == [{"id": 1, "amount": 2.0}]
    conn.drop_database("sales", cascade=True)
    assert conn.list_databases() == []
    assert not conn.table_exists("sales.orders")
    # the name can be reused and starts empty
    conn.create_database("sales")
    assert conn.list_tables("sales") == []


def test_drop_database_leaves_similarly_named_database(conn: fl.Connection) -> None:
    conn.create_database("d2")
    conn.create_database("d22")
    conn.create_table("d22.t", schema={"a": "INT"})
    conn.get_table("d22.t").append([{"a": 1}])
    conn.drop_database("d2")
    assert conn.list_databases() == ["d22"]
    assert conn.get_table("d22.t").to_polars().to_dicts() == [{"a": 1}]


def test_list_tables_of_missing_database(conn: fl.Connection) -> None:
    with pytest.raises(DatabaseNotExistError, match="create_database"):
        conn.list_tables("nope")


def test_databases_are_seen_by_another_connection(conn: fl.Connection, root: Path) -> None:
    conn.create_database("sales")
    other = fl.connect(root)
    assert other.list_databases() == ["sales"]
    other.drop_database("sales")
    assert conn.list_databases() == []


# ---------------------------------------------------------------------------------------------- tables
def test_create_table_from_descriptor(conn: fl.Connection) -> None:
    conn.create_database("shop")
    schema = Schema.of({"id": "BIGINT", "name": "STRING", "score": "DOUBLE"}, primary_key=["id"])
    info = conn.create_table("shop.users", TableDescriptor(schema, bucket_num=3, comment="users"))
    assert info.path == TablePath("shop", "users")
    assert info.schema.names == ("id", "name", "score")
    assert info.schema.primary_key == ("id",)
    assert info.bucket_num == 3 and info.bucket_keys == ("id",)
    assert info.descriptor.comment == "users"
    got = conn.get_table_info("shop.users")
    assert got == info
    table = conn.get_table(TablePath("shop", "users"))
    assert table.is_primary_key_table and table.bucket_num == 3


def test_create_table_from_keywords(conn: fl.Connection) -> None:
    conn.create_database("web")
    info = conn.create_table("web.clicks", schema={"user": "BIGINT", "url": "STRING", "at": "TIMESTAMP_LTZ(3)"},
                             bucket_num=4, bucket_keys=["user"], options={"table.log.ttl": "2 d"})
    assert not info.is_primary_key_table
    assert info.schema.primary_key == ()
    assert [c.type_name for c in info.schema.columns] == ["BIGINT", "STRING", "TIMESTAMP_LTZ(3)"]
    assert all(c.nullable for c in info.schema.columns)
    assert info.bucket_num == 4 and info.bucket_keys == ("user",)
    assert info.options["table.log.ttl"] == "2 d"
    assert info.options["bucket.key"] == "user"
    assert conn.get_table_info("web.clicks") == info


def test_keywords_and_descriptor_are_exclusive(conn: fl.Connection) -> None:
    conn.create_database("shop")
    descriptor = TableDescriptor(Schema.of({"id": "INT"}))
    with pytest.raises(InvalidConfigError, match="not both"):
        conn.create_table("shop.t", descriptor, schema={"id": "INT"})
    with pytest.raises(InvalidConfigError, match="schema"):
        conn.create_table("shop.t")
    assert conn.list_tables("shop") == []


def test_descriptor_with_other_keywords_is_rejected(conn: fl.Connection) -> None:
    """Keywords next to a descriptor would be silently ignored; they must be refused."""
    conn.create_database("shop")
    descriptor = TableDescriptor(Schema.of({"a": "INT", "b": "INT"}))
    with pytest.raises(InvalidConfigError, match="not both"):
        conn.create_table("shop.t", descriptor, bucket_keys=["b"])
    with pytest.raises(InvalidConfigError, match="not both"):
        conn.create_table("shop.t", descriptor, comment="hello")
    with pytest.raises(InvalidConfigError, match="not both"):
        conn.create_table("shop.t", descriptor, primary_key=["a"])
    assert conn.list_tables("shop") == []


def test_conflicting_bucket_keywords_and_options(conn: fl.Connection) -> None:
    """``bucket_num=``/``bucket_keys=`` and the ``bucket.num``/``bucket.key`` options must agree."""
    conn.create_database("db")
    with pytest.raises(InvalidConfigError, match="bucket.num"):
        conn.create_table("db.t", schema={"a": "INT", "b": "INT"}, bucket_num=4, options={"bucket.num": "8"})
    with pytest.raises(InvalidConfigError, match="bucket.key"):
        conn.create_table("db.t", schema={"a": "INT", "b": "INT"}, bucket_keys=["a"], options={"bucket.key": "b"})
    assert conn.list_tables("db") == []
    info = conn.create_table("db.t", schema={"a": "INT", "b": "INT"}, bucket_num=4, bucket_keys=["b"],
                             options={"bucket.num": "4", "bucket.key": "b"})
    assert info.bucket_num == 4 and info.bucket_keys == ("b",)


def test_writes_through_a_table_object_after_drop_fail(conn: fl.Connection, root: Path) -> None:
    """A Table object whose table was dropped (here by another connection) must not report a commit that no
    reader can ever see, neither before nor after the name is reused."""
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    stale = conn.get_table("db.t")
    stale.append([{"a": 1}])
    other = fl.connect(root)
    other.drop_table("db.t")
    with pytest.raises(TableNotExistError):
        stale.append([{"a": 2}])
    other.create_table("db.t", schema={"a": "INT"})
    with pytest.raises(TableNotExistError):
        stale.append([{"a": 3}])
    fresh = fl.connect(root).get_table("db.t")
    assert fresh.to_polars().height == 0 and fresh.end_offsets() == {0: 0}
    assert not any(stale.info.table_id in name for name in _tree(root))  # nothing left of the dropped table


def test_list_and_drop_tables(conn: fl.Connection) -> None:
    conn.create_database("shop")
    for name in ("orders", "users", "items"):
        conn.create_table(f"shop.{name}", schema={"id": "INT"})
    assert conn.list_tables("shop") == ["items", "orders", "users"]
    assert conn.table_exists("shop.orders")
    conn.drop_table("shop.orders")
    assert conn.list_tables("shop") == ["items", "users"]
    assert not conn.table_exists("shop.orders")
    with pytest.raises(TableNotExistError):
        conn.get_table_info("shop.orders")
    with pytest.raises(TableNotExistError):
        conn.get_table("shop.orders")
    with pytest.raises(TableNotExistError):
        conn.drop_table("shop.orders")
    conn.drop_table("shop.orders", ignore_if_not_exists=True)


def test_drop_table_leaves_similarly_named_table(conn: fl.Connection) -> None:
    conn.create_database("shop")
    conn.create_table("shop.t", schema={"a": "INT"})
    conn.create_table("shop.t2", schema={"a": "INT"})
    conn.get_table("shop.t2").append([{"a": 7}])
    conn.drop_table("shop.t")
    assert conn.list_tables("shop") == ["t2"]
    assert conn.get_table("shop.t2").to_polars().to_dicts() == [{"a": 7}]


def test_dropped_table_can_be_recreated_empty(conn: fl.Connection) -> None:
    conn.create_database("shop")
    conn.create_table("shop.t", schema={"a": "INT"})
    old = conn.get_table("shop.t")
    old.append([{"a": 1}])
    conn.drop_table("shop.t")
    info = conn.create_table("shop.t", schema={"a": "INT", "b": "STRING"})
    fresh = conn.get_table("shop.t")
    assert fresh.info.table_id == info.table_id != old.info.table_id
    assert fresh.to_polars().height == 0
    assert fresh.end_offsets() == {0: 0}


def test_create_table_twice(conn: fl.Connection) -> None:
    conn.create_database("shop")
    first = conn.create_table("shop.t", schema={"a": "INT"})
    with pytest.raises(TableAlreadyExistError, match="ignore_if_exists"):
        conn.create_table("shop.t", schema={"a": "INT", "b": "INT"})
    again = conn.create_table("shop.t", schema={"a": "INT", "b": "INT"}, ignore_if_exists=True)
    assert again == first  # the existing table, unchanged
    assert conn.get_table_info("shop.t").schema.names == ("a",)


def test_create_table_in_missing_database(conn: fl.Connection) -> None:
    with pytest.raises(DatabaseNotExistError, match="create_database"):
        conn.create_table("nope.t", schema={"a": "INT"})
    assert conn.list_databases() == []


def test_get_table_is_cached_per_connection(conn: fl.Connection) -> None:
    conn.create_database("shop")
    conn.create_table("shop.t", schema={"a": "INT"})
    assert conn.get_table("shop.t") is conn.get_table("shop.t")


# ---------------------------------------------------------------------------------------------- defaults
@pytest.mark.parametrize(("engine", "extra", "expected"), [
    (None, {}, "allow"),
    ("first_row", {}, "ignore"),
    ("versioned", {"table.merge-engine.versioned.ver-column": "v"}, "ignore"),
    ("aggregation", {}, "ignore"),
])
def test_delete_behavior_default_written_per_engine(conn: fl.Connection, root: Path, engine: str | None,
                                                    extra: dict, expected: str) -> None:
    conn.create_database("db")
    options = {**({"table.merge-engine": engine} if engine else {}), **extra}
    info = conn.create_table("db.t", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], options=options)
    assert info.options["table.delete.behavior"] == expected
    # written into the stored metadata, not computed on read
    assert fl.connect(root).get_table_info("db.t").options["table.delete.behavior"] == expected
    assert conn.get_table("db.t").info.options["table.delete.behavior"] == expected


@pytest.mark.parametrize(("engine", "behavior"), [(None, "disable"), (None, "ignore"), ("first_row", "disable"),
                                                 ("aggregation", "allow"), ("aggregation", "disable")])
def test_explicit_delete_behavior_is_kept(conn: fl.Connection, engine: str | None, behavior: str) -> None:
    conn.create_database("db")
    options = {"table.delete.behavior": behavior.upper(), **({"table.merge-engine": engine} if engine else {})}
    info = conn.create_table("db.t", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], options=options)
    assert info.options["table.delete.behavior"] == behavior


def test_enum_options_are_normalized(conn: fl.Connection) -> None:
    conn.create_database("db")
    info = conn.create_table("db.t", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"],
                             options={"table.merge-engine": "FIRST_ROW", "table.changelog.image": "FULL"})
    assert info.options["table.merge-engine"] == "first_row"
    assert info.options["table.changelog.image"] == "full"


def test_bucket_num_default_and_explicit(conn: fl.Connection) -> None:
    conn.create_database("db")
    log = conn.create_table("db.log", schema={"a": "INT"})
    assert log.bucket_num == 1 and log.options["bucket.num"] == "1"
    assert log.bucket_keys == () and "bucket.key" not in log.options
    assert "table.delete.behavior" not in log.options  # PK-only option
    pk = conn.create_table("db.pk", schema={"k": "INT", "v": "INT"}, primary_key=["k"], bucket_num=6)
    assert pk.bucket_num == 6 and pk.options["bucket.num"] == "6"
    assert pk.bucket_keys == ("k",) and pk.options["bucket.key"] == "k"
    via_option = conn.create_table("db.opt", schema={"a": "INT", "b": "INT"}, options={"bucket.num": 5,
                                                                                       "bucket.key": "b"})
    assert via_option.bucket_num == 5 and via_option.bucket_keys == ("b",)
    assert conn.get_table("db.opt").end_offsets() == {b: 0 for b in range(5)}


def test_bucket_key_default_is_primary_key_in_pk_order(conn: fl.Connection) -> None:
    conn.create_database("db")
    info = conn.create_table("db.t", schema={"a": "INT", "b": "STRING", "c": "INT"}, primary_key=["c", "a"])
    assert info.bucket_keys == ("c", "a")
    prefix = conn.create_table("db.p", schema={"a": "INT", "b": "STRING", "c": "INT"}, primary_key=["a", "b"],
                               bucket_keys=["a"])
    assert prefix.bucket_keys == ("a",)


def test_primary_key_columns_become_not_null(conn: fl.Connection) -> None:
    conn.create_database("db")
    info = conn.create_table("db.t", schema={"a": "INT", "b": "STRING"}, primary_key=["a"])
    assert not info.schema.column("a").nullable and info.schema.column("b").nullable


def test_custom_properties_are_kept(conn: fl.Connection) -> None:
    conn.create_database("db")
    info = conn.create_table("db.t", schema={"a": "INT"}, options={"owner": "team-a"})
    assert info.options["owner"] == "team-a"


# ---------------------------------------------------------------------------------------------- alter
def test_alter_add_column_log_table(conn: fl.Connection, root: Path) -> None:
    conn.create_database("db")
    conn.create_table("db.events", schema={"id": "INT", "kind": "STRING"}, bucket_num=2, bucket_keys=["id"])
    events = conn.get_table("db.events")
    events.append([{"id": 1, "kind": "a"}, {"id": 2, "kind": "b"}])
    before = events.schema
    info = conn.alter_table("db.events", add_columns={"score": "DOUBLE"})
    assert info.schema.names == ("id", "kind", "score")
    added = info.schema.column("score")
    assert added.nullable and added.type_name == "DOUBLE"
    assert added.column_id > max(c.column_id for c in before.columns)
    assert info.schema.schema_id > before.schema_id
    assert info.table_id == events.info.table_id
    # the cached Table object follows
    assert events.schema.names == ("id", "kind", "score")
    # old rows read back with nulls; new writes carry the column
    events.append([{"id": 3, "kind": "c", "score": 1.5}])
    rows = events.to_polars().sort("id")
    assert rows.schema == pl.Schema({"id": pl.Int32, "kind": pl.String, "score": pl.Float64})
    assert rows.to_dicts() == [{"id": 1, "kind": "a", "score": None}, {"id": 2, "kind": "b", "score": None},
                               {"id": 3, "kind": "c", "score": 1.5}]
    # an old-shaped row is now missing a column (every column must be written; nulls are fine)
    with pytest.raises(fl.SchemaMismatchError, match="'score'"):
        events.append([{"id": 4, "kind": "d"}])
    events.append([{"id": 4, "kind": "d", "score": None}])
    # a second connection on the same folder sees the new schema and the same rows
    other = fl.connect(root)
    assert other.get_table_info("db.events").schema.names == ("id", "kind", "score")
    assert_frame_equal(other.get_table("db.events").to_polars().sort("id"), events.to_polars().sort("id"))
    assert other.get_table("db.events").to_polars().filter(pl.col("id") == 4)["score"].to_list() == [None]


def test_alter_add_column_pk_table(conn: fl.Connection, root: Path) -> None:
    conn.create_database("db")
    conn.create_table("db.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"], bucket_num=2)
    users = conn.get_table("db.users")
    users.upsert([{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    conn.alter_table("db.users", add_columns={"age": "INT"})
    assert users.to_polars().sort("id").to_dicts() == [{"id": 1, "name": "ann", "age": None},
                                                      {"id": 2, "name": "bob", "age": None}]
    users.upsert([{"id": 2, "name": "bob", "age": 30}, {"id": 3, "name": "cy", "age": 5}])
    expected = [{"id": 1, "name": "ann", "age": None}, {"id": 2, "name": "bob", "age": 30},
                {"id": 3, "name": "cy", "age": 5}]
    assert users.to_polars().sort("id").to_dicts() == expected
    other = fl.connect(root).get_table("db.users")
    assert other.schema.names == ("id", "name", "age")
    assert other.to_polars().sort("id").to_dicts() == expected


def test_get_table_after_alter_by_another_connection(conn: fl.Connection, root: Path) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    table = conn.get_table("db.t")
    fl.connect(root).alter_table("db.t", add_columns={"b": "STRING"})
    assert conn.get_table("db.t").schema.names == ("a", "b")
    assert table.refresh().schema.names == ("a", "b")


def test_alters_from_two_connections_both_apply(conn: fl.Connection, root: Path) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    other = fl.connect(root)
    other.get_table("db.t")  # caches the first version
    conn.alter_table("db.t", add_columns={"b": "STRING"})
    other.alter_table("db.t", add_columns={"c": "INT"}, set_options={"table.log.ttl": "1 d"})
    info = fl.connect(root).get_table_info("db.t")
    assert info.schema.names == ("a", "b", "c")
    assert info.options["table.log.ttl"] == "1 d"
    assert len({c.column_id for c in info.schema.columns}) == 3


def test_alter_several_columns_in_order(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    conn.alter_table("db.t", add_columns={"b": "STRING", "c": "BIGINT"})
    conn.alter_table("db.t", add_columns={"d": "DATE"})
    schema = conn.get_table_info("db.t").schema
    assert schema.names == ("a", "b", "c", "d")
    assert [c.column_id for c in schema.columns] == sorted({c.column_id for c in schema.columns})


def test_alter_set_and_reset_alterable_option(conn: fl.Connection, root: Path) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    info = conn.alter_table("db.t", set_options={"table.log.ttl": "3 d"})
    assert info.options["table.log.ttl"] == "3 d"
    assert fl.connect(root).get_table_info("db.t").options["table.log.ttl"] == "3 d"
    assert conn.get_table("db.t").info.options["table.log.ttl"] == "3 d"
    info = conn.alter_table("db.t", set_options={"table.statistics.columns": "a"})
    assert info.options["table.statistics.columns"] == "a" and info.options["table.log.ttl"] == "3 d"
    info = conn.alter_table("db.t", reset_options=["table.log.ttl"])
    assert "table.log.ttl" not in info.options
    assert info.options["bucket.num"] == "1"


@pytest.mark.parametrize("option", [
    {"bucket.num": "4"},
    {"bucket.key": "a"},
    {"table.merge-engine": "first_row"},
    {"table.delete.behavior": "ignore"},
    {"table.changelog.image": "wal"},
    {"table.log.format": "arrow"},
    {"table.kv.format": "compacted"},
    {"table.log.arrow.compression.type": "none"},
])
def test_alter_rejects_non_alterable_options(conn: fl.Connection, option: dict) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT", "b": "INT"}, primary_key=["a"])
    before = conn.get_table_info("db.t")
    key = next(iter(option))
    with pytest.raises(InvalidAlterError, match="cannot be altered") as err:
        conn.alter_table("db.t", set_options=option)
    assert key in str(err.value) and "table.log.ttl" in str(err.value)  # names the key and what is alterable
    with pytest.raises(InvalidAlterError, match="cannot be altered"):
        conn.alter_table("db.t", reset_options=[key])
    assert conn.get_table_info("db.t") == before


def test_alter_rejects_existing_column(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT", "b": "STRING"})
    before = conn.get_table_info("db.t")
    with pytest.raises(InvalidAlterError, match="'b' exists already"):
        conn.alter_table("db.t", add_columns={"b": "INT"})
    with pytest.raises(InvalidAlterError, match="'a' exists already"):
        conn.alter_table("db.t", add_columns={"c": "INT", "a": "INT"})
    assert conn.get_table_info("db.t") == before


def test_alter_rejects_reserved_column(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    before = conn.get_table_info("db.t")
    with pytest.raises(InvalidNameError, match="reserved"):
        conn.alter_table("db.t", add_columns={"_change_type": "INT"})
    assert conn.get_table_info("db.t") == before


def test_alter_rejects_bad_option_values(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.pk", schema={"a": "INT", "b": "INT"}, primary_key=["a"])
    conn.create_table("db.log", schema={"a": "INT", "b": "INT"})
    pk_before, log_before = conn.get_table_info("db.pk"), conn.get_table_info("db.log")
    with pytest.raises(InvalidConfigError, match="duration"):
        conn.alter_table("db.log", set_options={"table.log.ttl": "soon"})
    with pytest.raises(InvalidConfigError, match="log tables"):
        conn.alter_table("db.pk", set_options={"table.statistics.columns": "*"})
    with pytest.raises(InvalidConfigError, match="'zz'"):
        conn.alter_table("db.log", set_options={"table.statistics.columns": "zz"})
    assert conn.get_table_info("db.pk") == pk_before and conn.get_table_info("db.log") == log_before


def test_alter_missing_table(conn: fl.Connection) -> None:
    conn.create_database("db")
    with pytest.raises(TableNotExistError):
        conn.alter_table("db.nope", add_columns={"a": "INT"})
    assert conn.list_tables("db") == []


# ---------------------------------------------------------------------------------------------- names
BAD_NAMES = ["", ".", "..", "a/b", "/abs", "a\\b", "..\\x", "a\x00b", "\x00", "a\nb", "ab\n", "\n", "tab\t",
             "__system", "__", "a b", "-lead", "naïve", "x" * 201, "a.b"]


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_database_names(conn: fl.Connection, root: Path, name: str) -> None:
    conn.create_database("ok")
    parent = root.parent
    before_store, before_parent = _tree(root), sorted(os.listdir(parent))
    with pytest.raises(InvalidNameError, match="not allowed"):
        conn.create_database(name)
    with pytest.raises(InvalidNameError):
        conn.drop_database(name, ignore_if_not_exists=True)
    with pytest.raises(InvalidNameError):
        conn.database_exists(name)
    assert conn.list_databases() == ["ok"]
    assert _tree(root) == before_store and sorted(os.listdir(parent)) == before_parent


@pytest.mark.parametrize("name", [n for n in BAD_NAMES if n.count(".") == 0], ids=repr)
def test_bad_table_names(conn: fl.Connection, root: Path, name: str) -> None:
    conn.create_database("ok")
    conn.create_table("ok.t", schema={"a": "INT"})
    before = _tree(root)
    with pytest.raises(InvalidNameError, match="not allowed"):
        conn.create_table(f"ok.{name}", schema={"a": "INT"})
    with pytest.raises(InvalidNameError, match="not allowed"):
        TablePath("ok", name)
    with pytest.raises(InvalidNameError):
        conn.drop_table(f"ok.{name}", ignore_if_not_exists=True)
    with pytest.raises(InvalidNameError):
        conn.get_table(f"ok.{name}")
    assert conn.list_tables("ok") == ["t"]
    assert _tree(root) == before


@pytest.mark.parametrize("path", ["db", "db.t.x", "db..t", ".t", "db.", "../db.t", 42, None])
def test_bad_table_paths(conn: fl.Connection, path: object) -> None:
    conn.create_database("db")
    with pytest.raises(InvalidNameError):
        conn.create_table(path, schema={"a": "INT"})  # type: ignore[arg-type]
    assert conn.list_tables("db") == []


@pytest.mark.parametrize("name", ["a", "A1", "under_score", "dash-ed", "_private", "x" * 200, "0lead"])
def test_good_names_round_trip_and_are_listed(conn: fl.Connection, name: str) -> None:
    """Every name the catalog accepts must also be listed and droppable (nothing hidden)."""
    conn.create_database(name)
    assert name in conn.list_databases()
    conn.create_table(TablePath(name, name), schema={"a": "INT"})
    assert conn.list_tables(name) == [name]
    with pytest.raises(DatabaseNotEmptyError):
        conn.drop_database(name)
    conn.drop_table(TablePath(name, name))
    conn.drop_database(name)
    assert name not in conn.list_databases()


@pytest.mark.parametrize("name", ["__offset", "__timestamp", "__bucket", "_change_type", "_log_offset",
                                  "_commit_timestamp"])
def test_reserved_column_names_rejected(conn: fl.Connection, name: str) -> None:
    conn.create_database("db")
    with pytest.raises(InvalidNameError, match="reserved"):
        conn.create_table("db.t", schema={"a": "INT", name: "INT"})
    assert not conn.table_exists("db.t")


def test_alter_with_a_misspelt_option_says_unknown_and_suggests_the_key(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.t", schema={"a": "INT"})
    before = conn.get_table_info("db.t")
    with pytest.raises(InvalidConfigError, match=r"unknown table option 'table.log.ttll'; did you mean 'table.log.ttl'"):
        conn.alter_table("db.t", set_options={"table.log.ttll": "1 h"})
    with pytest.raises(InvalidConfigError, match="did you mean 'table.log.ttl'"):
        conn.alter_table("db.t", reset_options=["table.log.ttll"])
    with pytest.raises(InvalidConfigError, match="the bucket options are"):
        conn.alter_table("db.t", set_options={"bucket.nums": "2"})
    assert conn.get_table_info("db.t") == before


def test_an_unknown_merge_engine_says_what_leaving_it_unset_gives(conn: fl.Connection) -> None:
    conn.create_database("db")
    with pytest.raises(fl.UnsupportedMergeEngineError, match="leave table.merge-engine unset for the default engine"):
        conn.create_table("db.t", schema={"a": "INT", "v": "INT"}, primary_key=["a"],
                          options={"table.merge-engine": "last_row"})
    assert conn.list_tables("db") == []


def test_writing_the_wrong_kind_of_table_names_the_verb_to_use(conn: fl.Connection) -> None:
    conn.create_database("db")
    conn.create_table("db.pk", schema={"a": "INT"}, primary_key=["a"])
    conn.create_table("db.log", schema={"a": "INT"})
    with pytest.raises(fl.UnsupportedOperationError, match=r"write it with upsert\(\) or delete\(\)"):
        conn.get_table("db.pk").append([{"a": 1}])
    with pytest.raises(fl.UnsupportedOperationError, match=r"write it with append\(\)"):
        conn.get_table("db.log").upsert([{"a": 1}])
    assert conn.get_table("db.pk").to_polars().height == 0 and conn.get_table("db.log").to_polars().height == 0
