"""Delta join against the stateful (symmetric hash) join on the same inputs, at two sizes per side.

Inputs: ``orders`` (primary key ``(cid, oid)``, bucket key ``cid``: a prefix index) and ``customers`` (primary
key ``cid``), ``--rows`` rows each (and a tenth of that as the small size), 4 buckets; the join
``orders LEFT JOIN customers ON cid`` writes a 6-column result table. Each contender runs in its own fresh
process (clean peak memory), from an empty checkpoint over the whole changelog, then a second process restarts it
(open the job from its checkpoint and run once with nothing new). Cases:

- operator state bytes after the run (delta: the checkpoint of offsets; stateful: checkpoint + state frames);
- peak anonymous memory (``RssAnon`` sampled in the child, whole process);
- result rows/s (rows of the result table / seconds of ``run_once``);
- restart seconds (constructor + ``run_once`` in a new process).

For reading the memory figures, a third child only writes the same number of result rows in the same batch size
into a new table (no join): the memory any join pays for maintaining its result table.

Allocators: by default every child runs with the libraries' own allocators (Arrow's default pool is mimalloc).
``--arrow-pool jemalloc|system`` sets ``ARROW_DEFAULT_MEMORY_POOL`` for every child alike (both contenders and
the floor), to show how much of each peak is freed memory the allocator keeps: Arrow 21+ bundles mimalloc
2.2, whose peak resident memory is known to be higher than jemalloc's or glibc's (microsoft/mimalloc#1111).

``--mimalloc-thp off`` runs every child with ``MIMALLOC_ALLOW_THP=0``. With transparent huge pages allowed (the
default, on a kernel that grants them on request) Arrow's mimalloc keeps far more resident than it has allocated:
in a delta-join child its arena held 63 MiB, 54 MiB of them in huge pages, while Arrow's live allocations never
passed 20 MiB.

Run ``python -m bench.delta_join [--quick] [--rows N] [--repeats K] [--batch-rows B] [--arrow-pool P]
[--mimalloc-thp off]``.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import time
from typing import Any

import numpy as np
import polars as pl

import fluss_lake as fl
from fluss_lake.jobs import StatefulJoin
from fluss_lake.jobs.delta_join import BATCH_ROWS as DELTA_BATCH_ROWS
from fluss_lake.kv import compactor
from bench._common import (
    Reporter,
    Result,
    RssSampler,
    Target,
    bench_args,
    fmt_size,
    log,
    median,
    run_child,
    temp_store_dir,
)

BENCH = "delta_join"
FULL_ROWS = 1_000_000
QUICK_ROWS = 20_000
WRITE_ROWS = 100_000
JOB_BATCH_ROWS = inspect.signature(StatefulJoin).parameters["batch_rows"].default


def _setup(path: str, rows: int, seed: int = 7) -> None:
    """Create and fill the inputs in a store at `path` (see :func:`fill_inputs`)."""
    fill_inputs(fl.connect(path), rows, seed)


def fill_inputs(conn: fl.Connection, rows: int, seed: int = 7, bucket_num: int = 4) -> None:
    """Create and fill the inputs (customers 0..rows-1 with a tenth missing; orders on random customers)."""
    conn.create_database("bench")
    conn.create_table("bench.orders", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE", "note": "STRING"},
                      primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=bucket_num)
    conn.create_table("bench.customers", schema={"cid": "BIGINT", "name": "STRING", "tier": "INT"},
                      primary_key=["cid"], bucket_num=bucket_num)
    rng = np.random.default_rng(seed)
    orders, customers = conn.get_table("bench.orders"), conn.get_table("bench.customers")
    for start in range(0, rows, WRITE_ROWS):
        n = min(WRITE_ROWS, rows - start)
        idx = np.arange(start, start + n)
        orders.upsert(pl.DataFrame({"cid": rng.integers(0, rows, n), "oid": idx, "amount": rng.random(n),
                                    "note": pl.Series(idx % 1000).cast(pl.String)}))
        keep = idx[idx % 10 != 0]
        customers.upsert(pl.DataFrame({"cid": keep, "name": pl.Series(keep).cast(pl.String),
                                       "tier": (keep % 5).astype(np.int32)}))
    orders.snapshot()  # as a running table would have (periodic KV snapshots): opening it maps segments
    customers.snapshot()


def _job(conn: fl.Connection, kind: str, result: str, batch_rows: int | None = None) -> Any:
    """The delta or stateful join into `result`, at `batch_rows` (None: the job's own default)."""
    from fluss_lake.jobs import DeltaJoin, Join, StatefulJoin

    if not conn.table_exists(f"bench.{result}"):
        conn.create_table(f"bench.{result}", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE",
                                                     "note": "STRING", "name": "STRING", "tier": "INT"},
                          primary_key=["cid", "oid"], bucket_num=4, ignore_if_exists=True)
    cls = DeltaJoin if kind == "delta" else StatefulJoin
    step = {} if batch_rows is None else {"batch_rows": batch_rows}
    return cls(conn.get_table(f"bench.{result}"), {"o": conn.get_table("bench.orders"),
                                                   "c": conn.get_table("bench.customers")},
               [Join("o", "c", ["cid"], how="left")], name=result.replace("_", "-"), **step)


