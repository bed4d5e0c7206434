"""Hypothesis: the bounded-memory path (``key_chunks``) gives exactly the in-memory path's rows (and the oracle's)
on random histories, in every time mode, with two views, TTLs, lazy scans and entity keys of another int type."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.training import FeatureView, training_set
from tests.training.conftest import histories, history_frame, oracle_value
from tests.training.test_training_set_properties import _entities, entity_rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), ttl=st.one_of(st.none(), st.integers(0, 6)),
       mode=st.sampled_from(["commit", "event", "event_committed"]), chunks=st.integers(2, 5),
       shuffle=st.booleans())
def test_key_chunks_equal_the_in_memory_path(data, ttl, mode, chunks, shuffle):
    rows_a, rows_b = data.draw(histories()), data.draw(histories(keys=4, buckets=3))
    ents = data.draw(entity_rows(rows_a + rows_b))
    event = mode != "commit"
    frame_a = history_frame(rows_a)
    if shuffle:
        frame_a = frame_a.sample(fraction=1.0, shuffle=True, seed=1)
    views = [
        FeatureView(frame_a.lazy(), keys=["id"], features=["v"], prefix="a__",
                    ttl=None if ttl is None else timedelta(microseconds=ttl), event_time="ev" if event else None,
                    committed_only=mode == "event_committed"),
        FeatureView(history_frame(rows_b), keys=["id"], features=["v", "ev"], prefix="b__"),
    ]
    entities = _entities(ents).with_columns(pl.col("id").cast(pl.Int32))  # keys compared as the common type
    whole = training_set(entities, views)
    chunked = training_set(entities, views, key_chunks=chunks)
    assert isinstance(chunked, pl.DataFrame) and chunked.equals(whole)
    assert chunked["a__v"].to_list() == [
        oracle_value(rows_a, k, t, ttl=ttl, event_time=event, committed_only=mode == "event_committed")
        for k, t in ents]
    lazy = training_set(entities.lazy(), views, key_chunks=chunks)
    assert isinstance(lazy, pl.LazyFrame) and lazy.collect().equals(whole)


def test_key_chunks_refuses_what_is_not_a_count():
    view = FeatureView(pl.DataFrame({"id": [1], "v": [1], "__change_type": ["+I"], "__bucket": [0], "__offset": [0],
                                     "__timestamp": [0]}, schema_overrides={"__timestamp": pl.Datetime("us")}),
                       keys=["id"])
    entities = pl.DataFrame({"id": [1], "prediction_ts": [0]}, schema_overrides={"prediction_ts": pl.Datetime("us")})
    for bad in (0, -1, True, 1.5, "4"):
        with pytest.raises(InvalidConfigError, match="key_chunks"):
            training_set(entities, view, key_chunks=bad)
    assert training_set(entities, view, key_chunks=1)["v"].to_list() == [1]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mode=st.sampled_from(["commit", "event", "event_committed"]), chunks=st.integers(2, 4),
       shuffle=st.booleans())
def test_bucket_range_passes_equal_the_in_memory_path(data, mode, chunks, shuffle):
    """More buckets than passes: each pass is a range of buckets (the entity rows found by key), as exact."""
    rows = data.draw(histories(keys=7, buckets=6))
    ents = data.draw(entity_rows(rows))
    frame = history_frame(rows)
    if shuffle:
        frame = frame.sample(fraction=1.0, shuffle=True, seed=2)
    event = mode != "commit"
    view = FeatureView(frame.lazy(), keys=["id"], features=["v"], prefix="a__", ttl=timedelta(microseconds=5),
                       event_time="ev" if event else None, committed_only=mode == "event_committed")
    entities = _entities(ents)
    chunked = training_set(entities, view, key_chunks=chunks)
    assert isinstance(chunked, pl.DataFrame) and chunked.equals(training_set(entities, view))
    assert chunked["a__v"].to_list() == [
        oracle_value(rows, k, t, ttl=5, event_time=event, committed_only=mode == "event_committed") for k, t in ents]


def test_a_key_in_two_bucket_ranges_falls_back_to_key_hash_passes():
    """Not a valid history (a key lives in one bucket), but no silent answer from half of its records: key 1's
    records are in buckets 0 and 1, two passes' ranges; its entity row still sees its latest record (20)."""
    at_ = [datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 5, 6)]
    history = pl.DataFrame({
        "id": [1, 2, 1, 3], "v": [10, 30, 20, 40], "__change_type": ["+I", "+I", "+U", "+I"],
        "__bucket": [0, 0, 1, 1], "__offset": [0, 1, 0, 1], "__timestamp": at_,
    })
    entities = pl.DataFrame({"id": [1, 2, 3, 4], "prediction_ts": [at_[3]] * 4})
    view = FeatureView(history.lazy(), keys=["id"])
    chunked = training_set(entities, view, key_chunks=2)
    assert chunked["v"].to_list() == [20, 30, 40, None]
    assert chunked.equals(training_set(entities, view))


