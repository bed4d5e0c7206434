"""Point-in-time training sets: for every entity row, the feature values current at its prediction time.

One sorted, vectorized as-of join per feature view (Polars ``join_asof`` by the entity keys), never a Python
loop per row. The rules (also in ``docs/TRAINING.md``):

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

Beyond memory: with ``key_chunks=N`` each view is joined in N passes, one per hash range of its key (the same
hash on the entity and the history side), so only about 1/N of a history is in memory at a time; on lazy
histories (``scan_parquet``, :func:`tiering.read_history`) the range filter is pushed into the scan. The rules are
the same: a key's records all fall in one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake._utils.arguments import check_int
from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.training._rules import INTERNAL_PREFIX, check_names, common_key_dtype, within_ttl
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.training.history import (
    BUCKET,
    CHANGE_TYPE,
    OFFSET,
    PARTITION,
    TIMESTAMP,
    VALUE_CHANGES,
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
        Join each view in this many passes by hash ranges of its key, in bounded memory (about 1/N of each
        history at a time; the histories should be lazy scans so each pass reads only its range). The work then
        runs when called; a LazyFrame of entities gives the result as a LazyFrame. None or 1: one pass.

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
    frame = (
        lazy.with_row_index(_ROW)
        .with_columns(
            time_expr(
                timestamp_column,
                schema[timestamp_column],
                unit=unit,
                what=f"prediction time column {timestamp_column!r}",
            ).alias(_TS)
        )
        .sort(_TS)
    )
    if key_chunks is not None and key_chunks > 1:
        chunked = _chunked(frame, schema, views, unit, key_chunks)
        return chunked if eager else chunked.lazy()
    for i, view in enumerate(views):
        frame = _join_view(frame, schema, view, i, unit)
    out = frame.sort(_ROW).select(*schema.names(), *(n for v in views for n in v.output_names()))
    return out.collect(engine="in-memory") if eager else out


def _check_years(times: pl.Series) -> None:
    """Refuse prediction times outside years 1 to 9999 (as writes refuse such dates and timestamps): Polars
    panics converting them. A LazyFrame's values are only seen when it is collected."""
    if not isinstance(times.dtype, pl.Date | pl.Datetime) or times.null_count() == times.len():
        return
    years = times.dt.year()
    if years.null_count() > times.null_count() or not (years.min() >= 1 and years.max() <= 9999):  # type: ignore[operator]
        raise SchemaMismatchError(
            f"prediction time column {times.name!r} has values outside the years 1 to 9999 (DATE and TIMESTAMP "
            "range); fix or drop those rows"
        )


def _chunk_of(columns: list[tuple[str, pl.DataType]], chunks: int) -> pl.Expr:
    """The key range of a row: a hash of its key columns (cast to the types both sides compare in) modulo
    `chunks`, the same on the entity and the history side."""
    cast = [pl.col(c).cast(d) for c, d in columns]
    hashed = cast[0].hash(seed=0) if len(cast) == 1 else pl.struct(cast).hash(seed=0)
    return (hashed % chunks).cast(pl.UInt32)


