"""A write whose commit reached the storage but whose answer was lost (raised as a retriable error) is
committed exactly once when the same writer flushes again; a batch that did not land is committed on retry.

The lost answer is simulated by wrapping the store's put: the real put runs, then the wrapper raises
``StorageUnavailableError`` (test instrumentation; the S3 outage itself is covered in tests/durability)."""

from __future__ import annotations

import pytest

import fluss_lake as fl


class LostAnswer:
    """Wraps ``put_if_absent``: on the chosen call, do (or skip) the put and then report the endpoint gone."""

    def __init__(self, store, *, fail_on_call: int, land: bool) -> None:
        self.store, self.real = store, store.put_if_absent
        self.calls, self.fail_on_call, self.land = 0, fail_on_call, land

    def __call__(self, key: str, data: bytes) -> bool:
        self.calls += 1
        if self.calls == self.fail_on_call and "/log/" in key:
            if self.land:
                self.real(key, data)
            raise fl.StorageUnavailableError("endpoint went away (simulated)")
        return self.real(key, data)


@pytest.mark.parametrize("land", [True, False], ids=["landed", "lost"])
def test_log_append_retry_is_exactly_once(tmp_path, monkeypatch, land) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.events", schema={"id": "INT", "v": "STRING"}, bucket_num=2, bucket_keys=["id"])
    table = conn.get_table("d.events")
    writer = table.new_append()
    writer.append([{"id": i, "v": "x"} for i in range(20)])
    monkeypatch.setattr(conn.store, "put_if_absent", LostAnswer(conn.store, fail_on_call=2, land=land))
    with pytest.raises(fl.StorageUnavailableError) as err:
        writer.flush()
    assert err.value.retriable
    writer.flush()  # the retry
    rows = table.scan_log()
    assert sorted(rows.get_column("id").to_list()) == list(range(20))
    for bucket in (0, 1):
        offsets = rows.filter(rows["_bucket"] == bucket).get_column("_offset").to_list()
        assert offsets == list(range(len(offsets)))


@pytest.mark.parametrize("land", [True, False], ids=["landed", "lost"])
def test_aggregation_upsert_retry_is_exactly_once(tmp_path, monkeypatch, land) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.spend", schema={"id": "INT", "total": "BIGINT"}, primary_key=["id"], bucket_num=3,
                      options={"table.merge-engine": "aggregation", "fields.total.agg": "sum"})
    table = conn.get_table("d.spend")
    table.upsert([{"id": i, "total": 1} for i in range(30)])
    writer = table.new_upsert()
    writer.upsert([{"id": i, "total": 10} for i in range(30)])
    monkeypatch.setattr(conn.store, "put_if_absent", LostAnswer(conn.store, fail_on_call=2, land=land))
    with pytest.raises(fl.StorageUnavailableError):
        writer.flush()
    writer.flush()
    assert table.to_polars().get_column("total").to_list() == [11] * 30
    fresh = fl.connect(tmp_path).get_table("d.spend")
    assert sorted(fresh.to_polars().get_column("total").to_list()) == [11] * 30
