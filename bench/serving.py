"""The Flight server against Redis and Feast's feature server: batched and single-key lookups, online features.

Same data in every system: two primary-key tables ``bench.a`` (``customer_id`` key; ``x DOUBLE``, ``n INT``,
``s STRING``) and ``bench.b`` (``total DOUBLE``, ``orders INT``) of ``--rows`` customers each, served on loopback
to ``--clients`` concurrent client processes (4 by default), each running for ``--seconds``:

- batched lookups, 1,000 random keys a request, keys/s: ``RemoteTable.lookup`` over Flight vs Redis
  (``redis-server`` from Debian, one hash per customer, a pipeline of 1,000 ``HMGET`` per request);
- one key a request, p50/p99 latency: ``RemoteTable.lookup`` (over the server's socket lane, as the client does by
  default) vs Redis ``HGETALL`` and vs Feast's feature server (``feast serve``, sqlite online store)
  ``POST /get-online-features`` for the same three features; also reported: the same over Flight only
  (``socket_lane=False``) and an empty action on a Python Flight server (Flight's own floor);
- online features for 2 views, 100 entities a request, requests/s: ``RemoteConnection.online_features`` vs
  Feast's ``/get-online-features`` for the same 5 features (values checked equal on a sample first);
- memory: the server's anonymous memory (``RssAnon``) after the load vs an embedded process that opened the
  same store and looked up every key (the mapped store's anonymous footprint).

Feast is not a fluss-lake dependency: the bench makes its own environment for it
(``$FLUSS_LAKE_BENCH_ENVS/feast``, default ``~/.cache/fluss-lake-bench/feast``, ``pip install feast``) unless
``--feast-python`` names an interpreter that has it; ``--skip-feast`` leaves it out. Redis is Debian's
``redis-server`` (``apt-get install redis-server``) or ``--redis-server PATH``; the redis client is in the
``bench`` extra. A peer that cannot start is reported as such and its cases are left out, never replaced.

Run ``python -m bench.serving [--quick] [--rows N] [--seconds S] [--clients K] [--skip-feast]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from bench._common import Reporter, Result, Target, fmt_size, log, proc_status, run_child, temp_store_dir

BENCH = "serving"
FULL_ROWS = 1_000_000
QUICK_ROWS = 20_000
A_FEATURES = ("x", "n", "s")
B_FEATURES = ("total", "orders")
BATCH = 1_000
ENTITIES = 100
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FEAST_TIME = "2026-01-01T00:00:00+00:00"


# ---------------------------------------------------------------- data (identical everywhere)
def make_frames(rows: int):
    """The two tables' rows, deterministic."""
    import polars as pl

    i = np.arange(rows, dtype=np.int64)
    a = pl.DataFrame({"customer_id": i, "x": i * 0.25, "n": (i % 1000).astype(np.int32),
                      "s": pl.Series(i % 5000).cast(pl.String)})
    b = pl.DataFrame({"customer_id": i, "total": (i % 977) * 1.5, "orders": (i % 31).astype(np.int32)})
    return a, b


def build_store(path: str, rows: int) -> None:
    """The store the server serves (and the embedded memory baseline maps)."""
    import fluss_lake as fl

    a, b = make_frames(rows)
    conn = fl.connect(path)
    conn.create_database("bench", ignore_if_exists=True)
    for name, schema in (("bench.a", {"customer_id": "BIGINT", "x": "DOUBLE", "n": "INT", "s": "STRING"}),
                         ("bench.b", {"customer_id": "BIGINT", "total": "DOUBLE", "orders": "INT"})):
        conn.create_table(name, schema=schema, primary_key=["customer_id"], bucket_num=4)
    ta, tb = conn.get_table("bench.a"), conn.get_table("bench.b")
    step = 250_000
    for start in range(0, rows, step):
        ta.upsert(a.slice(start, step))
        tb.upsert(b.slice(start, step))
    for table in (ta, tb):
        table.snapshot()  # state in segments: what a restarted server maps


def load_redis(port: int, rows: int) -> None:
    """One hash per customer (``a:<id>``, ``b:<id>``), loaded with pipelines."""
    import redis

    a, b = make_frames(rows)
    client = redis.Redis(port=port)
    for prefix, frame, fields in (("a", a, A_FEATURES), ("b", b, B_FEATURES)):
        for chunk in frame.iter_slices(20_000):
            pipe = client.pipeline(transaction=False)
            cols = [chunk[c].to_list() for c in fields]
            for k, *values in zip(chunk["customer_id"].to_list(), *cols, strict=True):
                pipe.hset(f"{prefix}:{k}", mapping=dict(zip(fields, values, strict=True)))
            pipe.execute()
    client.close()


