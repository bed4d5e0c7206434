"""The ``aggregation`` merge engine: per-column aggregate functions (Fluss ``AggregateRowMerger``)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from fluss_lake.kv.merge.aggregators import DEFAULT_AGG_FUNCTION, AggregateFunction, create_aggregator
from fluss_lake.kv.merge.last_row import (
    DELETE,
    EXISTS,
    UPSERT,
    all_null,
    emit_code,
    finish_round,
    flag_array,
    new,
    normalize_targets,
    null_of,
    old,
    reject_disabled_deletes,
    round_frame,
    upsert_outcome,
)
from fluss_lake.kv.merge.merge_spec import AggSpec, MergeSpec
from fluss_lake.kv.merge.row_merger import (
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    MergeOutcome,
    MergeRound,
)

__all__ = ["AggregationMerger"]

_AGG_PREFIX = "__agg__"


class AggregationMerger:
    """Aggregate each non-key column with its function; the first row of a key is stored as written.

    Parameters
    ----------
    spec
        The table's merge description; ``spec.aggregations`` maps non-key columns to their functions, columns
        without an entry use ``last_value_ignore_nulls``.
    target_columns
        Columns of a partial write: only they are aggregated, the other columns keep their stored values (the
        values written for them are ignored). On a fresh key the row is stored exactly as sent.

    Notes
    -----
    Every write to an existing key emits ``-U/+U``, even when nothing changes. Deletes: ``ignore`` drops them,
    ``disable`` rejects the round, ``allow`` removes the row (``-D``) or, with target columns, applies the
    partial-delete rule of the default engine. A delete never retracts an aggregate.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import AggregationMerger, AggSpec, MergeRound, MergeSpec
    >>> spec = MergeSpec(columns=("k", "n", "tag"), dtypes={"k": pl.Int32, "n": pl.Int64, "tag": pl.String},
    ...                  nullable={"k": False, "n": True, "tag": True}, primary_key=("k",),
    ...                  merge_engine="aggregation", delete_behavior="ignore",
    ...                  aggregations={"n": AggSpec("sum")})
    >>> old = pl.DataFrame({"k": [1], "n": [10], "tag": ["a"]}, schema=spec.dtypes)
    >>> new = pl.DataFrame({"k": [1], "n": [5], "tag": [None]}, schema=spec.dtypes)
    >>> out = AggregationMerger(spec).merge(MergeRound(old, pl.Series([True]), new, pl.Series([False])))
    >>> out.after.to_dict(as_series=False), out.emit.to_list()
    ({'k': [1], 'n': [15], 'tag': ['a']}, [2])
    """

    def __init__(self, spec: MergeSpec, *, target_columns: Sequence[str] | None = None) -> None:
        self._spec = spec
        self._targets = normalize_targets(spec, target_columns)
        pk = frozenset(spec.primary_key)
        self._functions: dict[str, AggregateFunction] = {
            c: create_aggregator(c, spec.dtypes[c], spec.aggregations.get(c, AggSpec(DEFAULT_AGG_FUNCTION)))
            for c in spec.columns
            if c not in pk and c in self._targets
        }
        self._full_row = self._targets == frozenset(spec.columns)

    def _merge_upserts(self, batch: MergeRound) -> MergeOutcome:
        """A round of full-row upserts only (the common case), column by column on Series: fresh keys are
        stored as written, existing keys aggregate every non-key column. Same rules as :meth:`merge`."""
        spec = self._spec
        exists = batch.exists.cast(pl.Boolean).fill_null(False)
        absent = ~exists
        missing = exists.not_().all()
        columns = []
        for c in spec.columns:
            written = batch.new.get_column(c)
            function = self._functions.get(c)
            if function is None or missing:  # key column, or no key existed: the row as written
                columns.append(written)
                continue
            # Rows that are not updates get null on both sides, and f(null, null) is null for every function.
            nulls = pl.Series(c, [], dtype=written.dtype).extend_constant(None, len(written))
            stored = batch.old.get_column(c).cast(written.dtype).zip_with(exists, nulls)
            aggregated = function(stored, written.zip_with(exists, nulls)).cast(spec.dtypes[c])
            columns.append(written.zip_with(absent, aggregated).alias(c))
        return upsert_outcome(batch, spec, pl.DataFrame(columns))

    def merge(self, batch: MergeRound) -> MergeOutcome:
        """Merge one round: insert fresh keys verbatim, aggregate target columns of existing keys."""
        spec = self._spec
        reject_disabled_deletes(batch, spec.delete_behavior)
        if self._full_row and not flag_array(batch.is_delete).any():
            return self._merge_upserts(batch)
        frame = round_frame(batch)
        update = UPSERT & EXISTS
        for c, function in self._functions.items():
            # Rows that are not updates get null on both sides, and f(null, null) is null for every function.
            pair = frame.select(pl.when(update).then(old(c)).alias("a"), pl.when(update).then(new(c)).alias("b"))
            aggregated = function(pair.get_column("a"), pair.get_column("b"))
            frame = frame.with_columns(aggregated.cast(spec.dtypes[c]).alias(_AGG_PREFIX + c))

        pk = frozenset(spec.primary_key)
        applied_delete = DELETE & EXISTS if spec.delete_behavior == "allow" else pl.lit(False)
        removes = applied_delete & all_null(c for c in spec.columns if c not in self._targets)
        after: dict[str, pl.Expr] = {}
        for c in spec.columns:
            if c in pk:
                after[c] = pl.when(UPSERT).then(new(c)).otherwise(old(c))
            elif c in self._functions:
                after[c] = (
                    pl.when(UPSERT & ~EXISTS)
                    .then(new(c))
                    .when(UPSERT)
                    .then(pl.col(_AGG_PREFIX + c))
                    .when(applied_delete)
                    .then(null_of(spec.dtypes[c]))
                    .otherwise(old(c))
                )
            else:  # non-target column: stored as sent on a fresh key, else kept
                after[c] = pl.when(UPSERT & ~EXISTS).then(new(c)).otherwise(old(c))

        emit = (
            pl.when(UPSERT & ~EXISTS)
            .then(emit_code(EMIT_INSERT))
            .when(UPSERT)
            .then(emit_code(EMIT_UPDATE))
            .when(removes)
            .then(emit_code(EMIT_DELETE))
            .when(applied_delete)
            .then(emit_code(EMIT_UPDATE))
            .otherwise(emit_code(EMIT_NOTHING))
        )
        return finish_round(frame, spec, after, UPSERT | (EXISTS & ~removes), emit)
