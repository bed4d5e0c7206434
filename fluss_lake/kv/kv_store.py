"""Primary-key state on disk: a small log-structured merge tree of hash-sorted, memory-mapped Arrow segments.

Each segment is an uncompressed Arrow IPC file holding after-images (and tombstones) sorted by a 64-bit key
hash. Its hash column *is* the index: a lookup probes each segment, newest first, through a small
directory of the hashes saved beside the segment and mapped (compiled loops, see ``_kernels.pyx``), then
gathers the hits. Neither rows nor index live in process memory: the mapped pages are file cache the OS can
drop, so a table may be larger than RAM. New after-images form a new small segment; runs of four
segments of similar size are merged (newest wins, tombstones dropped at the bottom), keeping lookups to a
few probes and write amplification logarithmic.

When the bucket key is a strict prefix of the primary key, the index hash puts the bucket-key hash in the high
32 bits, so all rows of one prefix are contiguous and a prefix lookup is a range scan.
"""

from __future__ import annotations

import bisect
import math
import mmap
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake._utils import arrow_pool
from fluss_lake._utils.arrow_pool import pool
from fluss_lake._utils.distinct import distinct
from fluss_lake.io.files import fsync_file, unlink_quietly
from fluss_lake.kv import _kernels, compactor, memtable_budget, row_gather  # type: ignore[attr-defined]

__all__ = ["HASH_COLUMN", "INDEX_SUFFIX", "OFFSET_COLUMN", "TOMB_COLUMN", "KvStore", "Segment", "SegmentIndex", "index_path",
           "remove_segment_file", "save_index"]

HASH_COLUMN = "__hash"
TOMB_COLUMN = "__tomb"  # UInt8 on disk (1 = tombstone) so it maps to numpy without a copy
TS_COLUMN = "__ts"  # Int64 commit time (epoch ms) of the after-image, for table.kv.ttl
#: Int64 changelog offset of the record that wrote the row (its last change); null in segments written before
#: offsets were kept. Lookups can return it (``with_offsets``): a delta join uses it to tell rows whose change it
#: has not consumed yet.
OFFSET_COLUMN = "__offset"
_SYSTEM_VALUES = (TS_COLUMN, OFFSET_COLUMN)  # carried through merges with the rows, not part of the schema
_FANOUT = 4
_MIN_TIER_ROWS = 4096
_MAX_SEGMENTS = 24
#: File merges of at least this many rows are written column by column through temporary mapped files
#: (:func:`_write_spilled`), so their memory does not grow with the table.
_SPILL_MERGE_ROWS = 1_000_000
#: Recent after-images stay in memory (bounded, like RocksDB's memtable) until this many rows or batches
#: gather, or until the memtables of all stores of the process exceed their shared budget
#: (:mod:`fluss_lake.kv.memtable_budget`); the changelog in the log is their durable copy, so a crash loses nothing.
MEMTABLE_ROWS = 262_144
MEMTABLE_BATCHES = 32


#: Segments with fewer rows are probed with a plain binary search (building an index would cost more than it saves).
_INDEX_MIN_ROWS = 2048
#: Index files: ``<segment file>.idx`` = magic, (rows, shift, directory size, directory item size) as int64, the
#: directory, then the fingerprints (see :meth:`SegmentIndex.save`).
INDEX_SUFFIX = ".idx"
_INDEX_MAGIC = b"FLKVIDX1"
#: A directory slot covers 2**this rows on average (fewer slots: the directory stays in the CPU cache).
_SLOT_ROWS_LOG2 = 0


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """The probe index of one immutable segment: a radix directory plus 32-bit fingerprints.

    ``starts[b]`` is the first row whose hash has ``b`` as its top ``64 - shift`` bits (one to two rows per
    directory slot on average), and ``fingerprints[r]`` is the top 32 bits of row ``r``'s hash. A probe reads
    its slot, scans the slot's fingerprints and touches the memory-mapped hash column only to confirm a
    fingerprint match. It holds 6-8 bytes per row. A segment file written by a store has its index saved beside
    it (:func:`index_path`, written with the segment), and every process maps that file: like the rows, the
    index is file cache the OS may drop, not process memory, and no process builds it again. A segment without
    the file (written by an older version, or a damaged file) gets its index built in memory on first probe.

    Examples
    --------
    >>> hashes = np.sort(np.random.default_rng(0).integers(0, 2**63, 100_000, dtype=np.uint64))
    >>> index = SegmentIndex.build(hashes)
    >>> queries = np.r_[hashes[::7], np.uint64(12345)]
    >>> seg_of, row_of = np.full(len(queries), -1), np.zeros(len(queries), dtype=np.int64)
    >>> index.probe(hashes, queries, np.arange(len(queries)), seg_of, row_of, 0)  # one query is missing
    1
    >>> bool((row_of[:-1] == np.arange(0, 100_000, 7)).all()), int(seg_of[-1])
    (True, -1)
    """

    starts: np.ndarray
    fingerprints: np.ndarray
    shift: int
    rows: int

    @classmethod
    def build(cls, hashes: np.ndarray) -> SegmentIndex:
        """Index a hash-sorted ``uint64`` column."""
        rows = int(hashes.size)
        bits = min(max(rows.bit_length() - 1 - _SLOT_ROWS_LOG2, 1), 32)
        shift = 64 - bits
        starts = np.empty((1 << bits) + 1, dtype=np.uint32 if rows < 2**32 else np.int64)
        fingerprints = np.empty(rows + 1, dtype=np.uint32)
        _kernels.build_directory(np.ascontiguousarray(hashes, dtype=np.uint64), shift, starts, fingerprints)
        return cls(starts, fingerprints, shift, rows)

    @property
    def nbytes(self) -> int:
        """Bytes the index holds (mapped from its file, or in process memory)."""
        return int(self.starts.nbytes + self.fingerprints.nbytes)

    def save(self, path: str, *, fsync: bool = False) -> None:
        """Write the index as a file for :meth:`open` (atomically: the file is complete or absent)."""
        header = np.array([self.rows, self.shift, self.starts.size, self.starts.dtype.itemsize], dtype=np.int64)
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}{INDEX_SUFFIX}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(_INDEX_MAGIC)
                handle.write(header.tobytes())
                handle.write(memoryview(np.ascontiguousarray(self.starts)).cast("B"))
                handle.write(memoryview(np.ascontiguousarray(self.fingerprints)).cast("B"))
            if fsync:
                fsync_file(tmp)
            os.replace(tmp, path)
        except BaseException:
            unlink_quietly(tmp)
            raise

    @classmethod
    def open(cls, path: str, rows: int) -> SegmentIndex | None:
        """Map an index saved by :meth:`save` for a segment of `rows` rows (None if the file is missing or does
        not match: the caller then builds the index)."""
        try:
            with open(path, "rb") as handle:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (FileNotFoundError, ValueError):  # ValueError: an empty file cannot be mapped
            return None
        head = len(_INDEX_MAGIC) + 32
        if len(mapped) < head or mapped[:len(_INDEX_MAGIC)] != _INDEX_MAGIC:
            return None
        saved_rows, shift, count, itemsize = (int(v) for v in np.frombuffer(mapped, np.int64, 4, len(_INDEX_MAGIC)))
        if saved_rows != rows or itemsize not in (4, 8) or len(mapped) != head + count * itemsize + (rows + 1) * 4:
            return None
        starts = np.frombuffer(mapped, np.uint32 if itemsize == 4 else np.int64, count, head)
        fingerprints = np.frombuffer(mapped, np.uint32, rows + 1, head + count * itemsize)
        return cls(starts, fingerprints, shift, rows)

    def probe(self, hashes: np.ndarray, queries: np.ndarray, pending: np.ndarray, seg_of: np.ndarray,
              row_of: np.ndarray, number: int) -> int:
        """Look for the ``pending`` queries (positions into ``queries``, visited in that order) in ``hashes``
        (the indexed, mapped column): a hit sets ``seg_of = number`` and ``row_of`` = its first row. The queries
        still missing are moved, in order, to the front of ``pending``; returns their count."""
        return int(_kernels.probe_indexed(self.starts, self.fingerprints, hashes, self.shift, queries, pending,
                                          seg_of, row_of, number))

    def bounds(self, query: int) -> tuple[int, int]:
        """The rows ``[lo, hi)`` that may hold one hash (its directory slot), with scalar operations."""
        slot = query >> self.shift
        starts = self.starts_view
        return starts[slot], starts[slot + 1]

    @property
    def starts_view(self) -> memoryview:
        """The directory as a memoryview: items read as Python ints."""
        return memoryview(self.starts)


