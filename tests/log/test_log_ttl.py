"""``table.log.ttl``: whole expired batches disappear, readers of expired offsets get a clear error, and a
primary-key table's state survives (its changelog is bounded, never its rows)."""

from __future__ import annotations

import pytest

import fluss_lake as fl

HOUR = 3_600_000


def _connect(tmp_path, clock):
    conn = fl.connect(tmp_path, clock=lambda: clock[0])
    conn.create_database("d", ignore_if_exists=True)
    return conn


def test_log_table_expiry(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.events", schema={"v": "INT"}, options={"table.log.ttl": "2 h"})
    events = conn.get_table("d.events")
    for hour in range(5):  # one batch per hour, two rows each: offsets 2h, 2h+1
        clock[0] = hour * HOUR
        events.append([{"v": hour}, {"v": hour}])
    assert events.expire_log(now_ms=4 * HOUR + 1) == {0: 6}  # batches of hours 0, 1, 2 are older than 2 h
    assert events.scan_log().get_column("v").to_list() == [3, 3, 4, 4]
    assert events.scan_log().get_column("_offset").to_list() == [6, 7, 8, 9]
    with pytest.raises(fl.OffsetOutOfRangeError, match="earliest"):
        events.scan_log(start_offsets={0: 0})
    scanner = events.new_scan()
    scanner.subscribe_from_beginning()
    assert scanner.poll().height == 4
    assert events.end_offsets() == {0: 10}
    other = fl.connect(tmp_path).get_table("d.events")  # another process sees the shortened log
    assert other.earliest_offsets() == {0: 6}
    assert other.scan_log().get_column("v").to_list() == [3, 3, 4, 4]


def test_expiry_of_another_process_is_seen_by_a_reader_that_knew_the_old_batches(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.events", schema={"v": "INT"})  # no TTL while writing: nothing expires yet
    writer = conn.get_table("d.events")
    for hour in range(3):
        clock[0] = hour * HOUR
        writer.append([{"v": hour}])
    reader = fl.connect(tmp_path).get_table("d.events")
    assert reader.scan_log().height == 3  # the reader now knows batches 0, 1, 2
    conn.alter_table("d.events", set_options={"table.log.ttl": "1 h"})
    writer = conn.get_table("d.events")
    writer.expire_log(now_ms=3 * HOUR)
    assert reader.earliest_offsets() == {0: 2}
    with pytest.raises(fl.OffsetOutOfRangeError):
        reader.scan_log(start_offsets={0: 0})
    assert reader.scan_log().get_column("v").to_list() == [2]


def test_the_newest_batch_is_never_expired_and_ttl_zero_disables(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.a", schema={"v": "INT"}, options={"table.log.ttl": "1 h"})
    conn.create_table("d.off", schema={"v": "INT"}, options={"table.log.ttl": "0ms"})
    for name in ("d.a", "d.off"):
        conn.get_table(name).append([{"v": 1}])
        conn.get_table(name).append([{"v": 2}])
    assert conn.get_table("d.a").expire_log(now_ms=100 * HOUR) == {0: 1}
    assert conn.get_table("d.a").end_offsets() == {0: 2}
    assert conn.get_table("d.off").expire_log(now_ms=100 * HOUR) == {0: 0}


def test_primary_key_state_survives_changelog_expiry(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"],
                      options={"table.log.ttl": "1 h"})
    users = conn.get_table("d.users")
    for hour in range(4):
        clock[0] = hour * HOUR
        users.upsert([{"id": hour, "name": f"u{hour}"}, {"id": 0, "name": f"zero@{hour}"}])
    users.delete([{"id": 1}])
    state = users.to_polars().sort("id")
    earliest = users.expire_log(now_ms=10 * HOUR)
    assert earliest[0] > 0
    assert users.changelog().height < 12  # the changelog is shorter ...
    fresh = fl.connect(tmp_path).get_table("d.users")  # ... but the state is whole, in a new process too
    assert fresh.to_polars().sort("id").equals(state)
    assert fresh.lookup([{"id": 0}]).get_column("name").to_list() == ["zero@3"]
    fresh.upsert([{"id": 9, "name": "later"}])
    assert fl.connect(tmp_path).get_table("d.users").to_polars().height == state.height + 1


def test_retention_option_is_alterable(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.events", schema={"v": "INT"})
    events = conn.get_table("d.events")
    events.append([{"v": 1}])
    clock[0] = 2 * HOUR
    events.append([{"v": 2}])
    assert events.expire_log(now_ms=3 * HOUR) == {0: 0}  # default 7 days
    conn.alter_table("d.events", set_options={"table.log.ttl": "1 h"})
    assert conn.get_table("d.events").expire_log(now_ms=3 * HOUR) == {0: 1}


def test_writers_apply_retention_without_a_separate_service(tmp_path) -> None:
    clock = [0]
    conn = _connect(tmp_path, clock)
    conn.create_table("d.events", schema={"v": "INT"}, options={"table.log.ttl": "1 h"})
    events = conn.get_table("d.events")
    for hour in range(3):  # each flush checks retention at most every ten minutes of the table clock
        clock[0] = hour * HOUR
        events.append([{"v": hour}])
    assert events.earliest_offsets() == {0: 1}  # the flush at hour 2 expired hour 0's batch (older than 1 h)
    assert events.scan_log().get_column("v").to_list() == [1, 2]
