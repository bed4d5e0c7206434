"""Bad input: every rejected write, table definition or name raises its specific FlussLakeError, says what to do,
and leaves every table exactly as it was (offsets, state, scanned log). A writer that buffered good rows and
then got a bad batch flushes only the good rows.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import fluss_lake as fl
from fluss_lake import (
    DeletionDisabledError,
    FlussLakeError,
    InvalidConfigError,
    InvalidNameError,
    InvalidPartialUpdateError,
    InvalidTableError,
    NullPrimaryKeyError,
    Schema,
    SchemaMismatchError,
    UnsupportedMergeEngineError,
    UnsupportedOperationError,
)

UTC = timezone.utc
COLUMNS = {"k": "INT", "qty": "INT", "tiny": "TINYINT", "seen_at": "TIMESTAMP_LTZ(3)", "note": "STRING",
           "ratio": "FLOAT", "must": "BIGINT"}


def good_row(k: int) -> dict[str, Any]:
    return {"k": k, "qty": k * 10, "tiny": k % 100, "seen_at": datetime(2024, 1, 1, 12, k % 60, tzinfo=UTC),
            "note": f"n{k}", "ratio": k / 2, "must": k}


# ---------------------------------------------------------------------------------------------- fixtures
class Env:
    """A store with a log table, a PK table with a NOT NULL column, an all-nullable PK table and a
    delete-disabled PK table, all holding data."""

    def __init__(self, root: Path, *, build: bool = True) -> None:
        self.root = root
        self.conn = fl.connect(root)
        c = self.conn
        if not build:
            self.events, self.users = c.get_table("db.events"), c.get_table("db.users")
            self.profiles, self.keep = c.get_table("db.profiles"), c.get_table("db.keep")
            return
        c.create_database("db")
        c.create_table("db.events", schema=Schema.of(COLUMNS, not_null=["must"]), bucket_num=3, bucket_keys=["k"])
        c.create_table("db.users", schema=Schema.of(COLUMNS, primary_key=["k"], not_null=["must"]), bucket_num=3)
        c.create_table("db.profiles", schema={"k": "INT", "region": "STRING", "a": "STRING", "b": "INT"},
                       primary_key=["k", "region"], bucket_num=2)
        c.create_table("db.keep", schema={"k": "INT", "v": "STRING"}, primary_key=["k"],
                       options={"table.delete.behavior": "disable"})
        self.events = c.get_table("db.events")
        self.users = c.get_table("db.users")
        self.profiles = c.get_table("db.profiles")
        self.keep = c.get_table("db.keep")
        self.events.append([good_row(i) for i in range(6)])
        self.events.append(pl.DataFrame([good_row(i) for i in range(6, 9)]))
        self.users.upsert([good_row(i) for i in range(6)])
        self.users.upsert([good_row(2) | {"note": "updated"}])
        self.profiles.upsert([{"k": 1, "region": "eu", "a": "x", "b": 1}, {"k": 2, "region": "us", "a": "y", "b": 2}])
        self.keep.upsert([{"k": 1, "v": "one"}])

    baseline: tuple[dict, dict]  # snapshot() of the untouched store

    def table(self, name: str) -> fl.Table:
        return getattr(self, name)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The populated store, built once; each test gets its own copy."""
    root = tmp_path_factory.mktemp("template") / "store"
    Env(root)
    return root


@pytest.fixture(scope="module")
def baseline(template: Path) -> tuple[dict, dict]:
    """What `snapshot` returns on an untouched copy of the template (computed once)."""
    state = capture(fl.connect(template))
    return state, state


@pytest.fixture
def env(template: Path, baseline: tuple[dict, dict], tmp_path: Path) -> Env:
    root = tmp_path / "store"
    shutil.copytree(template, root)
    env = Env(root, build=False)
    env.baseline = baseline
    return env


def _sorted(frame: pl.DataFrame, by: list[str]) -> list[dict]:
    return frame.sort(by, nulls_last=True).to_dicts()


