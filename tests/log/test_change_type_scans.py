"""Scans of chosen change types: batch headers count their -D records, so a deletes-only scan (what the delta
join reads to find deleted keys) skips every batch without a delete unread."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import fluss_lake as fl
import fluss_lake.log.log_tablet as log_tablet_module
from fluss_lake import InvalidConfigError
from fluss_lake.kv import kv_tablet
from fluss_lake.log.log_batch import DELETE_CODE
from fluss_lake.log.log_reads import CHANGE_TYPE_NAMES


@pytest.fixture
def users(tmp_path: Path) -> fl.Table:
    conn = fl.connect(tmp_path)
    conn.create_database("db")
    conn.create_table("db.users", schema={"id": "BIGINT", "name": "STRING"}, primary_key=["id"], bucket_num=2)
    table = conn.get_table("db.users")
    table.upsert([{"id": i, "name": f"u{i}"} for i in range(10)])  # inserts only
    table.upsert([{"id": 1, "name": "x"}, {"id": 2, "name": "y"}])  # updates only
    table.delete([{"id": 3}, {"id": 4}, {"id": 5}])
    table.upsert([{"id": 6, "name": "z"}])
    table.delete([{"id": 7}, {"id": 42}])  # 42 does not exist: no record
    return table


def _headers(table: fl.Table) -> list:
    out = []
    for bucket in range(table.bucket_num):
        tablet = table._tablets().log_tablet(bucket)
        out += [batch.header for batch in tablet.read(tablet.earliest_offset)]
    return out


def test_delete_code_is_the_changelog_code_of_deletes() -> None:
    assert DELETE_CODE == kv_tablet.DELETE == CHANGE_TYPE_NAMES.index("-D")


def test_headers_count_the_deletes_of_their_batch(users: fl.Table) -> None:
    log = users.scan_log()
    per_batch = {}
    for header in _headers(users):
        rows = log.filter((pl.col("_offset") >= header.base_offset) & (pl.col("_offset") < header.next_offset))
        per_batch[header.base_offset, rows.get_column("_bucket")[0]] = (header.deletes, int((rows["_change_type"] == "-D").sum()))
    assert per_batch and all(recorded == counted for recorded, counted in per_batch.values())
    assert sum(recorded for recorded, _ in per_batch.values()) == 4  # ids 3, 4, 5, 7


def test_headers_of_a_log_table_count_no_deletes(tmp_path: Path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("db")
    conn.create_table("db.events", schema={"id": "BIGINT"})
    events = conn.get_table("db.events")
    events.append(pl.DataFrame({"id": [1, 2, 3]}))
    assert [h.deletes for h in _headers(events)] == [0]


def test_a_deletes_scan_returns_exactly_the_delete_records(users: fl.Table) -> None:
    everything = users.scan_log()
    deletes = users.scan_log(change_types=["-D"])
    assert deletes.equals(everything.filter(pl.col("_change_type") == "-D"))
    assert sorted(deletes.get_column("id").to_list()) == [3, 4, 5, 7]
    updates = users.scan_log(change_types=["-U", "+U"], columns=["id"])
    assert sorted(updates.get_column("id").to_list()) == [1, 1, 2, 2, 6, 6]


def test_a_deletes_scan_skips_batches_without_deletes_unread(users: fl.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = []
    original = log_tablet_module.LogTablet._batch

    def counting(self, base, columns, **kwargs):
        decoded.append(base)
        return original(self, base, columns, **kwargs)

    headers = _headers(users)
    with_deletes = [h for h in headers if h.deletes]
    monkeypatch.setattr(log_tablet_module.LogTablet, "_batch", counting)
    users.scan_log(change_types=["-D"])
    assert len(decoded) == len(with_deletes) < len(headers)


def test_unknown_change_types_are_rejected(users: fl.Table) -> None:
    with pytest.raises(InvalidConfigError, match="not change types"):
        users.scan_log(change_types=["DELETE"])


def test_a_scanner_polls_only_the_chosen_change_types(users: fl.Table) -> None:
    scanner = users.new_scan(columns=["id"], change_types=["-D"])
    scanner.subscribe_from_beginning()
    assert sorted(scanner.poll().get_column("id").to_list()) == [3, 4, 5, 7]
    users.delete([{"id": 8}])
    users.upsert([{"id": 9, "name": "w"}])
    polled = scanner.poll()
    assert polled.get_column("id").to_list() == [8] and polled.get_column("_change_type").cast(str).to_list() == ["-D"]
    with pytest.raises(InvalidConfigError, match="not change types"):
        users.new_scan(change_types=["+X"])


def test_change_types_on_a_partitioned_table(tmp_path: Path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("db")
    conn.create_table("db.p", schema={"day": "STRING", "id": "BIGINT", "v": "INT"}, primary_key=["day", "id"],
                      partition_keys=["day"])
    table = conn.get_table("db.p")
    table.upsert([{"day": d, "id": i, "v": i} for d in ("a", "b") for i in range(3)])
    table.delete([{"day": "b", "id": 1}])
    deletes = table.scan_log(change_types=["-D"])
    assert deletes.select("_partition", "id").rows() == [("b", 1)]
    scanner = table.new_scan(change_types=["+I"])
    scanner.subscribe_from_beginning()
    assert scanner.poll().height == 6
