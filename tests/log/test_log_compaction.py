"""Log compaction: runs of small committed batches become one segment object; offsets, commit times, change types,
statistics and writer sequences are unchanged, and readers and writers in other processes keep working."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import polars as pl
import pytest

import fluss_lake as fl


def _objects(root: str, suffix: str) -> int:
    return sum(1 for _, _, files in os.walk(root) for f in files if f.endswith(suffix))


def _events(tmp_path, **kwargs):
    conn = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "state"), **kwargs)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.ev", schema={"user": "BIGINT", "v": "DOUBLE", "tag": "STRING"}, bucket_num=2,
                      bucket_keys=["user"], options={"table.statistics.columns": "v"}, ignore_if_exists=True)
    return conn.get_table("d.ev")


def _fill(table, batches: int, clock=None, start: int = 0) -> None:
    for i in range(start, start + batches):
        if clock is not None:
            clock[0] = 1_000 * i
        table.append(pl.DataFrame({"user": [i, i + 1, i + 2], "v": [float(i), i + 0.5, i + 0.25],
                                   "tag": [f"t{i}"] * 3}))


def test_compaction_keeps_every_offset_row_timestamp_and_statistic(tmp_path) -> None:
    clock = [0]
    events = _events(tmp_path, clock=lambda: clock[0], log_compaction_grace_ms=5_000)
    _fill(events, 30, clock)
    before = events.scan_log()
    filtered = events.scan_log(filters=[("v", ">=", 25.0)])
    from_time = events.scan_log(start_timestamp=12_000)
    ends, earliest = events.end_offsets(), events.earliest_offsets()
    batches_before = _objects(str(tmp_path / "lake"), ".arrow")
    clock[0] = 29_000
    moved = events.compact_log()  # batches committed before 24 s qualify (grace 5 s), never a bucket's newest
    assert 0 < moved < batches_before
    assert _objects(str(tmp_path / "lake"), ".segment") >= 1
    assert _objects(str(tmp_path / "lake"), ".arrow") == batches_before - moved
    assert events.scan_log().equals(before)
    assert events.scan_log(filters=[("v", ">=", 25.0)]).equals(filtered)
    assert events.scan_log(start_timestamp=12_000).equals(from_time)
    assert (events.end_offsets(), events.earliest_offsets()) == (ends, earliest)
    fresh = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "fresh")).get_table("d.ev")
    assert fresh.scan_log().equals(before)
    # the log goes on densely; a second round merges what became old enough
    _fill(events, 5, clock, start=30)
    clock[0] = 100_000
    assert events.compact_log() > 0
    after = events.scan_log()
    old = after.filter(pl.col("tag").is_in([f"t{i}" for i in range(30)]))
    assert old.equals(before) and after.height == before.height + 15
    for bucket, group in after.group_by("_bucket"):
        assert group["_offset"].to_list() == list(range(group.height))


def test_young_batches_and_the_newest_batch_are_never_compacted(tmp_path) -> None:
    events = _events(tmp_path)  # real clock, default grace of ten minutes
    _fill(events, 10)
    batches = _objects(str(tmp_path / "lake"), ".arrow")
    assert events.compact_log() == 0
    assert events.compact_log(now_ms=int(time.time() * 1000) + 3_600_000) == batches - 2  # newest per bucket stays
    assert _objects(str(tmp_path / "lake"), ".arrow") == 2


def test_a_reader_with_an_old_view_follows_batches_into_segments(tmp_path) -> None:
    clock = [0]
    events = _events(tmp_path, clock=lambda: clock[0], log_compaction_grace_ms=0)
    _fill(events, 12, clock)
    with pytest.raises(fl.InvalidConfigError, match="grace of 0 ms"):  # readers must follow the table's grace
        fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "r"), log_compaction_grace_ms=600_000).get_table(
            "d.ev"
        )
    reader = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "r")).get_table("d.ev")
    assert reader.log_compaction_grace_ms == 0
    before = reader.scan_log()  # the reader now knows every batch by its own object
    assert events.compact_log() > 0
    assert reader.scan_log().equals(before)
    scanner = reader.new_scan()
    scanner.subscribe_from_beginning()
    assert scanner.poll().height == before.height


def test_retention_after_compaction_drops_whole_segments(tmp_path) -> None:
    clock = [0]
    events = _events(tmp_path, clock=lambda: clock[0], log_compaction_grace_ms=0)
    events.connection.alter_table("d.ev", set_options={"table.log.ttl": "10 s"})
    events = events.connection.get_table("d.ev")
    _fill(events, 20, clock)
    events.compact_log(target_rows=12)  # several segments of at most 12 rows per bucket
    earliest = events.expire_log(now_ms=40_000)  # keep what was committed in the last 10 s of the 19 s
    log = events.scan_log()
    assert all(earliest[b] == log.filter(pl.col("_bucket") == b)["_offset"].min() for b in earliest)
    assert log["tag"].is_in([f"t{i}" for i in range(20)]).all() and log.height < 60
    with pytest.raises(fl.OffsetOutOfRangeError):
        events.scan_log(start_offsets={0: 0})


def test_columns_added_later_are_not_merged_with_older_batches(tmp_path) -> None:
    clock = [0]
    events = _events(tmp_path, clock=lambda: clock[0], log_compaction_grace_ms=0)
    _fill(events, 4, clock)
    events.connection.alter_table("d.ev", add_columns={"extra": "INT"})
    events = events.connection.get_table("d.ev")
    for i in range(4):
        events.append([{"user": 1, "v": 1.0, "tag": "x", "extra": i}])
    before = events.scan_log()
    events.compact_log()
    assert events.scan_log().equals(before)
    assert before["extra"].drop_nulls().sort().to_list() == [0, 1, 2, 3]


def test_primary_key_changelog_compaction_keeps_changelog_and_restored_state(tmp_path, changelog_replay) -> None:
    clock = [0]
    conn = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "s1"), clock=lambda: clock[0],
                      log_compaction_grace_ms=0, snapshot_every=7)
    conn.create_database("d")
    conn.create_table("d.c", schema={"id": "INT", "n": "BIGINT"}, primary_key=["id"], bucket_num=2,
                      options={"table.merge-engine": "aggregation", "fields.n.agg": "sum"})
    table = conn.get_table("d.c")
    for i in range(20):
        clock[0] = i
        table.upsert([{"id": i % 5, "n": 1}])
    log_before, state_before = table.changelog(with_bucket=True), table.to_polars().sort("id")
    assert table.compact_log() > 0
    assert table.changelog(with_bucket=True).equals(log_before)
    fresh = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "s2")).get_table("d.c")
    assert fresh.to_polars().sort("id").equals(state_before) and changelog_replay(fresh).equals(state_before)
    fresh.upsert([{"id": 1, "n": 100}])  # writing on after compaction: offsets stay dense
    assert table.lookup([{"id": 1}])["n"].to_list() == [104]
    for _, group in fresh.changelog(with_bucket=True).group_by("_bucket"):
        assert group["_log_offset"].to_list() == list(range(group.height))


COMPACTOR = r"""
import json, sys, time
import fluss_lake as fl
a = json.loads(sys.argv[1])
conn = fl.connect(a["url"], local_dir=a["local_dir"], log_compaction_grace_ms=a["grace_ms"])
table = conn.get_table("d.ev")
moved, deadline = 0, time.monotonic() + a["seconds"]
while time.monotonic() < deadline:
    moved += table.compact_log()
    time.sleep(0.1)
