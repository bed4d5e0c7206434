"""Bounded reads of a log source: the records of each bucket between two offsets, as one frame.

Rows come with system columns ``_bucket``, ``_offset``, ``_change_type`` (``+A +I -U +U -D``) and
``_commit_timestamp``; filters skip whole batches using their statistics, then filter rows exactly, and
``change_types=["-D"]`` skips unread every batch whose header counts no delete.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import InvalidConfigError, OffsetOutOfRangeError
from fluss_lake.log.filters import Filters, may_match, normalize_filters, to_expression
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN, BatchHeader, LogBatch
from fluss_lake.log.log_source import LogSource
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.schema import Schema

__all__ = [
    "read_buckets",
    "batch_headers",
    "read_range",
    "iter_range",
    "empty_frame",
    "check_change_types",
    "check_bucket",
    "check_range",
    "check_columns",
    "CHANGE_TYPE_NAMES",
    "SYSTEM_COLUMNS",
]

CHANGE_TYPE_NAMES = ["+A", "+I", "-U", "+U", "-D"]
SYSTEM_COLUMNS = ("_bucket", "_offset", "_change_type", "_commit_timestamp")
_CHANGE_ENUM = pl.Enum(CHANGE_TYPE_NAMES)
_CHANGE_NAMES = pl.Series("_change_type", CHANGE_TYPE_NAMES, dtype=_CHANGE_ENUM)  # code -> name, by position


def _batch_frame(source: LogSource, bucket: int, batch: LogBatch, columns: Sequence[str]) -> pl.DataFrame:
    """A decoded batch as rows with system columns and the projected table columns (padded to the schema)."""
    return _batches_frame(source, bucket, [batch], columns)


def _batches_frame(
    source: LogSource, bucket: int, batches: Sequence[LogBatch], columns: Sequence[str], start: int = 0
) -> pl.DataFrame:
    """Consecutive decoded batches of one bucket with the same Arrow schema as one frame of rows with system
    columns and the projected table columns (padded to the schema); rows before `start` were cut off by the read.

    One decode into Polars and one set of system columns for the whole run: a step that reads many small batches
    pays the per-frame costs once, not once per batch."""
    first = batches[0].rows
    rows = first if len(batches) == 1 else pa.concat_tables([b.rows for b in batches])
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    counts = np.fromiter((b.rows.num_rows for b in batches), dtype=np.int64, count=len(batches))
    # a projection may leave no column of an older batch: count rows on the batches
    n = int(counts.sum())
    firsts = np.fromiter(
        (max(b.header.base_offset, start) for b in batches), dtype=np.int64, count=len(batches)
    )  # read() cut the head of a batch that starts before `start`
    if len(batches) == 1:
        offsets = np.arange(firsts[0], firsts[0] + n, dtype=np.int64)
        stamps = np.full(n, batches[0].header.commit_ts, dtype=np.int64)
    else:
        ends = np.cumsum(counts)
        offsets = np.arange(n, dtype=np.int64) + np.repeat(firsts - (ends - counts), counts)
        stamps = np.repeat(np.fromiter((b.header.commit_ts for b in batches), dtype=np.int64), counts)
    if CHANGE_TYPE_COLUMN in frame.columns:  # the Enum's categories are the codes' names: a gather, no strings
        change = _CHANGE_NAMES.gather(frame.get_column(CHANGE_TYPE_COLUMN).cast(pl.UInt32))
    else:  # a log table: every record is +A (a constant column, no per-row strings)
        change = pl.repeat("+A", n, dtype=_CHANGE_ENUM, eager=True).alias("_change_type")
    schema = source.schema
    cols = []
    for name in columns:
        if name in frame.columns:
            cols.append(frame.get_column(name))
        else:
            cols.append(pl.Series(name, [None] * n, dtype=schema.column(name).dtype))
    return pl.DataFrame(
        [
            pl.Series("_bucket", np.full(n, bucket, dtype=np.int32)),
            pl.Series("_offset", offsets),
            change,
            pl.Series("_commit_timestamp", stamps).cast(pl.Datetime("ms", "UTC")),
            *cols,
        ]
    )


def empty_frame(schema: Schema, columns: Sequence[str]) -> pl.DataFrame:
    """No records: the frame a read returns when there are none, with every column typed."""
    dtypes = schema.polars_schema
    return pl.DataFrame(
        schema={
            "_bucket": pl.Int32,
            "_offset": pl.Int64,
            "_change_type": _CHANGE_ENUM,
            "_commit_timestamp": pl.Datetime("ms", "UTC"),
            **{c: dtypes[c] for c in columns},
        }
    )


def read_range(
    source: LogSource,
    bucket: int,
    start: int,
    end: int,
    columns: Sequence[str],
    groups: list,
    stats_needed: set[str],
    kinds: frozenset[str] | None = None,
) -> list[pl.DataFrame]:
    """Frames for ``[start, end)`` of one bucket with batch skipping and exact row filtering: one frame per run of
    consecutive batches with the same columns (many small batches cost one conversion, not one each)."""
    return list(iter_range(source, bucket, start, end, columns, groups, stats_needed, kinds, coalesce=True))


#: A run of coalesced batches is converted once it holds this many records (bounded reads are bounded by their
#: caller; this only keeps one conversion's working copy moderate).
_COALESCE_ROWS = 1 << 20


def iter_range(
    source: LogSource,
    bucket: int,
    start: int,
    end: int,
    columns: Sequence[str],
    groups: list,
    stats_needed: set[str],
    kinds: frozenset[str] | None = None,
    *,
    coalesce: bool = False,
) -> Iterator[pl.DataFrame]:
    """:func:`read_range` one batch at a time (a streaming scan holds one decoded batch, not the bucket); with
    `coalesce`, one frame per run of batches with the same Arrow schema."""
    tablet = source.log_tablet(bucket)
    deletes_only = kinds is not None and kinds <= {"-D"}
    header_filter = None
    if groups or deletes_only:

        def header_filter(h: BatchHeader) -> bool:  # a batch whose header rules it out is not read
            return not (deletes_only and h.deletes == 0) and (not groups or may_match(groups, h))

    read_cols = list(dict.fromkeys([*columns, *stats_needed]))
    expr = to_expression(groups)
    if kinds is not None:
        kind_expr = pl.col("_change_type").is_in(sorted(kinds))
        expr = kind_expr if expr is None else expr & kind_expr

    exact = read_cols == list(columns)  # the frame's columns are the result's already: no select query

    def finish(run: list[LogBatch]) -> pl.DataFrame:
        frame = _batches_frame(source, bucket, run, read_cols, start)
        if expr is not None:
            frame = frame.filter(expr)
        return frame if exact else frame.select(*SYSTEM_COLUMNS, *columns)

    run: list[LogBatch] = []
    held = 0
    for batch in tablet.read(start, end, columns=read_cols, header_filter=header_filter):
        if not coalesce:  # streaming: each batch leaves before the next one is decoded
            yield finish([batch])
            continue
        if run and (held >= _COALESCE_ROWS or not batch.rows.schema.equals(run[0].rows.schema)):
            yield finish(run)
            run, held = [], 0
        run.append(batch)
        held += batch.rows.num_rows
    if run:
        yield finish(run)


def read_buckets(
    source: LogSource,
    *,
    start_offsets: Mapping[int, int] | None = None,
    end_offsets: Mapping[int, int] | None = None,
    columns: Sequence[str] | None = None,
    filters: Filters | None = None,
    start_timestamp: int | None = None,
    change_types: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Bounded read of every bucket from `start_offsets` (default: earliest) to `end_offsets` (default: now).

    `start_timestamp` (epoch ms) starts each bucket at its first batch committed at or after that time
    (Fluss's ``scan.startup.mode = timestamp``). `change_types` keeps only records of those types (``"-D"``
    alone skips, unread, every batch whose header counts no delete).
    """
    kinds = check_change_types(change_types)
    if start_timestamp is not None:
        if start_offsets is not None:
            raise InvalidConfigError("pass start_offsets or start_timestamp, not both")
        start_offsets = {
            b: source.log_tablet(b).offset_for_timestamp(start_timestamp) for b in range(source.bucket_num)
        }
    columns = check_columns(source, columns)
    groups = normalize_filters(filters, source.schema.polars_schema)
    needed = {c[0] for g in groups for c in g}
    for given in (start_offsets or {}, end_offsets or {}):
        for bucket in given:
            check_bucket(source, bucket)
    frames: list[pl.DataFrame] = []
    for bucket in range(source.bucket_num):
        tablet = source.log_tablet(bucket)
        latest = tablet.refresh()
        end = latest if end_offsets is None or bucket not in end_offsets else end_offsets[bucket]
        start = (
            tablet.earliest_offset if start_offsets is None or bucket not in start_offsets else start_offsets[bucket]
        )
        check_range(tablet, start, latest)
        if end > latest:
            raise OffsetOutOfRangeError(f"bucket {bucket}: end offset {end} is after the log end {latest} (latest)")
        if start >= end:
            continue
        frames += read_range(source, bucket, start, end, columns, groups, needed, kinds)
    return pl.concat(frames, how="vertical") if frames else empty_frame(source.schema, columns)


