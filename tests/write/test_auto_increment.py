"""Auto-increment columns (Fluss 0.9 ``auto-increment.fields``), against Fluss's documented behaviour
(``table-design/table-types/pk-table.md`` "Auto-Increment Column", ``UpsertWriterImpl.sanityCheck``,
``Schema.normalizeColumns``, ``BoundedSegmentSequenceGenerator``, ``KvTablet.processUpsert``):

* only on primary-key tables, one INT/BIGINT column outside the primary key; values cannot be written;
* a new key gets the next value of its bucket's cached range (``table.auto-increment.cache-size``, ranges
  ``[i*size+1, (i+1)*size]``), an update keeps it, a deleted and re-inserted key gets a new one;
* values are unique table-wide and never reused: across buckets, partitions, restarts (a new ``connect()`` and a
  new process) and concurrent writers of one bucket (two processes); within a bucket they increase with offsets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake import InvalidConfigError, InvalidPartialUpdateError, SchemaMismatchError, UnsupportedOperationError
from fluss_lake.catalog import data_prefix
from fluss_lake.io import layout
from fluss_lake.kv.auto_increment import RangeClaim, read_claims


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def conn(root: Path) -> fl.Connection:
    connection = fl.connect(root)
    connection.create_database("d")
    return connection


def _dictionary(conn: fl.Connection, name: str = "d.ids", *, dtype: str = "BIGINT", buckets: int = 1,
                cache: int | None = None, with_v: bool = False, **options: object) -> fl.Table:
    """A dictionary table: ``name`` (key) -> ``uid`` (auto-increment), plus an INT ``v`` with `with_v`."""
    opts = {"auto-increment.fields": "uid", **options}
    if cache is not None:
        opts["table.auto-increment.cache-size"] = cache
    schema = {"name": "STRING", "uid": dtype, **({"v": "INT"} if with_v else {})}
    conn.create_table(name, schema=schema, primary_key=["name"], bucket_num=buckets, options=opts)
    return conn.get_table(name)


def _claims(table: fl.Table) -> list[RangeClaim]:
    column = table.info.schema.column("uid")
    return read_claims(table.connection.store, layout.auto_increment_folder(data_prefix(table.info), column.column_id))


def _uids(table: fl.Table) -> dict[str, int]:
    return dict(table.to_polars().select("name", "uid").iter_rows())


def _inserts(table: fl.Table) -> pl.DataFrame:
    """Every +I record of the table's log, in offset order per bucket."""
    log = table.scan_log()
    keys = [c for c in ("_partition", "_bucket") if c in log.columns]
    return log.filter(pl.col("_change_type") == "+I").sort([*keys, "_offset"])


def _check_never_reused(table: fl.Table) -> None:
    """No value given twice (the +I records hold every value ever given), each bucket's increase with offsets,
    and each value lies in a range its bucket claimed."""
    inserts = _inserts(table)
    assert inserts.get_column("uid").null_count() == 0
    assert inserts.get_column("uid").is_unique().all(), inserts
    keys = [c for c in ("_partition", "_bucket") if c in inserts.columns]
    for _, part in inserts.group_by(keys):
        uids = part.sort("_offset").get_column("uid").to_list()
        assert uids == sorted(uids), part
    claims = _claims(table)
    for row in inserts.iter_rows(named=True):
        owner = [c for c in claims if c.start <= row["uid"] <= c.end]
        assert len(owner) == 1 and owner[0].bucket == row["_bucket"], (row, owner)


