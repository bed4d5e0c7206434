"""Integrity on S3 (moto server): objects damaged in the bucket are named by `verify()`, a damaged state segment
is rebuilt from the log on the next open (each download is checked), and a flipped log batch raises
`CorruptedDataError` in every read instead of answering."""

from __future__ import annotations

import boto3
import numpy as np
import polars as pl
import pytest

import fluss_lake as fl

pytestmark = pytest.mark.s3


def _client(options: dict):
    return boto3.client(
        "s3",
        endpoint_url=options["endpoint_url"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
        region_name=options["client_kwargs"]["region_name"],
    )


def _flip(s3, bucket: str, key: str, at: int) -> None:
    body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    body[at % len(body)] ^= 0x20
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))


def test_damage_on_s3_is_named_refused_and_state_rebuilt(s3_url, tmp_path) -> None:
    url, options = s3_url
    bucket, root = url.removeprefix("s3://").split("/", 1)
    conn = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "s1"), snapshot_every=1)
    conn.create_database("d")
    conn.create_table("d.kv", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"])
    conn.create_table("d.ev", schema={"id": "BIGINT"}, bucket_num=1)
    kv, ev = conn.get_table("d.kv"), conn.get_table("d.ev")
    for step in range(3):
        ids = np.arange(step * 100, step * 100 + 150)
        kv.upsert(pl.DataFrame({"id": ids, "v": [f"v{step}"] * len(ids)}))
        ev.append(pl.DataFrame({"id": ids}))
    kv.snapshot()
    state, log = kv.to_polars().sort("id"), ev.scan_log()
    s3 = _client(options)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=root)["Contents"]]
    segment = next(k for k in keys if "/kv/b00000/segments/" in k and k.endswith(".arrow"))
    batch = sorted(k for k in keys if "/d/ev/" in k and "/log/b00000/" in k and k.endswith(".arrow"))[1]
    _flip(s3, bucket, segment, 40)
    _flip(s3, bucket, batch, -20)
    fresh = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "s2"))
    found = {r.table: r for r in fresh.verify()}
    assert [d.key for d in found["d.kv"].damage] == [segment.removeprefix(f"{root}/")]
    assert [d.key for d in found["d.ev"].damage] == [batch.removeprefix(f"{root}/")]
    with pytest.raises(fl.CorruptedDataError) as raised:
        fl.connect(url, storage_options=options, local_dir=str(tmp_path / "s3")).get_table("d.ev").scan_log()
    assert raised.value.bucket == 0 and raised.value.key is not None and raised.value.key.endswith(batch[-30:])
    reopened = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "s4")).get_table("d.kv")
    assert reopened.to_polars().sort("id").equals(state)  # rebuilt from the log, a new snapshot published
    again = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "s5"))
    assert {r.table: r for r in again.verify()}["d.kv"].ok
    assert not {r.table: r for r in again.verify()}["d.ev"].ok and log.height == 450
