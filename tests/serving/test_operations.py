"""Health, readiness, per-table counters and latency histograms over Flight, the progress line, and the
server as its own process: ``python -m serving serve`` answers, reports, and on SIGTERM drains the request in
flight before it exits cleanly."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.flight as flight
import pytest

import fluss_lake as fl
import serving
from serving.metrics import Metrics
from serving.protocol import encode_command

ROOT = Path(__file__).resolve().parents[2]


def test_health_ready_and_metrics(remote):
    assert remote.health()["status"] == "ok"
    assert remote.ready()["status"] == "ready"
    customer = remote.get_table("shop.customer")
    for _ in range(3):
        customer.lookup([{"id": 1}, {"id": 2}])
    with pytest.raises(fl.FlussLakeError):  # refused by the server: the error is counted
        customer.lookup(pl.DataFrame({"id": ["x"]}))
    lookups = remote.metrics()["tables"]["shop.customer"]["lookup"]
    assert lookups["requests"] == 4 and lookups["errors"] == 1
    assert lookups["rows_out"] == 6 and sum(lookups["latency_ms_counts"]) == 4
    assert lookups["latency_ms_buckets"][-1] == "inf"


def test_progress_line_counts_the_window():
    metrics = Metrics()
    for ms in (0.2, 3.0, 400.0):
        metrics.record("lookup", "shop.c", seconds=ms / 1000, rows_out=2)
    metrics.record("upsert", "shop.c", seconds=0.001, error=True)
    line = metrics.progress_line(60)
    assert line.startswith("served 4 request(s) in the last 60 s") and "1 error(s)" and "6 row(s) out" in line
    assert "p99 <= 500 ms" in line and "busiest shop.c lookup" in line
    assert metrics.progress_line(60).startswith("served 0 request(s)")  # a new window


def _lines(stream) -> queue.Queue:
    found: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [found.put(line) for line in stream], daemon=True).start()
    return found


def _wait_for(lines: queue.Queue, pattern: str, seen: list[str]) -> re.Match:
    while True:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            raise AssertionError(f"no line matching {pattern!r}; the server said {seen}") from None
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match


def test_served_from_its_own_process_with_a_graceful_stop(conn, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "serving", "serve", "--store", conn.url, "--port", "0", "--log-interval", "0.2",
         "--log-table", "audit.served2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    seen: list[str] = []
    try:
        lines = _lines(process.stdout)
        location = _wait_for(lines, r"on (grpc://127\.0\.0\.1:\d+)", seen).group(1)
        with serving.connect(location) as client:
            assert client.get_table("shop.customer").lookup([{"id": 2}])["tier"].to_list() == ["gold"]
        _wait_for(lines, r"\[serve\] served \d+ request", seen)
        # a request in flight: the stream is open when SIGTERM arrives, and is still answered
        raw = flight.FlightClient(location)
        writer, reader = raw.do_exchange(flight.FlightDescriptor.for_command(
            encode_command("lookup", table="shop.customer")))
        writer.begin(pa.schema([("id", pa.int64())]))
        writer.write_table(pa.table({"id": [1]}))
        with serving.connect(location) as client:  # wait until the server is handling it (this call is the other)
            while client.metrics()["in_flight"] < 2:
                pass
        process.send_signal(signal.SIGTERM)
        _wait_for(lines, r"draining 1 request", seen)
        writer.write_table(pa.table({"id": [3]}))
        writer.done_writing()
        assert reader.read_all().column("tier").to_pylist() == ["gold", "bronze"]
        writer.close()
        assert process.wait(timeout=60) == 0
        _wait_for(lines, r"stopped cleanly", seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert conn.table_exists("audit.served2"), seen  # --log-table created the log
