"""The lake's S3 endpoint stops answering in the middle of a tiering round.

The lake's warehouse sits on a dedicated moto server behind the FlakyProxy of ``tests/s3_proxy.py``; the live
store talks to the server directly. The proxy refuses connections, swallows the first data-file PUT (the
round hangs until the request timeout), or forwards the new metadata file and loses its answer (the object
exists, the catalog commit never happens). Each time the round must raise the retriable
``LakeUnavailableError`` within a bounded time, the lake's snapshot and offsets must be as before (no partial
commit), and the next round must complete with the lake equal to the live table, without duplicates.

The lake uses pyiceberg's PyArrowFileIO with ``s3.connect-timeout``/``s3.request-timeout`` and a one-attempt
retry strategy: with FsspecFileIO, a request whose answer never comes kept s3fs waiting for minutes (there is
no overall deadline on its calls), so PyArrowFileIO is the FileIO to run tiering with on S3 (docs/TIERING.md).
"""

from __future__ import annotations

import time

import pytest
from s3_proxy import FlakyProxy
from tiering_helpers import LAKE_ON, lake_properties, lake_rows, sorted_rows

import fluss_lake as fl
from tiering import Lake, tier_table

pytestmark = pytest.mark.s3

DEADLINE_S = 45.0
SCENARIOS = {
    "refuse": None,
    "data-file-put-swallowed": (rb"PUT /\S*/warehouse/\S*/data/\S*\.parquet", False),
    "metadata-answer-lost": (rb"PUT /\S*/warehouse/\S*/metadata/\S*\.metadata\.json", True),
}


@pytest.mark.parametrize("scenario", [pytest.param(s, marks=pytest.mark.slow) if s != "refuse" else s
                                      for s in SCENARIOS])
def test_lake_outage_mid_round_fails_cleanly_and_the_next_round_completes(scenario, moto_server_factory,
                                                                          s3_bucket_factory, s3_options_factory,
                                                                          tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore: fail fast instead of retrying a dead endpoint
    _server, endpoint = moto_server_factory()
    proxy = FlakyProxy(int(endpoint.rsplit(":", 1)[1]))
    try:
        bucket = s3_bucket_factory(endpoint)
        conn = fl.connect(f"s3://{bucket}/live", storage_options=s3_options_factory(endpoint),
                          local_dir=str(tmp_path / "state"))
        conn.create_database("d")
        conn.create_table("d.kv", schema={"k": "INT", "v": "STRING"}, primary_key=["k"], bucket_num=2,
                          options=LAKE_ON)
        kv = conn.get_table("d.kv")
        props = lake_properties(proxy.endpoint, bucket, str(tmp_path / "catalog.db"),
                                **{"s3.connect-timeout": "1", "s3.request-timeout": "2",
                                   "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
                                   "s3.retry-strategy-impl": "tiering_helpers.FailFastRetry"})
        lake = Lake(props)
        kv.upsert([{"k": k, "v": "a"} for k in range(20)])
        tier_table(kv, lake)
        before = (lake.snapshot("d.kv"), lake.snapshot("d.kv", "history"))
        kv.upsert([{"k": 1, "v": "b"}, {"k": 50, "v": "new"}])
        kv.delete([{"k": 2}])

        if scenario == "refuse":
            proxy.set_mode("refuse")
        else:
            pattern, lose = SCENARIOS[scenario]
            proxy.arm(pattern, lose_response=lose)
        started = time.monotonic()
        with pytest.raises(fl.LakeUnavailableError) as failure:
            tier_table(kv, Lake(props))
        elapsed = time.monotonic() - started
        assert failure.value.retriable and "run the round again" in str(failure.value)
        assert elapsed < DEADLINE_S, f"the failed round took {elapsed:.1f}s"
        if scenario != "refuse":
            assert proxy.triggered.is_set(), "the outage did not hit the intended request"

        proxy.set_mode("pass")
        fresh = Lake(props)
        assert (fresh.snapshot("d.kv"), fresh.snapshot("d.kv", "history")) == before, "a partial commit happened"
        report = tier_table(kv, fresh)
        assert report.committed and dict(report.end_offsets) == kv.end_offsets()
        state = lake_rows(fresh, "d.kv")
        assert sorted_rows(state, ["k", "v"]) == sorted_rows(kv.to_polars(), ["k", "v"])
        history = lake_rows(fresh, "d.kv", "history")
        assert history.select("__bucket", "__offset").is_duplicated().sum() == 0
        assert history.height == kv.scan_log().height
    finally:
        proxy.close()
