"""Point-in-time training sets: entity rows/s against DuckDB ``ASOF JOIN`` and a plain Polars ``join_asof``.

Two feature tables' histories (``--rows`` history rows each, default 1M: ``--entities`` keys, default 10k,
changing over 30 days: inserts, ``-U``/``+U`` update pairs, deletes and re-inserts, 8 buckets with dense
offsets) and ``--entity-rows`` entity rows (default 100k: random key, random prediction time over the 30 days,
a label). Table ``a`` has a TTL of 1 day, table ``b`` of 7 days. Every system computes the same thing, in
commit-time mode: for each entity row and table, the latest ``+I``/``+U``/``-D`` at or before the prediction
time; null if it is a delete or older than the TTL; entity rows kept in input order.

- ours: ``fluss_lake.training.training_set`` on the history DataFrames (everything from the raw history:
  filtering ``-U``, sorting, the as-of joins, TTL and delete masking, restoring the input order);
- DuckDB: the same from the registered Arrow histories with two ``ASOF LEFT JOIN``s and ``CASE`` masks,
  ``ORDER BY`` the entity row number, fetched as Arrow;
- Polars ``join_asof`` used directly: filter, sort, two ``join_asof`` calls, ``when/then`` masks, sort back.

The histories come in log order within each bucket (as the live log and the lake's history table deliver
them), which lets ours skip sorting them; a second case shuffles the history rows (ours then sorts). Before
timing, all three results are checked equal. Run
``python -m bench.training [--quick] [--rows N] [--entity-rows N] [--entities N] [--repeats K]``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import duckdb
import numpy as np
import polars as pl

from bench._common import (
    Reporter,
    Result,
    Target,
    bench_args,
    fmt_num,
    interleave,
    log,
    median,
    timed,
)
from fluss_lake.training import FeatureView, training_set

BENCH = "training"
FULL_ROWS = 1_000_000
QUICK_ROWS = 100_000
START = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = 30
TTLS = {"a": timedelta(days=1), "b": timedelta(days=7)}
_US_PER_DAY = 86_400_000_000


# ---------------------------------------------------------------- data
def make_history(rows: int, entities: int, seed: int, *, buckets: int = 8, p_delete: float = 0.05) -> pl.DataFrame:
    """About `rows` history rows for `entities` keys over 30 days (vectorized; times unique per key)."""
    rng = np.random.default_rng(seed)
    events = max(int(rows / 1.89), entities)  # an update is two rows (-U, +U); about 11% are inserts/deletes
    key = rng.integers(0, entities, events)
    t = rng.integers(0, DAYS * _US_PER_DAY, events)
    order = np.lexsort((t, key))
    key, t = key[order], t[order]
    first = np.ones(events, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    start_idx = np.flatnonzero(first)
    rank = np.arange(events) - np.repeat(start_idx, np.diff(np.append(start_idx, events)))
    t = t + rank  # strictly increasing within a key: no equal timestamps, so every peer breaks no ties
    raw_del = rng.random(events) < p_delete
    prev_del = np.zeros(events, dtype=bool)
    prev_del[1:] = raw_del[:-1]
    delete = raw_del & ~prev_del & ~first
    prev_delete = np.zeros(events, dtype=bool)
    prev_delete[1:] = delete[:-1]
    insert = ~delete & (first | prev_delete)
    update = ~delete & ~insert
    x = rng.random(events)
    n = rng.integers(0, 1000, events)
    prev_x = np.roll(x, 1)
    prev_n = np.roll(n, 1)
    # -U then +U for updates, one row otherwise; -D carries the deleted (previous) value
    reps = np.where(update, 2, 1)
    idx = np.repeat(np.arange(events), reps)
    is_before = np.zeros(len(idx), dtype=bool)
    pair_start = np.cumsum(reps) - reps
    is_before[pair_start[update]] = True
    ev_delete, ev_insert = delete[idx], insert[idx]
    ct = np.where(is_before, "-U", np.where(ev_delete, "-D", np.where(ev_insert, "+I", "+U")))
    old = is_before | ev_delete
    frame = pl.DataFrame({
        "entity_id": key[idx].astype(np.int64),
        "x": np.where(old, prev_x[idx], x[idx]),
        "n": np.where(old, prev_n[idx], n[idx]).astype(np.int32),
        "__change_type": ct,
        "__bucket": (key[idx] % buckets).astype(np.int32),
        "__timestamp": t[idx],
    })
    frame = frame.with_columns(
        pl.int_range(pl.len()).over("__bucket", order_by="__timestamp").cast(pl.Int64).alias("__offset"),
        (pl.lit(START) + pl.duration(microseconds=pl.col("__timestamp"))).cast(pl.Datetime("us", "UTC"))
        .alias("__timestamp"))
    # in log order per bucket, as the live log and the lake's history table deliver it
    return frame.select("entity_id", "x", "n", "__change_type", "__bucket", "__offset", "__timestamp").sort(
        "__bucket", "__offset")


def make_entities(rows: int, entities: int, seed: int) -> pl.DataFrame:
    """Entity rows: random key (a few unknown), random prediction time over the 30 days, a label."""
    rng = np.random.default_rng(seed)
    us = rng.integers(0, DAYS * _US_PER_DAY, rows)
    return pl.DataFrame({"entity_id": rng.integers(0, int(entities * 1.01), rows).astype(np.int64),
                         "label": rng.integers(0, 2, rows).astype(np.int8)}).with_columns(
        (pl.lit(START) + pl.duration(microseconds=pl.Series(us))).cast(pl.Datetime("us", "UTC"))
        .alias("prediction_ts"))


# ---------------------------------------------------------------- systems
def ours(entities: pl.DataFrame, histories: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """fluss_lake.training.training_set."""
    views = [FeatureView(h, keys=["entity_id"], features=["x", "n"], ttl=TTLS[name], prefix=f"{name}__")
             for name, h in histories.items()]
    out = training_set(entities, views)
    assert isinstance(out, pl.DataFrame)
    return out


def duck_sql(names: list[str]) -> str:
    """The DuckDB statement: one ASOF LEFT JOIN per table over the -U-free history, CASE masks for TTL/deletes."""
    ctes = ", ".join(f"h_{n} AS (SELECT entity_id, __timestamp AS ts, __change_type AS ct, x, n FROM hist_{n} "
                     f"WHERE __change_type <> '-U')" for n in names)
    cols = ", ".join(
        f"CASE WHEN h_{n}.ct <> '-D' AND h_{n}.ts >= e.prediction_ts - INTERVAL {TTLS[n].days} DAY "
        f"THEN h_{n}.{c} END AS {n}__{c}" for n in names for c in ("x", "n"))
    joins = " ".join(f"ASOF LEFT JOIN h_{n} ON e.entity_id = h_{n}.entity_id AND e.prediction_ts >= h_{n}.ts"
                     for n in names)
    return (f"WITH {ctes} SELECT e.entity_id, e.label, e.prediction_ts, {cols} FROM ents e {joins} "
            "ORDER BY e.__row")


def duck(con: duckdb.DuckDBPyConnection, names: list[str]) -> pl.DataFrame:
    """DuckDB ASOF JOIN over the registered Arrow tables; result as a polars frame (via Arrow)."""
    return pl.from_arrow(con.sql(duck_sql(names)).to_arrow_table())  # type: ignore[return-value]


def duck_connection(entities: pl.DataFrame, histories: dict[str, pl.DataFrame]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with the entity rows (plus a row number) and the histories registered as Arrow."""
    con = duckdb.connect(":memory:")
    con.register("ents", entities.with_row_index("__row").to_arrow())
    for name, h in histories.items():
        con.register(f"hist_{name}", h.to_arrow())
    return con