def test_a_view_falling_back_leaves_the_next_views_bucket_passes_exact():
    """The passes of all views run as one sequence (the next range read while one is joined): when the first
    view's passes fail (key 1 in two bucket ranges) after the second view's first range was read ahead, both views
    still give the in-memory rows."""
    at_ = [datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 5, 6)]
    system = {"__bucket": [0, 0, 1, 2], "__offset": [0, 1, 0, 0], "__timestamp": at_}
    bad = pl.DataFrame({"id": [1, 2, 1, 3], "v": [10, 30, 20, 40], "__change_type": ["+I", "+I", "+U", "+I"], **system})
    good = pl.DataFrame({"id": [1, 2, 3, 4], "w": [1, 2, 3, 4], "__change_type": ["+I", "-D", "+I", "+I"], **system})
    entities = pl.DataFrame({"id": [1, 2, 3, 4, 5], "prediction_ts": [at_[3], at_[3], at_[0], at_[3], at_[3]]})
    for chunks, views in itertools.product(
        (2, 3),
        ([FeatureView(bad.lazy(), keys=["id"]), FeatureView(good.lazy(), keys=["id"])],
         [FeatureView(good.lazy(), keys=["id"]), FeatureView(bad.lazy(), keys=["id"])]),
    ):  # 3 passes: the first view fails in its second pass, when its third range was read ahead
        chunked = training_set(entities, views, key_chunks=chunks)
        assert chunked["v"].to_list() == [20, 30, None, None, None]
        assert chunked["w"].to_list() == [1, None, None, 4, None]
        assert chunked.equals(training_set(entities, views))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), chunks=st.sampled_from([None, 2, 3]), swap=st.booleans())
def test_history_sorted_by_bucket_equals_oracle(data, chunks, swap):
    """A history sorted by bucket (as a lake file or a bucket range reads it), in log order within each bucket or
    with two rows of a bucket swapped (then it is not in log order and gets sorted): the oracle's rows."""
    rows = data.draw(histories(keys=5, buckets=3))
    ents = data.draw(entity_rows(rows))
    frame = history_frame(rows).sort("__bucket", "__offset")
    if swap and frame.height > 1:
        i = data.draw(st.integers(0, frame.height - 2))
        frame = pl.concat([frame.slice(0, i), frame.slice(i + 1, 1), frame.slice(i, 1), frame.slice(i + 2)])
    view = FeatureView(frame.lazy(), keys=["id"], features=["v"], ttl=timedelta(microseconds=4))
    got = training_set(_entities(ents), view, key_chunks=chunks)
    assert got["v"].to_list() == [oracle_value(rows, k, t, ttl=4) for k, t in ents]


def test_bucket_range_passes_with_two_key_columns_of_other_types():
    """A two-column key whose entity columns are Categorical and Int32 (compared as String and Int64): each pass
    finds its entity rows by both columns."""
    t = datetime(2026, 1, 1, tzinfo=UTC)
    history = pl.DataFrame({"region": ["eu", "eu", "us"], "n": [1, 2, 1], "score": [0.1, 0.2, 0.3],
                            "__change_type": ["+I"] * 3, "__bucket": [0, 1, 0], "__offset": [0, 0, 1],
                            "__timestamp": [t] * 3})
    entities = pl.DataFrame({"r": ["us", "eu", "eu", None], "num": pl.Series([1, 2, 3, 1], dtype=pl.Int32),
                             "prediction_ts": [t] * 4}).with_columns(pl.col("r").cast(pl.Categorical))
    view = FeatureView(history.lazy(), keys=["region", "n"], entity_keys=["r", "num"], prefix="geo__")
    chunked = training_set(entities, view, key_chunks=2)
    assert chunked["geo__score"].to_list() == [0.3, 0.2, None, None]
    assert chunked.equals(training_set(entities, view))
