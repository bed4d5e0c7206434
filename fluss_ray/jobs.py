"""A job's shards on Ray: one long-running actor per shard (restarted by Ray, resuming from its checkpoint).

A job is given as a *factory*: a picklable function ``make(connection, shard) -> Job`` that builds the job on
the worker from its own connection (tables, expressions and caches are never shipped). ``shard`` is a
:class:`fluss_lake.jobs.Shard` (or ``None`` for a job run as one shard); the factory passes it to the job
(``DeltaJoin(..., shard=shard)``). Each shard has its own checkpoint in the store, so an actor that dies
(killed, its node lost) is started again by Ray with the same arguments and continues where the shard's last
checkpoint left off: the step it was in is repeated, which every job makes harmless.

Examples
--------
>>> def make(connection, shard):   # doctest: +SKIP
...     view = connection.get_table("shop.view")
...     return DeltaJoin(view, {"o": connection.get_table("shop.orders"),
...                             "c": connection.get_table("shop.customers")}, [Join("o", "c", ["cid"])], shard=shard)
>>> job = start_job(make, store=Store("s3://bucket/live", {...}), shards=2)   # doctest: +SKIP
>>> [s.lag for s in job.status()]; job.stop()                                # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray

from fluss_lake._utils.arguments import check_callable, check_int, check_number, check_seconds
from fluss_lake.connection import Connection
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError, JobStateError
from fluss_lake.jobs import Job, JobReport, Shard
from fluss_lake.kv import memtable_budget
from fluss_ray.store import Store

__all__ = [
    "JobFactory",
    "RayJob",
    "ShardStatus",
    "fit_memtable_budget",
    "run_job_once",
    "shard_of",
    "shard_share",
    "start_job",
    "worker_options",
    "writes_own_buckets",
]

#: ``make(connection, shard) -> Job``: builds one shard of the job on a worker (``shard`` is None for one shard).
JobFactory = Callable[[Connection, Shard | None], Job]


def shard_of(index: int, count: int) -> Shard | None:
    """The :class:`fluss_lake.jobs.Shard` ``index`` of ``count`` (``None`` when the job runs as one shard)."""
    return None if count == 1 else Shard(index, count)


@dataclass(frozen=True)
class ShardStatus:
    """Where one shard of a job stands: its offsets, lag and throughput, on which node, whether restarted.

    ``offsets`` are the next offsets to consume per input (as :meth:`Job.offsets`), ``lag`` the records not yet
    consumed per input, ``rows_per_s`` the changelog records read per second of work since the actor (re)started,
    ``restarted`` whether Ray started this shard's actor again, ``error`` the error that stopped it (if any).
    """

    shard: int
    shards: int
    job: str
    running: bool
    checkpoint: int
    offsets: Mapping[str, Mapping[Any, int]] = field(default_factory=dict)
    lag: Mapping[str, int] = field(default_factory=dict)
    records_read: int = 0
    rows_per_s: float = 0.0
    steps: int = 0
    restarted: bool = False
    node_id: str = ""
    pid: int = 0
    error: str | None = None

    @property
    def total_lag(self) -> int:
        """Records not yet consumed over all inputs."""
        return sum(self.lag.values())


def shard_share(job: Job) -> float:
    """The fraction of its inputs' buckets a job (shard) owns, weighted by their bucket counts (1 unsharded).

    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import Aggregation, Shard
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"k": "INT", "v": "BIGINT"}, bucket_num=3, bucket_keys=["k"])
    >>> _ = conn.create_table("d.tot", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"],
    ...                       options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
    >>> def agg(shard):
    ...     return Aggregation(conn.get_table("d.ev"), conn.get_table("d.tot"), group_by=["k"],
    ...                        aggregates={"v": ("sum", "v")}, shard=shard)
    >>> shard_share(agg(Shard(0, 2))), shard_share(agg(Shard(1, 2))), shard_share(agg(None))
    (0.6666666666666666, 0.3333333333333333, 1.0)
    """
    shard = job.shard
    if shard is None:
        return 1.0
    owned = total = 0.0
    for table in job.inputs.values():
        total += table.bucket_num
        owned += table.bucket_num * shard.share(None if table.is_partitioned else table.bucket_num)
    return owned / total if total else 1.0


def writes_own_buckets(job: Job) -> bool:
    """Whether a shard writes only the result buckets matching the input buckets it owns: a co-partitioned delta
    join (``DeltaJoin.co_partitioned``) into an unpartitioned result with as many buckets, the same bucketing and
    bucket keys taken from the inputs' bucket keys (``orders`` and ``customers`` bucketed by ``cid`` into a result
    bucketed by ``cid``). Its memtables are then those of its own buckets only."""
    from fluss_lake import options as opt
    from fluss_lake.jobs import DeltaJoin

    if job.shard is None or not isinstance(job, DeltaJoin) or not job.co_partitioned:
        return False
    plan, result = job.plan, job.result.info
    first = next(iter(plan.inputs.values())).info
    if (
        result.partition_keys
        or result.bucket_num != first.bucket_num
        or result.options.get(opt.DATALAKE_FORMAT) != first.options.get(opt.DATALAKE_FORMAT)
    ):
        return False
    alias = plan.aliases[0]
    keys = list(first.bucket_keys)
    if len(result.bucket_keys) != len(keys):
        return False
    for column, key in zip(result.bucket_keys, keys, strict=True):
        source, wanted = plan.key_sources.get(column), f"{alias}.{key}"
        if source is None or (source != wanted and source not in plan.classes.get(wanted, [])):
            return False
        if job.result.schema.polars_schema[column] != plan.inputs[alias].schema.polars_schema[key]:
            return False
    return True


def fit_memtable_budget(job: Job, memtable_bytes: int | None = None) -> int:
    """Set this process's memtable budget for a worker that runs `job` (one shard) and nothing else; the limit set.

    `memtable_bytes` None: when the shard writes only its own result buckets (:func:`writes_own_buckets`), the
    current limit (16 MiB by default) scaled to its share of the buckets (:func:`shard_share`,
    :func:`fluss_lake.kv.memtable_budget.for_share`, at least 4 MiB): a shard of two holds 8 MiB for its two
    memtables, as much per memtable as the whole job in one process. Otherwise the shard writes every result
    bucket, as the whole job does, and the limit stays (halving it there flushed twice as often: about 9 % more
    CPU for 3 % less memory). A number: exactly that many bytes.
    """
    if memtable_bytes is not None:
        limit = check_int("memtable_bytes", memtable_bytes, minimum=1, hint="bytes of memtables per worker process")
    elif writes_own_buckets(job):
        share = shard_share(job)
        limit = memtable_budget.for_share(share) if share > 0 else memtable_budget.MIN_SHARE_LIMIT_BYTES
    else:
        limit = memtable_budget.limit_bytes()
    memtable_budget.set_limit_bytes(limit)
    return limit


class ShardRunner:
    """The body of a shard's actor: builds the job and runs it in a thread until :meth:`stop`.

    Used by :func:`start_job` as a Ray actor (``own_process=True``: the process's memtable budget is sized to the
    shard, :func:`fit_memtable_budget`); it runs in a plain process too, several in one (``fluss-lake jobs run``
    without ``--ray``), leaving the process's budget as it is.
    """

    def __init__(
        self,
        store: Store,
        make: JobFactory,
        index: int,
        count: int,
        *,
        poll_interval: float,
        own_process: bool = False,
        memtable_bytes: int | None = None,
    ) -> None:
        self._connection = store.connect()
        self._job = make(self._connection, shard_of(index, count))
        if not isinstance(self._job, Job):
            raise InvalidConfigError(f"the job factory returned {self._job!r}: it must return a fluss_lake Job")
        if own_process:  # an actor: its process runs this shard only (runners in one process keep its budget)
            fit_memtable_budget(self._job, memtable_bytes)
        self._index, self._count = index, count
        self._poll = poll_interval
        self._restarted = self._was_restarted()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._report = JobReport()
        self._busy = 0.0
        self._error: str | None = None
        self._last = self._snapshot(running=True)
        self._thread = threading.Thread(target=self._loop, name=f"fluss-lake-shard-{index}", daemon=True)
        self._thread.start()

    @staticmethod
    def _was_restarted() -> bool:
        """Whether Ray started this actor again (after its process or node died)."""
        try:
            import ray
        except ImportError:  # pragma: no cover - a plain process
            return False
        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
        return False

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                step = self._job.run_once(max_steps=1)
            except FlussLakeError as exc:
                if exc.retriable:  # storage briefly away, a conflict: the next step repeats from the checkpoint
                    self._stop.wait(self._poll)
                    continue
                with self._lock:
                    self._error = f"{type(exc).__name__}: {exc}"
                break
            except Exception as exc:  # noqa: BLE001 - reported through status(); the actor stays for it
                with self._lock:
                    self._error = f"{type(exc).__name__}: {exc}"
                break
            with self._lock:
                self._report = self._report.combine(step)
                if step.steps:
                    self._busy += time.perf_counter() - started
            snapshot = self._snapshot(running=True)
            with self._lock:
                self._last = snapshot
            if step.steps == 0:
                self._stop.wait(self._poll)
        final = self._snapshot(running=False)
        with self._lock:
            self._last = final

    def _snapshot(self, *, running: bool) -> ShardStatus:
        job = self._job
        try:
            lag = job.lag()
        except FlussLakeError:  # storage away for a moment: the offsets still say where the shard is
            lag = dict(self._last.lag) if hasattr(self, "_last") else {}
        node = ""
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except ImportError:  # pragma: no cover
            pass
        report, busy = self._report, self._busy
        return ShardStatus(
            shard=self._index,
            shards=self._count,
            job=job.name,
            running=running,
            checkpoint=job.checkpoint.number,
            offsets={a: job.offsets(a) for a in job.inputs},
            lag=lag,
            records_read=report.records_read,
            rows_per_s=report.records_read / busy if busy > 0 else 0.0,
            steps=report.steps,
            restarted=self._restarted,
            node_id=node,
            pid=os.getpid(),
            error=self._error,
        )

    def status(self) -> ShardStatus:
        """The shard's status after its last step."""
        with self._lock:
            return self._last

    def stop(self, timeout_s: float = 60.0) -> ShardStatus:
        """Finish the current step, commit its checkpoint, stop; the final status."""
        self._stop.set()
        self._thread.join(timeout_s)
        with self._lock:
            return self._last


