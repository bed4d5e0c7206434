"""A bucket's append-only log: dense offsets, one immutable object per committed batch.

Batch objects are named by their base offset (``00000000000000000042.arrow``) and created with an atomic
create-if-absent, so two writers racing for the same offset cannot both win; the loser catches up and retries.
Finding the end costs one probe per batch committed since the last look, not a listing of the table.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from fluss_lake.exceptions import OffsetOutOfRangeError
from fluss_lake.io.store import ObjectStore
from fluss_lake.log.log_batch import BatchHeader, LogBatch, decode_batch, decode_header

__all__ = ["LogTablet", "batch_key"]

_SUFFIX = ".arrow"


def batch_key(prefix: str, base_offset: int) -> str:
    """Object key of the batch starting at `base_offset`."""
    return f"{prefix}/{base_offset:020d}{_SUFFIX}"


@dataclass(slots=True)
class _Known:
    """What this process knows of the log: batch base offsets in order, end offset, last commit time."""

    bases: list[int]
    end: int
    last_commit_ts: int
    writers: dict[str, BatchHeader]  # latest batch of each writer seen since this process opened the log


class LogTablet:
    """The log of one table bucket."""

    def __init__(self, store: ObjectStore, prefix: str, bucket: int) -> None:
        self.store = store
        self.bucket = bucket
        self.prefix = prefix
        self._known: _Known | None = None
        self.lock = threading.RLock()  # one Table may be shared by threads

    def _open(self, key: str) -> pa.NativeFile | bytes:
        """A readable handle on a batch object (memory-mapped when local)."""
        path = self.store.local_path(key)
        return pa.memory_map(path) if path is not None else self.store.get(key)

    def _load(self) -> _Known:
        """List the bucket once (collecting temp files of killed writers); afterwards only probe forward."""
        self.store.collect_temp(self.prefix, older_than_s=3600)
        names = [n for n in self.store.list(self.prefix) if n.endswith(_SUFFIX)]
        bases = sorted(int(n[: -len(_SUFFIX)]) for n in names)
        if not bases:
            return _Known([], 0, 0, {})
        last = decode_header(self._open(batch_key(self.prefix, bases[-1])))
        return _Known(bases, last.next_offset, last.commit_ts, {last.writer_id: last})

    def refresh(self) -> int:
        """Catch up with batches other writers committed; returns the log end offset."""
        with self.lock:
            return self._refresh()

    def _refresh(self) -> int:
        if self._known is None:
            self._known = self._load()
        known = self._known
        while True:
            local = self.store.local_path(batch_key(self.prefix, known.end))
            if local is not None and not os.path.exists(local):  # the common case, without an exception
                return known.end
            try:
                header = decode_header(self._open(batch_key(self.prefix, known.end)))
            except FileNotFoundError:
                return known.end
            known.bases.append(known.end)
            known.end = header.next_offset
            known.last_commit_ts = max(known.last_commit_ts, header.commit_ts)
            known.writers[header.writer_id] = header

    @property
    def end_offset(self) -> int:
        """Log end offset as last seen (call :meth:`refresh` for a fresh value)."""
        return self.refresh() if self._known is None else self._known.end

    @property
    def earliest_offset(self) -> int:
        """The first retained offset (re-listed if another process expired the batches we knew)."""
        with self.lock:
            self.refresh()
            assert self._known is not None
            if self._known.bases and not self._exists(self._known.bases[0]):
                self._relist()
            return self._known.bases[0] if self._known.bases else self._known.end

    def _exists(self, base: int) -> bool:
        return self.store.exists(batch_key(self.prefix, base))

    def _relist(self) -> None:
        """Forget batches that are gone (expired by log retention in any process)."""
        assert self._known is not None
        present = {int(n[: -len(_SUFFIX)]) for n in self.store.list(self.prefix) if n.endswith(_SUFFIX)}
        self._known.bases = [b for b in self._known.bases if b in present]

    def expire(self, cutoff_ms: int, *, covered_until: int | None = None) -> int:
        """Delete whole batches committed before `cutoff_ms` (``table.log.ttl``); returns the earliest offset.

        The newest batch always stays (it tells where the log ends). With `covered_until` (primary-key tables:
        the offset a state snapshot replays from) a batch is kept unless all its records lie before it. No
        delete records are written: expiry only shortens the log.
        """
        with self.lock:
            self.refresh()
            assert self._known is not None
            bases = self._known.bases
            removed = 0
            for index, base in enumerate(bases[:-1]):
                following = bases[index + 1]
                if covered_until is not None and following > covered_until:
                    break
                key = batch_key(self.prefix, base)
                try:
                    header = decode_header(self._open(key))
                except FileNotFoundError:  # expired by another process already
                    removed += 1
                    continue
                if header.commit_ts >= cutoff_ms:  # commit times never decrease: the rest is younger
                    break
                self.store.delete(key)
                removed += 1
            del bases[:removed]
            return bases[0] if bases else self._known.end

    def next_commit_ts(self, clock_ms: int) -> int:
        """A commit timestamp for the next batch: the clock, never earlier than the previous batch's."""
        assert self._known is not None
        return max(clock_ms, self._known.last_commit_ts)

    def try_append(self, base_offset: int, data: bytes, header: BatchHeader) -> bool:
        """Commit `data` at `base_offset` if nobody else did; False means: refresh and recompute."""
        with self.lock:
            return self._try_append(base_offset, data, header)

    def _try_append(self, base_offset: int, data: bytes, header: BatchHeader) -> bool:
        assert self._known is not None and base_offset == self._known.end
        if not self.store.put_if_absent(batch_key(self.prefix, base_offset), data):
            return False
        self._known.bases.append(base_offset)
        self._known.end = header.next_offset
        self._known.last_commit_ts = max(self._known.last_commit_ts, header.commit_ts)
        self._known.writers[header.writer_id] = header
        return True

    def committed(self, writer_id: str, batch_seq: int) -> BatchHeader | None:
        """The header of this writer's batch `batch_seq` if it is already in the log (after :meth:`refresh`).

        A write whose answer was lost (the storage endpoint went away) may have landed; retrying it with the same
        writer and sequence then finds it here instead of committing it twice.
        """
        assert self._known is not None
        header = self._known.writers.get(writer_id)
        return header if header is not None and batch_seq >= 0 and header.batch_seq >= batch_seq else None

    def append(self, build: Callable[[int, int], tuple[bytes, BatchHeader]], clock: Callable[[], int],
               max_attempts: int = 10_000, *, writer_id: str = "", batch_seq: int = -1) -> BatchHeader:
        """Commit a batch whose bytes depend only on its base offset and commit time (log tables).

        With a writer id and batch sequence the append is idempotent: a batch already committed is not added again.
        """
        from fluss_lake.exceptions import CommitConflictError

        with self.lock:
            return self._append(build, clock, max_attempts, writer_id, batch_seq, CommitConflictError)

    def _append(self, build, clock, max_attempts, writer_id, batch_seq, conflict) -> BatchHeader:  # noqa: ANN001
        """The body of :meth:`append`, under the lock."""
        for _ in range(max_attempts):
            base = self.refresh()
            done = self.committed(writer_id, batch_seq)
            if done is not None:
                return done
            data, header = build(base, self.next_commit_ts(clock()))
            if self.try_append(base, data, header):
                return header
        raise conflict(f"bucket {self.bucket}: lost the race for the log end {max_attempts} times; retry the write")

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """First offset whose batch was committed at or after `timestamp_ms` (the log end if none).

        Commit timestamps never decrease within a bucket, so this is a binary search over batch headers.
        """
        end = self.refresh()
        assert self._known is not None
        bases = list(self._known.bases)
        lo, hi = 0, len(bases)
        while lo < hi:
            mid = (lo + hi) // 2
            if decode_header(self._open(batch_key(self.prefix, bases[mid]))).commit_ts >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return bases[lo] if lo < len(bases) else end

    def read(self, start: int, end: int | None = None, *, columns: list[str] | None = None,
             header_filter: Callable[[BatchHeader], bool] | None = None) -> Iterator[LogBatch]:
        """Batches overlapping ``[start, end)`` in offset order (rows before `start` cut off).

        `header_filter` may skip whole batches from their header alone (statistics-based skipping).
        """
        stop = self.refresh() if end is None else end
        assert self._known is not None
        bases = list(self._known.bases)
        earliest = bases[0] if bases else self._known.end
        if start < earliest or start > self._known.end:
            raise OffsetOutOfRangeError(f"bucket {self.bucket}: offset {start} is outside the retained log "
                                        f"[{earliest}, {self._known.end}]; start from {earliest} (earliest) or "
                                        f"{self._known.end} (latest)")
        index = max(bisect.bisect_right(bases, start) - 1, 0)
        for base in bases[index:]:
            if base >= stop:
                break
            key = batch_key(self.prefix, base)
            try:
                if header_filter is not None and not header_filter(decode_header(self._open(key))):
                    continue
                batch = decode_batch(self._open(key), columns)
            except FileNotFoundError:
                with self.lock:
                    self._relist()
                raise OffsetOutOfRangeError(f"bucket {self.bucket}: offsets from {base} expired (table.log.ttl) "
                                            f"while reading; start again from {self.earliest_offset} (earliest)") from None
            if base < start or base + batch.rows.num_rows > stop:
                lo = max(start - base, 0)
                hi = min(stop - base, batch.rows.num_rows)
                batch = LogBatch(batch.header, batch.rows.slice(lo, max(hi - lo, 0)))
            yield batch