# ---------------------------------------------------------------- processes
def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s ({last!r})")


@contextlib.contextmanager
def started(cmd: list[str], *, cwd: str | None = None, env: dict | None = None, log_path: str) -> Iterator[subprocess.Popen]:
    """A server process, stopped (SIGTERM, then kill) on exit."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_clients(function: str, payload: dict[str, Any], clients: int) -> list[dict[str, Any]]:
    """`clients` fresh processes running ``bench.serving.<function>`` together from a common start time."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_ROOT, *filter(None, [env.get("PYTHONPATH")])])
    code = f"from bench._common import child_main; child_main('serving', {function!r})"
    start_at = time.time() + 6.0  # after every child imported and warmed up
    procs = []
    for i in range(clients):
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        proc.stdin.write(json.dumps({**payload, "seed": i, "start_at": start_at}))
        proc.stdin.close()
        procs.append(proc)
    out = []
    for proc in procs:
        stdout = proc.stdout.read()
        stderr = proc.stderr.read()
        if proc.wait() != 0:
            raise RuntimeError(f"client {function} failed:\n{stderr[-3000:]}")
        out.append(json.loads([ln for ln in stdout.splitlines() if ln.startswith("{")][-1]))
    return out


def _timed_loop(payload: dict[str, Any], request) -> dict[str, Any]:
    """Call `request(i)` from the common start until `seconds` have passed; latencies in seconds."""
    for i in range(20):  # warm-up (connections, caches)
        request(i)
    time.sleep(max(0.0, payload["start_at"] - time.time()))
    latencies = []
    t0 = time.perf_counter()
    end = t0 + payload["seconds"]
    i = 0
    now = t0
    while now < end:
        request(i)
        after = time.perf_counter()
        latencies.append(after - now)
        now = after
        i += 1
    return {"requests": i, "wall": now - t0, "latencies": latencies}


def _key_batches(payload: dict[str, Any], size: int) -> np.ndarray:
    rng = np.random.default_rng(payload["seed"])
    return rng.integers(0, payload["rows"], (512, size), dtype=np.int64)


