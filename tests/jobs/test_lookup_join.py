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
    with pytest.raises(fl.InvalidConfigError, match=r"max_rows.*whole number >= 1"):
        LookupCache(max_rows=0)
    with pytest.raises(fl.InvalidConfigError, match="no source table"):
        LookupJoin(users, on={"user": "uid"}).run_once()
    assert lake.store.list(".jobs") == []


# ---------------------------------------------------------------------------------------------- insert-if-not-exists
ODS_EVENTS = pl.DataFrame({
    "country": ["CN", "CN", "US", "JP"], "prov": ["Beijing", "Shanghai", "California", "Tokyo"],
    "city": ["Haidian", "Pudong", "LA", "Shibuya"], "ymd": ["2025-01-01", "2025-01-02", "2025-01-03", "2025-01-04"],
    "uid": ["user_a", "user_b", "user_a", "user_c"]})


@pytest.fixture
def dictionary(tmp_path) -> fl.Connection:
    """Fluss's example (engine-flink/lookups.md, "Insert If Not Exists"): uid_mapping(uid VARCHAR NOT NULL,
    uid_int32 INT, PRIMARY KEY (uid)) WITH ('auto-increment.fields' = 'uid_int32', 'bucket.num' = '1')."""
    conn = fl.connect(str(tmp_path / "lake"))
    conn.create_database("d")
    conn.create_table("d.uid_mapping", schema={"uid": "STRING", "uid_int32": "INT"}, primary_key=["uid"],
                      options={"auto-increment.fields": "uid_int32", "bucket.num": "1"})
    return conn


@pytest.mark.parametrize("how", ["table option", "argument"])
def test_lookup_join_inserts_missing_keys_as_flusss_example(dictionary, how) -> None:
    mapping = dictionary.get_table("d.uid_mapping")
    if how == "table option":  # Fluss: the OPTIONS('lookup.insert-if-not-exists' = 'true') hint or WITH clause
        dictionary.alter_table("d.uid_mapping", set_options={"lookup.insert-if-not-exists": "true"})
        job = LookupJoin(dictionary.get_table("d.uid_mapping"), on=["uid"], how="inner")
    else:
        job = LookupJoin(mapping, on=["uid"], how="inner", insert_if_not_exists=True)
    assert job.insert_if_not_exists
    got = job.enrich(ODS_EVENTS)
    assert got.select("ymd", "uid", "uid_int32").rows() == [
        ("2025-01-01", "user_a", 1), ("2025-01-02", "user_b", 2), ("2025-01-03", "user_a", 1),
        ("2025-01-04", "user_c", 3)]
    assert mapping.to_polars().sort("uid").rows() == [("user_a", 1), ("user_b", 2), ("user_c", 3)]
    again = job.enrich(pl.DataFrame({"uid": ["user_c", "user_d", None]})).get_column("uid_int32").to_list()
    assert again == [3, 4]  # inner join: the null key matches nothing and is never inserted
    assert mapping.to_polars().height == 4


def test_lookup_join_does_not_insert_by_default_or_when_told_not_to(dictionary) -> None:
    mapping = dictionary.get_table("d.uid_mapping")
    assert LookupJoin(mapping, on=["uid"]).enrich(ODS_EVENTS).get_column("uid_int32").null_count() == 4
    dictionary.alter_table("d.uid_mapping", set_options={"lookup.insert-if-not-exists": "true"})
    job = LookupJoin(dictionary.get_table("d.uid_mapping"), on=["uid"], insert_if_not_exists=False)
    assert job.enrich(ODS_EVENTS).get_column("uid_int32").null_count() == 4
    assert mapping.to_polars().height == 0


def test_lookup_join_insert_with_a_cache_and_a_log_sink(dictionary) -> None:
    dictionary.create_table("d.events", schema={"uid": "STRING", "ymd": "STRING"})
    dictionary.create_table("d.numbered", schema={"uid": "STRING", "ymd": "STRING", "uid_int32": "INT"})
    events, sink = dictionary.get_table("d.events"), dictionary.get_table("d.numbered")
    mapping = dictionary.get_table("d.uid_mapping")
    job = LookupJoin(mapping, on=["uid"], source=events, sink=sink, name="number", cache=LookupCache(max_rows=2),
                     insert_if_not_exists=True)
    events.append(ODS_EVENTS.select("uid", "ymd"))
    job.run_once()
    events.append([{"uid": "user_b", "ymd": "2025-01-05"}, {"uid": "user_e", "ymd": "2025-01-05"}])
    job.run_once()
    got = sink.scan_log().select("ymd", "uid", "uid_int32").sort("ymd", "uid").rows()
    assert got == [("2025-01-01", "user_a", 1), ("2025-01-02", "user_b", 2), ("2025-01-03", "user_a", 1),
                   ("2025-01-04", "user_c", 3), ("2025-01-05", "user_b", 2), ("2025-01-05", "user_e", 4)]


