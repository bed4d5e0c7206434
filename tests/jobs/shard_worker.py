"""A worker process for the shard tests: runs shards of a job on command, so shards run truly concurrently in
separate processes (started with ``multiprocessing`` spawn) while the test writes the inputs.

Commands (tuples on the worker's queue): ``("run", root, kind, index, count, crash_at)`` builds the job for
``Shard(index, count)`` on the store at `root` and runs it once; with `crash_at` = n its n-th checkpoint commit
raises first (the process's job object is lost after writing results but before committing: a crash, replayed by
the next run). ``("loop", root, kind, index, count, seconds)`` runs it continuously. ``("stop",)`` ends the
worker. Each command answers ``("ok", index, report)`` or ``("crashed", index, message)``.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import fluss_lake as fl
from fluss_lake.jobs import Aggregation, DeltaJoin, Join, Shard

ORDERS = {"cid": "INT", "oid": "INT", "amount": "INT"}
CUSTOMERS = {"cid": "INT", "name": "STRING"}
VIEW = {"cid": "INT", "oid": "INT", "amount": "INT", "name": "STRING"}


#: the joins under test: customers bucketed unlike the orders (the write lock and journal), or alike (neither)
JOINS = {"join": ("d.view", "d.customers", "view"), "cojoin": ("d.coview", "d.customers4", "coview")}


class SimulatedCrash(Exception):
    """Stands for the shard's process dying after it wrote results and before its checkpoint landed."""


def create_tables(conn: fl.Connection) -> None:
    """The inputs of the join and the aggregation, and their result tables."""
    conn.create_database("d")
    conn.create_table("d.orders", schema=ORDERS, primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=4)
    conn.create_table("d.customers", schema=CUSTOMERS, primary_key=["cid"], bucket_num=3)
    conn.create_table("d.view", schema=VIEW, primary_key=["cid", "oid"], bucket_num=2)
    # the same customers bucketed as the orders are (4 buckets by cid): a co-partitioned join, no write lock
    conn.create_table("d.customers4", schema=CUSTOMERS, primary_key=["cid"], bucket_num=4)
    conn.create_table("d.coview", schema=VIEW, primary_key=["cid", "oid"], bucket_num=3)
    conn.create_table(
        "d.spend",
        schema={"cid": "INT", "n": "BIGINT", "total": "BIGINT"},
        primary_key=["cid"],
        options={"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.total.agg": "sum"},
    )


def build(conn: fl.Connection, kind: str, shard: Shard | None) -> Any:
    """The job under test for `shard` (one name per kind: all shards of one job)."""
    t = conn.get_table
    if kind in JOINS:  # the result table, the customers it joins, the job's name
        result, customers, name = JOINS[kind]
        return DeltaJoin(
            t(result),
            {"o": t("d.orders"), "c": t(customers)},
            [Join("o", "c", ["cid"])],
            name=name,
            batch_rows=3,  # several steps per run: more interleavings between the shards
            shard=shard,
        )
    return Aggregation(
        t("d.orders"),
        t("d.spend"),
        group_by=["cid"],
        aggregates={"n": ("count", None), "total": ("sum", "amount")},
        name="spend",
        batch_rows=3,
        shard=shard,
    )


def _crash_on(job: Any, n: int) -> None:
    commit = job.checkpoints.commit
    calls = {"n": 0}

    def failing(checkpoint: Any) -> None:
        calls["n"] += 1
        if calls["n"] == n:
            raise SimulatedCrash(f"crash before checkpoint commit {n}")
        commit(checkpoint)

    job.checkpoints.commit = failing


def serve(commands: Any, answers: Any) -> None:
    """The worker's loop (the target of the spawned process)."""
    while True:
        try:
            command = commands.get(timeout=300)
        except queue.Empty:
            return
        if command[0] == "stop":
            return
        _, root, kind, index, count, arg = command
        try:
            conn = fl.connect(root)
            shard = Shard(index, count) if count > 1 else None
            job = build(conn, kind, shard)
            if command[0] == "loop":
                deadline = time.monotonic() + arg
                while time.monotonic() < deadline:
                    job.run_once()
                answers.put(("ok", index, None))
                continue
            if arg:
                _crash_on(job, arg)
            report = job.run_once()
            answers.put(("ok", index, report.records_read))
        except SimulatedCrash as exc:
            answers.put(("crashed", index, str(exc)))
        except Exception as exc:  # noqa: BLE001 - the test shows what failed in the worker
            answers.put(("error", index, f"{type(exc).__name__}: {exc}"))
