"""Segments of a primary-key bucket's state: immutable, hash-sorted, memory-mapped Arrow files and their index.

Each segment is an uncompressed Arrow IPC file holding after-images (and tombstones) sorted by a 64-bit key
hash. Its hash column *is* the index: a lookup probes a segment through a small directory of the hashes saved
beside it (:class:`SegmentIndex`, an ``.idx`` file, mapped; compiled loops, see ``_kernels.pyx``), then gathers
the hits. Neither rows nor index live in process memory: the mapped pages are file cache the OS can drop. The
module also holds the on-disk column layout (:data:`HASH_COLUMN`, :data:`TOMB_COLUMN`, :data:`TS_COLUMN`,
:data:`OFFSET_COLUMN`) and the small Arrow helpers the store, its merges and its reads share.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake._utils.arrow_pool import pool
from fluss_lake._utils.frames import to_arrow as frame_to_arrow
from fluss_lake.exceptions import CorruptedDataError
from fluss_lake.io.checksum import corrupted, crc32c
from fluss_lake.io.files import fsync_file, unlink_quietly
from fluss_lake.kv import _kernels  # type: ignore[attr-defined]

__all__ = [
    "HASH_COLUMN",
    "INDEX_SUFFIX",
    "OFFSET_COLUMN",
    "TOMB_COLUMN",
    "TS_COLUMN",
    "Segment",
    "SegmentIndex",
    "conform",
    "index_path",
    "keys_equal",
    "memory_segment",
    "remove_segment_file",
    "save_index",
    "file_crc",
    "segment_bytes",
    "segment_table",
    "single_chunk",
    "take",
    "write_segment",
]

HASH_COLUMN = "__hash"
TOMB_COLUMN = "__tomb"  # UInt8 on disk (1 = tombstone) so it maps to numpy without a copy
TS_COLUMN = "__ts"  # Int64 commit time (epoch ms) of the after-image, for table.kv.ttl
#: Int64 changelog offset of the record that wrote the row (its last change); null in segments written before
#: offsets were kept. Lookups can return it (``with_offsets``): a delta join uses it to tell rows whose change it
#: has not consumed yet.
OFFSET_COLUMN = "__offset"

#: Segments with fewer rows are probed with a plain binary search (building an index would cost more than it saves).
_INDEX_MIN_ROWS = 2048
#: Index files: ``<segment file>.idx`` = magic, (rows, shift, directory size, directory item size, the segment's
#: CRC32C, the CRC32C of the four values before it and the payload) as int64, the directory, then the fingerprints
#: (see :meth:`SegmentIndex.save`). Files with the first magic (no checksums) are still read.
INDEX_SUFFIX = ".idx"
_INDEX_MAGIC = b"FLKVIDX2"
_INDEX_MAGIC_V1 = b"FLKVIDX1"
_log = logging.getLogger("fluss_lake.integrity")
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

    def save(self, path: str, *, segment_crc: int = -1, fsync: bool = False) -> None:
        """Write the index as a file for :meth:`open` (atomically: the file is complete or absent), with the CRC32C
        of the segment it indexes and its own."""
        values = np.array(
            [self.rows, self.shift, self.starts.size, self.starts.dtype.itemsize, segment_crc], dtype=np.int64
        )
        starts = np.ascontiguousarray(self.starts).data.cast("B")
        fingerprints = np.ascontiguousarray(self.fingerprints).data.cast("B")
        own = crc32c(fingerprints, crc32c(starts, crc32c(values.tobytes())))
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}{INDEX_SUFFIX}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(_INDEX_MAGIC)
                handle.write(values.tobytes())
                handle.write(np.array([own], dtype=np.int64).tobytes())
                handle.write(starts)
                handle.write(fingerprints)
            if fsync:
                fsync_file(tmp)
            os.replace(tmp, path)
        except BaseException:
            unlink_quietly(tmp)
            raise

    @classmethod
    def open(
        cls, path: str, rows: int, *, segment_crc: int | None = None, key: str | None = None
    ) -> SegmentIndex | None:
        """Map an index saved by :meth:`save` for a segment of `rows` rows (and, when known, CRC32C `segment_crc`).

        None if the file is missing; raises :class:`CorruptedDataError` if it is damaged or belongs to another
        segment (the caller then rebuilds it from the segment).
        """
        try:
            with open(path, "rb") as handle:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            return None
        except ValueError as exc:  # an empty file cannot be mapped
            raise corrupted(key or path, "it is empty", what="segment index") from exc
        magic = bytes(mapped[: len(_INDEX_MAGIC)])
        fields = 6 if magic == _INDEX_MAGIC else 4 if magic == _INDEX_MAGIC_V1 else 0
        head = len(_INDEX_MAGIC) + 8 * fields
        if not fields or len(mapped) < head:
            raise corrupted(key or path, "it has no index header (truncated or overwritten)", what="segment index")
        values = [int(v) for v in np.frombuffer(mapped, np.int64, fields, len(_INDEX_MAGIC))]
        saved_rows, shift, count, itemsize = values[:4]
        if saved_rows != rows or itemsize not in (4, 8) or len(mapped) != head + count * itemsize + (rows + 1) * 4:
            raise corrupted(key or path, f"its size does not fit a segment of {rows} rows", what="segment index")
        if fields == 6:
            own = crc32c(memoryview(mapped)[head:], crc32c(memoryview(mapped)[len(_INDEX_MAGIC) : head - 8]))
            if own != values[5]:
                raise corrupted(key or path, "its checksum does not match its bytes", what="segment index")
            if segment_crc is not None and values[4] not in (-1, segment_crc):
                raise corrupted(key or path, "it indexes another segment (files swapped)", what="segment index")
        starts = np.frombuffer(mapped, np.uint32 if itemsize == 4 else np.int64, count, head)
        fingerprints = np.frombuffer(mapped, np.uint32, rows + 1, head + count * itemsize)
        return cls(starts, fingerprints, shift, rows)

    def probe(
        self,
        hashes: np.ndarray,
        queries: np.ndarray,
        pending: np.ndarray,
        seg_of: np.ndarray,
        row_of: np.ndarray,
        number: int,
    ) -> int:
        """Look for the ``pending`` queries (positions into ``queries``, visited in that order) in ``hashes``
        (the indexed, mapped column): a hit sets ``seg_of = number`` and ``row_of`` = its first row. The queries
        still missing are moved, in order, to the front of ``pending``; returns their count."""
        return int(
            _kernels.probe_indexed(
                self.starts, self.fingerprints, hashes, self.shift, queries, pending, seg_of, row_of, number
            )
        )

    def bounds(self, query: int) -> tuple[int, int]:
        """The rows ``[lo, hi)`` that may hold one hash (its directory slot), with scalar operations."""
        slot = query >> self.shift
        starts = self.starts_view
        return starts[slot], starts[slot + 1]

    @property
    def starts_view(self) -> memoryview:
        """The directory as a memoryview: items read as Python ints."""
        return self.starts.data


@dataclass
class Segment:
    """One immutable, hash-sorted segment: memory-mapped from a file, or in memory (``path`` None)."""

    name: str
    path: str | None
    table: pa.Table
    hashes: np.ndarray
    tomb: np.ndarray
    rows: int
    crc: int | None = None  # the file's CRC32C (None: in memory, or not known: written before checksums)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        key: str | None = None,
        expected_crc: int | None = None,
        required: bool = False,
        crc: int | None = None,
    ) -> Segment:
        """Map a segment file (zero-copy). A segment file is a plain Arrow IPC file (so Polars scans it lazily); its
        CRC32C is kept by the snapshot manifest naming it and by its index file. With `expected_crc` the file is
        checked against it; `required` refuses a file whose checksum is not known (a table of this version); `crc`
        is a checksum known already (a file this process just wrote). `key` names it in errors; a damaged file
        raises :class:`CorruptedDataError`."""
        key = key or path
        if expected_crc is None and required:
            raise corrupted(key, "no checksum of it is recorded (its snapshot lacks one)", what="KV segment")
        try:
            raw = pa.memory_map(path).read_buffer()
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise corrupted(key, f"it cannot be mapped ({exc})", what="KV segment") from exc
        if expected_crc is not None:
            actual = crc32c(raw)
            if actual != expected_crc:
                raise corrupted(
                    key,
                    f"its checksum does not match the one its snapshot recorded (CRC32C {actual:08x}, recorded "
                    f"{expected_crc:08x}: damaged, replaced or swapped)",
                    what="KV segment",
                )
            crc = actual
        try:
            table = pa.ipc.open_file(raw).read_all()
            for name in (HASH_COLUMN, TOMB_COLUMN):
                table.column(name)
        except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
            raise corrupted(key, f"it cannot be decoded ({exc})", what="KV segment") from exc
        # Both index columns are read straight from the mapping: no per-row process memory.
        hashes = (
            single_chunk(table.column(HASH_COLUMN)).to_numpy(zero_copy_only=True)
            if table.num_rows
            else np.empty(0, np.uint64)
        )
        tomb = (
            single_chunk(table.column(TOMB_COLUMN)).to_numpy(zero_copy_only=True).view(np.bool_)
            if table.num_rows
            else np.empty(0, bool)
        )
        return cls(os.path.basename(path), path, table, hashes, tomb, table.num_rows, crc)

    @classmethod
    def in_memory(cls, frame: pl.DataFrame) -> Segment:
        """A memtable segment from a frame holding hash and tombstone columns, sorted by hash."""
        table = frame_to_arrow(frame)
        return cls(
            f"mem-{uuid.uuid4().hex}",
            None,
            table,
            frame.get_column(HASH_COLUMN).to_numpy(),
            frame.get_column(TOMB_COLUMN).to_numpy().view(np.bool_),
            frame.height,
        )

    def table_bytes(self) -> int:
        """The table's ``nbytes`` (cached: the table never changes, and Arrow recounts its buffers on each call)."""
        cached = self.__dict__.get("_table_bytes")
        if cached is None:
            cached = self.__dict__["_table_bytes"] = self.table.nbytes
        return cached

    @property
    def on_disk(self) -> bool:
        """Whether the segment is a file (memtable segments are not)."""
        return self.path is not None

    def columns(self) -> dict[str, pa.Array]:
        """Each column as one Arrow array (cached), for point reads."""
        cached = getattr(self, "_columns", None)
        if cached is None:
            cached = {name: single_chunk(self.table.column(name)) for name in self.table.column_names}
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
            return self._index  # type: ignore[attr-defined]
        except AttributeError:
            index = None
            if self.rows >= _INDEX_MIN_ROWS:
                if self.path is not None:
                    try:
                        index = SegmentIndex.open(index_path(self.path), self.rows, segment_crc=self.crc)
                    except CorruptedDataError as exc:  # the segment is the truth: its index is rebuilt from it
                        _log.warning("%s; rebuilt from its segment", exc)
                        index = SegmentIndex.build(self.hashes)
                        index.save(index_path(self.path), segment_crc=-1 if self.crc is None else self.crc)
                if index is None:
                    index = SegmentIndex.build(self.hashes)
            object.__setattr__(self, "_index", index)
            return index

    def probe(
        self, queries: np.ndarray, pending: np.ndarray, seg_of: np.ndarray, row_of: np.ndarray, number: int
    ) -> int:
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
            view = np.ascontiguousarray(self.hashes).data
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
        return array.to_numpy(zero_copy_only=True).data.__getitem__
    if array.null_count == 0 and (pa.types.is_large_string(kind) or pa.types.is_string(kind)) and len(array):
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if pa.types.is_large_string(kind) else np.int32)[
            array.offset : array.offset + len(array) + 1
        ].data
        data = memoryview(array.buffers()[2] or b"")  # no data buffer when every string is empty

        def string(pos: int) -> str:
            return str(data[offsets[pos] : offsets[pos + 1]], "utf-8")

        return string
    return lambda pos: array[pos].as_py()