@dataclass
class Segment:
    """One immutable, hash-sorted segment: memory-mapped from a file, or in memory (``path`` None)."""

    name: str
    path: str | None
    table: pa.Table
    hashes: np.ndarray
    tomb: np.ndarray
    rows: int

    @classmethod
    def open(cls, path: str) -> "Segment":
        """Map a segment file (zero-copy)."""
        table = pa.ipc.open_file(pa.memory_map(path)).read_all()
        # Both index columns are read straight from the mapping: no per-row process memory.
        hashes = _single_chunk(table.column(HASH_COLUMN)).to_numpy(zero_copy_only=True) if table.num_rows else np.empty(0, np.uint64)
        tomb = _single_chunk(table.column(TOMB_COLUMN)).to_numpy(zero_copy_only=True).view(np.bool_) if table.num_rows else np.empty(0, bool)
        return cls(os.path.basename(path), path, table, hashes, tomb, table.num_rows)

    @classmethod
    def in_memory(cls, frame: pl.DataFrame) -> "Segment":
        """A memtable segment from a frame holding hash and tombstone columns, sorted by hash."""
        table = frame.to_arrow()
        return cls(f"mem-{uuid.uuid4().hex}", None, table, frame.get_column(HASH_COLUMN).to_numpy(),
                   frame.get_column(TOMB_COLUMN).to_numpy().view(np.bool_), frame.height)

    @property
    def on_disk(self) -> bool:
        """Whether the segment is a file (memtable segments are not)."""
        return self.path is not None

    def columns(self) -> dict[str, pa.Array]:
        """Each column as one Arrow array (cached), for point reads."""
        cached = getattr(self, "_columns", None)
        if cached is None:
            cached = {name: _single_chunk(self.table.column(name)) for name in self.table.column_names}
            object.__setattr__(self, "_columns", cached)
        return cached

    def numpy_columns(self) -> dict[str, np.ndarray]:
        """Zero-copy numpy views of the integer and float columns without nulls (cached), for gathers."""
        cached = self.__dict__.get("_numpy")
        if cached is None:
            cached = {}
            for name, array in self.columns().items():
                if (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)) and array.null_count == 0:
                    cached[name] = array.to_numpy(zero_copy_only=True)
            object.__setattr__(self, "_numpy", cached)
        return cached

    def index(self) -> SegmentIndex | None:
        """The segment's in-RAM probe index (built on first use), or None for small segments."""
        try:
            return self._index  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            index = None
            if self.rows >= _INDEX_MIN_ROWS:
                index = SegmentIndex.open(index_path(self.path), self.rows) if self.path is not None else None
                if index is None:
                    index = SegmentIndex.build(self.hashes)
            object.__setattr__(self, "_index", index)
            return index

    def probe(self, queries: np.ndarray, pending: np.ndarray, seg_of: np.ndarray, row_of: np.ndarray,
              number: int) -> int:
        """Look for the pending queries in this segment (see :meth:`SegmentIndex.probe`): through the index,
        or by binary search for small segments. Returns how many are still missing."""
        index = self.index()
        if index is not None:
            return index.probe(self.hashes, queries, pending, seg_of, row_of, number)
        return int(_kernels.probe_sorted(self.hashes, queries, pending, seg_of, row_of, number))

    def lower_bounds(self, queries: np.ndarray) -> np.ndarray:
        """``searchsorted(hashes, queries, "left")``: through the index when the segment has one."""
        index = self.index()
        if index is None:
            return self.hashes.searchsorted(queries, side="left")
        queries = np.ascontiguousarray(queries, dtype=np.uint64)
        order = np.empty(len(queries), dtype=np.int64)
        _kernels.radix_order(queries, min(max(len(queries).bit_length(), 8), 16), order)
        out = np.empty(len(queries), dtype=np.int64)
        _kernels.lower_bounds(index.starts, index.fingerprints, self.hashes, index.shift, queries, order, out)
        return out

    def hash_view(self) -> memoryview:
        """The hash column as a memoryview (cached): items read as Python ints without numpy scalars."""
        view = self.__dict__.get("_view")
        if view is None:
            view = memoryview(np.ascontiguousarray(self.hashes))
            object.__setattr__(self, "_view", view)
        return view

    def locate_one(self, query: int) -> int:
        """``searchsorted(hashes, query)`` of one hash with scalar operations (point lookups)."""
        find = self.__dict__.get("_find_one")
        if find is None:
            find = _point_finder(self.index(), self.hash_view(), self.rows)
            object.__setattr__(self, "_find_one", find)
        return find(query)

    def point_readers(self) -> dict[str, Callable[[int], object]]:
        """Per column, a function reading one row's value as a Python object (cached), for point lookups:
        numbers and strings are read straight from the buffers, other types through Arrow scalars."""
        readers = self.__dict__.get("_readers")
        if readers is None:
            readers = {name: _point_reader(array) for name, array in self.columns().items()}
            object.__setattr__(self, "_readers", readers)
        return readers

    @property
    def tier(self) -> int:
        """Size class: segments of one tier are merged together."""
        return int(math.log(max(self.rows, 1) / _MIN_TIER_ROWS, _FANOUT)) if self.rows > _MIN_TIER_ROWS else 0


