"""A shard's worker process sized to what the shard owns, in a plain process (no cluster needed): the memtable
budget scaled to its share of the buckets when it writes only its own result buckets, kept otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.jobs import DeltaJoin, Join, Shard
from fluss_lake.kv import memtable_budget
from fluss_ray import Store
from fluss_ray.jobs import ShardRunner, _run_shard_once, fit_memtable_budget, shard_share, writes_own_buckets

_MIB = 1 << 20


@pytest.fixture(autouse=True)
def _budget_back() -> Iterator[None]:
    """These tests set the process-wide budget (as a worker does); give the test process its own back."""
    before = memtable_budget.limit_bytes()
    yield
    memtable_budget.set_limit_bytes(before)


def _inputs(path: str, *, buckets: int = 4, rows: int = 0) -> fl.Connection:
    conn = fl.connect(path)
    conn.create_database("d")
    conn.create_table("d.orders", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE"},
                      primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=buckets)
    conn.create_table("d.customers", schema={"cid": "BIGINT", "name": "STRING"}, primary_key=["cid"],
                      bucket_num=buckets)
    view = {"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE", "name": "STRING"}
    # bucketed by the join key as the inputs: each shard writes its own buckets; by the whole key: every bucket
    conn.create_table("d.view", schema=view, primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=buckets)
    conn.create_table("d.view_by_key", schema=view, primary_key=["cid", "oid"], bucket_num=buckets)
    if rows:
        for start in range(0, rows, 100):  # a changelog of many small batches: the job's backlog
            ids = list(range(start, start + 100))
            conn.get_table("d.orders").upsert(pl.DataFrame({"cid": [i % 37 for i in ids], "oid": ids,
                                                            "amount": [float(i) for i in ids]}))
        conn.get_table("d.customers").upsert(pl.DataFrame({"cid": list(range(0, 37, 2)),
                                                           "name": [f"c{i}" for i in range(0, 37, 2)]}))
    return conn


def make_join(connection: fl.Connection, shard: Any, name: str = "view", result: str = "d.view") -> DeltaJoin:
    return DeltaJoin(connection.get_table(result),
                     {"o": connection.get_table("d.orders"), "c": connection.get_table("d.customers")},
                     [Join("o", "c", ["cid"], how="left")], batch_rows=50, shard=shard, name=name)


def test_a_shards_memtable_budget_follows_the_buckets_it_owns(tmp_path):
    conn = _inputs(str(tmp_path))
    names = iter(range(1000))

    def job(shard: Shard | None) -> DeltaJoin:  # a job of its own per shard count (no reassignment between them)
        return make_join(conn, shard, name=f"j{next(names)}")

    default = memtable_budget.DEFAULT_LIMIT_BYTES
    assert [shard_share(job(s)) for s in [None, *Shard.all(2)]] == [1.0, 0.5, 0.5]
    assert [shard_share(job(s)) for s in Shard.all(3)] == [0.5, 0.25, 0.25]
    memtable_budget.set_limit_bytes(default)
    assert fit_memtable_budget(job(None)) == default  # one shard: the whole default
    memtable_budget.set_limit_bytes(default)
    assert fit_memtable_budget(job(Shard(1, 2))) == default // 2 == memtable_budget.limit_bytes()
    memtable_budget.set_limit_bytes(default)
    assert fit_memtable_budget(job(Shard(0, 8))) == memtable_budget.MIN_SHARE_LIMIT_BYTES  # the floor
    assert shard_share(job(Shard(7, 8))) == 0.0  # more shards than buckets: an idle shard
    assert fit_memtable_budget(job(Shard(7, 8))) == memtable_budget.MIN_SHARE_LIMIT_BYTES
    assert fit_memtable_budget(job(Shard(0, 2)), 3 * _MIB) == 3 * _MIB  # asked for: exactly that
    memtable_budget.set_limit_bytes(default)
    by_key = make_join(conn, Shard(0, 2), name="by-key", result="d.view_by_key")
    assert writes_own_buckets(job(Shard(0, 2))) and not writes_own_buckets(by_key)
    assert not writes_own_buckets(job(None))
    assert fit_memtable_budget(by_key) == default  # it writes every result bucket, as the whole job: kept
    store = Store(str(tmp_path))
    memtable_budget.set_limit_bytes(default)
    ShardRunner(store, make_join, 0, 2, poll_interval=0.01).stop()  # shards as threads of one process: kept
    assert memtable_budget.limit_bytes() == default
    ShardRunner(store, make_join, 0, 2, poll_interval=0.01, own_process=True).stop()  # an actor's process: sized
    assert memtable_budget.limit_bytes() == default // 2
    with pytest.raises(InvalidConfigError, match="memtable_bytes"):
        fit_memtable_budget(job(Shard(0, 2)), 0)
    with pytest.raises(InvalidConfigError, match="share"):
        memtable_budget.for_share(0.0)


def test_a_shard_task_runs_with_its_share_and_gives_the_workers_budget_back(tmp_path):
    _inputs(str(tmp_path), rows=300)
    seen: list[int] = []

    def make(connection: fl.Connection, shard: Any) -> DeltaJoin:
        job = make_join(connection, shard)
        run_once = job.run_once

        def recorded(**kwargs: Any) -> Any:
            seen.append(memtable_budget.limit_bytes())
            return run_once(**kwargs)

        job.run_once = recorded  # type: ignore[method-assign]
        return job

    memtable_budget.set_limit_bytes(12 * _MIB)
    reports = [_run_shard_once(Store(str(tmp_path)), make, i, 2, None, None) for i in range(2)]
    assert seen == [6 * _MIB, 6 * _MIB]  # half of the worker's budget while each shard ran
    assert memtable_budget.limit_bytes() == 12 * _MIB
    assert sum(r.records_read for r in reports) == 300 + 19
