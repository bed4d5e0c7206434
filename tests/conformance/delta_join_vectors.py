"""The delta-join cases of ``fluss-vectors.jsonl`` run against ``fluss_lake.jobs``.

Result cases: the case's tables are created with its options, its writes applied, then a delta join built from
the case's SQL (a small parser for the shapes Fluss's ITCase uses; conditions go through ``pl.sql_expr``) runs
once. The result table must hold ``expected_state``; its changelog must match ``expected_changelog`` per key
(Fluss emits each joined row once per probing side, and so do we: one write per input side).

The ineligible-plan case lists plans Flink/Fluss rejects under ``FORCE``. We reject the ones our model cannot
run either and, where we deliberately go further (deletes, multi-way, non-equi conditions on any column, LEFT
joins on a full primary key), assert that ``explain()`` accepts them as delta joins.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.jobs import DeltaJoin, Join, explain_join

_SQL = re.compile(r"INSERT INTO sink SELECT (?P<cols>.+?) FROM (?P<left>.+?) INNER JOIN (?P<right>.+?) "
                  r"ON (?P<on>.+)$")
_SIDE = re.compile(r"^\(SELECT \* FROM (?P<table>\w+) WHERE (?P<where>.+)\)$")


def _create(conn: fl.Connection, name: str, columns: list[dict], pk: list[str], options: dict) -> fl.Table:
    schema = fl.Schema.of([(c["name"], c["type"], c.get("nullable", True)) for c in columns], primary_key=pk)
    bucket_keys = options.get("bucket.key")
    opts = {k: v.lower() if k == "table.delete.behavior" else v for k, v in options.items() if k != "bucket.key"}
    conn.create_table(f"conf.{name}", schema=schema, bucket_keys=bucket_keys.split(",") if bucket_keys else None,
                      options=opts, bucket_num=2)
    return conn.get_table(f"conf.{name}")


def _side(text: str) -> tuple[str, pl.Expr | None]:
    match = _SIDE.match(text.strip())
    if match:
        return match["table"], pl.sql_expr(match["where"])
    return text.strip(), None


def _plan(case: dict, tables: dict[str, fl.Table]) -> dict:
    """DeltaJoin arguments from the case's SQL (aliases ``l`` and ``r``)."""
    match = _SQL.match(case["options"]["sql"])
    assert match, f"unsupported SQL shape: {case['options']['sql']}"
    left, where_l = _side(match["left"])
    right, where_r = _side(match["right"])
    assert (left, right) == ("left", "right")
    lcols, rcols = set(tables["left"].schema.names), set(tables["right"].schema.names)
    pairs, conditions = [], []
    for term in match["on"].split(" AND "):
        a, op, b = term.split()
        if op == "=" and a in lcols and b in rcols:
            pairs.append((a, b))
        else:
            qualify = {c: f'"l.{c}"' for c in lcols} | {c: f'"r.{c}"' for c in rcols}
            conditions.append(pl.sql_expr(" ".join(qualify.get(t, t) for t in (a, op, b))))
    sink = [c["name"] for c in case["schema"]["sink"]]
    cols = sink if match["cols"].strip() == "*" else [c.strip() for c in match["cols"].split(",")]
    assert cols == sink
    select = {c: (f"l.{c}" if c in lcols else f"r.{c}") for c in cols}
    where = {k: v for k, v in (("l", where_l), ("r", where_r)) if v is not None}
    condition = None
    for expr in conditions:
        condition = expr if condition is None else condition & expr
    return {"joins": [Join("l", "r", pairs)], "select": select, "where": where or None, "condition": condition}


def run_result_case(conn: fl.Connection, case: dict, frame: Callable, check_changelog: Callable) -> None:
    """Create the tables, apply the writes, run the delta join once, compare state and changelog."""
    schema, pk, options = case["schema"], case["primary_key"], case["options"]
    tables = {side: _create(conn, side, schema[side], pk[side], options[side]) for side in ("left", "right")}
    sink = _create(conn, "sink", schema["sink"], pk["sink"], {})
    for write in case["writes"]:
        assert write["op"] == "upsert"
        tables[write["table"]].upsert([write["row"]])
    plan = _plan(case, tables)
    job = DeltaJoin(sink, {"l": tables["left"], "r": tables["right"]}, **plan, emit_per_input=True)
    assert job.explain().delta
    job.run_once()
    dtypes = sink.schema.polars_schema
    got = sink.to_polars()
    want = frame(case["expected_state"], dtypes, list(sink.schema.names))
    assert got.sort(got.columns).equals(want.sort(want.columns)), f"\n{got}\n!=\n{want}"
    check_changelog(sink, case["expected_changelog"], dtypes, per_key=True)


# ---------------------------------------------------------------- the ineligible-plan case
_LEFT = {"a1": "INT", "b1": "STRING", "c1": "BIGINT", "d1": "INT", "e1": "BIGINT"}
_RIGHT = {"a2": "INT", "b2": "STRING", "c2": "BIGINT", "d2": "INT", "e2": "BIGINT"}
_THIRD = {"c3": "BIGINT", "d3": "INT", "f3": "INT"}


