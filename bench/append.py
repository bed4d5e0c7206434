"""Append throughput into a log table against writing the same Arrow data as Arrow IPC files with pyarrow.

Each timed run appends ``--rows`` rows in batches of ``--batch`` rows (100k by default), one ``Table.append``
per batch (a committed, durable log batch: zstd-compressed Arrow IPC, fsync, atomic create). The peers write
the very same Arrow batches with pyarrow, one IPC file per batch with the same codec and level (zstd 3): the
physical floor. One peer fsyncs each file like the store does, one does not (the page-cache floor).

Run ``python -m bench.append [--quick] [--rows N] [--repeats K] [--batch B]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np
import polars as pl
import pyarrow as pa

import fluss_lake as fl
from fluss_lake.catalog import data_prefix
from fluss_lake.io import layout
from bench._common import (Reporter, Result, bench_args, fmt_num, fmt_size, interleave, log, median, scatter_keys,
                           temp_store_dir)

BENCH = "append"
FULL_ROWS = 10_000_000
QUICK_ROWS = 1_000_000
SCHEMA = {"id": "BIGINT", "a": "BIGINT", "b": "DOUBLE", "s": "STRING"}
ZSTD_LEVEL = 3  # the table default (table.log.arrow.compression.zstd.level unset)


def make_batches(rows: int, batch: int, seed: int = 0) -> list[pl.DataFrame]:
    """Batches of random rows: int64 key and value, a double, a short string."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        out.append(pl.DataFrame({
            "id": scatter_keys(np.arange(start, start + n)),
            "a": rng.integers(0, 1 << 40, n),
            "b": rng.random(n),
            "s": pl.Series(rng.integers(0, 1_000_000, n)).cast(pl.String),
        }))
    return out


def write_ipc(directory: str, batches: list[pa.Table], fsync: bool) -> float:
    """One zstd Arrow IPC file per batch (the floor our log batches are built on)."""
    os.makedirs(directory, exist_ok=True)
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", ZSTD_LEVEL))
    start = time.perf_counter()
    for i, table in enumerate(batches):
        path = os.path.join(directory, f"{i:020d}.arrow")
        with open(path, "wb") as handle:
            with pa.ipc.new_file(handle, table.schema, options=options) as writer:
                writer.write_table(table)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--batch", type=int, default=100_000, help="rows per append call")
        p.add_argument("--buckets", type=int, default=1, help="bucket.num of the log table")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__, extra=extra)
    rep = Reporter(BENCH)
    log(f"bench.append: {args.rows:,} rows per run in {args.batch:,}-row batches, {args.repeats} repeats, "
        f"{args.buckets} bucket(s)")
    frames = make_batches(args.rows, args.batch)
    arrow = [f.to_arrow() for f in frames]
    with temp_store_dir(args.tmpdir) as root:
        conn = fl.connect(f"{root}/store", local_dir=f"{root}/local")
        conn.create_database("bench")
        conn.create_table("bench.log", schema=SCHEMA, bucket_num=args.buckets)
        table = conn.get_table("bench.log")
        table.append(frames[0].head(1000))  # warm up: first listing, imports
        write_ipc(f"{root}/warm", arrow[:1], fsync=True)
        sizes: dict[str, int] = {}

        def ours(_r: int) -> float:
            start = time.perf_counter()
            for frame in frames:
                table.append(frame)
            return time.perf_counter() - start

        def peer(fsync: bool):
            def run(r: int) -> float:
                directory = f"{root}/ipc-{'sync' if fsync else 'nosync'}-{r}"
                elapsed = write_ipc(directory, arrow, fsync)
                sizes["ipc"] = sum(e.stat().st_size for e in os.scandir(directory))
                shutil.rmtree(directory, ignore_errors=True)
                return elapsed
            return run

        results = interleave({"ours": ours, "ipc_fsync": peer(True), "ipc": peer(False)}, args.repeats)
        log_bytes = sum(e.stat().st_size for b in range(args.buckets)
                        for e in os.scandir(f"{root}/store/{layout.log_prefix(data_prefix(table.info), b)}"))
        log(f"bytes per run: ours {fmt_size(log_bytes / args.repeats)} (whole log / repeats), "
            f"pyarrow IPC {fmt_size(sizes.get('ipc', 0))}")
        rates = {k: [args.rows / s for s in v] for k, v in results.items()}
        log(f"ours per-repeat rows/s {[fmt_num(x) for x in rates['ours']]}")
        case = f"append {args.batch // 1000}k-row batches, {fmt_num(args.rows)} rows per run"
        rep.add(Result(BENCH, case, "rows_per_s", median(rates["ours"]), "pyarrow IPC file zstd + fsync",
                       median(rates["ipc_fsync"]), True, args.rows, args.repeats))
        rep.add(Result(BENCH, case, "rows_per_s", median(rates["ours"]), "pyarrow IPC file zstd (no fsync)",
                       median(rates["ipc"]), True, args.rows, args.repeats))

        # A full scan of the log in a fresh connection (each object's checksum checked on its first read) against
        # pyarrow reading the same batches from memory-mapped IPC files.
        total = sum(table.end_offsets().values())
        write_ipc(f"{root}/ipc-scan", arrow, fsync=False)
        files = sorted(e.path for e in os.scandir(f"{root}/ipc-scan"))

        def scan_ours(r: int) -> float:
            fresh = fl.connect(f"{root}/store", local_dir=f"{root}/scan-{r}").get_table("bench.log")
            start = time.perf_counter()
            rows = fresh.scan_log().height
            elapsed = time.perf_counter() - start
            assert rows == total, (rows, total)
            return elapsed

        def scan_peer(_r: int) -> float:
            start = time.perf_counter()
            frame = pl.from_arrow(pa.concat_tables([pa.ipc.open_file(pa.memory_map(f)).read_all() for f in files]))
            elapsed = time.perf_counter() - start
            assert frame.height == args.rows
            return elapsed

        scans = interleave({"ours": scan_ours, "ipc": scan_peer}, args.repeats)
        scan_rates = {"ours": [total / s for s in scans["ours"]], "ipc": [args.rows / s for s in scans["ipc"]]}
        rep.add(Result(BENCH, f"full scan_log of {fmt_num(total)} rows (fresh connection)", "rows_per_s",
                       median(scan_rates["ours"]), "pyarrow read of the IPC files (mapped)",
                       median(scan_rates["ipc"]), True, total, args.repeats))
    rep.finish()


if __name__ == "__main__":
    main()
