"""Lookup join throughput: enrich a stream of event batches with a primary-key table's current rows.

A ``users`` table of ``--rows`` rows (4 buckets, snapshotted); a stream of 100k-event batches whose user ids are
random over 1.1x the table's key range (so about one in eleven misses). Ours: ``LookupJoin.enrich`` (no cache,
and with a 100k-key ``LookupCache`` on a skewed stream where most events hit a hot set of users). Peers, on the
very same batches, interleaved: DuckDB (the users rows in an in-memory table, ``LEFT JOIN`` per batch, result
fetched as Arrow) and Polars (the users rows in memory, ``join`` per batch). The peers hold the whole dimension
in memory; we look it up in storage.

Run ``python -m bench.lookup_join [--quick] [--rows N] [--repeats K]``.
"""

from __future__ import annotations

import time

import duckdb
import numpy as np
import polars as pl

import fluss_lake as fl
from bench._common import (
    Reporter,
    Result,
    bench_args,
    interleave,
    log,
    median,
    temp_store_dir,
)
from fluss_lake.jobs import LookupCache, LookupJoin
from fluss_lake.kv import compactor

BENCH = "lookup_join"
FULL_ROWS = 1_000_000
QUICK_ROWS = 50_000
BATCH = 100_000
BATCHES = 5


def _batches(rows: int, rng: np.random.Generator, *, skewed: bool) -> list[pl.DataFrame]:
    out = []
    for _ in range(BATCHES):
        if skewed:  # 90% of events from 20k hot users
            hot = rng.integers(0, min(20_000, rows), BATCH)
            user = np.where(rng.random(BATCH) < 0.9, hot, rng.integers(0, int(rows * 1.1), BATCH))
        else:
            user = rng.integers(0, int(rows * 1.1), BATCH)
        out.append(pl.DataFrame({"user": user.astype(np.int64), "page": rng.integers(0, 1000, BATCH).astype(np.int32)}))
    return out


def main(argv: list[str] | None = None) -> None:
    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__)
    reporter = Reporter(BENCH)
    rng = np.random.default_rng(11)
    with temp_store_dir(args.tmpdir) as path:
        conn = fl.connect(path)
        conn.create_database("bench")
        conn.create_table("bench.users", schema={"uid": "BIGINT", "name": "STRING", "tier": "INT"},
                          primary_key=["uid"], bucket_num=4)
        users = conn.get_table("bench.users")
        for start in range(0, args.rows, 500_000):
            idx = np.arange(start, min(args.rows, start + 500_000))
            users.upsert(pl.DataFrame({"uid": idx, "name": pl.Series(idx).cast(pl.String),
                                       "tier": (idx % 7).astype(np.int32)}))
        compactor.drain()  # merge the preload's segments before the snapshot names them
        users.snapshot()
        dim = users.to_polars()
        duck = duckdb.connect(":memory:")
        duck.register("dim_arrow", dim.to_arrow())
        duck.execute("CREATE TABLE dim AS SELECT * FROM dim_arrow")
        duck.unregister("dim_arrow")
        log(f"setup: {args.rows:,} users")
        for skewed, cache in ((False, None), (True, LookupCache(max_rows=100_000))):
            batches = _batches(args.rows, rng, skewed=skewed)
            job = LookupJoin(users, on={"user": "uid"}, columns=["name", "tier"], cache=cache)
            check = job.enrich(batches[0])
            want = batches[0].join(dim, left_on="user", right_on="uid", how="left", maintain_order="left")
            assert check.equals(want.select(check.columns))

            def ours(_r: int, job: LookupJoin = job, batches: list = batches) -> float:
                start = time.perf_counter()
                for b in batches:
                    job.enrich(b)
                return BATCH * BATCHES / (time.perf_counter() - start)

            def duckdb_join(_r: int, batches: list = batches) -> float:
                arrows = [b.to_arrow() for b in batches]
                start = time.perf_counter()
                for a in arrows:
                    duck.register("batch", a)
                    duck.sql("SELECT b.*, d.name, d.tier FROM batch b LEFT JOIN dim d ON b.user = d.uid").to_arrow_table()
                    duck.unregister("batch")
                return BATCH * BATCHES / (time.perf_counter() - start)

            def polars_join(_r: int, batches: list = batches) -> float:
                start = time.perf_counter()
                for b in batches:
                    b.join(dim, left_on="user", right_on="uid", how="left", maintain_order="left")
                return BATCH * BATCHES / (time.perf_counter() - start)

            got = interleave({"ours": ours, "duckdb": duckdb_join, "polars": polars_join}, args.repeats)
            label = (f"lookup join, {BATCHES} x {BATCH // 1000}k-event batches, {args.rows:,}-row table"
                     + (", skewed stream, 100k-key cache" if cache else ", uniform stream, no cache"))
            reporter.add(Result(BENCH, label, "rows_per_s", median(got["ours"]), "duckdb LEFT JOIN (in-memory dim)",
                                median(got["duckdb"]), True, args.rows, args.repeats))
            reporter.add(Result(BENCH, label, "rows_per_s", median(got["ours"]), "polars join (in-memory dim)",
                                median(got["polars"]), True, args.rows, args.repeats))
            if cache:
                log(f"  cache: {job.hits:,} hits, {job.misses:,} misses")
    reporter.finish()


if __name__ == "__main__":
    main()
