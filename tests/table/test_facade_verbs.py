"""The Table verbs added with the core redesign: batch headers without rows, a bucket's state with its offset,
and the narrow facade itself (internals are private)."""

from __future__ import annotations

import pytest

import fluss_lake as fl
import fluss_lake.log.log_tablet as log_tablet_module
from fluss_lake.exceptions import InvalidConfigError, OffsetOutOfRangeError, UnsupportedOperationError


@pytest.fixture
def conn(tmp_path) -> fl.Connection:
    connection = fl.connect(str(tmp_path / "store"))
    connection.create_database("d")
    return connection


def test_batch_headers_name_each_batch_without_decoding_rows(conn, monkeypatch) -> None:
    conn.create_table("d.ev", schema={"v": "INT"})
    events = conn.get_table("d.ev")
    writer = events.new_append()
    writer.writer_id = "job-x-1"
    writer.append([{"v": 1}, {"v": 2}])
    writer.flush()
    events.append([{"v": 3}])
    decoded = []
    real = log_tablet_module.LogTablet._batch
    monkeypatch.setattr(log_tablet_module.LogTablet, "_batch", lambda self, *a, **k: decoded.append(a) or real(self, *a, **k))
    headers = events.batch_headers(0)
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 2), (2, 1)]
    assert headers[0].writer_id == "job-x-1" and headers[1].writer_id != "job-x-1"
    assert decoded == []  # headers only
    assert [h.base_offset for h in events.batch_headers(0, start_offset=2)] == [2]
    assert events.batch_headers(0, start_offset=3) == []  # at the log end: nothing after it
    with pytest.raises(OffsetOutOfRangeError):
        events.batch_headers(0, start_offset=7)
    with pytest.raises(InvalidConfigError):
        events.batch_headers(1)


def test_bucket_state_is_the_rows_and_the_offset_they_reflect(conn) -> None:
    conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"], bucket_num=2)
    users = conn.get_table("d.u")
    users.upsert([{"id": i, "v": i} for i in range(20)])
    users.delete([{"id": 0}, {"id": 1}])
    other = fl.connect(conn.url).get_table("d.u")  # another process: it catches up from the log
    ends = users.end_offsets()
    current = users.lookup(users.to_polars().select("id"), with_offsets=True)
    for bucket in range(2):
        state = other.bucket_state(bucket)
        assert state.offset == ends[bucket]
        assert sorted(state.rows["id"].to_list()) == sorted(current.filter(_bucket=bucket)["id"].to_list())
    assert sum(other.bucket_state(b).rows.height for b in range(2)) == 18
    with pytest.raises(InvalidConfigError):
        users.bucket_state(2)
    conn.create_table("d.ev", schema={"v": "INT"})
    with pytest.raises(UnsupportedOperationError):
        conn.get_table("d.ev").bucket_state(0)


def test_bucket_state_of_a_partitioned_table_needs_a_partition_handle(conn) -> None:
    conn.create_table("d.p", schema={"day": "STRING", "id": "INT", "v": "INT"}, primary_key=["day", "id"],
                      partition_keys=["day"])
    orders = conn.get_table("d.p")
    orders.upsert([{"day": "a", "id": 1, "v": 1}, {"day": "b", "id": 2, "v": 2}])
    with pytest.raises(UnsupportedOperationError, match="partition"):
        orders.bucket_state(0)
    state = orders.partition("b").bucket_state(0)
    assert state.rows.to_dicts() == [{"day": "b", "id": 2, "v": 2}] and state.offset == 1


def test_the_facade_exposes_no_tablets_or_internals(conn) -> None:
    conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"])
    users = conn.get_table("d.u")
    for internal in ("kv_tablet", "log_tablet", "buckets_of", "merge_spec", "prefix_key", "maybe_maintain",
                     "next_round_robin_bucket", "writer_id"):
        assert not hasattr(users, internal), internal
    rows = users.lookup([{"id": 1}], with_found=True, with_offsets=True)  # the lookup verbs' shared options
    assert rows.columns == ["id", "v", "_found", "_bucket", "_offset"] and rows["_found"].to_list() == [False]
