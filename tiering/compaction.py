"""Compaction of a current-state lake table: keep position deletes from piling up (copy-on-write only where they pile).

Tiering applies primary-key changes merge-on-read (a position-delete file per touched partition and round), so
each round costs what it changes. Readers pay for deletes instead: every delete file of a partition is read and
every deleted row is skipped. :func:`compact_table` bounds that, per partition (Fluss bucket):

- a data file whose deleted fraction reaches ``delete_ratio`` is rewritten without its deleted rows (the only
  copy-on-write left, and only for heavily deleted files);
- the partition's delete files (more than ``max_delete_files``, or any after such a rewrite, or ones that no
  longer match a data file) are replaced by one file holding the deletes of the data files that stay;
- more than ``max_manifests`` manifests are folded into one per content (data, deletes).

:func:`compact_history` merges the small files the rounds append to a history table (per partition, beyond
``max_history_files`` of them).

It commits ONE snapshot carrying the current tiering offsets unchanged (with ``commit.retry.num-retries = 0``: a
tiering round that commits first makes compaction fail and plan again, so offsets never regress and no delete
is applied twice). Tiering runs it after each primary-key round (``compaction=`` of ``tier_table``,
``tier_once``, ``TieringService``); the check reads only manifests and the (cached) delete files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from fluss_lake._utils.arguments import check_int, check_number
from fluss_lake.exceptions import InvalidConfigError, TieringConflictError
from fluss_lake.metadata.table_path import TablePath
from tiering.lake_snapshot import LakeSnapshot
from tiering.state_index import state_index

if TYPE_CHECKING:
    from fluss_lake.table import Table
    from tiering.lake import Lake
    from tiering.schema import LakeKind

__all__ = ["DEFAULT_COMPACTION", "CompactionPolicy", "CompactionReport", "compact_history", "compact_table"]

_MAX_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When :func:`compact_table` rewrites files.

    Examples
    --------
    >>> CompactionPolicy().delete_ratio
    0.3
    >>> CompactionPolicy(delete_ratio=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fluss_lake.exceptions.InvalidConfigError: delete_ratio must be in (0, 1], got 0; e.g. 0.3 rewrites a data file ...
    """

    delete_ratio: float = 0.3  # rewrite a data file once this fraction of its rows is deleted
    max_delete_files: int = 16  # more delete files than this in a partition: merge them into one
    max_manifests: int = 32  # more manifests than this: fold them into one per content
    max_history_files: int = 32  # history table: more small files than this in a partition: merge them
    small_file_rows: int = 1_000_000  # history table: files with fewer rows are small
    check_every: int = 8  # after tiering rounds: check when the snapshot sequence number is a multiple

    def due(self, table: Any) -> bool:
        """Whether a tiering round that just committed to `table` should run the check (every `check_every`
        snapshots by sequence number: a fresh tiering process reads the manifests once per check)."""
        snapshot = table.current_snapshot() if table is not None else None
        return snapshot is not None and snapshot.sequence_number % self.check_every == 0

    def __post_init__(self) -> None:
        check_number("delete_ratio", self.delete_ratio, positive=False, hint="a fraction in (0, 1]")  # no bool, no NaN
        for name in ("max_delete_files", "max_manifests", "max_history_files", "small_file_rows", "check_every"):
            check_int(name, getattr(self, name), minimum=2 if name == "max_manifests" else 1)
        if not 0 < self.delete_ratio <= 1:
            raise InvalidConfigError(
                f"delete_ratio must be in (0, 1], got {self.delete_ratio}; e.g. 0.3 rewrites a "
                "data file once 30% of its rows are deleted"
            )
        if self.max_delete_files < 1 or self.max_manifests < 2 or self.max_history_files < 1 or self.check_every < 1:
            raise InvalidConfigError(
                f"max_delete_files, max_history_files and check_every must be >= 1 and "
                f"max_manifests >= 2, got {self.max_delete_files}, {self.max_history_files}, "
                f"{self.check_every} and {self.max_manifests}"
            )


