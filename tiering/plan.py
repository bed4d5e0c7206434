"""One tiering round of one table as a value: what to read, what to write and what to commit (C3: commits are data).

A round first resolves the table once (:meth:`ResolvedTable.of`): the live table's partition handles with the
end and earliest offset of every bucket (:class:`~tiering.log_reader.LiveOffsets`), then its metadata, then its
lake table(s). :func:`plan_round` turns that, and the lake snapshots the lake tables are at, into a
:class:`TieringPlan` without reading anything else:

- what to read: per ``(partition name or None, bucket)`` the live log range ``[start, end)``, and the buckets of
  a primary-key table to bootstrap from the live state because their un-tiered log expired;
- what to write: per lake table (:class:`LakeCommit`) the log records at or after its ``starts``, appended (log
  and history tables) or merged by key into a current-state table (whose bootstrapped buckets are replaced);
- what to commit: per lake table the new :class:`~tiering.lake_snapshot.LakeSnapshot` offsets, on the
  precondition that the lake table is still at the snapshot the plan was made on (``expected``).

:mod:`tiering.committer` executes and commits a plan. When the lake or the live table moved under it, the plan is
stale (:class:`StalePlan`): the round resolves and plans again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fluss_lake.catalog import data_prefix
from fluss_lake.exceptions import LakeTableMismatchError
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted
from fluss_lake.jobs.shard import Shard
from fluss_lake.log.log_tablet import batch_key
from fluss_lake.metadata.table_path import TablePath
from tiering.lake_snapshot import BucketKey as Key
from tiering.lake_snapshot import LakeSnapshot
from tiering.log_reader import LiveOffsets, live_offsets
from tiering.schema import LakeKind

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from fluss_lake.table import Table
    from tiering.lake import Lake

__all__ = [
    "LakeCommit",
    "ResolvedTable",
    "StalePlan",
    "TieringPlan",
    "lake_snapshot",
    "live_kind",
    "plan_round",
    "public_offsets",
]


def live_kind(live: Table) -> LakeKind:
    """``primary-key`` or ``log``."""
    return "primary-key" if live.is_primary_key_table else "log"


class StalePlan(Exception):
    """The lake table moved under the plan (or a partition was dropped or re-created meanwhile): plan again."""


@dataclass(frozen=True, slots=True)
class ResolvedTable:
    """A live table and its lake table(s), resolved once for one planning of a round."""

    live: Table
    offsets: LiveOffsets  # partition handles, end and earliest offsets, partition ids
    main: IcebergTable  # the current-state or log lake table
    history: IcebergTable | None  # a primary-key table's changelog table

    @property
    def kind(self) -> LakeKind:
        """``primary-key`` or ``log``."""
        return live_kind(self.live)

    @classmethod
    def of(cls, live: Table, lake: Lake) -> ResolvedTable:
        """Read the live offsets, then the live metadata, then create, evolve or load the lake table(s).

        The ends are read before the metadata, so every batch below them has a schema the metadata knows.
        """
        offsets = live_offsets(live)
        live.refresh()
        main = lake.ensure(live, live_kind(live))
        history = lake.ensure(live, "history") if live.is_primary_key_table else None
        return cls(live, offsets, main, history)


@dataclass(frozen=True, slots=True)
class LakeCommit:
    """What a round writes into one lake table and commits, and on which condition."""

    kind: LakeKind
    expected: LakeSnapshot  # precondition: the lake table is still at this snapshot
    starts: Mapping[Key, int]  # write the log records at or after these offsets
    new: LakeSnapshot  # the offsets (with table id, tiered-at, partition ids) to commit
    needed: bool  # rows to write, or offsets leaving the summary

    def check(self, table: IcebergTable) -> None:
        """Raise :class:`StalePlan` unless `table` is still at the snapshot the plan was made on.

        The catalog checks the same atomically when the commit lands (the transaction asserts the snapshot it
        was built on, and lake tables never retry a lost commit: ``commit.retry.num-retries = 0``).
        """
        current = table.current_snapshot()
        found = current.snapshot_id if current is not None else None
        if found != self.expected.snapshot_id:
            raise StalePlan(
                f"lake table {'.'.join(table.name())} moved from snapshot {self.expected.snapshot_id} "
                f"to {found} under the plan; plan the round again"
            )


@dataclass(frozen=True, slots=True)
class TieringPlan:
    """One round of one table: the live log ranges to read, the buckets to bootstrap and the lake commits.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from tiering import Lake
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.ev").append([{"v": 1}, {"v": 2}])
    >>> plan = plan_round(ResolvedTable.of(conn.get_table("d.ev"), Lake.for_connection(conn)), tiered_at=0)
    >>> plan.ranges(), dict(plan.main.new.offsets), plan.main.expected.snapshot_id, plan.history
    ({(None, 0): (0, 2)}, {(None, 0): 2}, None, None)
    """

    table: TablePath
    kind: LakeKind
    partitioned: bool
    end: Mapping[Key, int]  # read the live log up to these offsets (exclusive)
    read_from: Mapping[Key, int]  # ... from these
    bootstrap: frozenset[Key]  # current state rebuilt from the live state (their log expired)
    skipped: Mapping[Key, int]  # expired offsets never tiered (log and history tables)
    main: LakeCommit
    history: LakeCommit | None

    @property
    def needed(self) -> bool:
        """Whether the round writes or commits anything."""
        return self.main.needed or (self.history is not None and self.history.needed)

    def ranges(self) -> dict[Key, tuple[int, int]]:
        """``[start, end)`` of the live log the round reads, per (partition, bucket)."""
        return {k: (self.read_from[k], e) for k, e in self.end.items()}

    def bootstrapped(self, offsets: Mapping[Key, int]) -> TieringPlan:
        """The plan once the bootstrapped buckets were read from the live state at `offsets`: their state is
        current up to there, so the current-state table starts and commits there."""
        if not offsets:
            return self
        starts = {**self.main.starts, **offsets}
        history = self.history.starts if self.history is not None else {}
        new = {**self.main.new.offsets, **{k: max(self.end[k], starts[k]) for k in offsets}}
        main = dataclasses.replace(self.main, starts=starts, new=dataclasses.replace(self.main.new, offsets=new))
        return dataclasses.replace(self, main=main, read_from=_read_from(self.end, starts, history))


def plan_round(resolved: ResolvedTable, *, tiered_at: int, shard: Shard | None = None) -> TieringPlan:
    """The plan of a round from a resolved table and the lake snapshots its lake tables are at.

    With a `shard`, the round reads and advances only the (partition, bucket) pairs the shard owns; the other
    pairs keep the offsets the snapshot has (another shard's progress), so shards committing one after the other
    (each re-planning on the snapshot the other committed, see :class:`StalePlan`) never lose each other's offsets.

    Every bucket resumes at its tiered offset (0 for a bucket new to the lake or of a re-created partition).
    A bucket whose resume point expired live is bootstrapped from the live state (current-state table) or
    skipped up to the earliest retained offset (log and history tables; the skipped offsets are reported).
    Offsets of partitions dropped live leave the summary, so such a round commits even without rows.
    """
    live, now, kind = resolved.live, resolved.offsets, resolved.kind
    table_id = live.info.table_id
    end, earliest, ids = now.end, now.earliest, now.ids
    main_snap = lake_snapshot(resolved.main, table_id)
    starts = {k: main_snap.start(k, ids.get(k[0])) for k in end}  # type: ignore[arg-type]
    hist_snap = lake_snapshot(resolved.history, table_id) if resolved.history is not None else None
    hist_starts = {k: hist_snap.start(k, ids.get(k[0])) for k in end} if hist_snap is not None else {}  # type: ignore[arg-type]
    _check_not_ahead(live, starts, end)
    _check_not_ahead(live, hist_starts, end)
    hist_end = dict(end)
    if shard is not None:  # another shard's pairs: read nothing, commit the offsets the snapshot has
        others = {k for k in end if not shard.owns(*k)}
        end = {k: (min(starts[k], hist_starts.get(k, starts[k])) if k in others else o) for k, o in end.items()}
        hist_end = {k: (hist_starts.get(k, 0) if k in others else o) for k, o in hist_end.items()}
        earliest = {k: (0 if k in others else o) for k, o in earliest.items()}
    skipped: dict[Key, int] = {}
    bootstrap: set[Key] = set()
    for k in end:
        if starts[k] < earliest[k]:
            if kind == "primary-key":
                bootstrap.add(k)
            else:
                skipped[k] = earliest[k] - starts[k]
                starts[k] = earliest[k]
        if hist_starts and hist_starts[k] < earliest[k]:
            skipped[k] = max(skipped.get(k, 0), earliest[k] - hist_starts[k])
            hist_starts[k] = earliest[k]
    stale = set(main_snap.offsets) - set(end)
    main = LakeCommit(
        kind,
        main_snap,
        starts,
        LakeSnapshot(None, {k: max(end[k], starts[k]) for k in end}, table_id, tiered_at, ids),
        bool(bootstrap or stale) or any(starts[k] < end[k] for k in end),
    )
    history = None
    if hist_snap is not None:
        history = LakeCommit(
            "history",
            hist_snap,
            hist_starts,
            LakeSnapshot(None, dict(hist_end), table_id, tiered_at, ids),
            bool(set(hist_snap.offsets) - set(end)) or any(hist_starts[k] < hist_end[k] for k in hist_starts),
        )
    return TieringPlan(
        live.path,
        kind,
        live.is_partitioned,
        dict(end),
        _read_from(end, starts, hist_starts),
        frozenset(bootstrap),
        skipped,
        main,
        history,
    )


def _read_from(end: Mapping[Key, int], starts: Mapping[Key, int], history: Mapping[Key, int]) -> dict[Key, int]:
    """Where the log read starts: the earlier of the two tables' starts (never past the end)."""
    return {k: min(starts[k], history.get(k, starts[k]), e) for k, e in end.items()}


def lake_snapshot(table: IcebergTable, table_id: str) -> LakeSnapshot:
    """The tiering progress of a lake table, which must hold offsets of live table `table_id` (or none yet)."""
    snap = LakeSnapshot.of_table(table)
    if snap.table_id not in (None, table_id):
        raise LakeTableMismatchError(
            f"lake table {'.'.join(table.name())} holds offsets of live table id "
            f"{snap.table_id}, not {table_id}; drop the lake table (Lake.drop) and tier again"
        )
    return snap


def public_offsets(offsets: Mapping[Key, int], partitioned: bool) -> dict[Any, int]:
    """Report keys: ``bucket`` for an unpartitioned table, ``(partition name, bucket)`` for a partitioned one."""
    return dict(offsets) if partitioned else {b: o for (_, b), o in offsets.items()}


def _check_not_ahead(live: Table, starts: Mapping[Key, int], end: Mapping[Key, int]) -> None:
    """The lake can never be ahead of the live log (that would mean another store or a rolled-back store)."""
    ahead = {k: (s, end[k]) for k, s in starts.items() if s > end[k]}
    if ahead:
        if live.is_partitioned:  # a partition re-created since its end was read: the round plans again
            listed = {p.name for p in live.list_partitions()}
            if any(k[0] not in listed for k in ahead):
                raise StalePlan(f"a partition of {live.path} was dropped or re-created during the round")
        shown = {(k if k[0] is not None else k[1]): found for k, found in ahead.items()}
        if live.info.checksums:  # a table of this version: its log lost its newest batches (the lake has them)
            (name, bucket), (tiered, live_end) = next(iter(ahead.items()))
            part = live.partition(name).partition_info if name is not None else None
            raise corrupted(
                batch_key(layout.log_prefix(data_prefix(live.info, part), bucket), live_end),
                f"the lake has tiered offsets up to {tiered} but the live log ends at {live_end} "
                f"(bucket: (lake, live) {shown}): the live log lost its newest batches, or the live store was "
                "replaced by an older copy",
                what="log batch",
                offsets=(live_end, tiered),
                remedy="restore the batches with `fluss-lake check --repair` (from the lake), or, if the store was "
                "replaced on purpose, drop the lake table (Lake.drop) and tier again",
            )
        raise LakeTableMismatchError(
            f"the lake of {live.path} has tiered offsets beyond the live log end "
            f"(bucket: (lake, live) {shown}); was the live store replaced? Drop the lake "
            "table (Lake.drop) and tier again"
        )