def _chunked(frame: pl.LazyFrame, schema: pl.Schema, views: list[FeatureView], unit: str, chunks: int) -> pl.DataFrame:
    """:func:`training_set` view by view, each in `chunks` passes over key ranges (bounded memory)."""
    base = frame.collect(engine="in-memory")  # the entity rows sorted by prediction time, with their row number
    chunk_col = f"{_INTERNAL}chunk"
    parts = [base.sort(_ROW).select(schema.names())]
    for i, view in enumerate(views):
        pairs = view.key_pairs()
        dtypes = [
            common_key_dtype(schema[e], view.schema[h], f"{view.label} key {h!r}") or view.schema[h] for e, h in pairs
        ]
        left = base.with_columns(
            _chunk_of([(e, d) for (e, _), d in zip(pairs, dtypes, strict=True)], chunks).alias(chunk_col)
        )
        right = _chunk_of([(h, d) for (_, h), d in zip(pairs, dtypes, strict=True)], chunks)
        pieces = []
        for c in range(chunks):  # one pass per key range: a handful, not per row
            entities = left.filter(pl.col(chunk_col) == c).drop(chunk_col).lazy()
            joined = _join_view(entities, schema, view, i, unit, chunk=(right, c, chunks))
            pieces.append(joined.select(_ROW, *view.output_names()).collect(engine="in-memory"))
        parts.append(pl.concat(pieces).sort(_ROW).drop(_ROW))
    return pl.concat(parts, how="horizontal")


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
    ct, tn = f"{_INTERNAL}ct{i}", f"{_INTERNAL}t{i}"
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
    if left_casts:
        frame = frame.with_columns(left_casts)
    names = view.output_names()
    commit = time_expr(TIMESTAMP, view.schema[TIMESTAMP], unit=unit, what=f"{view.label} {TIMESTAMP}")
    wanted = pl.col(CHANGE_TYPE).is_in(VALUE_CHANGES)
    if chunk is not None:  # one expression, not a conjunction: Polars then pushes all of it into a lazy scan
        expr, c, chunks = chunk
        wanted = pl.when(wanted).then(expr).otherwise(pl.lit(chunks, pl.UInt32)) == c
    history = view.history.lazy().filter(wanted)
    values = [pl.col(f).alias(n) for f, n in zip(view.features or (), names, strict=True)]
    if view.event_time is None:
        scope = [PARTITION, BUCKET] if PARTITION in view.schema else [BUCKET]  # where offsets are dense
        right = history.select(
            *right_keys, (pl.col(CHANGE_TYPE) == "-D").alias(ct), commit.alias(tn), *values, *scope, OFFSET
        )
        schema_out = right.collect_schema()
        schema_out = pl.Schema({c: d for c, d in schema_out.items() if c not in (PARTITION, BUCKET, OFFSET)})
        right = right.map_batches(lambda df: _in_log_order(df, tn), schema=schema_out)
        joined = frame.join_asof(
            right.with_columns(pl.col(tn).alias(f"{tn}on")),
            left_on=_TS,
            right_on=f"{tn}on",
            by_left=by_left,
            by_right=by_right,
            check_sortedness=False,
        )
    else:
        event = time_expr(
            view.event_time,
            view.schema[view.event_time],
            unit=unit,
            what=f"{view.label} event time column {view.event_time!r}",
        )
        effective = pl.when(pl.col(CHANGE_TYPE) == "-D").then(pl.max_horizontal(commit, event)).otherwise(event)
        ranked = (
            history.select(
                *right_keys,
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
        if not view.committed_only:
            joined = frame.join_asof(
                ranked.with_columns(pl.col(tn).alias(f"{tn}on")),
                left_on=_TS,
                right_on=f"{tn}on",
                by_left=by_left,
                by_right=by_right,
                check_sortedness=False,
            )
        else:
            joined = _join_committed(frame, ranked, view, i, by_left, by_right, tn)
    valid = pl.col(ct).not_()  # ct: "the record is a delete"; null when no record matched
    if view.ttl is not None:
        valid = valid & within_ttl(pl.col(tn), pl.col(_TS), view.ttl)
    masked = joined.with_columns(pl.when(valid).then(pl.col(n)).otherwise(None).alias(n) for n in names)
    return masked.select(pl.exclude(f"^{_INTERNAL}(ct|t|k|lk|ord|best){i}.*$"))


def _in_log_order(history: pl.DataFrame, tn: str) -> pl.DataFrame:
    """The history in an order where each key's records ascend by (commit time, offset), without BUCKET/OFFSET.

    The as-of join needs each key's records sorted (ties: the later offset last). A key lives in one bucket, so
    a frame already in log order within every bucket (the live log, the lake's history table: any interleaving
    of buckets) qualifies as it is; that check is one pass. Other frames are sorted by (commit time, offset),
    which within a key is the full ``(commit time, bucket, offset)`` order.
    """
    if not (_log_ordered(history.head(4096), tn) and _log_ordered(history, tn)):  # the head fails fast
        history = history.sort(tn, OFFSET)  # a key's records share one bucket: (time, offset) is its full order
    return history.drop(*(c for c in (PARTITION, BUCKET) if c in history.columns), OFFSET)


def _log_ordered(history: pl.DataFrame, tn: str) -> bool:
    """Whether, within every bucket (of every partition), offsets ascend and commit times never decrease in frame
    order."""
    if not history.height:
        return True
    zero = pl.lit(0, dtype=pl.Int64)
    scope = [c for c in (PARTITION, BUCKET) if c in history.columns]
    return bool(
        history.select(
            ((pl.col(OFFSET).diff().fill_null(1) > zero) & (pl.col(tn).diff().cast(pl.Int64).fill_null(0) >= zero))
            .over(scope)
            .all()
        ).item()
    )


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
) -> pl.DataFrame:
    """Build a training set and register it in DuckDB as the view `name` (returns the same rows as polars).

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
    result = training_set(entities, views, timestamp_column=timestamp_column)
    frame = result.collect() if isinstance(result, pl.LazyFrame) else result
    con.register(name, frame.to_arrow())
    return frame