def child_run(payload: dict) -> dict:
    """In a fresh process: run the job over the whole changelog; time, peak RssAnon, state bytes."""
    gc.collect()
    conn = fl.connect(payload["path"])
    with RssSampler() as sampler:
        start = time.perf_counter()
        job = _job(conn, payload["kind"], payload["result"], payload["batch_rows"])
        report = job.run_once()
        compactor.drain()  # the merges its writes started count too (both contenders)
        seconds = time.perf_counter() - start
    result = conn.get_table(f"bench.{payload['result']}")
    rows = result.to_polars(columns=["cid"]).height
    import pyarrow as pa

    from fluss_lake._utils import arrow_pool

    return {"seconds": seconds, "peak_anon": sampler.peak, "state_bytes": job.state_bytes(), "result_rows": rows,
            "batch_rows": job.batch_rows,
            "records": report.records_read, "upserts": report.rows_upserted,
            "changelog": sum(result.end_offsets().values()),
            "pool": f"{pa.default_memory_pool().backend_name}, fluss-lake's buffers {arrow_pool.pool().backend_name}"}


def child_floor(payload: dict) -> dict:
    """In a fresh process: only the result writes (as many upserts as the delta join wrote, same shape and batch
    size, over the same number of keys, into a new table).

    Not a contender: the memory every join pays for maintaining its result table, to read the others against.
    """
    conn = fl.connect(payload["path"])
    conn.create_table("bench.floor", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE", "note": "STRING",
                                             "name": "STRING", "tier": "INT"}, primary_key=["cid", "oid"], bucket_num=4)
    table = conn.get_table("bench.floor")
    rng = np.random.default_rng(3)
    rows, upserts = payload["rows"], payload["upserts"]
    with RssSampler() as sampler:
        batch = payload["batch_rows"]
        for start in range(0, upserts, batch):
            idx = np.arange(start, min(upserts, start + batch)) % rows
            writer = table.new_upsert()
            writer.upsert(pl.DataFrame({"cid": (idx * 7919) % rows, "oid": idx,
                                        "amount": rng.random(len(idx)), "note": pl.Series(idx % 1000).cast(pl.String),
                                        "name": pl.Series(idx).cast(pl.String), "tier": (idx % 5).astype(np.int32)}))
            writer.flush()
    return {"peak_anon": sampler.peak}


def child_restart(payload: dict) -> dict:
    """In a fresh process: open the job from its checkpoint and run once (nothing new to do)."""
    conn = fl.connect(payload["path"])
    start = time.perf_counter()
    job = _job(conn, payload["kind"], payload["result"], payload["batch_rows"])
    report = job.run_once()
    return {"seconds": time.perf_counter() - start, "records": report.records_read}


