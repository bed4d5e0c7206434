"""The Table facade: one object per table (or per partition) with the public verbs to write, scan, look up and
read changelogs.

Every verb hands its work to a stage (``write``, ``lookup``, ``changelog``) or to the table's maintenance, each
taking the table's runtime (``fluss_lake.runtime``): the tablets of this process, shared by the whole table's handle
and its partitions' handles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from fluss_lake._utils.arguments import check_int, check_offsets
from fluss_lake.changelog import views
from fluss_lake.changelog.log_scanner import LogScanner, scan_log
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError, SchemaMismatchError, UnsupportedOperationError
from fluss_lake.kv.merge import MergeMode
from fluss_lake.log.filters import Condition, Filters
from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.log.log_reads import batch_headers
from fluss_lake.lookup import state_scan
from fluss_lake.lookup.lookuper import Lookuper, PrefixLookuper
from fluss_lake.lookup.state_scan import BucketState
from fluss_lake.metadata.conform import conform, to_frame
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.runtime import maintenance
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet
from fluss_lake.runtime.verification import IntegrityReport, verify_table
from fluss_lake.scan.sources import scan_lazy
from fluss_lake.write.append_writer import AppendWriter
from fluss_lake.write.upsert_writer import UpsertWriter
from fluss_lake.write.write_result import WriteResult

if TYPE_CHECKING:  # annotation only: a Connection makes its Tables (the one pair of modules that know each other)
    from fluss_lake.connection import Connection

__all__ = ["Table"]


class Table:
    """A log table or primary-key table (or one partition of a partitioned table).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("shop")
    >>> _ = conn.create_table("shop.users", schema={"id": "INT", "name": "STRING"}, primary_key=["id"])
    >>> users = conn.get_table("shop.users")
    >>> _ = users.upsert([{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    >>> _ = users.delete([{"id": 2}])
    >>> users.to_polars().to_dicts()
    [{'id': 1, 'name': 'ann'}]
    """

    def __init__(
        self, connection: Connection, runtime: TableRuntime, *, partition: PartitionInfo | None = None
    ) -> None:
        self._connection = connection
        self._runtime = runtime
        self._partition = partition
        self._children: dict[str, Table] = {}
        self._lookuper: Lookuper | None = None  # reused by lookup(): its per-table point plan is computed once

    def refresh(self) -> Table:
        """Re-read the table metadata from the store (another process may have altered it)."""
        latest = self._runtime.context.catalog.get_table_info(self.path)
        if latest.descriptor != self.info.descriptor:
            self._runtime.reload(latest)
        return self

    # ------------------------------------------------------------ metadata
    @property
    def connection(self) -> Connection:
        """The connection this table was opened from."""
        return self._connection

    @property
    def info(self) -> TableInfo:
        """The table's metadata (id, path, descriptor)."""
        return self._runtime.info

    @property
    def path(self) -> TablePath:
        """``database.table``."""
        return self.info.path

    @property
    def schema(self) -> Schema:
        """The current schema."""
        return self.info.schema

    @property
    def is_primary_key_table(self) -> bool:
        """Whether the table has a primary key."""
        return self.info.is_primary_key_table

    @property
    def partition_keys(self) -> tuple[str, ...]:
        """Partition key columns (empty for an unpartitioned table)."""
        return self.info.partition_keys

    @property
    def is_partitioned(self) -> bool:
        """Whether the table is partitioned (this handle may be the whole table or one partition)."""
        return bool(self.info.partition_keys)

    @property
    def partition_info(self) -> PartitionInfo | None:
        """The partition this handle is scoped to, else None."""
        return self._partition

    @property
    def partition_name(self) -> str | None:
        """The partition this handle is scoped to (Fluss's name, values joined by ``$``), else None."""
        return self._partition.name if self._partition is not None else None

    @property
    def log_compaction_grace_ms(self) -> int:
        """The table's log compaction grace, shared by every process (see ``connect(log_compaction_grace_ms=)``)."""
        return self._runtime.context.grace_ms(self.info)

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self.info.bucket_num

    # ------------------------------------------------------------ partitions
    def list_partitions(self) -> list[PartitionInfo]:
        """The table's partitions (name, spec, id), sorted by name."""
        return self._runtime.list_partitions()

    def create_partition(self, spec: str | Mapping[str, object], *, ignore_if_exists: bool = False) -> PartitionInfo:
        """Add a partition by name (``"eu$20241111"``) or spec (``{"region": "eu", "day": "20241111"}``).

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.sales", schema={"day": "STRING", "id": "INT", "v": "INT"},
        ...                       primary_key=["day", "id"], partition_keys=["day"])
        >>> sales = conn.get_table("d.sales")
        >>> _ = sales.create_partition({"day": "20241111"})
        >>> _ = sales.upsert([{"day": "20241112", "id": 1, "v": 5}])   # creates partition 20241112 on the fly
        >>> [p.name for p in sales.list_partitions()], sales.partition("20241112").to_polars()["v"].to_list()
        (['20241111', '20241112'], [5])
        """
        return self._runtime.create_partition(spec, ignore_if_exists=ignore_if_exists)

    def drop_partition(self, spec: str | Mapping[str, object], *, ignore_if_not_exists: bool = False) -> None:
        """Drop a partition with its data and changelog; no delete records are emitted (as in Fluss)."""
        self._runtime.drop_partition(spec, ignore_if_not_exists=ignore_if_not_exists)

    def partition(self, spec: str | Mapping[str, object]) -> Table:
        """A handle on one existing partition: its own buckets, offsets, log, state and lookups."""
        if self._partition is not None:
            raise UnsupportedOperationError(f"this handle is already scoped to partition {self.partition_name!r}")
        return self._child(self._runtime.get_partition(spec))

    def _tablets(self) -> TabletSet:
        """This handle's tablets (an unpartitioned table or one partition); internal, for tests and tools."""
        return self._runtime.tablets(self._partition)

    def _child(self, found: PartitionInfo) -> Table:
        child = self._children.get(found.name)
        if child is None or child._partition != found:
            child = self._children[found.name] = Table(self._connection, self._runtime, partition=found)
        return child

    def partition_tables(self) -> list[Table]:
        """``[self]`` for an unpartitioned table or a partition handle, else a handle per existing partition."""
        if self._partition is not None or not self.is_partitioned:
            return [self]
        return [self._child(p) for p in self.list_partitions()]

    def auto_partition(self, *, now_ms: int | None = None) -> tuple[list[str], list[str]]:
        """Apply ``table.auto-partition.*`` now: pre-create upcoming partitions and drop those past retention.

        Returns the names created and dropped. Writers run this after a flush at most every ten minutes of the
        table clock (Fluss's coordinator checks every ten minutes); call it to apply retention at a set time.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp(), clock=lambda: 1731283200000); conn.create_database("d")  # 2024-11-11
        >>> _ = conn.create_table("d.ev", schema={"dt": "STRING", "v": "INT"}, partition_keys=["dt"], options={
        ...     "table.auto-partition.enabled": "true", "table.auto-partition.num-retention": "3",
        ...     "table.auto-partition.time-zone": "UTC"})
        >>> ev = conn.get_table("d.ev")
        >>> ev.auto_partition()
        (['20241111', '20241112'], [])
        >>> _ = ev.create_partition("20241108"); ev.auto_partition(now_ms=1731283200000 + 86_400_000)
        (['20241113'], ['20241108'])
        """
        if self._partition is not None:
            raise UnsupportedOperationError("auto_partition() works on the whole table, not one partition's handle")
        now_ms = check_int("now_ms", now_ms, minimum=0, optional=True)
        return maintenance.auto_partition(self._runtime, now_ms=now_ms)

    # ------------------------------------------------------------ offsets and maintenance
    def end_offsets(self) -> dict:
        """Log end offset of every bucket (fresh); keys are ``(partition name, bucket)`` on a partitioned table."""
        return self._runtime.keyed(self._partition, lambda t: t.end_offsets())

    def earliest_offsets(self) -> dict:
        """First retained offset of every bucket (keyed like :meth:`end_offsets`)."""
        return self._runtime.keyed(self._partition, lambda t: t.earliest_offsets())

    def expire_log(self, *, now_ms: int | None = None) -> dict:
        """Apply ``table.log.ttl``: delete whole log batches older than the TTL; returns each bucket's earliest offset.

        Primary-key tables snapshot their state first and keep every batch the snapshot does not cover, so
        expiry never loses state (it bounds the changelog only, as in Fluss). Readers asking for an expired
        offset get :class:`~fluss_lake.OffsetOutOfRangeError`. A non-positive TTL disables expiry.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> clock = [0]
        >>> conn = fl.connect(tempfile.mkdtemp(), clock=lambda: clock[0]); conn.create_database("d")
        >>> _ = conn.create_table("d.events", schema={"v": "INT"}, options={"table.log.ttl": "1 h"})
        >>> events = conn.get_table("d.events")
        >>> for v in range(3):
        ...     clock[0] = v * 3_600_000; _ = events.append([{"v": v}])
        >>> events.expire_log(now_ms=3 * 3_600_000), events.scan_log()["v"].to_list()
        ({0: 2}, [2])
        """
        now_ms = check_int("now_ms", now_ms, minimum=0, optional=True)
        return maintenance.expire_log(self._runtime, self._partition, now_ms=now_ms)

    def compact(self) -> None:
        """Fully compact every bucket's state now (normally it happens as data arrives).

        This is also when ``table.kv.ttl`` takes effect: rows not written for longer than the TTL disappear from
        lookups and scans (no delete record is written to the changelog, as in Fluss).
        """
        maintenance.compact_state(self._runtime, self._partition)

    def compact_log(self, *, now_ms: int | None = None, target_rows: int = 1_000_000) -> int:
        """Merge runs of small committed log batches into larger segment objects; offsets do not change.

        Safe while other processes read and write: only batches older than the connection's
        ``log_compaction_grace_ms`` (never a bucket's newest batch) are merged, and writers whose view of a log is
        older than half of that re-list before committing. Returns how many batches were merged.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp(), log_compaction_grace_ms=0); conn.create_database("d")
        >>> _ = conn.create_table("d.ev", schema={"v": "INT"})
        >>> ev = conn.get_table("d.ev")
        >>> for v in range(5):
        ...     _ = ev.append([{"v": v}])
        >>> ev.compact_log(), ev.scan_log()["_offset"].to_list()
        (4, [0, 1, 2, 3, 4])
        """
        now_ms = check_int("now_ms", now_ms, minimum=0, optional=True)
        target_rows = check_int("target_rows", target_rows, minimum=1)
        return maintenance.compact_log(self._runtime, self._partition, now_ms=now_ms, target_rows=target_rows)

    def snapshot(self) -> dict:
        """Snapshot the state of every bucket now; returns the offset each snapshot replays from."""
        return maintenance.snapshot(self._runtime, self._partition)

    def verify(self, *, repair: bool = False) -> IntegrityReport:
        """Check every stored object of the table (all partitions) as stored now: checksums, decoding, offsets
        without gaps, snapshots naming the segments they recorded. With `repair`, damaged state (snapshots,
        segments, index files) is rebuilt from the log; damaged log objects stay reported (the lake may restore
        them: ``fluss-lake check --repair``).

        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.t", schema={"id": "BIGINT"})
        >>> _ = conn.get_table("d.t").append([{"id": 1}])
        >>> conn.get_table("d.t").verify().ok
        True
        """
        return verify_table(self._runtime, repair=repair)

    # ------------------------------------------------------------ writes
    def new_append(self) -> AppendWriter:
        """A buffering writer for a log table (``append`` then ``flush``)."""
        return AppendWriter(self._runtime, self._partition)

    def new_upsert(
        self,
        *,
        target_columns: Sequence[str] | None = None,
        merge_mode: MergeMode = "default",
        skip_unchanged: bool = False,
    ) -> UpsertWriter:
        """A writer of upserts and deletes for a primary-key table; `target_columns` makes it partial.

        With `skip_unchanged`, an upsert whose merged row equals the current row writes no ``-U/+U`` records
        (jobs use it: a replayed or repeated result row costs no changelog; not on tables with ``table.kv.ttl``).
        """
        return UpsertWriter(
            self._runtime,
            self._partition,
            target_columns=target_columns,
            merge_mode=merge_mode,
            skip_unchanged=skip_unchanged,
        )

    def append(self, data: Any) -> WriteResult:
        """Append rows to a log table and wait until they are committed.

        On a retriable error the exception carries the writer (``err.writer``); ``err.writer.flush()`` retries
        exactly once, whereas calling ``append`` again may add the rows twice if the first attempt landed.
        """
        writer = self.new_append()
        writer.append(data)
        return _flush(writer)

    def upsert(
        self,
        data: Any,
        *,
        target_columns: Sequence[str] | None = None,
        merge_mode: MergeMode = "default",
        skip_unchanged: bool = False,
    ) -> WriteResult:
        """Upsert rows into a primary-key table (one write batch) and wait until committed (retry: see append);
        `skip_unchanged`: see :meth:`new_upsert`."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode, skip_unchanged=skip_unchanged)
        writer.upsert(data)
        return _flush(writer)

    def delete(
        self, keys: Any, *, target_columns: Sequence[str] | None = None, merge_mode: MergeMode = "default"
    ) -> WriteResult:
        """Delete rows by primary key (a partial delete with `target_columns`; retry: see append)."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode)
        writer.delete(keys)
        return _flush(writer)

    # ------------------------------------------------------------ reads of the log
    def new_scan(
        self,
        *,
        columns: Sequence[str] | None = None,
        filters: Filters | None = None,
        change_types: Sequence[str] | None = None,
    ) -> LogScanner:
        """A log scanner: subscribe buckets from offsets, then ``poll`` record batches (only of `change_types`
        if given, as in :meth:`scan_log`)."""
        filters = _filter_values(self.schema, filters)
        return LogScanner(self._runtime, self._partition, columns=columns, filters=filters, change_types=change_types)

    def scan_log(
        self,
        *,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        columns: Sequence[str] | None = None,
        filters: Filters | None = None,
        start_timestamp: int | None = None,
        change_types: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """A bounded read of the log (all buckets by default), with system columns first; `change_types` keeps
        only records of those types (``["-D"]``: the deletes, skipping batches without any unread).

        On a partitioned table the rows of every partition come with a ``_partition`` column first, and offsets
        are keyed by ``(partition name, bucket)``; a partition missing from `start_offsets` is read from its start.
        """
        _check_reads(start_offsets, end_offsets, start_timestamp)
        return scan_log(
            self._runtime,
            self._partition,
            start_offsets=start_offsets,
            end_offsets=end_offsets,
            columns=columns,
            filters=_filter_values(self.schema, filters),
            start_timestamp=start_timestamp,
            change_types=change_types,
        )

    def batch_headers(self, bucket: int, *, start_offset: int | None = None) -> list[BatchHeader]:
        """The headers of one bucket's log batches from `start_offset` (default: the earliest retained), read
        without decoding rows: base offset, record count, commit time, writer id and sequence of each."""
        start_offset = check_int("start_offset", start_offset, minimum=0, optional=True)
        return batch_headers(self._runtime.tablets(self._partition), bucket, start_offset=start_offset)

    def changelog(
        self,
        *,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        start_timestamp: int | None = None,
        with_bucket: bool = False,
    ) -> pl.DataFrame:
        """The ``$changelog`` view: one row per log record (``insert``/``update_before``/...)."""
        _check_reads(start_offsets, end_offsets, start_timestamp)
        return views.changelog(
            self._runtime,
            self._partition,
            start_offsets=start_offsets,
            end_offsets=end_offsets,
            start_timestamp=start_timestamp,
            with_bucket=with_bucket,
        )

    def binlog(
        self,
        *,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        start_timestamp: int | None = None,
        with_bucket: bool = False,
    ) -> pl.DataFrame:
        """The ``$binlog`` view (primary-key tables): updates as one row with ``before`` and ``after``."""
        _check_reads(start_offsets, end_offsets, start_timestamp)
        return views.binlog(
            self._runtime,
            self._partition,
            start_offsets=start_offsets,
            end_offsets=end_offsets,
            start_timestamp=start_timestamp,
            with_bucket=with_bucket,
        )

    # ------------------------------------------------------------ reads of the current rows
    def to_polars(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Current rows: a primary-key table's state, or every row of a log table."""
        return state_scan.read_rows(self._runtime, self._partition, columns=columns)

    def to_lazy(self, *, columns: Sequence[str] | None = None, view: str = "rows") -> pl.LazyFrame:
        """A LazyFrame that reads the table when collected (each collect sees the table as it is then).

        `view` is ``"rows"`` (current rows: a primary-key table's state, scanned bucket by bucket from its
        on-disk segments; every row of a log table), ``"log"`` (every retained log record with its system
        columns, as :meth:`scan_log`) or ``"changelog"`` (the ``$changelog`` view, as :meth:`changelog`).
        Record batches are streamed: only projected columns are decoded, log batches whose statistics
        (``table.statistics.columns``) rule out a filter are skipped unread, and ``head``/``limit`` stop early.

        Examples
        --------
        >>> import tempfile, polars as pl, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.ev", schema={"id": "INT", "v": "STRING"},
        ...                       options={"table.statistics.columns": "id"})
        >>> ev = conn.get_table("d.ev"); _ = ev.append([{"id": 1, "v": "a"}]); _ = ev.append([{"id": 7, "v": "b"}])
        >>> ev.to_lazy().filter(pl.col("id") > 5).select("v").collect()["v"].to_list()  # the first batch unread
        ['b']
        >>> ev.to_lazy(view="changelog").select("_change_type", "id").collect().rows()
        [('insert', 1), ('insert', 7)]
        """
        return scan_lazy(self._runtime, self._partition, view=view, columns=columns)

    def limit_scan(self, limit: int, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """At most `limit` rows, reading only until that many are found (Fluss's limit scan, for previews).

        A primary-key table gives current rows (bucket by bucket, each from its on-disk state, stopping early); a
        log table gives its latest records (from each bucket's log end backwards).

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"], bucket_num=2)
        >>> users = conn.get_table("d.u"); _ = users.upsert([{"id": i, "v": i} for i in range(100)])
        >>> users.limit_scan(5).height
        5
        """
        return state_scan.read_limit(self._runtime, self._partition, limit, columns=columns)

    def bucket_state(self, bucket: int) -> BucketState:
        """One bucket's current rows and the log offset they reflect, read together (primary-key tables; on a
        partitioned table, of one partition's handle). Readers of the changelog continue from ``offset``.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.u", schema={"id": "INT", "v": "INT"}, primary_key=["id"])
        >>> users = conn.get_table("d.u"); _ = users.upsert([{"id": 1, "v": 1}]); _ = users.upsert([{"id": 1, "v": 2}])
        >>> state = users.bucket_state(0); state.rows.to_dicts(), state.offset
        ([{'id': 1, 'v': 2}], 3)
        """
        return state_scan.bucket_state(self._runtime, self._partition, bucket)

    def new_lookup(self, *, insert_if_not_exists: bool = False) -> Lookuper:
        """A batched primary-key lookuper (``lookup`` many keys, ``lookup_one`` a single key).

        With `insert_if_not_exists` (Fluss's ``Lookup.enableInsertIfNotExists``) a key it does not find is
        inserted with only its key columns (the auto-increment column numbered, others null) and its new row
        returned; refused here if a non-key column other than the auto-increment one is NOT NULL.
        """
        return Lookuper(self._runtime, self._partition, insert_if_not_exists=insert_if_not_exists)

    def new_prefix_lookup(self, columns: Sequence[str] | None = None) -> PrefixLookuper:
        """A lookuper by bucket-key prefix (the bucket key must be a leading prefix of the primary key)."""
        return PrefixLookuper(self._runtime, self._partition, columns)

    def lookup(self, keys: Any, *, with_found: bool = False, with_offsets: bool = False) -> pl.DataFrame:
        """Current rows for the given primary keys, in key order; absent keys give all-null value columns (see
        :meth:`Lookuper.lookup <fluss_lake.lookup.lookuper.Lookuper.lookup>` for `with_found`, `with_offsets`)."""
        lookuper = self._lookuper
        if lookuper is None:
            lookuper = self._lookuper = self.new_lookup()
        return lookuper.lookup(keys, with_found=with_found, with_offsets=with_offsets)

    def lookup_one(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The current row of one primary key (a dict of its columns), or None: the low-latency point path (see
        :meth:`Lookuper.lookup_one <fluss_lake.lookup.lookuper.Lookuper.lookup_one>`).

        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.u", schema={"id": "BIGINT", "name": "STRING"}, primary_key=["id"])
        >>> users = conn.get_table("d.u"); _ = users.upsert([{"id": 1, "name": "ann"}])
        >>> users.lookup_one({"id": 1}), users.lookup_one({"id": 2})
        ({'id': 1, 'name': 'ann'}, None)
        """
        lookuper = self._lookuper
        if lookuper is None:
            lookuper = self._lookuper = self.new_lookup()
        return lookuper.lookup_one(key)

    def prefix_lookup(self, keys: Any, *, with_offsets: bool = False) -> pl.DataFrame:
        """Every current row whose bucket key equals one of the given prefixes (see :meth:`PrefixLookuper.lookup
        <fluss_lake.lookup.lookuper.PrefixLookuper.lookup>`)."""
        return self.new_prefix_lookup().lookup(keys, with_offsets=with_offsets)

    def __repr__(self) -> str:
        kind = "primary-key" if self.is_primary_key_table else "log"
        where = f" partition {self.partition_name}" if self._partition is not None else ""
        return f"<Table {self.path}{where} ({kind}, {self.bucket_num} bucket(s))>"


def _check_reads(start_offsets: Mapping | None, end_offsets: Mapping | None, start_timestamp: int | None) -> None:
    """Offsets and timestamps of a log read: whole numbers, never bools (a start before the log is
    OffsetOutOfRangeError, which says where the log starts; a negative end is never meaningful)."""
    check_offsets("start_offsets", start_offsets)
    check_offsets("end_offsets", end_offsets, minimum=0)
    check_int("start_timestamp", start_timestamp, minimum=0, optional=True)


#: Column types whose filter values go through the write path's rules (:func:`_filter_values`).
_CONFORMED_TYPES = (pl.Date, pl.Datetime, pl.Time, pl.Boolean, pl.Struct, pl.List, pl.Array)


def _filter_values(schema: Schema, filters: Filters | None) -> Filters | None:
    """Filter values held to the rules of writes: a value a write of that column would refuse is refused here
    (a bool for a number or a number for a BOOLEAN, dates and times outside years 1 to 9999, a ROW's unknown
    fields), Arrow scalars become values, and dicts and lists for ROW and ARRAY columns take the column's field
    types. Numbers for numeric columns compare as given (``v < 1.5`` on an INT column is a fine filter)."""
    if not filters:
        return filters
    if isinstance(filters[0], tuple):
        return [_condition_values(schema, c) for c in filters]  # type: ignore[arg-type]
    return [[_condition_values(schema, c) for c in g] if isinstance(g, list | tuple) else g for g in filters]


def _condition_values(schema: Schema, condition: Condition) -> Condition:
    """One ``(column, op, value)`` with its values conformed (anything malformed is left to the filter checks)."""
    if not (isinstance(condition, tuple) and len(condition) == 3 and condition[0] in schema.names):
        return condition
    column, op, value = condition
    many = str(op).lower() in ("in", "not in", "between")
    if many and not isinstance(value, list | tuple | set | frozenset):
        return condition
    values = list(value) if many else [value]
    dtype = schema.column(column).dtype
    scalars = [isinstance(v, pa.Scalar) for v in values]
    if not (isinstance(dtype, _CONFORMED_TYPES) or any(scalars) or any(isinstance(v, bool) for v in values)):
        return condition
    try:
        plain = [v for v, scalar in zip(values, scalars, strict=True) if not scalar]
        checked = iter(conform(to_frame([{column: v} for v in plain], schema), schema, required=[column])[column])
        nested = isinstance(dtype, pl.Struct | pl.List | pl.Array)  # ROW/ARRAY values take the column's field types
        out = []
        for v, scalar in zip(values, scalars, strict=True):
            if scalar:  # an Arrow scalar: checked (temporal range) and converted as Arrow data is in writes
                arrow = to_frame(pa.table({column: pa.array([v], type=v.type)}), schema)
                out.append(conform(arrow, schema, required=[column])[column][0])
            else:
                conformed = next(checked)
                out.append(conformed if nested else v)  # Python dates and numbers keep their exact value
    except SchemaMismatchError as exc:
        raise InvalidConfigError(f"filter on {column!r}: {exc}") from None
    if not many:
        return (column, op, out[0])
    return (column, op, out if isinstance(value, list) else tuple(out))


def _flush(writer: AppendWriter | UpsertWriter) -> WriteResult:
    """Flush a one-shot writer; a retriable failure hands the writer to the caller for an exactly-once retry."""
    try:
        return writer.flush()
    except FlussLakeError as exc:
        if exc.retriable:
            exc.writer = writer  # type: ignore[attr-defined]
            exc.add_note("retry exactly once with err.writer.flush(); calling the write again may apply it twice")
        raise
