"""Gather the rows a probe found (segment, row per query) into query order, one compiled pass per column.

Fixed-width columns (integers, floats, dates, times, timestamps) and strings/binaries are copied straight from
the segments' buffers (memory-mapped files or memtable arrays) into one Arrow array in query order, validity
included; other types return None and the caller falls back to Arrow ``take``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake._utils.arrow_pool import pool
from fluss_lake.kv import _kernels  # type: ignore[attr-defined]

__all__ = ["ColumnPlan", "gather_column", "gather_numpy", "take_rows"]

_IN_ORDER = np.empty(0, dtype=np.int64)  # an empty visiting order: the queries' own order

_VARIABLE = {
    pa.string(): (4, pa.large_string()),
    pa.large_string(): (8, pa.large_string()),
    pa.binary(): (4, pa.large_binary()),
    pa.large_binary(): (8, pa.large_binary()),
}


def _fixed_width(kind: pa.DataType) -> int:
    """Bytes per value of a fixed-width primitive type, or 0 (booleans are bit-packed; others vary)."""
    if pa.types.is_boolean(kind) or pa.types.is_decimal(kind) or pa.types.is_fixed_size_binary(kind):
        return 0
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_temporal(kind)
    if numeric and kind.bit_width % 8 == 0:
        return kind.bit_width // 8
    return 0


def gather_numpy(
    arrays: Sequence[np.ndarray | None], seg_of: np.ndarray, row_of: np.ndarray, order: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    """``arrays[seg_of[i]][row_of[i]]`` for numpy columns of `dtype` (zero where ``seg_of[i] < 0``)."""
    addresses = np.zeros(len(arrays), dtype=np.uint64)
    for s, array in enumerate(arrays):
        if array is not None and len(array):
            addresses[s] = array.ctypes.data
    out = np.empty(len(seg_of), dtype=dtype)
    _kernels.gather_fixed(seg_of, row_of, order, addresses, out.dtype.itemsize, out.view(np.uint8))
    return out


def gather_column(
    arrays: Sequence[pa.Array | None],
    involved: Sequence[int],
    seg_of: np.ndarray,
    row_of: np.ndarray,
    order: np.ndarray,
    found: np.ndarray,
    all_found: bool,
) -> pa.Array | None:
    """One column of the found rows in query order (null where not `found`), or None for unsupported types.

    ``arrays[s]`` is the column of segment ``s`` (only the `involved` ones are read); ``seg_of`` must be -1
    wherever ``found`` is False; ``order`` is the order to visit queries in (the probe's hash order reads each
    segment front to back; empty: the queries' own order).
    """
    kinds = {arrays[s].type for s in involved}  # type: ignore[union-attr]
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    n = len(seg_of)
    slots = len(arrays)
    width = _fixed_width(kind)
    if width:
        addresses = np.zeros(slots, dtype=np.uint64)
        for s in involved:
            array = arrays[s]
            addresses[s] = array.buffers()[1].address + array.offset * width  # type: ignore[union-attr]
        out = np.empty(n * width, dtype=np.uint8)
        _kernels.gather_fixed(seg_of, row_of, order, addresses, width, out)
        out_type, values = kind, [pa.py_buffer(out)]
    elif kind in _VARIABLE:
        offset_width, out_type = _VARIABLE[kind]
        offset_addresses = np.zeros(slots, dtype=np.uint64)
        data_addresses = np.zeros(slots, dtype=np.uint64)
        wide = np.zeros(slots, dtype=np.uint8)
        for s in involved:
            array = arrays[s]
            buffers = array.buffers()  # type: ignore[union-attr]
            offset_addresses[s] = buffers[1].address + array.offset * offset_width  # type: ignore[union-attr]
            data_addresses[s] = buffers[2].address if buffers[2] is not None else 0
            wide[s] = offset_width == 8
        offsets, data = _kernels.gather_strings(seg_of, row_of, order, offset_addresses, data_addresses, wide)
        values = [pa.py_buffer(offsets), pa.py_buffer(data)]
    else:
        return None
    if any(arrays[s].null_count for s in involved):  # type: ignore[union-attr]
        bitmaps = np.zeros(slots, dtype=np.uint64)
        bit_offsets = np.zeros(slots, dtype=np.int64)
        for s in involved:
            array = arrays[s]
            validity = array.buffers()[0]  # type: ignore[union-attr]
            if validity is not None and array.null_count:  # type: ignore[union-attr]
                bitmaps[s], bit_offsets[s] = validity.address, array.offset  # type: ignore[union-attr]
        valid = np.empty(n, dtype=np.uint8)
        _kernels.gather_valid(seg_of, row_of, order, bitmaps, bit_offsets, valid)
        mask: np.ndarray | None = valid.view(np.bool_)
    else:
        mask = None if all_found else found
    bitmap = None if mask is None or mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(out_type, n, [bitmap, *values])


class ColumnPlan:
    """:func:`gather_column` of one column over a fixed list of segments, its per-segment buffer addresses worked
    out once (:meth:`of`); :meth:`gather` then costs one compiled pass (two with nulls) and no Python per segment.
    The plan holds the arrays, so the addresses stay valid."""

    __slots__ = ("addresses", "arrays", "bit_offsets", "bitmaps", "data_addresses", "out_type", "wide", "width")

    def __init__(self, arrays: Sequence[pa.Array], out_type: pa.DataType, width: int) -> None:
        slots = len(arrays)
        self.arrays = list(arrays)
        self.out_type = out_type
        self.width = width  # bytes per value; 0: variable width (strings, binaries)
        self.addresses = np.zeros(slots, dtype=np.uint64)
        self.data_addresses = np.zeros(slots, dtype=np.uint64)
        self.wide = np.zeros(slots, dtype=np.uint8)
        self.bitmaps: np.ndarray | None = None
        self.bit_offsets = np.zeros(slots, dtype=np.int64)
        for s, array in enumerate(arrays):
            buffers = array.buffers()
            if width:
                if buffers[1] is not None:
                    self.addresses[s] = buffers[1].address + array.offset * width
            else:
                offset_width = _VARIABLE[array.type][0]
                if buffers[1] is not None:
                    self.addresses[s] = buffers[1].address + array.offset * offset_width
                self.data_addresses[s] = buffers[2].address if buffers[2] is not None else 0
                self.wide[s] = offset_width == 8
            if array.null_count and buffers[0] is not None:
                if self.bitmaps is None:
                    self.bitmaps = np.zeros(slots, dtype=np.uint64)
                self.bitmaps[s], self.bit_offsets[s] = buffers[0].address, array.offset

    @classmethod
    def of(cls, arrays: Sequence[pa.Array]) -> ColumnPlan | None:
        """The plan of a column given by each segment's array, or None for types left to Arrow's ``take`` (or
        segments whose types differ)."""
        kinds = {a.type for a in arrays}
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        width = _fixed_width(kind)
        if width:
            return cls(arrays, kind, width)
        if kind in _VARIABLE:
            return cls(arrays, _VARIABLE[kind][1], 0)
        return None

    def gather(
        self, seg_of: np.ndarray, row_of: np.ndarray, order: np.ndarray, found: np.ndarray, all_found: bool
    ) -> pa.Array:
        """The column at (segment, row) of each query, as :func:`gather_column` gives it."""
        n = len(seg_of)
        if self.width:
            out = np.empty(n * self.width, dtype=np.uint8)
            _kernels.gather_fixed(seg_of, row_of, order, self.addresses, self.width, out)
            values = [pa.py_buffer(out)]
        else:
            offsets, data = _kernels.gather_strings(
                seg_of, row_of, order, self.addresses, self.data_addresses, self.wide
            )
            values = [pa.py_buffer(offsets), pa.py_buffer(data)]
        if self.bitmaps is not None:
            valid = np.empty(n, dtype=np.uint8)
            _kernels.gather_valid(seg_of, row_of, order, self.bitmaps, self.bit_offsets, valid)
            mask: np.ndarray | None = valid.view(np.bool_)
        else:
            mask = None if all_found else found
        bitmap = None if mask is None or mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))
        return pa.Array.from_buffers(self.out_type, n, [bitmap, *values])


def take_rows(columns: Sequence[pa.Array], source: np.ndarray, row: np.ndarray) -> pa.Array:
    """``columns[source[i]][row[i]]`` for every i: one column of a merge's output gathered from its sources.

    The compiled gather when the type allows it (one pass, no concatenation of the sources), else Arrow's
    ``take`` over the concatenated sources.
    """
    n = len(source)
    everything = np.ones(n, dtype=bool)
    involved = list(range(len(columns)))
    gathered = gather_column(columns, involved, source, row, _IN_ORDER, everything, True)
    kind = columns[0].type
    if gathered is not None:
        return gathered if gathered.type == kind else gathered.cast(kind)  # (large) offsets back to the source's
    starts = np.zeros(len(columns), dtype=np.int64)
    np.cumsum([len(c) for c in columns[:-1]], out=starts[1:])
    sources = [c if c.type == kind else c.cast(kind) for c in columns]
    taken = pc.take(pa.chunked_array(sources, type=kind), pa.array(starts[source] + row), memory_pool=pool())
    return taken.combine_chunks(memory_pool=pool())
