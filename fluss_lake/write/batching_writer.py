"""What every writer shares: validated rows wait in a buffer, leave as one batch per bucket, and keep their
per-bucket sequence number until committed (so ``flush`` after a retriable error is exactly once)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.write.write_result import WriteResult

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["BatchingWriter", "split_by_bucket"]


def split_by_bucket(frame: pl.DataFrame, buckets: np.ndarray) -> dict[int, pl.DataFrame]:
    """Rows of each bucket, write order kept."""
    if frame.height == 0:
        return {}
    if buckets.min() == buckets.max():
        return {int(buckets[0]): frame}
    parts = frame.with_columns(pl.Series("__bucket", buckets)).partition_by("__bucket", as_dict=True, maintain_order=True)
    return {int(key[0]): part.drop("__bucket") for key, part in parts.items()}


class BatchingWriter:
    """Buffering, bucketing and idempotent per-bucket commits; subclasses say how to route and commit."""

    def __init__(self, table: "Table", *, buffer_rows: int) -> None:
        self.table = table
        self.buffer_rows = buffer_rows
        self.writer_id = uuid.uuid4().hex
        self._buffer: list[pl.DataFrame] = []
        self._buffered_rows = 0
        self._done = WriteResult()
        self._sequences: dict[int, int] = {}
        self._pending: dict[int, tuple[pl.DataFrame, int]] = {}

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row."""
        raise NotImplementedError

    def _commit(self, bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Commit one bucket's batch (idempotently for this writer id and `seq`)."""
        raise NotImplementedError

    def _buffer_frame(self, frame: pl.DataFrame) -> None:
        """Keep validated rows; send a batch once ``buffer_rows`` are waiting (the client's batch bound)."""
        self._buffer.append(frame)
        self._buffered_rows += frame.height
        if self._buffered_rows >= self.buffer_rows:
            self._done = self._done.combine(self._send())

    def flush(self) -> WriteResult:
        """Commit everything buffered; returns what this writer committed since the last flush.

        After a retriable error (``err.retriable``) call ``flush`` again: batches keep their sequence numbers,
        so each is committed exactly once even if the failed attempt did reach the storage.
        """
        result = self._done.combine(self._send())
        self._done = WriteResult()
        if result.offsets:
            self.table.maybe_expire_log()
        return result

    def _send(self) -> WriteResult:
        """Commit the pending per-bucket batches, then turn the buffer into new ones and commit those."""
        if self._pending or self._buffer:
            self.table.connection.check_table_alive(self.table.info)
        result = self._commit_pending()
        if not self._buffer:
            return result
        frame = pl.concat(self._buffer, how="vertical") if len(self._buffer) > 1 else self._buffer[0]
        self._buffer = []
        self._buffered_rows = 0
        for bucket, rows in split_by_bucket(frame, self._buckets(frame)).items():
            self._pending[bucket] = (rows, self._sequences.get(bucket, 0))
            self._sequences[bucket] = self._sequences.get(bucket, 0) + 1
        return result.combine(self._commit_pending())

    def _commit_pending(self) -> WriteResult:
        """Commit every pending batch, forgetting each once it is in the log."""
        offsets: dict[int, tuple[int, int]] = {}
        records = rows_sent = 0
        for bucket, (rows, seq) in list(self._pending.items()):
            header = self._commit(bucket, rows, seq)
            offsets[bucket] = (header.base_offset, header.next_offset)
            records += header.record_count
            rows_sent += rows.height
            del self._pending[bucket]
        return WriteResult(rows_sent, records, offsets)

    def __enter__(self) -> "BatchingWriter":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()
