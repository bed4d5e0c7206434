"""One Table shared by threads: concurrent writers, lookups and scans stay consistent (tablets lock per bucket)."""

from __future__ import annotations

import threading

import polars as pl

import fluss_lake as fl


def test_threads_share_a_table(tmp_path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("d")
    conn.create_table("d.spend", schema={"id": "INT", "total": "BIGINT"}, primary_key=["id"], bucket_num=2,
                      options={"table.merge-engine": "aggregation", "fields.total.agg": "sum"})
    table = conn.get_table("d.spend")
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        try:
            for step in range(25):
                table.upsert(pl.DataFrame({"id": [i % 20 for i in range(seed, seed + 10)], "total": [1] * 10},
                                          schema={"id": pl.Int32, "total": pl.Int64}))
                if step % 5 == 0:
                    table.lookup(pl.DataFrame({"id": list(range(20))}, schema={"id": pl.Int32}))
                    table.new_lookup().lookup_one({"id": seed % 20})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert table.to_polars().get_column("total").sum() == 4 * 25 * 10
    fresh = fl.connect(tmp_path).get_table("d.spend")
    assert fresh.to_polars().sort("id").equals(table.to_polars().sort("id"))