print(json.dumps({"moved": moved}), flush=True)
"""

WRITER = r"""
import json, sys, time
import fluss_lake as fl
a = json.loads(sys.argv[1])
conn = fl.connect(a["url"], local_dir=a["local_dir"], log_compaction_grace_ms=a["grace_ms"])
table = conn.get_table("d.ev")
acks, seq, deadline = [], 0, time.monotonic() + a["seconds"]
while time.monotonic() < deadline:
    result = table.append([{"user": a["w"] * 1_000_000 + seq, "v": float(seq), "tag": f"w{a['w']}"}])
    acks.append({"user": a["w"] * 1_000_000 + seq, "offsets": {str(b): o for b, o in result.offsets.items()}})
    seq += 1
    if seq % 25 == 0:
        time.sleep(a["pause"])  # now and then idle for longer than half the grace period
print(json.dumps(acks), flush=True)
"""

READER = r"""
import json, sys, time
import fluss_lake as fl
a = json.loads(sys.argv[1])
conn = fl.connect(a["url"], local_dir=a["local_dir"], log_compaction_grace_ms=a["grace_ms"])
table = conn.get_table("d.ev")
reads, deadline = 0, time.monotonic() + a["seconds"]
while time.monotonic() < deadline:
    log = table.scan_log()
    for bucket in log["_bucket"].unique().to_list():
        offsets = log.filter(log["_bucket"] == bucket)["_offset"].to_list()
        assert offsets == list(range(len(offsets))), f"bucket {bucket} offsets not dense"
    reads += 1
