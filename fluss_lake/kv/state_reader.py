"""Reads of a primary-key bucket's state: point lookups, batch lookups, range reads and scans over its segments.

The state is a list of hash-sorted segments, newest first (the memtable's in-memory segments, then the files).
A batch lookup probes each segment, newest first, for the hashes not found yet (one compiled pass per
segment, see :meth:`Segment.probe`), then gathers the hits into query order (:mod:`row_gather`); the newest
version of a key wins and a tombstone hides older ones. When the bucket key is a strict prefix of the primary
key, the index hash puts the bucket-key hash in the high 32 bits, so all rows of one prefix are contiguous
and a prefix lookup is a range read (:meth:`StateReader.range_rows`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake._utils.arrow_pool import pool
from fluss_lake._utils.distinct import distinct
from fluss_lake.kv import _kernels, row_gather  # type: ignore[attr-defined]
from fluss_lake.kv.segment import OFFSET_COLUMN, TOMB_COLUMN, Segment, conform, keys_equal, single_chunk, take

__all__ = ["StateReader", "lookup_buckets"]


class StateReader:
    """The read side of one bucket's state: every read of its segments (newest first) and their rows.

    The state itself (the segments, the schema, the primary key) is kept, and changed, by the store that
    extends this class (:class:`~fluss_lake.kv.kv_store.KvStore`).
    """

    segments: list[Segment]  # newest first
    schema: pl.Schema
    primary_key: tuple[str, ...]

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
            pending = pending[: segment.probe(queries, pending, seg_of, row_of, number)]
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

    def _take(
        self, groups: list[tuple[int, np.ndarray, np.ndarray]], n: int
    ) -> tuple[np.ndarray, pa.Table | None, np.ndarray]:
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
            parts.append(take(segment.table.select([c for c in names if c in present]), rows))
        stacked = pa.concat_tables(parts, promote_options="default", memory_pool=pool()) if len(parts) > 1 else parts[0]
        positions = np.concatenate([where for _, where, _ in groups]) if len(groups) > 1 else groups[0][1]
        return tomb, stacked, positions

    def _align(
        self, stacked: pa.Table | None, positions: np.ndarray, n: int, absent: np.ndarray | None = None
    ) -> pl.DataFrame:
        """Stacked rows put back in query order; positions with no stacked row (or marked `absent`, a mask
        over the stacked rows) read as all-null rows."""
        if stacked is None or len(positions) == 0:
            return pl.DataFrame(schema=self.schema).clear(n)
        if absent is not None and absent.any():
            positions = positions[~absent]
            stacked = stacked.filter(pa.array(~absent))
        k = len(positions)
        frame = conform(
            stacked.combine_chunks(memory_pool=pool()) if stacked.column(0).num_chunks > 1 else stacked, self.schema
        )
        if k == n and (n == 1 or bool((positions[1:] > positions[:-1]).all())):
            return frame  # every query hit, already in query order
        order = np.full(n, k, dtype=np.intp)  # row k: the all-null row
        order[positions] = np.arange(k)
        frame = frame.vstack(pl.DataFrame(schema=self.schema).clear(1)).rechunk() if k < n else frame
        return frame[order]

    def lookup(
        self, hashes: np.ndarray, keys: pl.DataFrame, *, with_offsets: bool = False
    ) -> tuple[np.ndarray, pl.DataFrame]:
        """Current rows for keys (with their index hashes): (found mask, aligned rows, nulls where absent).

        Hash collisions between distinct keys are resolved by comparing the key columns (rare slow path). With
        `with_offsets` the rows end with :data:`OFFSET_COLUMN`, the changelog offset of each row's last change
        (null where absent or unknown).
        """
        seg_of, row_of, order = self._probe_all(hashes)
        return self._resolve(hashes, keys, seg_of, row_of, order, with_offsets=with_offsets)

    def _resolve(
        self,
        hashes: np.ndarray,
        keys: pl.DataFrame,
        seg_of: np.ndarray,
        row_of: np.ndarray,
        order: np.ndarray,
        *,
        with_offsets: bool,
    ) -> tuple[np.ndarray, pl.DataFrame]:
        """:meth:`lookup` after the probe: the found mask and the aligned rows of the probed positions."""
        n = len(hashes)
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
            rows = rows.hstack([self._offsets_at(seg_of, row_of, known)])  # eager: no query plan per call
        return found, rows

    def _offsets_at(self, seg_of: np.ndarray, row_of: np.ndarray, known: np.ndarray) -> pl.Series:
        """The changelog offsets of the rows at (segment, row) where `known` (null elsewhere, and for rows of
        segments written before offsets were kept); one take per segment involved."""
        involved = np.unique(seg_of[known]).tolist()
        if not involved:
            return pl.Series(OFFSET_COLUMN, pa.nulls(len(seg_of), pa.int64()))
        arrays: list[pa.Array | None] = [None] * len(self.segments)
        for number in involved:
            arrays[number] = self.segments[number].columns().get(OFFSET_COLUMN)
        if all(arrays[i] is not None for i in involved):  # one compiled gather, validity included
            live = np.where(known, seg_of, -1)
            gathered = row_gather.gather_column(
                arrays, involved, live, row_of, np.empty(0, dtype=np.int64), known, bool(known.all())
            )
            if gathered is not None:
                return arrow_series(OFFSET_COLUMN, gathered)
        values = np.zeros(len(seg_of), dtype=np.int64)
        valid = np.zeros(len(seg_of), dtype=bool)
        for number in involved:
            column = self.segments[number].columns().get(OFFSET_COLUMN)
            if column is None:
                continue
            where = np.flatnonzero(known & (seg_of == number))
            taken = take(column, row_of[where])
            values[where] = taken.fill_null(0).to_numpy(zero_copy_only=False)
            valid[where] = taken.is_valid().to_numpy(zero_copy_only=False)
        return pl.Series(OFFSET_COLUMN, pa.array(values, mask=~valid))

    def _gather_found(
        self, seg_of: np.ndarray, row_of: np.ndarray, order: np.ndarray, involved: list[int], keys: pl.DataFrame
    ) -> tuple[np.ndarray, pl.DataFrame, np.ndarray]:
        """Rows of the probed positions whose keys match and are not tombstones, aligned with the queries
        (all-null rows elsewhere): (found mask, rows, query positions whose hash matched another key).

        Every column is gathered in one compiled pass into query order (:mod:`row_gather`); types it does not
        handle use one Arrow ``take`` per segment plus one to put them in query order. Every involved segment
        has every column.
        """
        plan = _plan_of(self.segments, self.schema, self.primary_key)
        if plan is not None:
            fast = plan.gather_found(seg_of, row_of, order, keys)
            if fast is not None:
                return fast
        n = len(seg_of)
        pk = self.primary_key
        segments = self.segments
        hit = seg_of >= 0
        tomb = row_gather.gather_numpy(
            [s.tomb.view(np.uint8) if i in involved else None for i, s in enumerate(segments)],
            seg_of,
            row_of,
            order,
            np.dtype(np.uint8),
        ).view(np.bool_)
        key_values = self._integer_keys(keys, involved)
        if key_values is not None:  # every key column is an integer: compare in compiled gathers, no frames
            same = np.ones(n, dtype=bool)
            for name, values in key_values.items():
                columns = [
                    segments[i].numpy_columns().get(name) if i in involved else None for i in range(len(segments))
                ]
                same &= row_gather.gather_numpy(columns, seg_of, row_of, order, values.dtype) == values
        else:
            same = np.ones(n, dtype=bool)
            for number, where, rows in self._groups(seg_of, row_of):
                same[where] = _stacked_keys_equal(take(segments[number].table.select(list(pk)), rows), keys, where, pk)
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
            parts = [take(segments[i].columns()[name], rows) for i, _, rows in kept]
            stacked = pa.concat_arrays(parts, memory_pool=pool()) if len(parts) > 1 else parts[0]
            if arrow_order is None:
                positions = np.concatenate([where for _, where, _ in kept]) if len(kept) > 1 else kept[0][1]
                index_of = np.zeros(n, dtype=np.intp)
                index_of[positions] = np.arange(len(positions))
                arrow_order = pa.array(index_of, mask=absent)
            series.append(pl.Series(name, take(stacked, arrow_order)))
        return found, pl.DataFrame(series), mismatch

    def _integer_keys(self, keys: pl.DataFrame, involved: list[int]) -> dict[str, np.ndarray] | None:
        """The query keys as numpy arrays when every key column is an integer stored (without nulls, same
        width) in every involved segment; None otherwise (the frame-based comparison handles the rest)."""
        out = {}
        for name in self.primary_key:
            if not keys.schema[name].is_integer():
                return None
            values = keys.get_column(name).to_numpy()
            if any(
                getattr(self.segments[i].numpy_columns().get(name), "dtype", None) != values.dtype for i in involved
            ):
                return None
            out[name] = values
        return out

    def _slow_lookup(
        self, hashes: np.ndarray, keys: pl.DataFrame, found: np.ndarray, rows: pl.DataFrame, positions: np.ndarray
    ) -> tuple[np.ndarray, pl.DataFrame]:
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
                    candidate = conform(segment.table.slice(r, 1), self.schema).row(0, named=True)
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
        `with_offsets`, then :data:`OFFSET_COLUMN` (as :meth:`lookup`). Frames are built from their columns and
        ordered in numpy: no Polars query per segment."""
        parts = []
        wanted = set(self.schema.names())
        for segment in self.segments:
            if segment.rows == 0:
                continue
            starts = segment.lower_bounds(lo)
            stops = np.where(hi == 0, segment.rows, segment.lower_bounds(hi))
            lengths = stops - starts
            if lengths.sum() == 0:
                continue
            idx = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
            values = segment.table.select([c for c in segment.table.column_names if c in wanted])
            columns = conform(take(values, idx), self.schema).get_columns()
            if with_offsets:
                column = segment.columns().get(OFFSET_COLUMN)
                offsets = take(column, idx) if column is not None else pa.nulls(len(idx), pa.int64())
                columns.append(pl.Series(OFFSET_COLUMN, offsets))
            columns.append(pl.Series(TOMB_COLUMN, segment.tomb[idx]))
            columns.append(pl.Series("__probe", np.repeat(np.arange(len(lo)), lengths)))
            parts.append(pl.DataFrame(columns))
        if not parts:
            empty = pl.DataFrame(schema=self.schema)
            if with_offsets:
                empty = empty.with_columns(pl.Series(OFFSET_COLUMN, [], dtype=pl.Int64))
            return empty.with_columns(pl.Series("__probe", [], dtype=pl.Int64))
        if len(parts) == 1:  # one row per key in a segment: nothing to choose between
            merged = parts[0]
        else:  # parts are newest first: the first row of a (key, probe) is its newest version
            merged = distinct(pl.concat(parts), [*self.primary_key, "__probe"], keep="first")
        live = np.flatnonzero(~merged.get_column(TOMB_COLUMN).to_numpy())
        live = live[np.argsort(merged.get_column("__probe").to_numpy()[live], kind="stable")]  # by probe, in order
        return pl.DataFrame([c for c in merged.get_columns() if c.name != TOMB_COLUMN])[live]

    def scan(self) -> pl.DataFrame:
        """All live rows (newest version of each key), in hash order within each segment."""
        parts = [
            conform(s.table, self.schema).with_columns(pl.Series(TOMB_COLUMN, s.tomb), pl.lit(rank).alias("__rank"))
            for rank, s in enumerate(self.segments)
            if s.rows
        ]
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
            lazy = pl.scan_ipc(segment.path) if segment.path else pl.DataFrame(pl.from_arrow(segment.table)).lazy()
            present = set(segment.table.column_names)
            lazy = lazy.with_columns(
                [pl.lit(None, dtype).alias(n) for n, dtype in self.schema.items() if n not in present]
            )
            parts.append(
                lazy.select(*names, pl.col(TOMB_COLUMN).cast(pl.Boolean)).with_columns(pl.lit(rank).alias("__rank"))
            )
        if not parts:
            return pl.LazyFrame(schema=self.schema)
        if len(parts) == 1:
            return parts[0].filter(~pl.col(TOMB_COLUMN)).select(names)
        merged = pl.concat(parts).unique(subset=list(self.primary_key), keep="first", maintain_order=True)
        return merged.filter(~pl.col(TOMB_COLUMN)).select(names)

    def row_count(self) -> int:
        """Number of live keys (exact; merges segments logically)."""
        if len(self.segments) > 1:
            return self.scan().height
        return int((~self.segments[0].tomb).sum()) if self.segments else 0


