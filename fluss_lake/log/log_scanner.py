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
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN, BatchHeader, LogBatch

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["LogScanner", "scan_log", "CHANGE_TYPE_NAMES", "SYSTEM_COLUMNS"]

CHANGE_TYPE_NAMES = ["+A", "+I", "-U", "+U", "-D"]
SYSTEM_COLUMNS = ("_bucket", "_offset", "_change_type", "_commit_timestamp")
_CHANGE_ENUM = pl.Enum(CHANGE_TYPE_NAMES)
_CHANGE_NAMES = pl.Series("_change_type", CHANGE_TYPE_NAMES, dtype=_CHANGE_ENUM)  # code -> name, by position


def _batch_frame(table: "Table", bucket: int, batch: LogBatch, columns: Sequence[str]) -> pl.DataFrame:
    """A decoded batch as rows with system columns and the projected table columns (padded to the schema)."""
    frame = pl.from_arrow(batch.rows)
    assert isinstance(frame, pl.DataFrame)
    n = batch.rows.num_rows  # a projection may leave no column of an older batch: count rows on the batch
    header = batch.header
    base = header.base_offset
    if CHANGE_TYPE_COLUMN in frame.columns:  # the Enum's categories are the codes' names: a gather, no strings
        change = _CHANGE_NAMES.gather(frame.get_column(CHANGE_TYPE_COLUMN).cast(pl.UInt32))
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
                groups: list, stats_needed: set[str], kinds: frozenset[str] | None = None) -> list[pl.DataFrame]:
    """Frames for ``[start, end)`` of one bucket with batch skipping and exact row filtering."""
    tablet = table.log_tablet(bucket)
    deletes_only = kinds is not None and kinds <= {"-D"}
    header_filter = None
    if groups or deletes_only:
        def header_filter(h: BatchHeader) -> bool:  # a batch whose header rules it out is not read
            return not (deletes_only and h.deletes == 0) and (not groups or may_match(groups, h))
    read_cols = list(dict.fromkeys([*columns, *stats_needed]))
    frames = []
    expr = to_expression(groups)
    if kinds is not None:
        kind_expr = pl.col("_change_type").is_in(sorted(kinds))
        expr = kind_expr if expr is None else expr & kind_expr
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
             filters: Filters | None = None, start_timestamp: int | None = None,
             change_types: Sequence[str] | None = None) -> pl.DataFrame:
    """Bounded read of every bucket from `start_offsets` (default: earliest) to `end_offsets` (default: now).

    `start_timestamp` (epoch ms) starts each bucket at its first batch committed at or after that time
    (Fluss's ``scan.startup.mode = timestamp``). `change_types` keeps only records of those types (``"-D"``
    alone skips, unread, every batch whose header counts no delete).
    """
    kinds = _check_change_types(change_types)
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
        frames += _read_range(table, bucket, start, end, columns, groups, needed, kinds)
    return pl.concat(frames, how="vertical") if frames else _empty(table, columns)


def _check_change_types(change_types: Sequence[str] | None) -> frozenset[str] | None:
    """The change types to keep (None: all), rejecting names that are not change types."""
    if change_types is None:
        return None
    if isinstance(change_types, str):
        change_types = [change_types]
    unknown = [c for c in change_types if c not in CHANGE_TYPE_NAMES]
    if unknown:
        raise InvalidConfigError(f"change_types {unknown} are not change types; use some of {CHANGE_TYPE_NAMES}")
    return frozenset(change_types)


