"""Lookup join: enrichment equals a Polars join with the table's current state; cache bounds and expiry; a log
table source appended exactly once to a log sink across crashes."""

from __future__ import annotations

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.jobs import LookupCache, LookupJoin


class SimulatedCrash(Exception):
    pass


@pytest.fixture
def lake(tmp_path):
    conn = fl.connect(str(tmp_path / "lake"))
    conn.create_database("d")
    conn.create_table("d.users", schema={"uid": "BIGINT", "name": "STRING", "tier": "INT"}, primary_key=["uid"],
                      bucket_num=3)
    conn.create_table("d.clicks", schema={"user": "BIGINT", "page": "STRING"}, bucket_num=2)
    conn.create_table("d.enriched", schema={"user": "BIGINT", "page": "STRING", "name": "STRING"}, bucket_num=2,
                      bucket_keys=["user"])
    users = conn.get_table("d.users")
    users.upsert([{"uid": i, "name": f"u{i}", "tier": i % 3} for i in range(50)])
    return conn


def _want(frame: pl.DataFrame, users: fl.Table, how: str) -> pl.DataFrame:
    state = users.to_polars()
    return frame.join(state.rename({"uid": "user"}), on="user", how=how, maintain_order="left")


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("cache", [None, LookupCache(max_rows=7), LookupCache(max_rows=100, cache_missing_key=False)])
def test_enrich_equals_polars_join(lake, how, cache) -> None:
    users = lake.get_table("d.users")
    job = LookupJoin(users, on={"user": "uid"}, how=how, cache=cache)
    for seed in range(4):
        frame = pl.DataFrame({"user": [(seed * 7 + i * 13) % 70 for i in range(40)], "page": [f"p{i}" for i in range(40)]},
                             schema={"user": pl.Int64, "page": pl.String})
        got = job.enrich(frame)
        assert got.equals(_want(frame, users, how).select(got.columns))
    if cache is None:
        assert job.state_bytes() == 0
    else:
        assert job._cached is not None and job._cached.height <= cache.max_rows and job.state_bytes() > 0
        assert job.hits > 0 and job.misses > 0


def test_cache_serves_stale_rows_until_they_expire(lake) -> None:
    users = lake.get_table("d.users")
    now = [0.0]
    job = LookupJoin(users, on={"user": "uid"}, columns=["name"], cache=LookupCache(expire_after_write=10),
                     clock=lambda: now[0])
    frame = pl.DataFrame({"user": [1, 99]})
    assert job.enrich(frame)["name"].to_list() == ["u1", None]
    users.upsert([{"uid": 1, "name": "renamed", "tier": 0}, {"uid": 99, "name": "new", "tier": 0}])
    now[0] = 5
    assert job.enrich(frame)["name"].to_list() == ["u1", None]  # cached, missing key cached too
    now[0] = 11
    assert job.enrich(frame)["name"].to_list() == ["renamed", "new"]


def test_prefix_lookup_join_gives_every_matching_row(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.orders", schema={"cid": "INT", "oid": "INT", "amount": "INT"}, primary_key=["cid", "oid"],
                      bucket_keys=["cid"], bucket_num=2)
    orders = conn.get_table("d.orders")
    orders.upsert([{"cid": c, "oid": o, "amount": c * o} for c in range(3) for o in range(c + 1)])
    job = LookupJoin(orders, on={"customer": "cid"}, how="inner")
    got = job.enrich(pl.DataFrame({"customer": [2, 0, 5]}, schema={"customer": pl.Int32}))
    want = pl.DataFrame({"customer": [2, 0, 5]}, schema={"customer": pl.Int32}).join(
        orders.to_polars().rename({"cid": "customer"}), on="customer", how="inner")
    assert got.sort(got.columns).equals(want.select(got.columns).sort(got.columns))


def test_log_source_to_log_sink_exactly_once_across_crashes(lake) -> None:
    clicks, enriched, users = lake.get_table("d.clicks"), lake.get_table("d.enriched"), lake.get_table("d.users")

    def job() -> LookupJoin:
        return LookupJoin(users, on={"user": "uid"}, columns=["name"], source=clicks, sink=enriched, name="enrich",
                          batch_rows=5)

    sent = []
    j = job()
    for round_ in range(4):
        rows = [{"user": (round_ * 5 + i) % 60, "page": f"r{round_}-{i}"} for i in range(8)]
        clicks.append(rows)
        sent += rows
        if round_ % 2 == 0:  # die after writing a step, before its final checkpoint
            real = j.checkpoints.commit

            def commit(checkpoint, real=real):
                if "pending" not in checkpoint.extra:
                    raise SimulatedCrash()
                real(checkpoint)
            j.checkpoints.commit = commit
            with pytest.raises(SimulatedCrash):
                j.run_once()
            j = job()
        j.run_once()
    got = enriched.scan_log().select("user", "page", "name").sort("page")
    want = _want(pl.DataFrame(sent, schema={"user": pl.Int64, "page": pl.String}), users, "left")
    assert got.equals(want.select("user", "page", "name").sort("page"))


def test_poll_returns_batches_and_moves_the_checkpoint(lake) -> None:
    clicks, users = lake.get_table("d.clicks"), lake.get_table("d.users")
    clicks.append([{"user": 3, "page": "x"}])
    job = LookupJoin(users, on={"user": "uid"}, columns=["name"], source=clicks, name="poller")
    assert job.poll().select("user", "name").to_dicts() == [{"user": 3, "name": "u3"}]
    assert job.poll().height == 0
    assert LookupJoin(users, on={"user": "uid"}, source=clicks, name="poller").poll().height == 0  # resumed


def test_bad_lookup_joins_are_rejected(lake) -> None:
    users, clicks = lake.get_table("d.users"), lake.get_table("d.clicks")
    with pytest.raises(fl.InvalidConfigError, match="primary key"):
        LookupJoin(users, on={"user": "name"})
    with pytest.raises(fl.InvalidConfigError, match="log table; a lookup join needs"):
        LookupJoin(clicks, on=["user"])
    with pytest.raises(fl.InvalidConfigError, match="lacks the join column"):
        LookupJoin(users, on={"user": "uid"}).enrich(pl.DataFrame({"x": [1]}))
    with pytest.raises(fl.InvalidConfigError, match="exist on both sides"):
        LookupJoin(users, on={"user": "uid"}).enrich(pl.DataFrame({"user": [1], "name": ["x"]}))
    with pytest.raises(fl.InvalidConfigError, match="must be positive"):
        LookupCache(max_rows=0)
    with pytest.raises(fl.InvalidConfigError, match="no source table"):
        LookupJoin(users, on={"user": "uid"}).run_once()
    assert lake.store.list(".jobs") == []
