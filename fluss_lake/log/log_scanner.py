"""Reading logs: bounded scans and subscriptions that poll new batches from per-bucket offsets.

Rows come with system columns ``_bucket``, ``_offset``, ``_change_type`` (``+A +I -U +U -D``) and
``_commit_timestamp``; filters skip whole batches using their statistics, then filter rows exactly.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from fluss_lake.exceptions import InvalidConfigError, OffsetOutOfRangeError
from fluss_lake.log.filters import Filters, may_match, normalize_filters, to_expression
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN, LogBatch

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["LogScanner", "scan_log", "CHANGE_TYPE_NAMES", "SYSTEM_COLUMNS"]

CHANGE_TYPE_NAMES = ["+A", "+I", "-U", "+U", "-D"]
SYSTEM_COLUMNS = ("_bucket", "_offset", "_change_type", "_commit_timestamp")
_CHANGE_ENUM = pl.Enum(CHANGE_TYPE_NAMES)


def _batch_frame(table: "Table", bucket: int, batch: LogBatch, columns: Sequence[str]) -> pl.DataFrame:
    """A decoded batch as rows with system columns and the projected table columns (padded to the schema)."""
    frame = pl.from_arrow(batch.rows)
    assert isinstance(frame, pl.DataFrame)
    n = batch.rows.num_rows  # a projection may leave no column of an older batch: count rows on the batch
    header = batch.header
    base = header.base_offset
    if CHANGE_TYPE_COLUMN in frame.columns:
        codes = frame.get_column(CHANGE_TYPE_COLUMN).cast(pl.UInt32)
        change = pl.Series("_change_type", np.array(CHANGE_TYPE_NAMES)[codes.to_numpy()] if n else [],
                           dtype=pl.String).cast(_CHANGE_ENUM)
    else:  # a log table: every record is +A (a constant column, no per-row strings)
        change = pl.repeat("+A", n, dtype=_CHANGE_ENUM, eager=True).alias("_change_type")
    schema = table.schema
    cols = []
    for name in columns:
        if name in frame.columns:
            cols.append(frame.get_column(name))
        else:
            cols.append(pl.Series(name, [None] * n, dtype=schema.column(name).dtype))
    offsets = pl.Series("_offset", np.arange(base, base + n, dtype=np.int64))
    return pl.DataFrame([
        pl.Series("_bucket", np.full(n, bucket, dtype=np.int32)),
        offsets,
        change,
        pl.Series("_commit_timestamp", np.full(n, header.commit_ts, dtype=np.int64)).cast(pl.Datetime("ms", "UTC")),
        *cols,
    ])


def _empty(table: "Table", columns: Sequence[str]) -> pl.DataFrame:
    schema = table.schema.polars_schema
    return pl.DataFrame(schema={"_bucket": pl.Int32, "_offset": pl.Int64, "_change_type": _CHANGE_ENUM,
                                "_commit_timestamp": pl.Datetime("ms", "UTC"), **{c: schema[c] for c in columns}})


def _read_range(table: "Table", bucket: int, start: int, end: int, columns: Sequence[str],
                groups: list, stats_needed: set[str]) -> list[pl.DataFrame]:
    """Frames for ``[start, end)`` of one bucket with batch skipping and exact row filtering."""
    tablet = table.log_tablet(bucket)
    header_filter = (lambda h: may_match(groups, h)) if groups else None
    read_cols = list(dict.fromkeys([*columns, *stats_needed]))
    frames = []
    expr = to_expression(groups)
    # batch offsets must be computed on the unsliced batch: slice after building the frame
    for batch in tablet.read(start, end, columns=read_cols, header_filter=header_filter):
        frame = _batch_frame(table, bucket, batch, read_cols)
        if start > batch.header.base_offset:  # read() cut the head; fix offsets
            frame = frame.with_columns(pl.col("_offset") + (start - batch.header.base_offset))
        if expr is not None:
            frame = frame.filter(expr)
        frames.append(frame.select(*SYSTEM_COLUMNS, *columns))
    return frames


def scan_log(table: "Table", *, start_offsets: Mapping[int, int] | None = None,
             end_offsets: Mapping[int, int] | None = None, columns: Sequence[str] | None = None,
             filters: Filters | None = None, start_timestamp: int | None = None) -> pl.DataFrame:
    """Bounded read of every bucket from `start_offsets` (default: earliest) to `end_offsets` (default: now).

    `start_timestamp` (epoch ms) starts each bucket at its first batch committed at or after that time
    (Fluss's ``scan.startup.mode = timestamp``).
    """
    if start_timestamp is not None:
        if start_offsets is not None:
            raise InvalidConfigError("pass start_offsets or start_timestamp, not both")
        start_offsets = {b: table.log_tablet(b).offset_for_timestamp(start_timestamp) for b in range(table.bucket_num)}
    columns = _check_columns(table, columns)
    groups = normalize_filters(filters, table.schema.polars_schema)
    needed = {c[0] for g in groups for c in g}
    for given in (start_offsets or {}, end_offsets or {}):
        for bucket in given:
            _check_bucket(table, bucket)
    frames: list[pl.DataFrame] = []
    for bucket in range(table.bucket_num):
        tablet = table.log_tablet(bucket)
        latest = tablet.refresh()
        end = latest if end_offsets is None or bucket not in end_offsets else end_offsets[bucket]
        start = tablet.earliest_offset if start_offsets is None or bucket not in start_offsets else start_offsets[bucket]
        _check_range(tablet, start, latest)
        if end > latest:
            raise OffsetOutOfRangeError(f"bucket {bucket}: end offset {end} is after the log end {latest} (latest)")
        if start >= end:
            continue
        frames += _read_range(table, bucket, start, end, columns, groups, needed)
    return pl.concat(frames, how="vertical") if frames else _empty(table, columns)


def _check_bucket(table: "Table", bucket: int) -> None:
    """Reject buckets the table does not have."""
    if not isinstance(bucket, int) or not 0 <= bucket < table.bucket_num:
        raise InvalidConfigError(f"bucket {bucket} does not exist; {table.path} has buckets 0..{table.bucket_num - 1}")


def _check_range(tablet, start: int, latest: int) -> None:
    """A start offset must lie within the retained log: [earliest, latest]."""
    earliest = tablet.earliest_offset
    if not earliest <= start <= latest:
        raise OffsetOutOfRangeError(f"bucket {tablet.bucket}: offset {start} is outside the retained log "
                                    f"[{earliest}, {latest}]; start from {earliest} (earliest) or {latest} (latest)")


def _check_columns(table: "Table", columns: Sequence[str] | None) -> list[str]:
    """Projected columns, checked."""
    if columns is None:
        return list(table.schema.names)
    unknown = [c for c in columns if c not in table.schema.names]
    if unknown:
        raise InvalidConfigError(f"unknown column(s) {unknown} in projection; the table has {list(table.schema.names)}")
    return list(columns)


class LogScanner:
    """Subscribe buckets from offsets and poll what has been committed since.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("web")
    >>> _ = conn.create_table("web.events", schema={"id": "INT", "kind": "STRING"})
    >>> events = conn.get_table("web.events")
    >>> scanner = events.new_scan(columns=["kind"])
    >>> scanner.subscribe_from_beginning()
    >>> _ = events.append([{"id": 1, "kind": "view"}])
    >>> scanner.poll()["kind"].to_list()
    ['view']
    >>> scanner.poll().height
    0
    """

    def __init__(self, table: "Table", *, columns: Sequence[str] | None = None, filters: Filters | None = None) -> None:
        self.table = table
        self.columns = _check_columns(table, columns)
        self.groups = normalize_filters(filters, table.schema.polars_schema)
        self.positions: dict[int, int] = {}

    def subscribe(self, bucket: int, offset: int) -> None:
        """Read `bucket` from `offset` on."""
        _check_bucket(self.table, bucket)
        self.positions[bucket] = offset

    def subscribe_from_beginning(self, buckets: Sequence[int] | None = None) -> None:
        """Read the given buckets (default: all) from their earliest retained offset."""
        for bucket in buckets if buckets is not None else range(self.table.bucket_num):
            self.subscribe(bucket, self.table.log_tablet(bucket).earliest_offset)

    def subscribe_from_timestamp(self, timestamp_ms: int, buckets: Sequence[int] | None = None) -> None:
        """Read from the first batch committed at or after `timestamp_ms` (epoch milliseconds)."""
        for bucket in buckets if buckets is not None else range(self.table.bucket_num):
            self.subscribe(bucket, self.table.log_tablet(bucket).offset_for_timestamp(timestamp_ms))

    def subscribe_from_latest(self, buckets: Sequence[int] | None = None) -> None:
        """Read only what is committed after now."""
        for bucket in buckets if buckets is not None else range(self.table.bucket_num):
            self.subscribe(bucket, self.table.log_tablet(bucket).refresh())

    def unsubscribe(self, bucket: int) -> None:
        """Stop reading a bucket."""
        self.positions.pop(bucket, None)

    def poll(self, timeout: float = 0.0, *, interval: float = 0.05) -> pl.DataFrame:
        """New records of every subscribed bucket (waiting up to `timeout` seconds for some)."""
        deadline = time.monotonic() + timeout
        needed = {c[0] for g in self.groups for c in g}
        while True:
            frames: list[pl.DataFrame] = []
            for bucket, start in list(self.positions.items()):
                tablet = self.table.log_tablet(bucket)
                end = tablet.refresh()
                _check_range(tablet, start, end)
                if end > start:
                    frames += _read_range(self.table, bucket, start, end, self.columns, self.groups, needed)
                    self.positions[bucket] = end
            result = pl.concat(frames, how="vertical") if frames else _empty(self.table, self.columns)
            if result.height or time.monotonic() >= deadline:
                return result
            time.sleep(interval)
