"""Merging a run of segments into one: the newest version of every key, tombstones dropped at the bottom.

A run (newest first) is merged by one compiled k-way merge of the runs' hash columns (no concatenated sort),
then every output column is gathered straight from the inputs' buffers. Merges of at least
``_SPILL_MERGE_ROWS`` rows are written column by column through temporary mapped files, so their memory does
not grow with the table. A merge reads only its (immutable) inputs: the store may run it without its lock.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake._utils.arrow_pool import pool
from fluss_lake.kv import _kernels, row_gather  # type: ignore[attr-defined]
from fluss_lake.kv.segment import (
    OFFSET_COLUMN,
    TS_COLUMN,
    Segment,
    conform,
    keys_equal,
    memory_segment,
    segment_table,
    single_chunk,
    write_segment,
)

__all__ = ["is_identity", "merge_run"]

_SYSTEM_VALUES = (TS_COLUMN, OFFSET_COLUMN)  # carried through merges with the rows, not part of the schema

#: File merges of at least this many rows are written column by column through temporary mapped files
#: (:func:`_write_spilled`), so their memory does not grow with the table.
_SPILL_MERGE_ROWS = 1_000_000


def merge_run(
    run: list[Segment],
    *,
    schema: pl.Schema,
    primary_key: Sequence[str],
    directory: str,
    bottom: bool,
    in_memory: bool,
    ttl_ms: int = 0,
    clock: Callable[[], int] | None = None,
) -> Segment | None:
    """One segment holding the newest version of every key of `run` (newest first), or None when nothing
    remains; tombstones are dropped at the `bottom` (nothing older). A file segment is written in `directory`,
    a memtable segment kept `in_memory`; with ``table.kv.ttl`` (`ttl_ms`), rows older than ``clock() - ttl_ms``
    expire in file merges. Reads only the run (immutable segments), so it may run without the store's lock."""
    chosen = [s for s in run if s.rows]
    segment: Segment | None = None
    if chosen:
        tables = [_data_table(s, schema, ttl_ms) for s in chosen]
        combined = (
            pa.concat_tables(tables, promote_options="default", memory_pool=pool()) if len(tables) > 1 else tables[0]
        )
        order, sorted_hashes = _merge_order([s.hashes for s in chosen])  # newest version of a key first
        repeat = np.r_[False, sorted_hashes[1:] == sorted_hashes[:-1]]
        keep = ~repeat
        if repeat.any() and not _repeats_are_same_keys(combined, primary_key, order, repeat):
            keep = _first_of_each_key(conform(combined.select(list(primary_key)), schema), order, primary_key)
        selected = order[keep]
        kept_hashes = sorted_hashes[keep]  # = hashes[selected]
        del order, sorted_hashes, repeat, keep  # big merges: hold as few row-sized arrays as possible
        tomb_all = np.concatenate([s.tomb for s in chosen]).view(np.uint8)
        if ttl_ms > 0 and not in_memory and clock is not None:
            # table.kv.ttl: an expired row becomes a tombstone (so no older version shows through) and is
            # dropped with the other tombstones at the bottom; no delete record reaches the changelog.
            ts_all = combined.column(TS_COLUMN).to_numpy(zero_copy_only=False)
            expired = ~np.isnan(ts_all.astype(np.float64)) & (ts_all < clock() - ttl_ms)
            tomb_all = tomb_all | expired.astype(np.uint8)
        if bottom:
            live = tomb_all[selected] == 0
            selected, kept_hashes = selected[live], kept_hashes[live]
        tomb = np.ascontiguousarray(tomb_all[selected])
        del tomb_all
        segment_hashes = np.ascontiguousarray(kept_hashes)
        if not in_memory and len(selected) >= _SPILL_MERGE_ROWS:
            segment = _write_spilled(directory, tables, selected, segment_hashes, tomb)
        else:
            merged = _take_merged(tables, selected) if not is_identity(selected, combined.num_rows) else combined
            data, ts, offsets = _split_system(merged)
            if in_memory:
                segment = memory_segment(data, segment_hashes, tomb, ts, offsets)
            else:
                segment = write_segment(directory, segment_table(data, segment_hashes, tomb, ts, offsets))
    return segment


