"""Tiering rounds on Ray: one task per lake-enabled table, each committing its round to Iceberg exactly once.

A task opens its own connection and lake catalog and runs :func:`tiering.tier_table`. Exactly once does not
depend on Ray: the offsets a round tiered are committed in the same Iceberg snapshot as its rows, and a round
that loses the commit race (two tasks on one table, a retried task) re-plans from the offsets that won, so a
task run twice adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ray

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError
from fluss_lake.jobs import Shard
from fluss_lake.metadata.table_path import TablePath
from fluss_ray.jobs import check_cpus
from fluss_ray.store import Store
from tiering import Lake, TableTieringReport, tier_table
from tiering.service import lake_tables, raise_first

__all__ = ["tier_on_ray", "tier_table_task"]


def tier_table_task(
    store: Store,
    lake_properties: Mapping[str, str],
    lake_name: str,
    table: str,
    expire_partitions: bool,
    shard: Shard | None,
) -> TableTieringReport:
    """One table's tiering round (of the buckets of `shard`, if given) on a worker: the body of the Ray task."""
    connection = store.connect()
    return tier_table(
        connection.get_table(table),
        Lake(lake_properties, name=lake_name),
        expire_partitions=expire_partitions,
        shard=shard,
    )


def tier_on_ray(
    store: Store,
    lake: Lake,
    *,
    tables: Sequence[str | TablePath] | None = None,
    expire_partitions: bool = False,
    shards: int = 1,
    max_retries: int = 3,
    num_cpus: float = 1.0,
    ray_options: Mapping[str, Any] | None = None,
) -> list[TableTieringReport]:
    """One tiering round on the connected Ray cluster: a task per table (default: every lake-enabled table).

    With `shards` > 1 each table's round is that many tasks, each tiering the buckets of one
    :class:`~fluss_lake.jobs.Shard` (for large tables); each commits its own buckets' rows and offsets.

    The lake must be reachable from every worker (its catalog and warehouse, e.g. a REST or SQL catalog and an
    S3 warehouse). A failing table raises after the others were tiered (the first error, the rest as notes).

    Examples
    --------
    >>> ray.init(address="auto")                                                        # doctest: +SKIP
    >>> reports = tier_on_ray(Store("s3://bucket/live", options), Lake(catalog_properties))  # doctest: +SKIP
    """

    if not isinstance(store, Store):
        raise InvalidConfigError(f"store={store!r}: give a fluss_ray.Store (the URL and options workers connect to)")
    if not isinstance(lake, Lake):
        raise InvalidConfigError(f"lake={lake!r}: give a tiering.Lake (its catalog properties go to the workers)")
    max_retries = check_int("max_retries", max_retries, minimum=0, hint="times a table's task is run again")
    shards = check_int("shards", shards, minimum=1, hint="tasks (bucket ranges) per table")
    num_cpus = check_cpus(num_cpus)
    if not ray.is_initialized():
        raise InvalidConfigError("tier_on_ray runs on a Ray cluster: call ray.init(address=...) first")
    names = (
        [str(TablePath.of(t)) for t in tables] if tables is not None else [str(p) for p in lake_tables(store.connect())]
    )
    if tables is not None:  # refuse unknown or disabled tables here, before any task starts
        from tiering.service import _resolve

        _resolve(store.connect(), names)
    task = ray.remote(tier_table_task).options(
        **{"max_retries": max_retries, "num_cpus": num_cpus, "scheduling_strategy": "SPREAD", **dict(ray_options or {})}
    )
    parts = [None] if shards == 1 else Shard.all(shards)
    props = dict(lake.properties)
    refs = [task.remote(store, props, lake.name, name, expire_partitions, part) for name in names for part in parts]
    reports, errors = [], []
    for ref in refs:
        try:
            reports.append(ray.get(ref))
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
            if not isinstance(cause, FlussLakeError):
                raise
            errors.append(cause)
    raise_first(errors)
    return reports
