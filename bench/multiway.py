"""N-way joins (Customer 360): state in storage against state in the operator, ours and Flink's (issue 22, 1-2).

N input streams (N = 2, 4, 8 by default) of ``--keys`` customers each: primary-key tables ``s0 .. s{N-1}`` keyed by
``cid``, each updating its own columns ``s{i}_x`` (DOUBLE) and ``s{i}_n`` (BIGINT) of the same customers: an
insert round, then update rounds (a fifth of the present keys get new values; in s1.. a fiftieth are deleted and a
tenth of the absent ones come back), and a final round where s0 deletes 2% of the customers (ones no other stream
has). The Customer 360 row of a customer is ``s0 LEFT JOIN s1 .. LEFT JOIN s{N-1}`` on ``cid``: a customer of s0
with every other stream's columns, NULL where that stream has no row. Ways, each in its own fresh process (its
peak ``RssAnon`` is its own):

- ``partial``: (a) the seeds' multi-stream merge: each stream's changes written as partial updates (its own
  columns as target columns; a delete is a partial delete) into one primary-key table. A small job of this bench
  (`PartialUpdateMerge`) reads the N changelogs; its only state is the offsets. Its final rows equal the LEFT
  join's because every key of s1.. is a key of s0 (partial-update rules: a row exists while any column is set).
- ``delta``: (b) :class:`~fluss_lake.jobs.DeltaJoin` of the N tables (a star of LEFT joins probed by primary key).
- ``cascade``: (c) a cascade of N-1 two-way :class:`~fluss_lake.jobs.StatefulJoin` (symmetric hash joins), each
  joining the previous one's result (a primary-key table) with the next stream, as a left-deep plan of binary
  regular joins runs; every join keeps both of its inputs in state, so the state holds each customer's row ~N/2
  times over. The jobs run in one process (one after the other until none has work), like the operators of one job.
- ``stateful_multi`` (extra): the library's :class:`~fluss_lake.jobs.StatefulJoin` over all N inputs at once (one
  operator keeping each input once; not a cascade).
- ``flink_rocksdb`` / ``flink_hashmap`` (peer, with ``--flink``, the default of ``main``): the same query in
  PyFlink's local mini-cluster (``apache-flink`` 2.3.0 in its own venv that this bench creates under
  ``~/.cache/fluss-lake-bench/flink``; Java 11/17 from the system): filesystem sources in ``debezium-json`` holding
  the same changes (c = +I, u = -U/+U, d = -D, real deletes, not a final state), the planner's default plan (a
  cascade of binary regular joins), a ``print`` sink whose changes the bench folds into the final rows, periodic full
  checkpoints (state = the largest complete checkpoint), ``state.backend.type`` rocksdb or hashmap.

Per way and N: operator state bytes (ours: checkpoint + in-memory state of the jobs; Flink: checkpoint), peak
RssAnon (Flink: summed over the Python driver and the JVM, sampled), result rows/s (rows of the final Customer 360
/ seconds of the run; Flink: of the job after start-up, start-up reported apart), restart seconds (a new process
opens the job(s) from their checkpoint and runs once with nothing new; the stateful joins load their state),
identical (the final rows equal, as sorted frames, a Polars LEFT join of the inputs' current rows).

Run ``python -m bench.multiway [--quick] [--keys K] [--streams 2,4,8] [--no-flink] [--flink-backends B]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

import fluss_lake as fl
from bench._common import (
    Reporter,
    Result,
    RssSampler,
    Target,
    fmt_size,
    log,
    proc_status,
    run_child,
    temp_store_dir,
)
from fluss_lake._utils.distinct import distinct
from fluss_lake.jobs import DeltaJoin, Join, StatefulJoin
from fluss_lake.jobs.job import Job, JobReport
from fluss_lake.kv import compactor
from fluss_lake.table import Table

__all__ = ["measure", "make_changes", "PartialUpdateMerge", "main"]

BENCH = "multiway"
FULL_KEYS = 1_000_000
QUICK_KEYS = 5_000
WAYS = ("partial", "delta", "cascade", "stateful_multi")
FLINK_BACKENDS = ("rocksdb", "hashmap")
UPDATE_ROUNDS = 2
WRITE_ROWS = 200_000
PARTIAL_BATCH_ROWS = 25_000  # as the delta join's default step: a zero-state job's memory follows its step
FLINK_VERSION = "2.3.0"
FLINK_VENV = os.path.join(os.path.expanduser("~"), ".cache", "fluss-lake-bench", "flink")
FLINK_CHECKPOINT_MS = 1000
KEY = "cid"


def _cols(i: int) -> list[str]:
    return [f"s{i}_x", f"s{i}_n"]


# ---------------------------------------------------------------- data
def make_changes(n: int, keys: int, *, seed: int = 0) -> list[list[pl.DataFrame]]:
    """Per stream, its batches of changes in order: frames of ``cid``, ``op`` (``c``/``u``/``d``), the new values
    ``x``, ``n`` (null for ``d``) and the old ones ``bx``, ``bn`` (null for ``c``); keys are distinct in a batch.

    s0 inserts every key; s1.. insert 90% of the keys outside ``gone`` (the 2% that s0 deletes in its last batch,
    written after every other stream's), then update rounds; every key of s1.. stays a key of s0."""
    rng = np.random.default_rng(seed)
    all_keys = np.arange(keys, dtype=np.int64)
    gone = rng.random(keys) < 0.02
    out: list[list[pl.DataFrame]] = []
    for i in range(n):
        rng_i = np.random.default_rng([seed, i])

        def values(m: int, rng_i: np.random.Generator = rng_i) -> tuple[np.ndarray, np.ndarray]:
            return rng_i.integers(0, 1 << 24, m) / 16.0, rng_i.integers(0, 1 << 40, m)  # exact in text

        present = np.ones(keys, dtype=bool) if i == 0 else (~gone) & (rng_i.random(keys) < 0.9)
        x = np.zeros(keys)
        v = np.zeros(keys, dtype=np.int64)
        ins = all_keys[present]
        x[ins], v[ins] = values(len(ins))
        batches = [pl.DataFrame({KEY: ins, "op": "c", "x": x[ins], "n": v[ins],
                                 "bx": pl.Series([None] * len(ins), dtype=pl.Float64),
                                 "bn": pl.Series([None] * len(ins), dtype=pl.Int64)})]
        for _ in range(UPDATE_ROUNDS):
            draw = rng_i.random(keys)
            upd = all_keys[present & (draw < 0.2)]
            dele = all_keys[present & (draw >= 0.2) & (draw < 0.22)] if i else all_keys[:0]
            back = all_keys[(~present) & (~gone) & (draw < 0.1)] if i else all_keys[:0]
            nx, nv = values(len(upd) + len(back))
            frames = []
            if len(upd):
                frames.append(pl.DataFrame({KEY: upd, "op": "u", "x": nx[: len(upd)], "n": nv[: len(upd)],
                                            "bx": x[upd], "bn": v[upd]}))
            if len(dele):
                frames.append(pl.DataFrame({KEY: dele, "op": "d", "x": pl.Series([None] * len(dele), dtype=pl.Float64),
                                            "n": pl.Series([None] * len(dele), dtype=pl.Int64),
                                            "bx": x[dele], "bn": v[dele]}))
            if len(back):
                frames.append(pl.DataFrame({KEY: back, "op": "c", "x": nx[len(upd):], "n": nv[len(upd):],
                                            "bx": pl.Series([None] * len(back), dtype=pl.Float64),
                                            "bn": pl.Series([None] * len(back), dtype=pl.Int64)}))
            x[upd], v[upd] = nx[: len(upd)], nv[: len(upd)]
            x[back], v[back] = nx[len(upd):], nv[len(upd):]
            present[dele] = False
            present[back] = True
            batches.append(pl.concat(frames).sort(KEY))
        if i == 0:
            last = all_keys[gone]
            batches.append(pl.DataFrame({KEY: last, "op": "d", "x": pl.Series([None] * len(last), dtype=pl.Float64),
                                         "n": pl.Series([None] * len(last), dtype=pl.Int64),
                                         "bx": x[last], "bn": v[last]}))
        out.append(batches)
    return out


def _write_debezium(batches: Sequence[pl.DataFrame], i: int, path: str) -> None:
    """One stream's changes as debezium-json lines, in order (the Flink peer's source file)."""
    x, n = _cols(i)
    with open(path, "wb") as handle:
        for batch in batches:
            lines = batch.select(
                pl.when(pl.col("op") != "c").then(pl.struct(pl.col(KEY), pl.col("bx").alias(x),
                                                             pl.col("bn").alias(n))).alias("before"),
                pl.when(pl.col("op") != "d").then(pl.struct(pl.col(KEY), pl.col("x").alias(x),
                                                             pl.col("n").alias(n))).alias("after"),
                pl.col("op"))
            lines.write_ndjson(handle)


def _result_schema(n: int) -> dict[str, str]:
    schema = {KEY: "BIGINT"}
    for i in range(n):
        x, v = _cols(i)
        schema[x], schema[v] = "DOUBLE", "BIGINT"
    return schema


def _setup(path: str, n: int, keys: int, seed: int, flink_dir: str | None) -> int:
    """Create and fill the N input tables (and the Flink peer's files); returns the number of change records."""
    conn = fl.connect(path)
    conn.create_database("bench")
    changes = make_changes(n, keys, seed=seed)
    tables = []
    for i in range(n):
        x, v = _cols(i)
        conn.create_table(f"bench.s{i}", schema={KEY: "BIGINT", x: "DOUBLE", v: "BIGINT"}, primary_key=[KEY],
                          bucket_num=4)
        tables.append(conn.get_table(f"bench.s{i}"))
    records = 0
    rounds = max(len(b) for b in changes)
    for r in range(rounds):
        for i in [*range(1, n), 0]:  # s0 last in a round: its final deletes come after every other stream's writes
            if r >= len(changes[i]):
                continue
            batch = changes[i][r]
            records += batch.height
            x, v = _cols(i)
            for start in range(0, batch.height, WRITE_ROWS):
                part = batch.slice(start, WRITE_ROWS)
                writer = tables[i].new_upsert()
                ups = part.filter(pl.col("op") != "d").select(KEY, pl.col("x").alias(x), pl.col("n").alias(v))
                dels = part.filter(pl.col("op") == "d").select(KEY)
                if ups.height:
                    writer.upsert(ups)
                if dels.height:
                    writer.delete(dels)
                writer.flush()
    for table in tables:
        table.snapshot()  # as a running table would have (periodic KV snapshots)
    if flink_dir is not None:
        os.makedirs(flink_dir, exist_ok=True)
        for i in range(n):
            _write_debezium(changes[i], i, os.path.join(flink_dir, f"s{i}.json"))
    return records


# ---------------------------------------------------------------- way (a): partial updates
class PartialUpdateMerge(Job):
    """Copies each input's changes into one primary-key table as partial updates of that input's columns
    (``target_columns`` = key + its columns; a delete is a partial delete): the seeds' multi-stream merge, whose
    only state is the consumed offsets. `columns` maps each alias to the result columns it owns (same names in
    the input)."""

    kind = "partial_update_merge"

    def __init__(self, result: Table, inputs: Mapping[str, Table], columns: Mapping[str, Sequence[str]], *,
                 name: str, batch_rows: int = PARTIAL_BATCH_ROWS) -> None:
        super().__init__(result.connection, name, inputs, batch_rows=batch_rows)
        self.result = result
        self.columns = {a: list(c) for a, c in columns.items()}

    def _step(self) -> JobReport | None:
        ranges = {a: self._ranges(a) for a in self.inputs}
        ranges = {a: r for a, r in ranges.items() if r}
        if not ranges:
            return None
        records = upserted = deleted = 0
        for alias, r in ranges.items():
            pk = list(self.inputs[alias].schema.primary_key)
            targets = pk + [c for c in self.columns[alias] if c not in pk]
            changes = self._read(alias, r, targets)
            records += changes.height
            images = distinct(changes.filter(pl.col("_change_type") != "-U"), pk, keep="last")
            ups = images.filter(pl.col("_change_type") != "-D").select(targets)
            dels = images.filter(pl.col("_change_type") == "-D").select(pk)
            writer = self.result.new_upsert(target_columns=targets)
            if ups.height:
                writer.upsert(ups)
            if dels.height:
                writer.delete(dels)
            writer.flush()
            upserted, deleted = upserted + ups.height, deleted + dels.height
        self._advance({a: {b: span[1] for b, span in r.items()} for a, r in ranges.items()})
        self._save()
        return JobReport(steps=1, records_read=records, rows_upserted=upserted, rows_deleted=deleted)


# ---------------------------------------------------------------- our ways
def _jobs(conn: fl.Connection, way: str, n: int) -> list[Any]:
    """The job(s) of a way, created (with their result tables) if new, opened from their checkpoint if not."""
    inputs = {f"s{i}": conn.get_table(f"bench.s{i}") for i in range(n)}
    result = f"bench.c360_{way}"
    conn.create_table(result, schema=_result_schema(n), primary_key=[KEY], bucket_num=4, ignore_if_exists=True)
    out = conn.get_table(result)
    if way == "partial":
        return [PartialUpdateMerge(out, inputs, {f"s{i}": _cols(i) for i in range(n)}, name="c360-partial")]
    joins = [Join("s0", f"s{i}", [KEY], how="left") for i in range(1, n)]
    if way == "delta":
        return [DeltaJoin(out, inputs, joins, name="c360-delta")]
    if way == "stateful_multi":
        return [StatefulJoin(out, inputs, joins, name="c360-stateful-multi")]
    if way != "cascade":
        raise ValueError(f"unknown way {way!r}")
    jobs = []
    left = inputs["s0"]
    for k in range(1, n):  # t_k = t_{k-1} LEFT JOIN s_k, the last one into the result table
        if k == n - 1:
            target = out
        else:
            name = f"bench.cascade_t{k}"
            conn.create_table(name, schema=_result_schema(k + 1), primary_key=[KEY], bucket_num=4,
                              ignore_if_exists=True)
            target = conn.get_table(name)
        jobs.append(StatefulJoin(target, {"l": left, "r": inputs[f"s{k}"]}, [Join("l", "r", [KEY], how="left")],
                                 name=f"c360-cascade-{k}"))
        left = target
    return jobs


def _run_all(jobs: Sequence[Any]) -> int:
    """Run the jobs (each joining the previous one's output) until none has work; records read."""
    records = 0
    while True:
        done = [job.run_once() for job in jobs]
        records += sum(d.records_read for d in done)
        if not any(d.records_read for d in done):
            return records


def child_run(payload: dict) -> dict:
    """In a fresh process: the way over the whole changelogs; time, peak RssAnon, state bytes."""
    gc.collect()
    conn = fl.connect(payload["path"])
    with RssSampler() as sampler:
        start = time.perf_counter()
        jobs = _jobs(conn, payload["way"], payload["n"])
        records = _run_all(jobs)
        compactor.drain()  # the merges its writes started count too (every way)
        seconds = time.perf_counter() - start
    rows = conn.get_table(f"bench.c360_{payload['way']}").to_polars(columns=[KEY]).height
    return {"seconds": seconds, "peak_anon": sampler.peak, "records": records, "result_rows": rows,
            "state_bytes": sum(job.state_bytes() for job in jobs)}


def child_restart(payload: dict) -> dict:
    """In a fresh process: open the job(s) from their checkpoint and run once (nothing new to do)."""
    conn = fl.connect(payload["path"])
    start = time.perf_counter()
    jobs = _jobs(conn, payload["way"], payload["n"])
    records = sum(job.run_once().records_read for job in jobs)
    return {"seconds": time.perf_counter() - start, "records": records}


def _expected(conn: fl.Connection, n: int) -> pl.DataFrame:
    """The Customer 360 rows by Polars from the inputs' current rows (the reference every way must equal)."""
    frame = conn.get_table("bench.s0").to_polars()
    for i in range(1, n):
        frame = frame.join(conn.get_table(f"bench.s{i}").to_polars(), on=KEY, how="left")
    return frame.select(list(_result_schema(n))).sort(KEY)


def _same(frame: pl.DataFrame, expected: pl.DataFrame) -> bool:
    frame = frame.select(expected.columns).cast(dict(expected.schema)).sort(KEY)  # type: ignore[arg-type]
    return frame.equals(expected)


# ---------------------------------------------------------------- the Flink peer
def flink_python() -> str:
    """The Python of the Flink peer's venv."""
    return os.path.join(FLINK_VENV, "bin", "python")


def ensure_flink() -> str | None:
    """Create the PyFlink venv if it is not there (``python -m venv`` + ``pip install apache-flink``); None when
    ready, else why the peer cannot run."""
    if shutil.which("java") is None:
        return "no java on PATH (PyFlink needs Java 11 or 17: apt-get install openjdk-17-jre-headless)"
    python = flink_python()
    check = [python, "-c", "import pyflink, sys; sys.exit(0)"]
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return None
    log(f"creating the PyFlink venv in {FLINK_VENV} (pip install apache-flink=={FLINK_VERSION}; a few minutes)")
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [[base, "-m", "venv", FLINK_VENV],
             [python, "-m", "pip", "install", "-q", f"apache-flink=={FLINK_VERSION}"]]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            return f"{' '.join(step[:4])} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-1500:]}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return "apache-flink installed but `import pyflink` fails in its venv"
    return None


def _tree_anon(root: int) -> int:
    """RssAnon summed over a process and its descendants (psutil walks the tree)."""
    import psutil

    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    return sum(proc_status(p.pid).get("RssAnon", 0) for p in procs)


_PRINTED = re.compile(r"^(?:\d+> )?([+-][IUD])\[(.*)\]$")


def _fold_printed(path: str, n: int) -> pl.DataFrame:
    """The final rows of a print sink's changes: per key, the last change, kept when it is +I/+U."""
    schema = _result_schema(n)
    lines = pl.read_csv(path, has_header=False, separator="\x01", new_columns=["line"], quote_char=None,
                        schema_overrides={"line": pl.String}, truncate_ragged_lines=True)
    parsed = lines.select(pl.col("line").str.extract_groups(_PRINTED.pattern).alias("m")).unnest("m")
    parsed = parsed.rename({"1": "kind", "2": "body"}).drop_nulls("kind")
    cols = parsed.select("kind", pl.col("body").str.split(", ").list.to_struct(fields=list(schema))).unnest("body")
    typed = cols.select("kind", *[pl.when(pl.col(c) == "null").then(None).otherwise(pl.col(c))
                                  .cast(pl.Float64 if t == "DOUBLE" else pl.Int64).alias(c) for c, t in schema.items()])
    last = typed.unique(subset=[KEY], keep="last", maintain_order=True)
    return last.filter(pl.col("kind").is_in(["+I", "+U"])).drop("kind")


def run_flink(work: str, n: int, backend: str, records: int) -> dict[str, Any]:
    """The N-way join in PyFlink's mini-cluster over the files in `work`; figures plus the folded result rows."""
    chk = os.path.join(work, f"chk-{backend}")
    shutil.rmtree(chk, ignore_errors=True)
    cfg = {"streams": [os.path.join(work, f"s{i}.json") for i in range(n)],
           "columns": [[[x, "DOUBLE"], [v, "BIGINT"]] for x, v in (_cols(i) for i in range(n))],
           "key": KEY, "backend": backend, "checkpoint_dir": chk, "checkpoint_ms": FLINK_CHECKPOINT_MS}
    out_path = os.path.join(work, f"out-{backend}.txt")
    driver = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_flink", "nway_job.py")
    peak = 0
    start = time.perf_counter()
    with open(out_path, "w") as out, open(out_path + ".err", "w") as err:
        proc = subprocess.Popen([flink_python(), driver], stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(cfg))
        proc.stdin.close()
        while proc.poll() is None:
            peak = max(peak, _tree_anon(proc.pid))
            time.sleep(0.05)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        with open(out_path + ".err") as handle:
            tail = handle.read()[-3000:]
        raise RuntimeError(f"the PyFlink job failed ({proc.returncode}):\n{tail}")
    figures: dict[str, Any] = {}
    with open(out_path) as handle:
        for line in handle:
            if line.startswith("FLINK-RESULT "):
                figures = json.loads(line[len("FLINK-RESULT "):])
    rows = _fold_printed(out_path, n)
    printed = os.path.getsize(out_path)
    shutil.rmtree(chk, ignore_errors=True)
    os.remove(out_path)
    return {**figures, "peak_anon": peak, "wall_s": wall, "rows": rows, "printed_bytes": printed,
            "records": records}


# ---------------------------------------------------------------- measuring
def measure(n: int, keys: int, *, seed: int = 0, ways: Sequence[str] = WAYS, flink: Sequence[str] = (),
            tmpdir: str | None = None) -> list[dict]:
    """Set up N streams of `keys` customers and run each way (and each Flink backend in `flink`) once.

    Returns one dict per way: ``way``, ``n``, ``state_bytes``, ``peak_rss_bytes`` (peak RssAnon of the way's own
    process; Flink: its process tree), ``rows_per_s`` (final result rows / seconds of the run), ``restart_s``
    (None for Flink), ``identical`` (final rows equal Polars' LEFT join of the inputs), plus ``seconds``,
    ``result_rows``, ``records`` (input change records) and, for Flink, ``startup_s`` or ``error``.

    Examples
    --------
    >>> rows = measure(2, 2_000)  # doctest: +SKIP
    >>> {r["way"]: r["identical"] for r in rows}  # doctest: +SKIP
    {'partial': True, 'delta': True, 'cascade': True, 'stateful_multi': True}
    """
    out: list[dict] = []
    with temp_store_dir(tmpdir) as path:
        flink_dir = os.path.join(path, "flink") if flink else None
        records = _setup(path, n, keys, seed, flink_dir)
        expected = _expected(fl.connect(path), n)
        for way in ways:
            payload = {"path": path, "way": way, "n": n}
            run = run_child(BENCH, "child_run", payload)
            restart = run_child(BENCH, "child_restart", payload)
            assert restart["records"] == 0, restart
            got = fl.connect(path).get_table(f"bench.c360_{way}").to_polars()
            row = {"way": way, "n": n, "keys": keys, "state_bytes": int(run["state_bytes"]),
                   "peak_rss_bytes": int(run["peak_anon"]), "rows_per_s": run["result_rows"] / run["seconds"],
                   "restart_s": restart["seconds"], "identical": _same(got, expected), "seconds": run["seconds"],
                   "result_rows": run["result_rows"], "records": records}
            out.append(row)
            log(f"  N={n} {way}: {run['seconds']:.2f} s, {row['rows_per_s']:,.0f} rows/s, peak RssAnon "
                f"{fmt_size(row['peak_rss_bytes'])}, state {fmt_size(row['state_bytes'])}, restart "
                f"{row['restart_s']:.3f} s, identical {row['identical']}")
        if flink:
            why = ensure_flink()
            for backend in flink:
                row = {"way": f"flink_{backend}", "n": n, "keys": keys, "state_bytes": None, "peak_rss_bytes": None,
                       "rows_per_s": None, "restart_s": None, "identical": None, "records": records}
                if why is None:
                    try:
                        got = run_flink(flink_dir, n, backend, records)  # type: ignore[arg-type]
                    except Exception as exc:  # noqa: BLE001 - the peer's failure is a figure of this run, reported as such
                        row["error"] = str(exc)[-2000:]
                    else:
                        row.update(state_bytes=int(got["state_bytes"]) if got.get("checkpoints") else None,
                                   peak_rss_bytes=int(got["peak_anon"]),
                                   rows_per_s=got["rows"].height / got["job_s"], seconds=got["job_s"],
                                   startup_s=got["startup_s"], wall_s=got["wall_s"], checkpoints=got["checkpoints"],
                                   result_rows=got["rows"].height, identical=_same(got["rows"], expected),
                                   printed_bytes=got["printed_bytes"])
                else:
                    row["error"] = why
                out.append(row)
                if "error" in row:
                    log(f"  N={n} flink {backend}: cannot run: {row['error'][:400]}")
                else:
                    log(f"  N={n} flink {backend}: job {row['seconds']:.2f} s (+ start-up {row['startup_s']:.1f} s), "
                        f"{row['rows_per_s']:,.0f} rows/s, peak RssAnon (driver + JVM) "
                        f"{fmt_size(row['peak_rss_bytes'])}, state (largest checkpoint of {row['checkpoints']}) "
                        f"{fmt_size(row['state_bytes'] or 0)}, identical {row['identical']}")
    return out


# ---------------------------------------------------------------- main
def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m bench.{BENCH}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_KEYS:,} keys, no Flink")
    parser.add_argument("--keys", "--rows", type=int, default=None, dest="keys",
                        help=f"customers per stream (default {FULL_KEYS:,})")
    parser.add_argument("--streams", default="2,4,8", help="the values of N, comma-separated")
    parser.add_argument("--no-flink", action="store_true", help="leave out the PyFlink peer")
    parser.add_argument("--flink-backends", default=",".join(FLINK_BACKENDS), help="state.backend.type values")
    parser.add_argument("--ways", default=",".join(WAYS), help="our ways to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmpdir", default=None, help="parent folder for temporary stores (local disk)")
    args = parser.parse_args(argv)
    if args.keys is None:
        args.keys = QUICK_KEYS if args.quick else FULL_KEYS
    args.streams = [int(s) for s in args.streams.split(",") if s]
    if args.keys <= 0 or not args.streams or min(args.streams) < 2:
        parser.error("--keys must be positive and every N at least 2")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _args(argv)
    flink = () if args.no_flink or args.quick else tuple(b for b in args.flink_backends.split(",") if b)
    ways = tuple(w for w in args.ways.split(",") if w)
    reporter = Reporter(BENCH)
    by_n: dict[int, dict[str, dict]] = {}
    for n in args.streams:
        log(f"N = {n} streams of {args.keys:,} customers")
        by_n[n] = {r["way"]: r for r in measure(n, args.keys, seed=args.seed, ways=ways, flink=flink,
                                                tmpdir=args.tmpdir)}
    top = max(args.streams)
    for n, rows in by_n.items():
        for r in rows.values():
            log("  figures: " + json.dumps({k: v for k, v in r.items() if k != "rows"}))
        base = f"Customer 360, {n} streams x {args.keys:,} keys"
        peers = [(w, rows[w]) for w in ("cascade", *(f"flink_{b}" for b in flink)) if w in rows]
        for ours in ("partial", "delta"):
            if ours not in rows:
                continue
            o = rows[ours]
            for peer_way, p in peers:
                if p.get("error") or p.get("rows_per_s") is None:
                    continue
                label = {"cascade": "stateful cascade of symmetric hash joins (ours)",
                         "flink_rocksdb": "PyFlink mini-cluster regular joins, RocksDB state",
                         "flink_hashmap": "PyFlink mini-cluster regular joins, heap state"}[peer_way]
                goal = n == top
                reporter.add(Result(BENCH, f"{base}, {ours}: peak RssAnon", "bytes", o["peak_rss_bytes"], label,
                                    p["peak_rss_bytes"], False, args.keys, 1,
                                    targets=(Target("ratio", ">=", 5, "<= 1/5 of the peer's"),) if goal else ()))
                reporter.add(Result(BENCH, f"{base}, {ours}: result rows/s", "rows_per_s", o["rows_per_s"], label,
                                    p["rows_per_s"], True, args.keys, 1,
                                    targets=(Target("ratio", ">=", 2, ">= 2x the peer's"),) if goal else ()))
                if p.get("state_bytes"):
                    reporter.add(Result(BENCH, f"{base}, {ours}: operator state", "bytes", o["state_bytes"], label,
                                        p["state_bytes"], False, args.keys, 1))
                if p.get("restart_s") is not None:
                    reporter.add(Result(BENCH, f"{base}, {ours}: restart (new process, open + run_once)", "seconds",
                                        o["restart_s"], label, p["restart_s"], False, args.keys, 1))
    low = min(args.streams)
    if top != low:  # flat in N: ours at the largest N against ours at the smallest, beside the cascade's growth
        for ours in ("partial", "delta"):
            for key in ("state_bytes", "restart_s"):
                if ours in by_n[top] and "cascade" in by_n[top]:
                    grow = by_n[top][ours][key] / by_n[low][ours][key]
                    peer_grow = by_n[top]["cascade"][key] / by_n[low]["cascade"][key]
                    reporter.add(Result(BENCH, f"Customer 360, {args.keys:,} keys: {ours} {key} at N={top} / N={low}",
                                        "factor", grow, "stateful cascade (ours), same factor", peer_grow, False,
                                        args.keys, 1,
                                        targets=(Target("value", "<=", top / low,
                                                        f"<= {top // low} (no per-key term: inputs only)"),)))
    for n, rows in by_n.items():
        for r in rows.values():
            if r.get("identical") is False:
                log(f"NOT IDENTICAL: N={n} {r['way']}")
    reporter.finish()


if __name__ == "__main__":
    main()
