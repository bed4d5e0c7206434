"""Appends to log tables: validate on ``append``, group into one batch per bucket, commit on ``flush``."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import UnsupportedOperationError
from fluss_lake.log.log_batch import BatchHeader, encode_batch
from fluss_lake.metadata.conform import conform, to_frame
from fluss_lake.metadata.descriptor import STATS_TYPES, TableInfo
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet
from fluss_lake.write.batching_writer import BatchingWriter

__all__ = ["AppendWriter"]


class AppendWriter(BatchingWriter):
    """A buffering writer for a log table; use as a context manager or call :meth:`flush`.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("web")
    >>> _ = conn.create_table("web.clicks", schema={"user": "BIGINT", "url": "STRING"}, bucket_num=2,
    ...                       bucket_keys=["user"])
    >>> with conn.get_table("web.clicks").new_append() as writer:
    ...     writer.append([{"user": 1, "url": "/a"}, {"user": 2, "url": "/b"}])
    >>> conn.get_table("web.clicks").to_polars().height
    2
    """

    def __init__(
        self, runtime: TableRuntime, partition: PartitionInfo | None = None, *, buffer_rows: int = 1_000_000
    ) -> None:
        if runtime.info.is_primary_key_table:
            raise UnsupportedOperationError(
                f"{runtime.info.path} has a primary key: write it with upsert() or delete() (new_upsert() for a "
                "buffering writer), not append()"
            )
        super().__init__(runtime, partition, buffer_rows=buffer_rows)

    def append(self, data: Any) -> None:
        """Validate rows and buffer them; raises before buffering anything if they do not fit."""
        schema = self.runtime.schema
        frame = conform(
            to_frame(data, schema),
            schema,
            required=schema.names,
            not_null_checked=[c.name for c in schema.columns if not c.nullable],
            key_columns=self.runtime.info.bucket_keys,
        )
        if frame.height:
            self._buffer_frame(frame)

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row: hash of the bucket key, else sticky or round-robin per batch."""
        info = self.runtime.info
        if info.bucket_keys:
            return self.runtime.buckets_of(frame)
        if info.options.get(opt.NO_KEY_ASSIGNER, "sticky") == "round_robin":
            bucket = self.runtime.next_round_robin_bucket()
            return np.full(frame.height, bucket, dtype=np.int32)
        return np.full(frame.height, random.randrange(info.bucket_num), dtype=np.int32)

    def _commit(self, target: TabletSet, bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Append one bucket's batch at its log end."""
        info = self.runtime.info
        stats = _stats_columns(info)
        compression, level = info.log_compression

        def build(base: int, commit_ts: int) -> tuple[bytes, BatchHeader]:
            data = encode_batch(
                rows=rows,
                base_offset=base,
                commit_ts=commit_ts,
                schema_id=info.schema.schema_id,
                writer_id=self.writer_id,
                batch_seq=seq,
                stats_columns=stats,
                compression=compression,
                compression_level=level,
            )
            return data, BatchHeader(base, rows.height, commit_ts, info.schema.schema_id, self.writer_id, batch_seq=seq)

        return target.log_tablet(bucket).append(
            build, self.runtime.context.clock, writer_id=self.writer_id, batch_seq=seq
        )


def _stats_columns(info: TableInfo) -> tuple[str, ...]:
    """Columns with per-batch statistics (``table.statistics.columns``: unset, ``*`` or a list)."""
    value = info.options.get(opt.STATISTICS_COLUMNS)
    if not value:
        return ()
    if value.strip() == "*":
        return tuple(c.name for c in info.schema.columns if isinstance(c.dtype, STATS_TYPES))
    return tuple(s.strip() for s in value.split(",") if s.strip())
