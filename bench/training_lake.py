"""Training sets beyond memory: entity rows/s and peak RSS against DuckDB ``ASOF JOIN`` over the same Parquet files.

The data of ``bench.training`` at lake scale (default: 1M entity rows, two feature tables of 10M history rows,
``rows / 100`` keys, TTL 1 d / 7 d, commit-time mode), written once as Parquet files (one per history, in log order
within each bucket as the lake's history table holds them; the entity rows with their row number). Each system
runs in its own fresh process, so its peak memory is its own (``VmHWM``, the peak resident set of the process:
``ru_maxrss`` would inherit the parent's peak across fork and exec; and the peak ``RssAnon`` sampled every 20 ms:
anonymous memory, not file pages). Imports happen before the clock starts:

- ours: ``training_set(entities, views, key_chunks=N)`` with the views on ``pl.scan_parquet`` of the files (each
  pass reads only its range of buckets of a history: the files are in log order per bucket, so sorted by
  ``__bucket``, and row-group statistics prune the rest);
- DuckDB: two ``ASOF LEFT JOIN`` over ``read_parquet`` of the same files with ``CASE`` masks, ``ORDER BY`` the
  row number, fetched as Arrow (DuckDB's default memory limit, spilling to a temp folder if it needs to).

Both compute the whole training set into memory (Arrow / Polars); the first run of each writes its result and
the two are checked equal before any figure is reported. Repeats alternate ours / DuckDB.
``python -m bench.training_lake [--quick] [--rows N] [--entity-rows N] [--key-chunks N] [--repeats K]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import polars as pl

from bench._common import Reporter, Result, Target, bench_args, fmt_num, log, median

BENCH = "training_lake"
FULL_ROWS = 10_000_000
QUICK_ROWS = 200_000
NAMES = ("a", "b")


# ---------------------------------------------------------------- the child processes
class _AnonPeak:
    """Samples this process's RssAnon (bytes) every 20 ms; `peak` is the highest seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("RssAnon:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
        except OSError:  # pragma: no cover - not Linux
            pass

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak


