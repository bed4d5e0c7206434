"""Reads at lake scale: a filtered lazy scan of a live log table, and DuckDB over a registered live table.

A log table of ``--rows`` rows (``id BIGINT`` ascending, ``k INT``, ``v DOUBLE``, ``s STRING``), appended in
100k-row batches with ``table.statistics.columns = id``, and the same rows exported to one Parquet file (100k-row
row groups, statistics on). The filter keeps 1% of the rows (``id`` in a range, ``k < 500``: ~0.5%).

- filtered lazy scan, seconds: ``table.to_lazy().filter(...).select(...).collect()`` against the eager read then
  filter (``to_polars()``, what ``to_lazy()`` did before on a log table), Polars ``scan_parquet`` and DuckDB
  ``read_parquet`` over the Parquet export (the same query);
- the same, peak anonymous memory above the process's baseline, each system in a fresh process;
- DuckDB over the live table: registering (``register_duckdb(..., live=True)``: nothing read) against registering a
  copy (``con.register(name, table.to_polars().to_arrow())``, how views were made before), in seconds; and the
  filtered query afterwards on each;
- freshness: the registered view shows a write made after registering (checked, not timed);
- a filtered union read (the same rows in a lake-enabled table: the first half tiered into the lake, the second
  half the live tail; the filter keeps 1% of the rows, inside the tail): ``scan_union(...).filter(...)``, whose
  predicate reaches the tail's batch statistics, against ``union_read(...)`` filtered afterwards (the lake part
  filtered in its Parquet scan, the whole tail decoded: what ``scan_union`` did before), in seconds and peak memory.

Run ``python -m bench.reads [--quick] [--rows N] [--repeats K] [--skip-memory]``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from bench._common import (Reporter, Result, RssSampler, Target, bench_args, fmt_size, interleave, log, median,
                           proc_status, run_child, temp_store_dir, timed)

BENCH = "reads"
FULL_ROWS = 5_000_000
QUICK_ROWS = 300_000
BATCH = 100_000
TABLE = "bench.events"
UNION_TABLE = "bench.events_lake"
SCHEMA = {"id": "BIGINT", "k": "INT", "v": "DOUBLE", "s": "STRING"}


def make_rows(start: int, stop: int):
    import polars as pl

    i = np.arange(start, stop, dtype=np.int64)
    return pl.DataFrame({"id": i, "k": ((i * 7919) % 1000).astype(np.int32), "v": i * 0.25,
                         "s": pl.Series(i % 10_000).cast(pl.String)})


def window(rows: int) -> tuple[int, int]:
    """The id range the filter keeps: 1% of the table, in the middle."""
    lo = rows // 2
    return lo, lo + max(rows // 100, 1) - 1


def predicate(lo: int, hi: int):
    import polars as pl

    return pl.col("id").is_between(lo, hi) & (pl.col("k") < 500)


def sql(source: str, lo: int, hi: int) -> str:
    return f"select s, v from {source} where id between {lo} and {hi} and k < 500"


def build(folder: str, rows: int) -> str:
    """The live table and its Parquet export; returns the Parquet path."""
    import fluss_lake as fl

    conn = fl.connect(os.path.join(folder, "live"))
    conn.create_database("bench")
    conn.create_table(TABLE, schema=SCHEMA, options={"table.statistics.columns": "id"})
    table = conn.get_table(TABLE)
    for start in range(0, rows, BATCH):
        table.append(make_rows(start, min(start + BATCH, rows)))
    parquet = os.path.join(folder, "events.parquet")
    table.to_polars().write_parquet(parquet, row_group_size=BATCH, statistics=True)
    return parquet


def build_union(folder: str, rows: int) -> None:
    """The same rows in a lake-enabled table: the first half tiered into a local lake, the second half live only."""
    import fluss_lake as fl
    import tiering

    conn = fl.connect(os.path.join(folder, "live"))
    conn.create_table(UNION_TABLE, schema=SCHEMA, options={"table.statistics.columns": "id",
                                                           "table.datalake.enabled": True})
    table = conn.get_table(UNION_TABLE)
    half = (rows // 2 // BATCH) * BATCH
    for start in range(0, half, BATCH):
        table.append(make_rows(start, min(start + BATCH, half)))
    tiering.tier_once(conn, tiering.Lake.local(os.path.join(folder, "lake")))
    for start in range(half, rows, BATCH):
        table.append(make_rows(start, min(start + BATCH, rows)))


def union_window(rows: int) -> tuple[int, int]:
    """The id range the union filter keeps: 1% of the table, in the live tail."""
    lo = rows * 3 // 4
    return lo, lo + max(rows // 100, 1) - 1


# ---------------------------------------------------------------- one query, for the timed runs and the children
def run_query(system: str, folder: str, parquet: str, lo: int, hi: int) -> int:
    import duckdb
    import polars as pl

    import fluss_lake as fl

    if system.startswith("union"):
        import tiering
        from tiering.lazy_reads import scan_union

        table = fl.connect(os.path.join(folder, "live")).get_table(UNION_TABLE)
        lake = tiering.Lake.local(os.path.join(folder, "lake"))
        frame = scan_union(table, lake) if system == "union ours" else tiering.union_read(table, lake)
        return frame.filter(predicate(lo, hi)).select("s", "v").collect().height

    if system == "duckdb parquet":
        return len(duckdb.connect().sql(sql(f"read_parquet('{parquet}')", lo, hi)).fetchall())
    if system == "polars scan_parquet":
        return pl.scan_parquet(parquet).filter(predicate(lo, hi)).select("s", "v").collect().height
    table = fl.connect(os.path.join(folder, "live")).get_table(TABLE)
    if system == "ours":
        return table.to_lazy().filter(predicate(lo, hi)).select("s", "v").collect().height
    return table.to_polars().filter(predicate(lo, hi)).select("s", "v").height  # the eager read


def memory_child(payload: dict[str, Any]) -> dict[str, Any]:
    """Peak anonymous memory of one query above this process's baseline (imports done, nothing read)."""
    import duckdb  # noqa: F401 - imported before the baseline, as in every system
    import polars  # noqa: F401

    import fluss_lake  # noqa: F401

    base = proc_status().get("RssAnon", 0)
    with RssSampler() as sampler:
        n = run_query(payload["system"], payload["folder"], payload["parquet"], payload["lo"], payload["hi"])
    return {"peak": max(sampler.peak - base, 0), "rows": n}


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--skip-memory", action="store_true", help="skip the per-process memory cases")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, extra=extra,
                      description=__doc__)
    import duckdb

    import fluss_lake as fl
    from tiering import Lake, register_duckdb

    report = Reporter(BENCH)
    rows, repeats = args.rows, args.repeats
    lo, hi = window(rows)
    with temp_store_dir(args.tmpdir) as folder:
        log(f"building {rows:,} rows ...")
        parquet = build(folder, rows)
        expected = run_query("eager read", folder, parquet, lo, hi)
        for system in ("ours", "polars scan_parquet", "duckdb parquet"):
            got = run_query(system, folder, parquet, lo, hi)
            assert got == expected, f"{system} found {got} rows, the eager read {expected}"
        systems = ("ours", "eager read", "polars scan_parquet", "duckdb parquet")
        times = interleave({s: (lambda r, s=s: timed(lambda: run_query(s, folder, parquet, lo, hi)))
                            for s in systems}, repeats)
        case = f"filtered lazy scan (1% id range, k < 500) of a {rows:,}-row log table"
        for peer in systems[1:]:
            targets = (Target("ratio", ">=", 5.0, "ratio >= 5"),) if peer == "eager read" else ()
            report.add(Result(BENCH, case, "seconds", median(times["ours"]), peer, median(times[peer]), False,
                              rows, repeats, targets))

        if not args.skip_memory:
            peaks: dict[str, list[float]] = {s: [] for s in systems}
            for _ in range(min(repeats, 3)):
                for s in systems:
                    out = run_child(BENCH, "memory_child", {"system": s, "folder": folder, "parquet": parquet,
                                                            "lo": lo, "hi": hi})
                    assert out["rows"] == expected
                    peaks[s].append(out["peak"])
            log("  peak RssAnon: " + ", ".join(f"{s} {fmt_size(median(v))}" for s, v in peaks.items()))
            for peer in systems[1:]:
                targets = (Target("ratio", ">=", 5.0, "ratio >= 5"),) if peer == "eager read" else ()
                report.add(Result(BENCH, case.replace("filtered lazy scan", "peak memory of a filtered lazy scan"),
                                  "bytes", median(peaks["ours"]), peer, median(peaks[peer]), False, rows,
                                  min(repeats, 3), targets))

        # DuckDB over the live table: register a view that reads per query vs register a copy
        conn = fl.connect(os.path.join(folder, "live"))
        table = conn.get_table(TABLE)
        lake = Lake.local(os.path.join(folder, "no-lake"))  # never tiered: only the live views
        cons: dict[str, Any] = {}

        def register_view(r: int) -> float:
            con = duckdb.connect()
            start = time.perf_counter()
            register_duckdb(con, lake, conn, live=True)
            cons["view"] = con
            return time.perf_counter() - start

        def register_copy(r: int) -> float:
            con = duckdb.connect()
            start = time.perf_counter()
            con.execute("create schema bench")
            con.register("__copy", table.to_polars().to_arrow())
            con.execute("create view bench.events as select * from __copy")
            cons["copy"] = con
            return time.perf_counter() - start

        reg = interleave({"view": register_view, "copy": register_copy}, repeats)
        report.add(Result(BENCH, f"register a {rows:,}-row live table in DuckDB", "seconds", median(reg["view"]),
                          "con.register of a copy (to_polars().to_arrow())", median(reg["copy"]), False, rows,
                          repeats, (Target("ratio", ">=", 10.0, "ratio >= 10"),)))
        query = sql("bench.events", lo, hi)
        assert len(cons["view"].sql(query).fetchall()) == len(cons["copy"].sql(query).fetchall()) == expected
        q = interleave({"view": lambda r: timed(lambda: cons["view"].sql(query).fetchall()),
                        "copy": lambda r: timed(lambda: cons["copy"].sql(query).fetchall())}, repeats)
        report.add(Result(BENCH, "the filtered query on the registered view (reads the live table per query)",
                          "seconds", median(q["view"]), "the same query on the registered copy (in memory)",
                          median(q["copy"]), False, rows, repeats))
        both = interleave({"view": lambda r: register_view(r) + timed(lambda: cons["view"].sql(query).fetchall()),
                           "copy": lambda r: register_copy(r) + timed(lambda: cons["copy"].sql(query).fetchall())},
                          repeats)
        report.add(Result(BENCH, "register + one filtered query", "seconds", median(both["view"]),
                          "register a copy + the same query", median(both["copy"]), False, rows, repeats))
        table.append(make_rows(rows, rows + 10))
        fresh = cons["view"].sql("select count(*) from bench.events").fetchall()[0][0]
        stale = cons["copy"].sql("select count(*) from bench.events").fetchall()[0][0]
        assert fresh == rows + 10 and stale == rows, (fresh, stale)
        log(f"  after a write: the view counts {fresh:,} rows, the copy {stale:,}")

        # a filtered union read: the predicate reaching the live tail, against the tail decoded whole
        log("tiering half of the rows into a lake table ...")
        build_union(folder, rows)
        ulo, uhi = union_window(rows)
        want = run_query("union before", folder, parquet, ulo, uhi)
        assert want == run_query("union ours", folder, parquet, ulo, uhi) > 0
        union_systems = ("union ours", "union before")
        times = interleave({s: (lambda r, s=s: timed(lambda: run_query(s, folder, parquet, ulo, uhi)))
                            for s in union_systems}, repeats)
        case = f"filtered union read (1% id range in the live tail, k < 500), {rows:,} rows, half tiered"
        before = "union_read then filter (the tail decoded whole)"
        report.add(Result(BENCH, case, "seconds", median(times["union ours"]), before, median(times["union before"]),
                          False, rows, repeats))
        if not args.skip_memory:
            upeaks: dict[str, list[float]] = {s: [] for s in union_systems}
            for _ in range(min(repeats, 3)):
                for s in union_systems:
                    out = run_child(BENCH, "memory_child", {"system": s, "folder": folder, "parquet": parquet,
                                                            "lo": ulo, "hi": uhi})
                    assert out["rows"] == want
                    upeaks[s].append(out["peak"])
            log("  peak RssAnon: " + ", ".join(f"{s} {fmt_size(median(v))}" for s, v in upeaks.items()))
            report.add(Result(BENCH, case.replace("filtered union read", "peak memory of a filtered union read"),
                              "bytes", median(upeaks["union ours"]), before, median(upeaks["union before"]), False,
                              rows, min(repeats, 3)))
    report.finish()


if __name__ == "__main__":
    main()