def _check_bucket(table: "Table", bucket: int) -> None:
    """Reject buckets the table does not have."""
    if not isinstance(bucket, (int, np.integer)) or isinstance(bucket, bool) or not 0 <= bucket < table.bucket_num:
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

    On a partitioned table a bucket is named ``(partition name, bucket)``, rows come with a leading
    ``_partition`` column, and the ``subscribe_from_*`` calls without explicit buckets follow the whole table:
    partitions created later are read from their start, dropped ones are left.

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

    def __init__(self, table: "Table", *, columns: Sequence[str] | None = None, filters: Filters | None = None,
                 change_types: Sequence[str] | None = None) -> None:
        self.table = table
        self.columns = _check_columns(table, columns)
        self.groups = normalize_filters(filters, table.schema.polars_schema)
        self.kinds = _check_change_types(change_types)
        self.positions: dict = {}
        self._partitioned = table._is_partitioned_parent()
        self._follow: str | None = None  # "beginning" / "latest": pick up partitions created later that way
        self._handles: dict[str, Table] = {}

    def _target(self, bucket) -> tuple["Table", int]:  # noqa: ANN001 - int, or (partition, bucket) when partitioned
        """The table (or partition) handle and bucket number behind a subscription key."""
        if not self._partitioned:
            _check_bucket(self.table, bucket)
            return self.table, bucket
        if not (isinstance(bucket, tuple) and len(bucket) == 2):
            raise InvalidConfigError(f"{self.table.path} is partitioned: name buckets as (partition name, bucket), "
                                     f"not {bucket!r}")
        name, number = bucket
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = self.table.partition(name)
        _check_bucket(handle, number)
        return handle, number

    def _all_buckets(self) -> list:
        if not self._partitioned:
            return list(range(self.table.bucket_num))
        handles = self.table._existing_partitions()
        self._handles.update(handles)
        return [(name, b) for name, handle in handles.items() for b in range(handle.bucket_num)]

    def subscribe(self, bucket, offset: int) -> None:  # noqa: ANN001 - see _target
        """Read `bucket` from `offset` on."""
        self._target(bucket)
        self.positions[bucket] = offset

    def _subscribe_each(self, buckets: Sequence | None, offset_of, follow: str | None) -> None:  # noqa: ANN001
        if buckets is None:
            self._follow = follow
        for bucket in buckets if buckets is not None else self._all_buckets():
            handle, number = self._target(bucket)
            self.subscribe(bucket, offset_of(handle.log_tablet(number)))

    def subscribe_from_beginning(self, buckets: Sequence | None = None) -> None:
        """Read the given buckets (default: all) from their earliest retained offset."""
        self._subscribe_each(buckets, lambda t: t.earliest_offset, "beginning")

    def subscribe_from_timestamp(self, timestamp_ms: int, buckets: Sequence | None = None) -> None:
        """Read from the first batch committed at or after `timestamp_ms` (epoch milliseconds)."""
        self._subscribe_each(buckets, lambda t: t.offset_for_timestamp(timestamp_ms), "beginning")

    def subscribe_from_latest(self, buckets: Sequence | None = None) -> None:
        """Read only what is committed after now."""
        self._subscribe_each(buckets, lambda t: t.refresh(), "beginning")

    def unsubscribe(self, bucket) -> None:  # noqa: ANN001 - see _target
        """Stop reading a bucket."""
        self.positions.pop(bucket, None)

    def _discover(self) -> None:
        """Follow the partitions of the whole table: new ones from their start, dropped ones forgotten."""
        current = self.table._existing_partitions()
        for name in [n for n in self._handles if n not in current or current[n] is not self._handles[n]]:
            self._handles.pop(name)
            for key in [k for k in self.positions if k[0] == name]:
                del self.positions[key]
        for name, handle in current.items():
            if name not in self._handles:
                self._handles[name] = handle
                for b in range(handle.bucket_num):
                    self.positions[(name, b)] = handle.log_tablet(b).earliest_offset

    def poll(self, timeout: float = 0.0, *, interval: float = 0.05) -> pl.DataFrame:
        """New records of every subscribed bucket (waiting up to `timeout` seconds for some)."""
        deadline = time.monotonic() + timeout
        needed = {c[0] for g in self.groups for c in g}
        while True:
            if self._partitioned and self._follow is not None:
                self._discover()
            frames: list[pl.DataFrame] = []
            for key, start in list(self.positions.items()):
                handle, bucket = self._target(key)
                tablet = handle.log_tablet(bucket)
                end = tablet.refresh()
                _check_range(tablet, start, end)
                if end > start:
                    read = _read_range(handle, bucket, start, end, self.columns, self.groups, needed, self.kinds)
                    if self._partitioned:
                        read = [f.select(pl.lit(key[0], dtype=pl.String).alias("_partition"), pl.all()) for f in read]
                    frames += read
                    self.positions[key] = end
            if frames:
                result = pl.concat(frames, how="vertical")
            else:
                result = _empty(self.table, self.columns)
                if self._partitioned:
                    result = result.select(pl.lit(None, dtype=pl.String).alias("_partition"), pl.all())
            if result.height or time.monotonic() >= deadline:
                return result
            time.sleep(interval)