def _stacked_keys_equal(
    stacked: pa.Table, keys: pl.DataFrame, positions: np.ndarray, primary_key: Sequence[str]
) -> np.ndarray:
    """Whether each stacked row's key equals the query key at its position (hashes matched; keys almost
    always do)."""
    if len(primary_key) == 1:
        column = stacked.column(primary_key[0])
        if pa.types.is_integer(column.type):  # the common case, straight in numpy
            left = single_chunk(column).to_numpy(zero_copy_only=False)
            right = keys.get_column(primary_key[0]).to_numpy()
            if right.dtype.kind in "iu":
                return np.asarray(left == right[positions], dtype=bool)
    frame = pl.from_arrow(stacked.select(list(primary_key)))
    assert isinstance(frame, pl.DataFrame)
    return keys_equal(frame, keys[positions], primary_key)


def lookup_buckets(
    readers: Sequence[StateReader],
    positions: Sequence[np.ndarray],
    hashes: np.ndarray,
    keys: pl.DataFrame,
    *,
    with_offsets: bool = False,
) -> tuple[np.ndarray, pl.DataFrame] | None:
    """:meth:`StateReader.lookup` of keys spread over several buckets in one gather: ``readers[i]`` holds the keys
    at ``positions[i]`` (disjoint, together every position). Each bucket is probed on its own segments, then the
    rows of every bucket are gathered straight into key order, so the cost of a lookup does not grow with the
    number of buckets it touches (no per-bucket frames, no concatenation, no re-ordering). None when the
    buckets' schemas differ (a bucket not caught up with a schema change): the caller looks up bucket by bucket.
    The caller holds every reader's lock.
    """
    first = readers[0]
    if any(not _same_schema(r.schema, first.schema) or r.primary_key != first.primary_key for r in readers[1:]):
        return None
    n = len(hashes)
    seg_of = np.full(n, -1, dtype=np.int64)
    row_of = np.zeros(n, dtype=np.int64)
    queries = np.ascontiguousarray(hashes, dtype=np.uint64)
    orders = []
    segments: list[Segment] = []
    for reader, where in zip(readers, positions, strict=True):  # each bucket's segments numbered after the last's
        visit = np.asarray(where, dtype=np.int64)
        if len(visit) > 64:  # read each segment roughly in file order (as _probe_all does)
            local = np.empty(len(visit), dtype=np.int64)
            _kernels.radix_order(queries[visit], min(max(len(visit).bit_length(), 8), 16), local)
            visit = visit[local]
        orders.append(visit)
        pending = visit.copy()  # probes compact the missing queries to its front
        for number, segment in enumerate(reader.segments, start=len(segments)):
            if pending.size == 0:
                break
            if segment.rows:
                pending = pending[: segment.probe(queries, pending, seg_of, row_of, number)]
        segments.extend(reader.segments)
    combined = StateReader()
    combined.segments, combined.schema, combined.primary_key = segments, first.schema, first.primary_key
    return combined._resolve(hashes, keys, seg_of, row_of, np.concatenate(orders), with_offsets=with_offsets)


