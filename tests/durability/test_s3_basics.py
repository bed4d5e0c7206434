"""Tables on S3 (moto server): every operation works through s3fs, and a new Connection sees the same data.

The second connection has its own local state folder and no cached tablets, like a new process: it must
restore primary-key state from the latest snapshot on S3 and replay only the log tail after it.
"""

from __future__ import annotations

import polars as pl
import pytest

import fluss_lake as fl

pytestmark = pytest.mark.s3


def _dense(frame: pl.DataFrame) -> None:
    """Offsets of every bucket are 0..n-1, each exactly once."""
    for (bucket,), part in frame.group_by("_bucket"):
        offsets = sorted(part.get_column("_offset").to_list())
        assert offsets == list(range(len(offsets))), f"bucket {bucket}: offsets not dense"


def test_s3_tables_roundtrip_and_second_connection(s3_url, tmp_path, changelog_replay):
    url, options = s3_url
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "state-1"), snapshot_every=4)
    conn.create_database("shop")
    assert conn.list_databases() == ["shop"]
    with pytest.raises(fl.DatabaseAlreadyExistError):
        conn.create_database("shop")

    # -- log table: batches spread over both buckets by the bucket key
    conn.create_table("shop.events", schema={"id": "BIGINT", "kind": "STRING"}, bucket_num=2, bucket_keys=["id"])
    events = conn.get_table("shop.events")
    for start in (0, 10, 20):
        result = events.append([{"id": i, "kind": f"k{i % 3}"} for i in range(start, start + 10)])
        assert result.rows == 10
    log = events.scan_log()
    assert sorted(log.get_column("id").to_list()) == list(range(30))
    assert set(log.get_column("_change_type").cast(pl.String).to_list()) == {"+A"}
    assert log.get_column("_bucket").n_unique() == 2
    _dense(log)
    assert sum(events.end_offsets().values()) == 30

    # -- primary-key table: upserts, an update, a delete
    conn.create_table("shop.users", schema={"id": "INT", "name": "STRING", "visits": "BIGINT"},
                      primary_key=["id"], bucket_num=2)
    users = conn.get_table("shop.users")
    users.upsert([{"id": i, "name": f"u{i}", "visits": i} for i in range(1, 21)])
    users.upsert([{"id": 1, "name": "ann", "visits": 100}])
    users.delete([{"id": 2}])
    expected = {i: (f"u{i}", i) for i in range(1, 21)}
    expected[1] = ("ann", 100)
    del expected[2]
    state = users.to_polars().sort("id")
    assert {r["id"]: (r["name"], r["visits"]) for r in state.to_dicts()} == expected
    assert state.equals(changelog_replay(users))

    log1 = users.changelog().filter(pl.col("id") == 1)
    assert log1.get_column("_change_type").to_list() == ["insert", "update_before", "update_after"]
    assert log1.get_column("name").to_list() == ["u1", "u1", "ann"]
    assert users.changelog().filter(pl.col("id") == 2).get_column("_change_type").to_list() == ["insert", "delete"]
    found = users.lookup([{"id": 1}, {"id": 2}, {"id": 99}])
    assert found.get_column("name").to_list() == ["ann", None, None]

    # Many small writes so each bucket takes snapshots, then a tail after the last snapshot.
    for round_ in range(6):
        users.upsert([{"id": 30 + round_, "name": "x", "visits": round_}, {"id": 31 + round_, "name": "y", "visits": 0}])
    users.snapshot()
    users.upsert([{"id": 1, "name": "ann", "visits": 101}])  # the tail: after every snapshot
    users.upsert([{"id": 40, "name": "z", "visits": 7}])
    snapshots = [k for k in conn.store.fs.find(conn.store.root) if "/kv/" in k and "/snapshots/" in k]
    segments = [k for k in conn.store.fs.find(conn.store.root) if "/kv/" in k and "/segments/" in k]
    assert snapshots and segments, "primary-key state was never snapshotted to S3"
    state = users.to_polars().sort("id")
    changes = users.changelog().sort("_log_offset")

    # -- a second connection: a new Connection object, its own state folder, no shared tablets
    other = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "state-2"))
    assert other is not conn and other.list_databases() == ["shop"]
    assert other.list_tables("shop") == ["events", "users"]
    users2 = other.get_table("shop.users")
    restored = users2.to_polars().sort("id")
    assert restored.equals(state)
    assert restored.equals(changelog_replay(users2))
    for bucket in range(users2.bucket_num):
        tablet = users2._tablets().kv_tablet(bucket)
        assert tablet.last_snapshot > 0, f"bucket {bucket} replayed everything instead of restoring a snapshot"
        assert tablet.applied == tablet.log.end_offset
    assert any(users2._tablets().kv_tablet(b).last_snapshot < users2._tablets().kv_tablet(b).applied for b in range(2)), \
        "no bucket had a log tail to replay after its snapshot"
    assert users2.changelog().sort("_log_offset").equals(changes)
    assert users2.lookup([{"id": 1}, {"id": 2}, {"id": 40}]).get_column("visits").to_list() == [101, None, 7]
    assert other.get_table("shop.events").scan_log().sort("_bucket", "_offset").equals(
        events.scan_log().sort("_bucket", "_offset"))

    # -- writes through the second connection are seen by the first (it catches up from the log)
    users2.upsert([{"id": 50, "name": "from-2", "visits": 1}])
    other.get_table("shop.events").append([{"id": 100, "kind": "late"}])
    assert users.lookup([{"id": 50}]).get_column("name").to_list() == ["from-2"]
    assert 100 in events.scan_log().get_column("id").to_list()
    assert users.to_polars().sort("id").equals(users2.to_polars().sort("id"))
