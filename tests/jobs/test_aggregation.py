"""Aggregation push-down: totals live in an aggregation table; the job keeps offsets only; replays are exactly once."""

from __future__ import annotations

import tempfile

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.jobs import Aggregation

AGG_OPTIONS = {"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.total.agg": "sum",
               "fields.hi.agg": "max", "fields.lo.agg": "min", "fields.last_v.agg": "last_value"}
AGGS = {"n": ("count", None), "total": ("sum", "v"), "hi": ("max", "v"), "lo": ("min", "v"), "last_v": ("last_value", "v")}


class SimulatedCrash(Exception):
    """The process dies after writing a step's partial aggregates, before its final checkpoint."""


def _setup(path: str, *, buckets: int = 3) -> tuple[fl.Connection, fl.Table, fl.Table]:
    conn = fl.connect(path)
    if not conn.database_exists("d"):
        conn.create_database("d")
        conn.create_table("d.events", schema={"g": "INT", "v": "BIGINT"}, bucket_num=2, bucket_keys=["g"])
        conn.create_table("d.totals", schema={"g": "INT", "n": "BIGINT", "total": "BIGINT", "hi": "BIGINT",
                                              "lo": "BIGINT", "last_v": "BIGINT"},
                          primary_key=["g"], bucket_num=buckets, options=AGG_OPTIONS)
    return conn, conn.get_table("d.events"), conn.get_table("d.totals")


def _expected(events: fl.Table) -> pl.DataFrame:
    """A batch group-by of everything in the source (one bucket per group, so last_value is well defined)."""
    rows = events.scan_log().sort("_offset")
    return rows.group_by("g").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("v").sum().alias("total"),
                                  pl.col("v").max().alias("hi"), pl.col("v").min().alias("lo"),
                                  pl.col("v").last().alias("last_v")).sort("g")


def _job(totals: fl.Table, events: fl.Table, batch_rows: int = 4) -> Aggregation:
    return Aggregation(events, totals, group_by=["g"], aggregates=AGGS, name="agg", batch_rows=batch_rows)


def _crash_after_write(job: Aggregation) -> None:
    """Make the job die right after its next step wrote (the step's finishing checkpoint fails)."""
    real = job.checkpoints.commit

    def commit(checkpoint):
        if "pending" not in checkpoint.extra:  # the finishing checkpoint: die instead
            raise SimulatedCrash()
        real(checkpoint)
    job.checkpoints.commit = commit


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 4), st.integers(-50, 50)), min_size=1, max_size=6),
                        min_size=1, max_size=6),
       crashes=st.lists(st.booleans(), min_size=6, max_size=6))
def test_result_equals_batch_group_by_with_crashes(batches, crashes) -> None:
    _conn, events, totals = _setup(tempfile.mkdtemp(prefix="agg-"))
    job = _job(totals, events)
    for batch, crash in zip(batches, crashes):
        events.append([{"g": g, "v": v} for g, v in batch])
        if crash:
            _crash_after_write(job)
            with pytest.raises(SimulatedCrash):
                job.run_once()
            job = _job(totals, events)  # restarted: replays the announced step
        job.run_once()
    got = totals.to_polars().sort("g")
    assert got.equals(_expected(events).select(got.columns).cast(got.schema))


def test_replay_in_a_new_process_after_other_writes_is_exactly_once(tmp_path) -> None:
    """The dedupe must not rely on this process's memory: a fresh connection, and other writers committed to the
    aggregation table after the crashed step (so the crashed step's batch is not the last one of its bucket)."""
    path = str(tmp_path / "lake")
    conn, events, totals = _setup(path, buckets=1)
    events.append([{"g": 1, "v": 10}, {"g": 2, "v": 5}])
    job = _job(totals, events, batch_rows=100)
    _crash_after_write(job)
    with pytest.raises(SimulatedCrash):
        job.run_once()
    assert totals.to_polars().sort("g")["total"].to_list() == [10, 5]  # the step did write
    totals.upsert([{"g": 9, "n": 1, "total": 1, "hi": 1, "lo": 1, "last_v": 1}])  # someone else writes after it
    conn2, events2, totals2 = _setup(path, buckets=1)
    assert conn2 is not conn
    report = _job(totals2, events2, batch_rows=100).run_once()
    assert report.rows_upserted == 0  # recognised as committed: nothing written again
    got = totals2.to_polars().sort("g")
    assert got["g"].to_list() == [1, 2, 9] and got["total"].to_list() == [10, 5, 1] and got["n"].to_list() == [1, 1, 1]


def test_retracting_source_counts_updates_and_deletes(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.orders", schema={"id": "INT", "shop": "STRING", "amount": "BIGINT"}, primary_key=["id"])
    conn.create_table("d.per_shop", schema={"shop": "STRING", "n": "BIGINT", "total": "BIGINT"},
                      primary_key=["shop"], options={"table.merge-engine": "aggregation", "fields.n.agg": "sum",
                                                     "fields.total.agg": "sum"})
    orders, per_shop = conn.get_table("d.orders"), conn.get_table("d.per_shop")
    job = Aggregation(orders, per_shop, group_by=["shop"], aggregates={"n": ("count", None), "total": ("sum", "amount")})
    orders.upsert([{"id": 1, "shop": "a", "amount": 10}, {"id": 2, "shop": "a", "amount": 7}])
    job.run_once()
    orders.upsert([{"id": 1, "shop": "b", "amount": 3}])  # moves from shop a to shop b
    orders.delete([{"id": 2}])
    job.run_once()
    want = orders.to_polars().group_by("shop").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("amount").sum().alias("total"))
    got = per_shop.to_polars().filter(pl.col("n") != 0).sort("shop")
    assert got.equals(want.sort("shop").cast(got.schema))


def test_bad_configurations_are_rejected_and_change_nothing(tmp_path) -> None:
    conn, events, totals = _setup(str(tmp_path / "lake"))
    events.append([{"g": 1, "v": 1}])
    before = (events.scan_log(), totals.to_polars(), conn.store.list(".jobs"))
    conn.create_table("d.plain", schema={"g": "INT", "n": "BIGINT"}, primary_key=["g"])
    with pytest.raises(fl.InvalidConfigError, match="merge-engine='aggregation'"):
        Aggregation(events, conn.get_table("d.plain"), group_by=["g"], aggregates={"n": ("count", None)})
    with pytest.raises(fl.InvalidConfigError, match="fields.hi.agg='sum', but d.totals has 'max'"):
        Aggregation(events, totals, group_by=["g"], aggregates={"hi": ("sum", "v")})
    with pytest.raises(fl.InvalidConfigError, match="exactly the primary key"):
        Aggregation(events, totals, group_by=["v"], aggregates={"n": ("count", None)})
    with pytest.raises(fl.InvalidConfigError, match="unknown function"):
        Aggregation(events, totals, group_by=["g"], aggregates={"n": ("median", "v")})
    conn.create_table("d.src", schema={"g": "INT", "v": "BIGINT"}, primary_key=["g"])
    with pytest.raises(fl.InvalidConfigError, match="cannot take back"):
        Aggregation(conn.get_table("d.src"), totals, group_by=["g"], aggregates={"hi": ("max", "v")})
    after = (events.scan_log(), totals.to_polars(), conn.store.list(".jobs"))
    assert before[0].equals(after[0]) and before[1].equals(after[1]) and before[2] == after[2] == []
