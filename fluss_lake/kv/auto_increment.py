"""Auto-increment columns (Fluss's ``auto-increment.fields``): the value a new key gets, from per-bucket ranges.

A table's auto-increment values form one sequence cut into ranges of ``table.auto-increment.cache-size`` values:
range ``i`` is ``[i * size + 1, (i + 1) * size]`` (values start at 1, as in Fluss). A bucket takes a range by
creating that range's claim object in the store (an atomic create: of two processes racing for one range, one
wins and the other takes the next), so no range is ever given out twice, to any bucket, partition or process.
The bucket hands out its range's values in order to the keys its writes insert (``+I``), and claims the next
free range when it runs out.

Where a bucket stands in its range is read from its changelog, not stored apart: the highest value of the
``+I`` records this process has seen in the bucket's log (while catching up with it, and after each of its own
commits). Every writer of a bucket catches up with the log before it merges and commits only at the log end, so
writers in several processes continue after the last committed value and never hand out one twice; values of a
bucket increase with their offsets. A process that has seen no ``+I`` of a bucket since it opened it (after a
restart from a snapshot whose log tail holds none) claims a fresh range: the rest of the old one is skipped,
never reused. So values are unique table-wide and roughly increasing, with gaps after restarts, as Fluss's.

Rows keep their value: an update of an existing key keeps the stored value, whatever the merge engine; only a
key that does not exist (new, or deleted before) gets one. Writes never carry values for the column (the
writers refuse them).

The range claims are small JSON objects written and read by :func:`write_claim` and :func:`read_claim` only.

Examples
--------
>>> import tempfile
>>> from fluss_lake.io.store import open_store
>>> seq = AutoIncrementSequence(store=open_store(tempfile.mkdtemp()), folder="t/_auto_increment/c00001",
...                             column="uid", dtype=pl.Int32(), cache_size=3, bucket=0, writer_id="w")
>>> assignment = seq.assignment()
>>> assignment.take(5).tolist(), [c.start for c in read_claims(seq.store, seq.folder)]
([1, 2, 3, 4, 5], [1, 4])
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import CommitConflictError, UnsupportedOperationError
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted, dumps_json, loads_json
from fluss_lake.io.store import ObjectStore
from fluss_lake.kv.merge.row_merger import EMIT_INSERT, MergeOutcome, MergeRound, RowMerger
from fluss_lake.log.log_batch import CHANGE_TYPE_COLUMN

__all__ = [
    "AutoIncrementSequence",
    "AutoIncrementMerger",
    "Assignment",
    "RangeClaim",
    "read_claim",
    "read_claims",
    "write_claim",
]

_log = logging.getLogger(__name__)
_INSERT_CODE = 1  # the +I code of the change type column (see kv_tablet)
_MAX_INT, _MAX_BIGINT = 2**31 - 1, 2**63 - 1


@dataclass(frozen=True, slots=True)
class RangeClaim:
    """One claimed range of a table's auto-increment values, ``[start, end]``, and who claimed it."""

    start: int
    end: int
    column: str
    bucket: int
    partition_id: str | None
    writer_id: str
    claimed_ms: int


def write_claim(store: ObjectStore, key: str, claim: RangeClaim) -> bool:
    """Create the claim object of a range (sealed with its checksum); False if another writer claimed that range
    first."""
    return store.put_if_absent(key, dumps_json(dataclasses.asdict(claim)))


def read_claim(store: ObjectStore, key: str) -> RangeClaim:
    """Read one range claim (CorruptedDataError if the object is damaged or not one)."""
    data = loads_json(store.get(key), key=key, what="auto-increment range claim")
    try:
        return RangeClaim(**{f.name: data[f.name] for f in dataclasses.fields(RangeClaim)})
    except (KeyError, TypeError) as err:
        raise corrupted(key, f"it is not a range claim ({err})", what="auto-increment range claim") from err


def read_claims(store: ObjectStore, folder: str) -> list[RangeClaim]:
    """Every claimed range of one auto-increment column, lowest first (for inspection and tests)."""
    indexes = sorted(i for i in map(layout.auto_increment_range_index, store.list(folder)) if i is not None)
    return [read_claim(store, layout.auto_increment_range(folder, i)) for i in indexes]