def _data_table(segment: Segment, schema: pl.Schema, ttl_ms: int) -> pa.Table:
    """A segment's value columns in the current schema, then commit time where ``table.kv.ttl`` needs it, then
    the changelog offsets (arrow, no copy when the segment already has the current columns)."""
    table = segment.table
    names = schema.names()
    present = set(table.column_names)
    if all(n in present for n in names):
        data = table.select(names)
    else:  # columns added after the segment was written read as null
        data = pa.table(
            [
                table.column(n) if n in present else pa.nulls(table.num_rows, _arrow_type(dtype))
                for n, dtype in schema.items()
            ],
            names=names,
        )
    if ttl_ms > 0:
        ts = table.column(TS_COLUMN) if TS_COLUMN in present else pa.nulls(table.num_rows, pa.int64())
        data = data.append_column(TS_COLUMN, ts.cast(pa.int64()))
    offsets = table.column(OFFSET_COLUMN) if OFFSET_COLUMN in present else pa.nulls(table.num_rows, pa.int64())
    return data.append_column(OFFSET_COLUMN, offsets)


def _repeats_are_same_keys(
    combined: pa.Table, primary_key: Sequence[str], order: np.ndarray, repeat: np.ndarray
) -> bool:
    """Whether every repeated hash (``repeat`` over the hash order) belongs to the same key as the row before it,
    i.e. no two distinct keys share a hash. Integer keys (the usual case) are compared in numpy; other keys as
    frames of the key columns only (the primary key is in every segment: no schema to conform)."""
    later = order[repeat]
    earlier = order[np.flatnonzero(repeat) - 1]
    columns = [combined.column(k) for k in primary_key]
    if all(pa.types.is_integer(c.type) and not c.null_count for c in columns):
        return all(bool((v[later] == v[earlier]).all()) for v in (c.to_numpy() for c in columns))
    frame = pl.from_arrow(pa.table(columns, names=list(primary_key)))
    assert isinstance(frame, pl.DataFrame)
    return bool(keys_equal(frame[later], frame[earlier], primary_key).all())


def _first_of_each_key(frame: pl.DataFrame, order: np.ndarray, primary_key: Sequence[str]) -> np.ndarray:
    """Slow path for colliding hashes: keep the first (newest) row of each key in `order`."""
    ordered = frame[order].with_row_index("__pos")
    first = ordered.unique(subset=list(primary_key), keep="first", maintain_order=True).get_column("__pos")
    keep = np.zeros(len(order), dtype=bool)
    keep[first.to_numpy()] = True
    return keep


def _merge_positions(tables: list[pa.Table], selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows ``selected`` (indices into the tables stacked): the table and the row within it."""
    bounds = np.cumsum([t.num_rows for t in tables])
    source = np.searchsorted(bounds, selected, side="right")
    return source, selected - np.concatenate([[0], bounds[:-1]])[source]


def _take_column(tables: list[pa.Table], name: str, source: np.ndarray, row: np.ndarray) -> pa.Array:
    """One column of a merge's output: a compiled gather from the inputs' buffers (no concatenated copy of the
    inputs first, as Arrow's ``take`` on a chunked column makes)."""
    return row_gather.take_rows([single_chunk(t.column(name)) for t in tables], source, row)


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


def _arrow_type(dtype: pl.DataType) -> pa.DataType:
    """The Arrow type Polars writes for `dtype` (segments are written from Polars frames)."""
    return pl.Series([], dtype=dtype).to_arrow().type


def is_identity(order: np.ndarray, n: int | None = None) -> bool:
    """Whether `order` is ``0, 1, ..., n-1`` (a take would be a copy for nothing)."""
    size = len(order)
    if n is not None and size != n:
        return False
    return size == 0 or (int(order[0]) == 0 and int(order[-1]) == size - 1 and bool((np.diff(order) == 1).all()))


def _split_system(table: pa.Table) -> tuple[pa.Table, pa.ChunkedArray | None, pa.ChunkedArray | None]:
    """(value columns, commit times or None, changelog offsets or None) of merged rows."""
    present = [c for c in _SYSTEM_VALUES if c in table.column_names]
    columns = {c: table.column(c) for c in present}
    data = table.drop_columns(present) if present else table
    return data, columns.get(TS_COLUMN), columns.get(OFFSET_COLUMN)


def _write_spilled(
    directory: str, tables: list[pa.Table], selected: np.ndarray, hashes: np.ndarray, tomb: np.ndarray
) -> Segment:
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
        return write_segment(directory, segment_table(data, hashes, tomb, ts, offsets))
    finally:
        for path in spills:
            os.unlink(path)  # a mapping stays valid after its file is unlinked
