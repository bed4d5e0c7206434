"""Routing a write batch to partitions: each row's partition name from its partition columns, missing partitions
created on the fly (Fluss's dynamic partition creation), all checks done before anything is created."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from fluss_lake.exceptions import InvalidPartitionError, PartitionNotExistError
from fluss_lake.metadata.partition import check_partition_value, partition_name, value_string

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["route_partitions", "PARTITION_COLUMN"]

PARTITION_COLUMN = "__partition"


def route_partitions(table: "Table", frame: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, "Table"]]:
    """`frame` with a ``__partition`` name column (rows grouped by partition, order kept inside each), and the
    handle of every partition it touches. Work is per distinct partition, not per row."""
    from fluss_lake.metadata.auto_partition import AutoPartitionStrategy

    keys = list(table.partition_keys)
    dtypes = table.merge_spec.dtypes
    nulls = [k for k in keys if frame.get_column(k).null_count()]
    if nulls:
        raise InvalidPartitionError(f"partition column(s) {nulls} of {table.path} hold nulls; every row needs a "
                                    "partition value (nothing was written)")
    groups = frame.partition_by(keys, as_dict=True, maintain_order=True)
    named: list[tuple[str, dict[str, str], pl.DataFrame]] = []
    for values, part in groups.items():
        strings = [check_partition_value(value_string(v, dtypes[k])) for k, v in zip(keys, values)]
        named.append((partition_name(strings), dict(zip(keys, strings)), part))
    handles: dict[str, Table] = {}
    missing: list[tuple[str, dict[str, str]]] = []
    for name, spec, _ in named:
        cached = table._partitions.get(name)
        if cached is not None:
            handles[name] = cached
            continue
        try:
            handles[name] = table.partition(name)
        except PartitionNotExistError:
            missing.append((name, spec))
    if missing:
        connection = table.connection
        if not connection.dynamic_partition_creation:
            raise PartitionNotExistError(f"partition(s) {[n for n, _ in missing]} of {table.path} do not exist and "
                                         "dynamic partition creation is off; create_partition() them first (nothing "
                                         "was written)")
        strategy = AutoPartitionStrategy.from_options(table.info.options, table.partition_keys, dtypes)
        now = connection.clock()
        if strategy is not None and strategy.enabled:
            expired = [n for n, spec in missing if strategy.is_expired(spec[strategy.key], now)]
            if expired:
                raise InvalidPartitionError(f"rows for partition(s) {expired} of {table.path} are past the "
                                            f"auto-partition retention (values below {strategy.cutoff(now)!r} are "
                                            "dropped); nothing was written")
        for name, spec in missing:
            info = connection.create_partition(table.path, spec, ignore_if_exists=True)
            handles[name] = table._partition_handle(info)
    parts = [part.with_columns(pl.lit(name, dtype=pl.String).alias(PARTITION_COLUMN)) for name, _, part in named]
    return (pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]), handles