def capture(conn: fl.Connection) -> dict[str, Any]:
    """Everything observable about every table through `conn`."""
    state: dict[str, Any] = {}
    for db in conn.list_databases():
        for name in conn.list_tables(db):
            table = conn.get_table(f"{db}.{name}")
            state[f"{db}.{name}"] = {
                "info": table.info,
                "end_offsets": table.end_offsets(),
                "rows": _sorted(table.to_polars(), list(table.schema.names)),
                "log": _sorted(table.scan_log(), ["_bucket", "_offset"]),
            }
    return state


def snapshot(env: Env) -> tuple[dict, dict]:
    """State seen by the live connection (its cached tables) and by a fresh connection on the same folder."""
    return capture(env.conn), capture(fl.connect(env.root))


def says(err: pytest.ExceptionInfo, *needles: str) -> None:
    """The message names what is wrong and what would be accepted instead (each needle, case-insensitive)."""
    message = str(err.value)
    for needle in needles:
        assert needle.lower() in message.lower(), f"{needle!r} not in message: {message}"


# ---------------------------------------------------------------------------------------------- bad rows
# (id, mutation of a good row, exception class, needles in the message, tables it applies to)
Mutation = Callable[[dict], dict]
BAD_ROWS: list[tuple[str, Mutation, type[FlussLakeError], tuple[str, ...]]] = [
    ("string-into-int", lambda r: r | {"qty": "x"}, SchemaMismatchError, ("'qty'", "INT")),
    ("float-into-int", lambda r: r | {"qty": 1.5}, SchemaMismatchError, ("'qty'", "INT")),
    ("integral-float-into-int", lambda r: r | {"qty": 2.0}, SchemaMismatchError, ("'qty'", "INT")),
    ("bool-into-int", lambda r: r | {"qty": True}, SchemaMismatchError, ("'qty'", "INT")),
    ("int-into-string", lambda r: r | {"note": 5}, SchemaMismatchError, ("'note'", "STRING")),
    ("out-of-range-tinyint", lambda r: r | {"tiny": 300}, SchemaMismatchError, ("'tiny'", "TINYINT")),
    ("negative-out-of-range-tinyint", lambda r: r | {"tiny": -129}, SchemaMismatchError, ("'tiny'", "TINYINT")),
    # a DOUBLE beyond FLOAT's range would be stored as inf: out of range like 300 for TINYINT
    ("out-of-range-float", lambda r: r | {"ratio": 1e300}, SchemaMismatchError, ("'ratio'", "FLOAT")),
    ("naive-datetime-into-ltz", lambda r: r | {"seen_at": datetime(2024, 1, 1, 12)}, SchemaMismatchError,
     ("'seen_at'", "TIMESTAMP_LTZ")),
    ("missing-column", lambda r: {k: v for k, v in r.items() if k != "note"}, SchemaMismatchError,
     ("'note'", "missing")),
    ("unknown-column", lambda r: r | {"bogus": 1}, SchemaMismatchError, ("'bogus'", "unknown")),
    ("null-key", lambda r: r | {"k": None}, NullPrimaryKeyError, ("'k'", "null")),
    ("not-null-column-null", lambda r: r | {"must": None}, SchemaMismatchError, ("'must'", "NOT NULL")),
]
FORMS = ["dicts", "polars", "arrow"]


def make_batch(form: str, rows: list[dict]) -> Any:
    """`rows` as the user would hand them over in `form` (types as Polars/Arrow infer them)."""
    if form == "dicts":
        return rows
    if form == "polars":
        return pl.DataFrame(rows)
    return pa.Table.from_pylist(rows)


def write(table: fl.Table, data: Any) -> Any:
    return table.append(data) if not table.is_primary_key_table else table.upsert(data)


def new_writer(table: fl.Table) -> Any:
    return table.new_append() if not table.is_primary_key_table else table.new_upsert()


def put(writer: Any, data: Any) -> None:
    (writer.append if hasattr(writer, "append") else writer.upsert)(data)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("table_name", ["events", "users"])
