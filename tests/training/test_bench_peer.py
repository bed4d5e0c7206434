"""The benchmark's peers compute the same training set as ours (DuckDB ASOF JOIN, Polars join_asof), and all
equal the brute-force oracle, on a small case of the benchmark's own data."""

from __future__ import annotations

import polars as pl

from bench import training as bench
from tests.training.conftest import EPOCH, oracle_value


def _us(col: pl.Series) -> list[int]:
    """Microseconds since the oracle's EPOCH."""
    return (col - EPOCH).dt.total_microseconds().to_list()


def test_duckdb_and_polars_peers_equal_ours_and_the_oracle():
    histories = {"a": bench.make_history(3_000, 40, seed=7), "b": bench.make_history(3_000, 40, seed=8)}
    entities = bench.make_entities(400, 40, seed=9)
    ours = bench.ours(entities, histories)
    con = bench.duck_connection(entities, histories)
    duck = bench.duck(con, list(histories))
    plain = bench.polars_asof(entities, histories)
    assert bench.same_result(ours, duck) and bench.same_result(ours, plain)
    assert not bench.same_result(ours, ours.with_columns(pl.col("a__x").shift(1)))  # the check can fail
    filled = (ours["a__x"].is_not_null().sum(), ours["a__x"].is_null().sum())
    assert min(filled) > 20  # both values and nulls (TTL, deletes, before the first insert) occur
    keys, times = entities["entity_id"].to_list(), _us(entities["prediction_ts"])
    for name, h in histories.items():
        rows = [dict(r, id=r["entity_id"], v=r["x"], ev=None) for r in h.with_columns(
            pl.Series("__timestamp", _us(h["__timestamp"]))).to_dicts()]
        ttl = int(bench.TTLS[name].total_seconds() * 1_000_000)
        assert ours[f"{name}__x"].to_list() == [oracle_value(rows, k, t, ttl=ttl) for k, t in zip(keys, times)]