def take(data: Any, indices: np.ndarray | pa.Array) -> Any:
    """Arrow's ``take`` (of a table, chunked array or array) into fluss-lake's pool (:mod:`arrow_pool`)."""
    return pc.take(data, indices if isinstance(indices, pa.Array) else pa.array(indices), memory_pool=pool())


def single_chunk(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array, without a copy when it already is one chunk (segments are written so)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks(memory_pool=pool())


def segment_table(
    data: pa.Table,
    hashes: np.ndarray,
    tomb: np.ndarray,
    ts: pa.ChunkedArray | pa.Array | None,
    offsets: pa.ChunkedArray | pa.Array | None,
) -> pa.Table:
    """The on-disk column layout: value columns, then hash, tombstone (UInt8), for tables with ``table.kv.ttl``
    commit time (other tables do not need it: 8 bytes per row less to write and merge), then the changelog offset
    of each row (null when unknown)."""
    table = data.append_column(HASH_COLUMN, pa.array(hashes, pa.uint64())).append_column(
        TOMB_COLUMN, pa.array(tomb.view(np.uint8), pa.uint8())
    )
    if ts is not None:
        table = table.append_column(TS_COLUMN, ts)
    return table.append_column(OFFSET_COLUMN, offsets if offsets is not None else pa.nulls(len(hashes), pa.int64()))


def memory_segment(
    data: pa.Table,
    hashes: np.ndarray,
    tomb: np.ndarray,
    ts: pa.ChunkedArray | pa.Array | None,
    offsets: pa.ChunkedArray | pa.Array | None,
) -> Segment:
    """A memtable segment (sorted by hash) built straight from Arrow columns."""
    table = segment_table(data, hashes, tomb, ts, offsets).combine_chunks(memory_pool=pool())
    return Segment(f"mem-{uuid.uuid4().hex}", None, table, hashes, tomb.view(np.bool_), table.num_rows)


def write_segment(directory: str, frame: pl.DataFrame | pa.Table, *, fsync: bool = False) -> Segment:
    """Write a frame or table (already holding hash and tombstone columns, sorted by hash) as a new segment."""
    os.makedirs(directory, exist_ok=True)
    name = f"seg-{uuid.uuid4().hex}.arrow"
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, f".tmp-{name}")
    table = frame_to_arrow(frame) if isinstance(frame, pl.DataFrame) else frame.combine_chunks(memory_pool=pool())
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))
    crc = file_crc(tmp)
    if fsync:
        fsync_file(tmp)
    if table.num_rows >= _INDEX_MIN_ROWS:  # the index first: a segment that exists has its index file
        hashes = single_chunk(table.column(HASH_COLUMN)).to_numpy(zero_copy_only=False)
        SegmentIndex.build(hashes).save(index_path(path), segment_crc=-1 if crc is None else crc, fsync=fsync)
    os.replace(tmp, path)
    return Segment.open(path, crc=crc)


