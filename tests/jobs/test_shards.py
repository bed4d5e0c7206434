"""Shards of a job: the assignment, bad arguments, the races between shards of a delta join (each made
deterministic here), reassignment between shard counts, two instances of one shard, partitions while sharded."""

from __future__ import annotations

import json
import threading

import polars as pl
import pytest
import shard_worker as w

import fluss_lake as fl
from fluss_lake.jobs import Aggregation, DeltaJoin, Join, Shard, StatefulJoin, join
from fluss_lake.keys.bucketing import buckets_of


@pytest.fixture
def conn(tmp_store) -> fl.Connection:
    c = fl.connect(tmp_store)
    w.create_tables(c)
    return c


def _bucket(conn: fl.Connection, table: str, row: dict) -> int:
    return int(buckets_of(conn.get_table(table).info, pl.DataFrame([row]))[0])


def _split_cid(conn: fl.Connection) -> int:
    """A customer id whose orders are read by shard 0 of 2 and whose customer row by shard 1."""
    for cid in range(100):
        if _bucket(conn, "d.orders", {"cid": cid}) % 2 == 0 and _bucket(conn, "d.customers", {"cid": cid}) % 2 == 1:
            return cid
    raise AssertionError("no such id")


def _view(conn: fl.Connection) -> list[dict]:
    return conn.get_table("d.view").to_polars().sort("cid", "oid").to_dicts()


# ------------------------------------------------------------------ the assignment and bad arguments
def test_every_pair_has_exactly_one_owner_the_same_in_every_process() -> None:
    for count in (1, 2, 3, 5):
        shards = Shard.all(count)
        for part in (None, "2026-01-01", "eu|x"):
            for bucket in range(16):
                assert sum(s.owns(part, bucket) for s in shards) == 1
    # fixed values: no per-process salt (crc32, not hash())
    assert [Shard(i, 3).owns("2026-01-01", 0) for i in range(3)] == [owner == i for owner in [_crc_owner()] for i in range(3)]
    assert [s.owns(None, 4) for s in Shard.all(3)] == [False, True, False]


def _crc_owner() -> int:
    import zlib

    return zlib.crc32(b"2026-01-01") % 3


@pytest.mark.parametrize("args", [(2, 2), (-1, 2), (0, 0), (True, 2), (0, 2.0), ("0", 2)])
def test_bad_shards_are_refused(args) -> None:
    with pytest.raises(fl.InvalidConfigError, match="Shard"):
        Shard(*args)


def test_a_job_refuses_a_shard_that_is_no_shard_and_a_stateful_join_refuses_any(conn) -> None:
    with pytest.raises(fl.InvalidConfigError, match="pass a fluss_lake.jobs.Shard"):
        w.build(conn, "join", (0, 2))  # type: ignore[arg-type]
    t = conn.get_table
    with pytest.raises(fl.JoinNotSupportedError, match="cannot be split into shards"):
        StatefulJoin(t("d.view"), {"o": t("d.orders"), "c": t("d.customers")}, [Join("o", "c", ["cid"])],
                     shard=Shard(0, 2))
    assert conn.store.list(".jobs") == []  # nothing written by a refused job


# ------------------------------------------------------------------ races between shards of a delta join
def test_a_shard_that_probed_before_another_shard_wrote_probes_again(conn) -> None:
    """Shard 0 probes customer c (name v1) for a new order; meanwhile c becomes v2 and shard 1 writes (c, v2);
    shard 0's write of (c, v1) would be stale: it sees shard 1's key in the journal and probes again."""
    cid = _split_cid(conn)
    conn.get_table("d.customers").upsert([{"cid": cid, "name": "v1"}])
    conn.get_table("d.orders").upsert([{"cid": cid, "oid": 1, "amount": 5}])
    first, second = w.build(conn, "join", Shard(0, 2)), w.build(conn, "join", Shard(1, 2))
    probed, go = threading.Event(), threading.Event()
    write = first._write

    def paused(*args):
        probed.set()
        assert go.wait(60)
        return write(*args)

    first._write = paused
    runner = threading.Thread(target=first.run_once)
    runner.start()
    assert probed.wait(60)
    conn.get_table("d.customers").upsert([{"cid": cid, "name": "v2"}])
    second.run_once()
    assert _view(conn) == [{"cid": cid, "oid": 1, "amount": 5, "name": "v2"}]
    go.set()
    runner.join(60)
    assert first.reprobes == 1
    assert _view(conn) == [{"cid": cid, "oid": 1, "amount": 5, "name": "v2"}]


