"""Scale-out: the delta join of ``bench.delta_join`` as one shard in one process, and as 1 and 2 shards on Ray.

Inputs: ``orders`` (primary key ``(cid, oid)``, bucket key ``cid``) and ``customers`` (primary key ``cid``),
``--rows`` rows each, 4 buckets; ``orders LEFT JOIN customers ON cid`` into a 6-column result table (primary key
``(cid, oid)``, bucketed by ``cid`` like its inputs, as ``docs/SCALE-OUT.md`` recommends for a sharded join;
``--result-bucket-key primary-key`` buckets it by its primary key, the layout of rounds 1-3), from an empty
checkpoint over the whole changelog, on local disk and on a moto S3 server (127.0.0.1, in this process).

Contenders, each timed from the start of its work to the last shard's end:

- **one process** (the peer): a fresh interpreter runs the unsharded job (``run_once``);
- **Ray, 1 shard**: one Ray actor (a new worker process, as a shard of ``fluss_ray.start_job`` is) runs it;
- **Ray, 2 shards**: two actors at once, each reading the buckets of its :class:`~fluss_lake.jobs.Shard`
  (its own checkpoint).

The Ray cluster is a local one on this machine (``ray.init(num_cpus=2)``, started once, untimed); one shard's actor
asks for both CPUs, each of two shards for one, with the options ``fluss_ray`` gives its actors
(``fluss_ray.jobs.worker_options``: Ray sets ``OMP_NUM_THREADS``, hence Arrow's thread pool, and fluss_ray
``POLARS_MAX_THREADS`` to an actor's CPUs), and sized as a shard's actor sizes its process
(``fluss_ray.jobs.fit_memtable_budget``: the memtable budget scaled to the buckets the shard owns). Each actor
imports the modules and collects garbage before the clock starts (as the plain process has started its interpreter
and collects before its clock); the Ray figure is then the driver's wall time from submitting the shards to having
every shard's result (the plain process's: its ``run_once``). The plain process imports the core only (no Ray).
Figures: result rows/s (result rows / those seconds) and the peak anonymous memory (``RssAnon``) of each worker
process during its shard (the plain process's likewise). The log line of each run also says how much CPU other
processes on the machine used meanwhile: on a shared 2-core machine two shards need both cores, so other work slows
them most. Before the joins, the commit rate into one bucket (one writer, 1 and 10,000 rows per commit) on each
store: the capacity plan's figure (``docs/SCALE-OUT.md``).
Contenders take turns (each repeat starts with another), and the disk is synced before each, so none pays for the
write-back of another's files.
Goals (the issue): 2 shards >= 1.6x one shard's rows/s; Ray's overhead for one shard <= 10 % of the plain
process (ratio >= 0.9); memory per shard falls with the shard count.

Run ``python -m bench.scale_out [--quick] [--rows N] [--repeats K] [--no-s3]``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import time
import uuid
from typing import Any

import numpy as np
import polars as pl

import fluss_lake as fl
from bench._common import Reporter, Result, RssSampler, Target, bench_args, fmt_size, log, median, run_child

BENCH = "scale_out"
FULL_ROWS = 1_000_000
QUICK_ROWS = 20_000
WRITE_ROWS = 100_000
BUCKETS = 4
CPUS = 2  # the local Ray cluster's CPUs: this machine's cores


def _connect(store: dict[str, Any]) -> fl.Connection:
    local_dir = None
    if "://" in store["url"]:
        import tempfile

        local_dir = tempfile.mkdtemp(prefix="fluss-bench-scale-")
    return fl.connect(store["url"], storage_options=store.get("options") or None, local_dir=local_dir)


def _setup(store: dict[str, Any], rows: int, seed: int = 7) -> None:
    """Create and fill the inputs exactly as bench.delta_join does, in the store (local folder or S3)."""
    from bench.delta_join import fill_inputs

    fill_inputs(_connect(store), rows, seed, BUCKETS)


def _job(conn: fl.Connection, result: str, shard: Any, bucket_keys: list[str] | None = None) -> Any:
    """The job; its result table bucketed by `bucket_keys` (None: its primary key, as in rounds 1-3)."""
    from fluss_lake.jobs import DeltaJoin, Join

    conn.create_table(f"bench.{result}", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "DOUBLE",
                                                 "note": "STRING", "name": "STRING", "tier": "INT"},
                      primary_key=["cid", "oid"], bucket_num=BUCKETS, ignore_if_exists=True,
                      **({"bucket_keys": bucket_keys} if bucket_keys else {}))
    extra = {} if shard is None else {"shard": shard}
    return DeltaJoin(conn.get_table(f"bench.{result}"), {"o": conn.get_table("bench.orders"),
                                                         "c": conn.get_table("bench.customers")},
                     [Join("o", "c", ["cid"], how="left")], name=result.replace("_", "-"), **extra)


def _shard_run(store: dict[str, Any], result: str, index: int, count: int, root: int, *,
               collect: bool = True, worker: bool = False) -> dict[str, Any]:
    """One shard's run in this process: seconds of its run_once, the peak RssAnon while it ran, and the CPU
    seconds other processes than the bench (process `root` and its descendants) used meanwhile.

    `collect`: run the garbage collector first (untimed here; a Ray worker did it while warming up, outside the
    driver's clock). `worker`: size the process for its shard as a shard's actor of ``fluss_ray.start_job`` does
    (``fit_memtable_budget``: the memtable budget scaled to the buckets it owns). Imports only the core unless
    `worker`: the plain process never loads Ray (~70 MiB of RssAnon)."""
    from fluss_lake.jobs import Shard
    from fluss_lake.kv import compactor, memtable_budget

    if collect:
        gc.collect()
    conn = _connect(store)
    others = _others_cpu(root)
    with RssSampler() as sampler:
        started = time.perf_counter()
        job = _job(conn, result, None if count == 1 else Shard(index, count), store.get("result_bucket_keys"))
        if worker:
            from fluss_ray.jobs import fit_memtable_budget

            fit_memtable_budget(job)
        report = job.run_once()
        compactor.drain()
        seconds = time.perf_counter() - started
    after = _others_cpu(root)
    others_cpu = sum(seconds - others.get(pid, 0.0) for pid, seconds in after.items())  # new processes: all theirs
    return {"seconds": seconds, "peak_anon": sampler.peak, "others_cpu": others_cpu, "records": report.records_read,
            "upserts": report.rows_upserted, "steps": report.steps, "memtable_limit": memtable_budget.limit_bytes(),
            "pid": os.getpid()}


def child_plain(payload: dict) -> dict:
    """In a fresh interpreter: the unsharded job, as a single process runs it today."""
    return _shard_run(payload["store"], payload["result"], 0, 1, payload["root"])


class ShardWorker:
    """A Ray actor (its own worker process) that runs one shard of the job: the Ray side of each contender."""

    def warm(self) -> int:
        """Untimed, like the plain process's interpreter start: import what a shard uses, collect garbage."""
        import fluss_lake.jobs  # noqa: F401
        import fluss_ray.jobs  # noqa: F401 - what a shard's actor of fluss_ray.start_job imports

        gc.collect()
        return os.getpid()

    def run(self, store: dict[str, Any], result: str, index: int, count: int, root: int) -> dict[str, Any]:
        return _shard_run(store, result, index, count, root, collect=False, worker=True)


def _ray_run(store: dict[str, Any], result: str, shards: int) -> dict[str, Any]:
    """Fresh actors (new worker processes, so each peak is this run's), warmed up; then the shards at once."""
    import ray

    from fluss_ray.jobs import worker_options

    cpus = max(CPUS // shards, 1)  # every contender gets the whole machine
    # the options fluss_ray gives a shard's actor: its Arrow and Polars pools as wide as its CPUs
    actors = [ray.remote(**worker_options(cpus))(ShardWorker).remote() for _ in range(shards)]
    try:
        ray.get([a.warm.remote() for a in actors])
        started = time.perf_counter()
        out = ray.get([a.run.remote(store, result, i, shards, os.getpid()) for i, a in enumerate(actors)])
        seconds = time.perf_counter() - started
    finally:
        for actor in actors:
            ray.kill(actor)
    return {"seconds": seconds, "peak_anon": max(o["peak_anon"] for o in out),
            "others_cpu": max(o["others_cpu"] for o in out), "shards": out}


def _others_cpu(root: int) -> dict[int, float]:
    """CPU seconds used so far by each process that is not the bench (process `root` and its descendants): other
    work on the machine, which the contenders share the cores with (a process that ends between two readings is
    not counted)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parent.get(pid, 0)
        return False

    return {pid: seconds for pid, seconds in used.items() if not ours(pid)}


def _result_rows(store: dict[str, Any], result: str) -> int:
    return _connect(store).get_table(f"bench.{result}").to_polars(columns=["cid"]).height


def _measure(store: dict[str, Any], rows: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {k: {"rows_per_s": [], "peak_anon": []} for k in ("plain", "ray1", "ray2")}
    kinds = ["ray1", "ray2", "plain"]
    for r in range(repeats):
        # each repeat starts with another contender (on this VM the first run after a pause is slower), and each
        # contender starts with the previous one's result files on disk (their write-back is not its cost)
        for kind in kinds[r % 3 :] + kinds[: r % 3]:
            os.sync()
            result = f"{kind}_view_{r}_{uuid.uuid4().hex[:6]}"
            if kind == "plain":
                run = run_child(BENCH, "child_plain", {"store": store, "result": result, "root": os.getpid()})
            else:
                run = _ray_run(store, result, 1 if kind == "ray1" else 2)
            got = _result_rows(store, result)
            assert got == rows, (kind, got, rows)
            out[kind]["rows_per_s"].append(got / run["seconds"])
            out[kind]["peak_anon"].append(float(run["peak_anon"]))
            per = ", ".join(f"{s['seconds']:.2f} s / {fmt_size(s['peak_anon'])} / {s.get('steps', '?')} steps / "
                            f"memtables {fmt_size(s.get('memtable_limit', 0))}" for s in run.get("shards", [run]))
            log(f"  {kind} r{r}: {run['seconds']:.2f} s wall, {got / run['seconds']:,.0f} result rows/s; "
                f"per shard: {per}; other processes meanwhile: {run['others_cpu']:.1f} CPU s")
    return out


def _commit_rate(store: dict[str, Any], rows_per_commit: int, seconds: float = 5.0) -> dict[str, float]:
    """Commits per second into one bucket of a primary-key table (one writer, `rows_per_commit` rows each)."""
    conn = _connect(store)
    conn.create_database("rate", ignore_if_exists=True)
    name = f"rate.t_{uuid.uuid4().hex[:6]}"
    conn.create_table(name, schema={"k": "BIGINT", "v": "DOUBLE"}, primary_key=["k"], bucket_num=1)
    table = conn.get_table(name)
    rng = np.random.default_rng(1)
    commits, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        keys = rng.integers(0, 1_000_000, rows_per_commit)
        table.upsert(pl.DataFrame({"k": keys, "v": rng.random(rows_per_commit)}))
        commits += 1
    elapsed = time.perf_counter() - started
    return {"commits_per_s": commits / elapsed, "rows_per_s": commits * rows_per_commit / elapsed}


def _start_ray() -> None:
    import ray

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       os.environ.get("PYTHONPATH")]))}
    ray.init(address="local", num_cpus=CPUS, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": env})



def _stores(args: argparse.Namespace) -> list[tuple[str, dict[str, Any], Any]]:
    import tempfile

    out: list[tuple[str, dict[str, Any], Any]] = [("local disk", {"url": tempfile.mkdtemp(prefix="fluss-bench-")},
                                                   None)]
    if not args.no_s3:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                           ("AWS_DEFAULT_REGION", "us-east-1")):
            os.environ.setdefault(key, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing",
                   "client_kwargs": {"region_name": "us-east-1"}}
        out.append(("moto S3", {"url": f"s3://{bucket}/live", "options": options}, server))
    return out


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-s3", action="store_true", help="only local disk (no moto S3 server)")
    parser.add_argument("--result-bucket-key", default="cid",
                        help="bucket the result table by this column (default cid, the join key the inputs are "
                        "bucketed by: each shard then writes only its own result buckets, the layout "
                        "docs/SCALE-OUT.md recommends); 'primary-key': by its primary key (cid, oid), as in rounds "
                        "1-3, where every shard writes every result bucket")
    parser.add_argument("--s3-rows", type=int, default=None,
                        help="rows per side on moto S3 (default: --rows; moto serves every request from one Python "
                        "process, so 1M rows there take minutes per contender)")


def main(argv: list[str] | None = None) -> None:
    args = bench_args(BENCH, default_rows=FULL_ROWS, quick_rows=QUICK_ROWS, default_repeats=3, quick_repeats=1,
                      argv=argv, description=__doc__, extra=_options)
    import ray

    reporter = Reporter(BENCH)
    rates: dict[int, dict[str, dict[str, float]]] = {}
    _start_ray()
    try:
        for where, store, server in _stores(args):
            by_key = args.result_bucket_key not in ("", "primary-key")
            if by_key:
                store["result_bucket_keys"] = [args.result_bucket_key]
            rows = args.s3_rows if where == "moto S3" and args.s3_rows else args.rows
            log(f"setup on {where}: {rows:,} rows per side")
            for per_commit in (1, 10_000):  # the capacity plan's commit figures (docs/SCALE-OUT.md)
                rate = _commit_rate(store, per_commit, seconds=2.0 if args.quick else 5.0)
                rates.setdefault(per_commit, {})[where] = rate
                log(f"  {where}: {rate['commits_per_s']:.1f} commits/s into one bucket at {per_commit:,} rows "
                    f"per commit ({rate['rows_per_s']:,.0f} rows/s)")
            _setup(store, rows)
            m = _measure(store, rows, args.repeats)
            if server is not None:
                server.stop()
            label = f"delta join orders LEFT JOIN customers, {rows:,} rows per side, {where}"
            if by_key:
                label += f", result bucketed by {args.result_bucket_key}"
            plain, ray1, ray2 = (median(m[k]["rows_per_s"]) for k in ("plain", "ray1", "ray2"))
            mem = {k: median(m[k]["peak_anon"]) for k in ("plain", "ray1", "ray2")}
            reporter.add(Result(BENCH, f"{label}: Ray 1 shard, result rows/s", "rows_per_s", ray1,
                                "1 shard in one process", plain, True, rows, args.repeats,
                                targets=(Target("ratio", ">=", 0.9, "Ray overhead <= 10 %"),)))
            reporter.add(Result(BENCH, f"{label}: Ray 2 shards, result rows/s", "rows_per_s", ray2,
                                "1 shard in one process", plain, True, rows, args.repeats,
                                targets=(Target("ratio", ">=", 1.6, ">= 1.6x one shard"),)))
            reporter.add(Result(BENCH, f"{label}: Ray 2 shards, result rows/s", "rows_per_s", ray2,
                                "Ray 1 shard", ray1, True, rows, args.repeats,
                                targets=(Target("ratio", ">=", 1.6, ">= 1.6x one shard"),)))
            reporter.add(Result(BENCH, f"{label}: peak RssAnon per worker, Ray 2 shards", "bytes", mem["ray2"],
                                "Ray 1 shard", mem["ray1"], False, rows, args.repeats,
                                targets=(Target("ratio", ">=", 1.01, "falls with the shard count"),),
                                note=f"one process: {fmt_size(mem['plain'])}"))
        for per_commit, by_store in rates.items():
            if "moto S3" in by_store:
                reporter.add(Result(BENCH, f"commits/s into one bucket, {per_commit:,} rows per commit, moto S3",
                                    "commits_per_s", by_store["moto S3"]["commits_per_s"], "local disk",
                                    by_store["local disk"]["commits_per_s"], True, per_commit, 1))
    finally:
        ray.shutdown()
    reporter.finish()


if __name__ == "__main__":
    main()