class AutoIncrementSequence:
    """One bucket's view of its table's auto-increment sequence: the next value and the ranges it claimed.

    Used under the bucket's lock (the tablet's): :meth:`observe` the changelog the bucket commits or replays,
    and per write attempt an :meth:`assignment` hands out values (:meth:`merger` wraps the table's merger so
    new keys get them). Values handed out by an attempt that loses the race for the log end are handed out again
    by the next attempt; a claimed range is kept until values past it are committed.
    """

    def __init__(
        self,
        *,
        store: ObjectStore,
        folder: str,
        column: str,
        dtype: pl.DataType,
        cache_size: int,
        bucket: int,
        partition_id: str | None = None,
        writer_id: str,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if cache_size <= 0:
            raise ValueError(f"cache_size={cache_size} must be positive")
        self.store = store
        self.folder = folder
        self.column = column
        self.dtype = dtype
        self.cache_size = cache_size
        self.bucket = bucket
        self.partition_id = partition_id
        self.writer_id = writer_id
        self.clock = clock
        if dtype not in (pl.Int32, pl.Int64):
            raise ValueError(f"an auto-increment column is INT or BIGINT, not {dtype}")
        self.max_value = _MAX_INT if dtype == pl.Int32 else _MAX_BIGINT
        self._next: int | None = None  # the value after the highest committed +I seen (None: none seen yet)
        self._end = 0  # last value of the range holding _next
        self._spare: list[tuple[int, int]] = []  # claimed ranges no commit has used yet, ascending

    # ------------------------------------------------------------ what was committed
    def observe(self, changelog: pl.DataFrame | pa.Table) -> None:
        """Continue after the highest value of the ``+I`` records of committed changelog rows."""
        if isinstance(changelog, pa.Table):
            changelog = pl.from_arrow(changelog.select([CHANGE_TYPE_COLUMN, self.column]))
        assert isinstance(changelog, pl.DataFrame)
        if changelog.height == 0:
            return
        high = changelog.select(pl.col(self.column).filter(pl.col(CHANGE_TYPE_COLUMN) == _INSERT_CODE).max()).item()
        if high is None or (self._next is not None and high < self._next):
            return
        high = int(high)
        self._next, self._end = high + 1, self._bounds(self._index(high))[1]
        self._spare = [r for r in self._spare if r[0] > high]

    @property
    def next_value(self) -> int | None:
        """The value the next insert gets from the range in use (None: the next insert claims a range)."""
        if self._next is not None and self._next <= self._end:
            return self._next
        return self._spare[0][0] if self._spare else None

    # ------------------------------------------------------------ handing out values
    def assignment(self) -> Assignment:
        """A fresh hand-out for one write attempt, starting at the next value."""
        ranges = [(self._next, self._end)] if self._next is not None and self._next <= self._end else []
        return Assignment(self, [*ranges, *self._spare])

    def merger(self, inner: RowMerger) -> AutoIncrementMerger:
        """`inner` for one write attempt, with the auto-increment column kept on updates and filled on inserts."""
        return AutoIncrementMerger(inner, self.column, self.dtype, self.assignment())

    def _index(self, value: int) -> int:
        return (value - 1) // self.cache_size

    def _bounds(self, index: int) -> tuple[int, int]:
        """First and last value of range `index`; raises when the column's type has no values left."""
        start = index * self.cache_size + 1
        if start > self.max_value:
            raise UnsupportedOperationError(
                f"auto-increment column {self.column!r} ({'INT' if self.dtype == pl.Int32 else 'BIGINT'}) has "
                f"handed out every value up to {self.max_value}; no more keys can be inserted. Re-create the "
                "table with a BIGINT column (or a smaller table.auto-increment.cache-size)"
            )
        return start, min((index + 1) * self.cache_size, self.max_value)

    def claim(self) -> tuple[int, int]:
        """Claim the lowest range no one has claimed yet (atomic create), keep it, and return its bounds."""
        names = self.store.list(self.folder)
        index = max((i for i in map(layout.auto_increment_range_index, names) if i is not None), default=-1) + 1
        for _ in range(10_000):
            start, end = self._bounds(index)
            claim = RangeClaim(start, end, self.column, self.bucket, self.partition_id, self.writer_id, self.clock())
            if write_claim(self.store, layout.auto_increment_range(self.folder, index), claim):
                _log.info(
                    "auto-increment column %r, bucket %s: claimed values [%s, %s]", self.column, self.bucket, start, end
                )
                self._spare.append((start, end))
                return start, end
            index += 1  # claimed by another bucket or process meanwhile: the next one
        raise CommitConflictError(f"auto-increment column {self.column!r}: could not claim a range; retry the write")


class Assignment:
    """The values one write attempt hands out, in order: the rest of the range in use, spare ranges, new claims."""

    def __init__(self, sequence: AutoIncrementSequence, ranges: list[tuple[int, int]]) -> None:
        self._sequence = sequence
        self._ranges = ranges
        self._at = 0

    def take(self, n: int) -> np.ndarray:
        """The next `n` values (int64), claiming ranges as needed."""
        parts = []
        while n > 0:
            if self._at == len(self._ranges):
                self._ranges.append(self._sequence.claim())
            start, end = self._ranges[self._at]
            k = min(n, end - start + 1)
            parts.append(np.arange(start, start + k, dtype=np.int64))
            n -= k
            if start + k > end:
                self._at += 1
            else:
                self._ranges[self._at] = (start + k, end)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


class AutoIncrementMerger:
    """A table's merger with the auto-increment rule around it: the stored value is written back for keys that
    exist (so every engine keeps it), and keys the round inserts get the next values, in round order."""

    def __init__(self, inner: RowMerger, column: str, dtype: pl.DataType, assignment: Assignment) -> None:
        self.inner = inner
        self.column = column
        self.dtype = dtype
        self.assignment = assignment

    def in_offset_order(
        self, changelog: pl.DataFrame | pa.Table, rows: pl.DataFrame
    ) -> tuple[pl.DataFrame | pa.Table, pl.DataFrame]:
        """The changelog of the attempt and its final rows with the values it handed out renumbered so they increase
        with the ``+I`` records' order. Rounds number inserts round by round, so a key deleted and inserted again
        later in the same batch got its value after keys first seen behind it; the distinct-key path is in
        order already (then nothing is copied)."""
        arrow = isinstance(changelog, pa.Table)
        probe = pl.from_arrow(changelog.select([CHANGE_TYPE_COLUMN, self.column])) if arrow else changelog
        assert isinstance(probe, pl.DataFrame)
        given = probe.filter(pl.col(CHANGE_TYPE_COLUMN) == _INSERT_CODE).get_column(self.column)
        if given.len() < 2 or bool((given.diff().drop_nulls() > 0).all()):
            return changelog, rows
        old, new = given.to_numpy(), np.sort(given.to_numpy())

        def renumber(df: pl.DataFrame) -> pl.DataFrame:
            return df.with_columns(pl.col(self.column).replace(old, new))

        if isinstance(changelog, pa.Table):
            frame = pl.from_arrow(changelog)
            assert isinstance(frame, pl.DataFrame)
            return renumber(frame).to_arrow(), renumber(rows)
        return renumber(changelog), renumber(rows)

    def merge(self, batch: MergeRound) -> MergeOutcome:
        """Merge one round with the inner engine, then number its inserts."""
        kept = batch.old.get_column(self.column)  # null where the key is absent (MergeRound's contract)
        outcome = self.inner.merge(dataclasses.replace(batch, new=batch.new.with_columns(kept)))
        inserts = np.flatnonzero(outcome.emit.to_numpy() == EMIT_INSERT)
        if inserts.size == 0:
            return outcome
        values = pl.Series(self.column, self.assignment.take(inserts.size), dtype=self.dtype)
        filled = outcome.after.get_column(self.column).clone().scatter(inserts, values)
        return dataclasses.replace(outcome, after=outcome.after.with_columns(filled))
