"""A writer killed with SIGKILL at random moments loses no acknowledged write and leaves a readable table.

The child writes one batch per loop iteration to a one-bucket primary-key table (``sum`` aggregation) and
prints the batch number only after ``upsert`` returned. Batch ``n`` inserts key ``n`` and adds 1 to a counter
key, so a batch that is half there would show as a key without its counter increment (or the reverse).
Snapshots are taken every few offsets, so kills also land while segments and manifests are being written.
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

import fluss_lake as fl

COUNTER = -1

WRITER = r"""
import json, sys
import fluss_lake as fl

args = json.loads(sys.argv[1])
conn = fl.connect(args["url"], local_dir=args["local_dir"], snapshot_every=args["snapshot_every"])
table = conn.get_table("d.pk")
n = args["start"]
while True:
    table.upsert([{"k": n, "v": 1}, {"k": -1, "v": 1}])
    print(n, flush=True)
    n += 1
"""


def run_and_kill(url: str, local_dir: str, start: int, rng: random.Random) -> list[int]:
    """Start a writer at batch `start`, SIGKILL it at a random moment after its first ack; returns its acks."""
    args = {"url": url, "local_dir": local_dir, "start": start, "snapshot_every": 5}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    acks: list[int] = []
    first = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            acks.append(int(line))
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not first.wait(60):
            raise AssertionError(f"writer never acknowledged a write: {proc.stderr.read() if proc.poll() is not None else ''}")
        time.sleep(rng.uniform(0.0, 0.6))
        assert proc.poll() is None, f"writer died on its own:\n{proc.stderr.read()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return list(acks)


@pytest.mark.slow
def test_sigkilled_writer_loses_no_acknowledged_write(tmp_store, tmp_path, changelog_replay):
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "admin"))
    conn.create_database("d")
    conn.create_table("d.pk", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=1,
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    rng = random.Random(20261129)
    runs = []
    start = 0
    for kill in range(5):
        acks = run_and_kill(tmp_store, str(tmp_path / f"writer-{kill}"), start, rng)
        assert acks == list(range(start, start + len(acks)))
        runs.append(acks)
        # the batch after the last ack may or may not have been committed before the kill: skip its number
        start += len(acks) + 1

    # Leftovers a killed writer can leave: half-written temp files next to log batches, segments, manifests.
    table_dir = next(p for p in (tmp_path / "lake" / "d" / "pk").iterdir() if p.name.startswith("data-"))
    natural_leftovers = [p for p in table_dir.rglob(".tmp-*")]
    planted = [table_dir / "log" / "b00000" / ".tmp-0123456789abcdef", table_dir / "kv" / "b00000" / "segments" /
               ".tmp-seg-0123456789abcdef.arrow", table_dir / "kv" / "b00000" / "snapshots" / ".tmp-fedcba9876543210"]
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"ARROW1\x00\x00half a batch")

    fresh = fl.connect(tmp_store, local_dir=str(tmp_path / "reader"))
    table = fresh.get_table("d.pk")
    state = table.to_polars().sort("k")
    assert state.equals(changelog_replay(table)), "state differs from the changelog replay"

    acked = {n for acks in runs for n in acks}
    in_doubt = {acks[-1] + 1 for acks in runs}  # at most one unacknowledged batch per run may have committed
    keys = set(state.filter(pl.col("k") != COUNTER).get_column("k").to_list())
    assert acked <= keys, f"acknowledged writes lost: {sorted(acked - keys)}"
    assert keys <= acked | in_doubt, f"writes that were never sent: {sorted(keys - acked - in_doubt)}"
    assert state.filter(pl.col("k") != COUNTER).get_column("v").to_list() == [1] * len(keys)
    counter = state.filter(pl.col("k") == COUNTER).get_column("v").to_list()
    assert counter == [len(keys)], "a batch was half applied (counter and keys disagree)"
    # the log holds exactly the committed batches: one per key, offsets dense
    log = table.scan_log()
    assert log.get_column("_offset").to_list() == list(range(log.height))
    assert log.filter(pl.col("k") != COUNTER).height == len(keys)

    # the table stays writable after the crashes, and the temp files are still ignored
    table.upsert([{"k": 10_000, "v": 1}, {"k": COUNTER, "v": 1}])
    again = fl.connect(tmp_store, local_dir=str(tmp_path / "reader-2")).get_table("d.pk")
    assert again.lookup([{"k": COUNTER}, {"k": 10_000}]).get_column("v").to_list() == [len(keys) + 1, 1]
    assert again.to_polars().sort("k").equals(changelog_replay(again))
    assert all(path.exists() for path in planted)
    print(f"{sum(map(len, runs))} acknowledged writes over 5 kills; {len(keys - acked)} unacknowledged batches "
          f"committed; {len(natural_leftovers)} temp files left by the kills")


def test_old_temp_files_of_killed_writers_are_collected(tmp_path):
    """A killed writer's half-written temp file is removed once it is an hour old; a fresh one is left alone."""
    import os
    import time

    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.t", schema={"a": "INT"})
    conn.get_table("d.t").append([{"a": 1}])
    folder = next(p for p in tmp_path.rglob("b00000") if p.parent.name == "log")
    old, fresh = folder / ".tmp-killed", folder / ".tmp-in-flight"
    old.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    reopened = fl.connect(tmp_path).get_table("d.t")
    assert reopened.to_polars().get_column("a").to_list() == [1]
    assert not old.exists() and fresh.exists()
