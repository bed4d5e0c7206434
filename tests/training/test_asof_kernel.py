"""The compiled as-of kernel (``fluss_lake.training._kernels._asof``) against a brute-force search, and training sets joined
by it equal to those joined by Polars' ``join_asof`` (the kernel switched off), one pass and in key chunks, in
both time modes, with entity keys of other integer widths; keys or times with nulls take the Polars path."""

from __future__ import annotations

import sys
from datetime import timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluss_lake.training import FeatureView, training_set
from fluss_lake.training._kernels import _asof  # type: ignore[attr-defined]
from tests.training.conftest import at, histories, history_frame

TS = sys.modules["fluss_lake.training.training_set"]
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def _brute(left_keys, left_times, right_keys, right_times) -> list[int]:
    out = []
    for k, t in zip(left_keys, left_times, strict=True):
        keyed = [j for j, rk in enumerate(right_keys) if rk == k]
        before = [j for j in keyed if right_times[j] <= t]
        out.append(before[-1] if before else (-1 if keyed else -2))
    return out


@settings(max_examples=200, deadline=None)
@given(
    right=st.lists(st.tuples(st.sampled_from([0, -1, 7, 2**62, -(2**63), 2**63 - 1, 12345]), st.integers(-5, 5)),
                   max_size=60),
    left=st.lists(st.tuples(st.sampled_from([0, -1, 7, 2**62, -(2**63), 2**63 - 1, 99]), st.integers(-6, 6)),
                  max_size=40),
)
def test_the_kernel_finds_each_rows_last_record_at_or_before_its_time(right, left) -> None:
    right = sorted(right, key=lambda r: r[1])  # each key's records ascend by time (a stable sort keeps ties)
    rk, rt = [k for k, _ in right], [t for _, t in right]
    lk, lt = [k for k, _ in left], [t for _, t in left]
    got = _asof.asof_backward(np.array(lk, np.int64), np.array(lt, np.int64), np.array(rk, np.int64),
                              np.array(rt, np.int64))
    assert got.tolist() == _brute(lk, lt, rk, rt)


def test_the_kernels_table_grows_past_many_keys() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(-(2**40), 2**40, 200_000)
    times = np.arange(keys.size, dtype=np.int64)
    got = _asof.asof_backward(keys[::-1].copy(), np.full(keys.size, keys.size, np.int64), keys, times)
    last = {int(k): j for j, k in enumerate(keys)}  # the last record of each key
    assert got.tolist() == [last[int(k)] for k in keys[::-1]]


def _polars_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TS, "_asof_by_int_key", lambda *args, **kwargs: None)
    monkeypatch.setattr(TS._BucketPasses, "_grouped_join", lambda *args, **kwargs: None)


def _brute_ordered(left_keys, left_times, right_keys, right_times, tiebreak) -> list[int]:
    """The answer with each key's records ordered by (time, tiebreak) first (a stable sort)."""
    order = sorted(range(len(right_keys)), key=lambda j: (right_times[j], tiebreak[j]))
    got = _brute(left_keys, left_times, [right_keys[j] for j in order], [right_times[j] for j in order])
    return [order[g] if g >= 0 else g for g in got]


_KEYS = st.sampled_from([0, 1, 5, 2**40, -(2**63), 2**63 - 1])


@settings(max_examples=300, deadline=None)
@given(right=st.lists(st.tuples(_KEYS, st.integers(-4, 4), st.integers(0, 3)), max_size=50),
       left=st.lists(st.tuples(_KEYS, st.integers(-5, 5)), max_size=40), use_tiebreak=st.booleans(),
       shuffle=st.randoms(use_true_random=False))
def test_the_kernel_orders_records_given_in_any_order(right, left, use_tiebreak, shuffle) -> None:
    """any_order: a key's records in any order are ordered by (time, tiebreak), one pass (asof_backward) and
    for left rows grouped once (asof_grouped); None only where two records of a key tie on that order."""
    shuffle.shuffle(right)
    if shuffle.random() < 0.5:
        right.sort(key=lambda r: r[1])  # in time order too: the one-pass sweep's path
    rk, rt, rb = ([r[i] for r in right] for i in range(3))
    lk, lt = [k for k, _ in left], [t for _, t in left]
    arrays = [np.array(x, np.int64) for x in (lk, lt, rk, rt)]
    tiebreak = np.array(rb, np.int64) if use_tiebreak else None
    want = _brute_ordered(lk, lt, rk, rt, rb if use_tiebreak else [0] * len(rk))
    tie = len({(k, t, b if use_tiebreak else 0) for k, t, b in right}) < len(right)
    got = _asof.asof_backward(*arrays, tiebreak, any_order=True)
    grouped = _asof.asof_grouped(_asof.group_left(arrays[0], arrays[1]), arrays[2], arrays[3], tiebreak)
    in_order = all((a[1], a[2] if use_tiebreak else 0) < (b[1], b[2] if use_tiebreak else 0)
                   for i, a in enumerate(right) for b in right[i + 1:] if a[0] == b[0])
    if not tie:
        assert got is not None  # the one-pass kernel orders records itself
    if in_order:
        assert grouped is not None  # the grouped passes take a key's records in their order only
    if got is not None:  # a tie only of keys no left row asks for may still give an answer: then the right one
        assert got.tolist() == want if not tie else all(w == g or w < 0 for w, g in zip(want, got, strict=True))
    if grouped is not None:
        rows, found = grouped
        assert sorted(rows.tolist()) == [i for i, w in enumerate(want) if w != -2]  # the rows whose key has records
        if not tie:
            assert [found[list(rows).index(i)] for i in range(len(lk)) if want[i] != -2] == [w for w in want if w != -2]