def _status_bytes(field: str) -> int:
    """A ``/proc/self/status`` memory figure in bytes (0 where there is none)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return 0


def _ours(folder: Path, chunks: int) -> pl.DataFrame:
    from bench.training import TTLS
    from fluss_lake.training import FeatureView, training_set  # imported before the clock by child()

    entities = pl.read_parquet(folder / "entities.parquet").drop("__row")
    views = [
        FeatureView(pl.scan_parquet(folder / f"hist_{n}.parquet"), keys=["entity_id"], features=["x", "n"],
                    ttl=TTLS[n], prefix=f"{n}__")
        for n in NAMES
    ]
    out = training_set(entities, views, key_chunks=chunks)
    assert isinstance(out, pl.DataFrame)
    return out


def _duck(folder: Path) -> pl.DataFrame:
    import duckdb

    from bench.training import duck_sql

    con = duckdb.connect(":memory:")
    con.execute(f"SET temp_directory = '{folder / 'duck_spill'}'")
    con.execute(f"CREATE VIEW ents AS SELECT * FROM read_parquet('{folder / 'entities.parquet'}')")
    for n in NAMES:
        con.execute(f"CREATE VIEW hist_{n} AS SELECT * FROM read_parquet('{folder / f'hist_{n}.parquet'}')")
    out = pl.from_arrow(con.sql(duck_sql(list(NAMES))).to_arrow_table())
    assert isinstance(out, pl.DataFrame)
    con.close()
    return out


def child(system: str, folder: Path, chunks: int, keep: bool) -> None:
    """One run of `system` in this (fresh) process: prints seconds and peak memory as one JSON line."""
    if system == "ours":
        import fluss_lake.training  # noqa: F401 - import cost is not the job's
    else:
        import duckdb  # noqa: F401
    import bench.training  # noqa: F401
    sampler = _AnonPeak()
    start = time.perf_counter()
    out = _ours(folder, chunks) if system == "ours" else _duck(folder)
    seconds = time.perf_counter() - start
    anon = sampler.stop()
    if keep:
        out.write_parquet(folder / f"result_{system}.parquet")
    maxrss = _status_bytes("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"system": system, "seconds": seconds, "maxrss": maxrss, "anon_peak": anon,
                      "rows": out.height}), flush=True)


def _run_child(system: str, folder: Path, chunks: int, keep: bool) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.training_lake", "--child", system, "--dir", str(folder),
           "--key-chunks", str(chunks), *(["--keep"] if keep else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ.copy())
    if done.returncode != 0:
        raise SystemExit(f"bench.training_lake: the {system} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- data and main
def write_data(folder: Path, rows: int, entity_rows: int, keys: int) -> int:
    """Write the two histories and the entity rows as Parquet; returns the history rows of one table."""
    from bench.training import make_entities, make_history

    height = 0
    for seed, n in enumerate(NAMES, start=1):
        history = make_history(rows, keys, seed=seed)
        height = history.height
        history.write_parquet(folder / f"hist_{n}.parquet", row_group_size=256 * 1024)
        del history
    make_entities(entity_rows, keys, seed=3).with_row_index("__row").write_parquet(folder / "entities.parquet")
    return height


def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--entity-rows", type=int, default=None, help="entity rows (default 1M; 20k quick)")
        p.add_argument("--entities", type=int, default=None, help="distinct keys per table (default rows / 100)")
        p.add_argument("--key-chunks", type=int, default=8, help="ours: passes per view (ranges of buckets) joined one at a time (8)")
        p.add_argument("--child", choices=("ours", "duckdb"), default=None, help=argparse.SUPPRESS)
        p.add_argument("--dir", default=None, help=argparse.SUPPRESS)
        p.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, default_repeats=3, quick_repeats=1,
                      argv=argv, description=__doc__, extra=extra)
    if args.child is not None:
        child(args.child, Path(args.dir), args.key_chunks, args.keep)
        return
    entity_rows = args.entity_rows or (20_000 if args.quick else 1_000_000)
    keys = args.entities or max(args.rows // 100, 100)
    with tempfile.TemporaryDirectory(prefix="bench-training-lake-", dir=args.tmpdir) as tmp:
        folder = Path(tmp)
        log(f"bench.training_lake: writing {fmt_num(entity_rows)} entity rows, 2 x ~{fmt_num(args.rows)} history "
            f"rows ({fmt_num(keys)} keys) as Parquet")
        height = write_data(folder, args.rows, entity_rows, keys)
        size = sum(f.stat().st_size for f in folder.glob("*.parquet"))
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "duckdb": []}
        for repeat in range(args.repeats):
            for system in ("ours", "duckdb") if repeat % 2 == 0 else ("duckdb", "ours"):
                runs[system].append(_run_child(system, folder, args.key_chunks, keep=repeat == 0))
                r = runs[system][-1]
                log(f"  {system}: {r['seconds']:.2f} s, maxrss {r['maxrss'] / 1e6:.0f} MB, "
                    f"anon peak {r['anon_peak'] / 1e6:.0f} MB")
        ours, theirs = (pl.read_parquet(folder / f"result_{s}.parquet") for s in ("ours", "duckdb"))
        from bench.training import same_result

        if not same_result(ours, theirs):
            raise SystemExit("bench.training_lake: ours and DuckDB disagree; no figures")
        log(f"results agree ({ours.height:,} rows); Parquet inputs {size / 1e6:.0f} MB")
    case = (f"{fmt_num(entity_rows)} entity rows x 2 feature tables of {fmt_num(height)} history rows from Parquet "
            f"({fmt_num(keys)} keys, TTL 1d/7d), key_chunks={args.key_chunks}, one process per run")
    rep = Reporter(BENCH)
    speed = [entity_rows / r["seconds"] for r in runs["ours"]], [entity_rows / r["seconds"] for r in runs["duckdb"]]
    rep.add(Result(BENCH, case, "entity_rows_per_s", median(speed[0]), "duckdb ASOF JOIN (read_parquet)",
                   median(speed[1]), True, entity_rows, args.repeats,
                   targets=(Target("ratio", ">=", 2, "vs DuckDB >= 2x"),)))
    for metric, key in (("peak_rss_bytes", "maxrss"), ("peak_rss_anon_bytes", "anon_peak")):
        rep.add(Result(BENCH, case, metric, median([r[key] for r in runs["ours"]]),
                       "duckdb ASOF JOIN (read_parquet)", median([r[key] for r in runs["duckdb"]]), False,
                       entity_rows, args.repeats,
                       targets=(Target("ratio", ">=", 2, "peak RSS <= 0.5x DuckDB's"),) if key == "maxrss" else (),
                       note=f"inputs: {size:,} bytes of Parquet"))
    rep.finish()


if __name__ == "__main__":
    main()
