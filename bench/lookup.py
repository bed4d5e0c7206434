"""Primary-key lookups: batched, small batches, single keys, and the memory a big table holds.

A table of ``--rows`` rows (``id BIGINT`` key, ``a BIGINT``, ``b DOUBLE``, ``s STRING``) is written in large
upserts, then, interleaved with the peers on the same random keys:

- 100k random keys per call (keys/s) vs a Python dict of the same rows (``list(map(d.get, keys))``) and a
  DuckDB join of a 100k-key table against the in-memory table;
- 1,000 keys per call (keys/s), same peers;
- one key per call, p50 latency in microseconds: ``Lookuper.lookup_one({"id": k})`` (the single-key path,
  when the installed version has it; the target applies to it) and ``Lookuper.lookup([{"id": k}])`` (the
  batched API with one key), vs DuckDB ``SELECT * FROM t WHERE id = ?`` (primary-key index) and ``dict.get``;
- memory: each system in a fresh process: ours opens the stored table and does the lookups; the dict and
  DuckDB build the same rows. Anonymous memory (``RssAnon``) held afterwards, minus the process's baseline
  after imports, per key.

Run ``python -m bench.lookup [--quick] [--rows N] [--repeats K] [--skip-memory]``.
"""

from __future__ import annotations

import argparse
import gc
import time
from typing import Any

import numpy as np

from bench._common import (Reporter, Result, RssSampler, Target, bench_args, fmt_num, fmt_size, interleave, log,
                           median, proc_status, run_child, scatter_keys, temp_store_dir)

BENCH = "lookup"
FULL_ROWS = 10_000_000
QUICK_ROWS = 200_000
SCHEMA = {"id": "BIGINT", "a": "BIGINT", "b": "DOUBLE", "s": "STRING"}
TABLE = "bench.lk"
_KEY_MULT = 11400714819323198485  # the same bijection as scatter_keys, in SQL


# ---------------------------------------------------------------- data (identical in every process)
def make_rows(start: int, stop: int):
    """Rows ``start..stop``: deterministic, so children rebuild exactly the same data."""
    import polars as pl

    i = np.arange(start, stop, dtype=np.int64)
    return pl.DataFrame({"id": scatter_keys(i), "a": i * 3 + 1, "b": i * 0.5,
                         "s": pl.Series(i % 1_000_000).cast(pl.String)})


def dict_rows(n: int, chunk: int = 1_000_000) -> dict[int, tuple]:
    """The same rows as a Python dict ``id -> (a, b, s)``."""
    d: dict[int, tuple] = {}
    for start in range(0, n, chunk):
        i = np.arange(start, min(start + chunk, n), dtype=np.int64)
        s = (i % 1_000_000).astype(str).tolist()
        d.update(zip(scatter_keys(i).tolist(), zip((i * 3 + 1).tolist(), (i * 0.5).tolist(), s)))
    return d


def duck_table(con: Any, n: int) -> None:
    """The same rows in a DuckDB in-memory table with a PRIMARY KEY, generated inside DuckDB."""
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, a BIGINT, b DOUBLE, s VARCHAR)")
    con.execute(f"""
        INSERT INTO t
        SELECT CAST(CASE WHEN x >= 9223372036854775808 THEN x - 18446744073709551616 ELSE x END AS BIGINT),
               i * 3 + 1, i * 0.5, CAST(i % 1000000 AS VARCHAR)
        FROM (SELECT i, (i::HUGEINT * {_KEY_MULT}) % 18446744073709551616 AS x FROM range({n}) r(i))""")


def random_keys(rng: np.random.Generator, n_rows: int, count: int) -> np.ndarray:
    """`count` random existing keys."""
    return scatter_keys(rng.integers(0, n_rows, count))


_JOIN = "SELECT t.* FROM k LEFT JOIN t ON k.id = t.id"


def duck_join(con: Any, keys_arrow: Any) -> Any:
    """DuckDB join of a key table against the table, result fetched as Arrow."""
    con.register("k", keys_arrow)
    try:
        return con.sql(_JOIN).to_arrow_table()
    finally:
        con.unregister("k")


