"""LEFT joins answer as SQL does: the jobs' result tables equal DuckDB's ``LEFT JOIN`` over the same inputs.

A column selected from the right side of a LEFT join is NULL on unmatched rows, its join columns too, so the usual
``c_cid IS NULL`` test finds them; a result column named only by the result table and present on both sides is
SQL's ``USING`` column (the left side's value); a result primary-key column mapped to a right-side join column
keeps naming the row with the equal left-side value (``COALESCE`` in the SQL below: a key is never NULL).

Each case writes seeded random batches of upserts and deletes into every input (rows gain and lose their right
side), runs the job a few steps at a time, and compares the result table with the SQL answer on the inputs'
current states after every run: delta join, delta join emitting per input, and stateful join, on two-way,
three-way (an inner join plus a LEFT leaf) and partitioned joins.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.jobs import DeltaJoin, Join, StatefulJoin


@dataclass(frozen=True)
class Input:
    schema: dict[str, str]
    primary_key: list[str]
    bucket_keys: list[str] | None = None
    partition_keys: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    inputs: dict[str, Input]
    joins: list[Join]
    result: list[tuple[str, str, bool]]  # (name, type, nullable)
    result_key: list[str]
    select: dict[str, str] | None
    sql: str  # over views named like the aliases
    unmatched: str  # a result column that is NULL exactly on rows without a right side
    delta: bool = True


DAYS = ["d1", "d2"]

CASES = {
    # the right side's join column selected: NULL on unmatched rows; `cid` (on both sides, by name) is USING's
    "two_way": Case(
        {"o": Input({"cid": "INT", "oid": "INT", "amount": "INT"}, ["cid", "oid"], ["cid"]),
         "c": Input({"cid": "INT", "name": "STRING"}, ["cid"])},
        [Join("o", "c", ["cid"], how="left")],
        [("cid", "INT", False), ("oid", "INT", False), ("amount", "INT", True), ("c_cid", "INT", True),
         ("name", "STRING", True)],
        ["cid", "oid"], {"c_cid": "c.cid"},
        "SELECT cid, o.oid, o.amount, c.cid AS c_cid, c.name FROM o LEFT JOIN c USING (cid)", "c_cid"),
    # differently named join columns: `id` exists on the right side only, so by name it is c.id (NULL if unmatched)
    "renamed_key": Case(
        {"o": Input({"customer_id": "INT", "oid": "INT"}, ["customer_id", "oid"], ["customer_id"]),
         "c": Input({"id": "INT", "name": "STRING"}, ["id"])},
        [Join("o", "c", {"customer_id": "id"}, how="left")],
        [("customer_id", "INT", False), ("oid", "INT", False), ("id", "INT", True), ("name", "STRING", True)],
        ["customer_id", "oid"], None,
        "SELECT o.customer_id, o.oid, c.id, c.name FROM o LEFT JOIN c ON o.customer_id = c.id", "id"),
    # a result key mapped to the right side's join column still names the row: the left side's equal value
    "key_from_right": Case(
        {"o": Input({"cid": "INT", "oid": "INT"}, ["cid", "oid"], ["cid"]),
         "c": Input({"cid": "INT", "name": "STRING"}, ["cid"])},
        [Join("o", "c", ["cid"], how="left")],
        [("cid", "INT", False), ("oid", "INT", False), ("c_cid", "INT", True), ("name", "STRING", True)],
        ["cid", "oid"], {"cid": "c.cid", "c_cid": "c.cid"},
        "SELECT COALESCE(c.cid, o.cid) AS cid, o.oid, c.cid AS c_cid, c.name FROM o LEFT JOIN c ON o.cid = c.cid",
        "c_cid"),
    # a ⋈ b many-to-many on the bucket-key prefix, then a LEFT JOIN c by its primary key
    "three_way": Case(
        {"a": Input({"k": "INT", "x": "INT", "v": "INT"}, ["k", "x"], ["k"]),
         "b": Input({"k": "INT", "y": "INT", "w": "INT"}, ["k", "y"], ["k"]),
         "c": Input({"k": "INT", "z": "INT"}, ["k"])},
        [Join("a", "b", ["k"]), Join("a", "c", ["k"], how="left")],
        [("k", "INT", False), ("x", "INT", False), ("y", "INT", False), ("v", "INT", True), ("w", "INT", True),
         ("ck", "INT", True), ("z", "INT", True)],
        ["k", "x", "y"], {"ck": "c.k"},
        "SELECT a.k, a.x, b.y, a.v, b.w, c.k AS ck, c.z FROM a JOIN b ON a.k = b.k LEFT JOIN c ON a.k = c.k", "ck"),
    # partitioned by day on every side: a ⋈ b on (day, k), LEFT JOIN c on its primary key (day, k)
    "partitioned": Case(
        {"a": Input({"day": "STRING", "k": "INT", "x": "INT"}, ["day", "k", "x"], ["k"], ["day"]),
         "b": Input({"day": "STRING", "k": "INT", "y": "INT"}, ["day", "k", "y"], ["k"], ["day"]),
         "c": Input({"day": "STRING", "k": "INT", "z": "INT"}, ["day", "k"], None, ["day"])},
        [Join("a", "b", ["day", "k"]), Join("a", "c", ["day", "k"], how="left")],
        [("day", "STRING", False), ("k", "INT", False), ("x", "INT", False), ("y", "INT", False),
         ("c_day", "STRING", True), ("c_k", "INT", True), ("z", "INT", True)],
        ["day", "k", "x", "y"], {"c_day": "c.day", "c_k": "c.k"},
        "SELECT a.day, a.k, a.x, b.y, c.day AS c_day, c.k AS c_k, c.z "
        "FROM a JOIN b ON a.day = b.day AND a.k = b.k LEFT JOIN c ON a.day = c.day AND a.k = c.k", "c_k"),
    # not a delta join (a.k is no index of a; rows move between join keys): the stateful join, same answer
    "moving_join_key": Case(
        {"a": Input({"id": "INT", "k": "INT"}, ["id"]),
         "b": Input({"k": "INT", "w": "INT"}, ["k"])},
        [Join("a", "b", ["k"], how="left")],
        [("id", "INT", False), ("k", "INT", True), ("b_k", "INT", True), ("w", "INT", True)],
        ["id"], {"k": "a.k", "b_k": "b.k"},
        "SELECT a.id, a.k, b.k AS b_k, b.w FROM a LEFT JOIN b ON a.k = b.k", "b_k", delta=False),
}

KINDS = ["delta", "delta_per_input", "stateful"]


def _value(rng: random.Random, column: str, dtype: str) -> object:
    if column == "day":
        return rng.choice(DAYS)
    return rng.randrange(3) if dtype == "INT" else f"s{rng.randrange(4)}"


def _write(rng: random.Random, table: fl.Table, spec: Input) -> None:
    """One write batch: a few random upserts and deletes (keys drawn from small ranges, so they collide)."""
    rows = {}
    for _ in range(rng.randrange(1, 5)):
        row = {c: _value(rng, c, t) for c, t in spec.schema.items()}
        rows[tuple(row[c] for c in spec.primary_key)] = row
    writer = table.new_upsert()
    if rng.random() < 0.35:
        writer.delete([{c: r[c] for c in spec.primary_key} for r in rows.values()])
    else:
        writer.upsert(list(rows.values()))
    writer.flush()


def _sql_answer(case: Case, tables: dict[str, fl.Table], result: fl.Table) -> pl.DataFrame:
    con = duckdb.connect()
    for alias, table in tables.items():
        con.register(alias, table.to_polars().to_arrow())
    answer = con.sql(case.sql).pl()
    return answer.select(result.schema.names).cast(result.schema.polars_schema)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _run(tmp_path: Path, case: Case, kind: str, seed: int) -> None:
    rng = random.Random(seed)
    conn = fl.connect(str(tmp_path / f"store-{kind}-{seed}"))
    conn.create_database("j")
    tables = {}
    for alias, spec in case.inputs.items():
        conn.create_table(f"j.{alias}", schema=spec.schema, primary_key=spec.primary_key,
                          bucket_keys=spec.bucket_keys, partition_keys=spec.partition_keys, bucket_num=2)
        tables[alias] = conn.get_table(f"j.{alias}")
    conn.create_table("j.result", schema=fl.Schema.of(case.result, primary_key=case.result_key), bucket_num=2)
    result = conn.get_table("j.result")
    if kind == "stateful":
        job = StatefulJoin(result, tables, case.joins, select=case.select, batch_rows=4)
    else:
        job = DeltaJoin(result, tables, case.joins, select=case.select, batch_rows=4,
                        emit_per_input=kind == "delta_per_input")
    seen = set()
    for _ in range(8):
        for _ in range(rng.randrange(1, 6)):
            alias = rng.choice(list(tables))
            _write(rng, tables[alias], case.inputs[alias])
        job.run_once()
        got, want = _sorted(result.to_polars()), _sorted(_sql_answer(case, tables, result))
        assert got.equals(want), f"\nresult:\n{got}\nDuckDB:\n{want}"
        seen.update(got.get_column(case.unmatched).is_null().to_list())
    assert seen == {True, False}, "the writes should give matched and unmatched rows; pick another seed"


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("name", "kind"),
                         [(n, k) for n, c in CASES.items() for k in KINDS if c.delta or k == "stateful"])
def test_left_join_equals_duckdb(tmp_path: Path, name: str, kind: str, seed: int) -> None:
    _run(tmp_path, CASES[name], kind, seed)


def test_unmatched_rows_are_found_with_is_null_on_the_right_key(tmp_path: Path) -> None:
    """The SQL idiom for anti-joins works on the result table: orders whose customer is unknown have c_cid NULL,
    and a customer arriving later fills it in (its deletion empties it again)."""
    conn = fl.connect(str(tmp_path))
    conn.create_database("s")
    conn.create_table("s.orders", schema={"cid": "INT", "oid": "INT"}, primary_key=["cid", "oid"], bucket_keys=["cid"])
    conn.create_table("s.customers", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    conn.create_table("s.view", schema={"cid": "INT", "oid": "INT", "c_cid": "INT", "name": "STRING"},
                      primary_key=["cid", "oid"])
    orders, customers, view = (conn.get_table(f"s.{n}") for n in ("orders", "customers", "view"))
    job = DeltaJoin(view, {"o": orders, "c": customers}, [Join("o", "c", ["cid"], how="left")],
                    select={"c_cid": "c.cid"})
    orders.upsert([{"cid": 1, "oid": 10}, {"cid": 2, "oid": 20}])
    customers.upsert([{"cid": 1, "name": "ann"}])
    job.run_once()

    def unmatched() -> list[int]:
        return view.to_polars().filter(pl.col("c_cid").is_null()).sort("oid")["oid"].to_list()

    assert unmatched() == [20]
    assert view.to_polars().filter(pl.col("oid") == 20).row(0, named=True) == {
        "cid": 2, "oid": 20, "c_cid": None, "name": None}  # the key keeps the order's customer id
    customers.upsert([{"cid": 2, "name": "bob"}])
    job.run_once()
    assert unmatched() == []
    customers.delete([{"cid": 1}])
    job.run_once()
    assert unmatched() == [10]


def test_a_right_side_column_in_a_not_null_result_column_is_refused(tmp_path: Path) -> None:
    """NULL on unmatched rows cannot go into a NOT NULL column: the job says so (and how to take the left side's
    equal column) before anything runs."""
    conn = fl.connect(str(tmp_path))
    conn.create_database("s")
    conn.create_table("s.orders", schema={"cid": "INT", "oid": "INT"}, primary_key=["cid", "oid"], bucket_keys=["cid"])
    conn.create_table("s.customers", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    conn.create_table("s.view", schema=fl.Schema.of(
        [("cid", "INT"), ("oid", "INT"), ("c_cid", "INT", False)], primary_key=["cid", "oid"]))
    t = conn.get_table
    with pytest.raises(fl.InvalidConfigError, match=r"select=\{'c_cid': 'o.cid'\}"):
        DeltaJoin(t("s.view"), {"o": t("s.orders"), "c": t("s.customers")}, [Join("o", "c", ["cid"], how="left")],
                  select={"c_cid": "c.cid"})
    assert conn.store.list(".jobs") == []
