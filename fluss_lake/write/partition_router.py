"""Routing a write batch to partitions: each row's partition name from its partition columns, missing partitions
created on the fly (Fluss's dynamic partition creation), all checks done before anything is created."""

from __future__ import annotations

import polars as pl

from fluss_lake.exceptions import InvalidPartitionError, PartitionNotExistError
from fluss_lake.metadata.auto_partition import AutoPartitionStrategy
from fluss_lake.metadata.partition import partition_names, spec_of
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["route_partitions", "PARTITION_COLUMN"]

PARTITION_COLUMN = "__partition"


def route_partitions(runtime: TableRuntime, frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, TabletSet]]:
    """`frame` with a ``__partition`` name column (rows grouped by partition, order kept inside each), and the
    tablets of every partition it touches. Work is per distinct partition, not per row."""
    info = runtime.info
    keys = list(info.partition_keys)
    nulls = [k for k in keys if frame.get_column(k).null_count()]
    if nulls:
        raise InvalidPartitionError(
            f"partition column(s) {nulls} of {info.path} hold nulls; every row needs a "
            "partition value (nothing was written)"
        )
    named = frame.with_columns(
        partition_names(frame, keys, runtime.merge_spec.dtypes, check=True).alias(PARTITION_COLUMN)
    )
    groups = named.partition_by(PARTITION_COLUMN, as_dict=True, maintain_order=True)
    handles: dict[str, TabletSet] = {}
    missing: list[str] = []
    for (name,) in groups:
        cached = runtime.cached_tablets(name)
        if cached is not None:
            handles[name] = cached
            continue
        try:
            handles[name] = runtime.tablets(runtime.get_partition(name))
        except PartitionNotExistError:
            missing.append(name)
    if missing:
        context = runtime.context
        if not context.dynamic_partition_creation:
            raise PartitionNotExistError(
                f"partition(s) {missing} of {info.path} do not exist and dynamic partition "
                "creation is off; create_partition() them first (nothing was written)"
            )
        strategy = AutoPartitionStrategy.from_options(info.options, info.partition_keys, runtime.merge_spec.dtypes)
        now = context.clock()
        if strategy is not None and strategy.enabled:
            expired = [n for n in missing if strategy.is_expired(spec_of(keys, n)[strategy.key], now)]
            if expired:
                raise InvalidPartitionError(
                    f"rows for partition(s) {expired} of {info.path} are past the "
                    f"auto-partition retention (values below {strategy.cutoff(now)!r} are "
                    "dropped); nothing was written"
                )
        for name in missing:
            handles[name] = runtime.tablets(runtime.create_partition(name, ignore_if_exists=True))
    parts = list(groups.values())
    return (pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]), handles
