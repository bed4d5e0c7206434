"""The tablets of one physical table (an unpartitioned table, or one partition) in this process.

A bucket's log (and, on a primary-key table, its state) is opened on first use and kept: a tablet's view of its
log is probed forward, never listed again. A tablet set is a :class:`~fluss_lake.log.log_source.LogSource`, so the
bounded log reads take it directly.
"""

from __future__ import annotations

import os
import threading

from fluss_lake import options as opt
from fluss_lake.catalog import data_prefix
from fluss_lake.exceptions import UnsupportedOperationError
from fluss_lake.io import layout
from fluss_lake.kv.auto_increment import AutoIncrementSequence
from fluss_lake.kv.kv_tablet import KvTablet
from fluss_lake.log.log_tablet import LogTablet
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.runtime.context import RuntimeContext

__all__ = ["TabletSet"]


class TabletSet:
    """Per-bucket log and state tablets of an unpartitioned table or of one partition."""

    def __init__(
        self, context: RuntimeContext, info: TableInfo, partition: PartitionInfo | None, *, writer_id: str
    ) -> None:
        self.context = context
        self.info = info
        self.partition = partition
        self.prefix = data_prefix(info, partition)
        self.writer_id = writer_id
        self._logs: dict[int, LogTablet] = {}
        self._kv: dict[int, KvTablet] = {}
        self._open_lock = threading.Lock()

    @property
    def name(self) -> str | None:
        """The partition's name (None: an unpartitioned table)."""
        return self.partition.name if self.partition is not None else None

    @property
    def schema(self) -> Schema:
        """The table's current schema."""
        return self.info.schema

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self.info.bucket_num

    def reload(self, info: TableInfo) -> None:
        """Adopt new metadata (after ALTER): open state tablets pick up the new schema."""
        self.info = info
        for tablet in self._kv.values():
            tablet.schema = info.schema.polars_schema
            tablet.schema_id = info.schema.schema_id
            tablet.kv.schema = info.schema.polars_schema

    def log_tablet(self, bucket: int) -> LogTablet:
        """The log of one bucket (a primary-key table's changelog, whose state is then opened too)."""
        if self.info.is_primary_key_table:
            return self.kv_tablet(bucket).log
        tablet = self._logs.get(bucket)
        if tablet is None:
            tablet = self._logs.setdefault(
                bucket,
                LogTablet(
                    self.context.store,
                    layout.log_prefix(self.prefix, bucket),
                    bucket,
                    grace_s=self.context.grace_ms(self.info) / 1000,
                    checksums_required=self.info.checksums,
                ),
            )
        return tablet

    def fresh_log_tablet(self, bucket: int) -> LogTablet:
        """A new view of one bucket's log that shares nothing with the cached tablets (verification reads the log
        without restoring a primary-key bucket's state, which may be what is damaged)."""
        return LogTablet(
            self.context.store,
            layout.log_prefix(self.prefix, bucket),
            bucket,
            grace_s=self.context.grace_ms(self.info) / 1000,
            checksums_required=self.info.checksums,
        )

    def reopen_kv(self, bucket: int) -> KvTablet:
        """Open a primary-key bucket's state anew (restored from the store, as a new process would)."""
        with self._open_lock:
            self._kv.pop(bucket, None)
        return self.kv_tablet(bucket)

    def kv_tablet(self, bucket: int) -> KvTablet:
        """State + changelog of one bucket of a primary-key table (restored on first use)."""
        if not self.info.is_primary_key_table:
            raise UnsupportedOperationError(f"{self.info.path} is a log table; it has no primary-key state")
        tablet = self._kv.get(bucket)
        if tablet is None:
            with self._open_lock:  # threads racing to open a bucket restore it once
                tablet = self._kv.get(bucket)
                if tablet is None:
                    tablet = self._kv[bucket] = self._open_kv(bucket)
        return tablet

    def opened_kv_tablet(self, bucket: int) -> KvTablet | None:
        """The bucket's state tablet if this process opened it already (nothing is restored)."""
        return self._kv.get(bucket)

    def _open_kv(self, bucket: int) -> KvTablet:
        info, context = self.info, self.context
        compression, level = info.log_compression
        local = os.path.join(context.local_dir, info.table_id, self.partition.partition_id if self.partition else "")
        return KvTablet(
            store=context.store,
            table_prefix=self.prefix,
            bucket=bucket,
            schema=info.schema.polars_schema,
            schema_id=info.schema.schema_id,
            primary_key=info.schema.primary_key,
            prefix_key=info.prefix_key,
            local_dir=local,
            writer_id=self.writer_id,
            clock=context.clock,
            compression=compression,
            compression_level=level,
            snapshot_every=context.snapshot_every,
            kv_ttl_ms=opt.parse_duration_ms(opt.KV_TTL, info.options.get(opt.KV_TTL, "0ms")),
            log_grace_s=context.grace_ms(info) / 1000,
            checksums_required=info.checksums,
            auto_increment=self._auto_increment(bucket),
        )

    def _auto_increment(self, bucket: int) -> AutoIncrementSequence | None:
        """The bucket's view of the table's auto-increment sequence (one per table, shared by its partitions)."""
        info = self.info
        column = info.auto_increment_column
        if column is None:
            return None
        spec = info.schema.column(column)
        return AutoIncrementSequence(
            store=self.context.store,
            folder=layout.auto_increment_folder(data_prefix(info), spec.column_id),
            column=column,
            dtype=spec.dtype,
            cache_size=info.auto_increment_cache_size,
            bucket=bucket,
            partition_id=self.partition.partition_id if self.partition is not None else None,
            writer_id=self.writer_id,
            clock=self.context.clock,
        )

    def end_offsets(self) -> dict[int, int]:
        """Log end offset of every bucket (fresh)."""
        return {b: self.log_tablet(b).refresh() for b in range(self.bucket_num)}

    def earliest_offsets(self) -> dict[int, int]:
        """First retained offset of every bucket."""
        return {b: self.log_tablet(b).earliest_offset for b in range(self.bucket_num)}

    def check_alive(self) -> None:
        """Raise if the table or this partition was dropped (or re-created) since they were opened."""
        catalog = self.context.catalog
        catalog.check_table_alive(self.info)
        if self.partition is not None:
            catalog.check_partition_alive(self.info, self.partition)

    def __repr__(self) -> str:
        where = f" partition {self.name}" if self.partition is not None else ""
        return f"<TabletSet {self.info.path}{where}>"