def _point_finder(index: SegmentIndex | None, hashes: memoryview, rows: int) -> Callable[[int], int]:
    """``searchsorted`` of one hash: bisect inside its directory slot (the whole column without an index)."""
    bisect_left = bisect.bisect_left
    if index is None:
        return lambda query: bisect_left(hashes, query, 0, rows)
    starts, shift = index.starts_view, index.shift

    def find(query: int) -> int:
        slot = query >> shift
        return bisect_left(hashes, query, starts[slot], starts[slot + 1])

    return find


def _point_reader(array: pa.Array) -> Callable[[int], object]:
    """A reader of ``array[pos].as_py()`` that skips Arrow scalar boxing for common types without nulls."""
    kind = array.type
    if array.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and len(array):
        return memoryview(array.to_numpy(zero_copy_only=True)).__getitem__
    if array.null_count == 0 and (pa.types.is_large_string(kind) or pa.types.is_string(kind)) and len(array):
        offsets = memoryview(np.frombuffer(array.buffers()[1], dtype=np.int64 if pa.types.is_large_string(kind)
                                           else np.int32)[array.offset:array.offset + len(array) + 1])
        data = memoryview(array.buffers()[2] or b"")  # no data buffer when every string is empty

        def string(pos: int) -> str:
            return str(data[offsets[pos]:offsets[pos + 1]], "utf-8")

        return string
    return lambda pos: array[pos].as_py()


def _take(data: Any, indices: np.ndarray | pa.Array) -> Any:
    """Arrow's ``take`` (of a table, chunked array or array) into fluss-lake's pool (:mod:`arrow_pool`)."""
    return pc.take(data, indices if isinstance(indices, pa.Array) else pa.array(indices), memory_pool=pool())


def _single_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array, without a copy when it already is one chunk (segments are written so)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks(memory_pool=pool())


def _similar(rows: Sequence[int]) -> bool:
    """Whether segments are close enough in size to merge as one run: the largest at most FANOUT times the smallest
    (segments under ``_MIN_TIER_ROWS`` rows count as that many).

    A ratio, not fixed tier boundaries: flushes of varying size (the process memtable budget flushes memtables
    early; snapshots flush short ones) always form runs, and every merge at least grows its largest input by
    ``1 + (FANOUT - 1) / FANOUT``, so a row is rewritten a logarithmic number of times.
    """
    sizes = [max(r, _MIN_TIER_ROWS) for r in rows]
    return max(sizes) <= _FANOUT * min(sizes)