def test_a_pair_deleted_on_both_sides_owned_by_two_shards_is_retracted(conn) -> None:
    cid = _split_cid(conn)
    conn.get_table("d.customers").upsert([{"cid": cid, "name": "ann"}])
    conn.get_table("d.orders").upsert([{"cid": cid, "oid": 1, "amount": 5}])
    shards = [w.build(conn, "join", s) for s in Shard.all(2)]
    for job in shards:
        job.run_once()
    assert len(_view(conn)) == 1
    conn.get_table("d.customers").delete([{"cid": cid}])
    conn.get_table("d.orders").delete([{"cid": cid, "oid": 1}])
    for job in shards:  # the order's shard first: it must know the customer's delete in the other's bucket
        job.run_once()
    assert _view(conn) == []


def test_a_lock_left_by_a_dead_instance_of_the_same_shard_is_taken_over(conn) -> None:
    conn.get_table("d.customers").upsert([{"cid": c, "name": "ann"} for c in range(6)])
    conn.get_table("d.orders").upsert([{"cid": c, "oid": 0, "amount": c} for c in range(6)])
    job = w.build(conn, "join", Shard(1, 2))
    lock = ".jobs/view/shards-2/write.lock"
    conn.store.put(lock, json.dumps({"shard": 1, "instance": "dead", "at": 1e12}).encode())  # fresh lease
    job.run_once()
    assert not conn.store.exists(lock)
    assert {r["cid"] for r in _view(conn)} == {c for c in range(6) if Shard(1, 2).owns(None, _bucket(conn, "d.orders", {"cid": c})) or Shard(1, 2).owns(None, _bucket(conn, "d.customers", {"cid": c}))}


# ------------------------------------------------------------------ reassignment
def _orders(conn: fl.Connection, start: int, n: int) -> None:
    conn.get_table("d.orders").upsert([{"cid": c % 6, "oid": c, "amount": 1} for c in range(start, start + n)])


def test_reassignment_1_2_3_1_loses_and_repeats_nothing(conn) -> None:
    _orders(conn, 0, 30)
    w.build(conn, "aggregation", None).run_once()
    for i, count in enumerate([2, 3, 1, 2]):
        _orders(conn, 30 * (i + 1), 30)
        jobs = [w.build(conn, "aggregation", s if count > 1 else None) for s in Shard.all(count)]
        for job in jobs:
            job.run_once()
            assert sum(job.lag().values()) == 0
        owned = [set(k for offs in job.status().offsets.values() for k in offs) for job in jobs]
        assert sum(len(o) for o in owned) == 4 and set().union(*owned) == {(None, b) for b in range(4)}
    totals = conn.get_table("d.spend").to_polars()
    assert totals["n"].sum() == 150 == conn.get_table("d.orders").to_polars().height  # each order counted once
    assert totals["total"].sum() == 150


def test_reassignment_is_refused_while_an_old_shard_stopped_inside_a_step(conn) -> None:
    _orders(conn, 0, 12)
    jobs = [w.build(conn, "aggregation", s) for s in Shard.all(2)]
    w._crash_on(jobs[0], 2)  # announced the step, wrote, then died before finishing it
    with pytest.raises(w.SimulatedCrash):
        jobs[0].run_once()
    jobs[1].run_once()
    with pytest.raises(fl.JobStateError, match=r"stopped inside a step.*run it once more"):
        w.build(conn, "aggregation", Shard(0, 3))
    assert not conn.store.exists(".jobs/spend/layouts/000002.json")  # nothing claimed
    w.build(conn, "aggregation", Shard(0, 2)).run_once()  # the replay finishes the step
    jobs3 = [w.build(conn, "aggregation", s) for s in Shard.all(3)]
    for job in jobs3:
        job.run_once()
    assert conn.get_table("d.spend").to_polars()["n"].sum() == 12