def _measure(path: str, rows: int, repeats: int, batch_rows: int | None) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {k: {} for k in ("delta", "stateful")}
    for r in range(repeats):
        for kind in ("delta", "stateful"):  # interleaved: ours, peer, ours, peer
            payload = {"path": path, "kind": kind, "result": f"{kind}_view_{r}", "batch_rows": batch_rows}
            run = run_child(BENCH, "child_run", payload)
            restart = run_child(BENCH, "child_restart", payload)
            assert restart["records"] == 0, restart
            for key, value in (("seconds", run["seconds"]), ("peak_anon", run["peak_anon"]),
                               ("state_bytes", run["state_bytes"]), ("rows_per_s", run["result_rows"] / run["seconds"]),
                               ("restart_s", restart["seconds"]), ("result_rows", run["result_rows"]),
                               ("upserts", run["upserts"])):
                out[kind].setdefault(key, []).append(float(value))
            out[kind]["batch_rows"] = [float(run["batch_rows"])]
            log(f"  {kind} rows={rows:,} r{r}: batch_rows {run['batch_rows']:,}, {run['seconds']:.2f} s, "
                f"peak RssAnon {fmt_size(run['peak_anon'])}, "
                f"state {fmt_size(run['state_bytes'])}, restart {restart['seconds']:.3f} s, Arrow pool {run['pool']}, "
                f"result changelog {run['changelog']:,} records")
    return out


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-rows", type=int, default=None, help="batch_rows of both jobs; default: each job's "
                        f"own default (delta join {DELTA_BATCH_ROWS:,}, stateful join {JOB_BATCH_ROWS:,})")
    parser.add_argument("--arrow-pool", choices=("default", "jemalloc", "system", "mimalloc"), default="default",
                        help="Arrow memory pool of every child (ARROW_DEFAULT_MEMORY_POOL, the same for all); "
                        "default: leave Arrow's choice")
    parser.add_argument("--mimalloc-thp", choices=("default", "off"), default="default",
                        help="off: Arrow's mimalloc without transparent huge pages in every child "
                        "(MIMALLOC_ALLOW_THP=0, the same for all); default: mimalloc's choice")


def main(argv: list[str] | None = None) -> None:
    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, default_repeats=3, quick_repeats=1,
                      argv=argv, description=__doc__, extra=_options)
    if args.arrow_pool != "default":  # inherited by every child process, before it imports pyarrow
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = args.arrow_pool
    if args.mimalloc_thp == "off":
        os.environ["MIMALLOC_ALLOW_THP"] = "0"
    reporter = Reporter(BENCH)
    sizes = sorted({max(args.rows // 10, 1000), args.rows})
    for rows in sizes:
        with temp_store_dir(args.tmpdir) as path:
            log(f"setup: {rows:,} rows per side")
            _setup(path, rows)
            m = _measure(path, rows, args.repeats, args.batch_rows)
            upserts = int(median(m["delta"]["upserts"]))
            delta_step = int(m["delta"]["batch_rows"][0])  # the floor writes in the delta join's step size
            floor = run_child(BENCH, "child_floor", {"path": path, "rows": rows, "batch_rows": delta_step,
                                                     "upserts": upserts})["peak_anon"]
            log(f"  result-table writes alone ({upserts:,} upserts): peak RssAnon {fmt_size(floor)}; upserts: "
                f"delta {upserts:,}, stateful {int(median(m['stateful']['upserts'])):,}")
        d, s = m["delta"], m["stateful"]
        assert median(d["result_rows"]) == median(s["result_rows"]) == rows
        steps = (f"batch_rows={args.batch_rows:,} (both)" if args.batch_rows is not None else
                 f"each job's default batch_rows (delta {int(d['batch_rows'][0]):,}, stateful "
                 f"{int(s['batch_rows'][0]):,})")
        label = f"orders LEFT JOIN customers, {rows:,} rows per side, {steps}" + (
            f", Arrow pool {args.arrow_pool}" if args.arrow_pool != "default" else "") + (
            ", mimalloc without THP" if args.mimalloc_thp == "off" else "")
        peer = "stateful symmetric hash join"
        big = rows == args.rows
        reporter.add(Result(BENCH, f"{label}: operator state", "bytes", median(d["state_bytes"]), peer,
                            median(s["state_bytes"]), False, rows, args.repeats))
        reporter.add(Result(BENCH, f"{label}: peak RssAnon (own process)", "bytes", median(d["peak_anon"]), peer,
                            median(s["peak_anon"]), False, rows, args.repeats,
                            note=f"floor: the delta join's {upserts:,} result upserts alone peak at {fmt_size(floor)}",
                            targets=(Target("ratio", ">=", 3, "<= 1/3 of the stateful join's"),) if big else ()))
        reporter.add(Result(BENCH, f"{label}: result rows/s", "rows_per_s", median(d["rows_per_s"]), peer,
                            median(s["rows_per_s"]), True, rows, args.repeats,
                            targets=(Target("ratio", ">=", 1, ">= the stateful join's"),) if big else ()))
        reporter.add(Result(BENCH, f"{label}: restart (new process, open + run_once)", "seconds",
                            median(d["restart_s"]), peer, median(s["restart_s"]), False, rows, args.repeats,
                            targets=(Target("value", "<=", 1.0, "<= 1 s"),) if big else ()))
    reporter.finish()


if __name__ == "__main__":
    main()
