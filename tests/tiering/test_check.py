"""`fluss-lake check` and `restore_log_from_lake`: damage is reported by object, state is rebuilt from the log,
log objects from the lake where they were tiered, and what nothing holds stays reported (exit status 1)."""

from __future__ import annotations

import glob
import io
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import fluss_lake as fl
import tiering
from tiering.check import check
from tiering.log_restore import restore_log_from_lake


def _build(root: str, *, partitioned: bool = False) -> fl.Connection:
    conn = fl.connect(root, snapshot_every=1)
    conn.create_database("d")
    lake_on = {"table.datalake.enabled": True}
    conn.create_table("d.ev", schema={"id": "BIGINT", "v": "STRING"}, bucket_num=2, bucket_keys=["id"], options=lake_on)
    conn.create_table(
        "d.kv",
        schema={"id": "BIGINT", "v": "STRING", "day": "STRING"} if partitioned else {"id": "BIGINT", "v": "STRING"},
        primary_key=["id", "day"] if partitioned else ["id"],
        partition_keys=["day"] if partitioned else (),
        bucket_num=2,
        options=lake_on,
    )
    for step in range(4):
        ids = np.arange(step * 50, step * 50 + 60)  # overlapping keys: updates in the changelog
        conn.get_table("d.ev").append(pl.DataFrame({"id": ids, "v": [f"e{step}"] * len(ids)}))
        rows = {"id": ids, "v": [f"k{step}"] * len(ids)}
        if partitioned:
            rows["day"] = ["d1" if i % 2 else "d2" for i in ids]
        conn.get_table("d.kv").upsert(pl.DataFrame(rows))
    conn.get_table("d.kv").delete(pl.DataFrame({"id": [3], "day": ["d1"]} if partitioned else {"id": [3]}))
    return conn


def _answers(root: str) -> dict[str, pl.DataFrame]:
    conn = fl.connect(root)
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    return {
        "ev": ev.scan_log().sort("_bucket", "_offset"),
        "kv_state": kv.to_polars().sort("id", *(["day"] if kv.is_partitioned else [])),
        "kv_changelog": kv.scan_log().sort("_bucket", "_offset", *(["_partition"] if kv.is_partitioned else [])),
    }


def _same(before: dict[str, pl.DataFrame], after: dict[str, pl.DataFrame]) -> None:
    for name, frame in before.items():
        assert after[name].equals(frame), name


def _logs(root: str, table: str) -> list[str]:
    return sorted(glob.glob(f"{root}/d/{table}/data-*/**/log/b00000/*.arrow", recursive=True))


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0x40]))


@pytest.mark.parametrize("partitioned", [False, True])
def test_log_objects_are_restored_from_the_lake_exactly(tmp_path, partitioned) -> None:
    root = str(tmp_path)
    conn = _build(root, partitioned=partitioned)
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    before = _answers(root)
    ev_logs, kv_logs = _logs(root, "ev"), _logs(root, "kv")
    os.unlink(ev_logs[1])  # a batch in the middle of a log table's bucket
    _flip(kv_logs[2], os.path.getsize(kv_logs[2]) // 2)  # a changelog batch of a primary-key table
    damaged = fl.connect(root)
    assert not damaged.get_table("d.ev").verify().ok
    assert not damaged.get_table("d.kv").verify().ok
    with pytest.raises(fl.CorruptedDataError):
        damaged.get_table("d.ev").scan_log()
    restored = restore_log_from_lake(damaged.get_table("d.ev"), lake) + restore_log_from_lake(
        damaged.get_table("d.kv"), lake
    )
    assert {k.rsplit("/", 1)[-1] for k in restored} >= {os.path.basename(ev_logs[1]), os.path.basename(kv_logs[2])}
    fresh = fl.connect(root)
    assert all(report.ok and not report.damage for report in fresh.verify())
    after = _answers(root)
    for name in before:  # the restored batches hold the same records, offsets and commit times
        columns = [c for c in before[name].columns if c != "_commit_timestamp"]
        assert after[name].select(columns).equals(before[name].select(columns)), name
        assert after[name]["_commit_timestamp"].equals(before[name]["_commit_timestamp"]) if name != "kv_state" else True


def test_check_command_reports_repairs_and_exits_by_what_is_left(tmp_path) -> None:
    root = str(tmp_path)
    conn = _build(root)
    conn.get_table("d.kv").snapshot()
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    before = _answers(root)
    segments = sorted(glob.glob(f"{root}/d/kv/data-*/kv/b00000/segments/*.arrow"))
    assert segments
    _flip(segments[0], 64)  # state: rebuilt from the log
    os.unlink(_logs(root, "ev")[1])  # log: restored from the lake
    out = io.StringIO()
    assert check(fl.connect(root), out=out) == 1
    report = out.getvalue()
    assert "DAMAGED state bucket 0" in report and os.path.basename(segments[0]) in report
    assert "DAMAGED log bucket 0" in report and "offsets missing" in report
    out = io.StringIO()
    assert check(fl.connect(root), repair=True, out=out) == 0, out.getvalue()
    assert "repaired state" in out.getvalue() and "repaired log" in out.getvalue()
    _same(before, _answers(root))
    # the command line: exit status 0 now, 1 after damage nothing can repair (untiered records), 2 without a store
    command = [sys.executable, "-m", "fluss_lake.cli", "check", "--store", root]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    late = np.arange(1000, 1040)  # both buckets get two batches tiering has not taken
    fl.connect(root).get_table("d.ev").append(pl.DataFrame({"id": late, "v": ["late"] * len(late)}))
    fl.connect(root).get_table("d.ev").append(pl.DataFrame({"id": late, "v": ["later"] * len(late)}))
    os.unlink(_logs(root, "ev")[-2])  # untiered: nothing holds it
    done = subprocess.run([*command, "--repair"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DAMAGED log" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "fluss_lake.cli", "check", "--store", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no store" in missing.stderr, missing.stderr
    assert not (tmp_path / "nothing").exists()


def test_lost_newest_batches_are_restored_from_the_lake(tmp_path) -> None:
    """A newest batch deleted after tiering: the live log looks whole, the lake's offsets say otherwise; the next
    tiering round raises CorruptedDataError naming the batch, and `check --repair` puts the records back."""
    root = str(tmp_path)
    conn = _build(root)
    lake = tiering.Lake.for_connection(conn)
    tiering.tier_once(conn, lake)
    before = _answers(root)
    newest = _logs(root, "ev")[-1]
    os.unlink(newest)
    with pytest.raises(fl.CorruptedDataError) as raised:
        tiering.tier_once(fl.connect(root), tiering.Lake.for_connection(fl.connect(root)))
    assert raised.value.key is not None and raised.value.key.endswith(os.path.basename(newest))
    out = io.StringIO()
    assert check(fl.connect(root), repair=True, out=out) == 0, out.getvalue()
    assert os.path.basename(newest) in out.getvalue()
    _same(before, _answers(root))
    tiering.tier_once(fl.connect(root), tiering.Lake.for_connection(fl.connect(root)))  # tiering goes on
