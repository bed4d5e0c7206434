"""Point-in-time training sets: for every entity row, the feature values current at its prediction time.

One as-of join per feature view by the entity keys, never a Python loop per row: on one integer key (the usual
case) a compiled kernel (:mod:`._kernels._asof`: the history grouped by key with a hash table, each entity
row binary-searching its key's records; the views side by side in threads), else Polars' ``join_asof``. The rules
(also in ``docs/TRAINING.md``):

* **Commit time** (default): the value a key had in the live store at the prediction time: the latest
  ``+I``/``+U``/``-D`` record with ``__timestamp <= prediction time`` (a record committed *at* the prediction
  time counts). Equal timestamps are ordered by ``(__timestamp, __bucket, __offset)``; a key's records are all
  in one bucket, so its own log offsets decide. ``-U`` before-images are never values.
* **Event time**: the latest record by the view's event-time column at or before the prediction time; a
  ``-D`` takes effect at the later of its commit time and the deleted row's event time; ties are ordered by
  ``(event time, __timestamp, __bucket, __offset)``. With ``committed_only`` a record is a candidate only if
  it was also committed at or before the prediction time.
* A chosen ``-D``, no record at all, or a value older than the view's TTL (age > TTL) gives nulls.
* Every entity row is kept, duplicates too, in the input order; a null key or prediction time gives nulls.

Beyond memory: with ``key_chunks=N`` each view is joined in N passes, so only about 1/N of a history is in
memory at a time. A key lives in one bucket, so a pass is a range of the history's buckets (balanced by their row
counts, found in one pass over the bucket column); on lazy histories (``scan_parquet``,
:func:`tiering.read_history`) the bucket range is pushed into the scan, whose files or row groups are partitioned
or sorted by bucket, so each pass reads only its part. An entity row joins in the pass whose records hold its key.
A history with fewer buckets than N (or a key in two passes' buckets) is chunked by a hash of the key instead
(each pass then reads the whole key column). The rules are the same: a key's records all fall in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.training._kernels import _asof  # type: ignore[attr-defined]
from fluss_lake.training._rules import INTERNAL_PREFIX, check_names, common_key_dtype, within_ttl
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.training.history import (
    BUCKET,
    CHANGE_TYPE,
    OFFSET,
    PARTITION,
    TIMESTAMP,
    VALUE_CHANGES,
    LakeHistories,
    pinned_history,
    time_expr,
    time_unit,
)

if TYPE_CHECKING:
    import duckdb

__all__ = ["register_training_set", "training_set"]

_INTERNAL = INTERNAL_PREFIX
_ROW = "__fl_row"
_TS = "__fl_ts"


def training_set(
    entities: pl.DataFrame | pl.LazyFrame,
    views: FeatureView | Sequence[FeatureView],
    *,
    timestamp_column: str = "prediction_ts",
    key_chunks: int | None = None,
    lake: LakeHistories | None = None,
    snapshot_ids: Mapping[str, int] | None = None,
    snapshot_as_of: datetime | date | str | None = None,
) -> pl.DataFrame | pl.LazyFrame:
    """Entity rows with the feature values of every view as of each row's `timestamp_column`.

    Parameters
    ----------
    entities
        Entity key columns, the prediction time (``Datetime`` or ``Date``; naive = UTC) and any label columns.
        A DataFrame gives a DataFrame, a LazyFrame a LazyFrame (nothing is read until it is collected).
    views
        One or more :class:`FeatureView`; their output columns (prefix applied) must not clash with each
        other or with the entity columns.
    timestamp_column
        The entity frame's prediction-time column.
    key_chunks
        Join each view in this many passes over ranges of its buckets (or of a hash of its key), in bounded memory
        (about 1/N of each history at a time; the histories should be lazy scans so each pass reads only its
        range). The work then runs when called; a LazyFrame of entities gives the result as a LazyFrame. None or
        1: one pass.
    lake, snapshot_ids, snapshot_as_of
        Pin the histories to lake snapshots, so a backfill can be reproduced exactly: each view's table's history
        is read from `lake` (a ``tiering.Lake``) as tiered in the snapshot `snapshot_ids` gives for it (table path
        -> id of a snapshot of its history table, as ``tiering.lake_snapshots(lake, path, kind="history")`` lists;
        every view's table named), or in the latest snapshot committed at or before `snapshot_as_of`, and nothing
        after it (no live tail). The views must have a table (:meth:`FeatureView.from_table`). Prediction times
        after a snapshot see the values it holds.

    Examples
    --------
    >>> import polars as pl
    >>> from datetime import datetime
    >>> from fluss_lake.training import FeatureView, training_set
    >>> history = pl.DataFrame({
    ...     "id": [1, 1, 1, 1], "tier": ["gold", "gold", "silver", "silver"],
    ...     "__change_type": ["+I", "-U", "+U", "-D"], "__bucket": [0, 0, 0, 0], "__offset": [0, 1, 2, 3],
    ...     "__timestamp": [datetime(2026, 1, d) for d in (1, 5, 5, 9)]})
    >>> entities = pl.DataFrame({"id": [1, 1, 1, 1], "prediction_ts": [datetime(2026, 1, d) for d in (2, 5, 8, 9)]})
    >>> training_set(entities, FeatureView(history, keys=["id"]))["tier"].to_list()
    ['gold', 'silver', 'silver', None]
    """
    key_chunks = check_int("key_chunks", key_chunks, minimum=1, optional=True, hint="a number of key ranges, e.g. 8")
    views = [views] if isinstance(views, FeatureView) else list(views)
    if not views or not all(isinstance(v, FeatureView) for v in views):
        raise InvalidConfigError("training_set needs one or more FeatureView objects")
    views = _pinned(views, lake, snapshot_ids, snapshot_as_of)
    eager = isinstance(entities, pl.DataFrame)
    if not isinstance(entities, pl.DataFrame | pl.LazyFrame):
        raise InvalidConfigError(
            f"entities must be a polars DataFrame or LazyFrame, got {type(entities).__name__}; "
            "from DuckDB use register_training_set or relation.pl()"
        )
    lazy = entities.lazy()
    schema = lazy.collect_schema()
    check_names(schema, views, timestamp_column)
    if isinstance(entities, pl.DataFrame):
        _check_years(entities.get_column(timestamp_column))
    dtypes = [
        schema[timestamp_column],
        *(v.schema[TIMESTAMP] for v in views),
        *(v.schema[v.event_time] for v in views if v.event_time),
    ]
    unit = time_unit(*dtypes)
    prediction = time_expr(
        timestamp_column, schema[timestamp_column], unit=unit, what=f"prediction time column {timestamp_column!r}"
    ).alias(_TS)
    outputs = [n for v in views for n in v.output_names()]
    if key_chunks is not None and key_chunks > 1:
        base = entities if isinstance(entities, pl.DataFrame) else lazy.collect(engine="in-memory")
        chunked = _chunked(base, schema, views, unit, key_chunks, prediction)
        return chunked if eager else chunked.lazy()
    if isinstance(entities, pl.DataFrame):  # only row number, keys and time go through the sorts and joins
        narrow, in_order = _join_views(lazy, schema, views, unit, prediction)
        features = narrow.select(_ROW, *outputs).collect(engine="in-memory")
        features = features.drop(_ROW) if in_order else _in_row_order(features)
        return pl.concat([entities, features], how="horizontal")
    frame = lazy.with_row_index(_ROW).with_columns(prediction).sort(_TS)  # one plan: the entities are read once
    for i, view in enumerate(views):
        frame = _join_view(frame, schema, view, i, unit)
    return frame.sort(_ROW).select(*schema.names(), *outputs)


def _pinned(
    views: list[FeatureView],
    lake: LakeHistories | None,
    snapshot_ids: Mapping[str, int] | None,
    snapshot_as_of: datetime | date | str | None,
) -> list[FeatureView]:
    """The views with their histories pinned to lake snapshots (see :func:`training_set`), checked first."""
    if snapshot_ids is None and snapshot_as_of is None:
        if lake is not None:
            raise InvalidConfigError(
                "lake= goes with snapshot_ids= or snapshot_as_of= (the lake the pinned histories are read from); "
                "without a pin each view reads its own history"
            )
        return views
    if snapshot_ids is not None and snapshot_as_of is not None:
        raise InvalidConfigError("give snapshot_ids= or snapshot_as_of=, not both")
    if not isinstance(lake, LakeHistories):
        raise InvalidConfigError(
            "snapshot_ids= and snapshot_as_of= need lake=<a tiering.Lake> to read the pinned histories from"
        )
    unbound = [v.label for v in views if v.table is None]
    if unbound:
        raise InvalidConfigError(
            f"{', '.join(unbound)} has no live table, so no lake history to pin; make views with "
            "FeatureView.from_table(table, ...) or pin the history frame yourself (tiering.read_history)"
        )
    tables = {str(v.table.path) for v in views if v.table is not None}
    ids: dict[str, int] = {}
    if snapshot_ids is not None:
        if not isinstance(snapshot_ids, Mapping):
            raise InvalidConfigError(f"snapshot_ids must map table paths to snapshot ids, got {snapshot_ids!r}")
        for path, snapshot in snapshot_ids.items():
            ids[str(TablePath.of(path))] = check_int(
                f"snapshot_ids[{path!r}]", snapshot, minimum=None, hint="a snapshot id of the table's history"
            )
        if set(ids) != tables:
            raise InvalidConfigError(
                f"snapshot_ids must name exactly the views' tables {sorted(tables)}, got {sorted(ids)}"
            )
    pinned = {
        path: pinned_history(
            next(v.table for v in views if v.table is not None and str(v.table.path) == path),
            lake,
            snapshot_id=ids.get(path),
            as_of=snapshot_as_of,
        )
        for path in sorted(tables)
    }  # one read per table, shared by its views
    return [replace(v, history=pinned[str(v.table.path)]) for v in views if v.table is not None]


def _check_years(times: pl.Series) -> None:
    """Refuse prediction times outside years 1 to 9999 (as writes refuse such dates and timestamps): Polars
    panics converting them. A LazyFrame's values are only seen when it is collected."""
    if not isinstance(times.dtype, pl.Date | pl.Datetime) or times.null_count() == times.len():
        return
    physical = times.to_physical()  # local time never runs backwards across a year: the extremes hold the range
    ends = pl.Series([physical.min(), physical.max()], dtype=physical.dtype).cast(times.dtype)
    years = ends.dt.year()
    if years.null_count() or not (years.min() >= 1 and years.max() <= 9999):  # type: ignore[operator]
        raise SchemaMismatchError(
            f"prediction time column {times.name!r} has values outside the years 1 to 9999 (DATE and TIMESTAMP "
            "range); fix or drop those rows"
        )


def _narrow(lazy: pl.LazyFrame, views: list[FeatureView], prediction: pl.Expr, *, sort: bool = True) -> pl.LazyFrame:
    """The entity rows as (row number, prediction time, the views' entity keys), sorted by prediction time
    (`sort`; Polars' as-of join needs it, the compiled kernel does not)."""
    keys = list(dict.fromkeys(e for v in views for e, _ in v.key_pairs()))
    narrow = lazy.with_row_index(_ROW).select(_ROW, prediction, *keys)
    return narrow.sort(_TS) if sort else narrow


def _join_views(
    lazy: pl.LazyFrame, schema: pl.Schema, views: list[FeatureView], unit: str, prediction: pl.Expr
) -> tuple[pl.LazyFrame, bool]:
    """Every view joined onto the narrow entity rows: by the compiled kernel where it applies (the histories read
    side by side first), else by Polars' as-of join on the rows sorted by prediction time; and whether the rows
    are still in input order (every view joined by the kernel)."""
    specs = [_spec(schema, v, i) for i, v in enumerate(views)]
    fast = [i for i, v in enumerate(views) if _kernel_fits(v, specs[i], schema)]
    if not fast:
        narrow = _narrow(lazy, views, prediction)
        for i, view in enumerate(views):
            narrow = _join_view(narrow, schema, view, i, unit)
        return narrow, False
    keys = list(dict.fromkeys(e for v in views for e, _ in v.key_pairs()))
    frame, *rights = pl.collect_all(
        [
            lazy.with_row_index(_ROW).select(_ROW, prediction, *keys),
            *(_kernel_right(views[i], i, unit, specs[i]) for i in fast),
        ],
        engine="in-memory",
    )
    given = dict(zip(fast, rights, strict=True))

    def joined(i: int) -> pl.DataFrame | None:  # one view's columns in the entity rows' order, or None
        left = frame.with_columns(specs[i].left_casts) if specs[i].left_casts else frame
        got = _asof_by_int_key(
            left, given[i], views[i], i, specs[i], every_row=True, again=_reader(views[i], i, unit, specs[i])
        )
        return None if got is None else _masked(got.lazy(), views[i], i).select(views[i].output_names()).collect()

    if len(fast) > 1:  # the kernels release the interpreter lock: the views' joins run side by side
        with ThreadPoolExecutor(max_workers=len(fast)) as pool:
            columns = dict(zip(fast, pool.map(joined, fast), strict=True))
    else:
        columns = {fast[0]: joined(fast[0])}
    given.clear()
    done = [i for i in fast if columns[i] is not None]
    out = frame.hstack([c for i in done for c in columns[i].get_columns()]).lazy()  # type: ignore[union-attr]
    for i, view in enumerate(views):  # the rest by Polars' as-of join, on the rows sorted by prediction time
        if i not in done:
            out = _join_view(out.sort(_TS), schema, view, i, unit)
    return out, len(done) == len(views)


def _in_row_order(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame`, which holds every row number ``0..n-1`` once in any order, in row-number order without the row
    number: one gather by the inverse permutation (a scatter), not a sort."""
    frame = frame.rechunk()  # a gather from one chunk is twice as fast
    rows = frame.get_column(_ROW).to_numpy()
    inverse = np.empty(frame.height, dtype=rows.dtype)
    inverse[rows] = np.arange(frame.height, dtype=rows.dtype)  # numpy's scatter: faster than Series.scatter
    return frame.drop(_ROW).select(pl.all().gather(pl.Series(inverse)))


def _chunk_of(columns: list[tuple[str, pl.DataType]], chunks: int) -> pl.Expr:
    """The key range of a row: a hash of its key columns (cast to the types both sides compare in) modulo
    `chunks`, the same on the entity and the history side."""
    cast = [pl.col(c).cast(d) for c, d in columns]
    hashed = cast[0].hash(seed=0) if len(cast) == 1 else pl.struct(cast).hash(seed=0)
    return (hashed % chunks).cast(pl.UInt32)


def _chunked(
    base: pl.DataFrame, schema: pl.Schema, views: list[FeatureView], unit: str, chunks: int, prediction: pl.Expr
) -> pl.DataFrame:
    """:func:`training_set` view by view, each in `chunks` passes over parts of its keys (bounded memory)."""
    # the kernel takes the entity rows in any order; sorted by time only if a view needs Polars' as-of join
    sort = not all(_kernel_fits(v, _spec(schema, v, i), schema) for i, v in enumerate(views))
    left, first = pl.collect_all(
        [_narrow(base.lazy(), views, prediction, sort=sort), views[0].history.lazy().select(BUCKET)],
        engine="in-memory",
    )
    counted = [_bucket_counts(first)]
    del first
    counted += [_bucket_counts(v.history.lazy().select(BUCKET).collect(engine="in-memory")) for v in views[1:]]
    passes = [
        _BucketPasses.of(left, schema, v, i, unit, _bucket_ranges(counted[i], chunks), time_sorted=sort)
        for i, v in enumerate(views)
    ]
    _run_passes([p for p in passes if p is not None])
    parts = [base]
    for i, view in enumerate(views):
        joined = None if passes[i] is None else passes[i].result()  # type: ignore[union-attr]
        if joined is None:
            joined = _by_key_hash(left if sort else left.sort(_TS), schema, view, i, unit, chunks)
        parts.append(_in_row_order(joined))
    return pl.concat(parts, how="horizontal")


def _bucket_counts(buckets: pl.DataFrame) -> pl.DataFrame:
    """A history's rows per bucket (``__bucket``, ``n``, by bucket) from its bucket column: counted by numpy
    when the buckets are integers in a small range without nulls (a tenth of the time of a group-by of 10M rows),
    else grouped by Polars."""
    column = buckets.get_column(BUCKET)
    if column.null_count() or not column.dtype.is_integer() or column.is_empty():
        return buckets.group_by(BUCKET).agg(pl.len().alias("n")).sort(BUCKET)
    low, high = int(column.min()), int(column.max())  # type: ignore[arg-type]
    if high - low > 1 << 20:
        return buckets.group_by(BUCKET).agg(pl.len().alias("n")).sort(BUCKET)
    counts = np.zeros(high - low + 1, dtype=np.int64)
    step = 1 << 20  # slices: numpy's bincount copies its input to int64, so a slice at a time bounds that copy
    for start in range(0, column.len(), step):  # a handful of slices, not per row
        piece = column.slice(start, step).to_numpy()
        counts += np.bincount(piece - low if low else piece, minlength=counts.size)
    present = np.flatnonzero(counts)
    return pl.DataFrame(
        {BUCKET: pl.Series(present + low).cast(column.dtype), "n": pl.Series(counts[present], dtype=pl.UInt32)}
    )


def _bucket_ranges(counts: pl.DataFrame, chunks: int) -> list[tuple[int, int]] | None:
    """`chunks` contiguous ranges of a history's buckets with about equal rows each, from its rows per bucket
    (``__bucket``, ``n``, by bucket); None if it has fewer buckets than that. A key lives in one bucket, and lake
    history files are partitioned (or sorted) by bucket, so a pass over a range reads only its files or row
    groups."""
    if counts.height < chunks or counts.get_column(BUCKET).null_count():
        return None
    sizes = counts.get_column("n").cast(pl.Int64)
    middle = sizes.cum_sum() * 2 - sizes  # twice the row number of each bucket's middle row
    part = (middle * chunks // max(2 * int(sizes.sum()), 1)).alias("part")
    ranges = (
        counts.with_columns(part)
        .group_by("part", maintain_order=True)
        .agg(pl.col(BUCKET).min().alias("lo"), pl.col(BUCKET).max().alias("hi"))
    )
    return list(zip(ranges.get_column("lo").to_list(), ranges.get_column("hi").to_list(), strict=True))


@dataclass(slots=True)
class _BucketPasses:
    """One view joined range of buckets by range: each entity row in the pass of the range holding its key.

    `pieces` collects each pass's ``_ROW`` + the view's columns; `failed` is set if a key is in buckets of two
    ranges (not a history's layout: the caller then chunks by key hash). Not frozen: it is the state of one run of
    passes, private to :func:`_chunked`."""

    left: pl.DataFrame
    view: FeatureView
    i: int
    spec: _Spec
    reads: list[pl.LazyFrame]
    readers: list[_Reader]  # each range's records read again, with offsets or in log order, if the kernel needs it
    kernel: bool  # whether the compiled kernel may join (the reads are then in any order)
    taken: pl.Series  # by row number: the rows joined so far
    pieces: list[pl.DataFrame]
    failed: bool = False
    time_sorted: bool = True  # whether `left` is sorted by prediction time (Polars' as-of join needs it)
    grouped: Any = None  # the entity rows grouped by key for the kernel (_asof.group_left), False if it cannot

    @classmethod
    def of(
        cls,
        left: pl.DataFrame,
        schema: pl.Schema,
        view: FeatureView,
        i: int,
        unit: str,
        ranges: list[tuple[int, int]] | None,
        *,
        time_sorted: bool = True,
    ) -> _BucketPasses | None:
        if ranges is None:
            return None
        spec = _spec(schema, view, i)
        left = left.with_columns(spec.left_casts) if spec.left_casts else left
        value_rows = pl.col(CHANGE_TYPE).is_in(VALUE_CHANGES)
        kernel = _kernel_fits(view, spec, schema)
        readers = [
            _reader(view, i, unit, spec, rows=value_rows & pl.col(BUCKET).is_between(lo, hi)) for lo, hi in ranges
        ]
        reads = [r("any order" if kernel else "ordered") for r in readers]
        taken = pl.repeat(False, left.height, dtype=pl.Boolean, eager=True)
        return cls(left, view, i, spec, reads, readers, kernel, taken, [], time_sorted=time_sorted)

    def join(self, c: int, right: pl.DataFrame) -> pl.LazyFrame:
        """The entity rows whose key has a record in `right` (range `c`'s records), joined with it."""
        if self.kernel:
            fast = self._grouped_join(right)
            if fast is None:
                fast = _asof_by_int_key(self.left, right, self.view, self.i, self.spec, again=self.readers[c])
            if fast is not None:
                return _masked(fast.lazy(), self.view, self.i).select(_ROW, *self.view.output_names())
            right = self.readers[c]("ordered").collect(engine="in-memory")  # the kernel's read does not fit Polars
        left = self.left if self.time_sorted else self.left.sort(_TS)
        joined = _join_right(_with_key_in(left, right, self.spec), right.lazy(), self.view, self.i, self.spec)
        return joined.select(_ROW, *self.view.output_names())

    def _grouped_join(self, right: pl.DataFrame) -> pl.DataFrame | None:
        """The entity rows whose key has a record in `right`, joined by :func:`_asof.asof_grouped` (the entity
        rows grouped by key once for all passes, so a pass looks up each key once instead of every row); None if
        it does not apply (nulls, or a key's records out of order or tied: :func:`_asof_by_int_key` then)."""
        rk, tn = self.spec.by_right[0], f"{_INTERNAL}t{self.i}"
        if self.grouped is None:  # the first pass: the entity rows grouped once (False: nulls, never)
            key, time = self.left.get_column(self.spec.by_left[0]), self.left.get_column(_TS)
            self.grouped = (
                False
                if key.null_count() or time.null_count() or key.dtype not in _INTEGER_KEYS
                else _asof.group_left(key.cast(pl.Int64).to_numpy(), time.to_physical().cast(pl.Int64).to_numpy())
            )
        right = right.rechunk()
        right_key, right_time = right.get_column(rk), right.get_column(tn)
        if self.grouped is False or right_key.dtype != self.left.schema[self.spec.by_left[0]]:
            return None
        tiebreak = right.get_column(OFFSET) if OFFSET in right.columns else None
        if right_key.null_count() or right_time.null_count() or (tiebreak is not None and tiebreak.null_count()):
            return None
        got = _asof.asof_grouped(
            self.grouped,
            right_key.cast(pl.Int64).to_numpy(),
            right_time.to_physical().cast(pl.Int64).to_numpy(),
            None if tiebreak is None else tiebreak.cast(pl.Int64).to_numpy(),
        )
        if got is None:
            return None
        rows, found = pl.Series(got[0]), pl.Series(got[1])
        matched = right.drop(rk, *([OFFSET] if tiebreak is not None else [])).gather(
            pl.select(pl.when(found >= 0).then(found)).to_series()
        )
        return pl.concat([self.left[rows], matched], how="horizontal")

    def add(self, piece: pl.DataFrame) -> None:
        rows = piece.get_column(_ROW)
        if self.taken.gather(rows).any():
            self.failed = True
            self.pieces = []
            return
        self.taken.scatter(rows, True)
        self.pieces.append(piece)

    def result(self) -> pl.DataFrame | None:
        """Every entity row once (keys without records: nulls); None if the passes failed."""
        if self.failed:
            return None
        left, names = self.left, self.view.output_names()
        types = self.pieces[0].schema
        rest = left.filter(~self.taken.gather(left.get_column(_ROW)))
        return pl.concat([*self.pieces, rest.select(_ROW, *(pl.lit(None, types[n]).alias(n) for n in names))])


def _run_passes(views: list[_BucketPasses]) -> None:
    """Every view's passes, one range after the other across the views: the next range (of this view or the
    next) is read while the current one is joined (the join in a thread: the as-of kernel and Polars both release
    the interpreter lock), so two ranges are in memory at most and no view waits for its first read."""
    tasks = [(v, c) for v in views for c in range(len(v.reads))]  # a handful per view, not per row
    k = 0
    right = tasks[0][0].reads[0].collect(engine="in-memory") if tasks else None
    with ThreadPoolExecutor(max_workers=1) as pool:
        while k < len(tasks):
            view = tasks[k][0]
            nxt = next((j for j in range(k + 1, len(tasks)) if not tasks[j][0].failed), None)
            joining = pool.submit(_joined, view, tasks[k][1], right)  # type: ignore[arg-type]
            if nxt is not None:
                right = tasks[nxt][0].reads[tasks[nxt][1]].collect(engine="in-memory")
            view.add(joining.result())
            if view.failed:  # skip its other ranges; a range of it read ahead is read again below if it is next
                rest = [j for j in range(k + 1, len(tasks)) if not tasks[j][0].failed]
                if nxt is not None and rest and rest[0] != nxt:
                    right = tasks[rest[0]][0].reads[tasks[rest[0]][1]].collect(engine="in-memory")
                nxt = rest[0] if rest else None
            if nxt is None:
                break
            k = nxt


def _joined(view: _BucketPasses, c: int, right: pl.DataFrame) -> pl.DataFrame:
    """Range `c` of a view joined (run in a thread beside the next range's read)."""
    return view.join(c, right).collect(engine="in-memory")


def _with_key_in(left: pl.DataFrame, right: pl.DataFrame, spec: _Spec) -> pl.LazyFrame:
    """The entity rows (in their order) whose key has a record in `right` (never a null key)."""
    if len(spec.by_left) == 1:
        return left.lazy().filter(pl.col(spec.by_left[0]).is_in(right.get_column(spec.by_right[0]).implode()))
    keys = right.lazy().select(spec.by_right).unique()
    return left.lazy().join(keys, left_on=spec.by_left, right_on=spec.by_right, how="semi", maintain_order="left")


def _by_key_hash(
    left: pl.DataFrame, schema: pl.Schema, view: FeatureView, i: int, unit: str, chunks: int
) -> pl.DataFrame:
    """One view joined in `chunks` passes over hash ranges of its key (``_ROW`` + the view's columns): each pass
    reads the whole history's key column to find its range."""
    chunk_col = f"{_INTERNAL}chunk"
    pairs = view.key_pairs()
    dtypes = [
        common_key_dtype(schema[e], view.schema[h], f"{view.label} key {h!r}") or view.schema[h] for e, h in pairs
    ]
    ranged = left.with_columns(
        _chunk_of([(e, d) for (e, _), d in zip(pairs, dtypes, strict=True)], chunks).alias(chunk_col)
    )
    right = _chunk_of([(h, d) for (_, h), d in zip(pairs, dtypes, strict=True)], chunks)
    pieces = []
    for c in range(chunks):  # one pass per key range: a handful, not per row
        entities = ranged.filter(pl.col(chunk_col) == c).drop(chunk_col).lazy()
        joined = _join_view(entities, schema, view, i, unit, chunk=(right, c, chunks))
        pieces.append(joined.select(_ROW, *view.output_names()).collect(engine="in-memory"))
    return pl.concat(pieces)


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one view's keys meet the entity keys: the join columns of each side and the casts that make them."""

    by_left: list[str]
    by_right: list[str]
    left_casts: list[pl.Expr]
    right_keys: list[pl.Expr]


def _spec(schema: pl.Schema, view: FeatureView, i: int) -> _Spec:
    by_left, by_right, left_casts, right_keys = [], [], [], []
    for j, (entity_col, hist_col) in enumerate(view.key_pairs()):
        common = common_key_dtype(schema[entity_col], view.schema[hist_col], f"{view.label} key {hist_col!r}")
        rk = f"{_INTERNAL}k{i}_{j}"
        right_keys.append(pl.col(hist_col).cast(common or view.schema[hist_col]).alias(rk))
        by_right.append(rk)
        if common is None:
            by_left.append(entity_col)
        else:
            lk = f"{_INTERNAL}lk{i}_{j}"
            left_casts.append(pl.col(entity_col).cast(common).alias(lk))
            by_left.append(lk)
    return _Spec(by_left, by_right, left_casts, right_keys)


def _join_view(
    frame: pl.LazyFrame,
    schema: pl.Schema,
    view: FeatureView,
    i: int,
    unit: str,
    *,
    chunk: tuple[pl.Expr, int, int] | None = None,
) -> pl.LazyFrame:
    """As-of join one view onto the (time-sorted) entity frame and null out deleted or expired values
    (`chunk`: ``(key range expression, this range, ranges)``: read just that key range of the history)."""
    spec = _spec(schema, view, i)
    if spec.left_casts:
        frame = frame.with_columns(spec.left_casts)
    rows = None
    if chunk is not None:  # one expression, not a conjunction: Polars then pushes all of it into a lazy scan
        expr, c, chunks = chunk
        rows = pl.when(pl.col(CHANGE_TYPE).is_in(VALUE_CHANGES)).then(expr).otherwise(pl.lit(chunks, pl.UInt32)) == c
    return _join_right(frame, _right(view, i, unit, spec, rows=rows), view, i, spec)


def _history_columns(
    view: FeatureView, unit: str, rows: pl.Expr | None
) -> tuple[pl.LazyFrame, pl.Expr, pl.Expr | None, list[pl.Expr]]:
    """The view's records `rows` selects (default: the value records), its commit time, the time a record takes
    effect in event-time mode (``None`` in commit-time mode; a delete takes effect no earlier than its commit)
    and the feature values under their output names: what both readings of a history share."""
    history = view.history.lazy().filter(pl.col(CHANGE_TYPE).is_in(VALUE_CHANGES) if rows is None else rows)
    commit = time_expr(TIMESTAMP, view.schema[TIMESTAMP], unit=unit, what=f"{view.label} {TIMESTAMP}")
    values = [pl.col(f).alias(n) for f, n in zip(view.features or (), view.output_names(), strict=True)]
    if view.event_time is None:
        return history, commit, None, values
    event = time_expr(
        view.event_time,
        view.schema[view.event_time],
        unit=unit,
        what=f"{view.label} event time column {view.event_time!r}",
    )
    effective = pl.when(pl.col(CHANGE_TYPE) == "-D").then(pl.max_horizontal(commit, event)).otherwise(event)
    return history, commit, effective, values


def _right(view: FeatureView, i: int, unit: str, spec: _Spec, *, rows: pl.Expr | None = None) -> pl.LazyFrame:
    """The view's history as the right side of its as-of join, each key's records in their order: the records
    `rows` selects (default: the value records ``+I``/``+U``/``-D``; pushed into a lazy scan)."""
    ct, tn = f"{_INTERNAL}ct{i}", f"{_INTERNAL}t{i}"
    history, commit, effective, values = _history_columns(view, unit, rows)
    if effective is None:
        scope = [PARTITION, BUCKET] if PARTITION in view.schema else [BUCKET]  # where offsets are dense
        right = history.select(
            *spec.right_keys, (pl.col(CHANGE_TYPE) == "-D").alias(ct), commit.alias(tn), *values, *scope, OFFSET
        )
        schema_out = right.collect_schema()
        schema_out = pl.Schema({c: d for c, d in schema_out.items() if c not in (PARTITION, BUCKET, OFFSET)})
        return right.map_batches(lambda df: _in_log_order(df, tn), schema=schema_out)
    return (
        history.select(
            *spec.right_keys,
            (pl.col(CHANGE_TYPE) == "-D").alias(ct),
            effective.alias(tn),
            commit.alias(f"{tn}c"),
            *values,
            BUCKET,
            OFFSET,
        )
        .filter(pl.col(tn).is_not_null())
        .sort(tn, f"{tn}c", OFFSET)
        .drop(BUCKET, OFFSET)
    )  # within a key: the full tie order


def _kernel_right(
    view: FeatureView, i: int, unit: str, spec: _Spec, *, rows: pl.Expr | None = None, offsets: bool | None = None
) -> pl.LazyFrame:
    """The view's records `rows` selects (default: the value records) as the compiled kernel reads them, in any
    order: keys, the delete flag, the time the as-of join matches on and the values, and in commit-time mode the
    offsets that order a key's records of equal commit time (`offsets`; default: only from a frame in memory,
    where they cost no decoding: a scan reads them again if a key has records of equal time)."""
    ct, tn = f"{_INTERNAL}ct{i}", f"{_INTERNAL}t{i}"
    history, commit, effective, values = _history_columns(view, unit, rows)
    if effective is None:
        with_offsets = isinstance(view.history, pl.DataFrame) if offsets is None else offsets
        return history.select(
            *spec.right_keys,
            (pl.col(CHANGE_TYPE) == "-D").alias(ct),
            commit.alias(tn),
            *values,
            *([OFFSET] if with_offsets else []),
        )
    return history.select(
        *spec.right_keys, (pl.col(CHANGE_TYPE) == "-D").alias(ct), effective.alias(tn), *values
    ).filter(pl.col(tn).is_not_null())


_Reader = Callable[[str], pl.LazyFrame]


def _reader(view: FeatureView, i: int, unit: str, spec: _Spec, *, rows: pl.Expr | None = None) -> _Reader:
    """The view's records `rows` selects, read as asked: ``"any order"`` (:func:`_kernel_right`), ``"offsets"``
    (the same with the offsets) or ``"ordered"`` (:func:`_right`: each key's records in their order)."""

    def read(kind: str) -> pl.LazyFrame:
        if kind == "ordered":
            return _right(view, i, unit, spec, rows=rows)
        return _kernel_right(view, i, unit, spec, rows=rows, offsets=True if kind == "offsets" else None)

    return read


def _join_right(frame: pl.LazyFrame, right: pl.LazyFrame, view: FeatureView, i: int, spec: _Spec) -> pl.LazyFrame:
    """The as-of join of the time-sorted entity frame (with the cast keys) and `right`, deleted or expired values
    nulled out."""
    tn = f"{_INTERNAL}t{i}"
    if view.event_time is None or not view.committed_only:
        joined = frame.join_asof(  # the right time column stays in the result (its name differs from _TS)
            right,
            left_on=_TS,
            right_on=tn,
            by_left=spec.by_left,
            by_right=spec.by_right,
            check_sortedness=False,
        )
    else:
        joined = _join_committed(frame, right, view, i, spec.by_left, spec.by_right, tn)
    return _masked(joined, view, i)


def _masked(joined: pl.LazyFrame, view: FeatureView, i: int) -> pl.LazyFrame:
    """An as-of join's result with deleted or expired values nulled out and the join's own columns dropped."""
    ct, tn = f"{_INTERNAL}ct{i}", f"{_INTERNAL}t{i}"
    valid = pl.col(ct).not_()  # ct: "the record is a delete"; null when no record matched
    if view.ttl is not None:
        valid = valid & within_ttl(pl.col(tn), pl.col(_TS), view.ttl)
    names = view.output_names()
    masked = joined.with_columns(pl.when(valid).then(pl.col(n)).otherwise(None).alias(n) for n in names)
    return masked.select(pl.exclude(f"^{_INTERNAL}(ct|t|k|lk|ord|best){i}.*$"))


_INTEGER_KEYS = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32)


def _kernel_fits(view: FeatureView, spec: _Spec, schema: pl.Schema) -> bool:
    """Whether :func:`_asof_by_int_key` can join this view (one integer key column; not ``committed_only``)."""
    if (view.event_time is not None and view.committed_only) or len(spec.by_left) != 1:
        return False
    ((entity_col, hist_col),) = view.key_pairs()
    dtype = common_key_dtype(schema[entity_col], view.schema[hist_col], view.label) or view.schema[hist_col]
    return dtype in _INTEGER_KEYS


def _asof_by_int_key(
    left: pl.DataFrame,
    right: pl.DataFrame,
    view: FeatureView,
    i: int,
    spec: _Spec,
    *,
    every_row: bool = False,
    again: _Reader | None = None,
) -> pl.DataFrame | None:
    """The entity rows whose key has a record in `right` (`every_row`: all of them), each with the columns of its
    key's last record at or before its time (nulls if none): what ``join_asof`` (+ :func:`_with_key_in`) gives,
    computed by the compiled kernel (:mod:`._kernels._asof`) when the join is on one integer key column
    and nothing is null; the rows keep their order. None otherwise (the caller joins with Polars).

    Without `again`, `right` is in each key's record order (:func:`_in_log_order`). With it, `right` is as
    :func:`_kernel_right` reads it (any order) and the kernel orders each key's records by time; where a key has
    records of equal time, `again` reads them again with the offsets that order them (commit-time mode), or
    failing that in log order (:func:`_right`)."""
    tn = f"{_INTERNAL}t{i}"
    if (view.event_time is not None and view.committed_only) or len(spec.by_left) != 1:
        return None
    lk, rk = spec.by_left[0], spec.by_right[0]
    left_key, right_key = left.get_column(lk), right.get_column(rk)
    if left_key.dtype not in _INTEGER_KEYS or right_key.dtype != left_key.dtype:
        return None
    left_time, right_time = left.get_column(_TS), right.get_column(tn)
    if left_key.null_count() or left_time.null_count() or right_key.null_count() or right_time.null_count():
        return None
    left_keys = left_key.cast(pl.Int64).to_numpy()
    left_times = left_time.to_physical().cast(pl.Int64).to_numpy()
    found = None
    tries = (
        []
        if again is None
        else [right, "offsets"]
        if OFFSET not in right.columns and view.event_time is None
        else [right]
    )
    for attempt in tries:  # each key's records in any order: the kernel orders them, None if it cannot
        if isinstance(attempt, str):
            right = again(attempt).collect(engine="in-memory")  # type: ignore[misc]
        # one chunk (a scan gives one per row group): the gather of the matched rows below is about 4x as fast
        right = right.rechunk()
        tiebreak = right.get_column(OFFSET) if OFFSET in right.columns else None
        if tiebreak is not None and tiebreak.null_count():
            break
        found = _asof.asof_backward(
            left_keys,
            left_times,
            right.get_column(rk).cast(pl.Int64).to_numpy(),
            right.get_column(tn).to_physical().cast(pl.Int64).to_numpy(),
            None if tiebreak is None else tiebreak.cast(pl.Int64).to_numpy(),
            any_order=True,
        )
        if found is not None:
            break
    if found is None and again is not None:  # ties the offsets cannot break: each key's records in log order
        right = again("ordered").collect(engine="in-memory")
        right_key, right_time = right.get_column(rk), right.get_column(tn)
        if right_key.null_count() or right_time.null_count():
            return None
    if found is None:
        found = _asof.asof_backward(
            left_keys,
            left_times,
            right_key.cast(pl.Int64).to_numpy(),
            right_time.to_physical().cast(pl.Int64).to_numpy(),
        )
    right = right.drop(OFFSET) if OFFSET in right.columns else right
    found = pl.Series(found)
    if every_row:
        rows = found
    else:  # -2: no record of the key in `right` (another range's key); -1: none at or before the row's time
        keyed = found != -2
        rows, left = found.filter(keyed), left.filter(keyed)
    matched = right.drop(rk).gather(pl.select(pl.when(rows >= 0).then(rows)).to_series())
    return pl.concat([left, matched], how="horizontal")


def _in_log_order(history: pl.DataFrame, tn: str) -> pl.DataFrame:
    """The history in an order where each key's records ascend by (commit time, offset), without BUCKET/OFFSET.

    The as-of join needs each key's records sorted (ties: the later offset last). A key lives in one bucket, so
    a frame already in log order within every bucket (the live log, the lake's history table: any interleaving
    of buckets) qualifies as it is; that check is one pass. Other frames are sorted by (commit time, offset),
    which within a key is the full ``(commit time, bucket, offset)`` order.
    """
    if not (_log_ordered(history.head(4096), tn) and _log_ordered(history, tn)):  # the head fails fast
        history = history.sort(tn, OFFSET)  # a key's records share one bucket: (time, offset) is its full order
    # one chunk: the as-of join gathers its matches from the right side, about twice as fast from one chunk than
    # from a scan's chunk per row group (a copy of the few columns kept)
    return history.drop(*(c for c in (PARTITION, BUCKET) if c in history.columns), OFFSET).rechunk()


def _log_ordered(history: pl.DataFrame, tn: str) -> bool:
    """Whether, within every bucket (of every partition), offsets ascend and commit times never decrease in frame
    order."""
    if not history.height:
        return True
    zero = pl.lit(0, dtype=pl.Int64)
    ordered = (pl.col(OFFSET).diff().fill_null(1) > zero) & (pl.col(tn).diff().cast(pl.Int64).fill_null(0) >= zero)
    bucket = history.get_column(BUCKET)
    if PARTITION not in history.columns and not bucket.null_count() and bucket.is_sorted():
        # each bucket's rows are one run (a lake file, a range of buckets): the same pairs as within each bucket,
        # compared without grouping (a null time or offset counts as in order, as above)
        n = history.height
        offset, time = history.get_column(OFFSET), history.get_column(tn)
        fine = (bucket.slice(1) != bucket.slice(0, n - 1)) | (
            (offset.slice(1) > offset.slice(0, n - 1)) & (time.slice(1) >= time.slice(0, n - 1))
        )
        return bool(fine.all())
    scope = [c for c in (PARTITION, BUCKET) if c in history.columns]
    return bool(history.select(ordered.over(scope).all()).item())


def _join_committed(
    frame: pl.LazyFrame,
    ranked: pl.LazyFrame,
    view: FeatureView,
    i: int,
    by_left: list[str],
    by_right: list[str],
    tn: str,
) -> pl.LazyFrame:
    """Event time + committed_only: the best-ranked row among those both happened and committed by then.

    A row becomes visible at ``max(event time, commit time)``; walking each key's rows in visibility order, a
    running maximum of the event-time rank names the answer from that moment on, so one as-of join on the
    visibility time finds it.
    """
    order, best, vis = f"{_INTERNAL}ord{i}", f"{_INTERNAL}best{i}", f"{_INTERNAL}t{i}vis"
    ranked = ranked.with_row_index(order)
    index = (
        ranked.select(*by_right, pl.max_horizontal(tn, f"{tn}c").alias(vis), order)
        .sort(vis, order)
        .with_columns(pl.col(order).cum_max().over(by_right).alias(best))
        .drop(order)
    )
    located = frame.join_asof(
        index, left_on=_TS, right_on=vis, by_left=by_left, by_right=by_right, check_sortedness=False
    )
    # fetch the best rows by rank: `order` is the row number of `ranked`, so an as-of join on the sorted ranks
    # is an exact positional lookup (a merge, far cheaper than hashing every ranked row); then back in time order
    fetched = located.sort(best).join_asof(ranked.drop(by_right), left_on=best, right_on=order, check_sortedness=False)
    return fetched.sort(_TS, maintain_order=True)


def register_training_set(
    con: duckdb.DuckDBPyConnection,
    name: str,
    entities: Any,
    views: FeatureView | Sequence[FeatureView],
    *,
    timestamp_column: str = "prediction_ts",
    lake: LakeHistories | None = None,
    snapshot_ids: Mapping[str, int] | None = None,
    snapshot_as_of: datetime | date | str | None = None,
) -> pl.DataFrame:
    """Build a training set and register it in DuckDB as the view `name` (returns the same rows as polars).

    `lake`, `snapshot_ids` and `snapshot_as_of` pin the histories to lake snapshots, as for :func:`training_set`.

    DuckDB has no Python table functions, so the training set is computed here and handed to DuckDB as an
    Arrow table (zero copy); SQL then reads ``SELECT ... FROM name``. `entities` may be a polars frame, a
    DuckDB relation, or a SQL query run on `con`.

    Examples
    --------
    >>> import duckdb, polars as pl
    >>> from datetime import datetime
    >>> from fluss_lake.training import FeatureView, register_training_set
    >>> history = pl.DataFrame({"id": [7], "v": [1.5], "__change_type": ["+I"], "__bucket": [0],
    ...                         "__offset": [0], "__timestamp": [datetime(2026, 1, 1)]})
    >>> con = duckdb.connect()
    >>> _ = register_training_set(con, "train", "SELECT 7 AS id, TIMESTAMPTZ '2026-01-02 00:00:00+00' AS prediction_ts",
    ...                           FeatureView(history, keys=["id"]))
    >>> con.sql("SELECT id, v FROM train").fetchall()
    [(7, 1.5)]
    """
    if isinstance(entities, str):
        entities = con.sql(entities)
    if not isinstance(entities, pl.DataFrame | pl.LazyFrame):
        to_polars = getattr(entities, "pl", None)
        if to_polars is None:
            raise InvalidConfigError("entities must be a polars frame, a DuckDB relation or a SQL string")
        entities = to_polars()
    result = training_set(
        entities,
        views,
        timestamp_column=timestamp_column,
        lake=lake,
        snapshot_ids=snapshot_ids,
        snapshot_as_of=snapshot_as_of,
    )
    frame = result.collect() if isinstance(result, pl.LazyFrame) else result
    con.register(name, frame.to_arrow())
    return frame