@pytest.mark.parametrize(("case", "mutate", "exc", "needles"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_bad_rows_rejected_and_nothing_changes(env: Env, table_name: str, form: str, case: str, mutate: Mutation,
                                               exc: type, needles: tuple[str, ...]) -> None:
    table = env.table(table_name)
    before = env.baseline
    # the bad row alone, twice, and a good row followed by the bad one: the whole batch is rejected
    for rows in ([mutate(good_row(50))], [mutate(good_row(50)), mutate(good_row(51))]):
        with pytest.raises(exc) as err:
            write(table, make_batch(form, rows))
        says(err, *needles)
    if form == "dicts" and case != "missing-column":  # a key absent from one dict only reads as null
        with pytest.raises(exc) as err:
            write(table, [good_row(60), mutate(good_row(61))])
        says(err, *needles)
    assert snapshot(env) == before


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("table_name", ["events", "users"])
@pytest.mark.parametrize(("case", "mutate", "exc", "needles"), BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_writer_flushes_only_good_rows_after_bad_batch(env: Env, table_name: str, form: str, case: str,
                                                      mutate: Mutation, exc: type, needles: tuple[str, ...]) -> None:
    table = env.table(table_name)
    live_before = env.baseline[0]
    before = live_before[f"db.{table_name}"]
    writer = new_writer(table)
    good = [good_row(100), good_row(101)]
    put(writer, good)
    with pytest.raises(exc):
        put(writer, make_batch(form, [mutate(good_row(102))]))
    put(writer, [good_row(103)])
    result = writer.flush()
    assert result.rows == 3
    rows = _sorted(table.to_polars(), list(table.schema.names))
    expected = _sorted(pl.concat([pl.DataFrame(before["rows"], schema=table.schema.polars_schema),
                                  pl.DataFrame([*good, good_row(103)], schema=table.schema.polars_schema)]),
                       list(table.schema.names))
    assert rows == expected
    assert sum(table.end_offsets().values()) > sum(before["end_offsets"].values())
    assert all(table.end_offsets()[b] >= before["end_offsets"][b] for b in before["end_offsets"])
    # nothing of the bad batch was committed anywhere
    fresh = fl.connect(env.root).get_table(f"db.{table_name}")
    assert 102 not in fresh.to_polars()["k"].to_list()
    assert 102 not in fresh.scan_log()["k"].to_list()
    # the other tables are untouched
    after_live, _ = snapshot(env)
    assert {k: v for k, v in after_live.items() if k != f"db.{table_name}"} == \
        {k: v for k, v in live_before.items() if k != f"db.{table_name}"}


def test_arrow_record_batches_with_bad_types(env: Env) -> None:
    before = env.baseline
    batch = pa.RecordBatch.from_pylist([good_row(70) | {"qty": "seventy"}])
    with pytest.raises(SchemaMismatchError) as err:
        env.events.append([batch])
    says(err, "'qty'")
    with pytest.raises(SchemaMismatchError):
        env.users.upsert(batch)
    assert snapshot(env) == before


def test_unsupported_data_objects(env: Env) -> None:
    before = env.baseline
    with pytest.raises(SchemaMismatchError) as err:
        env.events.append(good_row(1))  # a single dict, not a list of rows
    says(err, "list of dicts")
    with pytest.raises(SchemaMismatchError):
        env.events.append(42)
    with pytest.raises(SchemaMismatchError):
        env.users.upsert([good_row(1), 5])
    assert snapshot(env) == before


# ---------------------------------------------------------------------------------------------- deletes
def test_delete_with_null_key_or_unknown_column(env: Env) -> None:
    before = env.baseline
    with pytest.raises(NullPrimaryKeyError) as err:
        env.users.delete([{"k": 1}, {"k": None}])
    says(err, "'k'")
    with pytest.raises(SchemaMismatchError) as err:
        env.users.delete([{"k": 1, "nope": 1}])
    says(err, "'nope'")
    with pytest.raises(SchemaMismatchError) as err:
        env.profiles.delete([{"k": 1}])  # region missing
    says(err, "'region'")
    with pytest.raises(SchemaMismatchError) as err:
        env.users.delete([{"k": "one"}])
    says(err, "'k'")
    assert snapshot(env) == before


def test_delete_disabled(env: Env) -> None:
    before = env.baseline
    with pytest.raises(DeletionDisabledError) as err:
        env.keep.delete([{"k": 1}])
    says(err, "table.delete.behavior", "disable", "allow")
    writer = env.keep.new_upsert()
    writer.upsert([{"k": 2, "v": "two"}])
    with pytest.raises(DeletionDisabledError):
        writer.delete([{"k": 1}])
    writer.flush()
    assert _sorted(env.keep.to_polars(), ["k"]) == [{"k": 1, "v": "one"}, {"k": 2, "v": "two"}]
    after = snapshot(env)
    for state, old in zip(after, before, strict=True):
        assert {k: v for k, v in state.items() if k != "db.keep"} == {k: v for k, v in old.items() if k != "db.keep"}


# ---------------------------------------------------------------------------------------------- partial updates
def test_partial_update_with_not_null_non_key_column(env: Env) -> None:
    before = env.baseline
    with pytest.raises(InvalidPartialUpdateError) as err:
        env.users.new_upsert(target_columns=["k", "note"])
    says(err, "must", "nullable")
    with pytest.raises(InvalidPartialUpdateError):
        env.users.upsert([{"k": 1, "note": "x"}], target_columns=["k", "note"])
    with pytest.raises(InvalidPartialUpdateError):
        env.users.delete([{"k": 1}], target_columns=["k", "note"])
    assert snapshot(env) == before


def test_partial_update_without_whole_primary_key(env: Env) -> None:
    before = env.baseline
    with pytest.raises(InvalidPartialUpdateError) as err:
        env.profiles.new_upsert(target_columns=["k", "a"])
    says(err, "region", "primary key")
    with pytest.raises(InvalidPartialUpdateError):
        env.profiles.upsert([{"k": 1, "a": "z"}], target_columns=["k", "a"])
    assert snapshot(env) == before


def test_partial_update_with_unknown_target_column(env: Env) -> None:
    before = env.baseline
    with pytest.raises(InvalidPartialUpdateError) as err:
        env.profiles.new_upsert(target_columns=["k", "region", "zzz"])
    says(err, "zzz")
    assert snapshot(env) == before


def test_partial_writer_flushes_only_good_rows(env: Env) -> None:
    writer = env.profiles.new_upsert(target_columns=["k", "region", "a"])
    writer.upsert([{"k": 1, "region": "eu", "a": "new"}])
    with pytest.raises(NullPrimaryKeyError):
        writer.upsert([{"k": 2, "region": None, "a": "bad"}])
    with pytest.raises(SchemaMismatchError):
        writer.upsert([{"k": 2, "region": "us", "a": 5}])
    with pytest.raises(SchemaMismatchError):
        writer.upsert([{"k": 2, "a": "no region"}])
    writer.flush()
    assert _sorted(env.profiles.to_polars(), ["k"]) == [{"k": 1, "region": "eu", "a": "new", "b": 1},
                                                       {"k": 2, "region": "us", "a": "y", "b": 2}]


@pytest.mark.parametrize(("engine", "extra"), [("first_row", {}),
                                               ("versioned", {"table.merge-engine.versioned.ver-column": "b"})])
def test_partial_update_rejected_by_full_row_engines(env: Env, engine: str, extra: dict) -> None:
    env.conn.create_table("db.eng", schema={"k": "INT", "a": "STRING", "b": "INT"}, primary_key=["k"],
                          options={"table.merge-engine": engine, **extra})
    table = env.conn.get_table("db.eng")
    table.upsert([{"k": 1, "a": "x", "b": 1}])
    before = snapshot(env)
    with pytest.raises(InvalidPartialUpdateError) as err:
        table.new_upsert(target_columns=["k", "a"])
    says(err, engine, "partial")
    with pytest.raises(InvalidPartialUpdateError):
        table.upsert([{"k": 1, "a": "y"}], target_columns=["k", "a"])
    assert snapshot(env) == before


# ---------------------------------------------------------------------------------------------- wrong table kind
def test_upsert_into_log_table(env: Env) -> None:
    before = env.baseline
    for call in (lambda: env.events.upsert([good_row(1)]), lambda: env.events.delete([{"k": 1}]),
                 lambda: env.events.new_upsert(), lambda: env.events.new_upsert(target_columns=["k"])):
        with pytest.raises(UnsupportedOperationError) as err:
            call()
        says(err, "new_append")
    assert snapshot(env) == before


def test_append_into_pk_table(env: Env) -> None:
    before = env.baseline
    for call in (lambda: env.users.append([good_row(1)]), lambda: env.users.new_append()):
        with pytest.raises(UnsupportedOperationError) as err:
            call()
        says(err, "new_upsert")
    assert snapshot(env) == before


# ---------------------------------------------------------------------------------------------- table definitions
PK = {"k": "INT", "v": "BIGINT", "s": "STRING", "b": "BOOLEAN"}
BAD_TABLES: list[tuple[str, dict, type[FlussLakeError], tuple[str, ...]]] = [
    ("first-row-delete-allow",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "first_row", "table.delete.behavior": "allow"}),
     InvalidConfigError, ("first_row", "allow", "ignore")),
    ("versioned-delete-allow",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "versioned", "table.delete.behavior": "ALLOW",
                                                 "table.merge-engine.versioned.ver-column": "v"}),
     InvalidConfigError, ("versioned", "allow")),
    ("unknown-merge-engine",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "fancy"}),
     UnsupportedMergeEngineError, ("fancy", "first_row", "aggregation")),
    ("merge-engine-on-log-table",
     dict(schema=PK, options={"table.merge-engine": "first_row"}), InvalidConfigError, ("primary key",)),
    ("delete-behavior-on-log-table",
     dict(schema=PK, options={"table.delete.behavior": "ignore"}), InvalidConfigError, ("primary key",)),
    ("unknown-table-option",
     dict(schema=PK, primary_key=["k"], options={"table.log.tll": "1 d"}), InvalidConfigError,
     ("table.log.tll", "table.log.ttl")),
    ("unknown-bucket-option",
     dict(schema=PK, primary_key=["k"], options={"bucket.count": "3"}), InvalidConfigError, ("bucket.count", "bucket.num")),
    ("bad-delete-behavior",
     dict(schema=PK, primary_key=["k"], options={"table.delete.behavior": "sometimes"}), InvalidConfigError,
     ("sometimes", "allow", "ignore", "disable")),
    ("bad-changelog-image",
     dict(schema=PK, primary_key=["k"], options={"table.changelog.image": "partial"}), InvalidConfigError,
     ("partial", "wal")),
    ("bad-no-key-assigner",
     dict(schema=PK, options={"client.writer.bucket.no-key-assigner": "random"}), InvalidConfigError,
     ("random", "round_robin")),
    ("bad-compression",
     dict(schema=PK, options={"table.log.arrow.compression.type": "gzip"}), InvalidConfigError, ("gzip", "zstd")),
    ("bad-zstd-level",
     dict(schema=PK, options={"table.log.arrow.compression.zstd.level": "30"}), InvalidConfigError, ("1 to 22",)),
    ("bad-ttl",
     dict(schema=PK, options={"table.log.ttl": "a week"}), InvalidConfigError, ("table.log.ttl", "7 d")),
    ("agg-without-aggregation-engine",
     dict(schema=PK, primary_key=["k"], options={"fields.v.agg": "sum"}), InvalidConfigError, ("aggregation",)),
    ("agg-on-log-table",
     dict(schema=PK, options={"fields.v.agg": "sum"}), InvalidConfigError, ("aggregation",)),
    ("agg-on-unsupported-type",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation", "fields.s.agg": "sum"}),
     InvalidConfigError, ("sum", "STRING", "fields.s.agg")),
    ("bool-agg-on-int",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation", "fields.v.agg": "bool_and"}),
     InvalidConfigError, ("bool_and", "BIGINT")),
    ("unknown-agg-function",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation", "fields.v.agg": "median"}),
     InvalidConfigError, ("median",)),
    ("agg-on-unknown-column",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation", "fields.zz.agg": "sum"}),
     InvalidConfigError, ("zz",)),
    ("agg-on-primary-key",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation", "fields.k.agg": "sum"}),
     InvalidConfigError, ("'k'",)),
    ("aggregation-with-wal",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "aggregation",
                                                 "table.changelog.image": "WAL"}),
     InvalidConfigError, ("wal", "full")),
    ("versioned-without-ver-column",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "versioned"}), InvalidConfigError,
     ("table.merge-engine.versioned.ver-column",)),
    ("versioned-string-ver-column",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "versioned",
                                                 "table.merge-engine.versioned.ver-column": "s"}),
     InvalidConfigError, ("'s'", "BIGINT")),
    ("versioned-missing-ver-column",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine": "versioned",
                                                 "table.merge-engine.versioned.ver-column": "nope"}),
     InvalidConfigError, ("nope",)),
    ("ver-column-without-versioned",
     dict(schema=PK, primary_key=["k"], options={"table.merge-engine.versioned.ver-column": "v"}),
     InvalidConfigError, ("versioned",)),
    ("statistics-on-pk-table",
     dict(schema=PK, primary_key=["k"], options={"table.statistics.columns": "*"}), InvalidConfigError,
     ("table.statistics.columns", "log tables")),
    ("statistics-unknown-column",
     dict(schema=PK, options={"table.statistics.columns": "v,zz"}), InvalidConfigError, ("zz",)),
    ("statistics-unsupported-type",
     dict(schema={"a": "INT", "raw": "BYTES"}, options={"table.statistics.columns": "raw"}), InvalidConfigError,
     ("raw", "BYTES")),
    ("bucket-key-not-in-pk",
     dict(schema=PK, primary_key=["k"], bucket_keys=["v"]), InvalidTableError, ("subset", "'v'")),
    ("bucket-key-partly-in-pk",
     dict(schema=PK, primary_key=["k", "s"], bucket_keys=["k", "v"]), InvalidTableError, ("subset",)),
    ("bucket-key-unknown-column",
     dict(schema=PK, bucket_keys=["zz"]), InvalidTableError, ("'zz'",)),
    ("bucket-key-option-not-in-pk",
     dict(schema=PK, primary_key=["k"], options={"bucket.key": "s"}), InvalidTableError, ("subset",)),
    ("bucket-num-zero", dict(schema=PK, bucket_num=0), InvalidConfigError, ("bucket.num", "1 to 4096")),
    ("bucket-num-negative", dict(schema=PK, primary_key=["k"], bucket_num=-2), InvalidConfigError, ("1 to 4096",)),
    ("bucket-num-too-large", dict(schema=PK, primary_key=["k"], bucket_num=4097), InvalidConfigError, ("1 to 4096",)),
    ("bucket-num-option-zero", dict(schema=PK, options={"bucket.num": "0"}), InvalidConfigError, ("bucket.num", "1 to 4096")),
    ("bucket-num-option-too-large", dict(schema=PK, options={"bucket.num": 5000}), InvalidConfigError,
     ("bucket.num", "1 to 4096")),
    ("bucket-num-option-not-a-number", dict(schema=PK, options={"bucket.num": "many"}), InvalidConfigError,
     ("bucket.num", "1 to 4096")),
    ("bucket-num-not-int", dict(schema=PK, bucket_num=2.5), InvalidConfigError, ("bucket.num", "1 to 4096")),
    ("primary-key-unknown-column", dict(schema=PK, primary_key=["zz"]), InvalidTableError, ("'zz'",)),
    ("primary-key-twice", dict(schema=PK, primary_key=["k", "k"]), InvalidTableError, ("twice",)),
    ("unknown-column-type", dict(schema={"a": "INTEGRAL"}), InvalidTableError, ("INTEGRAL",)),
    ("list-primary-key", dict(schema={"a": pl.List(pl.Int32), "b": "INT"}, primary_key=["a"]), InvalidTableError,
     ("'a'",)),
    ("no-columns", dict(schema={}), InvalidTableError, ("column",)),
]