# ---------------------------------------------------------------- clients (run in child processes)
def client_ours_batched(payload: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    import serving

    keys = _key_batches(payload, payload["batch"])
    table = serving.connect(payload["address"]).get_table("bench.a")
    frames = [pl.DataFrame({"customer_id": k}) for k in keys]

    def request(i: int) -> None:
        out = table.lookup(frames[i % len(frames)])
        assert out.height == payload["batch"]

    return _timed_loop(payload, request)


def client_redis_batched(payload: dict[str, Any]) -> dict[str, Any]:
    import redis

    keys = _key_batches(payload, payload["batch"])
    names = [[f"a:{k}" for k in row] for row in keys]
    client = redis.Redis(port=payload["port"])

    def request(i: int) -> None:
        pipe = client.pipeline(transaction=False)
        for name in names[i % len(names)]:
            pipe.hmget(name, A_FEATURES)
        out = pipe.execute()
        assert len(out) == payload["batch"]

    return _timed_loop(payload, request)


def client_ours_single(payload: dict[str, Any]) -> dict[str, Any]:
    import serving

    keys = _key_batches(payload, 1)[:, 0].tolist()
    table = serving.connect(payload["address"], socket_lane=payload.get("socket_lane", True)).get_table("bench.a")

    def request(i: int) -> None:
        out = table.lookup([{"customer_id": keys[i % len(keys)]}])
        assert out.height == 1

    return _timed_loop(payload, request)


class _EmptyFlightServer:
    """A Python Flight server whose action answers nothing (the transport's floor; made in the child process)."""

    @staticmethod
    def serve(port: int) -> None:
        import pyarrow.flight as flight

        class Empty(flight.FlightServerBase):
            def do_action(self, context: Any, action: Any) -> Any:
                return iter([flight.Result(b"")])

        Empty(f"grpc://127.0.0.1:{port}").serve()


def client_flight_floor(payload: dict[str, Any]) -> dict[str, Any]:
    """One empty Flight action a request: what pyarrow Flight alone costs a Python client and server."""
    import pyarrow.flight as flight

    client = flight.connect(f"grpc://127.0.0.1:{payload['floor_port']}")
    action = flight.Action("empty", b"")

    def request(i: int) -> None:
        list(client.do_action(action))

    return _timed_loop(payload, request)


def client_redis_single(payload: dict[str, Any]) -> dict[str, Any]:
    import redis

    keys = _key_batches(payload, 1)[:, 0].tolist()
    client = redis.Redis(port=payload["port"])

    def request(i: int) -> None:
        out = client.hgetall(f"a:{keys[i % len(keys)]}")
        assert out

    return _timed_loop(payload, request)


def _feast_body(features: list[str], keys: list[int]) -> bytes:
    return json.dumps({"features": features, "entities": {"customer_id": keys}}).encode()


def _feast_post(conn: http.client.HTTPConnection, body: bytes) -> dict[str, Any]:
    try:
        conn.request("POST", "/get-online-features", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
    except (ConnectionError, http.client.RemoteDisconnected):  # a worker went away: reconnect once
        conn.close()
        conn.request("POST", "/get-online-features", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"feast answered {response.status}: {data[:300]!r}")
    return json.loads(data)


def client_feast_single(payload: dict[str, Any]) -> dict[str, Any]:
    keys = _key_batches(payload, 1)[:, 0].tolist()
    conn = http.client.HTTPConnection("127.0.0.1", payload["feast_port"], timeout=30)
    features = [f"a:{f}" for f in A_FEATURES]
    bodies = [_feast_body(features, [k]) for k in keys]

    def request(i: int) -> None:
        _feast_post(conn, bodies[i % len(bodies)])

    return _timed_loop(payload, request)


def _views(remote):
    from fluss_lake.training import FeatureView

    return [FeatureView.from_table(remote.get_table("bench.a"), entity_keys=["customer_id"],
                                   features=list(A_FEATURES), prefix="a__"),
            FeatureView.from_table(remote.get_table("bench.b"), entity_keys=["customer_id"],
                                   features=list(B_FEATURES), prefix="b__")]


def client_ours_online(payload: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    import serving

    keys = _key_batches(payload, payload["entities"])
    remote = serving.connect(payload["address"], socket_lane=payload.get("socket_lane", True))
    views = _views(remote)
    frames = [pl.DataFrame({"customer_id": k}) for k in keys]

    def request(i: int) -> None:
        out = remote.online_features(frames[i % len(frames)], views)
        assert out.height == payload["entities"]

    return _timed_loop(payload, request)


def client_feast_online(payload: dict[str, Any]) -> dict[str, Any]:
    keys = _key_batches(payload, payload["entities"])
    conn = http.client.HTTPConnection("127.0.0.1", payload["feast_port"], timeout=30)
    features = [f"a:{f}" for f in A_FEATURES] + [f"b:{f}" for f in B_FEATURES]
    bodies = [_feast_body(features, row.tolist()) for row in keys]

    def request(i: int) -> None:
        _feast_post(conn, bodies[i % len(bodies)])

    return _timed_loop(payload, request)


def embedded_footprint(payload: dict[str, Any]) -> dict[str, Any]:
    """Anonymous memory of a process that opened the store and looked up every key of both tables."""
    import gc

    import polars as pl

    import fluss_lake as fl

    base = proc_status().get("RssAnon", 0)
    conn = fl.connect(payload["store"])
    for name in ("bench.a", "bench.b"):
        table = conn.get_table(name)
        for start in range(0, payload["rows"], 100_000):
            table.lookup(pl.DataFrame({"customer_id": np.arange(start, min(start + 100_000, payload["rows"]))}))
    gc.collect()
    return {"base": base, "rss_anon": proc_status().get("RssAnon", 0)}


# ---------------------------------------------------------------- Feast
def feast_python(explicit: str | None) -> tuple[str | None, str]:
    """An interpreter with Feast (made on first use), or None and why not."""
    if explicit:
        return explicit, "given"
    root = os.environ.get("FLUSS_LAKE_BENCH_ENVS") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                    "fluss-lake-bench")
    venv = os.path.join(root, "feast")
    python = os.path.join(venv, "bin", "python")
    check = [python, "-c", "import feast, pyarrow, pandas"]
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return python, f"environment {venv}"
    log(f"making Feast's environment in {venv} (pip install feast) ...")
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "-U", "pip"], check=True, capture_output=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "feast", "pyarrow", "pandas"], check=True,
                       capture_output=True, timeout=1800)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return None, f"could not install Feast: {exc!r} {detail[-500:]!r}"
    return python, f"environment {venv} (made now)"


