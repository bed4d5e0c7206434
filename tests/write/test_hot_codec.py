"""Changelog batches of primary-key tables are committed with LZ4 when the table's codec is zstd (cheaper on the
path of every write); log compaction rewrites them with zstd. Every reader (scans, changelog views, state
replay in a new process, tiering's log reader) handles both, and stores written with zstd batches still open."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl

import fluss_lake as fl
from fluss_lake.kv.kv_tablet import KvTablet
from tiering.log_reader import log_reader

LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _files(root: str, suffix: str) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(suffix))


def _bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _table(tmp_path, **options):
    conn = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "state"), log_compaction_grace_ms=0)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.users", schema={"id": "BIGINT", "name": "STRING", "n": "BIGINT"}, primary_key=["id"],
                      bucket_num=2, options=options, ignore_if_exists=True)
    return conn.get_table("d.users")


def _write(users, rounds: int, start: int = 0) -> None:
    for r in range(start, start + rounds):
        users.upsert(pl.DataFrame({"id": list(range(r, r + 50)), "name": [f"n{r}-{i}" for i in range(50)],
                                   "n": [r * 100 + i for i in range(50)]}))
    users.delete([{"id": start}])


def _expected(rounds: int, start: int = 0) -> dict[int, tuple[str, int]]:
    state: dict[int, tuple[str, int]] = {}
    for r in range(start, start + rounds):
        for i in range(50):
            state[r + i] = (f"n{r}-{i}", r * 100 + i)
    state.pop(start, None)
    return state


def _state(users) -> dict[int, tuple[str, int]]:
    return {row["id"]: (row["name"], row["n"]) for row in users.to_polars().to_dicts()}


def test_hot_batches_are_lz4_and_every_reader_reads_them(tmp_path) -> None:
    users = _table(tmp_path)
    _write(users, 6)
    batches = _files(str(tmp_path / "lake"), ".arrow")
    log_batches = [p for p in batches if f"{os.sep}log{os.sep}" in p]
    assert log_batches
    for path in log_batches:
        data = _bytes(path)
        assert LZ4_FRAME_MAGIC in data and ZSTD_MAGIC not in data
    expected = _expected(6)
    assert _state(users) == expected
    log = users.scan_log()
    assert log.height > 6 * 50  # updates give -U/+U pairs
    assert set(log.get_column("_change_type").cast(str)) == {"+I", "-U", "+U", "-D"}
    # tiering reads the same batches through state-free log tablets
    tiered = log_reader(users).scan_log()
    assert tiered.equals(log)
    # a new process replays the LZ4 changelog into the same state
    code = ("import fluss_lake as fl, sys, json; c = fl.connect(sys.argv[1], local_dir=sys.argv[2]); "
            "t = c.get_table('d.users'); print(json.dumps(sorted(t.to_polars().rows())))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "lake"), str(tmp_path / "state2")],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert [tuple(r) for r in json.loads(out.stdout)] == sorted((k, *v) for k, v in expected.items())


def test_log_compaction_rewrites_hot_batches_with_zstd(tmp_path) -> None:
    users = _table(tmp_path)
    _write(users, 8)
    before = users.scan_log()
    assert users.compact_log() > 0
    segments = _files(str(tmp_path / "lake"), ".segment")
    assert segments
    for path in segments:
        data = _bytes(path)
        assert ZSTD_MAGIC in data and LZ4_FRAME_MAGIC not in data
    assert users.scan_log().equals(before)
    assert log_reader(users).scan_log().equals(before)
    reopened = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "state3")).get_table("d.users")
    assert _state(reopened) == _expected(8)


def test_explicit_codecs_are_used_as_set(tmp_path) -> None:
    users = _table(tmp_path, **{"table.log.arrow.compression.type": "none"})
    _write(users, 3)
    for path in _files(str(tmp_path / "lake"), ".arrow"):
        if f"{os.sep}log{os.sep}" in path:
            data = _bytes(path)
            assert LZ4_FRAME_MAGIC not in data and ZSTD_MAGIC not in data
    assert _state(users) == _expected(3)


def test_stores_with_zstd_changelog_batches_still_open(tmp_path, monkeypatch) -> None:
    """Batches written before this change are zstd: a store mixing both replays and scans as one log."""
    users = _table(tmp_path)
    monkeypatch.setattr(KvTablet, "hot_codec", property(lambda self: ("zstd", 3)))
    _write(users, 4)
    monkeypatch.undo()
    _write(users, 4, start=10)
    kinds = {(LZ4_FRAME_MAGIC in _bytes(p), ZSTD_MAGIC in _bytes(p))
             for p in _files(str(tmp_path / "lake"), ".arrow") if f"{os.sep}log{os.sep}" in p}
    assert kinds == {(True, False), (False, True)}
    expected = {**_expected(4), **_expected(4, start=10)}
    expected.pop(10, None)  # the second delete
    expected.pop(0, None)
    reopened = fl.connect(str(tmp_path / "lake"), local_dir=str(tmp_path / "state4")).get_table("d.users")
    assert _state(reopened) == expected == _state(users)
    assert reopened.scan_log().equals(users.scan_log())
