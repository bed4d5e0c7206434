"""Reading a live table's log without opening its primary-key state.

``Table.log_tablet`` of a primary-key table opens the bucket's state first (restoring the newest snapshot, which
on S3 downloads its segments, and replaying the log tail): tiering and union reads only need the changelog, so
they read through plain ``LogTablet`` objects over the same objects in the store. One reader per live ``Table``
is kept, so the per-bucket listings are made once and then only probed forward.

A partitioned table is read partition by partition (``Table.partition_tables()``): its offsets are keyed by
``(partition name, bucket)`` (``(None, bucket)`` for an unpartitioned table), as in the lake's snapshot summary.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake.log.log_scanner import scan_log
from fluss_lake.log.log_tablet import LogTablet

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["LiveOffsets", "LogReader", "live_offsets", "log_reader"]

_READERS: weakref.WeakKeyDictionary[Any, LogReader] = weakref.WeakKeyDictionary()


class LogReader:
    """The parts of a :class:`~fluss_lake.table.Table` that log scans use, over state-free log tablets."""

    def __init__(self, live: Table) -> None:
        self.live = live
        self._tablets: dict[tuple[str, int], LogTablet] = {}

    @property
    def schema(self) -> Any:
        """The live table's current schema."""
        return self.live.schema

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self.live.bucket_num

    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket (shared with the table when it is open there already)."""
        live = self.live
        if not live.is_primary_key_table:
            return live.log_tablet(bucket)
        opened = live._kv_tablets.get(bucket)
        if opened is not None:
            return opened.log
        prefix = live._data_prefix()  # the partition's own folder for a partition handle
        key = (prefix, bucket)
        tablet = self._tablets.get(key)
        if tablet is None:
            tablet = self._tablets[key] = LogTablet(live.connection.store, f"{prefix}/log/b{bucket:05d}", bucket)
        return tablet

    def end_offsets(self) -> dict[int, int]:
        """Log end offset of every bucket (fresh)."""
        return {b: self.log_tablet(b).refresh() for b in range(self.bucket_num)}

    def earliest_offsets(self) -> dict[int, int]:
        """First retained offset of every bucket."""
        return {b: self.log_tablet(b).earliest_offset for b in range(self.bucket_num)}

    def scan_log(self, *, start_offsets: Mapping[int, int] | None = None,
                 end_offsets: Mapping[int, int] | None = None, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """``Table.scan_log`` over these log tablets."""
        return scan_log(self, start_offsets=start_offsets, end_offsets=end_offsets, columns=columns)  # type: ignore[arg-type]


def log_reader(live: Table) -> LogReader:
    """The reader of a live table (one per Table object)."""
    reader = _READERS.get(live)
    if reader is None:
        reader = _READERS[live] = LogReader(live)
    return reader


@dataclass(frozen=True, slots=True)
class LiveOffsets:
    """The partitions of a live table at one moment, with every bucket's end and earliest offsets.

    `handles` maps a partition name (None: the unpartitioned table) to its handle, `ids` a partition name to
    its id (a dropped and re-created partition gets a new id and starts at offset 0).
    """

    handles: dict[str | None, Table]
    end: dict[tuple[str | None, int], int]
    earliest: dict[tuple[str | None, int], int]
    ids: dict[str, str]

    def of(self, name: str | None, offsets: Mapping[tuple[str | None, int], int]) -> dict[int, int]:
        """``{bucket: offset}`` of one partition."""
        return {b: o for (p, b), o in offsets.items() if p == name}


def live_offsets(live: Table) -> LiveOffsets:
    """End offsets (fresh), then earliest offsets, of every bucket of every partition that exists now."""
    handles: dict[str | None, Table] = {t.partition_name: t for t in live.partition_tables()}
    end: dict[tuple[str | None, int], int] = {}
    earliest: dict[tuple[str | None, int], int] = {}
    ids: dict[str, str] = {}
    for name, handle in handles.items():
        reader = log_reader(handle)
        end.update({(name, b): o for b, o in reader.end_offsets().items()})
        earliest.update({(name, b): o for b, o in reader.earliest_offsets().items()})
        if handle.partition_info is not None:
            ids[name] = handle.partition_info.partition_id  # type: ignore[index]
    if ids:  # a partition dropped while its (now empty) log was listed is not part of this moment
        still = {p.name: p.partition_id for p in live.list_partitions()}
        gone = {n for n, i in ids.items() if still.get(n) != i}
        if gone:
            handles = {n: h for n, h in handles.items() if n not in gone}
            end = {k: o for k, o in end.items() if k[0] not in gone}
            earliest = {k: o for k, o in earliest.items() if k[0] not in gone}
            ids = {n: i for n, i in ids.items() if n not in gone}
    return LiveOffsets(handles, end, earliest, ids)
