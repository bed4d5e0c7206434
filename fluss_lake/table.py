"""The Table facade: one object per table to write, scan, look up and read changelogs.

It owns the per-bucket tablets of this process and delegates each job to its stage module
(write -> log -> kv -> changelog -> lookup).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError, UnsupportedOperationError
from fluss_lake.kv.kv_tablet import KvTablet
from fluss_lake.kv.merge import MergeSpec
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.descriptor import TableInfo, field_aggregations
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath

if TYPE_CHECKING:
    import numpy as np

    from fluss_lake.catalog import Connection
    from fluss_lake.log.filters import Filters
    from fluss_lake.log.log_scanner import LogScanner
    from fluss_lake.lookup.lookuper import Lookuper, PrefixLookuper
    from fluss_lake.write.append_writer import AppendWriter
    from fluss_lake.write.upsert_writer import UpsertWriter, WriteResult

__all__ = ["Table"]

_EXPIRY_CHECK_MS = 600_000


class Table:
    """A log table or primary-key table.

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

    def __init__(self, connection: "Connection", info: TableInfo, *, partition: PartitionInfo | None = None) -> None:
        self.connection = connection
        self.partition_info = partition
        self._partitions: dict[str, Table] = {}
        self.writer_id = uuid.uuid4().hex
        self._log_tablets: dict[int, LogTablet] = {}
        self._kv_tablets: dict[int, KvTablet] = {}
        self._round_robin = -1
        self._last_expiry_ms = -_EXPIRY_CHECK_MS
        self._open_lock = threading.Lock()
        self._reload(info)

    def _reload(self, info: TableInfo) -> None:
        """Adopt new metadata (after ALTER); tablets pick up the new schema."""
        self.info = info
        self._merge_spec = None
        for child in self._partitions.values():
            child._reload(info)
        for tablet in self._kv_tablets.values():
            tablet.schema = info.schema.polars_schema
            tablet.schema_id = info.schema.schema_id
            tablet.kv.schema = info.schema.polars_schema

    def refresh(self) -> "Table":
        """Re-read the table metadata from the store (another process may have altered it)."""
        latest = self.connection.get_table_info(self.path)
        if latest.descriptor != self.info.descriptor:
            self._reload(latest)
        return self

    # ------------------------------------------------------------ metadata
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
    def partition_name(self) -> str | None:
        """The partition this handle is scoped to (Fluss's name, values joined by ``$``), else None."""
        return self.partition_info.name if self.partition_info is not None else None

    def _is_partitioned_parent(self) -> bool:
        return bool(self.info.partition_keys) and self.partition_info is None

    def _require_physical(self, what: str) -> None:
        """Per-bucket operations need an unpartitioned table or one partition's handle."""
        if self._is_partitioned_parent():
            raise UnsupportedOperationError(f"{self.path} is partitioned: {what} works on one partition; use "
                                            "table.partition('<name>') (list_partitions() names them) or "
                                            "partition_tables()")

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self.info.bucket_num

    @property
    def merge_spec(self) -> MergeSpec:
        """What the merge engines need to know about this table."""
        if self._merge_spec is None:
            schema, options = self.schema, self.info.options
            engine = options.get(opt.MERGE_ENGINE)
            self._merge_spec = MergeSpec(
                columns=schema.names, dtypes={c.name: c.dtype for c in schema.columns},
                nullable={c.name: c.nullable for c in schema.columns}, primary_key=schema.primary_key,
                merge_engine=engine, delete_behavior=options.get(opt.DELETE_BEHAVIOR, "allow"),  # type: ignore[arg-type]
                version_column=options.get(opt.VERSIONED_VER_COLUMN),
                aggregations=field_aggregations(options, schema, engine))
        return self._merge_spec

    @property
    def prefix_key(self) -> tuple[str, ...]:
        """The bucket key when it is a strict leading prefix of the primary key (enables prefix lookups)."""
        pk, bk = self.info.descriptor.physical_primary_key(), self.info.bucket_keys
        return bk if pk and len(bk) < len(pk) and tuple(pk[: len(bk)]) == bk else ()

    def _compression(self) -> tuple[str | None, int | None]:
        options = self.info.options
        level = options.get(opt.LOG_ZSTD_LEVEL)
        return options.get(opt.LOG_COMPRESSION, "zstd"), int(level) if level else (3 if options.get(opt.LOG_COMPRESSION, "zstd") == "zstd" else None)

    # ------------------------------------------------------------ partitions
    def list_partitions(self) -> list[PartitionInfo]:
        """The table's partitions (name, spec, id), sorted by name."""
        return self.connection.list_partitions(self.path)

    def create_partition(self, spec: "str | Mapping[str, object]", *, ignore_if_exists: bool = False) -> PartitionInfo:
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
        return self.connection.create_partition(self.path, spec, ignore_if_exists=ignore_if_exists)

    def drop_partition(self, spec: "str | Mapping[str, object]", *, ignore_if_not_exists: bool = False) -> None:
        """Drop a partition with its data and changelog; no delete records are emitted (as in Fluss)."""
        self.connection.drop_partition(self.path, spec, ignore_if_not_exists=ignore_if_not_exists)

    def partition(self, spec: "str | Mapping[str, object]") -> "Table":
        """A handle on one existing partition: its own buckets, offsets, log, state and lookups."""
        if self.partition_info is not None:
            raise UnsupportedOperationError(f"this handle is already scoped to partition {self.partition_name!r}")
        found = self.connection.get_partition(self.path, spec)
        return self._partition_handle(found)

    def _partition_handle(self, found: PartitionInfo) -> "Table":
        child = self._partitions.get(found.name)
        if child is None or child.partition_info != found:
            child = self._partitions[found.name] = Table(self.connection, self.info, partition=found)
        return child

    def _forget_partition(self, name: str) -> None:
        self._partitions.pop(name, None)

    def partition_tables(self) -> list["Table"]:
        """``[self]`` for an unpartitioned table or a partition handle, else a handle per existing partition."""
        if not self._is_partitioned_parent():
            return [self]
        return [self._partition_handle(p) for p in self.list_partitions()]

    def _existing_partitions(self) -> dict[str, "Table"]:
        """Handles of the partitions that exist now, by name."""
        return {t.partition_name: t for t in self.partition_tables()}  # type: ignore[misc]

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
        from fluss_lake.metadata.auto_partition import AutoPartitionStrategy

        if self.partition_info is not None:
            raise UnsupportedOperationError("auto_partition() works on the whole table, not one partition's handle")
        strategy = AutoPartitionStrategy.from_options(self.info.options, self.partition_keys,
                                                      self.merge_spec.dtypes)
        if strategy is None or not strategy.enabled:
            return [], []
        now = self.connection.clock() if now_ms is None else now_ms
        existing = {p.name: p for p in self.list_partitions()}
        dropped = [name for name, p in existing.items() if strategy.is_expired(p.spec[strategy.key], now)]
        for name in dropped:
            self.drop_partition(name, ignore_if_not_exists=True)
        created = []
        for value in strategy.precreate_values(now):
            if value not in existing:
                self.connection.create_partition(self.path, {strategy.key: value}, ignore_if_exists=True, _now_ms=now)
                created.append(value)
        return created, dropped

    # ------------------------------------------------------------ tablets
    def _data_prefix(self) -> str:
        if self.partition_info is not None:
            return self.connection.partition_prefix(self.info, self.partition_info)
        return self.connection.table_prefix(self.info)

    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket (primary-key tables: its changelog)."""
        self._require_physical("log_tablet()")
        if self.is_primary_key_table:
            return self.kv_tablet(bucket).log
        tablet = self._log_tablets.get(bucket)
        if tablet is None:
            prefix = f"{self._data_prefix()}/log/b{bucket:05d}"
            tablet = self._log_tablets.setdefault(bucket, LogTablet(
                self.connection.store, prefix, bucket, grace_s=self.connection.log_compaction_grace_ms / 1000))
        return tablet

    def kv_tablet(self, bucket: int) -> KvTablet:
        """State + changelog of one bucket of a primary-key table (restored on first use)."""
        if not self.is_primary_key_table:
            raise UnsupportedOperationError(f"{self.path} is a log table; it has no primary-key state")
        self._require_physical("kv_tablet()")
        tablet = self._kv_tablets.get(bucket)
        if tablet is None:
            with self._open_lock:
                return self._open_kv_tablet(bucket)
        return tablet

    def _open_kv_tablet(self, bucket: int) -> KvTablet:
        """Create and restore a bucket's tablet once, even if threads race to open it."""
        tablet = self._kv_tablets.get(bucket)
        if tablet is None:
            compression, level = self._compression()
            import os
            tablet = self._kv_tablets[bucket] = KvTablet(
                store=self.connection.store, table_prefix=self._data_prefix(), bucket=bucket,
                schema=self.schema.polars_schema, schema_id=self.schema.schema_id,
                primary_key=self.schema.primary_key, prefix_key=self.prefix_key,
                local_dir=os.path.join(self.connection.local_dir, self.info.table_id,
                                       self.partition_info.partition_id if self.partition_info else ""),
                writer_id=self.writer_id,
                clock=self.connection.clock, compression=compression, compression_level=level,
                snapshot_every=self.connection.snapshot_every,
                kv_ttl_ms=opt.parse_duration_ms("table.kv.ttl", self.info.options.get("table.kv.ttl", "0ms")),
                log_grace_s=self.connection.log_compaction_grace_ms / 1000)
        return tablet

    def end_offsets(self) -> dict:
        """Log end offset of every bucket (fresh); keys are ``(partition name, bucket)`` on a partitioned table."""
        if self._is_partitioned_parent():
            return {(t.partition_name, b): o for t in self.partition_tables() for b, o in t.end_offsets().items()}
        return {b: self.log_tablet(b).refresh() for b in range(self.bucket_num)}

    def earliest_offsets(self) -> dict:
        """First retained offset of every bucket (keyed like :meth:`end_offsets`)."""
        if self._is_partitioned_parent():
            return {(t.partition_name, b): o for t in self.partition_tables() for b, o in t.earliest_offsets().items()}
        return {b: self.log_tablet(b).earliest_offset for b in range(self.bucket_num)}

    def maybe_maintain(self) -> None:
        """Apply ``table.log.ttl`` and auto-partitioning if this process last did so over ten minutes ago (writers
        call this after each flush, so retention needs no separate service)."""
        root = self if self.partition_info is None else self.connection.get_table(self.path)
        auto = root.info.options.get("table.auto-partition.enabled") == "true"
        if opt.LOG_TTL not in root.info.options and not auto:
            return
        now = root.connection.clock()
        if now - root._last_expiry_ms >= _EXPIRY_CHECK_MS:
            root._last_expiry_ms = now
            if auto:
                root.auto_partition(now_ms=now)
            if opt.LOG_TTL in root.info.options:
                root.expire_log(now_ms=now)

    def expire_log(self, *, now_ms: int | None = None) -> dict[int, int]:
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
        if self._is_partitioned_parent():
            return {(t.partition_name, b): o for t in self.partition_tables()
                    for b, o in t.expire_log(now_ms=now_ms).items()}
        ttl = opt.parse_duration_ms(opt.LOG_TTL, self.info.options.get(opt.LOG_TTL, "7 d"))
        earliest = {}
        now = self.connection.clock() if now_ms is None else now_ms
        for bucket in range(self.bucket_num):
            if ttl <= 0:
                earliest[bucket] = self.log_tablet(bucket).earliest_offset
                continue
            covered = self.kv_tablet(bucket).snapshot() if self.is_primary_key_table else None
            earliest[bucket] = self.log_tablet(bucket).expire(now - ttl, covered_until=covered)
        return earliest

    def compact(self) -> None:
        """Fully compact every bucket's state now (normally it happens as data arrives).

        This is also when ``table.kv.ttl`` takes effect: rows not written for longer than the TTL disappear from
        lookups and scans (no delete record is written to the changelog, as in Fluss).
        """
        for table in self.partition_tables():
            for bucket in range(table.bucket_num):
                table.kv_tablet(bucket).compact()

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
        now = self.connection.clock() if now_ms is None else now_ms
        grace = self.connection.log_compaction_grace_ms
        moved = 0
        for table in self.partition_tables():
            for bucket in range(table.bucket_num):
                moved += table.log_tablet(bucket).compact(now_ms=now, grace_ms=grace, target_rows=target_rows,
                                                          compression=table._compression()[0])
        return moved

    def snapshot(self) -> dict:
        """Snapshot the state of every bucket now; returns the offset each snapshot replays from."""
        if self._is_partitioned_parent():
            return {(t.partition_name, b): o for t in self.partition_tables() for b, o in t.snapshot().items()}
        return {b: self.kv_tablet(b).snapshot() for b in range(self.bucket_num)}

    # ------------------------------------------------------------ writes
    def buckets_of(self, frame: pl.DataFrame) -> "np.ndarray":
        """Bucket of every row by its bucket key (all zero, without hashing, for a one-bucket table)."""
        import numpy as np

        from fluss_lake.keys.bucketing import assign_buckets

        info = self.info
        if info.bucket_num == 1:
            return np.zeros(frame.height, dtype=np.int32)
        return assign_buckets([frame.get_column(k).to_arrow() for k in info.bucket_keys], info.bucket_num,
                              lake_format=info.options.get(opt.DATALAKE_FORMAT), names=list(info.bucket_keys))

    def next_round_robin_bucket(self) -> int:
        """The next bucket for a key-less batch under ``client.writer.bucket.no-key-assigner=round_robin``."""
        if self._round_robin < 0:
            import random
            self._round_robin = random.randrange(self.bucket_num)
        else:
            self._round_robin = (self._round_robin + 1) % self.bucket_num
        return self._round_robin

    def new_append(self) -> "AppendWriter":
        """A buffering writer for a log table (``append`` then ``flush``)."""
        from fluss_lake.write.append_writer import AppendWriter

        return AppendWriter(self)

    def new_upsert(self, *, target_columns: Sequence[str] | None = None, merge_mode: str = "default",
                   skip_unchanged: bool = False) -> "UpsertWriter":
        """A writer of upserts and deletes for a primary-key table; `target_columns` makes it partial.

        With `skip_unchanged`, an upsert whose merged row equals the current row writes no ``-U/+U`` records
        (jobs use it: a replayed or repeated result row costs no changelog; not on tables with ``table.kv.ttl``).
        """
        from fluss_lake.write.upsert_writer import UpsertWriter

        return UpsertWriter(self, target_columns=target_columns, merge_mode=merge_mode,
                            skip_unchanged=skip_unchanged)

    def append(self, data: Any) -> "WriteResult":
        """Append rows to a log table and wait until they are committed.

        On a retriable error the exception carries the writer (``err.writer``); ``err.writer.flush()`` retries
        exactly once, whereas calling ``append`` again may add the rows twice if the first attempt landed.
        """
        writer = self.new_append()
        writer.append(data)
        return _flush(writer)

    def upsert(self, data: Any, *, target_columns: Sequence[str] | None = None,
               merge_mode: str = "default", skip_unchanged: bool = False) -> "WriteResult":
        """Upsert rows into a primary-key table (one write batch) and wait until committed (retry: see append);
        `skip_unchanged`: see :meth:`new_upsert`."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode, skip_unchanged=skip_unchanged)
        writer.upsert(data)
        return _flush(writer)

    def delete(self, keys: Any, *, target_columns: Sequence[str] | None = None,
               merge_mode: str = "default") -> "WriteResult":
        """Delete rows by primary key (a partial delete with `target_columns`; retry: see append)."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode)
        writer.delete(keys)
        return _flush(writer)

    # ------------------------------------------------------------ reads
    def new_scan(self, *, columns: Sequence[str] | None = None, filters: "Filters | None" = None,
                 change_types: Sequence[str] | None = None) -> "LogScanner":
        """A log scanner: subscribe buckets from offsets, then ``poll`` record batches (only of `change_types`
        if given, as in :meth:`scan_log`)."""
        from fluss_lake.log.log_scanner import LogScanner

        return LogScanner(self, columns=columns, filters=filters, change_types=change_types)

    def scan_log(self, *, start_offsets: Mapping[int, int] | None = None, end_offsets: Mapping[int, int] | None = None,
                 columns: Sequence[str] | None = None, filters: "Filters | None" = None,
                 start_timestamp: int | None = None, change_types: Sequence[str] | None = None) -> pl.DataFrame:
        """A bounded read of the log (all buckets by default), with system columns first; `change_types` keeps
        only records of those types (``["-D"]``: the deletes, skipping batches without any unread).

        On a partitioned table the rows of every partition come with a ``_partition`` column first, and offsets
        are keyed by ``(partition name, bucket)``; a partition missing from `start_offsets` is read from its start.
        """
        from fluss_lake.log.log_scanner import scan_log

        if self._is_partitioned_parent():
            return self._union("scan_log", start_offsets=start_offsets, end_offsets=end_offsets, columns=columns,
                               filters=filters, start_timestamp=start_timestamp, change_types=change_types)
        return scan_log(self, start_offsets=start_offsets, end_offsets=end_offsets, columns=columns, filters=filters,
                        start_timestamp=start_timestamp, change_types=change_types)

    def _union(self, method: str, *, start_offsets: Mapping | None = None, end_offsets: Mapping | None = None,
               **kwargs: Any) -> pl.DataFrame:
        """One read over every partition of a partitioned table, with a leading ``_partition`` column."""
        frames = []
        for table in self.partition_tables():
            name = table.partition_name
            per = {}
            if start_offsets is not None:
                per["start_offsets"] = {b: o for (n, b), o in start_offsets.items() if n == name}
            if end_offsets is not None:
                per["end_offsets"] = {b: o for (n, b), o in end_offsets.items() if n == name}
                if not per["end_offsets"]:
                    continue
            frame = getattr(table, method)(**per, **kwargs)
            frames.append(frame.select(pl.lit(name, dtype=pl.String).alias("_partition"), pl.all()))
        if frames:
            return pl.concat(frames, how="vertical")
        empty = getattr(Table(self.connection, self.info, partition=_EMPTY_PARTITION), method)(**kwargs)
        return empty.select(pl.lit(None, dtype=pl.String).alias("_partition"), pl.all())

    def to_polars(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Current rows: a primary-key table's state, or every row of a log table."""
        if self._is_partitioned_parent():
            frames = [t.to_polars(columns=columns) for t in self.partition_tables()]
            if frames:
                return pl.concat(frames, how="vertical")
            return pl.DataFrame(schema=self.schema.polars_schema).select(columns or list(self.schema.names))
        if not self.is_primary_key_table:
            frame = self.scan_log(columns=columns)
            return frame.select(columns or list(self.schema.names))
        parts = []
        for bucket in range(self.bucket_num):
            tablet = self.kv_tablet(bucket)
            with tablet.lock:
                tablet.catch_up()
                parts.append(tablet.kv.scan())
        frame = pl.concat(parts, how="vertical") if parts else pl.DataFrame(schema=self.schema.polars_schema)
        return frame.select(columns) if columns else frame

    def to_lazy(self, *, columns: Sequence[str] | None = None) -> pl.LazyFrame:
        """Current rows as a LazyFrame; a primary-key table's state is scanned from its on-disk segments."""
        if self._is_partitioned_parent():
            lazies = [t.to_lazy(columns=columns) for t in self.partition_tables()]
            if lazies:
                return pl.concat(lazies, how="vertical")
            return self.to_polars(columns=columns).lazy()
        if not self.is_primary_key_table:
            return self.to_polars(columns=columns).lazy()
        parts = []
        for bucket in range(self.bucket_num):
            tablet = self.kv_tablet(bucket)
            with tablet.lock:
                tablet.catch_up()
                parts.append(tablet.kv.scan_lazy())
        lazy = pl.concat(parts, how="vertical")
        return lazy.select(columns) if columns else lazy

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
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidConfigError(f"limit must be a positive integer, not {limit!r}")
        names = list(columns or self.schema.names)
        parts: list[pl.DataFrame] = []
        remaining = limit
        for table in self.partition_tables():
            for bucket in range(table.bucket_num):
                if remaining <= 0:
                    break
                if table.is_primary_key_table:
                    tablet = table.kv_tablet(bucket)
                    with tablet.lock:
                        tablet.catch_up()
                        part = tablet.kv.scan_lazy().select(names).head(remaining).collect()
                else:
                    end = table.log_tablet(bucket).refresh()
                    start = max(end - remaining, table.log_tablet(bucket).earliest_offset)
                    part = table.scan_log(start_offsets={bucket: start}, end_offsets={bucket: end},
                                          columns=names).select(names).tail(remaining)
                parts.append(part)
                remaining -= part.height
        if not parts:
            return pl.DataFrame(schema=self.schema.polars_schema).select(names)
        return pl.concat(parts, how="vertical")

    def new_lookup(self) -> "Lookuper":
        """A batched primary-key lookuper."""
        from fluss_lake.lookup.lookuper import Lookuper

        return Lookuper(self)

    def new_prefix_lookup(self, columns: Sequence[str] | None = None) -> "PrefixLookuper":
        """A lookuper by bucket-key prefix (the bucket key must be a leading prefix of the primary key)."""
        from fluss_lake.lookup.lookuper import PrefixLookuper

        return PrefixLookuper(self, columns)

    def lookup(self, keys: Any) -> pl.DataFrame:
        """Current rows for the given primary keys, in key order; absent keys give all-null value columns."""
        return self.new_lookup().lookup(keys)

    def prefix_lookup(self, keys: Any, *, with_offsets: bool = False) -> pl.DataFrame:
        """Every current row whose bucket key equals one of the given prefixes (see :meth:`PrefixLookuper.lookup`)."""
        return self.new_prefix_lookup().lookup(keys, with_offsets=with_offsets)

    def changelog(self, **kwargs: Any) -> pl.DataFrame:
        """The ``$changelog`` view: one row per log record (``insert``/``update_before``/...)."""
        from fluss_lake.changelog.views import changelog_view

        if self._is_partitioned_parent():
            return self._union("changelog", **kwargs)
        return changelog_view(self, **kwargs)

    def binlog(self, **kwargs: Any) -> pl.DataFrame:
        """The ``$binlog`` view (primary-key tables): updates as one row with ``before`` and ``after``."""
        from fluss_lake.changelog.views import binlog_view

        if self._is_partitioned_parent():
            return self._union("binlog", **kwargs)
        return binlog_view(self, **kwargs)

    def __repr__(self) -> str:
        kind = "primary-key" if self.is_primary_key_table else "log"
        where = f" partition {self.partition_name}" if self.partition_info is not None else ""
        return f"<Table {self.path}{where} ({kind}, {self.bucket_num} bucket(s))>"


#: A partition that is never created: reading it gives the empty frame of the right shape.
_EMPTY_PARTITION = PartitionInfo("", {}, "never-created", 0)


def _flush(writer: Any) -> "WriteResult":
    """Flush a one-shot writer; a retriable failure hands the writer to the caller for an exactly-once retry."""
    try:
        return writer.flush()
    except FlussLakeError as exc:
        if exc.retriable:
            exc.writer = writer  # type: ignore[attr-defined]
            exc.add_note("retry exactly once with err.writer.flush(); calling the write again may apply it twice")
        raise