# ---------------------------------------------------------------------------------------------- declaring one
BAD_DECLARATIONS = [
    ("log-table", dict(schema={"name": "STRING", "uid": "BIGINT"}, options={"auto-increment.fields": "uid"}),
     ("primary-key table",)),
    ("two-columns", dict(schema={"name": "STRING", "uid": "BIGINT", "n": "INT"}, primary_key=["name"],
                         options={"auto-increment.fields": "uid,n"}), ("only one auto-increment column",)),
    ("unknown-column", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                            options={"auto-increment.fields": "id"}), ("'id' does not exist",)),
    ("primary-key-column", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name", "uid"],
                                options={"auto-increment.fields": "uid"}), ("cannot be part of the primary key",)),
    ("string-column", dict(schema={"name": "STRING", "uid": "STRING"}, primary_key=["name"],
                           options={"auto-increment.fields": "uid"}), ("INT or BIGINT", "STRING")),
    ("smallint-column", dict(schema={"name": "STRING", "uid": "SMALLINT"}, primary_key=["name"],
                             options={"auto-increment.fields": "uid"}), ("INT or BIGINT", "SMALLINT")),
    ("version-column", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                            options={"auto-increment.fields": "uid", "table.merge-engine": "versioned",
                                     "table.merge-engine.versioned.ver-column": "uid"}), ("version column",)),
    ("aggregated", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                        options={"auto-increment.fields": "uid", "table.merge-engine": "aggregation",
                                 "fields.uid.agg": "sum"}), ("cannot be aggregated", "fields.uid")),
    ("cache-size-zero", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                             options={"auto-increment.fields": "uid", "table.auto-increment.cache-size": 0}),
     ("positive whole number",)),
    ("cache-size-text", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                             options={"auto-increment.fields": "uid", "table.auto-increment.cache-size": "many"}),
     ("positive whole number",)),
    ("cache-size-alone", dict(schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"],
                              options={"table.auto-increment.cache-size": 10}), ("auto-increment.fields",)),
]


