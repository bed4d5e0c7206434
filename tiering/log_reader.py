"""Reading a live table's log without opening its primary-key state.

A primary-key table's own reads open each bucket's state first (restoring the newest snapshot, which on S3
downloads its segments, and replaying the log tail): tiering and union reads only need the changelog, so they read
through plain ``LogTablet`` objects over the same objects in the store. :class:`LogReader` is a
:class:`~fluss_lake.log.log_source.LogSource` built from public surface only (the store's key layout, the
catalog's data prefix, ``LogTablet``), read with :func:`fluss_lake.log.log_reads.read_buckets`. One reader per live
``Table`` handle is kept, so the per-bucket listings are made once and then only probed forward.

A partitioned table is read partition by partition (``Table.partition_tables()``): its offsets are keyed by
``(partition name, bucket)`` (``(None, bucket)`` for an unpartitioned table), as in the lake's snapshot summary.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from fluss_lake.catalog import data_prefix
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted
from fluss_lake.kv.kv_snapshot import newest_snapshot_offset
from fluss_lake.log.filters import Filters
from fluss_lake.log.log_reads import read_buckets
from fluss_lake.log.log_source import LogSource
from fluss_lake.log.log_tablet import LogTablet, batch_key
from fluss_lake.table import Table

__all__ = ["LiveOffsets", "LogReader", "live_offsets", "log_reader"]

_READERS: weakref.WeakKeyDictionary[Any, LogReader] = weakref.WeakKeyDictionary()


class LogReader(LogSource):
    """The logs of a live table handle (unpartitioned, or one partition) over state-free log tablets."""

    def __init__(self, live: Table) -> None:
        self.live = live
        self.prefix = data_prefix(live.info, live.partition_info)
        self._tablets: dict[int, LogTablet] = {}

    @property
    def schema(self) -> Any:
        """The live table's current schema."""
        return self.live.schema

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self.live.bucket_num

    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket (its own view, listed once, then probed forward)."""
        tablet = self._tablets.get(bucket)
        if tablet is None:
            tablet = self._tablets[bucket] = LogTablet(
                self.live.connection.store,
                layout.log_prefix(self.prefix, bucket),
                bucket,
                grace_s=self.live.log_compaction_grace_ms / 1000,
                checksums_required=self.live.info.checksums,
            )
        return tablet

    def offsets(self) -> dict[int, tuple[int, int]]:
        """``{bucket: (earliest, end)}``: each bucket's log end (fresh), then its first retained offset.

        A view probes forward from the end it knows; when ``table.log.ttl`` expired every batch it knew and the
        batch at that end too, it cannot see past the gap (it then knows no retained batch, while a log always
        keeps its newest one): such a view is listed again.
        """
        found = {}
        for b in range(self.bucket_num):
            tablet = self.log_tablet(b)
            end = tablet.refresh()
            earliest = tablet.earliest_offset
            if end and earliest >= end:
                del self._tablets[b]
                tablet = self.log_tablet(b)
                end = tablet.refresh()
                earliest = tablet.earliest_offset
            if self.live.is_primary_key_table:
                self._check_end(b, end)
            found[b] = (earliest, end)
        return found

    def _check_end(self, bucket: int, end: int) -> None:
        """A primary-key bucket's log must reach the offset its newest state snapshot covers (the state is derived
        from it): a shorter log lost its newest batches, and tiering would miss their changes."""
        covered = newest_snapshot_offset(self.live.connection.store, layout.kv_prefix(self.prefix, bucket))
        if covered is not None and end < covered:
            raise corrupted(
                batch_key(layout.log_prefix(self.prefix, bucket), end),
                f"the log ends at offset {end} but the bucket's state snapshot covers changes up to {covered}: its "
                "newest batches are missing (deleted or lost)",
                what="log batch",
                offsets=(end, covered),
            )

    def end_offsets(self) -> dict[int, int]:
        """Log end offset of every bucket (fresh)."""
        return {b: end for b, (_, end) in self.offsets().items()}

    def earliest_offsets(self) -> dict[int, int]:
        """First retained offset of every bucket."""
        return {b: earliest for b, (earliest, _) in self.offsets().items()}

    def scan_log(
        self,
        *,
        start_offsets: Mapping[int, int] | None = None,
        end_offsets: Mapping[int, int] | None = None,
        columns: Sequence[str] | None = None,
        filters: Filters | None = None,
    ) -> pl.DataFrame:
        """``Table.scan_log`` over these log tablets (`filters` skip batches by their statistics, then rows)."""
        return read_buckets(
            self, start_offsets=start_offsets, end_offsets=end_offsets, columns=columns, filters=filters
        )


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
    """The partitions that exist now, with each bucket's end offset (fresh), then its earliest offset.

    This is what one round resolves of the live table once: the handles, offsets and partition ids it plans,
    reads and commits with (the partitions are listed again only to leave out one dropped meanwhile).
    """
    handles: dict[str | None, Table] = {t.partition_name: t for t in live.partition_tables()}
    end: dict[tuple[str | None, int], int] = {}
    earliest: dict[tuple[str | None, int], int] = {}
    ids: dict[str, str] = {}
    for name, handle in handles.items():
        for b, (first, last) in log_reader(handle).offsets().items():
            end[(name, b)], earliest[(name, b)] = last, first
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