def _series_maker() -> Any:
    """``pl.Series(name, array)`` for one (unchunked, non-dictionary) Arrow array, straight through Polars' own
    constructor: ``pl.Series`` spends ~5 us a call choosing among its input types, and an online-features call
    builds about ten (None where this Polars lacks the constructor or builds a sample differently)."""
    try:
        from polars._plr import PySeries

        def make(name: str, array: pa.Array) -> pl.Series:
            return pl.Series._from_pyseries(PySeries.from_arrow(name, array))

        samples = [pa.array([1, None], pa.int64()), pa.array(["a", None], pa.large_string()), pa.array([True, None])]
        if all(make("s", a).equals(pl.Series("s", a)) and make("s", a).name == "s" for a in samples):
            return make
    except Exception:  # noqa: BLE001 - any other Polars: the public constructor
        pass
    return None


_MAKE_SERIES = _series_maker()


def arrow_series(name: str, array: pa.Array) -> pl.Series:
    """The Polars Series of one Arrow array, as ``pl.Series(name, array)`` gives it, with less overhead."""
    if _MAKE_SERIES is not None and isinstance(array, pa.Array) and not pa.types.is_dictionary(array.type):
        return _MAKE_SERIES(name, array)
    return pl.Series(name, array)


_SAME: dict[tuple[int, int], tuple[pl.Schema, pl.Schema, bool]] = {}


