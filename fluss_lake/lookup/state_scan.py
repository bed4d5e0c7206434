"""Whole reads of current rows: a primary-key table's state (bucket by bucket, each read under its tablet's lock
after catching up with its log), or every record of a log table.

Together with the lookups by key (:mod:`fluss_lake.lookup.lookuper`) these are the reads of what a table holds now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from fluss_lake.exceptions import InvalidConfigError, UnsupportedOperationError
from fluss_lake.log.log_reads import empty_frame, read_buckets
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime

__all__ = ["BucketState", "bucket_state", "read_rows", "read_limit"]


@dataclass(frozen=True, slots=True)
class BucketState:
    """The current rows of one bucket and the log offset they reflect (every change before it is applied)."""

    rows: pl.DataFrame
    offset: int


def bucket_state(runtime: TableRuntime, partition: PartitionInfo | None, bucket: int) -> BucketState:
    """One bucket's current rows with the offset they reflect (see ``Table.bucket_state``)."""
    if not runtime.info.is_primary_key_table:
        raise UnsupportedOperationError(f"{runtime.info.path} is a log table; it has no primary-key state")
    tablets = runtime.tablets(partition)
    if not isinstance(bucket, int) or isinstance(bucket, bool) or not 0 <= bucket < tablets.bucket_num:
        raise InvalidConfigError(
            f"bucket {bucket!r} does not exist; {runtime.info.path} has buckets 0..{tablets.bucket_num - 1}"
        )
    rows, offset = tablets.kv_tablet(bucket).scan_state()
    return BucketState(rows, offset)


def read_rows(
    runtime: TableRuntime, partition: PartitionInfo | None, *, columns: Sequence[str] | None = None
) -> pl.DataFrame:
    """Current rows: a primary-key table's state, or every row of a log table."""
    schema = runtime.schema
    if not runtime.info.is_primary_key_table:
        names = list(columns or schema.names)
        logs = [read_buckets(tablets, columns=names) for tablets in runtime.scope(partition)]
        return pl.concat(logs, how="vertical").select(names) if logs else empty_frame(schema, names).select(names)
    parts = [
        tablets.kv_tablet(b).scan_state()[0] for tablets in runtime.scope(partition) for b in range(tablets.bucket_num)
    ]
    frame = pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=schema.polars_schema)
    assert isinstance(frame, pl.DataFrame)
    return frame.select(columns) if columns else frame


def read_limit(
    runtime: TableRuntime, partition: PartitionInfo | None, limit: int, *, columns: Sequence[str] | None = None
) -> pl.DataFrame:
    """At most `limit` rows, reading only until that many are found (see ``Table.limit_scan``)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise InvalidConfigError(f"limit must be a positive integer, not {limit!r}")
    schema = runtime.schema
    names = list(columns or schema.names)
    parts: list[pl.DataFrame] = []
    remaining = limit
    for tablets in runtime.scope(partition):
        for bucket in range(tablets.bucket_num):
            if remaining <= 0:
                break
            if runtime.info.is_primary_key_table:
                tablet = tablets.kv_tablet(bucket)
                with tablet.lock:  # collected under the lock: a snapshot may collect segment files afterwards
                    part = tablet.scan_state(lazy=True)[0].select(names).head(remaining).collect()
            else:
                log = tablets.log_tablet(bucket)
                end = log.refresh()
                start = max(end - remaining, log.earliest_offset)
                ends = tablets.end_offsets()  # the other buckets: read nothing
                part = (
                    read_buckets(
                        tablets, start_offsets={**ends, bucket: start}, end_offsets={**ends, bucket: end}, columns=names
                    )
                    .select(names)
                    .tail(remaining)
                )
            parts.append(part)
            remaining -= part.height
    if not parts:
        return pl.DataFrame(schema=schema.polars_schema).select(names)
    return pl.concat(parts, how="vertical")