print(json.dumps({"reads": reads}), flush=True)
"""


@pytest.mark.slow
def test_compaction_during_writes_and_scans_in_other_processes(tmp_path) -> None:
    url = str(tmp_path / "lake")
    events = _events(tmp_path, log_compaction_grace_ms=1_000)
    assert events.bucket_num == 2
    base = {"url": url, "grace_ms": 1_000, "seconds": 6}

    def start(script: str, name: str, **extra) -> subprocess.Popen:
        args = {**base, "local_dir": str(tmp_path / name), **extra}
        return subprocess.Popen([sys.executable, "-c", script, json.dumps(args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    procs = {"w0": start(WRITER, "w0", w=0, pause=0.0), "w1": start(WRITER, "w1", w=1, pause=0.7),
             "compactor": start(COMPACTOR, "c"), "reader": start(READER, "r")}
    outputs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{name} failed:\n{err}"
        outputs[name] = json.loads(out.strip().splitlines()[-1])
    assert outputs["compactor"]["moved"] > 0 and outputs["reader"]["reads"] > 0
    final = fl.connect(url, local_dir=str(tmp_path / "final")).get_table("d.ev")
    final.compact_log(now_ms=int(time.time() * 1000) + 10_000)
    log = final.scan_log()
    acks = outputs["w0"] + outputs["w1"]
    assert log.height == len(acks) and log["user"].n_unique() == len(acks)  # nothing lost, nothing twice
    by_user = {u: (b, o) for u, b, o in log.select("user", "_bucket", "_offset").iter_rows()}
    for ack in acks:  # every acknowledged write sits at the offset its writer was told
        ((bucket, (start_offset, _)),) = ack["offsets"].items()
        assert by_user[ack["user"]] == (int(bucket), start_offset)
    for _, group in log.group_by("_bucket"):
        assert group["_offset"].to_list() == list(range(group.height))
    assert _objects(url, ".segment") > 0


def test_a_reader_opened_without_the_grace_sees_every_batch_a_compacting_writer_adds(tmp_path) -> None:
    """The grace lives with the table: a reader connected with defaults follows a writer that compacts at once
    (it used to keep its own ten-minute grace, probe for batch objects compaction had moved, and stall)."""
    clock = [0]
    events = _events(tmp_path, clock=lambda: clock[0], log_compaction_grace_ms=0)
    reader = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "r")).get_table("d.ev")
    scanner = reader.new_scan()
    scanner.subscribe_from_beginning()
    seen = 0
    for step in range(40):
        _fill(events, 5, clock, start=step * 5)
        if step % 3 == 0:
            events.compact_log()
        seen += scanner.poll().height
    seen += scanner.poll().height
    assert seen == events.scan_log().height == 40 * 5 * 3
