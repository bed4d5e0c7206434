"""The default merge engine: last row wins, with partial updates and partial deletes (Fluss ``DefaultRowMerger``).

The module also holds the small frame helpers the other engines share: a round is laid out as one frame
(``__old__<col>``, ``__new__<col>``, ``__exists``, ``__delete``), each engine writes one Polars expression
per output column, and :func:`finish_round` turns those into a :class:`MergeOutcome`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from fluss_lake.exceptions import DeletionDisabledError, InvalidConfigError
from fluss_lake.kv.merge.merge_spec import DeleteBehavior, MergeSpec
from fluss_lake.kv.merge.row_merger import (
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    MergeOutcome,
    MergeRound,
)

__all__ = ["LastRowMerger"]

OLD_PREFIX = "__old__"
NEW_PREFIX = "__new__"
EXISTS = pl.col("__exists")
DELETE = pl.col("__delete")
UPSERT = ~pl.col("__delete")


def old(column: str) -> pl.Expr:
    """Return the expression for the stored (old) value of ``column``."""
    return pl.col(OLD_PREFIX + column)


def new(column: str) -> pl.Expr:
    """Return the expression for the written (new) value of ``column``."""
    return pl.col(NEW_PREFIX + column)


def null_of(dtype: pl.DataType) -> pl.Expr:
    """Return a typed null literal."""
    return pl.lit(None, dtype=dtype)


def emit_code(code: int) -> pl.Expr:
    """Return an ``EMIT_*`` code as an Int8 literal."""
    return pl.lit(code, dtype=pl.Int8)


def flag_array(flags: pl.Series) -> np.ndarray:
    """A Boolean series as a numpy bool array, nulls as False (no Polars query when it has no nulls: this runs
    on every bucket write, and a query costs more than a small batch's merge)."""
    if flags.dtype == pl.Boolean and not flags.has_nulls():
        return flags.to_numpy()
    return flags.cast(pl.Boolean).fill_null(False).to_numpy()


def round_frame(batch: MergeRound) -> pl.DataFrame:
    """Lay a round out as one frame: prefixed old and new columns plus the exists/delete flags."""
    return pl.concat(
        [
            batch.old.select(pl.all().name.prefix(OLD_PREFIX)),
            batch.new.select(pl.all().name.prefix(NEW_PREFIX)),
            pl.DataFrame(
                {
                    "__exists": batch.exists.cast(pl.Boolean).fill_null(False),
                    "__delete": batch.is_delete.cast(pl.Boolean).fill_null(False),
                }
            ),
        ],
        how="horizontal",
    )


def finish_round(
    frame: pl.DataFrame,
    spec: MergeSpec,
    after: Mapping[str, pl.Expr],
    after_exists: pl.Expr,
    emit: pl.Expr,
) -> MergeOutcome:
    """Evaluate the per-column after-image expressions and build the outcome with the table's dtypes."""
    out = frame.select(
        *[after[c].cast(spec.dtypes[c]).alias(c) for c in spec.columns],
        after_exists.fill_null(False).alias("__after_exists"),
        emit.cast(pl.Int8).alias("__emit"),
    )
    return MergeOutcome(
        after=out.select(spec.columns),
        after_exists=out.get_column("__after_exists").alias("after_exists"),
        emit=out.get_column("__emit").alias("emit"),
    )


def upsert_outcome(batch: MergeRound, spec: MergeSpec, after: pl.DataFrame) -> MergeOutcome:
    """Outcome of a round of upserts only, given the after-images: every key exists afterwards, ``+I`` where it
    was absent and ``-U/+U`` where it existed (the rule of the default and aggregation engines)."""
    exists = flag_array(batch.exists)
    emit = np.where(exists, np.int8(EMIT_UPDATE), np.int8(EMIT_INSERT))
    if after.columns != list(spec.columns) or after.dtypes != [spec.dtypes[c] for c in spec.columns]:
        after = after.select([pl.col(c).cast(spec.dtypes[c]) for c in spec.columns])
    return MergeOutcome(
        after=after,
        after_exists=pl.Series("after_exists", np.ones(after.height, dtype=bool)),
        emit=pl.Series("emit", emit, dtype=pl.Int8),
    )


def refuse_delete_allow(engine: str, behavior: str) -> None:
    """first_row and versioned keep or replace whole rows by their own rule, so Fluss refuses deletes 'allow'."""
    if behavior.lower() == "allow":
        raise InvalidConfigError(
            f"The {engine} merge engine does not support table.delete.behavior='allow'; "
            f"set it to 'ignore' (the default for {engine}) or 'disable'."
        )


def reject_disabled_deletes(batch: MergeRound, behavior: DeleteBehavior) -> None:
    """Raise :class:`DeletionDisabledError` if deletes are disabled and the round holds one."""
    if behavior == "disable" and flag_array(batch.is_delete).any():
        raise DeletionDisabledError(
            "Delete operations are disabled for this table. The table.delete.behavior is set to 'disable'; "
            "send no deletes, or set table.delete.behavior to 'ignore' (drop them) or 'allow' (apply them, "
            "default engine and aggregation only)."
        )


def all_null(columns: Iterable[str]) -> pl.Expr:
    """Return whether every listed old column is null (true for an empty list)."""
    checks = [old(c).is_null() for c in columns]
    return pl.all_horizontal(checks) if checks else pl.lit(True)


def normalize_targets(spec: MergeSpec, target_columns: Sequence[str] | None) -> frozenset[str]:
    """Return the written columns: every column for a full-row write, else the target set."""
    if target_columns is None:
        return frozenset(spec.columns)
    return frozenset(target_columns)


class LastRowMerger:
    """Last-row merger: a write replaces the row, a delete removes it; target columns make it partial.

    Parameters
    ----------
    spec
        The table's merge description.
    target_columns
        Columns written by a partial update (must hold the primary key; validated by
        :func:`~fluss_lake.kv.merge.registry.create_row_merger`). ``None`` or every column = full-row writes.
    delete_behavior
        Overrides ``spec.delete_behavior`` (the OVERWRITE merge mode passes ``"allow"``).

    Notes
    -----
    Full row: upsert on a fresh key ``+I``; on an existing key ``-U/+U`` even for identical values; delete of an
    existing key ``-D``, of an absent key nothing. Partial update: target columns take the written values (a null
    overwrites), other columns keep the stored values (null on a fresh key); targets equal to the primary key on
    an existing key are a no-op. Partial delete: if every non-target column of the stored row is null the row
    is deleted (``-D``), else the non-key target columns are set to null (``-U/+U``).

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import LastRowMerger, MergeRound, MergeSpec
    >>> spec = MergeSpec(columns=("k", "v"), dtypes={"k": pl.Int32, "v": pl.String},
    ...                  nullable={"k": False, "v": True}, primary_key=("k",))
    >>> old = pl.DataFrame({"k": [1, None], "v": ["a", None]}, schema=spec.dtypes)
    >>> new = pl.DataFrame({"k": [1, 2], "v": ["b", "c"]}, schema=spec.dtypes)
    >>> out = LastRowMerger(spec).merge(MergeRound(old, pl.Series([True, False]), new, pl.Series([False, False])))
    >>> out.after.to_dict(as_series=False), out.emit.to_list()
    ({'k': [1, 2], 'v': ['b', 'c']}, [2, 1])
    """

    def __init__(
        self,
        spec: MergeSpec,
        *,
        target_columns: Sequence[str] | None = None,
        delete_behavior: DeleteBehavior | None = None,
    ) -> None:
        self._spec = spec
        self._behavior: DeleteBehavior = delete_behavior or spec.delete_behavior
        self._targets = normalize_targets(spec, target_columns)
        partial = self._targets != frozenset(spec.columns)
        self._partial = partial
        self._pk_only = partial and self._targets == frozenset(spec.primary_key)

    def merge(self, batch: MergeRound) -> MergeOutcome:
        """Merge one round; see the class docstring for the rules."""
        reject_disabled_deletes(batch, self._behavior)
        spec = self._spec
        if not self._partial and not flag_array(batch.is_delete).any():
            # Full-row upserts only (the common case): the written row is the after-image; +I on a fresh key,
            # -U/+U on an existing one. Same outcome as the general rules below, without building the frame.
            return upsert_outcome(batch, spec, batch.new)
        frame = round_frame(batch)
        pk = frozenset(spec.primary_key)
        non_targets = [c for c in spec.columns if c not in self._targets]
        applied_delete = DELETE & EXISTS if self._behavior == "allow" else pl.lit(False)
        removes = applied_delete & all_null(non_targets)

        after: dict[str, pl.Expr] = {}
        for c in spec.columns:
            if c in pk:
                after[c] = pl.when(UPSERT).then(new(c)).otherwise(old(c))
            elif c in self._targets:
                after[c] = (
                    pl.when(UPSERT).then(new(c)).when(applied_delete).then(null_of(spec.dtypes[c])).otherwise(old(c))
                )
            else:
                after[c] = pl.when(UPSERT & ~EXISTS).then(null_of(spec.dtypes[c])).otherwise(old(c))

        existing_upsert = emit_code(EMIT_NOTHING) if self._pk_only else emit_code(EMIT_UPDATE)
        emit = (
            pl.when(UPSERT & ~EXISTS)
            .then(emit_code(EMIT_INSERT))
            .when(UPSERT)
            .then(existing_upsert)
            .when(removes)
            .then(emit_code(EMIT_DELETE))
            .when(applied_delete)
            .then(emit_code(EMIT_UPDATE))
            .otherwise(emit_code(EMIT_NOTHING))
        )
        after_exists = UPSERT | (EXISTS & ~removes)
        return finish_round(frame, spec, after, after_exists, emit)
