"""Several real processes write the same table at once; the atomic-create commit must lose nothing.

Each writer is a separate interpreter (``subprocess`` running ``sys.executable -c``), started together behind a
barrier, and reports every acknowledged write (with the offsets it took) on stdout. Afterwards a fresh
Connection checks:

* log table: every row exactly once, each bucket's offsets dense ``0..end-1``, and every acknowledged batch
  sits exactly at the offsets its writer was told;
* primary-key table with the ``sum`` aggregation: each key's total equals the sum of all acknowledged
  increments (nothing lost, nothing applied twice), each increment produced exactly one change record, and
  replaying the changelog gives the same state as the restored snapshot + tail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import polars as pl
import pytest

import fluss_lake as fl

WRITER = r"""
import json, sys
import fluss_lake as fl

args = json.loads(sys.argv[1])
conn = fl.connect(args["url"], storage_options=args["options"], local_dir=args["local_dir"],
                  snapshot_every=args["snapshot_every"])
w = args["writer"]
tables = {job["table"]: conn.get_table(job["table"]) for job in args["jobs"]}
print("ready", flush=True)
sys.stdin.readline()  # the barrier: all writers start together
for seq in range(args["batches"]):
    for job in args["jobs"]:  # one write per table per round, interleaved
        table = tables[job["table"]]
        if job["kind"] == "log":
            result = table.append([{"writer": w, "seq": seq, "i": i} for i in range(args["rows"])])
        else:
            # own keys (disjoint between writers) + shared keys (every writer) + key 0 twice in the same batch
            rows = [{"k": 1000 * (w + 1) + j, "v": seq + 1} for j in range(args["rows"])]
            rows += [{"k": j, "v": 1} for j in range(args["rows"])] + [{"k": 0, "v": 1}]
            result = table.upsert(rows)
        print(json.dumps({"table": job["table"], "seq": seq,
                          "offsets": {str(b): o for b, o in result.offsets.items()}}), flush=True)
print("done", flush=True)
"""


def run_writers(n: int, *, url: str, options: dict[str, Any] | None, jobs: dict[str, str], batches: int,
                rows: int, tmp_path, snapshot_every: int = 16, timeout: float = 150) -> dict[str, list[list[dict]]]:
    """Start `n` writer processes behind a barrier, each writing every table of `jobs` (table -> "log"/"pk");
    returns, per table, each writer's acknowledged writes in order."""
    procs = []
    for w in range(n):
        args = {"url": url, "options": options, "local_dir": str(tmp_path / f"state-w{w}"), "writer": w,
                "jobs": [{"table": t, "kind": k} for t, k in jobs.items()], "batches": batches, "rows": rows,
                "snapshot_every": snapshot_every}
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(args)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for proc in procs:
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"writer did not start: {line!r} {proc.stderr.read()}"
        for proc in procs:  # release the barrier
            proc.stdin.write("go\n")
            proc.stdin.flush()
        acks: dict[str, list[list[dict]]] = {t: [] for t in jobs}
        deadline = time.monotonic() + timeout
        for proc in procs:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            assert proc.returncode == 0, f"writer failed:\n{err}"
            lines = out.splitlines()
            assert lines[-1] == "done"
            parsed = [json.loads(line) for line in lines[:-1]]
            for t in jobs:
                acks[t].append([a for a in parsed if a["table"] == t])
        return acks
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def check_dense(frame: pl.DataFrame, end_offsets: dict[int, int], offset_column: str = "_offset") -> None:
    """Each bucket's offsets are exactly 0..end-1 (no gaps, no duplicates)."""
    for bucket, end in end_offsets.items():
        offsets = frame.filter(pl.col("_bucket") == bucket).get_column(offset_column).sort().to_list()
        assert offsets == list(range(end)), f"bucket {bucket}: offsets are not dense 0..{end - 1}"


def check_log_table(conn: fl.Connection, path: str, acks: list[list[dict]], batches: int, rows: int) -> None:
    table = conn.get_table(path)
    log = table.scan_log()
    n = len(acks)
    assert log.height == n * batches * rows
    tags = log.select("writer", "seq", "i")
    assert tags.n_unique() == tags.height, "a row was committed twice"
    assert set(tags.iter_rows()) == {(w, s, i) for w in range(n) for s in range(batches) for i in range(rows)}
    ends = table.end_offsets()
    check_dense(log, ends)
    assert sum(ends.values()) == log.height
    for w, writes in enumerate(acks):
        assert [a["seq"] for a in writes] == list(range(batches)), f"writer {w} lost an acknowledgement"
        for ack in writes:
            for bucket, (base, nxt) in ack["offsets"].items():
                at = log.filter((pl.col("_bucket") == int(bucket)) & pl.col("_offset").is_between(base, nxt - 1))
                assert at.height == nxt - base
                assert set(at.select("writer", "seq").iter_rows()) == {(w, ack["seq"])}, \
                    f"offsets acknowledged to writer {w} batch {ack['seq']} hold someone else's rows"