def _same_schema(a: pl.Schema, b: pl.Schema) -> bool:
    """``a == b``, remembered per pair of schema objects (a Polars schema comparison costs microseconds per
    column, and a lookup over several buckets compares the same pairs on every call)."""
    if a is b:
        return True
    key = (id(a), id(b))
    known = _SAME.get(key)
    if known is not None and known[0] is a and known[1] is b:
        return known[2]
    if len(_SAME) >= 256:
        _SAME.clear()
    equal = a == b
    _SAME[key] = (a, b, equal)
    return equal


class _GatherPlan:
    """What a gather over one list of segments needs of each column, worked out once for that list: the buffer
    addresses per segment, the output type, whether any segment holds nulls (segments are immutable, so the
    addresses stay valid while the plan holds the segments). A batch lookup then pays one compiled gather per
    column and no Python per segment."""

    def __init__(self, segments: tuple[Segment, ...], schema: pl.Schema, primary_key: tuple[str, ...]) -> None:
        self.segments = segments
        self.schema = schema
        self.primary_key = primary_key
        slots = len(segments)
        self.tomb_views = [s.tomb.view(np.uint8) for s in segments]
        self.tomb_addresses = np.array(
            [v.ctypes.data if len(v) else 0 for v in self.tomb_views], dtype=np.uint64
        ).reshape(slots)
        self.key_columns: dict[str, tuple[np.dtype, np.ndarray]] | None = {}
        for name in primary_key:
            found = [s.numpy_columns().get(name) for s in segments]
            views = [v for v in found if v is not None]
            dtypes = {v.dtype for v in views}
            if len(views) < slots or len(dtypes) != 1 or next(iter(dtypes)).kind not in "iu":
                self.key_columns = None
                break
            addresses = np.array([v.ctypes.data if len(v) else 0 for v in views], dtype=np.uint64).reshape(slots)
            self.key_columns[name] = (dtypes.pop(), addresses)
        self.columns: list[tuple[str, Any]] | None = []
        for name in schema.names():
            arrays = [s.columns().get(name) for s in segments]
            present = [a for a in arrays if a is not None]
            column = row_gather.ColumnPlan.of(present) if len(present) == slots else None
            if column is None:
                self.columns = None
                break
            self.columns.append((name, column))

    def matches(self, segments: Sequence[Segment], schema: pl.Schema, primary_key: tuple[str, ...]) -> bool:
        return (
            schema is self.schema
            and primary_key == self.primary_key
            and len(segments) == len(self.segments)
            and all(a is b for a, b in zip(segments, self.segments, strict=True))
        )

    def gather_found(
        self, seg_of: np.ndarray, row_of: np.ndarray, order: np.ndarray, keys: pl.DataFrame
    ) -> tuple[np.ndarray, pl.DataFrame, np.ndarray] | None:
        """:meth:`StateReader._gather_found` from the plan (None: its key columns do not allow it)."""
        if self.key_columns is None or self.columns is None:
            return None
        key_values = {}
        for name, (dtype, _) in self.key_columns.items():
            column = keys.get_column(name)
            if not column.dtype.is_integer():
                return None
            values = column.to_numpy()
            if values.dtype != dtype:
                return None
            key_values[name] = values
        n = len(seg_of)
        tomb = np.empty(n, dtype=np.uint8)
        _kernels.gather_fixed(seg_of, row_of, order, self.tomb_addresses, 1, tomb)
        same = np.ones(n, dtype=bool)
        for name, (dtype, addresses) in self.key_columns.items():
            stored = np.empty(n, dtype=dtype)
            _kernels.gather_fixed(seg_of, row_of, order, addresses, stored.dtype.itemsize, stored.view(np.uint8))
            same &= stored == key_values[name]
        hit = seg_of >= 0
        found = hit & same & ~tomb.view(np.bool_)
        mismatch = np.flatnonzero(hit & ~same)
        all_found = bool(found.all())
        live = seg_of if all_found else np.where(found, seg_of, -1)
        absent = None if all_found else ~found
        series = []
        for name, column in self.columns:
            query_keys = key_values.get(name)
            if query_keys is not None:  # a found row's key is the query's
                series.append(arrow_series(name, pa.array(query_keys, mask=absent)))
            else:
                series.append(arrow_series(name, column.gather(live, row_of, order, found, all_found)))
        return found, series[0].to_frame().hstack(series[1:]), mismatch


