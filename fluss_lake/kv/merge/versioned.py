"""The ``versioned`` merge engine: a write wins iff its version is >= the stored one (Fluss ``VersionedRowMerger``)."""

from __future__ import annotations

import polars as pl

from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.kv.merge.last_row import (
    EXISTS,
    UPSERT,
    emit_code,
    finish_round,
    new,
    old,
    refuse_delete_allow,
    reject_disabled_deletes,
    round_frame,
)
from fluss_lake.kv.merge.merge_spec import MergeSpec
from fluss_lake.kv.merge.row_merger import (
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    MergeOutcome,
    MergeRound,
)

__all__ = ["VERSION_COLUMN_TYPES", "VersionedMerger", "check_version_column"]

#: Fluss types allowed for ``table.merge-engine.versioned.ver-column``.
VERSION_COLUMN_TYPES = "INT, BIGINT, TIMESTAMP(p) or TIMESTAMP_LTZ(p)"


def check_version_column(spec: MergeSpec) -> str:
    """Return the version column of ``spec`` or raise :class:`InvalidConfigError` if it is unusable.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import MergeSpec
    >>> spec = MergeSpec(columns=("k", "ts"), dtypes={"k": pl.Int32, "ts": pl.Int64},
    ...                  nullable={"k": False, "ts": True}, primary_key=("k",),
    ...                  merge_engine="versioned", delete_behavior="ignore", version_column="ts")
    >>> check_version_column(spec)
    'ts'
    """
    column = spec.version_column
    if not column:
        raise InvalidConfigError(
            "'table.merge-engine.versioned.ver-column' must be set for the versioned merge engine; "
            f"name a column of type {VERSION_COLUMN_TYPES}."
        )
    if column not in spec.dtypes:
        raise InvalidConfigError(
            f"The version column {column!r} of the versioned merge engine is not a column of the table "
            f"(columns: {list(spec.columns)}); name one of type {VERSION_COLUMN_TYPES}."
        )
    dtype = spec.dtypes[column]
    if not (dtype in (pl.Int32, pl.Int64) or isinstance(dtype, pl.Datetime)):
        raise InvalidConfigError(
            f"The version column {column!r} has type {dtype}, but the versioned merge engine accepts only "
            f"{VERSION_COLUMN_TYPES}; choose another column or change its type."
        )
    return column


class VersionedMerger:
    """Keep the row with the highest version; ties go to the new row.

    A null version counts as the type's minimum: null new vs non-null old keeps the old row, null vs null and
    non-null new vs null old take the new row. Timestamps compare at their full precision. The winner emits
    ``-U/+U`` (also on a tie), the loser nothing. Deletes are ignored (``ignore``) or rejected (``disable``).

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import MergeRound, MergeSpec, VersionedMerger
    >>> spec = MergeSpec(columns=("k", "ts"), dtypes={"k": pl.Int32, "ts": pl.Int64},
    ...                  nullable={"k": False, "ts": True}, primary_key=("k",),
    ...                  merge_engine="versioned", delete_behavior="ignore", version_column="ts")
    >>> old = pl.DataFrame({"k": [1, 2], "ts": [10, 10]}, schema=spec.dtypes)
    >>> new = pl.DataFrame({"k": [1, 2], "ts": [9, 10]}, schema=spec.dtypes)
    >>> out = VersionedMerger(spec).merge(MergeRound(old, pl.Series([True, True]), new, pl.Series([False, False])))
    >>> out.after.to_dict(as_series=False), out.emit.to_list()
    ({'k': [1, 2], 'ts': [10, 10]}, [0, 2])
    """

    def __init__(self, spec: MergeSpec) -> None:
        refuse_delete_allow("versioned", spec.delete_behavior)
        self._spec = spec
        self._version = check_version_column(spec)

    def merge(self, batch: MergeRound) -> MergeOutcome:
        """Merge one round: fresh keys insert, existing keys take the new row iff its version is not older."""
        reject_disabled_deletes(batch, self._spec.delete_behavior)
        frame = round_frame(batch)
        new_v, old_v = new(self._version), old(self._version)
        new_wins = (new_v.is_null() & old_v.is_null()) | (new_v.is_not_null() & (old_v.is_null() | (new_v >= old_v)))
        insert = UPSERT & ~EXISTS
        replace = UPSERT & EXISTS & new_wins.fill_null(False)
        after = {c: pl.when(insert | replace).then(new(c)).otherwise(old(c)) for c in self._spec.columns}
        emit = (
            pl.when(insert)
            .then(emit_code(EMIT_INSERT))
            .when(replace)
            .then(emit_code(EMIT_UPDATE))
            .otherwise(emit_code(EMIT_NOTHING))
        )
        return finish_round(frame, self._spec, after, EXISTS | UPSERT, emit)
