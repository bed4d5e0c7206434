"""Polars IO sources over a live table: LazyFrames that read record batches only when collected.

``Table.to_lazy()`` is a source registered with :func:`polars.io.plugins.register_io_source`: on each collect it
reads the table as it is then, one log batch (log tables, ``log`` and ``changelog`` views) or one bucket's state
(primary-key tables, from the on-disk segments) at a time. Polars hands the source the projected columns, the
predicate and ``n_rows``: only those columns are decoded, batches whose statistics (``table.statistics.columns``)
rule out the predicate are skipped unread (:mod:`fluss_lake.scan.predicates`), the full predicate filters the rows
read, and the scan stops after ``n_rows``. So the memory of a filtered scan follows its result, not the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import polars as pl
from polars.io.plugins import register_io_source

from fluss_lake.changelog.log_scanner import PARTITION_COLUMN
from fluss_lake.changelog.views import CHANGELOG_NAMES
from fluss_lake.exceptions import InvalidConfigError, UnsupportedOperationError
from fluss_lake.log.log_reads import check_columns, empty_frame, iter_range
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet
from fluss_lake.scan.predicates import necessary_conditions

__all__ = ["View", "VIEWS", "scan_lazy", "view_schema"]

View = Literal["rows", "log", "changelog"]
VIEWS: tuple[str, ...] = ("rows", "log", "changelog")

Source = Callable[[list[str] | None, pl.Expr | None, int | None, int | None], Iterator[pl.DataFrame]]


def view_schema(runtime: TableRuntime, partition: PartitionInfo | None, view: str) -> pl.Schema:
    """The columns a view's frames have (before projection)."""
    dtypes = runtime.schema.polars_schema
    whole = partition is None and runtime.is_partitioned
    if view == "rows":
        return pl.Schema(dtypes)
    lead: dict[str, pl.DataType] = {PARTITION_COLUMN: pl.String()} if whole else {}
    if view == "log":
        return pl.Schema({**lead, **empty_frame(runtime.schema, list(dtypes)).schema})
    return pl.Schema(
        {
            **lead,
            "_change_type": pl.String(),
            "_log_offset": pl.Int64(),
            "_commit_timestamp": pl.Datetime("ms", "UTC"),
            **dtypes,
        }
    )


def scan_lazy(
    runtime: TableRuntime,
    partition: PartitionInfo | None,
    *,
    view: str = "rows",
    columns: Sequence[str] | None = None,
) -> pl.LazyFrame:
    """A LazyFrame over a handle's current rows, log records or ``$changelog``, read on each collect."""
    if view not in VIEWS:
        raise InvalidConfigError(f"view {view!r} is not a view of a table; use one of {list(VIEWS)}")
    schema = view_schema(runtime, partition, view)
    if columns is not None:
        unknown = [c for c in columns if c not in schema]
        if unknown:
            raise InvalidConfigError(
                f"unknown column(s) {unknown}; the {view} view of {runtime.info.path} has {list(schema)}"
            )
    if view == "rows" and runtime.info.is_primary_key_table:
        source = _state_source(runtime, partition, schema)
        detail = "primary-key state, bucket by bucket"
    else:
        source = _log_source(runtime, partition, schema, view)
        detail = f"{view}, batch by batch with statistics skipping"
    lazy = register_io_source(
        source, schema=schema, explain_name=f"fluss_lake {runtime.info.path}", explain_detail=detail
    )
    return lazy.select(list(columns)) if columns is not None else lazy


def _needed(schema: pl.Schema, with_columns: list[str] | None, predicate: pl.Expr | None) -> list[str]:
    """Columns to read: the projection plus what the predicate names, in schema order."""
    if with_columns is None:
        return list(schema)
    wanted = set(with_columns) | (set(predicate.meta.root_names()) if predicate is not None else set())
    return [c for c in schema if c in wanted]


def _finish(
    frame: pl.DataFrame, predicate: pl.Expr | None, with_columns: list[str] | None, left: int | None
) -> pl.DataFrame:
    if predicate is not None:
        frame = frame.filter(predicate)
    if with_columns is not None:
        frame = frame.select(with_columns)
    return frame.head(left) if left is not None else frame


def _log_source(runtime: TableRuntime, partition: PartitionInfo | None, schema: pl.Schema, view: str) -> Source:
    names = list(runtime.schema.names)
    whole = partition is None and runtime.is_partitioned

    def read(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        if n_rows == 0:
            return
        needed = _needed(schema, with_columns, predicate)
        table_columns = [c for c in names if c in needed]
        groups = necessary_conditions(predicate, table_columns)
        stats_needed = {c[0] for g in groups for c in g}
        left = n_rows
        for tablets in runtime.scope(partition):
            for frame in _log_frames(tablets, table_columns, groups, stats_needed):
                frame = _shape(frame, view, tablets.name if whole else None, needed)
                frame = _finish(frame, predicate, with_columns, left)
                if frame.height:
                    yield frame
                if left is not None:
                    left -= frame.height
                    if left <= 0:
                        return

    return read


def _log_frames(tablets: TabletSet, columns: list[str], groups: list, stats_needed: set[str]) -> Iterator[pl.DataFrame]:
    """Every retained record of every bucket of one tablet set, one batch at a time."""
    check_columns(tablets, columns)
    for bucket in range(tablets.bucket_num):
        tablet = tablets.log_tablet(bucket)
        end = tablet.refresh()
        start = tablet.earliest_offset
        if start < end:
            yield from iter_range(tablets, bucket, start, end, columns, groups, stats_needed)


def _shape(frame: pl.DataFrame, view: str, partition_name: str | None, needed: list[str]) -> pl.DataFrame:
    """A read batch (system columns + table columns) as rows of the view, with only the `needed` columns."""
    if view == "changelog":
        frame = frame.with_columns(
            pl.col("_change_type").cast(pl.String).replace_strict(CHANGELOG_NAMES),
            pl.col("_offset").alias("_log_offset"),
        )
    if partition_name is not None or PARTITION_COLUMN in needed:
        frame = frame.with_columns(pl.lit(partition_name, dtype=pl.String).alias(PARTITION_COLUMN))
    return frame.select(needed)


def _state_source(runtime: TableRuntime, partition: PartitionInfo | None, schema: pl.Schema) -> Source:
    if not runtime.info.is_primary_key_table:
        raise UnsupportedOperationError(f"{runtime.info.path} is a log table; it has no primary-key state")

    def read(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        if n_rows == 0:
            return
        left = n_rows
        for tablets in runtime.scope(partition):
            for bucket in range(tablets.bucket_num):
                tablet = tablets.kv_tablet(bucket)
                with tablet.lock:  # collected under the lock: a snapshot may collect segment files afterwards
                    lazy = tablet.scan_state(lazy=True)[0]
                    if predicate is not None:  # pushed into the segments' IPC scan
                        lazy = lazy.filter(predicate)
                    if with_columns is not None:
                        lazy = lazy.select(with_columns)
                    if left is not None:
                        lazy = lazy.head(left)
                    frame = lazy.collect()
                if frame.height:
                    yield frame
                if left is not None:
                    left -= frame.height
                    if left <= 0:
                        return

    return read
