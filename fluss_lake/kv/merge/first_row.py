"""The ``first_row`` merge engine: keep the first row written for a key (Fluss ``FirstRowRowMerger``)."""

from __future__ import annotations

import polars as pl

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
from fluss_lake.kv.merge.row_merger import EMIT_INSERT, EMIT_NOTHING, MergeOutcome, MergeRound

__all__ = ["FirstRowMerger"]


class FirstRowMerger:
    """Keep the first row per key: a fresh key gives ``+I``, every later upsert is a silent no-op.

    Deletes are ignored (``table.delete.behavior=ignore``) or rejected (``disable``); ``allow`` is refused at
    construction, as Fluss refuses it at table creation. The changelog is therefore insert-only.

    Examples
    --------
    >>> import polars as pl
    >>> from fluss_lake.kv.merge import FirstRowMerger, MergeRound, MergeSpec
    >>> spec = MergeSpec(columns=("k", "v"), dtypes={"k": pl.Int32, "v": pl.String},
    ...                  nullable={"k": False, "v": True}, primary_key=("k",),
    ...                  merge_engine="first_row", delete_behavior="ignore")
    >>> old = pl.DataFrame({"k": [1, None], "v": ["a", None]}, schema=spec.dtypes)
    >>> new = pl.DataFrame({"k": [1, 2], "v": ["b", "c"]}, schema=spec.dtypes)
    >>> out = FirstRowMerger(spec).merge(MergeRound(old, pl.Series([True, False]), new, pl.Series([False, False])))
    >>> out.after.to_dict(as_series=False), out.emit.to_list()
    ({'k': [1, 2], 'v': ['a', 'c']}, [0, 1])
    """

    def __init__(self, spec: MergeSpec) -> None:
        refuse_delete_allow("first_row", spec.delete_behavior)
        self._spec = spec

    def merge(self, batch: MergeRound) -> MergeOutcome:
        """Merge one round: insert fresh keys, keep everything else as stored."""
        reject_disabled_deletes(batch, self._spec.delete_behavior)
        frame = round_frame(batch)
        insert = UPSERT & ~EXISTS
        after = {c: pl.when(insert).then(new(c)).otherwise(old(c)) for c in self._spec.columns}
        emit = pl.when(insert).then(emit_code(EMIT_INSERT)).otherwise(emit_code(EMIT_NOTHING))
        return finish_round(frame, self._spec, after, EXISTS | UPSERT, emit)