def test_lookup_join_insert_refusals(dictionary, tmp_path) -> None:
    conn = dictionary
    conn.create_table("d.orders", schema={"cid": "INT", "oid": "INT", "amount": "INT"}, primary_key=["cid", "oid"],
                      bucket_keys=["cid"], options={"lookup.insert-if-not-exists": "true"})
    with pytest.raises(fl.InvalidConfigError, match="primary-key lookups only.*insert_if_not_exists=False"):
        LookupJoin(conn.get_table("d.orders"), on={"customer": "cid"})
    assert LookupJoin(conn.get_table("d.orders"), on={"customer": "cid"}, insert_if_not_exists=False).mode == "prefix"
    conn.create_table("d.strict", descriptor=fl.TableDescriptor(fl.Schema.of(
        {"uid": "STRING", "label": "STRING"}, primary_key=["uid"], not_null=["label"])))
    with pytest.raises(fl.InvalidConfigError, match=r"NOT NULL columns \['label'\]"):
        LookupJoin(conn.get_table("d.strict"), on=["uid"], insert_if_not_exists=True)
    assert conn.get_table("d.strict").to_polars().height == 0


def test_dictionary_table_and_rbm32_count_distinct(dictionary) -> None:
    """Fluss's pattern (pk-table.md "Auto-Increment Column", aggregation.md rbm32): map string ids to dense INT
    ids with a dictionary table filled by the lookup join, then keep a RoaringBitmap of the ids per day with the
    rbm32 aggregation; the bitmap's cardinality is the day's count of distinct users."""
    from pyroaring import BitMap

    conn = dictionary
    conn.create_table("d.daily_uv", schema={"ymd": "STRING", "uv_bitmap": "BYTES"}, primary_key=["ymd"],
                      options={"table.merge-engine": "aggregation", "fields.uv_bitmap.agg": "rbm32"})
    mapping, uv = conn.get_table("d.uid_mapping"), conn.get_table("d.daily_uv")
    number = LookupJoin(mapping, on=["uid"], how="inner", insert_if_not_exists=True)
    batches = [pl.DataFrame({"ymd": [f"2025-01-0{1 + (i * 7 + b) % 3}" for i in range(50)],
                             "uid": [f"user_{(i * 13 + b * 5) % 37}" for i in range(50)]}) for b in range(4)]
    for batch in batches:
        ids = number.enrich(batch)
        per_day = ids.group_by("ymd").agg(pl.col("uid_int32"))
        uv.upsert([{"ymd": day, "uv_bitmap": BitMap(values).serialize()} for day, values in per_day.iter_rows()])
    counts = {day: len(BitMap.deserialize(bitmap)) for day, bitmap in uv.to_polars().iter_rows()}
    want = pl.concat(batches).group_by("ymd").agg(pl.col("uid").n_unique())
    assert counts == dict(want.iter_rows())
    ids = mapping.to_polars().get_column("uid_int32")
    assert sorted(ids.to_list()) == list(range(1, 38))  # dense: one range, 37 distinct users


def test_a_lookup_join_step_commits_one_checkpoint_while_records_keep_coming(lake) -> None:
    """While records wait, each step's finish rides on the next step's announcement; a run that leaves nothing
    waiting commits it before returning. A process that dies with records waiting leaves its last step announced:
    the restart replays it and writes nothing twice, and until then another process's status() counts it as lag."""
    clicks, enriched, users = lake.get_table("d.clicks"), lake.get_table("d.enriched"), lake.get_table("d.users")

    def job() -> LookupJoin:
        return LookupJoin(users, on={"user": "uid"}, columns=["name"], source=clicks, sink=enriched, name="steady",
                          batch_rows=6)

    def counted(j: LookupJoin) -> list[dict]:
        commits: list[dict] = []
        real = j.checkpoints.commit
        j.checkpoints.commit = lambda checkpoint: commits.append(checkpoint.extra) or real(checkpoint)
        return commits

    def send(round_: int) -> list[dict]:
        rows = [{"user": (round_ * 7 + i) % 60, "page": f"s{round_}-{i}"} for i in range(6)]
        clicks.append(rows)
        return rows

    j = job()
    commits = counted(j)
    sent = [row for round_ in range(5) for row in send(round_)]  # 30 records waiting, steps of 6
    for _ in range(4):
        assert j.run_once(max_steps=1).steps == 1
    assert len(commits) == 4 and all("pending" in extra for extra in commits)  # one per step: its announcement
    assert j.status().lag["source"] == 6  # this process knows its fourth step is finished
    assert job().status().lag["source"] == 12  # the stored checkpoint still announces it: 6 more
    restarted = job()  # as if the process had died here: the announced step is replayed, then the last one runs
    commits = counted(restarted)
    assert restarted.run_once().steps == 2
    assert len(commits) == 2 and "pending" in commits[0] and "pending" not in commits[1]  # announce 5; finish 5
    assert job().status().lag["source"] == 0
    sent += send(5)
    assert restarted.run_once(max_steps=1).steps == 1  # the step leaves nothing waiting: finished before returning
    assert len(commits) == 4 and "pending" not in commits[-1] and job().status().lag["source"] == 0
    got = enriched.scan_log().select("user", "page", "name").sort("page")
    want = _want(pl.DataFrame(sent, schema={"user": pl.Int64, "page": pl.String}), users, "left")
    assert got.equals(want.select("user", "page", "name").sort("page"))  # nothing written twice
