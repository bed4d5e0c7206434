"""A process that reads a primary-key table's new changelog (a job) and then looks keys up (its probes) decodes each
new batch once: the read holds the decoded batches for the bucket's state, whose catch-up takes them. The state
is exactly the writer's, nothing stays held afterwards, and a batch too large to hold is decoded again as before."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
from fluss_lake.log import log_tablet as log_tablet_module


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The columns asked of every batch object the log tablets decode."""
    calls: list[Any] = []
    original = log_tablet_module.decode_batch

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1] if len(args) > 1 else kwargs.get("columns"))
        return original(*args, **kwargs)

    monkeypatch.setattr(log_tablet_module, "decode_batch", counting)
    return calls


def _tables(tmp_path: Any) -> tuple[fl.Table, fl.Table]:
    writer_conn = fl.connect(tmp_path)
    writer_conn.create_database("d")
    writer_conn.create_table("d.pk", schema={"k": "INT", "v": "BIGINT", "s": "STRING"}, primary_key=["k"], bucket_num=2)
    reader = fl.connect(tmp_path).get_table("d.pk")
    assert reader.lookup([{"k": 1}], with_found=True)["_found"].to_list() == [False]  # its state is open
    return writer_conn.get_table("d.pk"), reader


def _catch_up_after_reading(writer: fl.Table, reader: fl.Table, decodes: list[Any]) -> pl.DataFrame:
    start = reader.end_offsets()
    for i in range(6):  # small batches, some updates and deletes
        writer.upsert([{"k": k, "v": i * 10 + k, "s": f"s{i}"} for k in range(i, i + 4)])
        if i % 2:
            writer.delete([{"k": i - 1}])
    decodes.clear()
    changes = reader.scan_log(start_offsets=start, end_offsets=writer.end_offsets(), columns=["k", "v"])
    assert changes.height > 0
    keys = pl.DataFrame({"k": list(range(12))}, schema={"k": pl.Int32})
    got = reader.lookup(keys, with_found=True, with_offsets=True).sort("k")
    assert_frame_equal(got, writer.lookup(keys, with_found=True, with_offsets=True).sort("k"))
    return changes


def test_a_job_reading_new_changes_then_probing_decodes_each_batch_once(tmp_path: Any, decodes: list[Any]) -> None:
    writer, reader = _tables(tmp_path)
    changes = _catch_up_after_reading(writer, reader, decodes)
    batches = sum(1 for b in range(2) for h in writer.batch_headers(b) if h.record_count)
    assert len(decodes) == batches  # once each: by the read, the state's catch-up took the held batches
    assert decodes == [None] * batches  # held whole; the read got only its columns
    assert changes.columns[-2:] == ["k", "v"]
    tablets = [reader._runtime.tablets().kv_tablet(b).log for b in range(2)]
    assert all(not t._held and t._held_bytes == 0 for t in tablets)  # let go once applied


def test_a_batch_too_large_to_hold_is_decoded_again(
    tmp_path: Any, decodes: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_tablet_module, "_HOLD_BATCH_BYTES", 0)
    writer, reader = _tables(tmp_path)
    changes = _catch_up_after_reading(writer, reader, decodes)
    batches = sum(1 for b in range(2) for h in writer.batch_headers(b) if h.record_count)
    assert len(decodes) == 2 * batches  # read, then decoded again by the catch-up (as before holding)
    assert changes.columns[-2:] == ["k", "v"] and "s" not in changes.columns
    assert all(not reader._runtime.tablets().kv_tablet(b).log._held for b in range(2))


@pytest.fixture
def header_decodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every header-only decode of a batch object by the log tablets."""
    calls: list[Any] = []
    original = log_tablet_module.decode_header

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("key"))
        return original(*args, **kwargs)

    monkeypatch.setattr(log_tablet_module, "decode_header", counting)
    return calls


def test_a_batch_found_past_the_log_end_is_opened_once(
    tmp_path: Any, decodes: list[Any], header_decodes: list[Any]
) -> None:
    """The log-end probe of a bucket whose state is open decodes a small new batch whole and holds it: the probe,
    a delete scan (header filter), the read and the state's catch-up then open no object again."""
    writer, reader = _tables(tmp_path)
    start = reader.end_offsets()
    for i in range(4):
        writer.upsert([{"k": k, "v": i, "s": "x"} for k in range(i, i + 3)])
        writer.delete([{"k": i}])
    batches = sum(1 for b in range(2) for h in writer.batch_headers(b) if h.record_count)
    decodes.clear()
    header_decodes.clear()
    ends = reader.end_offsets()  # the probe finds every new batch
    deleted = reader.scan_log(start_offsets=start, end_offsets=ends, columns=["k"], change_types=["-D"])
    assert sorted(deleted["k"].to_list()) == [0, 1, 2, 3]
    changes = reader.scan_log(start_offsets=start, end_offsets=ends, columns=["k", "v"])
    keys = pl.DataFrame({"k": list(range(8))}, schema={"k": pl.Int32})
    got = reader.lookup(keys, with_found=True, with_offsets=True).sort("k")
    assert_frame_equal(got, writer.lookup(keys, with_found=True, with_offsets=True).sort("k"))
    assert changes.height == sum(ends[b] - start[b] for b in range(2))
    assert len(decodes) == batches and header_decodes == []
    assert all(not reader._runtime.tablets().kv_tablet(b).log._held for b in range(2))


def test_once_the_held_batches_fill_their_bound_the_probe_reads_headers_only(
    tmp_path: Any, decodes: list[Any], header_decodes: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that does not catch up (a process only polling log ends) holds no more than the bound: past it the
    probe decodes headers, no rows, and the state still catches up right afterwards."""
    monkeypatch.setattr(log_tablet_module, "_HOLD_BYTES", 0)
    writer, reader = _tables(tmp_path)
    before = reader.end_offsets()
    for i in range(3):
        writer.upsert([{"k": i, "v": i, "s": "x"}])
    batches = sum(1 for b in range(2) for h in writer.batch_headers(b) if h.record_count)
    decodes.clear()
    header_decodes.clear()
    assert sum(reader.end_offsets().values()) == sum(before.values()) + 3
    assert decodes == [] and len(header_decodes) == 3
    keys = pl.DataFrame({"k": list(range(3))}, schema={"k": pl.Int32})
    got = reader.lookup(keys, with_found=True, with_offsets=True).sort("k")
    assert_frame_equal(got, writer.lookup(keys, with_found=True, with_offsets=True).sort("k"))
    assert len(decodes) == batches  # by the catch-up, once each