DEFAULT_COMPACTION = CompactionPolicy()


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction did."""

    table: TablePath
    committed: bool = False
    snapshot_id: int | None = None
    data_files_rewritten: int = 0
    rows_rewritten: int = 0  # live rows copied into new data files
    rows_dropped: int = 0  # deleted rows the rewrite removed for good
    delete_files_removed: int = 0
    delete_files_written: int = 0
    manifests_before: int = 0
    manifests_after: int = 0
    seconds: float = 0.0


def compact_table(
    live: Table, lake: Lake, *, policy: CompactionPolicy | None = None, force: bool = False, table: Any = None
) -> CompactionReport:
    """Compact the current-state lake table of primary-key table `live` (see the module docstring).

    `force` rewrites every data file with a deleted row and removes every delete file. `table`: the lake table
    if already loaded (saves a catalog load; reloaded if a concurrent commit makes the first attempt fail).
    Returns a report (``committed=False`` when nothing needed doing). Log tables have no deletes: nothing to do.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT", "v": "INT"}, primary_key=["k"],
    ...                       options={"table.datalake.enabled": True})
    >>> t = conn.get_table("d.t"); lake = tiering.Lake.for_connection(conn)
    >>> _ = t.upsert([{"k": k, "v": 0} for k in range(10)]); _ = tiering.tier_once(conn, lake)
    >>> _ = t.upsert([{"k": 1, "v": 1}]); _ = tiering.tier_once(conn, lake, compaction=None)
    >>> report = compact_table(t, lake, force=True)
    >>> report.data_files_rewritten, report.delete_files_removed, report.rows_dropped
    (1, 1, 1)
    >>> tiering.read_lake(lake, "d.t").select(pl.col("v").sum()).collect().item()
    1
    """
    if not live.is_primary_key_table:
        return CompactionReport(live.path)
    policy = policy or CompactionPolicy()
    return _retrying(
        live,
        lake,
        "primary-key",
        table,
        f"compacting {live.path}",
        lambda t, started: _compact(live, lake, t, policy, force, started),
    )


def compact_history(
    live: Table, lake: Lake, *, policy: CompactionPolicy | None = None, table: Any = None
) -> CompactionReport:
    """Merge the small files of a primary-key table's history table (each round appends a few per partition).

    In each partition with more than ``max_history_files`` files under ``small_file_rows`` rows, those files are
    rewritten as one; more than ``max_manifests`` manifests are folded. One commit carrying the offsets, as
    :func:`compact_table` (`table`: the history table if already loaded); tiering runs it after each primary-key
    round.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl, tiering
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"k": "INT"}, primary_key=["k"], options={"table.datalake.enabled": True})
    >>> t = conn.get_table("d.t"); lake = tiering.Lake.for_connection(conn)
    >>> for k in range(3):
    ...     _ = t.upsert([{"k": k}]); _ = tiering.tier_once(conn, lake, compaction=None)
    >>> compact_history(t, lake, policy=CompactionPolicy(max_history_files=2)).data_files_rewritten
    3
    >>> tiering.read_history(lake, "d.t").collect().height
    3
    """
    policy = policy or CompactionPolicy()
    return _retrying(
        live,
        lake,
        "history",
        table,
        f"compacting the history of {live.path}",
        lambda t, started: _compact_history(live, lake, t, policy, started),
    )


def _retrying(
    live: Table, lake: Lake, kind: LakeKind, table: Any, what: str, compact: Callable[[Any, float], CompactionReport]
) -> CompactionReport:
    """Run `compact` on the lake table of `kind`, planning again on the new snapshot when a tiering round commits
    first (a lost optimistic commit)."""
    from pyiceberg.exceptions import CommitFailedException

    started = time.perf_counter()
    for attempt in range(_MAX_ATTEMPTS):
        if table is None or attempt:
            table = lake.load(live.path, kind)
        if table is None or table.current_snapshot() is None:
            return CompactionReport(live.path, seconds=time.perf_counter() - started)
        try:
            return compact(table, started)
        except CommitFailedException:
            continue  # a tiering round committed first: plan again on its snapshot
    raise TieringConflictError(f"{what}: tiering committed first {_MAX_ATTEMPTS} times in a row; try again")


def _compact_history(live: Table, lake: Lake, table: Any, policy: CompactionPolicy, started: float) -> CompactionReport:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.table import FileScanTask

    from tiering.deletes import RowDelta

    snapshot = table.current_snapshot()
    manifests = snapshot.manifests(table.io)
    if _live_files(manifests) <= policy.max_history_files and len(manifests) <= policy.max_manifests:
        # from the manifest list alone: no partition can hold too many files (no manifest is read)
        return _unchanged(live, snapshot, manifests, started)
    data = [e.data_file for e in state_index(lake).entries(table.io, manifests)]
    small: dict[Any, list[Any]] = {}
    for f in data:
        if f.record_count < policy.small_file_rows:
            small.setdefault(_partition_of(f), []).append(f)
    merge = [f for files in small.values() if len(files) > policy.max_history_files for f in files]
    if not merge and len(manifests) <= policy.max_manifests:
        return _unchanged(live, snapshot, manifests, started)
    rows = (
        ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table([FileScanTask(f) for f in merge])
        if merge
        else None
    )
    offsets = LakeSnapshot.of_table(table)
    props = offsets.summary_properties() if offsets.table_id is not None else {}
    with table.transaction() as tx, RowDelta(tx, table.io, snapshot_properties=props, merge_manifests=True) as delta:
        for f in merge:
            delta.delete_data_file(f)
        if rows is not None and rows.num_rows:
            target = pa.schema(tx.table_metadata.schema().as_arrow())
            for f in _dataframe_to_data_files(
                table_metadata=tx.table_metadata, df=rows.cast(target), io=table.io, write_uuid=delta.commit_uuid
            ):
                delta.append_data_file(f)
    current = table.current_snapshot()
    return CompactionReport(
        live.path,
        committed=True,
        snapshot_id=current.snapshot_id if current else None,
        data_files_rewritten=len(merge),
        rows_rewritten=rows.num_rows if rows is not None else 0,
        manifests_before=len(manifests),
        manifests_after=len(current.manifests(table.io)),
        seconds=time.perf_counter() - started,
    )


def _compact(
    live: Table, lake: Lake, table: Any, policy: CompactionPolicy, force: bool, started: float
) -> CompactionReport:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
    from pyiceberg.manifest import ManifestContent
    from pyiceberg.table import FileScanTask

    from tiering.deletes import RowDelta, is_delete_file, write_position_deletes

    snapshot = table.current_snapshot()
    manifests = snapshot.manifests(table.io)
    if (
        not force
        and len(manifests) <= policy.max_manifests
        and not _live_files([m for m in manifests if m.content == ManifestContent.DELETES])
    ):
        # from the manifest list alone: no delete file, few manifests (no manifest is read)
        return _unchanged(live, snapshot, manifests, started)
    index = state_index(lake)
    entries = index.entries(table.io, manifests)
    data = [e.data_file for e in entries if not is_delete_file(e.data_file)]
    deletes = [e.data_file for e in entries if is_delete_file(e.data_file)]
    # deleted rows per data file (a round never deletes a position twice: counts add up)
    counts = index.delete_counts(table.io, deletes)
    by_file = dict(counts.group_by("file_path").agg(pl.col("len").sum()).iter_rows()) if counts.height else {}
    rewrite = [
        f
        for f in data
        if by_file.get(f.file_path, 0) and (force or by_file[f.file_path] >= policy.delete_ratio * f.record_count)
    ]
    part = _partition_of
    delete_parts: dict[Any, list[Any]] = {}
    for f in deletes:
        delete_parts.setdefault(part(f), []).append(f)
    dangling = {part(f) for f in deletes} - {part(f) for f in data}
    redo = (
        {part(f) for f in rewrite}
        | dangling
        | {p for p, fs in delete_parts.items() if len(fs) > policy.max_delete_files or force}
    )
    if not redo and len(manifests) <= policy.max_manifests:
        return _unchanged(live, snapshot, manifests, started)
    removed_deletes = [f for p in redo for f in delete_parts.get(p, [])]
    rewrite_paths = {f.file_path for f in rewrite}
    # deletes that stay: positions in data files that stay, of the partitions whose delete files are replaced
    redo_paths = {f.file_path for f in data if part(f) in redo} - rewrite_paths
    positions = index.deleted(table.io, removed_deletes)
    stay = positions.filter(pl.col("file_path").is_in(sorted(redo_paths))).unique() if positions.height else positions
    where = {f.file_path: (part(f), f.partition, f.file_path.rsplit("/", 1)[0]) for f in data}
    merged: dict[Any, tuple[Any, str, list[pa.Table]]] = {}
    for (path,), frame in stay.partition_by("file_path", as_dict=True).items() if stay.height else ():
        key, record, folder = where[path]
        merged.setdefault(key, (record, folder, []))[2].append(frame.to_arrow())
    new_deletes = [(record, folder, pa.concat_tables(frames)) for record, folder, frames in merged.values()]
    rows = pa.schema(table.schema().as_arrow()).empty_table()
    if rewrite:  # live rows of the heavily deleted files, with pyiceberg's reader (deletes applied, old files
        # lacking newer columns read as null)
        tasks = [FileScanTask(f, delete_files=set(delete_parts.get(part(f), []))) for f in rewrite]
        rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
    offsets = LakeSnapshot.of_table(table)
    props = offsets.summary_properties() if offsets.table_id is not None else {}
    written: list[Any] = []
    with table.transaction() as tx, RowDelta(tx, table.io, snapshot_properties=props, merge_manifests=True) as delta:
        for f in (*rewrite, *removed_deletes):
            delta.delete_data_file(f)
        if rows.num_rows:
            target = pa.schema(tx.table_metadata.schema().as_arrow())
            for f in _dataframe_to_data_files(
                table_metadata=tx.table_metadata, df=rows.cast(target), io=table.io, write_uuid=delta.commit_uuid
            ):
                delta.append_data_file(f)
        written = write_position_deletes(table.io, tx.table_metadata.default_spec_id, new_deletes)
        for f in written:
            delta.add_delete_file(f)
    current = table.current_snapshot()
    return CompactionReport(
        live.path,
        committed=True,
        snapshot_id=current.snapshot_id if current else None,
        data_files_rewritten=len(rewrite),
        rows_rewritten=rows.num_rows,
        rows_dropped=sum(f.record_count for f in rewrite) - rows.num_rows,
        delete_files_removed=len(removed_deletes),
        delete_files_written=len(written),
        manifests_before=len(manifests),
        manifests_after=len(current.manifests(table.io)),
        seconds=time.perf_counter() - started,
    )


def _live_files(manifests: list[Any]) -> int:
    """Live (added or existing) files the manifests list, from the manifest list's counts."""
    return sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in manifests)


def _partition_of(data_file: Any) -> tuple[int, tuple[Any, ...]]:
    """A hashable (spec id, partition values) key of a data or delete file."""
    return data_file.spec_id, tuple(data_file.partition)


def _unchanged(live: Table, snapshot: Any, manifests: list[Any], started: float) -> CompactionReport:
    """Nothing to rewrite: the report of a table that stays at its snapshot."""
    return CompactionReport(
        live.path,
        snapshot_id=snapshot.snapshot_id,
        manifests_before=len(manifests),
        manifests_after=len(manifests),
        seconds=time.perf_counter() - started,
    )