def test_a_lazy_history_with_equal_commit_times_takes_the_later_offset(monkeypatch) -> None:
    """A scan is read without offsets first; records of a key at one commit time are read again with them."""
    rows = [{"id": 1, "v": v, "ev": None, "__change_type": ct, "__bucket": 0, "__offset": o, "__timestamp": t}
            for v, ct, o, t in [(10, "+I", 0, 1), (10, "-U", 1, 5), (20, "+U", 2, 5), (20, "-U", 3, 5), (30, "+U", 4, 5)]]
    rows.append({"id": 2, "v": 7, "ev": None, "__change_type": "+I", "__bucket": 1, "__offset": 0, "__timestamp": 5})
    history = history_frame(rows).sort("__offset", descending=True).lazy()  # out of order as well
    reads: list[bool | None] = []
    original = TS._kernel_right
    monkeypatch.setattr(TS, "_kernel_right", lambda *a, **k: reads.append(k.get("offsets")) or original(*a, **k))
    entities = pl.DataFrame({"id": [1, 1, 1], "prediction_ts": [at(0), at(4), at(5)]})
    for chunks in (None, 2):
        reads.clear()
        out = training_set(entities, FeatureView(history, keys=["id"], features=["v"]), key_chunks=chunks)
        assert out["v"].to_list() == [None, 10, 30]
        assert True in reads  # read again with the offsets
    lazy_rows = history_frame(rows).filter(pl.col("__offset") != 4).lazy()
    assert training_set(entities, FeatureView(lazy_rows, keys=["id"], features=["v"]))["v"].to_list() == [None, 10, 20]


@SETTINGS
@given(data=st.data(), ttl=st.one_of(st.none(), st.integers(0, 6)), event=st.booleans(),
       key_type=st.sampled_from([pl.Int64, pl.Int32, pl.UInt8]), chunks=st.sampled_from([None, 2]),
       nulls=st.booleans(), lazy=st.booleans(), shuffled=st.booleans())
def test_training_sets_by_the_kernel_equal_those_by_polars(monkeypatch, data, ttl, event, key_type, chunks,
                                                            nulls, lazy, shuffled) -> None:
    """Lazy histories (read without offsets first), histories out of log order, ties, deletes, TTL, nulls."""
    rows_a, rows_b = data.draw(histories()), data.draw(histories(keys=4, buckets=3))
    if shuffled:
        rows_a, rows_b = rows_a[::-1], rows_b[1:] + rows_b[:1]
    times = sorted({r["__timestamp"] for r in rows_a + rows_b}) or [0]
    ents = data.draw(st.lists(st.tuples(st.integers(0, 4), st.sampled_from(times).map(lambda t: t + 0)),
                              max_size=25))
    keys = [None if nulls and i == 0 else k for i, (k, _) in enumerate(ents)]
    entities = pl.DataFrame({"id": keys, "prediction_ts": [at(t) for _, t in ents]},
                            schema={"id": key_type, "prediction_ts": pl.Datetime("us", "UTC")})
    frames = [history_frame(r).lazy() if lazy else history_frame(r) for r in (rows_a, rows_b)]
    views = [FeatureView(frames[0], keys=["id"], features=["v"], prefix="a__",
                         ttl=None if ttl is None else timedelta(microseconds=ttl), event_time="ev" if event else None),
             FeatureView(frames[1], keys=["id"], features=["v"], prefix="b__")]
    with_kernel = training_set(entities, views, key_chunks=chunks)
    with monkeypatch.context() as patch:
        _polars_only(patch)
        with_polars = training_set(entities, views, key_chunks=chunks)
    assert with_kernel.equals(with_polars)


def test_the_kernel_is_used_for_integer_keys_and_not_for_nulls_or_strings(monkeypatch) -> None:
    rows = [{"id": 1, "v": 1, "ev": None, "__change_type": "+I", "__bucket": 0, "__offset": 0, "__timestamp": 1}]
    history = history_frame(rows)
    calls: list[pl.DataFrame | None] = []
    original = TS._asof_by_int_key
    monkeypatch.setattr(TS, "_asof_by_int_key", lambda *a, **k: calls.append(original(*a, **k)) or calls[-1])
    base = {"prediction_ts": [at(5), at(0)]}
    training_set(pl.DataFrame({"id": [1, 2], **base}), FeatureView(history, keys=["id"], features=["v"]))
    assert calls and calls[-1] is not None  # integer keys: joined by the kernel
    calls.clear()
    out = training_set(pl.DataFrame({"id": [1, None], **base}), FeatureView(history, keys=["id"], features=["v"]))
    assert calls == [None] and out["v"].to_list() == [1, None]  # a null key: Polars' as-of join
    calls.clear()
    text = history.with_columns(pl.col("id").cast(pl.String))
    out = training_set(pl.DataFrame({"id": ["1", "2"], **base}), FeatureView(text, keys=["id"], features=["v"]))
    assert calls == [] and out["v"].to_list() == [1, None]  # string keys never reach the kernel