@pytest.mark.parametrize(("case", "kwargs", "exc", "needles"), BAD_TABLES, ids=[c[0] for c in BAD_TABLES])
def test_bad_table_definitions(env: Env, case: str, kwargs: dict, exc: type, needles: tuple[str, ...]) -> None:
    before = env.baseline
    with pytest.raises(exc) as err:
        env.conn.create_table("db.bad", **kwargs)
    says(err, *needles)
    assert not env.conn.table_exists("db.bad")
    assert env.conn.list_tables("db") == ["events", "keep", "profiles", "users"]
    assert snapshot(env) == before


# ---------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize("name", ["__offset", "__timestamp", "__bucket", "_change_type", "_log_offset",
                                  "_commit_timestamp"])
@pytest.mark.parametrize("kind", ["log", "pk"])
def test_reserved_column_names(env: Env, name: str, kind: str) -> None:
    before = env.baseline
    with pytest.raises(InvalidNameError) as err:
        env.conn.create_table("db.bad", schema={"k": "INT", name: "INT"}, primary_key=["k"] if kind == "pk" else ())
    says(err, name, "reserved")
    with pytest.raises(InvalidNameError):
        env.conn.alter_table("db.events", add_columns={name: "INT"})
    assert not env.conn.table_exists("db.bad")
    assert snapshot(env) == before