def polars_asof(entities: pl.DataFrame, histories: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Polars join_asof used directly for the same job."""
    frame = entities.with_row_index("__row").sort("prediction_ts")
    for name, h in histories.items():
        right = (h.filter(pl.col("__change_type") != "-U")
                 .select("entity_id", pl.col("__timestamp").alias("__t"), pl.col("__change_type").alias("__ct"),
                         pl.col("x").alias(f"{name}__x"), pl.col("n").alias(f"{name}__n"))
                 .sort("__t"))
        frame = frame.join_asof(right, left_on="prediction_ts", right_on="__t", by="entity_id",
                                check_sortedness=False)
        ok = (pl.col("__ct") != "-D") & (pl.col("__t") >= pl.col("prediction_ts") - pl.lit(TTLS[name]))
        frame = frame.with_columns(pl.when(ok).then(pl.col(c)).alias(c) for c in (f"{name}__x", f"{name}__n"))
        frame = frame.drop("__t", "__ct")
    return frame.sort("__row").drop("__row")


def same_result(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Equal rows in the same order on the shared columns (types normalized)."""
    cols = [c for c in a.columns if c in b.columns]
    norm = {c: a.schema[c] for c in cols}
    return a.select(cols).equals(b.select(cols).cast(norm))  # type: ignore[arg-type]


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--entity-rows", type=int, default=None, help="entity rows (default 100k; 10k quick)")
        p.add_argument("--entities", type=int, default=None, help="distinct keys per table (default 10k; 2k quick)")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__,
                      extra=extra)
    if args.entity_rows is None:
        args.entity_rows = 10_000 if args.quick else 100_000
    if args.entities is None:
        args.entities = 2_000 if args.quick else 10_000
    rep = Reporter(BENCH)
    log(f"bench.training: {args.entity_rows:,} entity rows, 2 tables x ~{args.rows:,} history rows "
        f"({args.entities:,} keys, {DAYS} days, TTL 1 d / 7 d), {args.repeats} repeats")
    histories = {"a": make_history(args.rows, args.entities, seed=1), "b": make_history(args.rows, args.entities, seed=2)}
    entities = make_entities(args.entity_rows, args.entities, seed=3)
    names = list(histories)
    con = duck_connection(entities, histories)
    mine, theirs, plain = ours(entities, histories), duck(con, names), polars_asof(entities, histories)
    if not (same_result(mine, theirs) and same_result(mine, plain)):
        raise SystemExit("bench.training: the systems disagree; not timing")
    filled = mine.select(pl.col("a__x").is_not_null().mean(), pl.col("b__x").is_not_null().mean()).row(0)
    log(f"results agree; rows with a value: a {filled[0]:.0%}, b {filled[1]:.0%}; history rows "
        f"{histories['a'].height:,} + {histories['b'].height:,}")
    n = args.entity_rows
    for order, hist in (("in log order", histories),
                        ("rows shuffled", {k: h.sample(fraction=1.0, shuffle=True, seed=5) for k, h in histories.items()})):
        con_case = duck_connection(entities, hist)
        results = interleave({
            "ours": lambda r, hist=hist: n / timed(lambda: ours(entities, hist)),
            "duckdb": lambda r, con_case=con_case: n / timed(lambda: duck(con_case, names)),
            "polars": lambda r, hist=hist: n / timed(lambda: polars_asof(entities, hist)),
        }, args.repeats)
        case = (f"{fmt_num(n)} entity rows x 2 feature tables of {fmt_num(histories['a'].height)} history rows "
                f"({fmt_num(args.entities)} keys, TTL 1d/7d), history {order}")
        rep.add(Result(BENCH, case, "entity_rows_per_s", median(results["ours"]), "duckdb ASOF JOIN",
                       median(results["duckdb"]), True, n, args.repeats,
                       targets=(Target("ratio", ">=", 2, "vs DuckDB >= 2x"),) if order == "in log order" else ()))
        rep.add(Result(BENCH, case, "entity_rows_per_s", median(results["ours"]), "polars join_asof (direct)",
                       median(results["polars"]), True, n, args.repeats))
        con_case.close()
    con.close()
    rep.finish()


if __name__ == "__main__":
    main()
