"""Upsert throughput into a primary-key table, per merge engine, against DuckDB and Polars.

For each engine (default last-row, partial update, first_row, versioned, aggregation sum/max) a table is
preloaded with ``--rows`` rows (in large upsert calls, so setup is fast), then a stream of 10k-row batches
(random keys: about half updates of existing keys, half new keys) is upserted. Peers get the very same
batches, interleaved with ours:

- DuckDB in-memory ``INSERT ... ON CONFLICT (id) DO UPDATE`` (``DO NOTHING`` for first_row, ``WHERE
  excluded.ver >= t.ver`` for versioned, ``SET total = t.total + excluded.total, mx = greatest(...)`` for
  aggregation) on a table with a PRIMARY KEY;
- Polars on an in-memory DataFrame: anti-join + concat (with a left join first where the engine needs the old
  row).

"Cost follows the batch": the same default-engine stream into a table of 100k rows and into the big table;
the ratio big/small should stay >= 0.7.

Run ``python -m bench.upsert [--quick] [--rows N] [--repeats K] [--engines default,aggregation]``.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import polars as pl

import fluss_lake as fl
from fluss_lake.kv import compactor
from bench._common import (Reporter, Result, Target, bench_args, fmt_num, interleave, log, median, scatter_keys,
                           temp_store_dir)

BENCH = "upsert"
FULL_ROWS = 10_000_000
QUICK_ROWS = 200_000


# ---------------------------------------------------------------- engines
@dataclass(frozen=True)
class Engine:
    """One merge-engine case: table definition, how rows look, and the two peers' statements."""

    key: str
    label: str
    schema: dict[str, str]
    options: dict[str, str]
    duck_types: dict[str, str]
    duck_upsert: str  # statement reading the registered arrow view ``batch``
    target_columns: tuple[str, ...] | None = None  # partial update: the written columns
    targets: tuple[Target, ...] = ()

    @property
    def written(self) -> list[str]:
        """Columns present in the streamed batches."""
        return list(self.target_columns or self.schema)


_WIDE = {"id": "BIGINT", "a": "BIGINT", "b": "DOUBLE", "s": "STRING"}
_WIDE_DUCK = {"id": "BIGINT", "a": "BIGINT", "b": "DOUBLE", "s": "VARCHAR"}