_FEAST_SETUP = r'''
import json, os, sys
from datetime import timedelta
import pandas as pd
from feast import Entity, FeatureStore, Field, FileSource, FeatureView, ValueType
from feast.types import Float64, Int32, String, Int64
repo, a_path, b_path = sys.argv[1:4]
store = FeatureStore(repo_path=repo)
customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.INT64)
a = FeatureView(name="a", entities=[customer], ttl=timedelta(0),
                source=FileSource(path=a_path, timestamp_field="event_timestamp"),
                schema=[Field(name="customer_id", dtype=Int64), Field(name="x", dtype=Float64),
                        Field(name="n", dtype=Int32), Field(name="s", dtype=String)])
b = FeatureView(name="b", entities=[customer], ttl=timedelta(0),
                source=FileSource(path=b_path, timestamp_field="event_timestamp"),
                schema=[Field(name="customer_id", dtype=Int64), Field(name="total", dtype=Float64),
                        Field(name="orders", dtype=Int32)])
store.apply([customer, a, b])
for view, path in ((a, a_path), (b, b_path)):
    frame = pd.read_parquet(path)
    for start in range(0, len(frame), 100_000):
        store.write_to_online_store(view.name, frame.iloc[start:start + 100_000])
print(json.dumps({"ready": True}), flush=True)
'''


@contextlib.contextmanager
def feast_server(python: str, work: str, rows: int, workers: int) -> Iterator[int]:
    """Feast's feature server over the same rows (sqlite online store); yields its port."""
    import polars as pl

    a, b = make_frames(rows)
    when = pl.lit(_FEAST_TIME).str.to_datetime(time_zone="UTC")
    a_path, b_path = os.path.join(work, "a.parquet"), os.path.join(work, "b.parquet")
    a.with_columns(when.alias("event_timestamp")).write_parquet(a_path)
    b.with_columns(when.alias("event_timestamp")).write_parquet(b_path)
    repo = os.path.join(work, "repo")
    os.makedirs(repo, exist_ok=True)
    with open(os.path.join(repo, "feature_store.yaml"), "w") as handle:
        handle.write(f"project: bench\nregistry: {work}/registry.db\nprovider: local\n"
                     f"online_store:\n    type: sqlite\n    path: {work}/online.db\n"
                     "offline_store:\n    type: file\nentity_key_serialization_version: 3\n")
    script = os.path.join(work, "feast_setup.py")
    with open(script, "w") as handle:
        handle.write(_FEAST_SETUP)
    started_at = time.perf_counter()
    subprocess.run([python, script, repo, a_path, b_path], check=True, capture_output=True, timeout=3600)
    log(f"  Feast online store written in {time.perf_counter() - started_at:.1f} s")
    port = free_port()
    feast = os.path.join(os.path.dirname(python), "feast")
    # Feast's defaults but for the worker count and no worker recycling (--max-requests) in the middle of a run
    command = [feast, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
               "--workers", str(workers), "--max-requests", "1000000000"]
    with started(command, cwd=repo, log_path=os.path.join(work, "feast-serve.log")) as proc:
        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(open(os.path.join(work, "feast-serve.log")).read()[-2000:])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            return conn.getresponse().status == 200

        _wait(up, "feast serve")
        yield port


# ---------------------------------------------------------------- measuring
def _throughput(results: list[dict[str, Any]], per_request: int) -> float:
    return sum(r["requests"] * per_request for r in results) / max(r["wall"] for r in results)


def _percentile(results: list[dict[str, Any]], q: float) -> float:
    return float(np.percentile(np.concatenate([np.asarray(r["latencies"]) for r in results]), q))


