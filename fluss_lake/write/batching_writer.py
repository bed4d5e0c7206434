"""What every writer shares: validated rows wait in a buffer, leave as one batch per bucket, and keep their
per-bucket sequence number until committed (so ``flush`` after a retriable error is exactly once)."""

from __future__ import annotations

import uuid

import numpy as np
import polars as pl

from fluss_lake.exceptions import PartitionNotExistError
from fluss_lake.keys.bucketing import split_by_bucket
from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.maintenance import maybe_maintain
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet
from fluss_lake.write.partition_router import PARTITION_COLUMN, route_partitions
from fluss_lake.write.write_result import WriteResult

__all__ = ["BatchingWriter"]


class BatchingWriter:
    """Buffering, bucketing and idempotent per-bucket commits; subclasses say how to route and commit."""

    def __init__(self, runtime: TableRuntime, partition: PartitionInfo | None = None, *, buffer_rows: int) -> None:
        self.runtime = runtime
        self.buffer_rows = buffer_rows
        self.writer_id = uuid.uuid4().hex
        self._buffer: list[pl.DataFrame] = []
        self._buffered_rows = 0
        self._done = WriteResult()
        # per (partition name or None, bucket): the next batch sequence, and the batch waiting to be committed
        self._sequences: dict[tuple[str | None, int], int] = {}
        self._pending: dict[tuple[str | None, int], tuple[pl.DataFrame, int]] = {}
        self._partitioned = partition is None and runtime.is_partitioned
        self._targets: dict[str | None, TabletSet] = {} if self._partitioned else {None: runtime.tablets(partition)}

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row."""
        raise NotImplementedError

    def _commit(self, target: TabletSet, bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Commit one bucket's batch of `target` (the table's or one partition's tablets) idempotently for this
        writer and `seq`."""
        raise NotImplementedError

    def _buffer_frame(self, frame: pl.DataFrame) -> None:
        """Keep validated rows; send a batch once ``buffer_rows`` are waiting (the client's batch bound).

        On a partitioned table the rows' partitions are resolved (and created if missing) here, so a batch with a
        bad partition value is rejected before anything is buffered or created.
        """
        if self._partitioned:
            frame, handles = route_partitions(self.runtime, frame)
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
            maybe_maintain(self.runtime)
        return result

    def _send(self) -> WriteResult:
        """Commit the pending per-bucket batches, then turn the buffer into new ones and commit those."""
        if self._pending or self._buffer:
            self.runtime.check_alive()
        result = self._commit_pending()
        if not self._buffer:
            return result
        frame = pl.concat(self._buffer, how="vertical") if len(self._buffer) > 1 else self._buffer[0]
        self._buffer = []
        self._buffered_rows = 0
        if self._partitioned:
            by_partition = {
                key[0]: part.drop(PARTITION_COLUMN)
                for key, part in frame.partition_by(PARTITION_COLUMN, as_dict=True, maintain_order=True).items()
            }
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
                    target.check_alive()
                except PartitionNotExistError:
                    self.runtime.forget(name)
                    raise
                checked.add(name)
            header = self._commit(target, bucket, rows, seq)
            offsets[bucket if name is None else slot] = (header.base_offset, header.next_offset)
            records += header.record_count
            rows_sent += rows.height
            del self._pending[slot]
        return WriteResult(rows_sent, records, offsets)

    def __enter__(self) -> BatchingWriter:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()
