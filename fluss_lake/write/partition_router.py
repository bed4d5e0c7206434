"""Routing a write batch to partitions: each row's partition name from its partition columns, missing partitions
created on the fly (Fluss's dynamic partition creation), all checks done before anything is created."""

from __future__ import annotations

import polars as pl

from fluss_lake.exceptions import InvalidPartitionError
from fluss_lake.metadata.partition import partition_names
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
    handles = runtime.partition_tablets([name for (name,) in groups])
    parts = list(groups.values())
    return (pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]), handles