def check_change_types(change_types: Sequence[str] | None) -> frozenset[str] | None:
    """The change types to keep (None: all), rejecting names that are not change types."""
    if change_types is None:
        return None
    if isinstance(change_types, str):
        change_types = [change_types]
    unknown = [c for c in change_types if c not in CHANGE_TYPE_NAMES]
    if unknown:
        raise InvalidConfigError(f"change_types {unknown} are not change types; use some of {CHANGE_TYPE_NAMES}")
    return frozenset(change_types)


def check_bucket(source: LogSource, bucket: int) -> None:
    """Reject buckets the table does not have."""
    if not isinstance(bucket, (int, np.integer)) or isinstance(bucket, bool) or not 0 <= bucket < source.bucket_num:
        raise InvalidConfigError(f"bucket {bucket} does not exist; the table has buckets 0..{source.bucket_num - 1}")


def check_range(tablet: LogTablet, start: int, latest: int) -> None:
    """A start offset must lie within the retained log: [earliest, latest]."""
    earliest = tablet.earliest_offset
    if not earliest <= start <= latest:
        raise OffsetOutOfRangeError(
            f"bucket {tablet.bucket}: offset {start} is outside the retained log "
            f"[{earliest}, {latest}]; start from {earliest} (earliest) or {latest} (latest)"
        )


def check_columns(source: LogSource, columns: Sequence[str] | None) -> list[str]:
    """Projected columns, checked."""
    if columns is None:
        return list(source.schema.names)
    unknown = [c for c in columns if c not in source.schema.names]
    if unknown:
        raise InvalidConfigError(
            f"unknown column(s) {unknown} in projection; the table has {list(source.schema.names)}"
        )
    return list(columns)


def batch_headers(source: LogSource, bucket: int, *, start_offset: int | None = None) -> list[BatchHeader]:
    """The headers of one bucket's batches from `start_offset` (default: earliest) to the log end, rows unread."""
    check_bucket(source, bucket)
    tablet = source.log_tablet(bucket)
    latest = tablet.refresh()
    start = tablet.earliest_offset if start_offset is None else start_offset
    check_range(tablet, start, latest)
    if start == latest:
        return []
    headers: list[BatchHeader] = []

    def keep(header: BatchHeader) -> bool:
        headers.append(header)
        return False  # never decode the rows

    for _ in tablet.read(start, latest, header_filter=keep):
        pass
    return headers