def _check_same_values(address: str, feast_port: int) -> int:
    """Feast's and our online features for a sample of entities agree; returns the number of values compared."""
    import polars as pl

    import serving

    keys = list(range(0, 100))
    remote = serving.connect(address)
    ours = remote.online_features(pl.DataFrame({"customer_id": keys}), _views(remote))
    conn = http.client.HTTPConnection("127.0.0.1", feast_port, timeout=30)
    features = [f"a:{f}" for f in A_FEATURES] + [f"b:{f}" for f in B_FEATURES]
    theirs = _feast_post(conn, _feast_body(features, keys))
    names = theirs["metadata"]["feature_names"]
    compared = 0
    for name, column in zip(names, theirs["results"], strict=True):
        if name == "customer_id":
            continue
        view, _, feature = name.partition("__") if "__" in name else ("", "", name)
        ours_col = f"{view}__{feature}" if view else next(c for c in ours.columns if c.endswith(f"__{name}"))
        values = ours[ours_col].to_list()
        if [str(v) for v in values] != [str(v) for v in column["values"]]:
            raise RuntimeError(f"feature {name}: Feast {column['values'][:5]} vs ours {values[:5]}")
        compared += len(values)
    return compared


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serving", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROWS:,} rows, short runs")
    parser.add_argument("--rows", type=int, default=None, help=f"customers per table (default {FULL_ROWS:,})")
    parser.add_argument("--seconds", type=float, default=None, help="run time of each case (default 10, quick 2)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client processes (default 4)")
    parser.add_argument("--skip-feast", action="store_true", help="leave Feast's feature server out")
    parser.add_argument("--feast-python", default=None, help="an interpreter that has feast installed")
    parser.add_argument("--server-threads", type=int, default=None,
                        help="POLARS_MAX_THREADS of the server process (default: Polars' own, one per core)")
    parser.add_argument("--feast-workers", type=int, default=2, help="feast serve worker processes (default 2)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    args = parser.parse_args(argv)
    rows = args.rows or (QUICK_ROWS if args.quick else FULL_ROWS)
    seconds = args.seconds or (2.0 if args.quick else 10.0)
    clients = args.clients
    reporter = Reporter(BENCH)
    with temp_store_dir() as store, tempfile.TemporaryDirectory(prefix="fluss-bench-peers-") as work:
        log(f"bench.serving: {rows:,} customers per table, {clients} clients, {seconds:g} s a case")
        t0 = time.perf_counter()
        build_store(store, rows)
        log(f"  store written in {time.perf_counter() - t0:.1f} s")
        port = free_port()
        address = f"grpc://127.0.0.1:{port}"
        server_cmd = [sys.executable, "-m", "serving", "serve", "--store", store, "--port", str(port),
                      "--log-interval", "3600"]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
        if args.server_threads:
            env["POLARS_MAX_THREADS"] = str(args.server_threads)
        redis_port = free_port()
        redis_ok, redis_why = True, ""
        redis_cmd = [args.redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--protected-mode", "yes"]
        with contextlib.ExitStack() as stack:
            server = stack.enter_context(started(server_cmd, env=env, log_path=os.path.join(work, "serve.log")))
            import serving

            _wait(lambda: serving.connect(address).health() is not None, "fluss-lake serve")
            try:
                stack.enter_context(started(redis_cmd, log_path=os.path.join(work, "redis.log")))
                import redis

                _wait(lambda: redis.Redis(port=redis_port).ping(), "redis-server", timeout=30)
                t0 = time.perf_counter()
                load_redis(redis_port, rows)
                log(f"  Redis loaded in {time.perf_counter() - t0:.1f} s")
            except (OSError, RuntimeError, ImportError) as exc:
                redis_ok, redis_why = False, f"Redis could not run: {exc!r}"
                log("  " + redis_why)
            feast_port = None
            feast_why = "left out (--skip-feast)"
            if not args.skip_feast:
                python, feast_why = feast_python(args.feast_python)
                if python is not None:
                    try:
                        feast_port = stack.enter_context(feast_server(python, work, rows, args.feast_workers))
                        compared = _check_same_values(address, feast_port)
                        log(f"  Feast and ours agree on {compared} feature values")
                    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                        feast_why = f"Feast could not run: {exc!r}"[:1500]
                        feast_port = None
                if feast_port is None:
                    log("  " + feast_why)

            common = {"address": address, "port": redis_port, "feast_port": feast_port, "rows": rows,
                      "seconds": seconds, "batch": BATCH, "entities": ENTITIES}
            # batched lookups
            ours = run_clients("client_ours_batched", common, clients)
            ours_keys = _throughput(ours, BATCH)
            if redis_ok:
                theirs = run_clients("client_redis_batched", common, clients)
                reporter.add(Result(BENCH, f"batched lookup, {BATCH} keys a request, {clients} clients", "keys_per_s",
                                    ours_keys, "redis pipelined HMGET", _throughput(theirs, BATCH), True, rows,
                                    clients, (Target("ratio", ">=", 2.0),)))
            else:
                log(f"  batched lookup: ours {ours_keys:,.0f} keys/s; Redis: {redis_why}")
            # single keys
            ours = run_clients("client_ours_single", common, clients)
            p50, p99 = _percentile(ours, 50) * 1e6, _percentile(ours, 99) * 1e6
            peers = []
            if redis_ok:
                peers.append(("redis HGETALL", run_clients("client_redis_single", common, clients)))
            if feast_port is not None:
                peers.append(("feast serve /get-online-features", run_clients("client_feast_single", common, clients)))
            for peer, theirs in peers:
                reporter.add(Result(BENCH, f"single key p50, {clients} clients", "us", p50, peer,
                                    _percentile(theirs, 50) * 1e6, False, rows, clients))
                reporter.add(Result(BENCH, f"single key p99, {clients} clients", "us", p99, peer,
                                    _percentile(theirs, 99) * 1e6, False, rows, clients,
                                    (Target("value", "<=", 1000.0, "p99 <= 1 ms"),)))
            if not peers:
                log(f"  single key: ours p50 {p50:.0f} us, p99 {p99:.0f} us; no peer ran")
            # the floor of the transport: an empty action on a Python Flight server, the same clients
            floor_port = free_port()
            floor_cmd = [sys.executable, "-c", f"from bench.serving import _EmptyFlightServer as S; S.serve({floor_port})"]
            with started(floor_cmd, env=env, log_path=os.path.join(work, "floor.log")):
                import pyarrow.flight as flight

                _wait(lambda: list(flight.connect(f"grpc://127.0.0.1:{floor_port}").do_action(
                    flight.Action("empty", b""))) is not None, "the empty Flight server")
                floor = run_clients("client_flight_floor", {**common, "floor_port": floor_port}, clients)
            log(f"  transport floor (an empty action on a Python Flight server, {clients} clients): p50 "
                f"{_percentile(floor, 50) * 1e6:.0f} us, p99 {_percentile(floor, 99) * 1e6:.0f} us, "
                f"{_throughput(floor, 1):,.0f} requests/s; ours single key p50 {p50:.0f} us, p99 {p99:.0f} us")
            reporter.add(Result(BENCH, f"single key p99 against the transport floor, {clients} clients", "us", p99,
                                "empty pyarrow Flight action (Python server)", _percentile(floor, 99) * 1e6, False,
                                rows, clients))
            flight_only = run_clients("client_ours_single", {**common, "socket_lane": False}, clients)
            reporter.add(Result(BENCH, f"single key p99, socket lane against Flight only, {clients} clients", "us",
                                p99, "the same lookups over Flight (socket_lane=False)",
                                _percentile(flight_only, 99) * 1e6, False, rows, clients,
                                note=f"Flight only: p50 {_percentile(flight_only, 50) * 1e6:.0f} us"))
            # online features
            ours = run_clients("client_ours_online", common, clients)
            ours_rps = _throughput(ours, 1)
            if feast_port is not None:
                theirs = run_clients("client_feast_online", common, clients)
                reporter.add(Result(BENCH, f"online features, 2 views, {ENTITIES} entities a request, {clients} "
                                    "clients", "requests_per_s", ours_rps, "feast serve /get-online-features",
                                    _throughput(theirs, 1), True, rows, clients, (Target("ratio", ">=", 10.0),)))
            else:
                log(f"  online features: ours {ours_rps:,.1f} requests/s; Feast: {feast_why}")
            flight_only = run_clients("client_ours_online", {**common, "socket_lane": False}, clients)
            log(f"  online features over Flight only (socket_lane=False): {_throughput(flight_only, 1):,.1f} "
                "requests/s")
            # memory
            served = proc_status(server.pid)
            embedded = run_child(BENCH, "embedded_footprint", {"store": store, "rows": rows})
            reporter.add(Result(BENCH, "server anonymous memory after the load", "bytes", served.get("RssAnon", 0),
                                "embedded process that mapped the store", embedded["rss_anon"], False, rows, 1,
                                (Target("ratio", ">=", 0.5, "server <= 2x embedded"),),
                                note=f"server RssAnon {fmt_size(served.get('RssAnon', 0))}, embedded "
                                     f"{fmt_size(embedded['rss_anon'])} (after imports {fmt_size(embedded['base'])})"))
    reporter.finish()


if __name__ == "__main__":
    main()
