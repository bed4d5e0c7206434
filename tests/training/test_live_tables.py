"""End to end on the embedded default: real primary-key tables written at controlled commit times; training sets
and state as of a time must equal what the live store served at each moment (snapshots taken while writing)."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.training import FeatureView, history_of, state_as_of, training_set

T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC in ms


def ms(t: int) -> datetime:
    return datetime.fromtimestamp((T0 + t) / 1000, tz=UTC)


@pytest.fixture
def shop(tmp_store):
    """Two feature tables written over time; returns (conn, customer, spend, snapshots, clock).

    snapshots: list of (clock ms, end offsets, customer state, spend state) taken after every write.
    """
    clock = [T0]
    conn = fl.connect(tmp_store, clock=lambda: clock[0])
    conn.create_database("shop")
    conn.create_table("shop.customer", schema={"id": "INT", "tier": "STRING", "score": "DOUBLE"},
                      primary_key=["id"], bucket_num=4)
    conn.create_table("shop.spend", schema={"id": "BIGINT", "total": "BIGINT"}, primary_key=["id"], bucket_num=2,
                      options={"table.merge-engine": "aggregation", "fields.total.agg": "sum",
                               "table.delete.behavior": "allow"})
    customer, spend = conn.get_table("shop.customer"), conn.get_table("shop.spend")
    steps = [
        (0, customer.upsert, [{"id": i, "tier": "bronze", "score": float(i)} for i in range(6)], {}),
        (0, spend.upsert, [{"id": i, "total": 10} for i in range(4)], {}),  # same commit time, other table
        (5, customer.upsert, [{"id": 1, "tier": "gold"}, {"id": 1, "tier": "silver"}], {"target_columns": ["id", "tier"]}),
        (5, spend.upsert, [{"id": 1, "total": 5}, {"id": 9, "total": 1}], {}),
        (5, customer.delete, [{"id": 2}], {}),  # equal timestamps: three batches at t=5
        (9, customer.upsert, [{"id": 2, "tier": "back", "score": 0.5}, {"id": 3, "score": None, "tier": "x"}], {}),
        (12, spend.delete, [{"id": 0}], {}),
        (12, customer.delete, [{"id": 5}, {"id": 4}], {}),
        (20, spend.upsert, [{"id": 0, "total": 2}], {}),
    ]
    snapshots = []
    for t, op, rows, kw in steps:
        clock[0] = T0 + t
        op(rows, **kw)
        ends = {"customer": customer.end_offsets(), "spend": spend.end_offsets()}
        snapshots.append((t, ends, customer.to_polars().sort("id"), spend.to_polars().sort("id")))
    return conn, customer, spend, snapshots, clock


def served_at(snapshots, t: int, which: int) -> pl.DataFrame | None:
    """The state the live store served at time t: after the last write committed at or before t."""
    done = [s for s in snapshots if s[0] <= t]
    return done[-1][which] if done else None


def test_training_set_equals_what_the_live_store_served(shop):
    _, customer, spend, snapshots, _ = shop
    times = sorted({t + d for t, *_ in snapshots for d in (-1, 0, 1)})
    entity = pl.DataFrame([(i, ms(t)) for t in times for i in (0, 1, 2, 3, 4, 5, 9, 1)],
                          schema={"customer_id": pl.Int64, "prediction_ts": pl.Datetime("ms", "UTC")}, orient="row")
    views = [FeatureView.from_table(customer, entity_keys=["customer_id"], prefix="c__"),
             FeatureView.from_table(spend, entity_keys=["customer_id"], features=["total"], prefix="s__")]
    out = training_set(entity, views)
    assert out.height == entity.height and out["customer_id"].equals(entity["customer_id"])
    checked = 0
    for row in out.iter_rows(named=True):
        t = int(row["prediction_ts"].timestamp() * 1000) - T0
        for which, cols, prefix in ((2, ["tier", "score"], "c__"), (3, ["total"], "s__")):
            state = served_at(snapshots, t, which)
            match = None if state is None else state.filter(pl.col("id") == row["customer_id"])
            want = {c: (match[c][0] if match is not None and match.height else None) for c in cols}
            assert {c: row[prefix + c] for c in cols} == want, (t, row)
            checked += 1
    assert checked == 2 * entity.height


def test_state_as_of_timestamp_and_offsets_equal_the_snapshots(shop):
    _, customer, spend, snapshots, _ = shop
    for t, ends, cust_state, spend_state in snapshots:
        at_t = served_at(snapshots, t, 2)
        assert state_as_of(customer, timestamp=ms(t)).collect().equals(at_t)
        assert state_as_of(customer, offsets=ends["customer"]).collect().equals(cust_state)
        assert state_as_of(spend, offsets=ends["spend"]).collect().equals(spend_state)
    assert state_as_of(customer, timestamp=ms(-1)).collect().height == 0
    assert state_as_of(customer).collect().equals(customer.to_polars().sort("id"))


def test_lake_history_plus_live_tail_equals_the_whole_history(shop):
    _, customer, _, _, _ = shop
    full = history_of(customer).collect()
    cut = {0: 1, 1: 3, 2: 0, 3: 2}  # what the lake holds per bucket (bucket 2: nothing yet)
    lake = full.filter(pl.col("__offset") < pl.col("__bucket").replace_strict(cut, return_dtype=pl.Int64))
    lake = lake.with_columns(pl.lit("extra").alias("lake_only"))  # columns the live table does not have are dropped
    combined = history_of(customer, lake=lake.lazy()).collect()
    key = ["__bucket", "__offset"]
    assert combined.sort(key).equals(full.sort(key))
    assert history_of(customer, lake=full).collect().sort(key).equals(full.sort(key))


def test_expired_log_without_lake_is_an_incomplete_history(tmp_store):
    clock = [T0]
    conn = fl.connect(tmp_store, clock=lambda: clock[0])
    conn.create_database("d")
    conn.create_table("d.t", schema={"k": "INT", "v": "INT"}, primary_key=["k"], options={"table.log.ttl": "1 h"})
    t = conn.get_table("d.t")
    t.upsert([{"k": 1, "v": 1}])
    lake = history_of(t).collect()  # what tiering took before the log expired
    clock[0] += 2 * 3_600_000
    t.upsert([{"k": 1, "v": 2}])
    t.expire_log()
    assert t.earliest_offsets()[0] > 0
    with pytest.raises(fl.IncompleteHistoryError, match="lake="):
        history_of(t)
    assert state_as_of(t, lake=lake).collect().to_dicts() == [{"k": 1, "v": 2}]
    assert state_as_of(t, lake=lake, timestamp=ms(0)).collect().to_dicts() == [{"k": 1, "v": 1}]
    with pytest.raises(fl.IncompleteHistoryError, match="expired before it was tiered"):
        history_of(t, lake=lake.filter(pl.col("__offset") < 0))


def test_event_time_mode_on_a_live_table(tmp_store):
    clock = [T0]
    conn = fl.connect(tmp_store, clock=lambda: clock[0])
    conn.create_database("d")
    conn.create_table("d.rates", schema={"k": "INT", "rate": "DOUBLE", "as_of": "TIMESTAMP_LTZ(3)"}, primary_key=["k"])
    rates = conn.get_table("d.rates")
    rates.upsert([{"k": 1, "rate": 1.0, "as_of": ms(0)}])
    clock[0] = T0 + 100
    rates.upsert([{"k": 1, "rate": 2.0, "as_of": ms(50)}])  # observed at 50, committed at 100
    e = pl.DataFrame({"k": [1, 1, 1], "prediction_ts": [ms(60), ms(99), ms(100)]})
    late_ok = FeatureView.from_table(rates, event_time="as_of", features=["rate"])
    committed = FeatureView.from_table(rates, event_time="as_of", committed_only=True, features=["rate"])
    assert training_set(e, late_ok)["rate"].to_list() == [2.0, 2.0, 2.0]
    assert training_set(e, committed)["rate"].to_list() == [1.0, 1.0, 2.0]
    assert training_set(e, FeatureView.from_table(rates, features=["rate"]))["rate"].to_list() == [1.0, 1.0, 2.0]


def test_an_empty_table_gives_nulls_and_an_empty_state(tmp_store):
    conn = fl.connect(tmp_store)
    conn.create_database("d")
    conn.create_table("d.t", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], bucket_num=3)
    t = conn.get_table("d.t")
    out = training_set(pl.DataFrame({"k": [1, 2], "prediction_ts": [ms(0), ms(1)]}), FeatureView.from_table(t))
    assert out["v"].to_list() == [None, None]
    assert state_as_of(t).collect().shape == (0, 2)


def test_reads_change_nothing_and_bad_sources_are_refused(shop):
    conn, customer, spend, _, _ = shop
    before = {t.path: (t.end_offsets(), t.to_polars().sort("id")) for t in (customer, spend)}
    with pytest.raises(fl.SchemaMismatchError):
        training_set(pl.DataFrame({"id": [1]}), FeatureView.from_table(customer))
    with pytest.raises(fl.InvalidConfigError, match="primary_key"):
        state_as_of(history_of(customer))
    with pytest.raises(fl.InvalidConfigError, match="lake= goes with a live Table"):
        state_as_of(history_of(customer), primary_key=["id"], lake=history_of(customer))
    with pytest.raises(fl.InvalidConfigError, match="non-negative"):
        state_as_of(customer, offsets={0: -1})
    with pytest.raises(fl.SchemaMismatchError, match="ISO"):
        state_as_of(customer, timestamp="yesterday")
    with pytest.raises(fl.SchemaMismatchError, match="__offset"):
        history_of(customer, lake=pl.DataFrame({"id": [1]}))
    conn.create_table("shop.events", schema={"v": "INT"})
    with pytest.raises(fl.UnsupportedOperationError, match="log table"):
        history_of(conn.get_table("shop.events"))
    for t in (customer, spend):
        assert t.end_offsets() == before[t.path][0] and t.to_polars().sort("id").equals(before[t.path][1])
