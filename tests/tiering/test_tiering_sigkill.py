"""Tiering processes killed with SIGKILL at random moments, with writers running: the lake ends up equal to the
live tables, with no duplicate and no missing record.

To make 30+ kills cheap, a "zygote" process imports fluss_lake, tiering and pyiceberg once (and warms
pyiceberg up without touching Polars, whose thread pool must not exist before fork) and forks a fresh
tiering process on demand (each runs ``tier_once`` rounds in a loop); the test SIGKILLs the forked process a
random 0-1.5 s after asking for it, which lands before, inside and after rounds (catalog loads, data file
writes, the catalog commit). Writers keep appending and upserting in this process all along, including into a
partitioned primary-key table whose writes open a new partition every few hundred rows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import polars as pl
import pytest
from tiering_helpers import LAKE_ON, lake_rows, sorted_rows

from tiering import tier_once

KILLS = 32

ZYGOTE = r"""
import json, os, sys
args = json.loads(sys.argv[1])
import fluss_lake as fl
import tiering
import tempfile
import pyarrow as pa
import pyiceberg.catalog.sql, pyiceberg.io.pyarrow, pyiceberg.table, pyiceberg.expressions  # noqa: F401
import sqlite3, rich.console, rich.table, sqlalchemy.dialects.sqlite, pyarrow.acero, numpy.ma  # noqa: F401
# warm pyiceberg up on a scratch catalog (pyarrow only: Polars must not start its thread pool before fork())
schema = pa.schema([pa.field("a", pa.int32(), False)])
scratch = tiering.Lake.local(tempfile.mkdtemp()).catalog
scratch.create_namespace("w")
warm = scratch.create_table("w.t", schema=schema)
warm.append(pa.table({"a": pa.array([1], pa.int32())}, schema=schema))
list(warm.scan().plan_files())
def say(text):
    os.write(1, (text + "\n").encode())  # one write per line: the forked processes share this pipe
say("ready")
for line in sys.stdin:
    command = line.split()
    if command[0] == "fork":
        pid = os.fork()
        if pid == 0:
            try:
                conn = fl.connect(args["url"], local_dir=os.path.join(args["local_dir"], str(os.getpid())))
                lake = tiering.Lake(args["lake"])
                n = 0
                while True:
                    say(f"start {os.getpid()} {n}")
                    reports = tiering.tier_once(conn, lake)
                    n += 1
                    say(f"round {os.getpid()} {n} {sum(r.rows for r in reports)}")
            finally:
                os._exit(3)
        say(f"pid {pid}")
    elif command[0] == "reap":
        while True:
            try:
                child, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if child == 0:
                break
