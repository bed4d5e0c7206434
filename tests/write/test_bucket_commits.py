"""A write's buckets commit side by side (threads of ``fluss_lake.write.bucket_commits``) and each stays
all-or-nothing: a bucket whose commit fails is neither in the log nor in the state, the others are committed, and
the writer's next flush commits the failed one exactly once.

Failures are injected by wrapping the store's ``put_if_absent`` for one bucket's log objects (test
instrumentation, as in ``test_idempotent_retry``; real outages are covered in tests/durability)."""

from __future__ import annotations

import threading

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.write import bucket_commits

BUCKETS = 4


class FailBuckets:
    """Wraps ``put_if_absent``: the first put of each chosen bucket's log object fails (after landing, with
    `land`); records the threads that committed log objects."""

    def __init__(self, store, buckets: set[int], *, land: bool = False) -> None:
        self.real, self.pending, self.land = store.put_if_absent, set(buckets), land
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, key: str, data: bytes) -> bool:
        if "/log/b" in key:
            bucket = int(key.split("/log/b", 1)[1][:5])
            with self.lock:
                self.threads.add(threading.get_ident())
                fail = bucket in self.pending
                self.pending.discard(bucket)
            if fail:
                if self.land:
                    self.real(key, data)
                raise fl.StorageUnavailableError(f"bucket {bucket}: endpoint went away (simulated)")
        return self.real(key, data)


def _table(tmp_path, *, primary_key: bool) -> fl.Table:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    kw = {"primary_key": ["id"]} if primary_key else {"bucket_keys": ["id"]}
    conn.create_table("d.t", schema={"id": "INT", "v": "STRING"}, bucket_num=BUCKETS, **kw)
    return conn.get_table("d.t")


def _rows(n: int, v: str = "a") -> list[dict]:
    return [{"id": i, "v": v} for i in range(n)]


@pytest.mark.parametrize("primary_key", [True, False], ids=["pk", "log"])
@pytest.mark.parametrize("land", [False, True], ids=["lost", "landed"])
def test_a_failed_bucket_alone_stays_uncommitted_and_the_retry_is_exactly_once(
    tmp_path, monkeypatch, primary_key, land
) -> None:
    table = _table(tmp_path, primary_key=primary_key)
    store = table.connection.store
    writer = table.new_upsert() if primary_key else table.new_append()
    (writer.upsert if primary_key else writer.append)(_rows(40))
    before = table.end_offsets()
    failing = FailBuckets(store, {2}, land=land)
    monkeypatch.setattr(store, "put_if_absent", failing)
    with pytest.raises(fl.StorageUnavailableError, match="bucket 2"):
        writer.flush()
    after = table.end_offsets()
    assert all(after[b] > before[b] for b in (0, 1, 3))  # the other buckets are committed
    if not land:  # bucket 2 holds nothing of this write, neither in its log nor in the state
        assert after[2] == before[2]
        seen = table.to_polars() if primary_key else table.scan_log()
        assert seen.height == 40 - _bucket_rows(table, 2) > 0
    writer.flush()  # the retry commits bucket 2 once
    log = table.scan_log()
    assert sorted(log.filter(pl.col("_change_type").is_in(["+I", "+A"]))["id"].to_list()) == list(range(40))
    for bucket in range(BUCKETS):
        offsets = log.filter(pl.col("_bucket") == bucket)["_offset"].to_list()
        assert offsets == list(range(len(offsets)))
    if primary_key:  # ... and a fresh process rebuilds the same state from the log
        fresh = fl.connect(tmp_path).get_table("d.t")
        assert sorted(fresh.to_polars()["id"].to_list()) == list(range(40))


def _bucket_rows(table: fl.Table, bucket: int) -> int:
    """Rows of the write that hash to `bucket` (from a throwaway table of the same layout)."""
    return int(table._runtime.buckets_of(pl.DataFrame({"id": list(range(40))}, schema={"id": pl.Int32})).tolist()
               .count(bucket))


def test_the_state_of_a_failed_bucket_is_unchanged(tmp_path, monkeypatch) -> None:
    table = _table(tmp_path, primary_key=True)
    table.upsert(_rows(40, "old"))
    store = table.connection.store
    monkeypatch.setattr(store, "put_if_absent", FailBuckets(store, {1}))
    with pytest.raises(fl.StorageUnavailableError):
        table.upsert(_rows(40, "new"))
    state = table.to_polars().with_columns(
        pl.Series("_b", table._runtime.buckets_of(table.to_polars().select("id")))
    )
    assert set(state.filter(pl.col("_b") == 1)["v"]) == {"old"}
    assert set(state.filter(pl.col("_b") != 1)["v"]) == {"new"}


def test_every_failed_bucket_is_reported(tmp_path, monkeypatch) -> None:
    table = _table(tmp_path, primary_key=True)
    store = table.connection.store
    monkeypatch.setattr(store, "put_if_absent", FailBuckets(store, {0, 3}))
    writer = table.new_upsert()
    writer.upsert(_rows(40))
    with pytest.raises(fl.StorageUnavailableError) as err:
        writer.flush()
    assert any("another bucket of this write failed too" in note for note in err.value.__notes__)
    writer.flush()
    assert sorted(table.to_polars()["id"].to_list()) == list(range(40))


def test_buckets_commit_in_several_threads(tmp_path, monkeypatch) -> None:
    table = _table(tmp_path, primary_key=True)
    store = table.connection.store
    recording = FailBuckets(store, set())
    monkeypatch.setattr(store, "put_if_absent", recording)
    table.upsert(_rows(400))
    assert len(recording.threads) > 1
    assert table.to_polars().height == 400


def test_a_process_whose_pid_changed_makes_its_own_pool(tmp_path, monkeypatch) -> None:
    """A forked child keeps the pool object but not its threads: the pool is made again when the pid differs."""
    table = _table(tmp_path, primary_key=True)
    table.upsert(_rows(40))
    parent_pool = bucket_commits._pool
    assert parent_pool is not None
    monkeypatch.setattr(bucket_commits, "_pool_pid", -1)  # as seen from a forked child
    table.upsert(_rows(40, "again"))
    assert bucket_commits._pool is not parent_pool
    assert set(table.to_polars()["v"]) == {"again"}