ENGINES: dict[str, Engine] = {
    "default": Engine(
        "default", "default-engine (last row)", _WIDE, {}, _WIDE_DUCK,
        "INSERT INTO t SELECT * FROM batch ON CONFLICT (id) DO UPDATE SET a = excluded.a, b = excluded.b, "
        "s = excluded.s",
        targets=(Target("ratio", ">=", 10, "vs DuckDB >= 10x"), Target("value", ">=", 1e6, ">= 1M rows/s"))),
    "partial": Engine(
        "partial", "partial-update (id, a of id, a, b, s)", _WIDE, {}, _WIDE_DUCK,
        "INSERT INTO t (id, a) SELECT id, a FROM batch ON CONFLICT (id) DO UPDATE SET a = excluded.a",
        target_columns=("id", "a")),
    "first_row": Engine(
        "first_row", "first_row engine", _WIDE, {"table.merge-engine": "first_row"}, _WIDE_DUCK,
        "INSERT INTO t SELECT * FROM batch ON CONFLICT (id) DO NOTHING"),
    "versioned": Engine(
        "versioned", "versioned engine (ver BIGINT)", {**_WIDE, "ver": "BIGINT"},
        {"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "ver"},
        {**_WIDE_DUCK, "ver": "BIGINT"},
        "INSERT INTO t SELECT * FROM batch ON CONFLICT (id) DO UPDATE SET a = excluded.a, b = excluded.b, "
        "s = excluded.s, ver = excluded.ver WHERE excluded.ver >= t.ver"),
    "aggregation": Engine(
        "aggregation", "aggregation engine (sum, max)", {"id": "BIGINT", "total": "BIGINT", "mx": "BIGINT"},
        {"table.merge-engine": "aggregation", "fields.total.agg": "sum", "fields.mx.agg": "max"},
        {"id": "BIGINT", "total": "BIGINT", "mx": "BIGINT"},
        "INSERT INTO t SELECT * FROM batch ON CONFLICT (id) DO UPDATE SET total = t.total + excluded.total, "
        "mx = greatest(t.mx, excluded.mx)",
        targets=(Target("ratio", ">=", 5, "vs DuckDB >= 5x"),)),
}


def make_rows(engine: Engine, index: np.ndarray, rng: np.random.Generator, *, preload: bool = False) -> pl.DataFrame:
    """Rows for row numbers `index` (keys are a bijection of them); values are random."""
    n = len(index)
    cols: dict[str, Any] = {"id": scatter_keys(index)}
    if engine.key == "aggregation":
        cols["total"] = rng.integers(0, 100, n)
        cols["mx"] = rng.integers(0, 1_000_000, n)
    else:
        cols["a"] = rng.integers(0, 1 << 40, n)
        cols["b"] = rng.random(n)
        cols["s"] = pl.Series(rng.integers(0, 1_000_000, n)).cast(pl.String)
        if engine.key == "versioned":
            cols["ver"] = rng.integers(0, 1000 if preload else 2000, n)
    frame = pl.DataFrame(cols)
    return frame if preload else frame.select(engine.written)


class Stream:
    """The batch stream of one table: about half updates of existing keys, half new keys, shuffled."""

    def __init__(self, engine: Engine, existing: int, batch_rows: int, seed: int) -> None:
        self.engine = engine
        self.existing = existing
        self.batch_rows = batch_rows
        self.rng = np.random.default_rng(seed)

    def batches(self, count: int) -> list[pl.DataFrame]:
        """`count` batches; each key at most once per batch (DuckDB refuses a key twice in one INSERT)."""
        out = []
        for _ in range(count):
            updates = min(self.batch_rows // 2, self.existing)
            inserts = self.batch_rows - updates
            old = self.rng.choice(self.existing, size=updates, replace=False) if updates else np.empty(0, np.int64)
            new = np.arange(self.existing, self.existing + inserts)
            self.existing += inserts
            index = np.concatenate([old, new])
            self.rng.shuffle(index)
            out.append(make_rows(self.engine, index, self.rng))
        return out


# ---------------------------------------------------------------- systems
class Ours:
    """A fluss-lake primary-key table in a temporary store."""

    def __init__(self, conn: fl.Connection, name: str, engine: Engine, buckets: int) -> None:
        self.table_name = f"bench.{name}"
        conn.create_table(self.table_name, schema=engine.schema, primary_key=["id"], bucket_num=buckets,
                          options=engine.options)
        self.table = conn.get_table(self.table_name)
        self.engine = engine
        self.writer = self.table.new_upsert(target_columns=engine.target_columns)

    def preload(self, frames: list[pl.DataFrame]) -> float:
        start = time.perf_counter()
        for frame in frames:
            self.table.upsert(frame)
        compactor.drain()
        return time.perf_counter() - start

    def run(self, batches: list[pl.DataFrame]) -> float:
        """Seconds to write the batches, including the background compaction they started (waited for, so
        none of our work spills into a peer's timed run)."""
        start = time.perf_counter()
        for batch in batches:
            self.writer.upsert(batch)
            self.writer.flush()
        compactor.drain()
        return time.perf_counter() - start

    def segments(self) -> list[int]:
        return [s.rows for b in range(self.table.bucket_num) for s in self.table._tablets().kv_tablet(b).kv.segments]


class Duck:
    """DuckDB in-memory table with a PRIMARY KEY, upserted with INSERT ... ON CONFLICT."""

    def __init__(self, engine: Engine) -> None:
        self.con = duckdb.connect(":memory:")
        cols = ", ".join(f"{c} {t}{' PRIMARY KEY' if c == 'id' else ''}" for c, t in engine.duck_types.items())
        self.con.execute(f"CREATE TABLE t ({cols})")
        self.engine = engine

    def preload(self, frames: list[pl.DataFrame]) -> float:
        start = time.perf_counter()
        for frame in frames:
            arrow = frame.to_arrow()
            self.con.register("preload", arrow)
            self.con.execute("INSERT INTO t SELECT * FROM preload")
            self.con.unregister("preload")
        return time.perf_counter() - start

    def run(self, batches: list[Any]) -> float:
        sql = self.engine.duck_upsert
        start = time.perf_counter()
        for arrow in batches:
            self.con.register("batch", arrow)
            self.con.execute(sql)
            self.con.unregister("batch")
        return time.perf_counter() - start

    def count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM t").fetchone()[0])

    def close(self) -> None:
        self.con.close()


class PolarsFrame:
    """An in-memory Polars DataFrame upserted naively: (left join for the old row,) anti-join + concat."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state: pl.DataFrame | None = None
        self.step: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame] = getattr(self, f"_{engine.key}")

    def preload(self, frames: list[pl.DataFrame]) -> float:
        start = time.perf_counter()
        self.state = pl.concat(frames)
        return time.perf_counter() - start

    def run(self, batches: list[pl.DataFrame]) -> float:
        state = self.state
        assert state is not None
        start = time.perf_counter()
        for batch in batches:
            state = self.step(state, batch)
        elapsed = time.perf_counter() - start
        self.state = state
        return elapsed

    @staticmethod
    def _default(state: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
        return pl.concat([state.join(batch.select("id"), on="id", how="anti"), batch])

    @staticmethod
    def _partial(state: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
        rest = [c for c in state.columns if c not in batch.columns]
        new = batch.join(state.select("id", *rest), on="id", how="left").select(state.columns)
        return pl.concat([state.join(batch.select("id"), on="id", how="anti"), new])

    @staticmethod
    def _first_row(state: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
        return pl.concat([state, batch.join(state.select("id"), on="id", how="anti")])

    @staticmethod
    def _versioned(state: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
        joined = batch.join(state.select("id", "ver"), on="id", how="left", suffix="_old")
        winners = joined.filter(pl.col("ver_old").is_null() | (pl.col("ver") >= pl.col("ver_old"))).drop("ver_old")
        return pl.concat([state.join(winners.select("id"), on="id", how="anti"), winners])

    @staticmethod
    def _aggregation(state: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
        joined = batch.join(state, on="id", how="left", suffix="_old")
        new = joined.select("id", (pl.col("total") + pl.col("total_old").fill_null(0)).alias("total"),
                            pl.max_horizontal("mx", "mx_old").alias("mx"))
        return pl.concat([state.join(batch.select("id"), on="id", how="anti"), new])


# ---------------------------------------------------------------- cases
def _preload_frames(engine: Engine, rows: int, chunk: int, seed: int) -> list[pl.DataFrame]:
    rng = np.random.default_rng(seed)
    return [make_rows(engine, np.arange(s, min(s + chunk, rows)), rng, preload=True) for s in range(0, rows, chunk)]


def _rate(rows: int, seconds: list[float]) -> list[float]:
    return [rows / s for s in seconds]


def run_engine(engine: Engine, args: argparse.Namespace, conn: fl.Connection, rep: Reporter) -> None:
    """One merge engine: preload all three systems, then interleave the batch stream."""
    n, batch_rows, window = args.rows, args.batch, args.batches
    log(f"[{engine.key}] preloading {n:,} rows ...")
    frames = _preload_frames(engine, n, args.preload_batch, seed=1)
    ours, duck, polars = Ours(conn, engine.key, engine, args.buckets), Duck(engine), PolarsFrame(engine)
    t_ours = ours.preload(frames)
    t_duck = duck.preload(frames)
    polars.preload(frames)
    del frames
    log(f"[{engine.key}] preload: ours {t_ours:.1f} s ({fmt_num(n / t_ours)} rows/s), duckdb {t_duck:.1f} s; "
        f"our segments {ours.segments()}")
    stream = Stream(engine, n, batch_rows, seed=2)
    warm = stream.batches(1)  # untimed warm-up: first-call costs (imports, caches) of every system
    ours.run(warm), duck.run([b.to_arrow() for b in warm]), polars.run(warm)
    current: dict[str, Any] = {}

    def before(_r: int) -> None:
        current["pl"] = stream.batches(window)
        current["arrow"] = [b.to_arrow() for b in current["pl"]]

    results = interleave({
        "ours": lambda r: ours.run(current["pl"]),
        "duckdb": lambda r: duck.run(current["arrow"]),
        "polars": lambda r: polars.run(current["pl"]),
    }, args.repeats, before=before)
    rows_per_run = window * batch_rows
    rates = {k: _rate(rows_per_run, v) for k, v in results.items()}
    amortized = rows_per_run * args.repeats / sum(results["ours"])
    log(f"[{engine.key}] per-repeat rows/s: " + "; ".join(f"{k} {[fmt_num(x) for x in v]}" for k, v in rates.items())
        + f"; our segments {ours.segments()}")
    case = f"{engine.label} {batch_rows // 1000}k-batches into {fmt_num(n)} rows"
    note = f"ours amortized over all repeats: {fmt_num(amortized)} rows/s"
    rep.add(Result(BENCH, case, "rows_per_s", median(rates["ours"]), "duckdb ON CONFLICT", median(rates["duckdb"]),
                   True, n, args.repeats, targets=engine.targets,
                   note=note))
    rep.add(Result(BENCH, case, "rows_per_s", median(rates["ours"]), "polars anti-join+concat",
                   median(rates["polars"]), True, n, args.repeats))
    duck.close()
    del polars.state
    if engine.key == "default" and not args.skip_cost:
        run_cost_case(engine, args, conn, ours, stream.existing, rep)
    conn.drop_table(ours.table_name)
    gc.collect()


def run_cost_case(engine: Engine, args: argparse.Namespace, conn: fl.Connection, big: Ours, big_existing: int,
                  rep: Reporter) -> None:
    """The same stream shape into a small table and into the big one: cost should follow the batch."""
    small_rows = min(100_000, max(args.rows // 10, args.batch))
    log(f"[cost] preloading small table ({small_rows:,} rows) ...")
    small = Ours(conn, "small", engine, args.buckets)
    small.preload(_preload_frames(engine, small_rows, args.preload_batch, seed=3))
    streams = {"big": Stream(engine, big_existing, args.batch, seed=4),
               "small": Stream(engine, small_rows, args.batch, seed=5)}
    small.run(streams["small"].batches(1))  # untimed warm-up
    window = args.cost_batches
    current: dict[str, list[pl.DataFrame]] = {}

    def before(_r: int) -> None:
        for name, stream in streams.items():
            current[name] = stream.batches(window)

    results = interleave({"big": lambda r: big.run(current["big"]), "small": lambda r: small.run(current["small"])},
                         args.repeats, before=before)
    rows_per_run = window * args.batch
    rates = {k: _rate(rows_per_run, v) for k, v in results.items()}
    amort = {k: rows_per_run * args.repeats / sum(v) for k, v in results.items()}
    log(f"[cost] big per-repeat {[fmt_num(x) for x in rates['big']]}, small {[fmt_num(x) for x in rates['small']]}; "
        f"segments big {big.segments()} small {small.segments()}")
    rep.add(Result(BENCH, f"cost follows the batch: default-engine {args.batch // 1000}k-batches into "
                          f"{fmt_num(args.rows)} rows vs {fmt_num(small_rows)} rows", "rows_per_s",
                   median(rates["big"]), f"same stream into {fmt_num(small_rows)}-row table", median(rates["small"]),
                   True, args.rows, args.repeats, targets=(Target("ratio", ">=", 0.7, "big/small >= 0.7"),),
                   note=f"amortized big/small: {fmt_num(amort['big'])}/{fmt_num(amort['small'])} = "
                        f"{amort['big'] / amort['small']:.2f}"))
    conn.drop_table(small.table_name)


def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--engines", default=",".join(ENGINES), help=f"comma list of {', '.join(ENGINES)}")
        p.add_argument("--batch", type=int, default=10_000, help="rows per streamed upsert batch")
        p.add_argument("--batches", type=int, default=None, help="batches per timed run (default 30; 5 quick)")
        p.add_argument("--cost-batches", type=int, default=None, help="batches per run of the cost case")
        p.add_argument("--preload-batch", type=int, default=1_000_000, help="rows per preload upsert call")
        p.add_argument("--buckets", type=int, default=1, help="bucket.num of the tables")
        p.add_argument("--skip-cost", action="store_true", help="skip the cost-follows-the-batch case")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__, extra=extra)
    if args.batches is None:
        args.batches = 5 if args.quick else 30
    if args.cost_batches is None:
        args.cost_batches = 10 if args.quick else 40
    engines = [ENGINES[e.strip()] for e in args.engines.split(",") if e.strip()]
    rep = Reporter(BENCH)
    log(f"bench.upsert: {args.rows:,} rows, {args.batch:,}-row batches x {args.batches} per run, "
        f"{args.repeats} repeats, {args.buckets} bucket(s)")
    with temp_store_dir(args.tmpdir) as root:
        conn = fl.connect(f"{root}/store", local_dir=f"{root}/local")
        conn.create_database("bench")
        for engine in engines:
            run_engine(engine, args, conn, rep)
    rep.finish()


if __name__ == "__main__":
    main()