def _ineligible_tables(conn: fl.Connection, case: dict) -> dict[str, fl.Table]:
    pk, options = case["primary_key"], case["options"]
    out = {}
    for side in ("left", "right"):
        out[side] = _create(conn, f"x_{side}", case["schema"][side], pk[side], options[side])
        out[f"{side}_cdc"] = _create(conn, f"x_{side}_cdc", case["schema"][side], pk[side],
                                     {**options[side], "table.delete.behavior": "IGNORE"})
    conn.create_table("conf.x_third", schema=_THIRD, primary_key=["c3", "d3"], bucket_keys=["c3"])
    out["third"] = conn.get_table("conf.x_third")
    return out


def _sink(conn: fl.Connection, name: str, pk: list[str], extra: dict | None = None) -> fl.Table:
    conn.create_table(f"conf.{name}", schema={**_LEFT, **_RIGHT, **(extra or {})}, primary_key=pk)
    return conn.get_table(f"conf.{name}")


def run_ineligible_case(conn: fl.Connection, case: dict) -> None:
    """Our verdict on each plan Flink rejects: 'rejected' (with why) or 'delta' (we go further, on purpose)."""
    t = _ineligible_tables(conn, case)
    full = [Join("l", "r", {"c1": "c2", "d1": "d2"})]
    wide = _sink(conn, "x_sink_wide", ["c1", "d1", "c2", "d2"])
    narrow = _sink(conn, "x_sink_narrow", ["c1", "d1"])
    cdc = {"l": t["left_cdc"], "r": t["right_cdc"]}
    sel = {c: f"l.{c}" for c in _LEFT} | {c: f"r.{c}" for c in _RIGHT}

    def verdict(result, inputs, joins, **kw) -> tuple[str, str]:
        try:
            why = explain_join(result, inputs, joins, **kw)
        except fl.InvalidConfigError as exc:
            return "rejected", str(exc)
        return ("delta", "") if why.delta else ("rejected", " ".join(why.reasons))

    checks: dict[str, list[tuple[tuple[str, str], str, str]]] = {
        # we retract deletes, so ALLOW sources are fine
        "sources with default delete behaviour (ALLOW), join ON c1=c2 AND d1=d2": [
            (verdict(narrow, {"l": t["left"], "r": t["right"]}, full, select=sel), "delta", "")],
        "CDC sources (IGNORE), join ON a1=a2 (no index key)": [
            (verdict(wide, cdc, [Join("l", "r", {"a1": "a2"})], select=sel), "rejected", "contain neither")],
        # LEFT on the bucket-key prefix: padded rows would need null key columns; on the full key it runs
        "CDC sources, LEFT / RIGHT / FULL OUTER JOIN": [
            (verdict(wide, cdc, [Join("l", "r", {"c1": "c2"}, how="left")], select=sel), "rejected", "whole primary key"),
            (verdict(wide, {"r": t["right_cdc"], "l": t["left_cdc"]}, [Join("r", "l", {"c2": "c1"}, how="left")],
                     select=sel), "rejected", "whole primary key"),
            (verdict(wide, cdc, [Join("l", "r", {"c1": "c2"}, how="full")], select=sel), "rejected", "how='full'"),
            (verdict(narrow, cdc, [Join("l", "r", {"c1": "c2", "d1": "d2"}, how="left")], select=sel), "delta", ""),
        ],
        # multi-way joins: each change probes the others
        "CDC sources, A JOIN B JOIN C (cascade)": [
            (verdict(_sink(conn, "x_sink_3", ["c1", "d1"], {"f3": "INT"}), {**cdc, "x": t["third"]},
                     [*full, Join("l", "x", {"c1": "c3", "d1": "d3"})], select={**sel, "f3": "x.f3"}), "delta", "")],
        # conditions are re-evaluated on current rows of both sides, so any column may be used
        "CDC sources, WHERE e1 > e2 or non-equi ON e1 > e2 on non-upsert-key columns": [
            (verdict(narrow, cdc, full, select=sel, condition=pl.col("l.e1") > pl.col("r.e2")), "delta", "")],
        # e1 = e2 beyond the index is checked on the joined rows
        "CDC sources, join keys c1=c2,d1=d2,e1=e2 with sink PK (c1,d1)": [
            (verdict(narrow, cdc, [Join("l", "r", {"c1": "c2", "d1": "d2", "e1": "e2"})], select=sel), "delta", "")],
        "CDC sources, sink PK (a1,a2) != upstream upsert key -> SinkUpsertMaterializer": [
            (verdict(_sink(conn, "x_sink_a", ["a1", "a2"]), cdc, full, select=sel), "rejected", "does not cover")],
    }
    not_applicable = {
        "non-deterministic function in filter/projection":
            "Polars expressions have no non-deterministic functions to detect; docs/JOBS.md says filters and "
            "projections must be deterministic",
    }
    listed = [e["case"] for e in case["expected_errors"]]
    assert sorted(listed) == sorted([*checks, *not_applicable]), "the case's sub-cases changed; update this runner"
    for name, results in checks.items():
        for (got, message), want, reason in results:
            assert got == want, f"{name}: expected {want}, got {got} ({message})"
            assert reason in message, f"{name}: {message!r} should say {reason!r}"
    with pytest.raises(fl.JoinNotSupportedError):  # and the job itself refuses an ineligible plan (FORCE)
        DeltaJoin(wide, cdc, [Join("l", "r", {"a1": "a2"})], select=sel)