def test_an_incomplete_layout_is_not_a_source_and_an_old_shard_is_fenced(conn) -> None:
    _orders(conn, 0, 12)
    old = w.build(conn, "aggregation", None)
    old.run_once()
    w.build(conn, "aggregation", Shard(0, 2))  # the reassignment to 2 began (shard 1 of 2 not yet)
    with pytest.raises(fl.JobStateError, match=r"no checkpoint of shard\(s\) \[1\]"):
        w.build(conn, "aggregation", Shard(0, 3))
    with pytest.raises(fl.JobStateError, match=r"no checkpoint of shard\(s\) \[1\]"):
        w.build(conn, "aggregation", None)
    _orders(conn, 12, 12)
    with pytest.raises(fl.JobStateError, match="reassigned"):  # the unsharded instance still running stops
        old.run_once()
    for job in [w.build(conn, "aggregation", s) for s in Shard.all(2)]:
        job.run_once()
    assert conn.get_table("d.spend").to_polars()["n"].sum() == 24


def test_two_instances_of_one_shard_one_commits_the_other_stops(conn) -> None:
    _orders(conn, 0, 12)
    a, b = w.build(conn, "join", Shard(0, 2)), w.build(conn, "join", Shard(0, 2))
    a.run_once()
    with pytest.raises(fl.JobConflictError, match="shard 0/2 of this job"):
        b.run_once()
    w.build(conn, "join", Shard(0, 2)).run_once()  # a new instance resumes from the winner's checkpoint