def _merge_positions(tables: list[pa.Table], selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows ``selected`` (indices into the tables stacked): the table and the row within it."""
    bounds = np.cumsum([t.num_rows for t in tables])
    source = np.searchsorted(bounds, selected, side="right")
    return source, selected - np.concatenate([[0], bounds[:-1]])[source]


def _take_column(tables: list[pa.Table], name: str, source: np.ndarray, row: np.ndarray) -> pa.Array:
    """One column of a merge's output: a compiled gather from the inputs' buffers (no concatenated copy of the
    inputs first, as Arrow's ``take`` on a chunked column makes)."""
    return row_gather.take_rows([_single_chunk(t.column(name)) for t in tables], source, row)


def _merge_order(runs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The hash order of sorted runs (newest first) laid end to end, and the hashes in that order: what a stable
    argsort of the concatenated runs gives, by one compiled k-way merge (no concatenated copy, no random gather)."""
    total = sum(len(r) for r in runs)
    order = np.empty(total, dtype=np.int64)
    merged = np.empty(total, dtype=np.uint64)
    if len(runs) > 64:  # more runs than the merge loop takes (never with the merge policy): sort instead
        hashes = np.concatenate(runs)
        order[:] = np.argsort(hashes, kind="stable")
        np.take(hashes, order, out=merged)
        return order, merged
    runs = [np.ascontiguousarray(r, dtype=np.uint64) for r in runs]
    addresses = np.array([r.ctypes.data if len(r) else 0 for r in runs], dtype=np.uint64)
    _kernels.merge_runs(addresses, np.array([len(r) for r in runs], dtype=np.int64), order, merged)
    return order, merged


def _take_merged(tables: list[pa.Table], selected: np.ndarray) -> pa.Table:
    """Rows ``selected`` (indices into the tables stacked) of a merge's inputs, column by column."""
    source, row = _merge_positions(tables, selected)
    names = tables[0].column_names
    return pa.table([_take_column(tables, n, source, row) for n in names], names=names)


def _position(segments: list[Segment], run: list[Segment]) -> int | None:
    """Where `run` (the same objects, contiguous) starts in `segments`, or None if it is not there any more."""
    for start, segment in enumerate(segments):
        if segment is run[0]:
            window = segments[start:start + len(run)]
            return start if len(window) == len(run) and all(a is b for a, b in zip(window, run)) else None
    return None


def _arrow_type(dtype: pl.DataType) -> pa.DataType:
    """The Arrow type Polars writes for `dtype` (segments are written from Polars frames)."""
    return pl.Series([], dtype=dtype).to_arrow().type


def _is_identity(order: np.ndarray, n: int | None = None) -> bool:
    """Whether `order` is ``0, 1, ..., n-1`` (a take would be a copy for nothing)."""
    size = len(order)
    if n is not None and size != n:
        return False
    return size == 0 or (int(order[0]) == 0 and int(order[-1]) == size - 1 and bool((np.diff(order) == 1).all()))


def _segment_table(data: pa.Table, hashes: np.ndarray, tomb: np.ndarray,
                   ts: pa.ChunkedArray | pa.Array | None, offsets: pa.ChunkedArray | pa.Array | None) -> pa.Table:
    """The on-disk column layout: value columns, then hash, tombstone (UInt8), for tables with ``table.kv.ttl``
    commit time (other tables do not need it: 8 bytes per row less to write and merge), then the changelog offset
    of each row (null when unknown)."""
    table = (data.append_column(HASH_COLUMN, pa.array(hashes, pa.uint64()))
             .append_column(TOMB_COLUMN, pa.array(tomb.view(np.uint8), pa.uint8())))
    if ts is not None:
        table = table.append_column(TS_COLUMN, ts)
    return table.append_column(OFFSET_COLUMN, offsets if offsets is not None else pa.nulls(len(hashes), pa.int64()))


def _split_system(table: pa.Table) -> tuple[pa.Table, pa.ChunkedArray | None, pa.ChunkedArray | None]:
    """(value columns, commit times or None, changelog offsets or None) of merged rows."""
    present = [c for c in _SYSTEM_VALUES if c in table.column_names]
    columns = {c: table.column(c) for c in present}
    data = table.drop_columns(present) if present else table
    return data, columns.get(TS_COLUMN), columns.get(OFFSET_COLUMN)


def _memory_segment(data: pa.Table, hashes: np.ndarray, tomb: np.ndarray,
                    ts: pa.ChunkedArray | pa.Array | None, offsets: pa.ChunkedArray | pa.Array | None) -> Segment:
    """A memtable segment (sorted by hash) built straight from Arrow columns."""
    table = _segment_table(data, hashes, tomb, ts, offsets).combine_chunks(memory_pool=pool())
    return Segment(f"mem-{uuid.uuid4().hex}", None, table, hashes, tomb.view(np.bool_), table.num_rows)


def _write_spilled(directory: str, tables: list[pa.Table], selected: np.ndarray, hashes: np.ndarray,
                   tomb: np.ndarray) -> Segment:
    """Write rows `selected` of the stacked `tables` (value columns, then the system values they have: commit time,
    changelog offset) as a segment, one column at a time.

    Each column is taken, written to a temporary file and mapped back, so the process holds one merged column at
    a time instead of the whole merged table (the mapped pages are file cache the OS can drop); the segment file
    is still one record batch with contiguous columns. Used for big file merges (tables larger than RAM).
    """
    os.makedirs(directory, exist_ok=True)
    source, row = _merge_positions(tables, selected)
    names = [name for name in tables[0].column_names if name not in _SYSTEM_VALUES]
    extras = [name for name in _SYSTEM_VALUES if name in tables[0].column_names]
    spills: list[str] = []
    mapped: list[pa.ChunkedArray] = []
    try:
        for name in [*names, *extras]:
            column = pa.table({name: _take_column(tables, name, source, row)})
            path = os.path.join(directory, f".tmp-spill-{uuid.uuid4().hex}.arrow")
            spills.append(path)
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, column.schema) as writer:
                writer.write_table(column, max_chunksize=max(len(selected), 1))
            del column
            mapped.append(pa.ipc.open_file(pa.memory_map(path)).read_all().column(0))
        data, ts, offsets = _split_system(pa.table(mapped, names=[*names, *extras]))
        return write_segment(directory, _segment_table(data, hashes, tomb, ts, offsets))
    finally:
        for path in spills:
            os.unlink(path)  # a mapping stays valid after its file is unlinked


def write_segment(directory: str, frame: pl.DataFrame | pa.Table, *, fsync: bool = False) -> Segment:
    """Write a frame or table (already holding hash and tombstone columns, sorted by hash) as a new segment."""
    os.makedirs(directory, exist_ok=True)
    name = f"seg-{uuid.uuid4().hex}.arrow"
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, f".tmp-{name}")
    table = frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame.combine_chunks(memory_pool=pool())
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))
    if fsync:
        fsync_file(tmp)
    if table.num_rows >= _INDEX_MIN_ROWS:  # the index first: a segment that exists has its index file
        hashes = _single_chunk(table.column(HASH_COLUMN)).to_numpy(zero_copy_only=False)
        SegmentIndex.build(hashes).save(index_path(path), fsync=fsync)
    os.replace(tmp, path)
    return Segment.open(path)


def save_index(path: str, *, fsync: bool = False) -> None:
    """Write the index file of an existing segment file that has none (a segment downloaded from a remote store)."""
    segment = Segment.open(path)
    if segment.rows >= _INDEX_MIN_ROWS and not os.path.exists(index_path(path)):
        SegmentIndex.build(segment.hashes).save(index_path(path), fsync=fsync)


def index_path(segment_path: str) -> str:
    """The file beside a segment file holding its probe index (see :class:`SegmentIndex`)."""
    return segment_path + INDEX_SUFFIX


def remove_segment_file(path: str) -> None:
    """Delete a segment file and its index file (either may be gone already)."""
    unlink_quietly(path)
    unlink_quietly(index_path(path))