"""


@pytest.mark.slow
def test_sigkilled_tiering_with_writers_ends_with_lake_equal_to_live(local, tmp_path):
    conn, lake = local
    conn.create_table("d.ev", schema={"id": "BIGINT", "w": "INT"}, bucket_num=2, bucket_keys=["id"], options=LAKE_ON)
    conn.create_table("d.kv", schema={"k": "INT", "n": "BIGINT", "s": "STRING"}, primary_key=["k"], bucket_num=2,
                      options=LAKE_ON)
    conn.create_table("d.pk", schema={"day": "STRING", "k": "INT", "n": "BIGINT"}, primary_key=["day", "k"],
                      partition_keys=["day"], bucket_num=2, options=LAKE_ON)
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        ev, kv, pk = conn.get_table("d.ev"), conn.get_table("d.kv"), conn.get_table("d.pk")
        i = 0
        while not stop.is_set():
            ev.append([{"id": i, "w": 0}, {"id": i + 1, "w": 1}])
            kv.upsert([{"k": i % 23, "n": i, "s": f"s{i}"}])
            day = f"d{i // 300:03d}"  # a new partition every 150 rounds, created by the write
            pk.upsert([{"day": day, "k": i % 11, "n": i}, {"day": "d000", "k": i % 5, "n": i}])
            if i % 10 == 4:
                kv.delete([{"k": (i * 7) % 23}])
                pk.delete([{"day": day, "k": (i * 3) % 11}])
            i += 2
            written[0] = i
            stop.wait(0.004)

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    args = {"url": conn.url, "local_dir": str(tmp_path / "tierers"), "lake": lake.properties}
    zygote = subprocess.Popen([sys.executable, "-c", ZYGOTE, json.dumps(args)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []
    got_line = threading.Condition()

    def read() -> None:
        for line in zygote.stdout:
            with got_line:
                lines.append(line.strip())
                got_line.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait_for(prefix: str, after: int) -> str:
        with got_line:
            ok = got_line.wait_for(lambda: any(ln.startswith(prefix) for ln in lines[after:]), timeout=60)
        assert ok, f"zygote said nothing starting with {prefix!r}: {zygote.stderr.read() if zygote.poll() is not None else lines[-5:]}"
        return next(ln for ln in lines[after:] if ln.startswith(prefix))

    writers = threading.Thread(target=writer)
    rng = random.Random(20261129)
    kills = 0
    try:
        wait_for("ready", 0)
        writers.start()
        while kills < KILLS:
            mark = len(lines)
            zygote.stdin.write("fork\n")
            zygote.stdin.flush()
            pid = int(wait_for("pid ", mark).split()[1])
            time.sleep(rng.uniform(0.0, 0.5) if rng.random() < 0.5 else rng.uniform(0.5, 1.5))
            os.kill(pid, signal.SIGKILL)
            kills += 1
            zygote.stdin.write("reap\n")
            zygote.stdin.flush()
    finally:
        stop.set()
        if writers.is_alive():
            writers.join()
        zygote.stdin.close()
        zygote.wait(30)
        reader.join(30)
        zygote.stdout.close()
        zygote.stderr.close()
    rounds = [ln for ln in lines if ln.startswith("round ")]
    started = [ln for ln in lines if ln.startswith("start ")]
    assert kills >= 30
    assert len(rounds) >= 3, f"only {len(rounds)} rounds completed between kills"
    assert len(started) > len(rounds)  # some kills landed inside a round
    assert written[0] > 100

    # the lake was left by killed processes only; now let a round finish
    tier_once(conn, lake)
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    lake_ev = lake_rows(lake, "d.ev")
    assert lake_ev.select("__bucket", "__offset").is_duplicated().sum() == 0, "duplicates in the lake"
    live_ev = ev.scan_log().rename({"_bucket": "__bucket", "_offset": "__offset"})
    assert sorted_rows(lake_ev, ["__bucket", "__offset", "id", "w"]) == sorted_rows(live_ev, ["__bucket", "__offset", "id", "w"])
    assert sorted_rows(lake_rows(lake, "d.kv"), ["k", "n", "s"]) == sorted_rows(kv.to_polars(), ["k", "n", "s"])
    history = lake_rows(lake, "d.kv", "history")
    live_changelog = kv.scan_log().rename({"_bucket": "__bucket", "_offset": "__offset"}).with_columns(
        pl.col("_change_type").cast(pl.String).alias("__change_type"))
    assert history.select("__bucket", "__offset").is_duplicated().sum() == 0
    cols = ["__bucket", "__offset", "__change_type", "k", "n", "s"]
    assert sorted_rows(history, cols) == sorted_rows(live_changelog, cols), "history has gaps or extra rows"
    for path in ("d.ev", "d.kv"):
        assert lake.snapshot(path).bucket_offsets() == conn.get_table(path).end_offsets()
    # the partitioned table: state, history and offsets per (partition, bucket), every partition picked up
    pk = conn.get_table("d.pk")
    assert len(pk.list_partitions()) >= 2
    assert sorted_rows(lake_rows(lake, "d.pk"), ["day", "k", "n"]) == sorted_rows(pk.to_polars(), ["day", "k", "n"])
    pk_history = lake_rows(lake, "d.pk", "history")
    assert pk_history.select("day", "__bucket", "__offset").is_duplicated().sum() == 0
    pk_log = pk.scan_log().rename({"_bucket": "__bucket", "_offset": "__offset"}).with_columns(
        pl.col("_change_type").cast(pl.String).alias("__change_type"))
    cols = ["day", "__bucket", "__offset", "__change_type", "k", "n"]
    assert sorted_rows(pk_history, cols) == sorted_rows(pk_log, cols)
    for kind in ("log", "history"):
        assert dict(lake.snapshot("d.pk", kind).offsets) == pk.end_offsets()
    print(f"{kills} kills, {len(rounds)} completed rounds of {len(started)} started, {written[0]} rows written")