def check_sum_table(conn: fl.Connection, path: str, acks: list[list[dict]], batches: int, rows: int,
                    changelog_replay) -> None:
    table = conn.get_table(path)
    n = len(acks)
    for w, writes in enumerate(acks):
        assert [a["seq"] for a in writes] == list(range(batches)), f"writer {w} lost an acknowledgement"
    # expected totals from the acknowledged increments
    increments: dict[int, list[int]] = {}
    for w in range(n):
        for seq in range(batches):
            for j in range(rows):
                increments.setdefault(1000 * (w + 1) + j, []).append(seq + 1)
                increments.setdefault(j, []).append(1)
            increments[0].append(1)
    expected = pl.DataFrame({"k": list(increments), "v": [sum(v) for v in increments.values()]},
                            schema=table.schema.polars_schema).sort("k")
    state = table.to_polars().sort("k")
    assert state.equals(expected), "sums differ from the acknowledged increments"
    assert changelog_replay(table).equals(expected), "changelog replay differs from the state"
    changes = table.changelog(with_bucket=True)
    check_dense(changes, table.end_offsets(), "_log_offset")
    # each increment is one change: the first an insert, every later one an update_before/update_after pair
    counts = changes.group_by("k", "_change_type").len().pivot(on="_change_type", index="k", values="len")
    for row in counts.to_dicts():
        assert row.get("insert") == 1 and row.get("delete") is None
        assert row.get("update_before", 0) == row.get("update_after", 0) == len(increments[row["k"]]) - 1, \
            f"key {row['k']}: the number of changes does not match the number of increments"


@pytest.mark.slow
def test_concurrent_log_writers_local(tmp_store, tmp_path):
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "state"))
    conn.create_database("d")
    conn.create_table("d.log", schema={"writer": "INT", "seq": "INT", "i": "INT"}, bucket_num=2, bucket_keys=["i"])
    acks = run_writers(4, url=tmp_store, options=None, jobs={"d.log": "log"}, batches=30, rows=6,
                       tmp_path=tmp_path)["d.log"]
    fresh = fl.connect(tmp_store, local_dir=str(tmp_path / "check"))
    check_log_table(fresh, "d.log", acks, batches=30, rows=6)


@pytest.mark.slow
def test_concurrent_sum_writers_local(tmp_store, tmp_path, changelog_replay):
    conn = fl.connect(tmp_store, local_dir=str(tmp_path / "state"))
    conn.create_database("d")
    conn.create_table("d.sums", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=2,
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    acks = run_writers(4, url=tmp_store, options=None, jobs={"d.sums": "pk"}, batches=30, rows=4,
                       tmp_path=tmp_path, snapshot_every=16)["d.sums"]
    fresh = fl.connect(tmp_store, local_dir=str(tmp_path / "check"))
    check_sum_table(fresh, "d.sums", acks, batches=30, rows=4, changelog_replay=changelog_replay)
    # the fresh connection restored from a snapshot some writer took, then replayed the tail
    assert any(fresh.get_table("d.sums")._tablets().kv_tablet(b).last_snapshot > 0 for b in range(2))


@pytest.mark.s3
@pytest.mark.slow
def test_concurrent_writers_s3(s3_url, tmp_path, changelog_replay):
    url, options = s3_url
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "state"))
    conn.create_database("d")
    conn.create_table("d.log", schema={"writer": "INT", "seq": "INT", "i": "INT"}, bucket_num=2, bucket_keys=["i"])
    conn.create_table("d.sums", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=2,
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    acks = run_writers(3, url=url, options=options, jobs={"d.sums": "pk", "d.log": "log"}, batches=8, rows=3,
                       tmp_path=tmp_path, snapshot_every=8)
    fresh = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "check"))
    check_sum_table(fresh, "d.sums", acks["d.sums"], batches=8, rows=3, changelog_replay=changelog_replay)
    check_log_table(fresh, "d.log", acks["d.log"], batches=8, rows=3)


def test_store_refuses_fsspec_backends_without_atomic_create(tmp_path):
    # fsspec's generic pipe_file(mode="create") checks exists() and then writes: two writers can both pass
    with pytest.raises(fl.StorageError, match="atomic"):
        fl.connect("http://127.0.0.1:9/lake")
    conn = fl.connect("memory://fluss-lake-durability-test")  # in-process only: a lock makes the create atomic
    conn.create_database("d")
    with pytest.raises(fl.DatabaseAlreadyExistError):
        conn.create_database("d")