class KvStore:
    """The current rows of one bucket, keyed by primary key."""

    def __init__(self, directory: str, schema: pl.Schema, primary_key: Sequence[str], *, ttl_ms: int = 0,
                 clock: Callable[[], int] | None = None, lock: threading.RLock | None = None) -> None:
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

    # ---------------------------------------------------------------- reads
    def _conform(self, table: pa.Table) -> pl.DataFrame:
        """Segment rows as a frame with the current schema (columns added later are null)."""
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        names = self.schema.names()
        if frame.columns == names:  # the usual case: nothing to add or reorder
            return frame
        missing = [pl.lit(None, dtype).alias(name) for name, dtype in self.schema.items() if name not in frame.columns]
        if missing:
            frame = frame.with_columns(missing)
        return frame.select(names)

    def get_one(self, hash_value: int, key: dict) -> dict | None:
        """The current row of one key (point lookup without vectorization overhead), or None."""
        for segment in self.segments:
            if segment.rows == 0:
                continue
            pos = segment.locate_one(hash_value)
            if pos == segment.rows:
                continue
            hashes = segment.hash_view()
            while pos < segment.rows and hashes[pos] == hash_value:
                read = segment.point_readers()
                if all(read[k](pos) == v for k, v in key.items()):
                    if segment.tomb[pos]:
                        return None
                    return {n: read[n](pos) if n in read else None for n in self.schema}
                pos += 1  # a different key with the same hash: look at the next entry
        return None

    def _probe_all(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Newest segment and row holding each hash (segment -1 where none; tombstones count as found), and
        the visiting order (for gathers).

        One compiled pass per segment, newest first, over the queries not found yet; queries are visited in
        the order of their top hash bits (a counting sort), so each segment is read roughly in file order.
        """
        n = len(hashes)
        seg_of = np.full(n, -1, dtype=np.int64)
        row_of = np.zeros(n, dtype=np.int64)
        queries = np.ascontiguousarray(hashes, dtype=np.uint64)
        order = np.empty(n, dtype=np.int64)
        if n > 64:  # about one query per bucket of the top hash bits
            _kernels.radix_order(queries, min(max(n.bit_length(), 8), 16), order)
        else:
            order[:] = np.arange(n)
        if n == 0:
            return seg_of, row_of, order
        pending = order.copy()
        for number, segment in enumerate(self.segments):
            if segment.rows == 0:
                continue
            pending = pending[:segment.probe(queries, pending, seg_of, row_of, number)]
            if pending.size == 0:
                break
        return seg_of, row_of, order

    @staticmethod
    def _groups(seg_of: np.ndarray, row_of: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """``(segment, query positions, rows)`` per segment holding any of the probed hashes."""
        counts = np.bincount(seg_of + 1)
        groups = []
        for number in np.flatnonzero(counts[1:]).tolist():
            where = np.flatnonzero(seg_of == number)
            groups.append((number, where, row_of[where]))
        return groups

    def probe(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Newest segment and row holding each hash (-1 where none); tombstone hits are reported as found."""
        seg_of, row_of, _ = self._probe_all(hashes)
        return seg_of, row_of

    def gather(self, seg_of: np.ndarray, row_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, pl.DataFrame]:
        """Rows at (segment, row) positions, aligned with the input: (hit mask, tombstone mask, frame).

        Tombstone rows are returned too (their key columns are set), so callers can check keys.
        """
        wheres = [(int(i), np.flatnonzero(seg_of == i)) for i in np.unique(seg_of[seg_of >= 0])]
        groups = [(i, where, row_of[where]) for i, where in wheres]
        hit = seg_of >= 0
        tomb, stacked, positions = self._take(groups, len(seg_of))
        return hit, tomb, self._align(stacked, positions, len(seg_of))

    def _take(self, groups: list[tuple[int, np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, pa.Table | None, np.ndarray]:
        """The rows of each group stacked (segment order), the aligned tombstone mask, and the query position
        of every stacked row."""
        tomb = np.zeros(n, dtype=bool)
        if not groups:
            return tomb, None, np.empty(0, dtype=np.intp)
        names = self.schema.names()
        parts = []
        for index, where, rows in groups:
            segment = self.segments[index]
            tomb[where] = segment.tomb[rows]
            present = set(segment.table.column_names)
            parts.append(_take(segment.table.select([c for c in names if c in present]), rows))
        stacked = (pa.concat_tables(parts, promote_options="default", memory_pool=pool()) if len(parts) > 1
                   else parts[0])
        positions = np.concatenate([where for _, where, _ in groups]) if len(groups) > 1 else groups[0][1]
        return tomb, stacked, positions

    def _align(self, stacked: pa.Table | None, positions: np.ndarray, n: int,
               absent: np.ndarray | None = None) -> pl.DataFrame:
        """Stacked rows put back in query order; positions with no stacked row (or marked `absent`, a mask
        over the stacked rows) read as all-null rows."""
        if stacked is None or len(positions) == 0:
            return pl.DataFrame(schema=self.schema).clear(n)
        if absent is not None and absent.any():
            positions = positions[~absent]
            stacked = stacked.filter(pa.array(~absent))
        k = len(positions)
        frame = self._conform(stacked.combine_chunks(memory_pool=pool()) if stacked.column(0).num_chunks > 1 else stacked)
        if k == n and (n == 1 or bool((positions[1:] > positions[:-1]).all())):
            return frame  # every query hit, already in query order
        order = np.full(n, k, dtype=np.intp)  # row k: the all-null row
        order[positions] = np.arange(k)
        frame = frame.vstack(pl.DataFrame(schema=self.schema).clear(1)).rechunk() if k < n else frame
        return frame[order]

    def lookup(self, hashes: np.ndarray, keys: pl.DataFrame, *,
               with_offsets: bool = False) -> tuple[np.ndarray, pl.DataFrame]:
        """Current rows for keys (with their index hashes): (found mask, aligned rows, nulls where absent).

        Hash collisions between distinct keys are resolved by comparing the key columns (rare slow path). With
        `with_offsets` the rows end with :data:`OFFSET_COLUMN`, the changelog offset of each row's last change
        (null where absent or unknown).
        """
        n = len(hashes)
        seg_of, row_of, order = self._probe_all(hashes)
        involved = np.flatnonzero(np.bincount(seg_of + 1, minlength=len(self.segments) + 1)[1:]).tolist()
        names = self.schema.names()
        if all(set(names).issubset(self.segments[i].columns()) for i in involved):
            found, rows, mismatch = self._gather_found(seg_of, row_of, order, involved, keys)
        else:  # some segment predates a column: stack with null padding
            tomb, stacked, positions = self._take(self._groups(seg_of, row_of), n)
            found = np.zeros(n, dtype=bool)
            if stacked is None:
                return found, self._align(None, positions, n)
            same = _stacked_keys_equal(stacked, keys, positions, self.primary_key)
            found[positions] = same
            found &= ~tomb
            mismatch = positions[~same]
            rows = self._align(stacked, positions, n, absent=~found[positions])
        if mismatch.size:
            found, rows = self._slow_lookup(hashes, keys, found, rows, mismatch)
        if with_offsets:
            known = found.copy()
            known[mismatch] = False  # resolved by the slow path: offset unknown
            rows = rows.with_columns(self._offsets_at(seg_of, row_of, known))
        return found, rows

    def _offsets_at(self, seg_of: np.ndarray, row_of: np.ndarray, known: np.ndarray) -> pl.Series:
        """The changelog offsets of the rows at (segment, row) where `known` (null elsewhere, and for rows of
        segments written before offsets were kept); one take per segment involved."""
        values = np.zeros(len(seg_of), dtype=np.int64)
        valid = np.zeros(len(seg_of), dtype=bool)
        for number in np.unique(seg_of[known]).tolist():
            column = self.segments[number].columns().get(OFFSET_COLUMN)
            if column is None:
                continue
            where = np.flatnonzero(known & (seg_of == number))
            taken = _take(column, row_of[where])
            values[where] = taken.fill_null(0).to_numpy(zero_copy_only=False)
            valid[where] = taken.is_valid().to_numpy(zero_copy_only=False)
        return pl.Series(OFFSET_COLUMN, pa.array(values, mask=~valid))

    def _gather_found(self, seg_of: np.ndarray, row_of: np.ndarray, order: np.ndarray, involved: list[int],
                      keys: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame, np.ndarray]:
        """Rows of the probed positions whose keys match and are not tombstones, aligned with the queries
        (all-null rows elsewhere): (found mask, rows, query positions whose hash matched another key).

        Every column is gathered in one compiled pass into query order (:mod:`row_gather`); types it does not
        handle use one Arrow ``take`` per segment plus one to put them in query order. Every involved segment
        has every column.
        """
        n = len(seg_of)
        pk = self.primary_key
        segments = self.segments
        hit = seg_of >= 0
        tomb = row_gather.gather_numpy([s.tomb.view(np.uint8) if i in involved else None
                                        for i, s in enumerate(segments)], seg_of, row_of, order, np.dtype(np.uint8)).view(np.bool_)
        key_values = self._integer_keys(keys, involved)
        if key_values is not None:  # every key column is an integer: compare in compiled gathers, no frames
            same = np.ones(n, dtype=bool)
            for name, values in key_values.items():
                columns = [segments[i].numpy_columns().get(name) if i in involved else None
                           for i in range(len(segments))]
                same &= row_gather.gather_numpy(columns, seg_of, row_of, order, values.dtype) == values
        else:
            same = np.ones(n, dtype=bool)
            for number, where, rows in self._groups(seg_of, row_of):
                same[where] = _stacked_keys_equal(_take(segments[number].table.select(list(pk)), rows), keys, where, pk)
        mismatch = np.flatnonzero(hit & ~same)
        found = hit & same & ~tomb
        all_found = bool(found.all())
        live = seg_of if all_found else np.where(found, seg_of, -1)
        absent = None if all_found else ~found
        arrow_order: pa.Array | None = None  # query position -> row of the stacked Arrow takes (fallback)
        kept: list[tuple[int, np.ndarray, np.ndarray]] | None = None
        series = []
        for name, dtype in self.schema.items():
            if key_values is not None and name in key_values:  # a found row's key is the query's
                series.append(pl.Series(name, pa.array(key_values[name], mask=absent)))
                continue
            if not involved or (live < 0).all():
                series.append(pl.Series(name, [None] * n, dtype=dtype))
                continue
            arrays = [segments[i].columns()[name] if i in involved else None for i in range(len(segments))]
            gathered = row_gather.gather_column(arrays, involved, live, row_of, order, found, all_found)
            if gathered is not None:
                series.append(pl.Series(name, gathered))
                continue
            if kept is None:
                kept = self._groups(live, row_of)
            parts = [_take(segments[i].columns()[name], rows) for i, _, rows in kept]
            stacked = pa.concat_arrays(parts, memory_pool=pool()) if len(parts) > 1 else parts[0]
            if arrow_order is None:
                positions = np.concatenate([where for _, where, _ in kept]) if len(kept) > 1 else kept[0][1]
                index_of = np.zeros(n, dtype=np.intp)
                index_of[positions] = np.arange(len(positions))
                arrow_order = pa.array(index_of, mask=absent)
            series.append(pl.Series(name, _take(stacked, arrow_order)))
        return found, pl.DataFrame(series), mismatch

    def _integer_keys(self, keys: pl.DataFrame, involved: list[int]) -> dict[str, np.ndarray] | None:
        """The query keys as numpy arrays when every key column is an integer stored (without nulls, same
        width) in every involved segment; None otherwise (the frame-based comparison handles the rest)."""
        out = {}
        for name in self.primary_key:
            if not keys.schema[name].is_integer():
                return None
            values = keys.get_column(name).to_numpy()
            if any(getattr(self.segments[i].numpy_columns().get(name), "dtype", None) != values.dtype
                   for i in involved):
                return None
            out[name] = values
        return out

    def _slow_lookup(self, hashes: np.ndarray, keys: pl.DataFrame, found: np.ndarray, rows: pl.DataFrame,
                     positions: np.ndarray) -> tuple[np.ndarray, pl.DataFrame]:
        """Resolve hash collisions: scan the run of equal hashes in every segment, newest first."""
        found = found.copy()
        replacement: dict[int, dict | None] = {}
        for i in positions.tolist():
            key = keys.row(i, named=True)
            replacement[i] = None
            for segment in self.segments:
                lo = np.searchsorted(segment.hashes, hashes[i], side="left")
                hi = np.searchsorted(segment.hashes, hashes[i], side="right")
                hit = None
                for r in range(int(lo), int(hi)):
                    candidate = self._conform(segment.table.slice(r, 1)).row(0, named=True)
                    if all(candidate[k] == key[k] for k in self.primary_key):
                        hit = (r, candidate)
                        break
                if hit is not None:
                    replacement[i] = None if segment.tomb[hit[0]] else hit[1]
                    break
        rows_list = rows.to_dicts()
        for i, value in replacement.items():
            found[i] = value is not None
            rows_list[i] = value if value is not None else {c: None for c in self.schema.names()}
        return found, pl.DataFrame(rows_list, schema=self.schema)

    def range_rows(self, lo: np.ndarray, hi: np.ndarray, *, with_offsets: bool = False) -> pl.DataFrame:
        """Live rows whose hash lies in any ``[lo[i], hi[i])`` (prefix lookups), newest version of each key; with
        `with_offsets`, then :data:`OFFSET_COLUMN` (as :meth:`lookup`)."""
        parts = []
        for rank, segment in enumerate(self.segments):
            if segment.rows == 0:
                continue
            starts = segment.lower_bounds(lo)
            stops = np.where(hi == 0, segment.rows, segment.lower_bounds(hi))
            lengths = stops - starts
            if lengths.sum() == 0:
                continue
            idx = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            taken = self._conform(_take(segment.table, idx))
            if with_offsets:
                column = segment.columns().get(OFFSET_COLUMN)
                offsets = _take(column, idx) if column is not None else pa.nulls(len(idx), pa.int64())
                taken = taken.with_columns(pl.Series(OFFSET_COLUMN, offsets))
            parts.append(taken.with_columns(pl.Series(TOMB_COLUMN, segment.tomb[idx]), pl.lit(rank).alias("__rank"),
                                            pl.Series("__probe", np.repeat(np.arange(len(lo)), lengths))))
        if not parts:
            empty = pl.DataFrame(schema=self.schema)
            if with_offsets:
                empty = empty.with_columns(pl.Series(OFFSET_COLUMN, [], dtype=pl.Int64))
            return empty.with_columns(pl.Series("__probe", [], dtype=pl.Int64))
        if len(parts) == 1:  # one row per key in a segment: nothing to choose between
            merged = parts[0]
        else:  # parts are newest first: the first row of a (key, probe) is its newest version
            merged = distinct(pl.concat(parts), [*self.primary_key, "__probe"], keep="first")
        return merged.filter(~pl.col(TOMB_COLUMN)).sort("__probe", maintain_order=True).drop(TOMB_COLUMN, "__rank")

    def scan(self) -> pl.DataFrame:
        """All live rows (newest version of each key), in hash order within each segment."""
        parts = [self._conform(s.table).with_columns(pl.Series(TOMB_COLUMN, s.tomb), pl.lit(rank).alias("__rank"))
                 for rank, s in enumerate(self.segments) if s.rows]
        if not parts:
            return pl.DataFrame(schema=self.schema)
        if len(parts) == 1:
            return parts[0].filter(~pl.col(TOMB_COLUMN)).drop(TOMB_COLUMN, "__rank")
        merged = pl.concat(parts).unique(subset=list(self.primary_key), keep="first", maintain_order=True)
        return merged.filter(~pl.col(TOMB_COLUMN)).drop(TOMB_COLUMN, "__rank")

    def scan_lazy(self) -> pl.LazyFrame:
        """All live rows as a LazyFrame over the memory-mapped segment files (streams; no full load)."""
        names = self.schema.names()
        parts = []
        for rank, segment in enumerate(self.segments):
            if not segment.rows:
                continue
            lazy = pl.scan_ipc(segment.path) if segment.path else pl.from_arrow(segment.table).lazy()
            present = set(segment.table.column_names)
            lazy = lazy.with_columns([pl.lit(None, dtype).alias(n) for n, dtype in self.schema.items() if n not in present])
            parts.append(lazy.select(*names, pl.col(TOMB_COLUMN).cast(pl.Boolean)).with_columns(pl.lit(rank).alias("__rank")))
        if not parts:
            return pl.LazyFrame(schema=self.schema)
        if len(parts) == 1:
            return parts[0].filter(~pl.col(TOMB_COLUMN)).select(names)
        merged = pl.concat(parts).unique(subset=list(self.primary_key), keep="first", maintain_order=True)
        return merged.filter(~pl.col(TOMB_COLUMN)).select(names)

    def row_count(self) -> int:
        """Number of live keys (exact; merges segments logically)."""
        return self.scan().height if len(self.segments) > 1 else int((~self.segments[0].tomb).sum()) if self.segments else 0

    # ---------------------------------------------------------------- writes
    def apply(self, hashes: np.ndarray, rows: pl.DataFrame, deleted: np.ndarray, commit_ts: np.ndarray | int, *,
              order: np.ndarray | None = None, offsets: np.ndarray | None = None) -> None:
        """Add after-images (one per key, `deleted` marks tombstones, committed at `commit_ts`, written by the
        changelog records at `offsets`) as a new segment.

        `order` may pass ``argsort(hashes)`` when the caller already has it (saves a sort). Then the memtable
        is flushed if it is full, and the process memtable budget is enforced (which may flush other stores).
        """
        if rows.height == 0:
            return
        with self.lock:
            self._add_to_memtable(hashes, rows, deleted, commit_ts, order, offsets)
            memtable_budget.enforce(self)

    def _add_to_memtable(self, hashes: np.ndarray, rows: pl.DataFrame, deleted: np.ndarray,
                         commit_ts: np.ndarray | int, order: np.ndarray | None,
                         offsets: np.ndarray | None = None) -> None:
        """:meth:`apply` without the budget: a new memtable segment, then a flush or in-memory merges."""
        if order is None:
            order = np.argsort(hashes, kind="stable")
        ts = None
        if self.ttl_ms > 0:  # commit times are kept only where table.kv.ttl needs them
            ts = np.empty(rows.height, dtype=np.int64)
            ts[:] = commit_ts
        data = rows.select(self.schema.names()).to_arrow()
        if not _is_identity(order):
            data = _take(data, order)
            ts = None if ts is None else ts[order]
            offsets = None if offsets is None else offsets[order]
        sorted_hashes = np.ascontiguousarray(hashes[order], dtype=np.uint64)
        tomb = np.ascontiguousarray(np.asarray(deleted, dtype=bool)[order]).view(np.uint8)
        self.segments.insert(0, _memory_segment(data, sorted_hashes, tomb,
                                                None if ts is None else pa.array(ts, pa.int64()),
                                                None if offsets is None else pa.array(offsets, pa.int64())))
        self._account()
        memtable = self._memtable_size()
        if memtable >= MEMTABLE_BATCHES or sum(s.rows for s in self.segments[:memtable]) >= MEMTABLE_ROWS:
            self.flush_memtable()
            return
        while True:  # tiered merges inside the memtable keep the number of segments a lookup probes small
            tiers = [s.tier for s in self.segments[:self._memtable_size()]]
            run = next((i for i in range(len(tiers) - _FANOUT + 1) if len(set(tiers[i:i + _FANOUT])) == 1), None)
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
        self.memtable_bytes = sum(s.table.nbytes for s in self.segments[:self._memtable_size()])

    def flush_memtable(self) -> None:
        """Write the in-memory segments as one file segment, then compact the files."""
        with self.lock:
            count = self._memtable_size()
            if count:
                self._merge(0, count)
            self._compact()

    def adopt(self, segments: list[Segment]) -> None:
        """Install segments (newest first) restored from a snapshot."""
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
            if _similar(sizes[i:i + _FANOUT]):
                return first + i, first + i + _FANOUT
        if len(sizes) > _MAX_SEGMENTS:
            return first, first + len(sizes) // 2 + 1
        return None

    def _data_table(self, segment: Segment) -> pa.Table:
        """A segment's value columns in the current schema, then commit time where ``table.kv.ttl`` needs it, then
        the changelog offsets (arrow, no copy when the segment already has the current columns)."""
        table = segment.table
        names = self.schema.names()
        present = set(table.column_names)
        if all(n in present for n in names):
            data = table.select(names)
        else:  # columns added after the segment was written read as null
            data = pa.table([table.column(n) if n in present else pa.nulls(table.num_rows, _arrow_type(dtype))
                             for n, dtype in self.schema.items()], names=names)
        if self.ttl_ms > 0:
            ts = table.column(TS_COLUMN) if TS_COLUMN in present else pa.nulls(table.num_rows, pa.int64())
            data = data.append_column(TS_COLUMN, ts.cast(pa.int64()))
        offsets = table.column(OFFSET_COLUMN) if OFFSET_COLUMN in present else pa.nulls(table.num_rows, pa.int64())
        return data.append_column(OFFSET_COLUMN, offsets)

    def _merge(self, i: int, j: int, *, in_memory: bool = False) -> None:
        """Merge segments [i, j) (newest first) into one; tombstones dropped when nothing older remains."""
        merged = self._merged(self.segments[i:j], bottom=j == len(self.segments), in_memory=in_memory)
        self._replace(i, j, [] if merged is None else [merged], in_memory=in_memory)

    def _replace(self, i: int, j: int, replacement: list[Segment], *, in_memory: bool = False) -> None:
        """Put `replacement` in place of segments [i, j); their files are retired for the owner to delete."""
        # only files need the owner's clean-up; a merged memtable segment is freed right away
        self.retired.extend(s for s in self.segments[i:j] if s.on_disk)
        self.segments[i:j] = replacement
        self._account()
        if not in_memory:  # the merge's working copies are freed: hand their pages back to the OS
            arrow_pool.release_unused()

    def _merged(self, run: list[Segment], *, bottom: bool, in_memory: bool) -> Segment | None:
        """One segment holding the newest version of every key of `run` (newest first), or None when nothing
        remains; tombstones are dropped at the `bottom` (nothing older). Reads only the run (immutable
        segments), so it may run without the lock."""
        chosen = [s for s in run if s.rows]
        segment: Segment | None = None
        if chosen:
            tables = [self._data_table(s) for s in chosen]
            combined = (pa.concat_tables(tables, promote_options="default", memory_pool=pool()) if len(tables) > 1
                        else tables[0])
            order, sorted_hashes = _merge_order([s.hashes for s in chosen])  # newest version of a key first
            repeat = np.r_[False, sorted_hashes[1:] == sorted_hashes[:-1]]
            keep = ~repeat
            if repeat.any():
                frame = self._conform(combined.select(list(self.primary_key)))
                later = frame[order[repeat]]
                earlier = frame[order[np.flatnonzero(repeat) - 1]]
                if not _keys_equal(later, earlier, self.primary_key).all():  # a hash collision: compare keys
                    keep = self._first_of_each_key(frame, order)
            selected = order[keep]
            kept_hashes = sorted_hashes[keep]  # = hashes[selected]
            del order, sorted_hashes, repeat, keep  # big merges: hold as few row-sized arrays as possible
            tomb_all = np.concatenate([s.tomb for s in chosen]).view(np.uint8)
            if self.ttl_ms > 0 and not in_memory and self.clock is not None:
                # table.kv.ttl: an expired row becomes a tombstone (so no older version shows through) and is
                # dropped with the other tombstones at the bottom; no delete record reaches the changelog.
                ts_all = combined.column(TS_COLUMN).to_numpy(zero_copy_only=False)
                expired = ~np.isnan(ts_all.astype(np.float64)) & (ts_all < self.clock() - self.ttl_ms)
                tomb_all = tomb_all | expired.astype(np.uint8)
            if bottom:
                live = tomb_all[selected] == 0
                selected, kept_hashes = selected[live], kept_hashes[live]
            tomb = np.ascontiguousarray(tomb_all[selected])
            del tomb_all
            segment_hashes = np.ascontiguousarray(kept_hashes)
            if not in_memory and len(selected) >= _SPILL_MERGE_ROWS:
                segment = _write_spilled(self.directory, tables, selected, segment_hashes, tomb)
            else:
                merged = _take_merged(tables, selected) if not _is_identity(selected, combined.num_rows) else combined
                data, ts, offsets = _split_system(merged)
                if in_memory:
                    segment = _memory_segment(data, segment_hashes, tomb, ts, offsets)
                else:
                    segment = write_segment(self.directory, _segment_table(data, segment_hashes, tomb, ts, offsets))
        return segment

    def compact_all(self) -> None:
        """Merge every segment into one (expired rows and tombstones dropped): a full compaction."""
        self.flush_memtable()
        if len(self.segments) > 1 or (self.ttl_ms > 0 and self.segments):
            self._merge(0, len(self.segments))

    def _first_of_each_key(self, frame: pl.DataFrame, order: np.ndarray) -> np.ndarray:
        """Slow path for colliding hashes: keep the first (newest) row of each key in `order`."""
        ordered = frame[order].with_row_index("__pos")
        first = ordered.unique(subset=list(self.primary_key), keep="first", maintain_order=True).get_column("__pos")
        keep = np.zeros(len(order), dtype=bool)
        keep[first.to_numpy()] = True
        return keep


def _stacked_keys_equal(stacked: pa.Table, keys: pl.DataFrame, positions: np.ndarray,
                        primary_key: Sequence[str]) -> np.ndarray:
    """Whether each stacked row's key equals the query key at its position (hashes matched; keys almost
    always do)."""
    if len(primary_key) == 1:
        column = stacked.column(primary_key[0])
        if pa.types.is_integer(column.type):  # the common case, straight in numpy
            left = _single_chunk(column).to_numpy(zero_copy_only=False)
            right = keys.get_column(primary_key[0]).to_numpy()
            if right.dtype.kind in "iu":
                return np.asarray(left == right[positions], dtype=bool)
    frame = pl.from_arrow(stacked.select(list(primary_key)))
    assert isinstance(frame, pl.DataFrame)
    return _keys_equal(frame, keys[positions], primary_key)


def _keys_equal(rows: pl.DataFrame, keys: pl.DataFrame, primary_key: Sequence[str]) -> np.ndarray:
    """Row-wise equality of the key columns (nulls compare unequal)."""
    if len(primary_key) == 1 and rows.schema[primary_key[0]].is_integer():  # common case, straight in numpy
        left, right = rows.get_column(primary_key[0]), keys.get_column(primary_key[0])
        equal = left.to_numpy(allow_copy=True) == right.to_numpy(allow_copy=True) if not left.has_nulls() else None
        if equal is not None:
            return np.asarray(equal, dtype=bool)
    checks = [(rows.get_column(k) == keys.get_column(k)).fill_null(False) for k in primary_key]
    result = checks[0]
    for check in checks[1:]:
        result = result & check
    return result.to_numpy()