# ---------------------------------------------------------------- memory children
def _lookup_workload(lookup_many, lookup_one, n_rows: int, seed: int, quick: bool) -> None:
    """The lookups every memory child does: one 100k batch, 1k-key batches, single keys."""
    rng = np.random.default_rng(seed)
    lookup_many(random_keys(rng, n_rows, 100_000))
    for _ in range(20 if quick else 100):
        lookup_many(random_keys(rng, n_rows, 1_000))
    for k in random_keys(rng, n_rows, 200).tolist():
        lookup_one(k)


def child_ours(p: dict[str, Any]) -> dict[str, Any]:
    """Open the stored table in this fresh process and do the lookups."""
    import polars as pl

    import fluss_lake as fl

    gc.collect()
    base = proc_status()
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        conn = fl.connect(p["store"], local_dir=p["local"])
        table = conn.get_table(TABLE)
        lk = table.new_lookup()
        lk.lookup(pl.DataFrame({"id": [0]}))  # opens (restores) the bucket state
        open_s = time.perf_counter() - t0
        found = 0

        def many(keys: np.ndarray) -> None:
            nonlocal found
            found += lk.lookup(pl.DataFrame({"id": keys}), with_found=True).get_column("_found").sum()

        one = (lambda k: lk.lookup_one({"id": k})) if hasattr(lk, "lookup_one") else (lambda k: lk.lookup([{"id": k}]))
        _lookup_workload(many, one, p["rows"], p["seed"], p["quick"])
        gc.collect()
        after = sampler.sample()
    return {"base_anon": base["RssAnon"], "after_anon": after, "peak_anon": sampler.peak, "open_s": open_s,
            "found": int(found), "after_file": proc_status().get("RssFile", 0)}


def child_dict(p: dict[str, Any]) -> dict[str, Any]:
    """Build the Python dict of the same rows and do the lookups."""
    gc.collect()
    base = proc_status()
    with RssSampler() as sampler:
        d = dict_rows(p["rows"])
        gc.collect()
        found = 0

        def many(keys: np.ndarray) -> None:
            nonlocal found
            found += sum(v is not None for v in map(d.get, keys.tolist()))

        _lookup_workload(many, d.get, p["rows"], p["seed"], p["quick"])
        gc.collect()
        after = sampler.sample()
    return {"base_anon": base["RssAnon"], "after_anon": after, "peak_anon": sampler.peak, "found": found,
            "len": len(d)}


