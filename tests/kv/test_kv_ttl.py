"""``table.kv.ttl``: set only at creation; rows not written for longer than the TTL disappear once compaction
reaches them (asynchronously, as in Fluss), no delete record enters the changelog, and a re-written key is new."""

from __future__ import annotations

import pytest

import fluss_lake as fl

HOUR = 3_600_000


def _table(tmp_path, clock, **options) -> fl.Table:
    conn = fl.connect(tmp_path, clock=lambda: clock[0])
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"], bucket_num=2,
                      options={"table.kv.ttl": "1 h", **options})
    return conn.get_table("d.users")


def test_expired_rows_vanish_after_compaction_without_delete_records(tmp_path) -> None:
    clock = [0]
    users = _table(tmp_path, clock)
    users.upsert([{"id": 1, "name": "old"}, {"id": 2, "name": "old"}])
    clock[0] = 2 * HOUR
    users.upsert([{"id": 2, "name": "fresh"}, {"id": 3, "name": "new"}])
    assert users.lookup([{"id": 1}]).get_column("name").to_list() == ["old"]  # not cleaned yet (asynchronous)
    users.compact()
    assert sorted(users.to_polars().get_column("id").to_list()) == [2, 3]
    assert users.new_lookup().lookup_one({"id": 1}) is None
    assert users.lookup([{"id": 1}, {"id": 2}]).get_column("name").to_list() == [None, "fresh"]
    assert "-D" not in users.scan_log().get_column("_change_type").cast(str).to_list()
    assert sorted(fl.connect(tmp_path).get_table("d.users").to_polars().get_column("id").to_list()) == [2, 3]
    users.upsert([{"id": 1, "name": "again"}])  # the key is new again: +I, not an update of the expired row
    last = users.scan_log().filter(users.scan_log()["id"] == 1).tail(1)
    assert last.get_column("_change_type").cast(str).to_list() == ["+I"]


def test_rows_within_the_ttl_survive_compaction(tmp_path) -> None:
    clock = [0]
    users = _table(tmp_path, clock)
    users.upsert([{"id": i, "name": "x"} for i in range(50)])
    clock[0] = HOUR // 2
    users.compact()
    assert users.to_polars().height == 50


def test_kv_ttl_is_fixed_at_creation_and_only_for_primary_keys(tmp_path) -> None:
    clock = [0]
    users = _table(tmp_path, clock)
    with pytest.raises(fl.InvalidAlterError, match="cannot be altered"):
        users.connection.alter_table("d.users", set_options={"table.kv.ttl": "2 h"})
    with pytest.raises(fl.InvalidConfigError, match="table.log.ttl"):
        users.connection.create_table("d.log", schema={"v": "INT"}, options={"table.kv.ttl": "1 h"})
    with pytest.raises(fl.InvalidConfigError, match="positive"):
        users.connection.create_table("d.zero", schema={"k": "INT"}, primary_key=["k"], options={"table.kv.ttl": "0ms"})
    assert users.connection.list_tables("d") == ["users"]
