"""What every writer shares: validated rows wait in a buffer, leave as one batch per bucket, and keep their
per-bucket sequence number until committed (so ``flush`` after a retriable error is exactly once)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from fluss_lake.exceptions import PartitionNotExistError
from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.write.partition_router import PARTITION_COLUMN, route_partitions
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
        # per (partition name or None, bucket): the next batch sequence, and the batch waiting to be committed
        self._sequences: dict[tuple[str | None, int], int] = {}
        self._pending: dict[tuple[str | None, int], tuple[pl.DataFrame, int]] = {}
        self._targets: dict[str | None, Table] = {None: table}
        self._partitioned = table._is_partitioned_parent()

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row."""
        raise NotImplementedError

    def _commit(self, target: "Table", bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Commit one bucket's batch of `target` (the table or one partition) idempotently for this writer and `seq`."""
        raise NotImplementedError

    def _buffer_frame(self, frame: pl.DataFrame) -> None:
        """Keep validated rows; send a batch once ``buffer_rows`` are waiting (the client's batch bound).

        On a partitioned table the rows' partitions are resolved (and created if missing) here, so a batch with a
        bad partition value is rejected before anything is buffered or created.
        """
        if self._partitioned:
            frame, handles = route_partitions(self.table, frame)
            self._targets.update(handles)
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
            self.table.maybe_maintain()
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
        if self._partitioned:
            by_partition = {key[0]: part.drop(PARTITION_COLUMN) for key, part in
                            frame.partition_by(PARTITION_COLUMN, as_dict=True, maintain_order=True).items()}
        else:
            by_partition = {None: frame}
        for name, part in by_partition.items():
            for bucket, rows in split_by_bucket(part, self._buckets(part)).items():
                slot = (name, bucket)
                self._pending[slot] = (rows, self._sequences.get(slot, 0))
                self._sequences[slot] = self._sequences.get(slot, 0) + 1
        return result.combine(self._commit_pending())

    def _commit_pending(self) -> WriteResult:
        """Commit every pending batch, forgetting each once it is in the log."""
        offsets: dict = {}
        records = rows_sent = 0
        checked: set[str] = set()
        for slot, (rows, seq) in list(self._pending.items()):
            name, bucket = slot
            target = self._targets[name]
            if name is not None and name not in checked:
                try:
                    self.table.connection.check_partition_alive(self.table.info, target.partition_info)
                except PartitionNotExistError:
                    self.table._forget_partition(name)
                    raise
                checked.add(name)
            header = self._commit(target, bucket, rows, seq)
            offsets[bucket if name is None else slot] = (header.base_offset, header.next_offset)
            records += header.record_count
            rows_sent += rows.height
            del self._pending[slot]
        return WriteResult(rows_sent, records, offsets)

    def __enter__(self) -> "BatchingWriter":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()