def child_duckdb(p: dict[str, Any]) -> dict[str, Any]:
    """Build the DuckDB in-memory table of the same rows and do the lookups."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect(":memory:")
    gc.collect()
    base = proc_status()
    with RssSampler() as sampler:
        duck_table(con, p["rows"])
        found = 0

        def many(keys: np.ndarray) -> None:
            nonlocal found
            found += len(keys) - duck_join(con, pa.table({"id": keys})).column("a").null_count

        _lookup_workload(many, lambda k: con.execute("SELECT * FROM t WHERE id = ?", [k]).fetchall(),
                         p["rows"], p["seed"], p["quick"])
        gc.collect()
        after = sampler.sample()
    return {"base_anon": base["RssAnon"], "after_anon": after, "peak_anon": sampler.peak, "found": int(found)}


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> None:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--buckets", type=int, default=1, help="bucket.num of the table")
        p.add_argument("--preload-batch", type=int, default=1_000_000, help="rows per preload upsert call")
        p.add_argument("--batch-keys", type=int, default=100_000, help="keys per call of the batched case")
        p.add_argument("--small-batches", type=int, default=None, help="1k-key calls per run (default 100)")
        p.add_argument("--singles", type=int, default=None, help="single-key calls per run (default 1000)")
        p.add_argument("--skip-memory", action="store_true", help="skip the fresh-process memory cases")

    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, argv=argv, description=__doc__, extra=extra)
    if args.small_batches is None:
        args.small_batches = 20 if args.quick else 100
    if args.singles is None:
        args.singles = 200 if args.quick else 1000
    import duckdb
    import polars as pl
    import pyarrow as pa

    import fluss_lake as fl
    from fluss_lake.kv import compactor

    n = args.rows
    rep = Reporter(BENCH)
    log(f"bench.lookup: {n:,} rows, {args.repeats} repeats, {args.buckets} bucket(s)")
    with temp_store_dir(args.tmpdir) as root:
        store, local = f"{root}/store", f"{root}/local"
        conn = fl.connect(store, local_dir=local)
        conn.create_database("bench")
        conn.create_table(TABLE, schema=SCHEMA, primary_key=["id"], bucket_num=args.buckets)
        table = conn.get_table(TABLE)
        t0 = time.perf_counter()
        for start in range(0, n, args.preload_batch):
            table.upsert(make_rows(start, min(start + args.preload_batch, n)))
        compactor.drain()  # merge the preload's segments before the snapshot names them
        table.snapshot()
        segs = [s.rows for b in range(args.buckets) for s in table._tablets().kv_tablet(b).kv.segments]
        log(f"ours: wrote {n:,} rows in {time.perf_counter() - t0:.1f} s; segments {segs}")
        t0 = time.perf_counter()
        d = dict_rows(n)
        log(f"dict: built in {time.perf_counter() - t0:.1f} s")
        con = duckdb.connect(":memory:")
        t0 = time.perf_counter()
        duck_table(con, n)
        log(f"duckdb: built in {time.perf_counter() - t0:.1f} s")
        lk = table.new_lookup()
        rng = np.random.default_rng(7)

        # sanity: the three hold the same rows
        probe = random_keys(rng, n, 1000)
        got = lk.lookup(pl.DataFrame({"id": probe}))
        want = [d[k] for k in probe.tolist()]
        assert got.select("a", "b", "s").rows() == want, "ours and the dict disagree"
        duck = duck_join(con, pa.table({"id": probe}))
        assert duck.num_rows == 1000 and duck.column("a").null_count == 0, "duckdb misses keys"

        # ---- batched 100k
        bk = args.batch_keys
        cur: dict[str, Any] = {}

        def before_batch(_r: int) -> None:
            keys = random_keys(rng, n, bk)
            cur.update(frame=pl.DataFrame({"id": keys}), py=keys.tolist(), arrow=pa.table({"id": keys}))

        lk.lookup(pl.DataFrame({"id": random_keys(rng, n, bk)}))  # warm
        res = interleave({
            "ours": lambda r: bk / _t(lambda: lk.lookup(cur["frame"])),
            "dict": lambda r: bk / _t(lambda: list(map(d.get, cur["py"]))),
            "duckdb": lambda r: bk / _t(lambda: duck_join(con, cur["arrow"])),
        }, args.repeats, before=before_batch)
        case = f"batched lookup {fmt_num(bk)} random keys in {fmt_num(n)} rows"
        ours_v = median(res["ours"])
        log(f"ours per-repeat keys/s {[fmt_num(x) for x in res['ours']]}")
        rep.add(Result(BENCH, case, "keys_per_s", ours_v, "python dict map(d.get)", median(res["dict"]), True, n,
                       args.repeats, targets=(Target("value", ">=", 5e6, ">= 5M keys/s"),
                                              Target("ratio", ">=", 1.0, "ahead of dict"))))
        rep.add(Result(BENCH, case, "keys_per_s", ours_v, "duckdb join", median(res["duckdb"]), True, n,
                       args.repeats))

        # ---- batches of 1,000
        nb = args.small_batches

        def before_small(_r: int) -> None:
            keys = [random_keys(rng, n, 1000) for _ in range(nb)]
            cur.update(frames=[pl.DataFrame({"id": k}) for k in keys], pys=[k.tolist() for k in keys],
                       arrows=[pa.table({"id": k}) for k in keys])

        def loop(fn, items) -> float:
            start = time.perf_counter()
            for item in items:
                fn(item)
            return nb * 1000 / (time.perf_counter() - start)

        res = interleave({
            "ours": lambda r: loop(lk.lookup, cur["frames"]),
            "dict": lambda r: loop(lambda keys: list(map(d.get, keys)), cur["pys"]),
            "duckdb": lambda r: loop(lambda a: duck_join(con, a), cur["arrows"]),
        }, args.repeats, before=before_small)
        case = f"lookup in 1k-key batches ({nb} calls) in {fmt_num(n)} rows"
        ours_v = median(res["ours"])
        rep.add(Result(BENCH, case, "keys_per_s", ours_v, "python dict map(d.get)", median(res["dict"]), True, n,
                       args.repeats, targets=(Target("value", ">=", 1e6, ">= 1M keys/s"),)))
        rep.add(Result(BENCH, case, "keys_per_s", ours_v, "duckdb join", median(res["duckdb"]), True, n,
                       args.repeats))

        # ---- single keys (p50 latency)
        ns = args.singles

        def before_single(_r: int) -> None:
            cur["single"] = random_keys(rng, n, ns).tolist()

        def p50(fn) -> float:
            lat = np.empty(ns)
            for i, k in enumerate(cur["single"]):
                start = time.perf_counter_ns()
                fn(k)
                lat[i] = time.perf_counter_ns() - start
            return float(np.median(lat)) / 1000.0

        stmt = "SELECT * FROM t WHERE id = ?"
        runners = {"ours_batch_api": lambda r: p50(lambda k: lk.lookup([{"id": k}]))}
        has_one = hasattr(lk, "lookup_one")  # the dedicated single-key path, where this version has it
        if has_one:
            assert lk.lookup_one({"id": int(probe[0])})["a"] == want[0][0], "lookup_one disagrees with the dict"
            runners["ours_one"] = lambda r: p50(lambda k: lk.lookup_one({"id": k}))
        runners["duckdb"] = lambda r: p50(lambda k: con.execute(stmt, [k]).fetchall())
        runners["dict"] = lambda r: p50(d.get)
        res = interleave(runners, args.repeats, before=before_single)
        target = (Target("value", "<=", 20, "<= 20 us"),)
        cases = [('lookup([{"id": k}])', "ours_batch_api", not has_one)]
        if has_one:
            cases.insert(0, ('lookup_one({"id": k})', "ours_one", True))
        for label, key, fastest in cases:
            case = f"single-key lookup p50, {label}, {fmt_num(n)} rows"
            rep.add(Result(BENCH, case, "p50_us", median(res[key]), "duckdb WHERE id = ? (PK index)",
                           median(res["duckdb"]), False, n, args.repeats, targets=target if fastest else ()))
            rep.add(Result(BENCH, case, "p50_us", median(res[key]), "python dict.get", median(res["dict"]), False,
                           n, args.repeats))

        del d
        con.close()
        gc.collect()

        # ---- memory in fresh processes
        if not args.skip_memory:
            payload = {"store": store, "local": f"{root}/local-child", "rows": n, "seed": 11, "quick": args.quick}
            mem: dict[str, dict[str, Any]] = {}
            per_key: dict[str, list[float]] = {"ours": [], "dict": [], "duckdb": []}
            mem_repeats = 1  # memory is deterministic enough; one fresh process each
            for _ in range(mem_repeats):
                for name, fn in (("ours", "child_ours"), ("dict", "child_dict"), ("duckdb", "child_duckdb")):
                    t0 = time.perf_counter()
                    out = mem[name] = run_child("lookup", fn, payload)
                    held = out["after_anon"] - out["base_anon"]
                    per_key[name].append(held / n)
                    log(f"memory[{name}]: held {fmt_size(held)} anon ({held / n:.1f} B/key), peak "
                        f"{fmt_size(out['peak_anon'] - out['base_anon'])} over baseline "
                        f"{fmt_size(out['base_anon'])}; VmHWM {fmt_size(out['_status'].get('VmHWM', 0))}, "
                        f"RssFile {fmt_size(out['_status'].get('RssFile', 0))}; found {out['found']}; "
                        f"{time.perf_counter() - t0:.1f} s")
            ours_b = median(per_key["ours"])
            peak = (mem["ours"]["peak_anon"] - mem["ours"]["base_anon"]) / n
            case = f"anonymous memory per key after open + lookups, {fmt_num(n)} rows (fresh process)"
            note = (f"ours peak {peak:.1f} B/key; open {mem['ours']['open_s']:.2f} s; mapped file pages "
                    f"{fmt_size(mem['ours']['after_file'])} (droppable cache)")
            rep.add(Result(BENCH, case, "bytes_per_key", ours_b, "python dict (same rows)", median(per_key["dict"]),
                           False, n, mem_repeats, targets=(Target("value", "<=", 64, "<= 64 B/key"),), note=note))
            rep.add(Result(BENCH, case, "bytes_per_key", ours_b, "duckdb in-memory table (PK)",
                           median(per_key["duckdb"]), False, n, mem_repeats))
    rep.finish()


def _t(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