@dataclass
class RayJob:
    """The shards of a job running as Ray actors (from :func:`start_job`): their status, waiting, stopping."""

    name: str
    actors: list[Any]
    shards: int

    def status(self, *, timeout_s: float = 60.0) -> list[ShardStatus]:
        """One status per shard (an actor being restarted answers once it is up again)."""
        timeout_s = check_seconds("timeout_s", timeout_s)
        return list(ray.get([a.status.remote() for a in self.actors], timeout=timeout_s))

    def wait_caught_up(self, *, timeout_s: float = 120.0, poll_s: float = 0.2) -> list[ShardStatus]:
        """Wait until every shard has consumed everything its inputs hold now; raise if a shard failed."""
        timeout_s = check_seconds("timeout_s", timeout_s)
        poll_s = check_seconds("poll_s", poll_s)
        deadline = time.monotonic() + timeout_s
        while True:
            statuses = self.status(timeout_s=max(deadline - time.monotonic(), 1.0))
            failed = [s for s in statuses if s.error]
            if failed:
                raise JobStateError(
                    f"job {self.name!r}: shard {failed[0].shard} of {self.shards} stopped with "
                    f"{failed[0].error}; fix the cause and start the job again (it resumes from its checkpoint)"
                )
            if all(s.total_lag == 0 for s in statuses):
                return statuses
            if time.monotonic() > deadline:
                raise JobStateError(
                    f"job {self.name!r} did not catch up within {timeout_s} s (lag per shard: "
                    f"{[s.total_lag for s in statuses]}); give it more time or more shards"
                )
            time.sleep(poll_s)

    def stop(self, *, timeout_s: float = 60.0) -> list[ShardStatus]:
        """Stop every shard cleanly (each finishes and checkpoints its step), then end the actors."""
        timeout_s = check_seconds("timeout_s", timeout_s)
        final = list(ray.get([a.stop.remote(timeout_s) for a in self.actors], timeout=timeout_s + 30))
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        return final


