"""The merge-engine protocol: one vectorized step per *round* of a write batch.

A write batch may touch a key several times. The KV tablet splits it into rounds so that each round holds
every key at most once (round r = the r-th occurrence of each key, in batch order); each round is merged
against the state left by the previous round. Within a round every engine works on whole columns: no Python
loop per row. The outcome says, per row, what the new state is and which changelog records to emit; the
tablet turns that into ``+I / -U / +U / -D`` records at dense offsets (and applies ``table.changelog.image``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import polars as pl

__all__ = [
    "MergeMode",
    "MergeRound",
    "MergeOutcome",
    "RowMerger",
    "EMIT_NOTHING",
    "EMIT_INSERT",
    "EMIT_UPDATE",
    "EMIT_DELETE",
]

MergeMode = Literal["default", "overwrite"]

#: ``emit`` codes of a :class:`MergeOutcome` row.
EMIT_NOTHING = 0  # no changelog record (no-op, ignored delete, absent key...)
EMIT_INSERT = 1  # +I(after)
EMIT_UPDATE = 2  # -U(old) then +U(after), at two consecutive offsets
EMIT_DELETE = 3  # -D(old)


@dataclass(frozen=True, slots=True)
class MergeRound:
    """One round: every key at most once; all frames and series aligned row by row.

    ``old`` and ``new`` have every table column in table order, with the table's dtypes. ``old`` rows are
    all-null where ``exists`` is false. For deletes only the key columns of ``new`` are meaningful.
    """

    old: pl.DataFrame
    exists: pl.Series  # Boolean: key present before this round
    new: pl.DataFrame
    is_delete: pl.Series  # Boolean


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """Result of one round, aligned with the round's rows.

    ``after`` is the key's row after the round (every column, table order and dtypes); it is ignored where
    ``after_exists`` is false. ``emit`` holds one of the ``EMIT_*`` codes (Int8).
    """

    after: pl.DataFrame
    after_exists: pl.Series
    emit: pl.Series


class RowMerger(Protocol):
    """Merge one round of a write batch against the current rows of its keys."""

    def merge(self, batch: MergeRound) -> MergeOutcome: ...