@pytest.mark.parametrize("name", ["_bucket", "_offset"])
def test_scan_system_column_names_are_reserved(env: Env, name: str) -> None:
    """scan_log/poll return `_bucket`, `_offset`, `_change_type`, `_commit_timestamp` beside the table columns, so a
    user column with one of those names could never be read back; it must be rejected at creation."""
    before = env.baseline
    with pytest.raises(InvalidNameError) as err:
        env.conn.create_table("db.bad", schema={"k": "INT", name: "INT"})
    says(err, name, "reserved")
    assert snapshot(env) == before


@pytest.mark.parametrize("name", ["__is_delete", "__exists", "__delete", "__old__k", "__new__v", "__pos"])
def test_internal_helper_column_names_rejected_or_round_trip(env: Env, name: str) -> None:
    """Column names fluss-lake uses internally while writing must be rejected, or work like any other name."""
    try:
        env.conn.create_table("db.odd", schema={"k": "INT", "v": "INT", name: "BOOLEAN"}, primary_key=["k"])
    except InvalidNameError:
        assert not env.conn.table_exists("db.odd")
        return
    table = env.conn.get_table("db.odd")
    table.upsert([{"k": 1, "v": 1, name: True}, {"k": 2, "v": 2, name: False}])
    table.upsert([{"k": 1, "v": 10, name: False}])
    assert _sorted(table.to_polars(), ["k"]) == [{"k": 1, "v": 10, name: False}, {"k": 2, "v": 2, name: False}]