def check_cpus(num_cpus: float) -> float:
    """What a Ray actor or task reserves: a number of CPUs >= 0 (fractions allowed, as Ray takes them)."""
    number = check_number("num_cpus", num_cpus, what="a number of CPUs", positive=False, hint="Ray's num_cpus")
    assert number is not None
    return number


def worker_options(num_cpus: float, ray_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ray ``.options()`` for a shard's actor (:func:`start_job`) reserving `num_cpus`, with `ray_options` on top.

    Ray sizes a worker's ``OMP_NUM_THREADS`` (hence Arrow's thread pool) to its CPUs; Polars would still start a
    thread per core of the node, so `n` one-CPU shards on a node would run `n` pools as wide as the node. The
    worker's ``POLARS_MAX_THREADS`` is set the same way (``max(1, floor(num_cpus))``, Ray's rule) unless the
    caller's ``runtime_env`` sets it; other ``env_vars`` of the caller's ``runtime_env`` are kept, and Ray merges
    them with the job's own. A runtime_env of its own gives the actor a worker process of its own (Ray starts one:
    about a second, once per actor); tasks (:func:`run_job_once`, ``tier_on_ray``) run in Ray's shared workers
    instead, so they start at once: pass ``ray_options=worker_options(n)`` to size theirs too.

    >>> worker_options(2)["runtime_env"]
    {'env_vars': {'POLARS_MAX_THREADS': '2'}}
    >>> worker_options(0.25, {"runtime_env": {"env_vars": {"X": "1"}}})["runtime_env"]["env_vars"]
    {'POLARS_MAX_THREADS': '1', 'X': '1'}
    """
    options = dict(ray_options or {})
    num_cpus = check_cpus(options.pop("num_cpus", num_cpus))
    runtime_env = dict(options.get("runtime_env") or {})
    env_vars = {"POLARS_MAX_THREADS": str(max(1, math.floor(num_cpus))), **dict(runtime_env.get("env_vars") or {})}
    return {"num_cpus": num_cpus, **options, "runtime_env": {**runtime_env, "env_vars": env_vars}}


def _checked(make: JobFactory, store: Store, shards: int) -> int:
    check_callable("make", make, hint="a function (connection, shard) -> Job")
    if not isinstance(store, Store):
        raise InvalidConfigError(f"store={store!r}: give a fluss_ray.Store (the URL and options workers connect to)")
    shards = check_int("shards", shards, minimum=1, hint="actors the job's buckets are spread over")
    return shards


def start_job(
    make: JobFactory,
    *,
    store: Store,
    shards: int = 1,
    name: str | None = None,
    max_restarts: int = -1,
    poll_interval: float = 0.5,
    num_cpus: float = 1.0,
    ray_options: Mapping[str, Any] | None = None,
    memtable_bytes: int | None = None,
) -> RayJob:
    """Run the job's `shards` as Ray actors on the connected cluster (``ray.init(address=...)`` first).

    Each actor builds its shard with ``make(connection, shard)`` and processes its inputs continuously (polling
    every `poll_interval` seconds when idle). Ray restarts a dead actor up to `max_restarts` times (``-1``:
    always); it resumes from the shard's checkpoint. `num_cpus` is what each actor reserves, and the width of
    its Arrow and Polars thread pools (:func:`worker_options`), so give a shard the cores it should use.
    `ray_options` are passed to ``.options()`` of the actors (``resources``, ``scheduling_strategy``...; shards
    are spread over the nodes by default). `memtable_bytes` is each actor's process-wide memtable budget; None
    scales the default (16 MiB) to the shard's share when it writes only its own result buckets
    (:func:`fit_memtable_budget`).
    """

    shards = _checked(make, store, shards)
    memtable_bytes = check_int("memtable_bytes", memtable_bytes, minimum=1, optional=True)
    max_restarts = check_int("max_restarts", max_restarts, minimum=-1, hint="-1 restarts a shard's actor always")
    poll_interval = check_seconds("poll_interval", poll_interval)
    num_cpus = check_cpus(num_cpus)
    if not ray.is_initialized():
        raise InvalidConfigError("start_job runs on a Ray cluster: call ray.init(address=...) first")
    options = worker_options(
        num_cpus,
        {
            "max_restarts": max_restarts,
            "max_task_retries": -1,  # status()/stop() wait for a restarting actor instead of failing
            "scheduling_strategy": "SPREAD",
            **dict(ray_options or {}),
        },
    )
    actor_class = ray.remote(ShardRunner)
    actors = [
        actor_class.options(**options).remote(
            store, make, i, shards, poll_interval=poll_interval, own_process=True, memtable_bytes=memtable_bytes
        )
        for i in range(shards)
    ]
    job = RayJob(name or "", actors, shards)
    first = job.status()  # the actors are up (and the factory worked) before this returns
    job.name = name or first[0].job
    return job


def _run_shard_once(
    store: Store, make: JobFactory, index: int, count: int, max_steps: int | None, memtable_bytes: int | None
) -> JobReport:
    job = make(store.connect(), shard_of(index, count))
    if not isinstance(job, Job):
        raise InvalidConfigError(f"the job factory returned {job!r}: it must return a fluss_lake Job")
    before = memtable_budget.limit_bytes()  # a shared worker: its budget is given back after the task
    fit_memtable_budget(job, memtable_bytes)
    try:
        return job.run_once(max_steps=max_steps)
    finally:
        memtable_budget.set_limit_bytes(before)


def run_job_once(
    make: JobFactory,
    *,
    store: Store,
    shards: int = 1,
    max_steps: int | None = None,
    max_retries: int = 3,
    num_cpus: float = 1.0,
    ray_options: Mapping[str, Any] | None = None,
    memtable_bytes: int | None = None,
) -> list[JobReport]:
    """Process what the job's inputs hold now, each shard as one Ray task; one report per shard.

    A task that dies is retried (`max_retries`) and repeats from the shard's checkpoint. `memtable_bytes`: the
    memtable budget of a task's worker while it runs (None: scaled to the shard's share, as :func:`start_job`).
    """

    shards = _checked(make, store, shards)
    memtable_bytes = check_int("memtable_bytes", memtable_bytes, minimum=1, optional=True)
    max_retries = check_int("max_retries", max_retries, minimum=0, hint="times a shard's task is run again")
    max_steps = check_int("max_steps", max_steps, minimum=0, optional=True)
    num_cpus = check_cpus(num_cpus)
    if not ray.is_initialized():
        raise InvalidConfigError("run_job_once runs on a Ray cluster: call ray.init(address=...) first")
    task = ray.remote(_run_shard_once).options(
        **{"max_retries": max_retries, "num_cpus": num_cpus, "scheduling_strategy": "SPREAD", **dict(ray_options or {})}
    )
    return list(ray.get([task.remote(store, make, i, shards, max_steps, memtable_bytes) for i in range(shards)]))


def shard_statuses(statuses: Sequence[ShardStatus]) -> list[dict[str, Any]]:
    """Statuses as JSON-friendly dicts (the CLI and Dagster metadata)."""
    return [
        {
            "shard": f"{s.shard}/{s.shards}",
            "checkpoint": s.checkpoint,
            "lag": dict(s.lag),
            "records_read": s.records_read,
            "rows_per_s": round(s.rows_per_s, 1),
            "restarted": s.restarted,
            "offsets": {a: {str(k): v for k, v in o.items()} for a, o in s.offsets.items()},
            "error": s.error,
        }
        for s in statuses
    ]