@pytest.mark.parametrize(("case", "kwargs", "words"), BAD_DECLARATIONS, ids=[c[0] for c in BAD_DECLARATIONS])
def test_bad_declarations_are_refused_and_create_nothing(conn: fl.Connection, root: Path, case: str,
                                                         kwargs: dict, words: tuple[str, ...]) -> None:
    before = sorted(p.name for p in root.rglob("*"))
    with pytest.raises(InvalidConfigError) as err:
        conn.create_table("d.t", **kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert conn.list_tables("d") == [] and sorted(p.name for p in root.rglob("*")) == before


def test_the_column_cannot_be_added_or_changed_later(conn: fl.Connection) -> None:
    conn.create_table("d.t", schema={"name": "STRING", "uid": "BIGINT"}, primary_key=["name"])
    before = conn.get_table_info("d.t")
    with pytest.raises(fl.InvalidAlterError, match="'auto-increment.fields' cannot be altered"):
        conn.alter_table("d.t", set_options={"auto-increment.fields": "uid"})
    table = _dictionary(conn, "d.ids")
    with pytest.raises(fl.InvalidAlterError, match="cannot be altered"):
        conn.alter_table("d.ids", reset_options=["auto-increment.fields"])
    with pytest.raises(fl.InvalidAlterError, match="cannot be altered"):
        conn.alter_table("d.ids", set_options={"table.auto-increment.cache-size": "5"})
    assert conn.get_table_info("d.t") == before and table.info.auto_increment_column == "uid"
    info = conn.alter_table("d.ids", add_columns={"extra": "STRING"})  # other changes keep the column
    assert info.schema.auto_increment_columns == ("uid",) and info.options["auto-increment.fields"] == "uid"


# ---------------------------------------------------------------------------------------------- values
def test_new_keys_get_values_and_updates_keep_them(conn: fl.Connection) -> None:
    table = _dictionary(conn, with_v=True)
    table.upsert([{"name": "a", "v": 1}, {"name": "b", "v": 1}, {"name": "c", "v": None}])
    assert _uids(table) == {"a": 1, "b": 2, "c": 3}  # Fluss's first range starts at 1
    table.upsert([{"name": "b", "v": 7}, {"name": "d", "v": 1}])
    table.upsert(pl.DataFrame({"name": ["a"], "uid": [None], "v": [5]}, schema={"name": pl.String, "uid": pl.Int64,
                                                                               "v": pl.Int32}))  # null = not given
    assert _uids(table) == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert dict(table.to_polars().select("name", "v").iter_rows()) == {"a": 5, "b": 7, "c": None, "d": 1}
    log = table.scan_log().select("_change_type", "name", "uid").rows()
    assert [r for r in log if r[1] == "b"] == [("+I", "b", 2), ("-U", "b", 2), ("+U", "b", 2)]
    _check_never_reused(table)


def test_a_deleted_key_inserted_again_gets_a_new_value(conn: fl.Connection) -> None:
    table = _dictionary(conn)
    table.upsert([{"name": "a"}, {"name": "b"}])
    table.delete([{"name": "a"}])
    table.upsert([{"name": "a"}])
    assert _uids(table) == {"a": 3, "b": 2}
    writer = table.new_upsert()  # delete and insert again within one batch
    writer.delete([{"name": "b"}])
    writer.upsert([{"name": "b"}, {"name": "c"}])
    writer.flush()
    assert _uids(table) == {"a": 3, "b": 4, "c": 5} or _uids(table) == {"a": 3, "b": 5, "c": 4}
    _check_never_reused(table)


def test_writes_giving_values_are_refused_and_change_nothing(conn: fl.Connection) -> None:
    table = _dictionary(conn)
    table.upsert([{"name": "a"}])
    before, end = table.to_polars(), table.end_offsets()
    with pytest.raises(SchemaMismatchError, match="1 row.*auto-increment column 'uid'.*not allowed.*drop"):
        table.upsert([{"name": "b", "uid": 10}, {"name": "c"}])
    with pytest.raises(SchemaMismatchError, match="auto-increment column 'uid'"):
        table.upsert([{"name": "a", "uid": 1}])  # even its own value
    with pytest.raises(InvalidPartialUpdateError, match="auto-increment column 'uid'.*target_columns"):
        table.upsert([{"name": "b", "uid": 10}], target_columns=["name", "uid"])
    with pytest.raises(InvalidPartialUpdateError, match="auto-increment column 'uid'"):
        table.new_upsert(target_columns=["name", "uid"])
    assert table.to_polars().equals(before) and table.end_offsets() == end


def test_partial_updates_leave_the_column_out(conn: fl.Connection) -> None:
    conn.create_table("d.t", schema={"name": "STRING", "uid": "INT", "a": "INT", "b": "INT"}, primary_key=["name"],
                      options={"auto-increment.fields": "uid"})
    table = conn.get_table("d.t")
    table.upsert([{"name": "x", "a": 1}], target_columns=["name", "a"])
    table.upsert([{"name": "x", "b": 2}, {"name": "y", "b": 3}], target_columns=["name", "b"])
    assert table.to_polars().sort("name").rows() == [("x", 1, 1, 2), ("y", 2, None, 3)]
    table.upsert([{"name": "x"}], target_columns=["name"])  # key only on an existing key: nothing changes
    assert table.scan_log().height == 4  # +I x, -U/+U x, +I y


def test_a_not_null_auto_increment_column_is_filled(conn: fl.Connection) -> None:
    schema = fl.Schema.of({"name": "STRING", "uid": "BIGINT", "v": "INT"}, primary_key=["name"], not_null=["uid"])
    conn.create_table("d.t", descriptor=fl.TableDescriptor(schema, options={"auto-increment.fields": "uid"}))
    table = conn.get_table("d.t")
    table.upsert([{"name": "x", "v": 1}])
    table.upsert([{"name": "y", "v": 2}], target_columns=["name", "v"])  # the NOT NULL column is assigned
    assert table.to_polars().sort("name").rows() == [("x", 1, 1), ("y", 2, 2)]


@pytest.mark.parametrize("engine", [
    {"table.merge-engine": "first_row"},
    {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "v"},
    {"table.merge-engine": "aggregation", "fields.v.agg": "sum"},
])
def test_every_merge_engine_numbers_new_keys_and_keeps_the_value(conn: fl.Connection, engine: dict) -> None:
    table = _dictionary(conn, with_v=True, **engine)
    table.upsert([{"name": "a", "v": 1}, {"name": "b", "v": 1}])
    table.upsert([{"name": "a", "v": 2}, {"name": "c", "v": 1}])
    assert _uids(table) == {"a": 1, "b": 2, "c": 3}
    v = dict(table.to_polars().select("name", "v").iter_rows())
    assert v["a"] == {"first_row": 1, "versioned": 2, "aggregation": 3}[engine["table.merge-engine"]]
    _check_never_reused(table)


def test_wal_changelog_keeps_inserts_as_plus_i(conn: fl.Connection) -> None:
    """Fluss writes WAL inserts as +U only without an auto-increment column: the old row must be read to keep
    its value, and the insert carries the new one."""
    table = _dictionary(conn, with_v=True, **{"table.changelog.image": "WAL"})
    table.upsert([{"name": "a", "v": 1}])
    table.upsert([{"name": "a", "v": 2}, {"name": "b", "v": 1}])
    log = table.scan_log().select("_change_type", "name", "uid").rows()
    assert log == [("+I", "a", 1), ("+U", "a", 1), ("+I", "b", 2)]


def test_cache_size_cuts_the_sequence_into_ranges_per_bucket(conn: fl.Connection) -> None:
    table = _dictionary(conn, buckets=3, cache=4)
    for start in range(0, 60, 12):
        table.upsert([{"name": f"k{i}"} for i in range(start, start + 12)])
    claims = _claims(table)
    assert [(c.start, c.end) for c in claims] == [(4 * i + 1, 4 * i + 4) for i in range(len(claims))]
    assert {c.bucket for c in claims} == {0, 1, 2}
    uids = _uids(table)
    assert len(uids) == 60 and len(set(uids.values())) == 60
    # a bucket uses up a range before it claims the next: only its newest range may be partly used
    inserts = _inserts(table).with_columns(((pl.col("uid") - 1) // 4).alias("range"))
    for (bucket,), part in inserts.group_by(["_bucket"]):
        ranges = part.group_by("range").len().sort("range")
        assert ranges["len"].to_list()[:-1] == [4] * (ranges.height - 1), (bucket, ranges)
        assert sorted(ranges["range"].to_list()) == sorted(
            (c.start - 1) // 4 for c in claims if c.bucket == bucket)
    _check_never_reused(table)


def test_default_cache_size_gives_each_bucket_its_own_range(conn: fl.Connection) -> None:
    """Fluss's example: two buckets cache [1, 100000] and [100001, 200000]."""
    table = _dictionary(conn, buckets=2)
    table.upsert([{"name": f"user{i}"} for i in range(1, 6)])
    claims = sorted((c.start, c.end) for c in _claims(table))
    assert claims == [(1, 100_000), (100_001, 200_000)]
    lows = sorted(u for u in _uids(table).values() if u <= 100_000)
    highs = sorted(u for u in _uids(table).values() if u > 100_000)
    assert lows == list(range(1, len(lows) + 1)) and highs == list(range(100_001, 100_001 + len(highs)))


def test_partitions_share_the_table_wide_sequence(conn: fl.Connection) -> None:
    conn.create_table("d.p", schema={"day": "STRING", "name": "STRING", "uid": "INT"}, primary_key=["day", "name"],
                      partition_keys=["day"], bucket_num=2,
                      options={"auto-increment.fields": "uid", "table.auto-increment.cache-size": 5})
    table = conn.get_table("d.p")
    for day in ("20240101", "20240102", "20240103"):
        table.upsert([{"day": day, "name": f"n{i}"} for i in range(7)])
    table.upsert([{"day": "20240101", "name": f"n{i}"} for i in range(3)])  # updates keep their values
    state = table.to_polars()
    assert state.height == 21 and state.get_column("uid").is_unique().all()
    claims = _claims(table)
    owners = {(c.partition_id, c.bucket) for c in claims}
    assert len(owners) == 6 and all(p is not None for p, _ in owners)
    _check_never_reused(table)


# ---------------------------------------------------------------------------------------------- never reused
def test_a_new_connection_continues_and_never_reuses(conn: fl.Connection, root: Path) -> None:
    table = _dictionary(conn, cache=10)
    table.upsert([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    other = fl.connect(root).get_table("d.ids")  # replays the log: continues right after the last value
    other.upsert([{"name": "d"}])
    assert _uids(other) == {"a": 1, "b": 2, "c": 3, "d": 4}
    other.delete([{"name": "d"}])  # the highest value, gone from the state
    other.snapshot()  # a new process restores this snapshot and replays an empty tail: it saw no value
    third = fl.connect(root).get_table("d.ids")
    third.upsert([{"name": "e"}])
    assert _uids(third)["e"] == 11  # a fresh range: 4 (deleted) and the rest of [1, 10] are never given again
    table.upsert([{"name": "f"}])  # the first connection follows the log: after 11, not after 4
    assert _uids(table)["f"] == 12
    _check_never_reused(third)


_WRITER = textwrap.dedent("""
    import json, sys
    import fluss_lake as fl
    args = json.loads(sys.argv[1])
    table = fl.connect(args["root"], local_dir=args["local_dir"]).get_table("d.ids")
    print("ready", flush=True)
    sys.stdin.readline()
    for seq in range(args["batches"]):
        rows = [{"name": f"w{args['writer']}-{seq}-{i}"} for i in range(args["rows"])]
        rows += [{"name": f"shared-{seq}-{i}"} for i in range(3)]  # every writer writes these keys
        table.upsert(rows)
    print(json.dumps(table.to_polars().select("name", "uid").rows()), flush=True)
""")


def _start_writers(root: Path, tmp_path: Path, n: int, *, batches: int, rows: int) -> list[subprocess.Popen]:
    procs = []
    for w in range(n):
        args = {"root": str(root), "local_dir": str(tmp_path / f"state-{w}"), "writer": w, "batches": batches,
                "rows": rows}
        procs.append(subprocess.Popen([sys.executable, "-c", _WRITER, json.dumps(args)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read()
    for proc in procs:  # start together
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return procs


def _finish(procs: list[subprocess.Popen]) -> list[dict[str, int]]:
    seen = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        seen.append(dict(json.loads(out.splitlines()[-1])))
    return seen


def test_a_new_process_never_reuses_values(conn: fl.Connection, root: Path, tmp_path: Path) -> None:
    table = _dictionary(conn, cache=6)
    table.upsert([{"name": f"p{i}"} for i in range(4)])
    table.delete([{"name": "p3"}])
    table.snapshot()
    given = set(_inserts(table).get_column("uid").to_list())
    (seen,) = _finish(_start_writers(root, tmp_path, 1, batches=3, rows=2))
    new = {u for k, u in seen.items() if not k.startswith("p")}
    assert len(new) == 15 and not new & given  # 3 batches x (2 own + 3 shared keys), none reused
    assert min(new) == 7  # the process saw no value after the snapshot: it took the next free range
    _check_never_reused(fl.connect(root).get_table("d.ids"))


@pytest.mark.slow
def test_two_processes_writing_one_bucket_never_collide(conn: fl.Connection, root: Path, tmp_path: Path) -> None:
    table = _dictionary(conn, cache=7)
    table.upsert([{"name": "seed"}])
    seen = _finish(_start_writers(root, tmp_path, 2, batches=30, rows=5))
    fresh = fl.connect(root).get_table("d.ids")
    state = _uids(fresh)
    assert len(state) == 1 + 2 * 30 * 5 + 30 * 3 and len(set(state.values())) == len(state)
    for view in seen:  # what each writer read at its end agrees with the final state
        assert all(state[k] == u for k, u in view.items())
    inserts = _inserts(fresh)
    assert inserts.height == len(state)  # a shared key written by both is inserted once, then updated
    _check_never_reused(fresh)


def test_an_int_column_that_runs_out_of_values_refuses_inserts(conn: fl.Connection, root: Path) -> None:
    table = _dictionary(conn, dtype="INT", cache=2**30, with_v=True)
    table.upsert([{"name": "a", "v": None}])
    table.snapshot()
    second = fl.connect(root).get_table("d.ids")
    second.upsert([{"name": "b", "v": None}])  # a fresh range: [2^30 + 1, 2^31 - 1]
    second.snapshot()
    assert _uids(second) == {"a": 1, "b": 2**30 + 1}
    third = fl.connect(root).get_table("d.ids")
    end = third.end_offsets()
    with pytest.raises(UnsupportedOperationError, match=r"'uid' \(INT\).*2147483647.*BIGINT"):
        third.upsert([{"name": "c", "v": None}])
    third.upsert([{"name": "a", "v": 1}])  # updates need no value
    assert _uids(third) == {"a": 1, "b": 2**30 + 1} and third.end_offsets()[0] == end[0] + 2


@pytest.mark.s3
def test_on_s3_values_survive_a_new_connection(s3_url: tuple[str, dict]) -> None:
    url, options = s3_url
    conn = fl.connect(url, storage_options=options)
    conn.create_database("d")
    table = _dictionary(conn, buckets=2, cache=3)
    table.upsert([{"name": f"k{i}"} for i in range(8)])
    table.delete([{"name": "k7"}])
    table.snapshot()
    other = fl.connect(url, storage_options=options).get_table("d.ids")
    other.upsert([{"name": f"n{i}"} for i in range(4)])
    assert len(_uids(other)) == 11
    _check_never_reused(other)
    assert len(_claims(other)) >= 4
