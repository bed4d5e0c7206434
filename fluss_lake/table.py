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
from fluss_lake.exceptions import FlussLakeError, UnsupportedOperationError
from fluss_lake.kv.kv_tablet import KvTablet
from fluss_lake.kv.merge import MergeSpec
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.descriptor import TableInfo, field_aggregations
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

    def __init__(self, connection: "Connection", info: TableInfo) -> None:
        self.connection = connection
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
        pk, bk = self.schema.primary_key, self.info.bucket_keys
        return bk if pk and len(bk) < len(pk) and tuple(pk[: len(bk)]) == bk else ()

    def _compression(self) -> tuple[str | None, int | None]:
        options = self.info.options
        level = options.get(opt.LOG_ZSTD_LEVEL)
        return options.get(opt.LOG_COMPRESSION, "zstd"), int(level) if level else (3 if options.get(opt.LOG_COMPRESSION, "zstd") == "zstd" else None)

    # ------------------------------------------------------------ tablets
    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket (primary-key tables: its changelog)."""
        if self.is_primary_key_table:
            return self.kv_tablet(bucket).log
        tablet = self._log_tablets.get(bucket)
        if tablet is None:
            prefix = f"{self.connection.table_prefix(self.info)}/log/b{bucket:05d}"
            tablet = self._log_tablets.setdefault(bucket, LogTablet(self.connection.store, prefix, bucket))
        return tablet

    def kv_tablet(self, bucket: int) -> KvTablet:
        """State + changelog of one bucket of a primary-key table (restored on first use)."""
        if not self.is_primary_key_table:
            raise UnsupportedOperationError(f"{self.path} is a log table; it has no primary-key state")
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
                store=self.connection.store, table_prefix=self.connection.table_prefix(self.info), bucket=bucket,
                schema=self.schema.polars_schema, schema_id=self.schema.schema_id,
                primary_key=self.schema.primary_key, prefix_key=self.prefix_key,
                local_dir=os.path.join(self.connection.local_dir, self.info.table_id), writer_id=self.writer_id,
                clock=self.connection.clock, compression=compression, compression_level=level,
                snapshot_every=self.connection.snapshot_every,
                kv_ttl_ms=opt.parse_duration_ms("table.kv.ttl", self.info.options.get("table.kv.ttl", "0ms")))
        return tablet

    def end_offsets(self) -> dict[int, int]:
        """Log end offset of every bucket (fresh)."""
        return {b: self.log_tablet(b).refresh() for b in range(self.bucket_num)}

    def earliest_offsets(self) -> dict[int, int]:
        """First retained offset of every bucket."""
        return {b: self.log_tablet(b).earliest_offset for b in range(self.bucket_num)}

    def maybe_expire_log(self) -> None:
        """Apply ``table.log.ttl`` if it is set and this process last did so over ten minutes ago (writers call
        this after each flush, so retention needs no separate service)."""
        if opt.LOG_TTL not in self.info.options:
            return
        now = self.connection.clock()
        if now - self._last_expiry_ms >= _EXPIRY_CHECK_MS:
            self._last_expiry_ms = now
            self.expire_log(now_ms=now)

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
        for bucket in range(self.bucket_num):
            self.kv_tablet(bucket).compact()

    def snapshot(self) -> dict[int, int]:
        """Snapshot the state of every bucket now; returns the offset each snapshot replays from."""
        return {b: self.kv_tablet(b).snapshot() for b in range(self.bucket_num)}

    # ------------------------------------------------------------ writes
    def buckets_of(self, frame: pl.DataFrame) -> "np.ndarray":
        """Bucket of every row by its bucket key (all zero, without hashing, for a one-bucket table)."""
        import numpy as np

        from fluss_lake.write.bucket_assigner import assign_buckets

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

    def new_upsert(self, *, target_columns: Sequence[str] | None = None, merge_mode: str = "default") -> "UpsertWriter":
        """A writer of upserts and deletes for a primary-key table; `target_columns` makes it partial."""
        from fluss_lake.write.upsert_writer import UpsertWriter

        return UpsertWriter(self, target_columns=target_columns, merge_mode=merge_mode)

    def append(self, data: Any) -> "WriteResult":
        """Append rows to a log table and wait until they are committed.

        On a retriable error the exception carries the writer (``err.writer``); ``err.writer.flush()`` retries
        exactly once, whereas calling ``append`` again may add the rows twice if the first attempt landed.
        """
        writer = self.new_append()
        writer.append(data)
        return _flush(writer)

    def upsert(self, data: Any, *, target_columns: Sequence[str] | None = None,
               merge_mode: str = "default") -> "WriteResult":
        """Upsert rows into a primary-key table (one write batch) and wait until committed (retry: see append)."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode)
        writer.upsert(data)
        return _flush(writer)

    def delete(self, keys: Any, *, target_columns: Sequence[str] | None = None,
               merge_mode: str = "default") -> "WriteResult":
        """Delete rows by primary key (a partial delete with `target_columns`; retry: see append)."""
        writer = self.new_upsert(target_columns=target_columns, merge_mode=merge_mode)
        writer.delete(keys)
        return _flush(writer)

    # ------------------------------------------------------------ reads
    def new_scan(self, *, columns: Sequence[str] | None = None, filters: "Filters | None" = None) -> "LogScanner":
        """A log scanner: subscribe buckets from offsets, then ``poll`` record batches."""
        from fluss_lake.log.log_scanner import LogScanner

        return LogScanner(self, columns=columns, filters=filters)

    def scan_log(self, *, start_offsets: Mapping[int, int] | None = None, end_offsets: Mapping[int, int] | None = None,
                 columns: Sequence[str] | None = None, filters: "Filters | None" = None,
                 start_timestamp: int | None = None) -> pl.DataFrame:
        """A bounded read of the log (all buckets by default), with system columns first."""
        from fluss_lake.log.log_scanner import scan_log

        return scan_log(self, start_offsets=start_offsets, end_offsets=end_offsets, columns=columns, filters=filters,
                        start_timestamp=start_timestamp)

    def to_polars(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Current rows: a primary-key table's state, or every row of a log table."""
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

    def prefix_lookup(self, keys: Any) -> pl.DataFrame:
        """Every current row whose bucket key equals one of the given prefixes."""
        return self.new_prefix_lookup().lookup(keys)

    def changelog(self, **kwargs: Any) -> pl.DataFrame:
        """The ``$changelog`` view: one row per log record (``insert``/``update_before``/...)."""
        from fluss_lake.changelog.views import changelog_view

        return changelog_view(self, **kwargs)

    def binlog(self, **kwargs: Any) -> pl.DataFrame:
        """The ``$binlog`` view (primary-key tables): updates as one row with ``before`` and ``after``."""
        from fluss_lake.changelog.views import binlog_view

        return binlog_view(self, **kwargs)

    def __repr__(self) -> str:
        kind = "primary-key" if self.is_primary_key_table else "log"
        return f"<Table {self.path} ({kind}, {self.bucket_num} bucket(s))>"


def _flush(writer: Any) -> "WriteResult":
    """Flush a one-shot writer; a retriable failure hands the writer to the caller for an exactly-once retry."""
    try:
        return writer.flush()
    except FlussLakeError as exc:
        if exc.retriable:
            exc.writer = writer  # type: ignore[attr-defined]
            exc.add_note("retry exactly once with err.writer.flush(); calling the write again may apply it twice")
        raise
