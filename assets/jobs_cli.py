"""``fluss-lake jobs run JOB``: one of the demo's zero-state jobs, sharded, in this process or on a Ray cluster.

``--shards N`` splits the job into N :class:`~fluss_lake.jobs.Shard` (each its own checkpoint); ``--ray ADDRESS``
runs each shard as a Ray actor (restarted by Ray if it dies, resuming from its checkpoint) instead of a thread of
this process. ``--once`` processes what the inputs hold now and exits (shards as Ray tasks with ``--ray``);
otherwise the job runs until Ctrl-C (or ``--duration`` seconds), printing every shard's status as a JSON line
every ``--status-every`` seconds, and stops cleanly (each shard finishes and checkpoints its step).

The store is the home's (``--home``, ``$FLUSS_LAKE_HOME``, ``./.fluss-lake``) or ``$FLUSS_LAKE_URL`` with
``$FLUSS_LAKE_STORAGE_OPTIONS``: on a cluster, a store every node reaches (S3). See ``docs/SCALE-OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError

__all__ = ["DEMO_JOBS", "main", "register"]

#: The demo's jobs (assets.jobs), by the name of their result table.
DEMO_JOBS = ("customer_spend", "fraud_risk", "orders_enriched")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``jobs`` sub-command (``jobs run``)."""
    jobs = subparsers.add_parser(
        "jobs",
        help="run a demo job continuously or once, in shards, here or on a Ray cluster (--ray ADDRESS)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    run = sub.add_parser("run", help="run a job (Ctrl-C stops it cleanly)", description=__doc__)
    run.add_argument("job", choices=DEMO_JOBS, help="the demo job, by its result table")
    run.add_argument("--home", default=None, help="home folder (default: $FLUSS_LAKE_HOME or ./.fluss-lake)")
    run.add_argument("--shards", type=int, default=1, help="shards the job runs as (default 1)")
    run.add_argument("--ray", default=None, metavar="ADDRESS", help="Ray cluster address (ray://host:10001, host:6379)")
    run.add_argument("--once", action="store_true", help="process what the inputs hold now, then exit")
    run.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    run.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines (default 5)")
    run.set_defaults(func=_run)


def _store(home: str | None) -> Any:
    """The store of the home (or ``$FLUSS_LAKE_URL``), as workers of a cluster open it."""
    import fluss_ray
    from assets.resources import LiveStore
    from assets.runs import _home_environment
    from tiering.home import Home

    with _home_environment(Home.resolve(home)):
        live = LiveStore()
        return fluss_ray.Store(live.resolved_url(), live.resolved_storage_options())


def _factory(job: str) -> Any:
    from assets import jobs

    return {
        "orders_enriched": jobs.orders_enriched_job,
        "fraud_risk": jobs.fraud_risk_job,
        "customer_spend": jobs.customer_spend_job,
    }[job]


def _say(value: Any) -> None:
    print(json.dumps(value, default=str), flush=True)


def _run(args: argparse.Namespace) -> int:
    try:
        return run_job(
            args.job,
            home=args.home,
            shards=args.shards,
            ray_address=args.ray,
            once=args.once,
            duration=args.duration,
            status_every=args.status_every,
        )
    except FlussLakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run_job(
    job: str,
    *,
    home: str | None = None,
    shards: int = 1,
    ray_address: str | None = None,
    once: bool = False,
    duration: float | None = None,
    status_every: float = 5.0,
) -> int:
    """What ``fluss-lake jobs run`` does; returns the exit code (0, or 1 when a shard failed)."""
    import fluss_ray
    from fluss_ray.jobs import ShardRunner, shard_statuses

    if job not in DEMO_JOBS:
        raise InvalidConfigError(f"job {job!r}: choose one of {', '.join(DEMO_JOBS)}")
    shards = check_int("shards", shards, minimum=1, hint="shards the job runs as")
    duration = check_seconds("duration", duration, optional=True)
    status_every = check_seconds("status_every", status_every)
    store, make = _store(home), _factory(job)
    if ray_address is not None:
        import ray

        if not ray.is_initialized():
            ray.init(address=ray_address, logging_level=logging.ERROR)
    if once:
        if ray_address is not None:
            reports = fluss_ray.run_job_once(make, store=store, shards=shards)
        else:
            from fluss_ray.jobs import shard_of

            connection = store.connect()
            reports = [make(connection, shard_of(i, shards)).run_once() for i in range(shards)]
        for index, report in enumerate(reports):
            _say(
                {
                    "shard": f"{index}/{shards}",
                    "steps": report.steps,
                    "records_read": report.records_read,
                    "rows_upserted": report.rows_upserted,
                    "rows_appended": report.rows_appended,
                }
            )
        return 0
    status: Callable[[], list[fluss_ray.ShardStatus]]
    stop: Callable[[], list[fluss_ray.ShardStatus]]
    if ray_address is not None:
        running = fluss_ray.start_job(make, store=store, shards=shards)
        status, stop = running.status, running.stop
    else:
        runners = [ShardRunner(store, make, i, shards, poll_interval=0.5) for i in range(shards)]

        def status() -> list[fluss_ray.ShardStatus]:
            return [r.status() for r in runners]

        def stop() -> list[fluss_ray.ShardStatus]:
            return [r.stop() for r in runners]

    deadline = None if duration is None else time.monotonic() + duration
    idle = threading.Event()
    try:
        while deadline is None or time.monotonic() < deadline:
            statuses = status()
            _say(shard_statuses(statuses))
            if any(s.error for s in statuses):
                break
            idle.wait(status_every if deadline is None else max(min(status_every, deadline - time.monotonic()), 0))
    except KeyboardInterrupt:
        pass
    final = stop()
    _say({"stopped": shard_statuses(final)})
    return 1 if any(s.error for s in final) else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m assets.jobs_cli run JOB ...``: the verb without the console script."""
    parser = argparse.ArgumentParser(prog="fluss-lake")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["jobs", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