_PLANS: dict[tuple[int, ...], _GatherPlan] = {}
_PLANS_LOCK = threading.Lock()  # guards changes of _PLANS (lookups only read it)


def forget_segments(segments: Iterable[Segment]) -> None:
    """Drop the gather plans holding any of `segments` (merged away or replaced by their store), so those
    segments' memory and mapped files are released when the store lets them go, not when the cache fills up."""
    gone = {id(segment) for segment in segments}  # alive while the caller holds them: no id is reused meanwhile
    if not gone or not _PLANS:
        return
    with _PLANS_LOCK:
        for key in [key for key in _PLANS if not gone.isdisjoint(key)]:
            del _PLANS[key]


def _plan_of(segments: Sequence[Segment], schema: pl.Schema, primary_key: tuple[str, ...]) -> _GatherPlan | None:
    """The gather plan of these segments (made on first use, kept for the last few lists of segments)."""
    if not segments:
        return None
    key = tuple(map(id, segments))
    plan = _PLANS.get(key)
    if plan is not None and plan.matches(segments, schema, primary_key):
        return plan
    plan = _GatherPlan(tuple(segments), schema, primary_key)
    with _PLANS_LOCK:
        if len(_PLANS) >= 64:  # lists whose segments all stay in their stores (memtable inserts keep the older ones)
            _PLANS.clear()
        _PLANS[key] = plan
    return plan
