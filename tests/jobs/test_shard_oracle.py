"""The proof of sharded jobs: for random interleavings of inserts, updates and deletes on both inputs, written
while 1, 2 or 3 shards run in two separate processes (changing the shard count between rounds, so buckets are
reassigned from the checkpoints), with crashes and replays, the delta join's result table equals the batch join
of the inputs' current states, and the aggregation's totals equal the group-by of the source's current state.

A last test SIGKILLs a shard's process while it runs continuously and the inputs change, then resumes it.

The shards of a round run concurrently in worker processes (``shard_worker``, multiprocessing spawn) while the test
writes more changes to both inputs. A crash makes a shard's checkpoint commit fail after it wrote its results (its
job object is lost: the next run replays the step). After the rounds every shard runs until it caught up.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import time

import polars as pl
import pytest
from polars.testing import assert_frame_equal
import shard_worker as w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.jobs import Shard

WORKERS = 2

op = st.one_of(
    st.tuples(st.just("o"), st.integers(0, 5), st.integers(0, 2), st.one_of(st.none(), st.integers(1, 9))),
    st.tuples(st.just("c"), st.integers(0, 5), st.just(0), st.one_of(st.none(), st.sampled_from(["ann", "bob"]))),
)
round_ = st.tuples(
    st.sampled_from([1, 2, 3]),  # shard count of this round
    st.lists(op, max_size=6),  # written before the shards start
    st.lists(op, max_size=6),  # written while they run
    st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(1, 3))),  # (shard, its n-th commit fails)
)


@pytest.fixture(scope="module")
def workers():
    ctx = mp.get_context("spawn")
    pool = []
    for _ in range(WORKERS):
        commands, answers = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=w.serve, args=(commands, answers), daemon=True)
        proc.start()
        pool.append((proc, commands, answers))
    yield pool
    for proc, commands, _ in pool:
        commands.put(("stop",))
        proc.join(30)


def _apply(conn: fl.Connection, ops) -> None:
    orders, customers = conn.get_table("d.orders"), conn.get_table("d.customers")
    customers4 = conn.get_table("d.customers4")
    for table, cid, oid, value in ops:
        if table == "o":
            if value is None:
                orders.delete([{"cid": cid, "oid": oid}])
            else:
                orders.upsert([{"cid": cid, "oid": oid, "amount": value}])
        else:
            for table in (customers, customers4):  # the same rows in both layouts
                if value is None:
                    table.delete([{"cid": cid}])
                else:
                    table.upsert([{"cid": cid, "name": value}])


def _round(pool, root: str, kind: str, count: int, crash, conn: fl.Connection, during) -> None:
    """Run every shard of `count` once, spread over the workers, while `during` is written."""
    sent = []
    for index in range(count):
        crash_at = crash[1] if crash is not None and crash[0] == index else None
        proc, commands, answers = pool[index % len(pool)]
        commands.put(("run", root, kind, index, count, crash_at))
        sent.append(index)
    _apply(conn, during)
    crashed = []
    for index in sent:
        status, who, detail = pool[index % len(pool)][2].get(timeout=120)
        assert status != "error", detail
        if status == "crashed":
            crashed.append(who)
    for index in crashed:  # the crashed shard is started again: it replays from its checkpoint
        commands, answers = pool[index % len(pool)][1:]
        commands.put(("run", root, kind, index, count, None))
        status, _, detail = answers.get(timeout=120)
        assert status == "ok", detail


def _catch_up(conn: fl.Connection, kind: str, count: int) -> None:
    for _ in range(3):
        jobs = [w.build(conn, kind, s if count > 1 else None) for s in Shard.all(count)]
        for job in jobs:
            job.run_once()
        if not any(sum(job.lag().values()) for job in jobs):
            return
    raise AssertionError("the shards did not catch up")


def _check(conn: fl.Connection, kind: str) -> None:
    orders = conn.get_table("d.orders").to_polars()
    customers = conn.get_table("d.customers").to_polars()
    if kind in ("join", "cojoin"):
        assert_frame_equal(conn.get_table("d.customers4").to_polars().sort("cid"), customers.sort("cid"))
        expected = orders.join(customers, on="cid", how="inner").select(list(w.VIEW))
        view = "d.view" if kind == "join" else "d.coview"
        got = conn.get_table(view).to_polars().select(list(w.VIEW))
    else:
        expected = orders.group_by("cid").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("amount").sum().cast(pl.Int64).alias("total"))
        got = conn.get_table("d.spend").to_polars().filter(pl.col("n") != 0).select("cid", "n", "total")
    key = ["cid"] if kind == "aggregation" else ["cid", "oid"]
    assert got.sort(key).to_dicts() == expected.sort(key).to_dicts()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["join", "cojoin", "aggregation"])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(round_, min_size=2, max_size=4))
def test_sharded_jobs_in_processes_equal_the_batch_result(workers, kind, rounds) -> None:
    with tempfile.TemporaryDirectory() as root:
        conn = fl.connect(root)
        w.create_tables(conn)
        count = 1
        for count, before, during, crash in rounds:
            _apply(conn, before)
            _round(workers, root, kind, count, crash, conn, during)
        _catch_up(conn, kind, count)
        _check(conn, kind)
        if kind == "cojoin":  # co-partitioned: the shards never took the write lock nor kept a journal
            assert w.build(conn, kind, Shard(0, 2)).co_partitioned
            for n in (2, 3):  # (the other layout's join keeps its journal there: tests/jobs/test_shards.py)
                assert conn.store.list(f".jobs/coview/shards-{n}/journal") == []


@pytest.mark.slow
def test_a_shard_killed_mid_run_resumes_and_the_join_is_exact(workers, tmp_path) -> None:
    """Shard 0 of 2 runs continuously in a process that is SIGKILLed while the inputs change (it may hold the
    write lock or be between its result write and its checkpoint); started again, it resumes from its checkpoint
    (taking its dead instance's lock over) and after catching up the result equals the batch join."""
    root = str(tmp_path / "store")
    conn = fl.connect(root)
    w.create_tables(conn)
    _apply(conn, [("c", c, 0, "ann") for c in range(6)] + [("o", c, o, c + o) for c in range(6) for o in range(2)])
    ctx = mp.get_context("spawn")
    commands, answers = ctx.Queue(), ctx.Queue()
    victim = ctx.Process(target=w.serve, args=(commands, answers), daemon=True)
    victim.start()
    commands.put(("loop", root, "join", 0, 2, 60.0))
    _, other_commands, other_answers = workers[1]
    other_commands.put(("loop", root, "join", 1, 2, 4.0))
    deadline = time.monotonic() + 60
    while not conn.store.list(".jobs/view/shards-2/0") and time.monotonic() < deadline:
        time.sleep(0.05)  # shard 0 is running once its first checkpoint is there
    for i in range(12):
        _apply(conn, [("o", i % 6, i % 3, i), ("c", (i * 5) % 6, 0, None if i % 4 == 0 else "bob")])
        if i == 6:
            os.kill(victim.pid, signal.SIGKILL)
    victim.join(30)
    assert victim.exitcode == -signal.SIGKILL
    assert other_answers.get(timeout=120)[0] == "ok"
    _catch_up(conn, "join", 2)
    _check(conn, "join")
