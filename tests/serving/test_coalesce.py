"""Concurrent online-feature requests for the same views are answered by one call, split back exactly; a batch
that fails is answered request by request, so only the bad request fails."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

import fluss_lake as fl
import serving
from fluss_lake.training import FeatureView, OnlineFeatures, online_features
from serving.coalesce import Coalescer


def _answer(rows: pl.DataFrame) -> OnlineFeatures:
    if (rows["id"] < 0).any():
        raise fl.InvalidConfigError("negative ids are refused")
    status = pl.Series("s", ["PRESENT"] * rows.height)
    times = pl.Series("t", rows["id"] * 10)
    return OnlineFeatures(rows.with_columns(doubled=pl.col("id") * 2), datetime.now(UTC), (status,), (times,), ())


def test_requests_queued_behind_a_running_call_are_answered_by_one_call() -> None:
    coalescer = Coalescer()
    release, started, calls = threading.Event(), threading.Event(), []

    def compute(rows: pl.DataFrame) -> OnlineFeatures:
        calls.append(rows["id"].to_list())
        if len(calls) == 1:
            started.set()
            release.wait(10)  # the first call runs while the others arrive
        return _answer(rows)

    requests = [pl.DataFrame({"id": [i, i + 100]}) for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(coalescer.run, "v", requests[0], compute)
        assert started.wait(10)
        rest = [pool.submit(coalescer.run, "v", r, compute) for r in requests[1:]]
        deadline = time.monotonic() + 10
        while len(coalescer._queues.get("v", [])) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()
        answers = [first.result(10)] + [f.result(10) for f in rest]
    assert len(calls) == 2 and sorted(calls[1]) == sorted(x for r in requests[1:] for x in r["id"].to_list())
    assert coalescer.batches == 1
    for rows, answer in zip(requests, answers, strict=True):
        assert_frame_equal(answer.frame, _answer(rows).frame)
        assert_series_equal(answer.value_times[0], _answer(rows).value_times[0])
        assert answer.status[0].len() == rows.height


def test_a_failing_batch_is_answered_request_by_request() -> None:
    coalescer = Coalescer()
    release, started = threading.Event(), threading.Event()

    def compute(rows: pl.DataFrame) -> OnlineFeatures:
        if not started.is_set():
            started.set()
            release.wait(10)
        return _answer(rows)

    good, bad = pl.DataFrame({"id": [1, 2]}), pl.DataFrame({"id": [-1]})
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(coalescer.run, "v", pl.DataFrame({"id": [0]}), compute)
        assert started.wait(10)
        futures = [pool.submit(coalescer.run, "v", rows, compute) for rows in (good, bad)]
        while len(coalescer._queues.get("v", [])) < 2:
            time.sleep(0.01)
        release.set()
        assert first.result(10).frame["id"].to_list() == [0]
        assert futures[0].result(10).frame["doubled"].to_list() == [2, 4]
        with pytest.raises(fl.InvalidConfigError, match="negative"):
            futures[1].result(10)
    assert coalescer.batches == 0  # the batch fell back to one call per request


@pytest.mark.parametrize("socket_lane", [True, False])  # batched by the lane's loop / by the Flight threads
def test_concurrent_served_requests_equal_embedded_answers(conn, server, monkeypatch, socket_lane) -> None:
    real = server.serve_features

    def slow(*args, **kwargs):  # slow enough that concurrent requests queue behind the running one
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(server, "serve_features", slow)
    customer = conn.get_table("shop.customer")
    view = FeatureView.from_table(customer, entity_keys=["customer_id"], features=["tier", "score"], prefix="c__")
    entity_sets = [[1, 2, 99], [3], [2, 2, 1], [5, 3], [1]]
    ready = threading.Barrier(len(entity_sets))  # connected and set up: the requests then go out together

    def ask(ids: list[int]) -> pl.DataFrame:
        with serving.connect(server.location, socket_lane=socket_lane) as client:
            remote_view = FeatureView.from_table(client.get_table("shop.customer"), entity_keys=["customer_id"],
                                                 features=["tier", "score"], prefix="c__")
            ready.wait(30)
            return client.online_features({"customer_id": ids}, remote_view)

    with ThreadPoolExecutor(len(entity_sets)) as pool:
        answers = list(pool.map(ask, entity_sets))
    for ids, answer in zip(entity_sets, answers, strict=True):
        assert_frame_equal(answer, online_features({"customer_id": ids}, view))
    assert server._coalescer.batches >= 1
