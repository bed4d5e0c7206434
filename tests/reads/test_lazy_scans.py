"""Table.to_lazy as a Polars IO source: streamed batches, projection, predicates with batch skipping, n_rows."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.scan import necessary_conditions

SCHEMA = {"id": "INT", "price": "DOUBLE", "name": "STRING", "day": "DATE", "flag": "BOOLEAN", "nostat": "BIGINT"}
N_BATCHES = 6


def batch(j: int) -> pl.DataFrame:
    """Batch j: ids 10j..10j+9; batch 2 has no names, batch 3 half null prices."""
    return pl.DataFrame(
        {
            "id": [10 * j + i for i in range(10)],
            "price": [None if (j == 3 and i % 2 == 0) else float(100 * j + i) for i in range(10)],
            "name": [None if j == 2 else f"n{j}{i}" for i in range(10)],
            "day": [date(2024, 1, 1) + timedelta(days=j)] * 10,
            "flag": [j % 2 == 0] * 10,
            "nostat": [1000 - 10 * j - i for i in range(10)],
        },
        schema={"id": pl.Int32, "price": pl.Float64, "name": pl.String, "day": pl.Date, "flag": pl.Boolean,
                "nostat": pl.Int64},
    )


def make_events(folder: Any) -> fl.Table:
    conn = fl.connect(str(folder / "live"))
    conn.create_database("db")
    conn.create_table("db.ev", schema=SCHEMA, options={"table.statistics.columns": "id,price,name,day,flag"})
    table = conn.get_table("db.ev")
    for j in range(N_BATCHES):
        table.append(batch(j))
    return table


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> fl.Table:
    """Read only: shared by the tests of this module."""
    return make_events(tmp_path_factory.mktemp("events"))


# (id, predicate, batches that must be decoded)
CASES: list[tuple[str, pl.Expr, int]] = [
    ("eq", pl.col("id") == 15, 1),
    ("eq-reversed", pl.lit(15) == pl.col("id"), 1),
    ("lt-reversed", 10 > pl.col("id"), 1),
    ("absent", pl.col("id") == 1000, 0),
    ("gt", pl.col("id") > 49, 1),
    ("ge-and-lt", (pl.col("id") >= 10) & (pl.col("id") < 30), 2),
    ("filter-args", [pl.col("id") >= 10, pl.col("id") < 30], 2),
    ("between", pl.col("id").is_between(12, 25), 2),
    ("between-open", pl.col("id").is_between(19, 30, closed="none"), 1),
    ("between-left", pl.col("id").is_between(19, 30, closed="left"), 2),
    ("in", pl.col("id").is_in([5, 33]), 2),
    ("in-none", pl.col("id").is_in([-1, 999]), 0),
    ("is-null", pl.col("price").is_null(), 1),
    ("is-not-null", pl.col("name").is_not_null(), N_BATCHES - 1),
    ("date", pl.col("day") >= date(2024, 1, 5), 2),
    ("string", pl.col("name") < "n1", 1),
    ("bool", pl.col("flag") == True, 3),  # noqa: E712
    ("or", (pl.col("id") < 10) | (pl.col("id") >= 50), 2),
    ("and-with-unusable", (pl.col("id") < 10) & pl.col("name").str.contains("0"), 1),
    ("or-with-unusable", (pl.col("id") < 10) | pl.col("name").str.contains("x"), N_BATCHES),
    ("not-simplified", ~(pl.col("id") < 50), 1),  # Polars hands the source `id >= 50`
    ("not-in", ~pl.col("id").is_in([5, 6]), N_BATCHES),  # not used for skipping, rows still filtered exactly
    ("no-statistics-column", pl.col("nostat") == 995, N_BATCHES),
    ("constant-expression", pl.col("id") > pl.lit(40) + 9, 1),
]


@pytest.mark.parametrize(("case", "predicate", "decoded"), CASES, ids=[c[0] for c in CASES])
def test_a_filtered_lazy_scan_skips_batches_and_equals_the_eager_read(events, decodes, case, predicate, decoded):
    eager = events.to_polars()
    predicates = predicate if isinstance(predicate, list) else [predicate]
    decodes.calls.clear()
    got = events.to_lazy().filter(*predicates).collect()
    assert_frame_equal(got, eager.filter(*predicates))
    assert len(decodes.calls) == decoded, f"decoded {len(decodes.calls)} batches, expected {decoded}"
    log = events.to_lazy(view="log").filter(*predicates).collect()
    assert_frame_equal(log, events.scan_log().filter(*predicates))


def test_projection_decodes_only_the_columns_used(events, decodes):
    got = events.to_lazy().filter(pl.col("id") > 49).select("name").collect()
    assert got["name"].to_list() == [f"n5{i}" for i in range(10)]
    assert decodes.calls == [["id", "name"]]  # the projection plus the predicate's column, one batch
    decodes.calls.clear()
    assert events.to_lazy().select("day").collect().height == 10 * N_BATCHES
    assert decodes.calls == [["day"]] * N_BATCHES


def test_n_rows_stops_reading(events, decodes):
    assert events.to_lazy().head(0).collect().schema == events.schema.polars_schema
    assert decodes.calls == []
    assert events.to_lazy().head(5).collect()["id"].to_list() == [0, 1, 2, 3, 4]
    assert len(decodes.calls) == 1
    decodes.calls.clear()
    # with a filter Polars passes no n_rows: the streaming engine stops pulling batches once it has enough.
    # Its source thread may still decode a batch after collect() returns, so this check comes last.
    assert events.to_lazy().filter(pl.col("id") % 10 == 9).head(3).collect()["id"].to_list() == [9, 19, 29]
    assert len(decodes.calls) < N_BATCHES


def test_each_collect_reads_the_table_as_it_is_then(tmp_path):
    events = make_events(tmp_path)
    lazy = events.to_lazy().filter(pl.col("id") >= 60)
    assert lazy.collect().height == 0
    events.append(batch(6))
    assert lazy.collect()["id"].to_list() == list(range(60, 70))


def test_changelog_and_state_of_a_partitioned_primary_key_table(tmp_path):
    conn = fl.connect(str(tmp_path / "live"))
    conn.create_database("db")
    conn.create_table("db.kv", schema={"day": "STRING", "id": "INT", "v": "BIGINT"}, primary_key=["day", "id"],
                      partition_keys=["day"], bucket_num=2)
    kv = conn.get_table("db.kv")
    for d in ("a", "b"):
        kv.create_partition({"day": d})
    kv.upsert(pl.DataFrame({"day": ["a"] * 20 + ["b"] * 20, "id": list(range(40)), "v": list(range(40))}))
    kv.upsert([{"day": "a", "id": 3, "v": 300}])
    kv.delete([{"day": "b", "id": 30}])
    state = kv.to_polars()
    predicate = (pl.col("v") > 10) & (pl.col("day") == "b")
    assert_frame_equal(kv.to_lazy().filter(predicate).collect().sort("id"), state.filter(predicate).sort("id"))
    assert kv.to_lazy().head(7).collect().height == 7
    assert kv.to_lazy(columns=["v"]).collect()["v"].sort().to_list() == state["v"].sort().to_list()
    changelog = kv.changelog()
    lazy = kv.to_lazy(view="changelog")
    assert lazy.collect_schema() == changelog.schema
    assert_frame_equal(lazy.collect().sort("_partition", "_log_offset", "id"),
                       changelog.sort("_partition", "_log_offset", "id"))
    deletes = lazy.filter(pl.col("_change_type") == "delete").select("_partition", "id").collect()
    assert deletes.rows() == [("b", 30)]
    one = kv.partition({"day": "a"})
    assert_frame_equal(one.to_lazy(view="changelog").collect().sort("_log_offset", "id"),
                       one.changelog().sort("_log_offset", "id"))
    assert_frame_equal(one.to_lazy().collect().sort("id"), one.to_polars().sort("id"))


def test_bad_views_and_columns_are_refused(events):
    before = events.scan_log()
    with pytest.raises(InvalidConfigError, match="view 'binlog' is not a view"):
        events.to_lazy(view="binlog")
    with pytest.raises(InvalidConfigError, match=r"unknown column\(s\) \['nope'\]"):
        events.to_lazy(columns=["nope"])
    with pytest.raises(InvalidConfigError, match="_offset"):
        events.to_lazy(columns=["_offset"])  # a system column only the log view has
    assert events.to_lazy(view="log", columns=["_offset"]).collect().height == before.height
    assert_frame_equal(events.scan_log(), before)


def test_only_implied_conditions_are_derived():
    cols = ["a", "b"]
    assert necessary_conditions(None, cols) == []
    assert necessary_conditions(pl.col("a") > 1, ["b"]) == []  # not a column of the log
    assert necessary_conditions(pl.col("a").cast(pl.Int8) > 1, cols) == []  # a cast column: not comparable
    assert necessary_conditions(pl.col("a") == pl.col("b"), cols) == []
    assert necessary_conditions((pl.col("a") > 1) | (pl.col("b") + 1 > 2), cols) == []
    assert necessary_conditions(pl.col("a").is_in([1, None]) & pl.col("b").is_not_null(), cols) == [
        [("a", "in", [1]), ("b", "is not null", None)]
    ]


# ------------------------------------------------------------------------ hypothesis: lazy == eager, any predicate
_COLUMN_VALUES = {"k": st.integers(-20, 20), "s": st.sampled_from(["a", "b", "c", "d"])}


@st.composite
def predicates(draw: st.DrawFn, depth: int = 2) -> pl.Expr:
    if depth == 0 or draw(st.booleans()):
        column = draw(st.sampled_from(["k", "s"]))
        value = draw(_COLUMN_VALUES[column])
        kind = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "between", "in", "null", "not null"]))
        col = pl.col(column)
        if kind == "between":
            other = draw(_COLUMN_VALUES[column])
            return col.is_between(pl.lit(min(value, other)), pl.lit(max(value, other)),
                                  closed=draw(st.sampled_from(["both", "left", "right", "none"])))
        if kind == "in":
            return col.is_in(draw(st.lists(_COLUMN_VALUES[column], max_size=3)))
        if kind == "null":
            return col.is_null()
        if kind == "not null":
            return col.is_not_null()
        return {"==": col == value, "!=": col != value, "<": col < value, "<=": col <= value, ">": col > value,
                ">=": col >= value}[kind]
    left, right = draw(predicates(depth - 1)), draw(predicates(depth - 1))
    return draw(st.sampled_from([left & right, left | right, ~left]))


@pytest.fixture(scope="module")
def small_tables(tmp_path_factory) -> tuple[fl.Table, fl.Table]:
    conn = fl.connect(str(tmp_path_factory.mktemp("hyp") / "live"))
    conn.create_database("db")
    conn.create_table("db.log", schema={"k": "INT", "s": "STRING"}, bucket_num=2,
                      options={"table.statistics.columns": "*"})
    conn.create_table("db.pk", schema={"k": "INT", "s": "STRING"}, primary_key=["k"], bucket_num=2)
    log, pk = conn.get_table("db.log"), conn.get_table("db.pk")
    for j in range(8):  # batches with narrow, partly overlapping ranges, some nulls
        ks = [(j * 5 + i) % 41 - 20 for i in range(6)]
        rows = [{"k": k, "s": None if (k + j) % 5 == 0 else "abcd"[(k + j) % 4]} for k in ks]
        log.append(rows)
        pk.upsert(rows)
    pk.delete([{"k": 0}, {"k": 7}])
    return log, pk


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(predicate=predicates(), n=st.none() | st.integers(0, 12), project=st.booleans())
def test_lazy_scans_equal_eager_reads_for_any_predicate(small_tables, predicate, n, project):
    for table in small_tables:
        eager = table.to_polars().filter(predicate)
        lazy = table.to_lazy().filter(predicate)
        if project:
            eager, lazy = eager.select("s"), lazy.select("s")
        got = lazy.collect()
        if n is None:
            assert_frame_equal(got.sort(pl.all()), eager.sort(pl.all()))
        else:  # head(n) of a lazy scan: n rows (or all there are) that match
            limited = lazy.head(n).collect()
            assert limited.height == min(n, eager.height)
            assert limited.join(eager, on=limited.columns, how="anti", nulls_equal=True).height == 0