def file_crc(path: str) -> int | None:
    """The CRC32C of a whole file (None for an empty one)."""
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return None
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return crc32c(mapped)


def segment_bytes(table: pa.Table) -> bytes:
    """A segment file's bytes written from its (mapped) table: for a segment whose file is gone."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(table.num_rows, 1))
    return sink.getvalue().to_pybytes()


def save_index(path: str, *, crc: int | None = None, fsync: bool = False) -> None:
    """Write the index file of an existing segment file that has none (a segment downloaded from a remote store)."""
    segment = Segment.open(path, crc=crc)
    if segment.rows >= _INDEX_MIN_ROWS and not os.path.exists(index_path(path)):
        crc = -1 if segment.crc is None else segment.crc
        SegmentIndex.build(segment.hashes).save(index_path(path), segment_crc=crc, fsync=fsync)


def index_path(segment_path: str) -> str:
    """The file beside a segment file holding its probe index (see :class:`SegmentIndex`)."""
    return segment_path + INDEX_SUFFIX


def remove_segment_file(path: str) -> None:
    """Delete a segment file and its index file (either may be gone already)."""
    unlink_quietly(path)
    unlink_quietly(index_path(path))


def conform(table: pa.Table, schema: pl.Schema) -> pl.DataFrame:
    """Segment rows as a frame with the current `schema` (columns added later are null)."""
    names = schema.names()
    if table.column_names != names and set(names) <= set(table.column_names):  # projected in Arrow: no query
        table = table.select(names)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    if frame.columns == names:  # the usual case: nothing to add or reorder
        return frame
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in schema.items() if name not in frame.columns]
    if missing:
        frame = frame.with_columns(missing)
    return frame.select(names)


def keys_equal(rows: pl.DataFrame, keys: pl.DataFrame, primary_key: Sequence[str]) -> np.ndarray:
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
