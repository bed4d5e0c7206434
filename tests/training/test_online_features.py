"""Online features equal training sets at "now": for random histories written to real tables at controlled commit
times, ``online_features(rows, views, now=T)`` equals ``training_set`` with every prediction time T (commit-time
views on default, partial-update and aggregation tables; event-time views on versioned tables), plus the cases
the property cannot reach (expired logs, future event times, refusals)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.training import STATUS, FeatureView, online_features, training_set

T0 = 1_767_225_600_000  # 2026-01-01 00:00 UTC, epoch ms
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def ms(value: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=value)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _store(tmp_path_factory: pytest.TempPathFactory) -> tuple[fl.Connection, Clock]:
    clock = Clock()
    conn = fl.connect(str(tmp_path_factory.mktemp("online")), clock=clock)
    conn.create_database("d")
    return conn, clock


# one write: (kind, keys and values, clock step in ms)
writes = st.lists(
    st.tuples(st.sampled_from(["put", "put", "partial", "del"]),
              st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3), st.integers(-40, 0)), min_size=1, max_size=4,
                       unique_by=lambda r: r[0]),
              st.sampled_from([0, 0, 1, 5, 20])),
    min_size=1, max_size=8)


def _entities(draw_keys: list[int | None], dtype: pl.DataType) -> pl.DataFrame:
    return pl.DataFrame({"customer_id": draw_keys, "label": list(range(len(draw_keys)))},
                        schema={"customer_id": dtype, "label": pl.Int64})


def _compare(entities: pl.DataFrame, views: list[FeatureView], now: datetime) -> pl.DataFrame:
    got = online_features(entities, views, now=now)
    want = training_set(entities.with_columns(pl.lit(now, dtype=pl.Datetime("us", "UTC")).alias("prediction_ts")),
                        views).drop("prediction_ts")
    assert_frame_equal(got, want)
    # without statuses a view without a TTL skips its commit times: the same frame as with them
    assert_frame_equal(online_features(entities, views, now=now, with_status=True).frame, got)
    return got


entity_keys = st.lists(st.one_of(st.integers(-1, 6), st.none()), min_size=0, max_size=12)
ttls = st.one_of(st.none(), st.integers(0, 60).map(lambda v: timedelta(milliseconds=v)))


@SETTINGS
@given(ops=writes, spend_ops=writes, keys=entity_keys, ttl_a=ttls, ttl_b=ttls, after=st.integers(0, 50),
       dtype=st.sampled_from([pl.Int64, pl.Int32, pl.Int16]), buckets=st.sampled_from([1, 3]))
def test_commit_time_online_equals_training_at_now(tmp_path_factory, ops, spend_ops, keys, ttl_a, ttl_b, after,
                                                   dtype, buckets):
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.customer", schema={"id": "BIGINT", "v": "BIGINT", "w": "BIGINT"}, primary_key=["id"],
                      bucket_num=buckets)
    conn.create_table("d.spend", schema={"id": "INT", "total": "BIGINT"}, primary_key=["id"],
                      options={"table.merge-engine": "aggregation", "fields.total.agg": "sum"})
    customer, spend = conn.get_table("d.customer"), conn.get_table("d.spend")
    for kind, rows, step in ops:
        clock.now += step
        if kind == "del":
            customer.delete([{"id": k} for k, _, _ in rows])
        elif kind == "partial":
            customer.upsert([{"id": k, "w": v} for k, v, _ in rows], target_columns=["id", "w"])
        else:
            customer.upsert([{"id": k, "v": v, "w": -v} for k, v, _ in rows])
    for kind, rows, step in spend_ops:
        clock.now += step
        if kind != "del":  # aggregation tables ignore deletes by default
            spend.upsert([{"id": k, "total": v} for k, v, _ in rows])
    clock.now += after
    views = [
        FeatureView.from_table(customer, entity_keys=["customer_id"], features=["v"], ttl=ttl_a, prefix="a__"),
        FeatureView.from_table(customer, entity_keys=["customer_id"], ttl=ttl_b, prefix="b__"),  # shares the lookup
        FeatureView.from_table(spend, entity_keys=["customer_id"], ttl=ttl_b, prefix="s__"),
    ]
    entities = _entities(keys, dtype)
    got = _compare(entities, views, ms(clock.now))
    assert got.columns == ["customer_id", "label", "a__v", "b__v", "b__w", "s__total"]
    # the default prediction time is the connection's clock; a warm second call (cached batch times) agrees
    assert_frame_equal(online_features(entities, views), got)


@SETTINGS
@given(ops=writes, keys=entity_keys, ttl=ttls, after=st.integers(0, 50), committed_only=st.booleans())
def test_event_time_online_equals_training_at_now_on_versioned_tables(tmp_path_factory, ops, keys, ttl, after,
                                                                      committed_only):
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.rates", schema={"id": "BIGINT", "rate": "BIGINT", "as_of": "TIMESTAMP_LTZ(6)"},
                      primary_key=["id"], bucket_num=2,
                      options={"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "as_of"})
    rates = conn.get_table("d.rates")
    for kind, rows, step in ops:
        clock.now += step
        if kind != "del":  # versioned tables take no deletes
            rates.upsert([{"id": k, "rate": v, "as_of": None if ev == -40 else ms(clock.now + ev)} for k, v, ev in rows])
    clock.now += after
    view = FeatureView.from_table(rates, entity_keys=["customer_id"], features=["rate"], event_time="as_of",
                                  committed_only=committed_only, ttl=ttl, prefix="r__")
    _compare(_entities(keys, pl.Int64), [view], ms(clock.now))


def test_commit_times_are_read_only_for_a_ttl_or_asked_statuses(tmp_path_factory, monkeypatch):
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"], bucket_num=2)
    c = conn.get_table("d.c")
    c.upsert([{"id": 1, "tier": "gold"}, {"id": 2, "tier": "silver"}])
    asked = []
    real = fl.Table.lookup

    def spy(self, keys, **kwargs):
        asked.append(kwargs.get("with_offsets", False))
        return real(self, keys, **kwargs)

    monkeypatch.setattr(fl.Table, "lookup", spy)
    plain = FeatureView.from_table(c, prefix="c__")
    timed = FeatureView.from_table(c, ttl=timedelta(days=1), prefix="t__")
    assert online_features({"id": [1, 3]}, plain)["c__tier"].to_list() == ["gold", None]
    result = online_features({"id": [1, 3]}, plain, with_status=True)
    assert result.status[0].to_list() == ["PRESENT", "NOT_FOUND"] and result.value_times[0][0] == ms(T0)
    assert online_features({"id": [2]}, timed)["t__tier"].to_list() == ["silver"]
    assert asked == [False, True, True]  # offsets (for commit times) only when a status or a TTL needs them


def test_statuses_and_value_times(tmp_path_factory):
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"])
    c = conn.get_table("d.c")
    c.upsert([{"id": 1, "tier": "gold"}, {"id": 2, "tier": "silver"}])
    clock.now += 10
    c.upsert([{"id": 2, "tier": None}])
    clock.now += 5
    view = FeatureView.from_table(c, ttl=timedelta(milliseconds=10), prefix="c__")
    result = online_features({"id": [1, 2, 3, None]}, view, with_status=True)
    assert result.frame["c__tier"].to_list() == [None, None, None, None]
    assert result.status[0].dtype == STATUS
    assert result.status[0].to_list() == ["OUTSIDE_MAX_AGE", "PRESENT", "NOT_FOUND", "NOT_FOUND"]
    assert result.value_times[0].to_list() == [None, ms(T0 + 10), None, None]
    assert result.now == ms(clock.now)


def test_features_only_answers_mask_what_the_lookup_leaves_set(tmp_path_factory):
    """Without statuses only values that are not valid are masked: the lookup's value columns are already null where
    a key is absent, but a key column taken as a feature is set there, and so is an expired value."""
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"], bucket_num=3)
    c = conn.get_table("d.c")
    c.upsert([{"id": 1, "tier": "gold"}, {"id": 2, "tier": "silver"}])
    clock.now += 10
    c.upsert([{"id": 3, "tier": "bronze"}])
    keyed = FeatureView.from_table(c, features=["id", "tier"], prefix="k__")
    expiring = FeatureView.from_table(c, ttl=timedelta(milliseconds=5), prefix="e__")
    rows = {"id": [1, 4, 3, None, 2]}
    got = online_features(rows, [keyed, expiring])
    assert got["k__id"].to_list() == [1, None, 3, None, 2]
    assert got["k__tier"].to_list() == ["gold", None, "bronze", None, "silver"]
    assert got["e__tier"].to_list() == [None, None, "bronze", None, None]
    assert_frame_equal(online_features(rows, [keyed, expiring], with_status=True).frame, got)


def test_future_event_time_is_not_yet_valid(tmp_path_factory):
    """The one place online differs from training: the state no longer holds the value a future row replaced."""
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.r", schema={"id": "BIGINT", "rate": "DOUBLE", "as_of": "TIMESTAMP(6)"}, primary_key=["id"],
                      options={"table.merge-engine": "versioned", "table.merge-engine.versioned.ver-column": "as_of"})
    r = conn.get_table("d.r")
    r.upsert([{"id": 1, "rate": 1.0, "as_of": ms(T0 - 5).replace(tzinfo=None)}])
    r.upsert([{"id": 1, "rate": 2.0, "as_of": ms(T0 + 60_000).replace(tzinfo=None)}])  # a minute ahead
    view = FeatureView.from_table(r, event_time="as_of", features=["rate"])
    result = online_features({"id": [1]}, view, with_status=True)
    assert result.frame["rate"].to_list() == [None]
    assert result.status[0].to_list() == ["NOT_YET_VALID"]
    clock.now += 60_000
    assert online_features({"id": [1]}, view)["rate"].to_list() == [2.0]


def test_expired_log_commit_times(tmp_path_factory):
    """A value whose batch table.log.ttl removed is expired when the log TTL is at least the view's TTL, and the
    request fails clearly (instead of guessing) when the view's TTL is longer."""
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "v": "BIGINT"}, primary_key=["id"],
                      options={"table.log.ttl": "1 h"})
    c = conn.get_table("d.c")
    c.upsert([{"id": 1, "v": 1}])
    clock.now += 2 * 3_600_000
    c.upsert([{"id": 2, "v": 2}])
    c.expire_log()
    assert c.earliest_offsets() == {0: 1}
    short = FeatureView.from_table(c, ttl="30 min")
    assert online_features({"id": [1, 2]}, short)["v"].to_list() == [None, 2]
    no_ttl = FeatureView.from_table(c)
    assert online_features({"id": [1, 2]}, no_ttl)["v"].to_list() == [1, 2]
    long = FeatureView.from_table(c, ttl="3 h")
    with pytest.raises(fl.IncompleteHistoryError, match="table.log.ttl at least"):
        online_features({"id": [1, 2]}, long)