ESCAPING = ["..", ".", "a/b", "../x", "/abs", "a\\b", "", "\x00", "a\x00b", "\n", "a\nb", "ab\n", "__sys", "__",
            "a b", "-x", "x" * 201]


@pytest.mark.parametrize("name", ESCAPING, ids=repr)
def test_names_that_could_escape_the_store(env: Env, name: str) -> None:
    parent = env.root.parent
    outside = sorted(p.name for p in parent.iterdir())
    top = sorted(p.name for p in env.root.iterdir())
    before = env.baseline
    with pytest.raises(InvalidNameError) as err:
        env.conn.create_database(name)
    says(err, "not allowed")
    with pytest.raises(InvalidNameError):
        env.conn.drop_database(name, ignore_if_not_exists=True, cascade=True)
    with pytest.raises(InvalidNameError):
        env.conn.create_table(f"db.{name}", schema={"a": "INT"})
    with pytest.raises(InvalidNameError):
        fl.TablePath("db", name)
    with pytest.raises(InvalidNameError):
        fl.TablePath(name, "t")
    with pytest.raises(InvalidNameError):
        env.conn.drop_table(f"db.{name}", ignore_if_not_exists=True)
    assert sorted(p.name for p in parent.iterdir()) == outside
    assert sorted(p.name for p in env.root.iterdir()) == top
    assert env.conn.list_databases() == ["db"]
    assert snapshot(env) == before
