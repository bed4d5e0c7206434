"""Training sets: each documented rule on a small hand-made history, the leakage guarantee, bad input, DuckDB."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.training import FeatureView, register_training_set, training_set
from tests.training.conftest import at


def hist(rows: list[tuple], *, extra: dict | None = None) -> pl.DataFrame:
    """History rows (id, v, change, bucket, offset, commit_us[, ev_us])."""
    data = {"id": [r[0] for r in rows], "v": [r[1] for r in rows], "__change_type": [r[2] for r in rows],
            "__bucket": [r[3] for r in rows], "__offset": [r[4] for r in rows],
            "__timestamp": [at(r[5]) for r in rows], "ev": [at(r[6]) if len(r) > 6 else None for r in rows]}
    return pl.DataFrame(data, schema={"id": pl.Int64, "v": pl.Int64, "__change_type": pl.String,
                                      "__bucket": pl.Int32, "__offset": pl.Int64,
                                      "__timestamp": pl.Datetime("us", "UTC"), "ev": pl.Datetime("us", "UTC")})


def ents(pairs: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame({"id": [k for k, _ in pairs], "prediction_ts": [at(t) for _, t in pairs]},
                        schema={"id": pl.Int64, "prediction_ts": pl.Datetime("us", "UTC")})


def values(entities: pl.DataFrame, view: FeatureView, column: str = "v") -> list:
    return training_set(entities, view)[column].to_list()


# ---------------------------------------------------------------- commit time
def test_leakage_value_committed_one_microsecond_later_is_never_returned():
    h = hist([(1, 10, "+I", 0, 0, 100), (1, 10, "-U", 0, 1, 1_000_001), (1, 99, "+U", 0, 2, 1_000_001)])
    view = FeatureView(h, keys=["id"], features=["v"])
    assert values(ents([(1, 1_000_000), (1, 1_000_001), (1, 99)]), view) == [10, 99, None]


def test_leakage_nanosecond_prediction_times_are_not_rounded_up():
    h = hist([(1, 10, "+I", 0, 0, 5)])
    entities = pl.DataFrame({"id": [1, 1], "prediction_ts": [at(4), at(5)]}).with_columns(
        pl.col("prediction_ts").cast(pl.Datetime("ns", "UTC")) + pl.Series([999, 0]).cast(pl.Duration("ns")))
    assert values(entities, FeatureView(h, keys=["id"])) == [None, 10]  # 4.999 us sees nothing; 5.000 us sees it


def test_equal_timestamps_order_by_offset_and_before_images_are_ignored():
    # one write batch: insert then update of the same key at the same commit time; -U carries a stale value
    h = hist([(1, 1, "+I", 0, 0, 5), (1, 77, "-U", 0, 1, 5), (1, 2, "+U", 0, 2, 5),
              (2, 5, "+I", 1, 0, 5), (2, 5, "-D", 1, 1, 5)])
    view = FeatureView(h.sample(fraction=1.0, shuffle=True, seed=3), keys=["id"])  # input order must not matter
    assert values(ents([(1, 5), (2, 5), (1, 4)]), view) == [2, None, None]


def test_commit_times_going_back_within_a_bucket_follow_the_documented_order():
    # not produced by fluss-lake writers (they never stamp a batch earlier than the previous one), but defined
    h = hist([(1, 1, "+I", 0, 0, 5), (1, 1, "-U", 0, 1, 3), (1, 2, "+U", 0, 2, 3), (2, 7, "+I", 1, 0, 1)])
    for frame in (h, h.reverse()):
        assert values(ents([(1, 4), (1, 5), (1, 2), (2, 1)]), FeatureView(frame, keys=["id"])) == [2, 1, None, 7]


def test_before_image_never_wins_even_when_it_is_the_latest_record():
    h = hist([(1, 1, "+I", 0, 0, 1), (1, 99, "-U", 0, 1, 2), (1, 2, "+U", 0, 2, 3)])
    assert values(ents([(1, 2)]), FeatureView(h, keys=["id"])) == [1]


def test_deleted_key_is_null_until_it_returns():
    h = hist([(1, 1, "+I", 0, 0, 10), (1, 1, "-D", 0, 1, 20), (1, 3, "+I", 0, 2, 30)])
    assert values(ents([(1, 15), (1, 20), (1, 29), (1, 30), (1, 9)]), FeatureView(h, keys=["id"])) == [
        1, None, None, 3, None]


def test_ttl_edge_age_equal_to_ttl_counts():
    h = hist([(1, 1, "+I", 0, 0, 1_000)])
    view = FeatureView(h, keys=["id"], ttl=timedelta(microseconds=500))
    assert values(ents([(1, 1_500), (1, 1_501), (1, 1_000)]), view) == [1, None, 1]
    day = FeatureView(h, keys=["id"], ttl="1 d")
    assert day.ttl == timedelta(days=1)
    assert values(ents([(1, 86_400_000_000 + 1_000), (1, 86_400_000_000 + 1_001)]), day) == [1, None]


def test_ttl_is_measured_from_the_latest_change():
    h = hist([(1, 1, "+I", 0, 0, 0), (1, 1, "-U", 0, 1, 900), (1, 2, "+U", 0, 2, 900)])
    assert values(ents([(1, 1_000), (1, 1_401)]), FeatureView(h, keys=["id"], ttl="0ms")) == [None, None]
    assert values(ents([(1, 1_000), (1, 1_401)]), FeatureView(h, keys=["id"], ttl=timedelta(microseconds=500))) == [
        2, None]


def test_every_entity_row_kept_in_order_with_duplicates_nulls_and_labels():
    h = hist([(1, 1, "+I", 0, 0, 5), (2, 2, "+I", 1, 0, 1)])
    entities = pl.DataFrame({"id": [2, 1, 1, None, 3, 2], "prediction_ts": [at(9), at(9), at(9), at(9), at(9), None],
                             "label": ["a", "b", "c", "d", "e", "f"]})
    out = training_set(entities, FeatureView(h, keys=["id"], features=["v"]))
    assert out.columns == ["id", "prediction_ts", "label", "v"]
    assert out["label"].to_list() == ["a", "b", "c", "d", "e", "f"]
    assert out["v"].to_list() == [2, 1, 1, None, None, None]


def test_empty_inputs():
    h = hist([(1, 1, "+I", 0, 0, 5)])
    assert training_set(ents([]), FeatureView(h, keys=["id"], features=["v"])).shape == (0, 3)
    empty_view = FeatureView(h.clear(), keys=["id"], features=["v"])
    assert values(ents([(1, 9)]), empty_view) == [None]


# ---------------------------------------------------------------- event time
def test_event_time_uses_the_rows_own_time_and_committed_only_blocks_late_values():
    # value 5 happened at t=10 but was only committed at t=50 (late data)
    h = hist([(1, 4, "+I", 0, 0, 1, 1), (1, 4, "-U", 0, 1, 50, 1), (1, 5, "+U", 0, 2, 50, 10)])
    assert values(ents([(1, 20), (1, 9), (1, 50)]), FeatureView(h, keys=["id"], event_time="ev")) == [5, 4, 5]
    committed = FeatureView(h, keys=["id"], event_time="ev", committed_only=True)
    assert values(ents([(1, 20), (1, 49), (1, 50)]), committed) == [4, 4, 5]


def test_event_time_late_update_with_older_event_time_does_not_replace_newer_value():
    # A: ev 12 committed at 2; B: ev 3 committed at 15 (a late, older observation arriving after A)
    h = hist([(1, 100, "+I", 0, 0, 2, 12), (1, 100, "-U", 0, 1, 15, 12), (1, 200, "+U", 0, 2, 15, 3)])
    for committed in (False, True):
        view = FeatureView(h, keys=["id"], event_time="ev", committed_only=committed)
        assert values(ents([(1, 20), (1, 13), (1, 5)]), view) == [100, 100, None if committed else 200]


def test_event_time_delete_takes_effect_at_its_commit_time_or_the_deleted_rows_event_time():
    h = hist([(1, 7, "+I", 0, 0, 10, 5), (1, 7, "-D", 0, 1, 20, 5),
              (2, 8, "+I", 1, 0, 10, 25), (2, 8, "-D", 1, 1, 20, 25)])
    view = FeatureView(h, keys=["id"], event_time="ev")
    assert values(ents([(1, 4), (1, 15), (1, 20), (2, 22), (2, 30)]), view) == [None, 7, None, None, None]


def test_event_time_ttl_and_null_event_times():
    h = hist([(1, 7, "+I", 0, 0, 100, 40), (2, 9, "+I", 1, 0, 1, None)])
    view = FeatureView(h, keys=["id"], event_time="ev", ttl=timedelta(microseconds=60))
    assert values(ents([(1, 100), (1, 101), (2, 50)]), view) == [7, None, None]


def test_event_time_column_may_be_naive_or_a_date():
    h = hist([(1, 7, "+I", 0, 0, 0)]).with_columns(day=pl.lit(datetime(2026, 1, 2).date()))
    view = FeatureView(h, keys=["id"], features=["v"], event_time="day")
    e = pl.DataFrame({"id": [1, 1], "prediction_ts": [datetime(2026, 1, 1, 23), datetime(2026, 1, 2)]})
    assert values(e, view) == [None, 7]


# ---------------------------------------------------------------- keys, names, times
def test_entity_keys_multi_column_keys_and_dtype_alignment():
    h = pl.DataFrame({"region": ["eu", "eu", "us"], "n": [1, 2, 1], "score": [0.1, 0.2, 0.3],
                      "__change_type": ["+I"] * 3, "__bucket": [0, 1, 0], "__offset": [0, 0, 1],
                      "__timestamp": [at(1)] * 3})
    e = pl.DataFrame({"r": ["us", "eu", "eu"], "num": pl.Series([1, 2, 3], dtype=pl.Int32),
                      "prediction_ts": [at(1)] * 3}).with_columns(pl.col("r").cast(pl.Categorical))
    view = FeatureView(h, keys=["region", "n"], entity_keys=["r", "num"], prefix="geo__")
    out = training_set(e, view)
    assert out["geo__score"].to_list() == [0.3, 0.2, None]
    assert out.schema["num"] == pl.Int32 and out.columns == ["r", "num", "prediction_ts", "geo__score"]


def test_prefixes_resolve_clashes_and_clashes_are_refused():
    a = hist([(1, 1, "+I", 0, 0, 1)])
    b = hist([(1, 2, "+I", 0, 0, 1)])
    e = ents([(1, 5)])
    with pytest.raises(fl.InvalidConfigError, match="prefix"):
        training_set(e, [FeatureView(a, keys=["id"], features=["v"]), FeatureView(b, keys=["id"], features=["v"])])
    with pytest.raises(fl.InvalidConfigError, match="entity frame"):
        training_set(e.with_columns(v=pl.lit(0)), FeatureView(a, keys=["id"], features=["v"]))
    out = training_set(e, [FeatureView(a, keys=["id"], features=["v"], prefix="a__"),
                           FeatureView(b, keys=["id"], features=["v"], prefix="b__")])
    assert out.row(0, named=True) | {} == {"id": 1, "prediction_ts": at(5), "a__v": 1, "b__v": 2}


def test_prediction_times_in_other_zones_and_naive_times_are_utc():
    h = hist([(1, 1, "+I", 0, 0, 3_600_000_000)])  # 01:00 UTC
    naive = pl.DataFrame({"id": [1, 1], "prediction_ts": [datetime(2026, 1, 1, 0, 59), datetime(2026, 1, 1, 1)]})
    assert values(naive, FeatureView(h, keys=["id"])) == [None, 1]
    paris = naive.with_columns(pl.col("prediction_ts").dt.replace_time_zone("Europe/Paris"))  # 01:00 Paris = 00:00Z
    assert values(paris, FeatureView(h, keys=["id"])) == [None, None]


@pytest.mark.parametrize("bad, error, match", [
    (lambda e, h: training_set(e.rename({"prediction_ts": "t"}), FeatureView(h, keys=["id"])),
     fl.SchemaMismatchError, "timestamp_column"),
    (lambda e, h: training_set(e.with_columns(pl.col("prediction_ts").dt.epoch("us")), FeatureView(h, keys=["id"])),
     fl.SchemaMismatchError, "Datetime or Date"),
    (lambda e, h: training_set(e.rename({"id": "cid"}), FeatureView(h, keys=["id"])),
     fl.SchemaMismatchError, "entity_keys"),
    (lambda e, h: training_set(e.with_columns(pl.col("id").cast(pl.String)), FeatureView(h, keys=["id"])),
     fl.SchemaMismatchError, "cast one side"),
    (lambda e, h: training_set(e.with_columns(__fl_row=1), FeatureView(h, keys=["id"])),
     fl.SchemaMismatchError, "reserved"),
    (lambda e, h: training_set(e, []), fl.InvalidConfigError, "FeatureView"),
    (lambda e, h: training_set(e, FeatureView(h, keys=["id"], prefix="__fl_t0")), fl.InvalidConfigError, "reserved"),
    (lambda e, h: training_set(e.to_dicts(), FeatureView(h, keys=["id"])), fl.InvalidConfigError, "DataFrame"),
    (lambda e, h: FeatureView(h.drop("__offset"), keys=["id"]), fl.SchemaMismatchError, "__offset"),
    (lambda e, h: FeatureView(h, keys=["nope"]), fl.SchemaMismatchError, "nope"),
    (lambda e, h: FeatureView(h, keys=[]), fl.InvalidConfigError, "at least one"),
    (lambda e, h: FeatureView(h, keys=["id"], features=["__bucket"]), fl.SchemaMismatchError, "system"),
    (lambda e, h: FeatureView(h, keys=["id"], committed_only=True), fl.InvalidConfigError, "event_time"),
    (lambda e, h: FeatureView(h, keys=["id"], ttl=timedelta(seconds=-1)), fl.InvalidConfigError, "non-negative"),
    (lambda e, h: FeatureView(h, keys=["id"], ttl="soon"), fl.InvalidConfigError, "duration"),
    (lambda e, h: FeatureView(h, keys=["id"], entity_keys=["a", "b"]), fl.InvalidConfigError, "pair"),
    (lambda e, h: FeatureView(h.to_dicts(), keys=["id"]), fl.InvalidConfigError, "LazyFrame"),
    (lambda e, h: training_set(e, FeatureView(h, keys=["id"], event_time="v")), fl.SchemaMismatchError, "event time"),
])
def test_bad_input_is_refused_with_a_clear_error_and_inputs_are_untouched(bad, error, match):
    h = hist([(1, 1, "+I", 0, 0, 1)])
    e = ents([(1, 5)])
    before_h, before_e = h.clone(), e.clone()
    with pytest.raises(error, match=match):
        bad(e, h)
    assert h.equals(before_h) and e.equals(before_e)


# ---------------------------------------------------------------- DuckDB
def test_callable_from_duckdb_sql():
    h = hist([(1, 10, "+I", 0, 0, 5), (2, 20, "+I", 1, 0, 5), (2, 20, "-D", 1, 1, 8)])
    con = duckdb.connect()
    con.execute("CREATE TABLE requests AS SELECT * FROM (VALUES (1, TIMESTAMPTZ '2026-01-01 00:00:00.000009+00', 'y'),"
                " (2, TIMESTAMPTZ '2026-01-01 00:00:00.000006+00', 'n'), (2, TIMESTAMPTZ '2026-01-01 00:00:00.000009+00', 'n'))"
                " t(id, prediction_ts, label)")
    view = FeatureView(h, keys=["id"], features=["v"], prefix="f__")
    frame = register_training_set(con, "train", "SELECT * FROM requests", view)
    assert con.sql("SELECT label, f__v FROM train").fetchall() == [("y", 10), ("n", 20), ("n", None)]
    assert frame["f__v"].to_list() == [10, 20, None]
    register_training_set(con, "train2", con.table("requests"), view)
    assert con.sql("SELECT count(*) FROM train2 WHERE f__v IS NOT NULL").fetchall() == [(2,)]
    with pytest.raises(fl.InvalidConfigError, match="SQL string"):
        register_training_set(con, "train3", 42, view)
