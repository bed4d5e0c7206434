"""An S3 endpoint that stops answering in the middle of a write.

A dedicated moto server sits behind a small TCP proxy that can pass traffic, refuse connections, answer
503, or black-hole everything from the moment the commit PUT of a log batch goes by: either before the PUT
reaches the server (nothing committed) or after the server acted on it with its answer lost (committed, but
the writer cannot know). One more case stops the moto server itself and restarts it on the same port.

In every case the write must raise ``StorageUnavailableError`` (``retriable``) within a bounded time, a fresh
connection afterwards must find either nothing of the batch or all of it (never part), every log object must
decode with dense offsets, the state must equal the changelog replay, and the same write retried must succeed.
"""

from __future__ import annotations

import time
from typing import Any

import boto3
import polars as pl
import pytest
from s3_proxy import FlakyProxy

import fluss_lake as fl
from fluss_lake.log.log_batch import decode_batch
from fluss_lake.catalog import data_prefix as table_data_prefix

pytestmark = pytest.mark.s3

COMMIT_PUT = rb"PUT /\S*/log/b\d+/\d{20}\.arrow"
DEADLINE_S = 20.0


def check_log_objects(endpoint: str, bucket: str, table: Any) -> None:
    """Every log object decodes completely, its header matches its name, and offsets chain densely."""
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    data_prefix = table_data_prefix(table.info)
    root = table.connection.store.root.split("/", 1)[1]
    for b in range(table.bucket_num):
        prefix = f"{root}/{data_prefix}/log/b{b:05d}/"
        keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []))
        expected_base = 0
        for key in keys:
            batch = decode_batch(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            assert int(key.rsplit("/", 1)[1].split(".")[0]) == batch.header.base_offset == expected_base
            assert batch.rows.num_rows == batch.header.record_count
            expected_base = batch.header.next_offset


SCENARIOS = ["refuse", "error503", pytest.param("blackhole-before-commit", marks=pytest.mark.slow),
             pytest.param("answer-lost-after-commit", marks=pytest.mark.slow), "server-stopped"]


@pytest.fixture
def outage_table(moto_server_factory, s3_bucket_factory, s3_options_factory, tmp_path):
    """A sum table on a dedicated moto server behind a FlakyProxy, with a few batches written."""
    server, endpoint = moto_server_factory()
    proxy = FlakyProxy(int(endpoint.rsplit(":", 1)[1]))
    bucket = s3_bucket_factory(endpoint)
    yield server, endpoint, proxy, bucket
    proxy.close()


def _fast_fail_options(s3_options_factory, endpoint: str) -> dict[str, Any]:
    return s3_options_factory(endpoint, connect_timeout=1, read_timeout=0.5, max_attempts=1, call_timeout=15)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_write_during_outage_fails_cleanly_and_retries(scenario, outage_table, moto_server_factory,
                                                       s3_options_factory, tmp_path, changelog_replay):
    server, endpoint, proxy, bucket = outage_table
    url = f"s3://{bucket}/lake"
    target = endpoint if scenario == "server-stopped" else proxy.endpoint
    conn = fl.connect(url, storage_options=_fast_fail_options(s3_options_factory, target),
                      local_dir=str(tmp_path / "writer"))
    conn.create_database("d")
    conn.create_table("d.t", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"], bucket_num=1,
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    table = conn.get_table("d.t")
    for i in range(3):
        table.upsert([{"k": 1, "v": 1}, {"k": 2 + i, "v": 1}])
    before_end = table.end_offsets()
    before = table.to_polars().sort("k")
    write = [{"k": 1, "v": 10}, {"k": 99, "v": 5}]
    once = pl.DataFrame({"k": [1, 2, 3, 4, 99], "v": [13, 1, 1, 1, 5]}, schema=before.schema)

    if scenario in ("refuse", "error503"):
        proxy.set_mode(scenario)
    elif scenario == "blackhole-before-commit":
        proxy.arm(COMMIT_PUT, lose_response=False)
    elif scenario == "answer-lost-after-commit":
        proxy.arm(COMMIT_PUT, lose_response=True)
    else:
        port = int(endpoint.rsplit(":", 1)[1])
        server.stop()

    writer = table.new_upsert()
    writer.upsert(write)
    started = time.monotonic()
    with pytest.raises(fl.StorageUnavailableError) as failure:
        writer.flush()
    elapsed = time.monotonic() - started
    assert failure.value.retriable is True
    assert elapsed < DEADLINE_S, f"the failed write took {elapsed:.1f}s"
    if scenario in ("blackhole-before-commit", "answer-lost-after-commit"):
        assert proxy.triggered.is_set(), "the outage did not hit the commit PUT"

    # the endpoint comes back
    if scenario == "server-stopped":
        moto_server_factory(port)
    else:
        proxy.set_mode("pass")
    healthy = s3_options_factory(endpoint)
    fresh = fl.connect(url, storage_options=healthy, local_dir=str(tmp_path / "fresh")).get_table("d.t")
    committed = scenario == "answer-lost-after-commit"
    after_end = fresh.end_offsets()
    if committed:
        # the server created the batch before its answer was lost: all of it is there (-U/+U of key 1, +I of 99)
        assert after_end == {0: before_end[0] + 3}
        assert fresh.to_polars().sort("k").equals(once)
    else:
        assert after_end == before_end, "a failed write left part of a batch behind"
        assert fresh.to_polars().sort("k").equals(before)
    assert fresh.to_polars().sort("k").equals(changelog_replay(fresh))
    check_log_objects(endpoint, bucket, fresh)

    # the same write retried (flush the same writer again) succeeds, and lands exactly once
    result = writer.flush()
    assert result.offsets[0][0] == before_end[0]
    final = fl.connect(url, storage_options=healthy, local_dir=str(tmp_path / "final")).get_table("d.t")
    state = final.to_polars().sort("k")
    assert state.equals(once), "the retried write was not applied exactly once"
    assert state.equals(changelog_replay(final))
    assert state.equals(table.to_polars().sort("k"))
    assert final.end_offsets() == {0: before_end[0] + 3}
    check_log_objects(endpoint, bucket, final)


@pytest.mark.slow
def test_write_retried_after_lost_answer_lands_once_in_a_log_table(outage_table, s3_options_factory, tmp_path):
    """Appends too: the batch landed, its answer was lost, flushing the writer again must not add it twice."""
    server, endpoint, proxy, bucket = outage_table
    url = f"s3://{bucket}/lake"
    conn = fl.connect(url, storage_options=_fast_fail_options(s3_options_factory, proxy.endpoint),
                      local_dir=str(tmp_path / "writer"))
    conn.create_database("d")
    conn.create_table("d.log", schema={"id": "INT"}, bucket_num=2, bucket_keys=["id"])
    table = conn.get_table("d.log")
    table.append([{"id": i} for i in range(4)])
    writer = table.new_append()
    writer.append([{"id": i} for i in range(100, 110)])
    proxy.arm(COMMIT_PUT, lose_response=True)
    with pytest.raises(fl.StorageUnavailableError):
        writer.flush()
    proxy.set_mode("pass")
    writer.flush()
    fresh = fl.connect(url, storage_options=s3_options_factory(endpoint), local_dir=str(tmp_path / "f"))
    ids = fresh.get_table("d.log").scan_log().get_column("id").sort().to_list()
    assert ids == [*range(4), *range(100, 110)]
    check_log_objects(endpoint, bucket, fresh.get_table("d.log"))


def test_lost_answer_healed_by_a_retry_is_recognised_as_ours(outage_table, s3_options_factory, tmp_path,
                                                             changelog_replay):
    """One lost answer, and s3fs's retry of the conditional PUT meets the object it created itself: the write
    succeeds, exactly once, with no error for the caller."""
    server, endpoint, proxy, bucket = outage_table
    url = f"s3://{bucket}/lake"
    conn = fl.connect(url, storage_options=_fast_fail_options(s3_options_factory, proxy.endpoint),
                      local_dir=str(tmp_path / "writer"))
    conn.create_database("d")
    conn.create_table("d.t", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"],
                      options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    table = conn.get_table("d.t")
    table.upsert([{"k": 1, "v": 1}])
    proxy.arm(COMMIT_PUT, lose_response=True, then="pass")
    result = table.upsert([{"k": 1, "v": 10}])
    assert proxy.triggered.is_set()
    assert result.offsets == {0: (1, 3)}
    fresh = fl.connect(url, storage_options=s3_options_factory(endpoint), local_dir=str(tmp_path / "f")).get_table("d.t")
    assert fresh.to_polars().to_dicts() == [{"k": 1, "v": 11}]
    assert fresh.end_offsets() == {0: 3}
    assert changelog_replay(fresh).to_dicts() == [{"k": 1, "v": 11}]
    # and a second create of the same database is refused, though its marker bytes may be identical
    with pytest.raises(fl.DatabaseAlreadyExistError):
        conn.create_database("d")


def test_call_deadline_bounds_a_request_that_never_ends(outage_table, s3_options_factory):
    """Whatever the transport does (here: a read timeout far away), one storage call ends by `call_timeout`."""
    server, endpoint, proxy, bucket = outage_table
    options = s3_options_factory(proxy.endpoint, connect_timeout=1, read_timeout=120, max_attempts=1,
                                 call_timeout=2)
    conn = fl.connect(f"s3://{bucket}/lake", storage_options=options)
    conn.create_database("d")
    proxy.set_mode("blackhole")
    started = time.monotonic()
    with pytest.raises(fl.StorageUnavailableError) as failure:
        conn.list_databases()
    assert time.monotonic() - started < 10
    assert failure.value.retriable is True
    proxy.set_mode("pass")
    assert conn.list_databases() == ["d"]
