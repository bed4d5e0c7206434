"""Reading a table's changelog: bounded scans and subscriptions that poll new batches from per-bucket offsets.

On a partitioned table's whole-table handle both fan out over the partitions that exist: rows get a leading
``_partition`` column and offsets are keyed by ``(partition name, bucket)``. The per-bucket reads are
:mod:`fluss_lake.log.log_reads` over the runtime's tablet sets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import polars as pl

from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.log.filters import Filters, normalize_filters
from fluss_lake.log.log_reads import (
    check_bucket,
    check_change_types,
    check_columns,
    check_range,
    empty_frame,
    read_buckets,
    read_range,
)
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["LogScanner", "scan_log", "per_partition"]

PARTITION_COLUMN = "_partition"


def per_partition(
    runtime: TableRuntime,
    read: Callable[..., pl.DataFrame],
    *,
    start_offsets: Mapping | None = None,
    end_offsets: Mapping | None = None,
    **kwargs: Any,
) -> pl.DataFrame:
    """One read over every partition of a whole partitioned table, with a leading ``_partition`` column.

    `read(tablets, start_offsets=..., end_offsets=..., **kwargs)` reads one partition; offsets given as
    ``(partition name, bucket)`` keys are split per partition, and a partition without end offsets is skipped.
    """
    frames = []
    for tablets in runtime.scope(None):
        name = tablets.name
        per: dict[str, Any] = {}
        if start_offsets is not None:
            per["start_offsets"] = {b: o for (n, b), o in start_offsets.items() if n == name}
        if end_offsets is not None:
            per["end_offsets"] = {b: o for (n, b), o in end_offsets.items() if n == name}
            if not per["end_offsets"]:
                continue
        frame = read(tablets, **per, **kwargs)
        frames.append(frame.select(pl.lit(name, dtype=pl.String).alias(PARTITION_COLUMN), pl.all()))
    if frames:
        return pl.concat(frames, how="vertical")
    empty = read(_NoPartition(runtime), **kwargs)
    return empty.select(pl.lit(None, dtype=pl.String).alias(PARTITION_COLUMN), pl.all())


class _NoPartition:
    """A log source of no bucket: a read of it gives the empty frame of the right shape."""

    bucket_num = 0

    def __init__(self, runtime: TableRuntime) -> None:
        self.info = runtime.info

    @property
    def schema(self) -> Any:
        return self.info.schema

    def log_tablet(self, bucket: int) -> Any:
        raise AssertionError("a source without buckets has no log")


def scan_log(runtime: TableRuntime, partition: PartitionInfo | None, **options: Any) -> pl.DataFrame:
    """A bounded read of a handle's log (see ``Table.scan_log``)."""
    if partition is None and runtime.is_partitioned:
        return per_partition(runtime, read_buckets, **options)
    return read_buckets(runtime.tablets(partition), **options)


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

    def __init__(
        self,
        runtime: TableRuntime,
        partition: PartitionInfo | None = None,
        *,
        columns: Sequence[str] | None = None,
        filters: Filters | None = None,
        change_types: Sequence[str] | None = None,
    ) -> None:
        self.runtime = runtime
        self._partitioned = partition is None and runtime.is_partitioned
        self._source = None if self._partitioned else runtime.tablets(partition)
        self.columns = check_columns(
            runtime.tablets(partition) if not self._partitioned else _NoPartition(runtime), columns
        )
        self.groups = normalize_filters(filters, runtime.schema.polars_schema)
        self.kinds = check_change_types(change_types)
        self.positions: dict = {}
        self._follow: str | None = None  # "beginning" / "latest": pick up partitions created later that way
        self._handles: dict[str, TabletSet] = {}

    def _target(self, bucket: Any) -> tuple[TabletSet, int]:
        """The tablet set and bucket number behind a subscription key (an int, or (partition, bucket))."""
        if not self._partitioned:
            assert self._source is not None
            check_bucket(self._source, bucket)
            return self._source, bucket
        if not (isinstance(bucket, tuple) and len(bucket) == 2):
            raise InvalidConfigError(
                f"{self.runtime.info.path} is partitioned: name buckets as (partition name, bucket), not {bucket!r}"
            )
        name, number = bucket
        handle = self._handles.get(name)
        if handle is None:
            handle = self._handles[name] = self.runtime.tablets(self.runtime.get_partition(name))
        check_bucket(handle, number)
        return handle, number

    def _all_buckets(self) -> list:
        if not self._partitioned:
            return list(range(self.runtime.info.bucket_num))
        handles = self.runtime.existing()
        self._handles.update(handles)
        return [(name, b) for name, handle in handles.items() for b in range(handle.bucket_num)]

    def subscribe(self, bucket: Any, offset: int) -> None:
        """Read `bucket` from `offset` on."""
        offset = check_int("offset", offset, minimum=None)  # an offset outside the log fails on the next poll
        self._target(bucket)
        self.positions[bucket] = offset

    def _subscribe_each(self, buckets: Sequence | None, offset_of: Callable[[Any], int], follow: str | None) -> None:
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
        timestamp_ms = check_int("timestamp_ms", timestamp_ms, minimum=0, hint="epoch milliseconds")
        self._subscribe_each(buckets, lambda t: t.offset_for_timestamp(timestamp_ms), "beginning")

    def subscribe_from_latest(self, buckets: Sequence | None = None) -> None:
        """Read only what is committed after now."""
        self._subscribe_each(buckets, lambda t: t.refresh(), "beginning")

    def unsubscribe(self, bucket: Any) -> None:
        """Stop reading a bucket."""
        self.positions.pop(bucket, None)

    def _discover(self) -> None:
        """Follow the partitions of the whole table: new ones from their start, dropped ones forgotten."""
        current = self.runtime.existing()
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
        timeout = check_seconds("timeout", timeout, positive=False)
        interval = check_seconds("interval", interval)
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
                check_range(tablet, start, end)
                if end > start:
                    read = read_range(handle, bucket, start, end, self.columns, self.groups, needed, self.kinds)
                    if self._partitioned:
                        read = [
                            f.select(pl.lit(key[0], dtype=pl.String).alias(PARTITION_COLUMN), pl.all()) for f in read
                        ]
                    frames += read
                    self.positions[key] = end
            if frames:
                result = pl.concat(frames, how="vertical")
            else:
                result = empty_frame(self.runtime.schema, self.columns)
                if self._partitioned:
                    result = result.select(pl.lit(None, dtype=pl.String).alias(PARTITION_COLUMN), pl.all())
            if result.height or time.monotonic() >= deadline:
                return result
            time.sleep(interval)