# ------------------------------------------------------------------ partitions while sharded
def test_partitions_created_and_dropped_while_sharded(tmp_store) -> None:
    conn = fl.connect(tmp_store)
    conn.create_database("d")
    conn.create_table("d.ev", schema={"day": "STRING", "k": "INT", "v": "BIGINT"}, partition_keys=["day"],
                      bucket_num=3, bucket_keys=["k"])
    conn.create_table("d.tot", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"],
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    ev = conn.get_table("d.ev")

    def shards(count):
        return [Aggregation(conn.get_table("d.ev"), conn.get_table("d.tot"), group_by=["k"],
                            aggregates={"v": ("sum", "v")}, name="tot", shard=s) for s in Shard.all(count)]

    expected = 0
    for day in ["a", "b", "c"]:
        conn.create_partition("d.ev", {"day": day})
        ev.append([{"day": day, "k": k, "v": 1} for k in range(9)])
        expected += 9
    jobs = shards(2)
    jobs[0].run_once()
    conn.drop_partition("d.ev", {"day": "a"})  # shard 1 never read it: its rows are gone (as in Fluss)
    dropped_unread = sum(1 for k in range(9)
                         if Shard(1, 2).owns("a", _bucket(conn, "d.ev", {"day": "a", "k": k})))
    conn.create_partition("d.ev", {"day": "d"})
    ev.append([{"day": "d", "k": k, "v": 1} for k in range(9)])
    expected += 9
    jobs[1].run_once()
    jobs[0].run_once()
    for job in shards(3):  # reassigned with partitions the old shards saw differently
        job.run_once()
        assert sum(job.lag().values()) == 0
    assert conn.get_table("d.tot").to_polars()["v"].sum() == expected - dropped_unread


def test_join_of_sharded_delta_join_via_join_function(conn) -> None:
    t = conn.get_table
    job = join(t("d.view"), {"o": t("d.orders"), "c": t("d.customers")}, [Join("o", "c", ["cid"])], name="v2",
               shard=Shard(1, 2))
    assert isinstance(job, DeltaJoin) and job.shard == Shard(1, 2)


def test_reset_forgets_every_shard_and_check_verifies_shard_checkpoints(conn) -> None:
    from fluss_lake.runtime.verification import verify_jobs

    _orders(conn, 0, 12)
    jobs = [w.build(conn, "aggregation", s) for s in Shard.all(2)]
    for job in jobs:
        job.run_once()
    report = verify_jobs(conn.store)
    assert report.checked >= 2 + 2 + 1 and not report.damage  # two checkpoints per shard and the layout marker
    key = ".jobs/spend/shards-2/1/" + conn.store.list(".jobs/spend/shards-2/1")[-1]
    conn.store.put(key, conn.store.get(key)[:-3] + b"xx}")
    assert [d.kind for d in verify_jobs(conn.store).damage] == ["job"]
    jobs[0].reset()
    assert conn.store.list(".jobs/spend") == []
    for job in [w.build(conn, "aggregation", s) for s in Shard.all(2)]:
        job.run_once()
    assert conn.get_table("d.spend").to_polars()["n"].sum() == 24  # counted again from the start: reset


def test_sharded_lookup_join_appends_every_record_once_with_a_replay(tmp_store) -> None:
    from fluss_lake.jobs import LookupJoin

    conn = fl.connect(tmp_store)
    conn.create_database("d")
    conn.create_table("d.users", schema={"uid": "INT", "name": "STRING"}, primary_key=["uid"])
    conn.create_table("d.clicks", schema={"uid": "INT", "page": "INT"}, bucket_num=4, bucket_keys=["uid"])
    conn.create_table("d.out", schema={"uid": "INT", "page": "INT", "name": "STRING"})
    conn.get_table("d.users").upsert([{"uid": u, "name": f"u{u}"} for u in range(10)])
    conn.get_table("d.clicks").append([{"uid": u % 10, "page": u} for u in range(40)])

    def shard(s):
        t = conn.get_table
        return LookupJoin(t("d.users"), on=["uid"], source=t("d.clicks"), sink=t("d.out"), name="enrich", shard=s,
                          batch_rows=7)

    first = shard(Shard(0, 2))
    w._crash_on(first, 2)  # the first step was announced and written; finishing it fails: it is replayed
    with pytest.raises(w.SimulatedCrash):
        first.run_once()
    for s in Shard.all(2):
        shard(s).run_once()
    out = conn.get_table("d.out").to_polars().sort("page")
    assert out["page"].to_list() == list(range(40))  # each record once
    assert out["name"].to_list() == [f"u{p % 10}" for p in range(40)]
    with pytest.raises(fl.InvalidConfigError, match="no source"):
        LookupJoin(conn.get_table("d.users"), on=["uid"], shard=Shard(0, 2))


def test_never_ran_tells_a_new_shard_from_one_that_consumed(conn) -> None:
    assert w.build(conn, "aggregation", None).never_ran
    first = w.build(conn, "aggregation", Shard(0, 2))
    assert first.never_ran and first.checkpoint.number == 0  # committed at construction, consumed nothing
    assert w.build(conn, "aggregation", Shard(0, 2)).never_ran  # the same, restarted
    _orders(conn, 0, 12)
    first.run_once()
    assert not first.never_ran and not w.build(conn, "aggregation", Shard(0, 2)).never_ran
    for job in [w.build(conn, "aggregation", s) for s in Shard.all(2)[1:]]:
        assert job.never_ran
    assert not any(job.never_ran for job in [w.build(conn, "aggregation", s) for s in Shard.all(3)])


@pytest.mark.parametrize(
    ("customers", "orders_bucket_keys", "expected"),
    [
        ({"bucket_num": 4}, ["cid"], True),
        ({"bucket_num": 3}, ["cid"], False),  # bucket counts differ
        ({"bucket_num": 4, "schema": {"cid": "BIGINT", "name": "STRING"}}, ["cid"], False),  # key types differ
        ({"bucket_num": 4, "options": {"table.datalake.format": "iceberg"}}, ["cid"], False),  # other bucketing
    ],
)
def test_co_partitioned_joins_are_recognised(tmp_path, customers, orders_bucket_keys, expected) -> None:
    """Only a join whose every edge equates both sides' bucket keys, alike bucketed, skips the write lock."""
    from fluss_lake.jobs.delta_join import co_partitioned

    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.o", schema={"cid": "INT", "oid": "INT", "x": "INT"}, primary_key=["cid", "oid"],
                      bucket_keys=orders_bucket_keys, bucket_num=4)
    conn.create_table("d.c", **{"schema": {"cid": "INT", "name": "STRING"}, "primary_key": ["cid"], **customers})
    conn.create_table("d.r", schema={"cid": "INT", "oid": "INT", "x": "INT", "name": "STRING"},
                      primary_key=["cid", "oid"])
    t = conn.get_table
    job = DeltaJoin(t("d.r"), {"o": t("d.o"), "c": t("d.c")}, [Join("o", "c", ["cid"])], shard=Shard(0, 2))
    assert co_partitioned(job.plan) is expected
    assert job.co_partitioned is expected
    assert (job._journal is None) is expected
