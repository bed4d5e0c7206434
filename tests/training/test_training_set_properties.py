"""Hypothesis: training sets and state as of a time equal a brute-force replay on random histories
(inserts, updates, deletes, re-inserts, equal timestamps across batches and buckets, TTL edges, event times
before and after commit, duplicate and unknown entity rows, null keys and times)."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluss_lake.training import FeatureView, state_as_of, training_set
from tests.training.conftest import (
    at,
    histories,
    history_frame,
    oracle_state,
    oracle_value,
)

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def entity_rows(draw, rows):
    """Entity rows whose times hit history times exactly, one microsecond around them, or anywhere."""
    times = sorted({r["__timestamp"] for r in rows} | {r["ev"] for r in rows if r["ev"] is not None}) or [0]
    pick_time = st.one_of(st.sampled_from(times), st.sampled_from(times).map(lambda t: t + 1),
                          st.sampled_from(times).map(lambda t: t - 1), st.integers(-2, 300), st.none())
    out = draw(st.lists(st.tuples(st.one_of(st.integers(0, 4), st.none()), pick_time), min_size=0, max_size=25))
    return out + out[: draw(st.integers(0, len(out)))]  # duplicated entity rows


def _entities(ents):
    return pl.DataFrame({"id": [k for k, _ in ents], "prediction_ts": [at(t) for _, t in ents],
                         "label": list(range(len(ents)))},
                        schema={"id": pl.Int64, "prediction_ts": pl.Datetime("us", "UTC"), "label": pl.Int64})


@SETTINGS
@given(data=st.data(), ttl=st.one_of(st.none(), st.integers(0, 6)),
       mode=st.sampled_from(["commit", "event", "event_committed"]), shuffle=st.one_of(st.none(), st.integers(0, 9)))
def test_training_set_equals_oracle(data, ttl, mode, shuffle):
    """`shuffle`: the history frame in any row order (None: log order per bucket, as the log and lake give it)."""
    rows = data.draw(histories())
    ents = data.draw(entity_rows(rows))
    event = mode != "commit"
    committed = mode == "event_committed"
    frame = history_frame(rows)
    if shuffle is not None:
        frame = frame.sample(fraction=1.0, shuffle=True, seed=shuffle)
    view = FeatureView(frame, keys=["id"], features=["v"], prefix="f__",
                       ttl=None if ttl is None else timedelta(microseconds=ttl),
                       event_time="ev" if event else None, committed_only=committed)
    got = training_set(_entities(ents), view)
    want = [oracle_value(rows, k, t, ttl=ttl, event_time=event, committed_only=committed) for k, t in ents]
    assert got["f__v"].to_list() == want
    assert got["label"].to_list() == list(range(len(ents)))  # every row kept, input order
    assert got["id"].to_list() == [k for k, _ in ents]


@SETTINGS
@given(data=st.data())
def test_two_views_and_lazy_equal_oracle(data):
    """Two views of different histories in one training set; a LazyFrame in gives the same rows out."""
    rows_a, rows_b = data.draw(histories()), data.draw(histories(keys=4, buckets=3))
    ents = data.draw(entity_rows(rows_a + rows_b))
    views = [FeatureView(history_frame(rows_a).lazy(), keys=["id"], features=["v"], prefix="a__", ttl="0ms"),
             FeatureView(history_frame(rows_b), keys=["id"], features=["v", "ev"], prefix="b__")]
    lazy = training_set(_entities(ents).lazy(), views)
    assert isinstance(lazy, pl.LazyFrame)
    got = lazy.collect()
    assert got["a__v"].to_list() == [oracle_value(rows_a, k, t, ttl=0) for k, t in ents]
    assert got["b__v"].to_list() == [oracle_value(rows_b, k, t) for k, t in ents]
    assert got.columns == ["id", "prediction_ts", "label", "a__v", "b__v", "b__ev"]


@SETTINGS
@given(data=st.data())
def test_state_as_of_equals_replay(data):
    rows = data.draw(histories(keys=6, buckets=3))
    frame = history_frame(rows)
    ts = data.draw(st.one_of(st.none(), st.integers(-1, 60)))
    offsets = data.draw(st.one_of(st.none(), st.dictionaries(st.integers(0, 2), st.integers(0, 12), max_size=3)))
    got = state_as_of(frame, primary_key=["id"], timestamp=at(ts), offsets=offsets).collect()
    want = oracle_state(rows, ts=ts, offsets=offsets)
    assert dict(zip(got["id"].to_list(), got["v"].to_list(), strict=True)) == want
    assert got["id"].to_list() == sorted(want)
    assert got.columns == ["id", "v", "ev"]