def test_partitioned_table_and_keys_in_another_order(tmp_path_factory):
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.s", schema={"day": "STRING", "id": "INT", "v": "DOUBLE"}, primary_key=["day", "id"],
                      partition_keys=["day"], bucket_num=2)
    s = conn.get_table("d.s")
    s.upsert([{"day": "20260101", "id": 1, "v": 1.0}, {"day": "20260102", "id": 1, "v": 2.0}])
    clock.now += 7
    s.upsert([{"day": "20260102", "id": 2, "v": 3.0}])
    clock.now += 3
    view = FeatureView.from_table(s, entity_keys=["d", "i"], ttl=timedelta(milliseconds=5), prefix="s__")
    entities = pl.DataFrame({"i": [1, 2, 1, 9], "d": ["20260101", "20260102", "20260109", "20260102"]})
    got = _compare(entities, [view], ms(clock.now))
    assert got["s__v"].to_list() == [None, 3.0, None, None]


def test_refusals(tmp_path_factory):
    conn, _ = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "v": "BIGINT", "ts": "TIMESTAMP(6)"}, primary_key=["id"])
    c = conn.get_table("d.c")
    history = pl.DataFrame({"id": [1], "v": [1], "__change_type": ["+I"], "__bucket": [0], "__offset": [0],
                            "__timestamp": [ms(T0)]})
    with pytest.raises(fl.InvalidConfigError, match="from_table"):
        online_features({"id": [1]}, FeatureView(history, keys=["id"]))
    with pytest.raises(fl.UnsupportedOperationError, match="versioned"):
        online_features({"id": [1]}, FeatureView.from_table(c, event_time="ts"))
    with pytest.raises(fl.SchemaMismatchError, match="lacks key"):
        online_features({"customer": [1]}, FeatureView.from_table(c))
    with pytest.raises(fl.SchemaMismatchError, match="entity key is String"):
        online_features({"id": ["1"]}, FeatureView.from_table(c))
    with pytest.raises(fl.InvalidConfigError, match="clashes"):
        online_features({"id": [1], "v": [2]}, FeatureView.from_table(c))
    with pytest.raises(fl.InvalidConfigError, match="entity rows"):
        online_features(42, FeatureView.from_table(c))


def test_views_read_nothing_until_a_training_set_does(tmp_path_factory):
    """FeatureView.from_table no longer snapshots the history: writes after the view are in a later training set,
    and an expired log raises when the set is computed."""
    conn, clock = _store(tmp_path_factory)
    conn.create_table("d.c", schema={"id": "BIGINT", "v": "BIGINT"}, primary_key=["id"],
                      options={"table.log.ttl": "1 h"})
    c = conn.get_table("d.c")
    view = FeatureView.from_table(c)
    assert view.history.collect_schema() == fl.training.history_of(c).collect_schema()
    c.upsert([{"id": 1, "v": 1}])
    ents = pl.DataFrame({"id": [1], "prediction_ts": [ms(clock.now)]})
    assert training_set(ents, view)["v"].to_list() == [1]
    clock.now += 2 * 3_600_000
    c.upsert([{"id": 2, "v": 2}])
    c.expire_log()
    with pytest.raises(fl.IncompleteHistoryError):
        training_set(ents, view)
    assert online_features({"id": [1]}, view)["v"].to_list() == [1]  # online needs no history
