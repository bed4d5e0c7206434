"""End-to-end freshness of a continuous pipeline: writer commit -> result commit, per event, against Pathway.

The pipeline, on this machine, each part in its own process:

- a **writer** at a fixed rate R events/s (a batch every ``--interval-ms``, as many events as the rate owes by
  then): each event is an order with an event id (``oid``) on one of ``--customers`` existing customers, upserted
  into ``orders`` (primary key ``(cid, oid)``, bucket key ``cid``) and appended to ``order_events`` (a log table:
  the stream a lookup join reads); the ``customers`` table (primary key ``cid``) gets R/10 updates/s alongside;
- a continuously running **delta join** ``orders JOIN customers ON cid`` into ``dj_result`` (primary key);
- a continuously running **lookup join** ``order_events`` enriched from ``customers`` into ``lj_result`` (log).

Latency of an event: from the moment the writer's write call returned (committed) to the moment the job's step
that wrote the result row carrying the event's id returned (its result committed); the job process notes, after
every step, the time and the result table's log end offsets, and the rows of the result's changelog are matched to
the first step whose offsets cover them. p50/p99/max per join and R, and the highest R whose p99 stays under 1 s.
The writer's fixed cost per batch is not part of the latency (it is before its commit); a writer that cannot keep
the rate shows it as a lower ``achieved`` rate.

Peer: Pathway (``pathway`` 0.33.0 from PyPI) in its own virtual environment, created on first use under
``~/.cache/fluss-lake-bench/pathway`` (``--pathway-python`` to use another interpreter that has it): its side
(``bench/_freshness_pathway.py``, run there as a script; nothing of Pathway is vendored) generates the same events
at the same rate into two Python connectors (``pw.io.python.read``, committing every batch) and runs the same two
joins (``join`` for the delta join, ``asof_now_join`` for the lookup join); latency runs from the moment a batch was
handed over and committed to the connector to the ``pw.io.subscribe`` ``on_change`` call of its output row. If
Pathway cannot run here, the bench says why and reports our figures alone.

Run ``python -m bench.freshness [--quick] [--rates 10000,50000] [--seconds S] [--search]``; ``--search`` also
steps R up (doubling from ``--search-from``, ``--search-seconds`` each) until p99 passes 1 s or the writer cannot
keep the rate (achieved < 90 %), per contender and join.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench._common import Reporter, Result, Target, fmt_num, log, temp_store_dir
from bench._freshness_pathway import customers_batch, orders_batch

BENCH = "freshness"
CUSTOMERS = 10_000
BUCKETS = 4
PATHWAY_VERSION = "0.33.0"
PEER = f"pathway {PATHWAY_VERSION}"
P99_BOUND_S = 1.0
GOAL_P99_S = 0.100
BASELINE = "fluss-lake before"
_HERE = Path(__file__).resolve().parent
_PATHWAY_SCRIPT = _HERE / "_freshness_pathway.py"


# ---------------------------------------------------------------- our side, in child processes
def _setup(path: str, customers: int) -> None:
    import polars as pl

    import fluss_lake as fl

    conn = fl.connect(path)
    conn.create_database("f")
    conn.create_table("f.customers", schema={"cid": "BIGINT", "name": "STRING", "tier": "INT"},
                      primary_key=["cid"], bucket_num=BUCKETS)
    conn.create_table("f.orders", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE"},
                      primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=BUCKETS)
    conn.create_table("f.order_events", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE"},
                      bucket_num=BUCKETS)
    conn.create_table("f.dj_result", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE",
                                             "name": "STRING", "tier": "INT"},
                      primary_key=["cid", "oid"], bucket_num=BUCKETS)
    conn.create_table("f.lj_result", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE",
                                             "name": "STRING", "tier": "INT"}, bucket_num=BUCKETS)
    cid = np.arange(customers, dtype=np.int64)
    conn.get_table("f.customers").upsert(pl.DataFrame({"cid": cid, "name": [f"c{c}" for c in cid],
                                                       "tier": (cid % 5).astype(np.int32)}))


def _job(conn: Any, kind: str) -> Any:
    from fluss_lake.jobs import DeltaJoin, Join, LookupJoin

    customers = conn.get_table("f.customers")
    if kind == "delta":
        return DeltaJoin(conn.get_table("f.dj_result"), {"o": conn.get_table("f.orders"), "c": customers},
                         [Join("o", "c", ["cid"], how="inner")], name="fresh-delta")
    return LookupJoin(customers, on=["cid"], columns=["name", "tier"], how="inner",
                      source=conn.get_table("f.order_events"), sink=conn.get_table("f.lj_result"),
                      name="fresh-lookup")


def child_job(payload: dict) -> dict:
    """A continuously running join: one step at a time; after each step with work, the time and the result's log
    end offsets. Runs until the stop file appears and the job has caught up with everything written."""
    import fluss_lake as fl

    conn = fl.connect(payload["path"])
    job = _job(conn, payload["kind"])
    result = conn.get_table("f.dj_result" if payload["kind"] == "delta" else "f.lj_result")
    Path(payload["ready"]).touch()
    stop, poll = Path(payload["stop"]), payload["poll_s"]
    times: list[float] = []
    ends: list[list[int]] = []
    steps = idle = 0
    busy = longest = 0.0
    while True:
        t0 = time.perf_counter()
        report = job.run_once(max_steps=1)
        if report.steps:
            times.append(time.time())
            offsets = result.end_offsets()
            ends.append([offsets[b] for b in range(BUCKETS)])
            steps += 1
            took = time.perf_counter() - t0
            busy += took
            longest = max(longest, took)
            continue
        if stop.exists() and sum(job.lag().values()) == 0:
            break
        idle += 1
        time.sleep(poll)
    np.savez(payload["out"], times=np.asarray(times), ends=np.asarray(ends, dtype=np.int64).reshape(-1, BUCKETS))
    return {"steps": steps, "idle_polls": idle, "busy_s": round(busy, 3), "longest_step_s": round(longest, 3),
            "cpu_s": round(time.process_time(), 3)}


def child_writer(payload: dict) -> dict:
    """Write at the fixed rate for the given seconds; per batch, the first event id, count and commit times."""
    import polars as pl

    import fluss_lake as fl

    conn = fl.connect(payload["path"])
    orders, events, customers = (conn.get_table(f"f.{t}") for t in ("orders", "order_events", "customers"))
    rate, seconds, interval = payload["rate"], payload["seconds"], payload["interval_s"]
    n_cust, seed = payload["customers"], payload["seed"]
    start = time.perf_counter()
    written = cust_written = 0
    rows: list[tuple[int, int, float, float]] = []
    tick, longest = 0, 0.0
    while True:
        now = time.perf_counter() - start
        if now >= seconds:
            break
        owed = int(rate * now) - written
        if owed > 0:
            began = time.perf_counter()
            frame = pl.DataFrame(orders_batch(written, owed, n_cust, seed))
            orders.upsert(frame)
            t_orders = time.time()
            events.append(frame)
            t_events = time.time()
            rows.append((written, owed, t_orders, t_events))
            written += owed
            c_owed = int(rate / 10 * now) - cust_written
            if c_owed > 0:
                customers.upsert(pl.DataFrame(customers_batch(cust_written, c_owed, n_cust)))
                cust_written += c_owed
            longest = max(longest, time.perf_counter() - began)
        tick += 1
        wait = tick * interval - (time.perf_counter() - start)
        if wait > 0:
            time.sleep(wait)
    owed = int(rate * seconds) - written  # what the rate owes at the end: a writer that kept it is done in time
    if owed > 0:
        frame = pl.DataFrame(orders_batch(written, owed, n_cust, seed))
        orders.upsert(frame)
        t_orders = time.time()
        events.append(frame)
        rows.append((written, owed, t_orders, time.time()))
        written += owed
    np.save(payload["out"], np.asarray(rows, dtype=np.float64).reshape(-1, 4))
    return {"events": written, "customer_updates": cust_written, "batches": len(rows), "longest_batch_s": longest,
            "elapsed_s": time.perf_counter() - start, "cpu_s": round(time.process_time(), 3)}


def _spawn(function: str, payload: dict, code_root: str | None = None) -> subprocess.Popen:
    """Run `function` of this module in a child; with `code_root`, fluss_lake is imported from that checkout (the
    "before" of an A/B: same bench, same machine, same run)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_HERE.parent), *filter(None, [env.get("PYTHONPATH")])])
    # the other checkout's fluss_lake is imported first (then its folder leaves sys.path: the bench is this one's)
    first = (f"sys.path.insert(0, {code_root!r}); import fluss_lake; sys.path.pop(0); "
             f"assert fluss_lake.__file__.startswith({code_root!r}); ") if code_root else ""
    code = (f"import json, sys; {first}from bench.freshness import {function}; "
            f"print(json.dumps({function}(json.loads(sys.argv[1]))))")
    return subprocess.Popen([sys.executable, "-c", code, json.dumps(payload)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _collect(proc: subprocess.Popen, what: str, timeout: float) -> dict:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{err[-4000:]}")
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def _latencies(path: str, table: str, steps_file: str, commit_times: np.ndarray, first: np.ndarray,
               count: np.ndarray) -> np.ndarray:
    """Seconds from each event's writer commit to the first result step covering a row with its id, indexed by event
    id (NaN: never seen)."""
    import polars as pl

    import fluss_lake as fl

    steps = np.load(steps_file)
    times, ends = steps["times"], steps["ends"]
    log_rows = fl.connect(path).get_table(table).scan_log(columns=["oid"]).select("_bucket", "_offset", "oid")
    out = np.full(int(count.sum()), np.nan)
    if log_rows.height == 0 or len(times) == 0:
        return out
    bucket = log_rows["_bucket"].to_numpy()
    offset = log_rows["_offset"].to_numpy()
    at = np.empty(log_rows.height)
    for b in range(BUCKETS):
        mask = bucket == b
        # the first step after which this bucket's log end passed the row's offset
        idx = np.searchsorted(ends[:, b], offset[mask], side="right")
        at[mask] = np.where(idx < len(times), times[np.minimum(idx, len(times) - 1)], np.nan)
    first_seen = (pl.DataFrame({"oid": log_rows["oid"], "at": at}).group_by("oid").agg(pl.col("at").min())
                  .sort("oid"))
    oid = first_seen["oid"].to_numpy()
    batch = np.searchsorted(first, oid, side="right") - 1
    out[oid] = first_seen["at"].to_numpy() - commit_times[batch]
    return out


def run_ours(rate: int, seconds: float, *, interval_s: float, customers: int, seed: int, poll_s: float,
             tmpdir: str | None = None, code_root: str | None = None) -> dict[str, Any]:
    """One run of our pipeline at `rate`: latency arrays per join, and the rates achieved (writer and jobs importing
    fluss_lake from `code_root` when given)."""
    with temp_store_dir(tmpdir, prefix="fluss-fresh-") as path:
        _setup(path, customers)
        files = {k: os.path.join(path, f"_{k}") for k in ("ready_delta", "ready_lookup", "stop")}
        jobs = {kind: _spawn("child_job", {"path": path, "kind": kind, "ready": files[f"ready_{kind}"],
                                            "stop": files["stop"], "poll_s": poll_s,
                                            "out": os.path.join(path, f"_steps_{kind}.npz")}, code_root)
                for kind in ("delta", "lookup")}
        procs = list(jobs.values())
        try:
            deadline = time.monotonic() + 120
            while not all(os.path.exists(files[f"ready_{k}"]) for k in jobs):
                if time.monotonic() > deadline or any(p.poll() is not None for p in jobs.values()):
                    raise RuntimeError("a job did not start: " + "; ".join(
                        p.stderr.read()[-2000:] for p in jobs.values() if p.poll() is not None and p.stderr))
                time.sleep(0.05)
            writer = _spawn("child_writer", {"path": path, "rate": rate, "seconds": seconds,
                                             "interval_s": interval_s, "customers": customers, "seed": seed,
                                             "out": os.path.join(path, "_writes.npy")}, code_root)
            procs.append(writer)
            wrote = _collect(writer, "writer", timeout=seconds + 600)
            Path(files["stop"]).touch()
            ran = {kind: _collect(p, f"{kind} join", timeout=600) for kind, p in jobs.items()}
        finally:  # a failed writer or job leaves no child running
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        writes = np.load(os.path.join(path, "_writes.npy"))
        first, count = writes[:, 0].astype(np.int64), writes[:, 1].astype(np.int64)
        lat = {"delta": _latencies(path, "f.dj_result", os.path.join(path, "_steps_delta.npz"), writes[:, 2],
                                   first, count),
               "lookup": _latencies(path, "f.lj_result", os.path.join(path, "_steps_lookup.npz"), writes[:, 3],
                                    first, count)}
    return {"latency": lat, "events": wrote["events"], "achieved": wrote["events"] / wrote["elapsed_s"],
            "writer": wrote, "jobs": ran}


# ---------------------------------------------------------------- Pathway's side
def pathway_python(explicit: str | None = None) -> tuple[str | None, str]:
    """An interpreter with pathway (creating its venv on first use), or None and why not."""
    if explicit:
        return explicit, ""
    home = Path(os.environ.get("FLUSS_LAKE_BENCH_CACHE", Path.home() / ".cache" / "fluss-lake-bench")) / "pathway"
    python = home / "bin" / "python"
    check = [str(python), "-c", "import pathway, sys; sys.stdout.write(pathway.__version__)"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return str(python), ""
    log(f"creating Pathway's environment in {home} (once) ...")
    made = subprocess.run([sys.executable, "-m", "venv", str(home)], capture_output=True, text=True)
    if made.returncode != 0:
        return None, f"python -m venv failed: {made.stderr.strip()[-500:]}"
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", f"pathway=={PATHWAY_VERSION}"],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        return None, f"pip install pathway=={PATHWAY_VERSION} failed: {pip.stderr.strip()[-800:]}"
    probe = subprocess.run(check, capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"pathway does not import: {probe.stderr.strip()[-800:]}"
    return str(python), ""


def run_pathway(python: str, rate: int, seconds: float, *, interval_s: float, customers: int,
                seed: int) -> dict[str, Any]:
    """One run of Pathway's side at `rate` (in its interpreter): latency arrays per join."""
    with tempfile.TemporaryDirectory(prefix="fluss-fresh-pw-") as out:
        args = [python, str(_PATHWAY_SCRIPT), "--rate", str(rate), "--seconds", str(seconds), "--interval-s",
                str(interval_s), "--customers", str(customers), "--seed", str(seed), "--out", out]
        env = {**os.environ, "PATHWAY_THREADS": os.environ.get("PATHWAY_THREADS", "1")}
        proc = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 600, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"Pathway's side failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        info = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
        data = np.load(os.path.join(out, "latency.npz"))
        lat = {"delta": data["delta"], "lookup": data["lookup"]}
    return {"latency": lat, "events": info["events"], "achieved": info["events"] / info["elapsed_s"]}


# ---------------------------------------------------------------- figures
def percentiles(lat: np.ndarray, expected: int, skip: int = 0) -> dict[str, float]:
    """p50/p99/max in seconds over the events expected (an event never seen in the result counts as infinite),
    leaving out the first `skip` events (the warm-up: event ids follow write order)."""
    lat, expected = lat[skip:], max(expected - skip, 0)
    missing = max(expected - int(np.isfinite(lat).sum()), 0)
    full = np.concatenate([lat[np.isfinite(lat)], np.full(missing, np.inf)])
    if len(full) == 0:
        return {"p50": float("inf"), "p99": float("inf"), "max": float("inf"), "missing": missing}
    return {"p50": float(np.percentile(full, 50)), "p99": float(np.percentile(full, 99)),
            "max": float(np.max(full)), "missing": missing}


def measure(rates: list[int], seconds: float, *, interval_s: float = 0.01, customers: int = CUSTOMERS,
            seed: int = 0, poll_s: float = 0.002, pathway: str | bool | None = None,
            tmpdir: str | None = None, warmup_s: float = 0.0, baseline: str | None = None) -> list[dict[str, Any]]:
    """Latency percentiles per contender, join and rate: rows with contender/join/rate/achieved/p50/p99/max/missing
    (seconds). `pathway`: an interpreter with pathway, None to find or create its venv, False to leave it out;
    events of the first `warmup_s` seconds are left out of the percentiles (both contenders alike); `baseline`: another
    checkout of fluss-lake run as a third contender (``BASELINE``), right after ours at each rate."""
    rows: list[dict[str, Any]] = []
    python, why = (None, "left out") if pathway is False else pathway_python(pathway or None)  # type: ignore[arg-type]
    if python is None:
        log(f"Pathway cannot run here: {why}")
    for rate in rates:
        runs = {"fluss-lake": lambda r=rate: run_ours(r, seconds, interval_s=interval_s, customers=customers,
                                                      seed=seed, poll_s=poll_s, tmpdir=tmpdir)}
        if baseline:
            runs[BASELINE] = lambda r=rate: run_ours(r, seconds, interval_s=interval_s, customers=customers,
                                                     seed=seed, poll_s=poll_s, tmpdir=tmpdir, code_root=baseline)
        if python is not None:
            runs[PEER] = lambda r=rate: run_pathway(python, r, seconds, interval_s=interval_s,  # type: ignore[misc]
                                                    customers=customers, seed=seed)
        for who, run in runs.items():
            log(f"  {who} at R = {fmt_num(rate)} events/s for {seconds:g} s ...")
            got = run()
            if "jobs" in got:
                log(f"    jobs: {got['jobs']}; writer: {got['writer']}")
            for join, lat in got["latency"].items():
                stats = percentiles(lat, got["events"], int(rate * warmup_s))
                rows.append({"contender": who, "join": join, "rate": rate, "achieved": got["achieved"],
                             "events": got["events"], **stats})
                log(f"    {join}: p50 {stats['p50'] * 1e3:.1f} ms, p99 {stats['p99'] * 1e3:.1f} ms, max "
                    f"{stats['max'] * 1e3:.1f} ms, missing {stats['missing']}, achieved {fmt_num(got['achieved'])}/s")
    if python is None and pathway is not False:
        rows.append({"contender": PEER, "join": "-", "rate": 0, "error": why})
    return rows


def _search(who: str, start: int, seconds: float, python: str | None, warmup_s: float, **kw: Any) -> dict[str, int]:
    """Per join, the highest rate (doubling from `start`) whose p99 stayed under 1 s and whose writer kept up."""
    best: dict[str, int] = {}
    alive = {"delta", "lookup"}
    rate = start
    while alive and rate <= 1_600_000:
        got = (run_ours(rate, seconds, **kw) if python is None else
               run_pathway(python, rate, seconds, **{k: v for k, v in kw.items() if k not in ("poll_s", "tmpdir")}))
        kept = got["achieved"] >= 0.9 * rate
        for join in sorted(alive):
            p99 = percentiles(got["latency"][join], got["events"], int(rate * warmup_s))["p99"]
            log(f"    search {who} {join} R={fmt_num(rate)}: p99 {p99 * 1e3:.1f} ms, "
                f"achieved {fmt_num(got['achieved'])}")
            if p99 < P99_BOUND_S and kept:
                best[join] = rate
            else:
                alive.discard(join)
        rate *= 2
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.freshness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs at small rates (a smoke run)")
    parser.add_argument("--rates", default=None, help="comma-separated events/s (default 10000,50000)")
    parser.add_argument("--seconds", type=float, default=None, help="writing time per rate (default 25; 4 quick)")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="the writer's batch interval")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="our jobs' idle poll interval")
    parser.add_argument("--search", action="store_true", help="also find the highest R with p99 < 1 s")
    parser.add_argument("--search-from", type=int, default=250, help="the search's first rate (then doubling)")
    parser.add_argument("--search-seconds", type=float, default=10.0, help="writing time per rate of the search")
    parser.add_argument("--warmup-s", type=float, default=2.0,
                        help="events of the first seconds left out of the percentiles (both sides; 0 with --quick)")
    parser.add_argument("--pathway-python", default=None, help="an interpreter that has pathway installed")
    parser.add_argument("--no-peer", action="store_true", help="our side only (says so in the output)")
    parser.add_argument("--tmpdir", default=None, help="parent folder for the temporary store (local disk)")
    parser.add_argument("--baseline", default=None, metavar="CHECKOUT",
                        help="also run our pipeline with fluss_lake imported from this checkout (a before/after A/B)")
    args = parser.parse_args(argv)
    rates = [int(r) for r in args.rates.split(",")] if args.rates else ([2_000] if args.quick else [10_000, 50_000])
    seconds = args.seconds or (4.0 if args.quick else 25.0)
    kw = {"interval_s": args.interval_ms / 1e3, "customers": CUSTOMERS, "seed": 0}
    reporter = Reporter(BENCH)
    baseline = os.path.abspath(args.baseline) if args.baseline else None
    rows = measure(rates, seconds, poll_s=args.poll_ms / 1e3, pathway=False if args.no_peer else args.pathway_python,
                   tmpdir=args.tmpdir, warmup_s=0.0 if args.quick else args.warmup_s, baseline=baseline, **kw)
    error = next((r["error"] for r in rows if "error" in r), None)
    by = {(r["contender"], r["join"], r["rate"]): r for r in rows if "error" not in r}
    for (who, join, rate), r in sorted(by.items()):
        if who == BASELINE:
            ours = by.get(("fluss-lake", join, rate))
            label = f"{BASELINE} ({os.path.basename(os.path.normpath(baseline or ''))})"
            for stat in ("p50", "p99", "max"):
                if ours is not None:
                    reporter.add(Result(BENCH, f"{join} join, R={fmt_num(rate)}/s, this checkout vs before",
                                        f"{stat}_latency_s", ours[stat], label, r[stat], False, r["events"], 1, (),
                                        note=f"achieved {fmt_num(ours['achieved'])}/s, "
                                        f"before {fmt_num(r['achieved'])}/s"))
            continue
        if who != "fluss-lake":
            continue
        peer = by.get((PEER, join, rate))
        for stat in ("p50", "p99", "max"):
            targets = (Target("value", "<=", GOAL_P99_S, "p99 <= 100 ms"),) if stat == "p99" and rate >= 50_000 else ()
            targets += (Target("ratio", ">=", 1.0, "ahead of Pathway"),) if peer is not None else ()
            reporter.add(Result(BENCH, f"{join} join, R={fmt_num(rate)}/s", f"{stat}_latency_s", r[stat],
                                PEER if peer is not None else f"{PEER} (not run: {error or 'left out'})",
                                peer[stat] if peer is not None else float("nan"), False, r["events"], 1, targets,
                                note=f"achieved {fmt_num(r['achieved'])}/s"
                                + (f", peer achieved {fmt_num(peer['achieved'])}/s" if peer else "")))
    if args.search:
        python, _ = (None, "") if args.no_peer else pathway_python(args.pathway_python)
        start, span = args.search_from, args.search_seconds
        warm = 0.0 if args.quick else args.warmup_s
        ours = _search("fluss-lake", start, span, None, warm, poll_s=args.poll_ms / 1e3, tmpdir=args.tmpdir, **kw)
        theirs = _search(PEER, start, span, python, warm, **kw) if python is not None else {}
        for join in ("delta", "lookup"):
            reporter.add(Result(BENCH, f"{join} join, highest R with p99 < 1 s (doubling from {fmt_num(start)})",
                                "events_per_s", ours.get(join, 0), PEER, theirs.get(join, float("nan")), True,
                                0, 1, (Target("ratio", ">=", 1.0, "ahead of Pathway"),)))
    reporter.finish()


if __name__ == "__main__":
    main()
