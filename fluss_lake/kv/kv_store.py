"""Primary-key state on disk: a small log-structured merge tree of hash-sorted, memory-mapped Arrow segments.

New after-images form a new small in-memory segment (the memtable); a full memtable is written as a file
segment (:mod:`fluss_lake.kv.segment`), and runs of four segments of similar size are merged (newest wins,
tombstones dropped at the bottom; :mod:`fluss_lake.kv.segment_merge`), keeping lookups to a few probes
(:mod:`fluss_lake.kv.state_reader`) and write amplification logarithmic. File merges run in the process's
background compactor (:mod:`fluss_lake.kv.compactor`); the memtables of all stores share one budget
(:mod:`fluss_lake.kv.memtable_budget`).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake._utils import arrow_pool
from fluss_lake._utils.frames import to_arrow as frame_to_arrow
from fluss_lake.kv import compactor, memtable_budget
from fluss_lake.kv.segment import (
    HASH_COLUMN,
    OFFSET_COLUMN,
    TOMB_COLUMN,
    TS_COLUMN,
    Segment,
    memory_segment,
    remove_segment_file,
    take,
)
from fluss_lake.kv.segment_merge import is_identity, merge_run
from fluss_lake.kv.state_reader import StateReader, forget_segments

__all__ = ["HASH_COLUMN", "MEMTABLE_BATCHES", "MEMTABLE_ROWS", "OFFSET_COLUMN", "TOMB_COLUMN", "TS_COLUMN", "KvStore"]

_FANOUT = 4
_MIN_TIER_ROWS = 4096
_MAX_SEGMENTS = 24
#: Recent after-images stay in memory (bounded, like RocksDB's memtable) until this many rows or batches
#: gather, or until the memtables of all stores of the process exceed their shared budget
#: (:mod:`fluss_lake.kv.memtable_budget`); the changelog in the log is their durable copy, so a crash loses nothing.
MEMTABLE_ROWS = 262_144
MEMTABLE_BATCHES = 32


class KvStore(StateReader):
    """The current rows of one bucket, keyed by primary key: the reads of :class:`StateReader`, plus writes into
    the memtable, flushes and the merge policy."""

    def __init__(
        self,
        directory: str,
        schema: pl.Schema,
        primary_key: Sequence[str],
        *,
        ttl_ms: int = 0,
        clock: Callable[[], int] | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        self.directory = directory
        # Guards the segments; the process memtable budget takes it (without waiting) to flush this store.
        self.lock = lock if lock is not None else threading.RLock()
        self.memtable_bytes = 0  # bytes of the in-memory segments, counted against the process budget
        self.ttl_ms = ttl_ms  # table.kv.ttl: rows not written for this long are dropped when compaction reaches them
        self.clock = clock
        self.schema = schema
        self.primary_key = tuple(primary_key)
        self.segments: list[Segment] = []  # newest first
        self.retired: list[Segment] = []  # merged away; files deleted by the owner when no snapshot needs them
        memtable_budget.register(self)

    # ---------------------------------------------------------------- writes
    def apply(
        self,
        hashes: np.ndarray,
        rows: pl.DataFrame | pa.Table,
        deleted: np.ndarray,
        commit_ts: np.ndarray | int,
        *,
        order: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
    ) -> None:
        """Add after-images (one per key, `deleted` marks tombstones, committed at `commit_ts`, written by the
        changelog records at `offsets`) as a new segment.

        `order` may pass ``argsort(hashes)`` when the caller already has it (saves a sort). Then the memtable
        is flushed if it is full, and the process memtable budget is enforced (which may flush other stores).
        """
        if len(rows) == 0:
            return
        with self.lock:
            self._add_to_memtable(hashes, rows, deleted, commit_ts, order, offsets)
            memtable_budget.enforce(self)

    def _add_to_memtable(
        self,
        hashes: np.ndarray,
        rows: pl.DataFrame | pa.Table,
        deleted: np.ndarray,
        commit_ts: np.ndarray | int,
        order: np.ndarray | None,
        offsets: np.ndarray | None = None,
    ) -> None:
        """:meth:`apply` without the budget: a new memtable segment, then a flush or in-memory merges."""
        if order is None:
            order = np.argsort(hashes, kind="stable")
        ts = None
        if self.ttl_ms > 0:  # commit times are kept only where table.kv.ttl needs them
            ts = np.empty(len(rows), dtype=np.int64)
            ts[:] = commit_ts
        names = self.schema.names()
        if isinstance(rows, pa.Table):
            data = rows if rows.column_names == names else rows.select(names)
        else:
            data = frame_to_arrow(rows if rows.columns == names else rows[names])
        if not is_identity(order):
            data = take(data, order)
            ts = None if ts is None else ts[order]
            offsets = None if offsets is None else offsets[order]
        sorted_hashes = np.ascontiguousarray(hashes[order], dtype=np.uint64)
        tomb = np.ascontiguousarray(np.asarray(deleted, dtype=bool)[order]).view(np.uint8)
        self.segments.insert(
            0,
            memory_segment(
                data,
                sorted_hashes,
                tomb,
                None if ts is None else pa.array(ts, pa.int64()),
                None if offsets is None else pa.array(offsets, pa.int64()),
            ),
        )
        self._account()
        memtable = self._memtable_size()
        if memtable >= MEMTABLE_BATCHES or sum(s.rows for s in self.segments[:memtable]) >= MEMTABLE_ROWS:
            self.flush_memtable()
            return
        while True:  # tiered merges inside the memtable keep the number of segments a lookup probes small
            tiers = [_tier(s) for s in self.segments[: self._memtable_size()]]
            run = next((i for i in range(len(tiers) - _FANOUT + 1) if len(set(tiers[i : i + _FANOUT])) == 1), None)
            if run is None:
                return
            self._merge(run, run + _FANOUT, in_memory=True)

    def _memtable_size(self) -> int:
        """How many of the newest segments are in memory."""
        count = 0
        for segment in self.segments:
            if segment.on_disk:
                break
            count += 1
        return count

    def _account(self) -> None:
        """Recount the bytes of the memtable (for the process budget)."""
        self.memtable_bytes = sum(s.table_bytes() for s in self.segments[: self._memtable_size()])

    def flush_memtable(self) -> None:
        """Write the in-memory segments as one file segment, then compact the files."""
        with self.lock:
            count = self._memtable_size()
            if count:
                self._merge(0, count)
            self._compact()

    def adopt(self, segments: list[Segment]) -> None:
        """Install segments (newest first) restored from a snapshot."""
        forget_segments(self.segments)
        self.segments = list(segments)
        self._account()

    def _compact(self) -> None:
        """Merge runs of similar-size file segments: in the process's background compactor (off the write path),
        or here when it is off or when the segments have piled up past ``_MAX_SEGMENTS`` (a write stall, as in
        RocksDB, so lookups never probe an unbounded number of segments)."""
        if compactor.enabled() and len(self.segments) - self._memtable_size() <= _MAX_SEGMENTS:
            compactor.request(self)
            return
        while True:
            run = self._find_run()
            if run is None:
                return
            self._merge(*run)

    def compact_step(self) -> bool:
        """One merge of the background compactor: pick a run under the lock, merge it without the lock, then put
        the result in place if the run is still there (a full compaction or a restore may have replaced it:
        then the result is dropped). Returns False when there is nothing to merge."""
        with self.lock:
            run = self._find_run()
            if run is None or not os.path.isdir(self.directory):  # nothing to do, or the table was dropped
                return False
            i, j = run
            captured = self.segments[i:j]
            bottom = j == len(self.segments)
        merged = self._merged(captured, bottom=bottom, in_memory=False)
        with self.lock:
            start = _position(self.segments, captured)
            if start is not None and (not bottom or start + len(captured) == len(self.segments)):
                self._replace(start, start + len(captured), [] if merged is None else [merged])
                return True
        if merged is not None and merged.path is not None:
            remove_segment_file(merged.path)  # lost to a full compaction or a restore: nothing references it
        return True

    def wait_for_compaction(self) -> None:
        """Block until the background compactor has nothing left to do for this store (tests, benchmarks)."""
        compactor.drain(self)

    def _find_run(self) -> tuple[int, int] | None:
        """A contiguous run [i, j) of file segments to merge, or None (the memtable is left alone).

        First, a segment much smaller than the newer one above it (a short flush left between larger
        segments) is merged into that neighbour, which is usually a fresh flush; then the newest run of FANOUT
        segments of similar size (:func:`_similar`) is merged. Past ``_MAX_SEGMENTS`` the newer half is merged.
        """
        first = self._memtable_size()
        sizes = [max(s.rows, _MIN_TIER_ROWS) for s in self.segments[first:]]
        for i in range(1, len(sizes)):
            if sizes[i] * _FANOUT < sizes[i - 1]:
                return first + i - 1, first + i + 1
        for i in range(len(sizes) - _FANOUT + 1):
            if _similar(sizes[i : i + _FANOUT]):
                return first + i, first + i + _FANOUT
        if len(sizes) > _MAX_SEGMENTS:
            return first, first + len(sizes) // 2 + 1
        return None

    def _merge(self, i: int, j: int, *, in_memory: bool = False) -> None:
        """Merge segments [i, j) (newest first) into one; tombstones dropped when nothing older remains."""
        merged = self._merged(self.segments[i:j], bottom=j == len(self.segments), in_memory=in_memory)
        self._replace(i, j, [] if merged is None else [merged], in_memory=in_memory)

    def _replace(self, i: int, j: int, replacement: list[Segment], *, in_memory: bool = False) -> None:
        """Put `replacement` in place of segments [i, j); their files are retired for the owner to delete."""
        # only files need the owner's clean-up; a merged memtable segment is freed right away
        removed = self.segments[i:j]
        self.retired.extend(s for s in removed if s.on_disk)
        self.segments[i:j] = replacement
        forget_segments(removed)  # a lookup's cached gather plan must not keep them (nor their files) alive
        self._account()
        if not in_memory:  # the merge's working copies are freed: hand their pages back to the OS
            arrow_pool.release_unused()

    def _merged(self, run: list[Segment], *, bottom: bool, in_memory: bool) -> Segment | None:
        """One segment holding the newest version of every key of `run` (newest first), or None when nothing
        remains (:func:`~fluss_lake.kv.segment_merge.merge_run`); reads only the run, so it may run without the
        lock."""
        return merge_run(
            run,
            schema=self.schema,
            primary_key=self.primary_key,
            directory=self.directory,
            bottom=bottom,
            in_memory=in_memory,
            ttl_ms=self.ttl_ms,
            clock=self.clock,
        )

    def compact_all(self) -> None:
        """Merge every segment into one (expired rows and tombstones dropped): a full compaction."""
        self.flush_memtable()
        if len(self.segments) > 1 or (self.ttl_ms > 0 and self.segments):
            self._merge(0, len(self.segments))


def _tier(segment: Segment) -> int:
    """Size class of a memtable segment: segments of one tier are merged together."""
    rows = segment.rows
    return int(math.log(max(rows, 1) / _MIN_TIER_ROWS, _FANOUT)) if rows > _MIN_TIER_ROWS else 0


def _similar(rows: Sequence[int]) -> bool:
    """Whether segments are close enough in size to merge as one run: the largest at most FANOUT times the smallest
    (segments under ``_MIN_TIER_ROWS`` rows count as that many).

    A ratio, not fixed tier boundaries: flushes of varying size (the process memtable budget flushes memtables
    early; snapshots flush short ones) always form runs, and every merge at least grows its largest input by
    ``1 + (FANOUT - 1) / FANOUT``, so a row is rewritten a logarithmic number of times.
    """
    sizes = [max(r, _MIN_TIER_ROWS) for r in rows]
    return max(sizes) <= _FANOUT * min(sizes)


def _position(segments: list[Segment], run: list[Segment]) -> int | None:
    """Where `run` (the same objects, contiguous) starts in `segments`, or None if it is not there any more."""
    for start, segment in enumerate(segments):
        if segment is run[0]:
            window = segments[start : start + len(run)]
            return start if len(window) == len(run) and all(a is b for a, b in zip(window, run, strict=False)) else None
    return None
