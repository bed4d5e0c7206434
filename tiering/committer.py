"""One tiering round of one table: read the live log from the lake's offsets, write, commit data + offsets at once.

Per bucket the round reads ``[tiered offset, log end)`` of the live log and commits the rows together with the
new end offsets (in the snapshot summary) as ONE Iceberg commit; a crash leaves the old snapshot (the round is
redone) or the new one (it is done), never both. Lake tables have ``commit.retry.num-retries = 0``, so a
concurrent or stale run gets ``CommitFailedException``: the round refreshes, re-reads the offsets and plans
again (never regressing them).

- Log tables: append.
- Primary-key tables: the current-state table gets the changes folded per key and applied merge-on-read: a
  position-delete file per touched ``__bucket`` partition deletes the old rows (found from the key columns
  only, ``tiering.state_index``) and the new after-images are appended, in one snapshot with the offsets;
  ``tiering.compaction`` runs after the round. The history table appends every changelog row with its
  ``__change_type``. Each table carries its own offsets, so one may run ahead of
  the other after a crash and the next round catches the other up.
- A bucket whose un-tiered log has expired (``table.log.ttl``): a primary-key table's current state is
  rebuilt for that bucket from the live state (as Fluss's snapshot split: ``__offset = -1``); a log table's and
  the history's expired records are gone, the round skips them and reports how many offsets were skipped.

A round resolves the table once (live offsets, metadata, lake tables: :class:`~tiering.plan.ResolvedTable`),
plans it (:func:`~tiering.plan.plan_round`: a :class:`~tiering.plan.TieringPlan` value), reads what the plan
says, builds the writes (:mod:`tiering.lake_write`) and commits each lake table's part of the plan with
:func:`commit`, where its precondition is checked. A stale plan makes the round resolve and plan again.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake._utils.arguments import check_callable
from fluss_lake.exceptions import (
    FlussLakeError,
    InvalidConfigError,
    LakeUnavailableError,
    TieringConflictError,
    UnsupportedOperationError,
)
from fluss_lake.io.store import is_storage_unavailable
from fluss_lake.jobs.shard import Shard
from fluss_lake.metadata.table_path import TablePath
from tiering.compaction import (
    DEFAULT_COMPACTION,
    CompactionPolicy,
    CompactionReport,
    compact_history,
    compact_table,
)
from tiering.lake import expire_dropped_partitions
from tiering.lake_write import LakeWrite, MergeWrite, append_write, bootstrap_rows, rows_since
from tiering.log_reader import log_reader
from tiering.plan import LakeCommit, ResolvedTable, StalePlan, TieringPlan, live_kind, plan_round, public_offsets
from tiering.schema import PARTITION, LakeKind, lake_arrow_schema

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from fluss_lake.table import Table
    from tiering.lake import Lake

__all__ = ["TableTieringReport", "commit", "live_kind", "tier_table"]

_MAX_CONFLICTS = 20


@dataclass(frozen=True, slots=True)
class TableTieringReport:
    """What one round did for one table."""

    table: TablePath
    kind: LakeKind
    rows: int = 0  # live log records tiered into the lake table
    history_rows: int = 0  # changelog rows appended to the history table
    # offsets keyed by bucket, or by (partition name, bucket) for a partitioned table
    start_offsets: Mapping[Any, int] = field(default_factory=dict)
    end_offsets: Mapping[Any, int] = field(default_factory=dict)  # tiered offsets after the round
    skipped_offsets: Mapping[Any, int] = field(default_factory=dict)  # expired live offsets never tiered
    snapshot_id: int | None = None
    history_snapshot_id: int | None = None
    committed: bool = False
    files_rewritten: int = 0  # data files replaced (buckets rebuilt, compaction)
    position_deletes: int = 0  # old rows deleted by position (changed/deleted keys)
    delete_files: int = 0  # position-delete files written by the round
    files_compacted: int = 0  # data files rewritten by compaction after the round
    history_files_compacted: int = 0  # small history files merged after the round
    conflicts: int = 0
    seconds: float = 0.0


def tier_table(
    live: Table,
    lake: Lake,
    *,
    clock: Callable[[], int] | None = None,
    expire_partitions: bool = False,
    compaction: CompactionPolicy | None = DEFAULT_COMPACTION,
    shard: Shard | None = None,
) -> TableTieringReport:
    """Tier everything committed to `live` so far into the lake, exactly once (see the module docstring).

    With a `shard` (:class:`fluss_lake.jobs.Shard`) the round tiers only the (partition, bucket) pairs the shard
    owns: shards of one table run in any processes, each commits its buckets' rows with their offsets, and a
    commit that lost the race to another shard's re-plans on top of it (offsets merged per bucket, never
    regressing). This is the task the Ray layer runs per table and shard.

    A partitioned table is tiered partition by partition in the same round and the same commit: offsets are
    keyed by ``(partition name, bucket)`` in the report and the snapshot summary; partitions created since the
    last round start at offset 0; a partition dropped live keeps its lake data (its offsets leave the summary)
    unless `expire_partitions` (then :meth:`Lake.expire_partitions` runs after the round).

    A primary-key round that committed is followed by :func:`~tiering.compact_table` with the `compaction`
    policy (``None``: never), which rewrites only what deletes piled up on (a separate commit; usually a no-op).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from tiering import Lake
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.ev", schema={"v": "INT"}, options={"table.datalake.enabled": True})
    >>> _ = conn.get_table("d.ev").append([{"v": 1}, {"v": 2}])
    >>> report = tier_table(conn.get_table("d.ev"), Lake.for_connection(conn))
    >>> report.rows, dict(report.end_offsets)
    (2, {0: 2})
    """
    if live.partition_info is not None:
        raise UnsupportedOperationError(
            f"tier the whole table {live.path}, not the handle of partition "
            f"{live.partition_name!r} (the lake commits all partitions at once)"
        )
    check_callable("clock", clock, hint="a function returning epoch milliseconds")
    if shard is not None and not isinstance(shard, Shard):
        raise InvalidConfigError(f"shard={shard!r}: pass a fluss_lake.jobs.Shard(index, count) (or None for all)")
    if shard is not None and shard.count == 1:
        shard = None
    started = time.perf_counter()
    clock = clock or live.connection.clock
    try:
        report, resolved = _tier(live, lake, clock, started, shard)
        main, history_table = resolved.main, resolved.history
        compacting = compaction if report.committed and live.is_primary_key_table else None
        # whether compaction is due is decided on the round's snapshots (before an expiry commits to them)
        due = compacting is not None and compacting.due(main)
        history_due = compacting is not None and compacting.due(history_table)
        if expire_partitions and live.is_partitioned:
            expire_dropped_partitions(live, {"log": main, "history": history_table})
        if compacting is not None:
            try:
                done = (
                    compact_table(live, lake, policy=compacting, table=main) if due else CompactionReport(live.path)
                )  # loaded and current: no reload
                history = (
                    compact_history(live, lake, policy=compacting, table=history_table)
                    if history_due
                    else CompactionReport(live.path)
                )
            except TieringConflictError:  # tiering runs kept committing first: the next round compacts
                return report
            if done.committed:
                report = dataclasses.replace(
                    report, files_compacted=done.data_files_rewritten, snapshot_id=done.snapshot_id
                )
            if history.committed:
                report = dataclasses.replace(
                    report,
                    history_files_compacted=history.data_files_rewritten,
                    history_snapshot_id=history.snapshot_id,
                )
            report = dataclasses.replace(report, seconds=time.perf_counter() - started)
        return report
    except FlussLakeError:
        raise
    except Exception as exc:
        if is_storage_unavailable(exc):
            raise LakeUnavailableError(
                f"the lake did not answer while tiering {live.path} ({type(exc).__name__}: "
                f"{str(exc)[:300]}); nothing was committed, run the round again"
            ) from exc
        raise


def _tier(
    live: Table, lake: Lake, clock: Callable[[], int], started: float, shard: Shard | None = None
) -> tuple[TableTieringReport, ResolvedTable]:
    """Resolve, plan, execute and commit; on a stale plan (a lost commit) resolve and plan again."""
    from pyiceberg.exceptions import CommitFailedException

    conflicts = 0
    while True:
        tiered_at = clock()
        try:
            resolved = ResolvedTable.of(live, lake)  # a metadata update (ensure) can race too
            plan = plan_round(resolved, tiered_at=tiered_at, shard=shard)
            return _execute(plan, resolved, lake, conflicts, started), resolved
        except (StalePlan, CommitFailedException):
            conflicts += 1
            time.sleep(random.uniform(0, 0.02 * min(conflicts, 10)))  # jitter: two runs in lockstep drift apart
            if conflicts >= _MAX_CONFLICTS:
                raise TieringConflictError(
                    f"tiering {live.path}: other tiering runs committed first {conflicts} times "
                    "in a row; run one tiering service per table or try again"
                ) from None


def _execute(
    plan: TieringPlan, resolved: ResolvedTable, lake: Lake, conflicts: int, started: float
) -> TableTieringReport:
    """Read what the plan says, write it and commit it: the history table's commit runs beside the current
    state's (two tables, two commits with their own offsets: either may land first, as after a crash between
    them)."""
    live = resolved.live
    base, base_offsets = bootstrap_rows(resolved.offsets, plan.bootstrap)
    plan = plan.bootstrapped(base_offsets)  # a rebuilt bucket's state is current up to its offset
    done: dict[str, Any] = {}
    if not plan.needed:
        return _report(plan, conflicts, started, done)
    log = _read_log(resolved, plan)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiering-history") as pool:
        history_job = None
        if plan.history is not None and plan.history.needed:
            assert resolved.history is not None
            history_rows = rows_since(log, plan.history.starts)
            history_job = pool.submit(
                commit,
                resolved.history,
                plan.history,
                append_write(history_rows, lake_arrow_schema(live.schema, "history")),
            )
            done["history_rows"] = history_rows.height
        if plan.main.needed:
            rows = rows_since(log, plan.main.starts)
            if plan.kind == "log":
                done["snapshot_id"] = commit(
                    resolved.main, plan.main, append_write(rows, lake_arrow_schema(live.schema, "log"))
                )
            else:
                merge = MergeWrite(lake, resolved.main, live.schema, live.partition_keys, rows, base, plan.bootstrap)
                done["snapshot_id"] = commit(resolved.main, plan.main, merge)
                done.update(merge.stats())
            done["rows"] = rows.height
            done["committed"] = True
        if history_job is not None:
            done["history_snapshot_id"] = history_job.result()
            done["committed"] = True
    return _report(plan, conflicts, started, done)


def commit(table: IcebergTable, target: LakeCommit, write: LakeWrite) -> int | None:
    """Commit one lake table's part of a plan: `write` in ONE transaction with the new offsets in the snapshot
    summary, if the table is still at the plan's snapshot (:meth:`LakeCommit.check`, and atomically the catalog's
    check of the transaction's base snapshot); returns the new snapshot id. A lost race raises
    :class:`~tiering.plan.StalePlan` (the table is refreshed first)."""
    from pyiceberg.exceptions import CommitFailedException

    target.check(table)
    try:
        with table.transaction() as tx:
            write(tx, target.new.summary_properties())
    except CommitFailedException:
        table.refresh()
        raise StalePlan(f"another run committed to lake table {'.'.join(table.name())} first") from None
    current = table.current_snapshot()
    return current.snapshot_id if current is not None else None


def _report(plan: TieringPlan, conflicts: int, started: float, done: Mapping[str, Any]) -> TableTieringReport:
    """The report of a round: the plan's offsets, and what executing it did."""
    partitioned = plan.partitioned
    return TableTieringReport(
        **{
            "table": plan.table,
            "kind": plan.kind,
            "start_offsets": public_offsets(plan.main.expected.offsets, partitioned),
            "end_offsets": public_offsets(plan.main.new.offsets, partitioned),
            "skipped_offsets": public_offsets(plan.skipped, partitioned),
            "snapshot_id": plan.main.expected.snapshot_id,
            "conflicts": conflicts,
            "history_snapshot_id": plan.history.expected.snapshot_id if plan.history is not None else None,
            **done,
            "seconds": time.perf_counter() - started,
        }
    )


def _read_log(resolved: ResolvedTable, plan: TieringPlan) -> pl.DataFrame:
    """The live log ``[start, end)`` of every partition and bucket, with a ``_partition`` name column."""
    now, frames = resolved.offsets, []
    for name, handle in now.handles.items():
        starts, ends = now.of(name, plan.read_from), now.of(name, plan.end)
        if all(starts[b] >= ends[b] for b in ends):
            continue
        try:
            frame = log_reader(handle).scan_log(start_offsets=starts, end_offsets=ends)
        except Exception:
            if name is not None and name not in {p.name for p in resolved.live.list_partitions()}:
                raise StalePlan(f"partition {name!r} was dropped during the round") from None  # plan without it
            raise
        frames.append(frame.with_columns(pl.lit(name, pl.String).alias(PARTITION)))
    if not frames:
        return pl.DataFrame(
            schema={
                PARTITION: pl.String,
                "_bucket": pl.Int32,
                "_offset": pl.Int64,
                "_change_type": pl.String,
                "_commit_timestamp": pl.Datetime("ms", "UTC"),
                **resolved.live.schema.polars_schema,
            }
        )
    return pl.concat(frames, how="diagonal_relaxed")
