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
import pyarrow as pa

from fluss_lake.exceptions import (
    FlussLakeError,
    LakeTableMismatchError,
    LakeUnavailableError,
    TieringConflictError,
    UnsupportedOperationError,
)
from fluss_lake.metadata.table_path import TablePath
from tiering.changes import fold_changes
from tiering.compaction import (
    DEFAULT_COMPACTION,
    CompactionPolicy,
    CompactionReport,
    compact_history,
    compact_table,
)
from tiering.lake_snapshot import BucketKey as Key
from tiering.lake_snapshot import LakeSnapshot
from tiering.log_reader import LiveOffsets, live_offsets, log_reader
from tiering.schema import (
    BUCKET,
    OFFSET,
    PARTITION,
    TIMESTAMP,
    LakeKind,
    conform,
    file_key,
    lake_arrow_schema,
    to_lake_rows,
)
from tiering.state_index import state_index

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from fluss_lake.table import Table
    from tiering.lake import Lake

__all__ = ["TableTieringReport", "live_kind", "tier_table"]

_MAX_CONFLICTS = 20


@dataclass(frozen=True, slots=True)
class TableTieringReport:
    """What one round did for one table."""

    table: TablePath
    kind: LakeKind
    rows: int = 0                                            # live log records tiered into the lake table
    history_rows: int = 0                                    # changelog rows appended to the history table
    # offsets keyed by bucket, or by (partition name, bucket) for a partitioned table
    start_offsets: Mapping[Any, int] = field(default_factory=dict)
    end_offsets: Mapping[Any, int] = field(default_factory=dict)  # tiered offsets after the round
    skipped_offsets: Mapping[Any, int] = field(default_factory=dict)  # expired live offsets never tiered
    snapshot_id: int | None = None
    history_snapshot_id: int | None = None
    committed: bool = False
    files_rewritten: int = 0                                 # data files replaced (buckets rebuilt, compaction)
    position_deletes: int = 0                                # old rows deleted by position (changed/deleted keys)
    delete_files: int = 0                                    # position-delete files written by the round
    files_compacted: int = 0                                 # data files rewritten by compaction after the round
    history_files_compacted: int = 0                         # small history files merged after the round
    conflicts: int = 0
    seconds: float = 0.0


def live_kind(live: Table) -> LakeKind:
    """``primary-key`` or ``log``."""
    return "primary-key" if live.is_primary_key_table else "log"


def tier_table(live: Table, lake: Lake, *, clock: Callable[[], int] | None = None,
               expire_partitions: bool = False,
               compaction: CompactionPolicy | None = DEFAULT_COMPACTION) -> TableTieringReport:
    """Tier everything committed to `live` so far into the lake, exactly once (see the module docstring).

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
        raise UnsupportedOperationError(f"tier the whole table {live.path}, not the handle of partition "
                                        f"{live.partition_name!r} (the lake commits all partitions at once)")
    started = time.perf_counter()
    clock = clock or live.connection.clock
    try:
        report, main, history_table = _tier(live, lake, clock, started)
        if expire_partitions and live.is_partitioned:
            lake.expire_partitions(live)
        if compaction is not None and report.committed and live.is_primary_key_table:
            try:
                done = compact_table(live, lake, policy=compaction, table=main) if compaction.due(main) \
                    else CompactionReport(live.path)  # loaded and current: no reload
                history = compact_history(live, lake, policy=compaction, table=history_table) \
                    if compaction.due(history_table) else CompactionReport(live.path)
            except TieringConflictError:  # tiering runs kept committing first: the next round compacts
                return report
            if done.committed:
                report = dataclasses.replace(report, files_compacted=done.data_files_rewritten,
                                             snapshot_id=done.snapshot_id)
            if history.committed:
                report = dataclasses.replace(report, history_files_compacted=history.data_files_rewritten,
                                             history_snapshot_id=history.snapshot_id)
            report = dataclasses.replace(report, seconds=time.perf_counter() - started)
        return report
    except FlussLakeError:
        raise
    except Exception as exc:
        if _is_unavailable(exc):
            raise LakeUnavailableError(f"the lake did not answer while tiering {live.path} ({type(exc).__name__}: "
                                       f"{str(exc)[:300]}); nothing was committed, run the round again") from exc
        raise


def _tier(live: Table, lake: Lake, clock: Callable[[], int],
          started: float) -> tuple[TableTieringReport, IcebergTable, IcebergTable | None]:
    from pyiceberg.exceptions import CommitFailedException

    kind = live_kind(live)
    conflicts = 0
    while True:
        tiered_at = clock()
        offsets = live_offsets(live)  # the ends before the metadata: batches below them use a known schema
        live.refresh()
        try:
            main = lake.ensure(live, kind)
            history = lake.ensure(live, "history") if kind == "primary-key" else None
            return _round(live, lake, kind, main, history, offsets, tiered_at, conflicts, started), main, history
        except (_Conflict, CommitFailedException):  # a metadata update (ensure) can race too
            conflicts += 1
            time.sleep(random.uniform(0, 0.02 * min(conflicts, 10)))  # jitter: two runs in lockstep drift apart
            if conflicts >= _MAX_CONFLICTS:
                raise TieringConflictError(f"tiering {live.path}: other tiering runs committed first {conflicts} times "
                                           "in a row; run one tiering service per table or try again") from None


class _Conflict(Exception):
    """The lake table moved under the round (or a partition was dropped meanwhile): plan again."""


def _public(offsets: Mapping[Key, int], partitioned: bool) -> dict[Any, int]:
    """Report keys: ``bucket`` for an unpartitioned table, ``(partition name, bucket)`` for a partitioned one."""
    return dict(offsets) if partitioned else {b: o for (_, b), o in offsets.items()}


def _round(live: Table, lake: Lake, kind: LakeKind, main: IcebergTable, history: IcebergTable | None, now: LiveOffsets,
           tiered_at: int, conflicts: int, started: float) -> TableTieringReport:
    table_id = live.info.table_id
    end, earliest, ids = now.end, now.earliest, now.ids
    partitioned = live.is_partitioned
    main_snap = _snapshot(main, table_id)
    starts = {k: main_snap.start(k, ids.get(k[0])) for k in end}  # type: ignore[arg-type]
    _check_not_ahead(live, starts, end)
    hist_snap = _snapshot(history, table_id) if history is not None else None
    hist_starts = {k: hist_snap.start(k, ids.get(k[0])) for k in end} if hist_snap is not None else {}  # type: ignore[arg-type]
    _check_not_ahead(live, hist_starts, end)
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
    base, base_offsets = _bootstrap_rows(now, bootstrap)
    starts.update(base_offsets)  # a rebuilt bucket's state is current up to its offset (>= the log end read)
    tiered = {k: max(end[k], starts[k]) for k in end}
    read_from = {k: min(starts[k], hist_starts.get(k, starts[k]), end[k]) for k in end}
    # offsets of partitions dropped live leave the summary (their lake data stays): commit even without rows
    stale = set(main_snap.offsets) - set(end)
    need_main = bool(bootstrap or stale) or any(starts[k] < end[k] for k in end)
    need_history = hist_snap is not None and (bool(set(hist_snap.offsets) - set(end))
                                              or any(hist_starts[k] < end[k] for k in hist_starts))
    report: dict[str, Any] = {"table": live.path, "kind": kind,
                              "start_offsets": _public(main_snap.offsets, partitioned),
                              "end_offsets": _public(tiered, partitioned),
                              "skipped_offsets": _public(skipped, partitioned), "snapshot_id": main_snap.snapshot_id,
                              "conflicts": conflicts,
                              "history_snapshot_id": hist_snap.snapshot_id if hist_snap else None}
    if not (need_main or need_history):
        return TableTieringReport(**report, seconds=time.perf_counter() - started)
    log = _read_log(live, now, read_from)
    # the history table's commit runs beside the current state's (two tables, two commits with their own
    # offsets: either may land first, as after a crash between them)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiering-history") as pool:
        history_job = None
        if history is not None and need_history:
            history_rows = _since(log, hist_starts)
            history_new = LakeSnapshot(None, dict(end), table_id, tiered_at, ids)
            history_job = pool.submit(_commit, history, lambda tx, props: tx.append(
                to_lake_rows(history_rows, lake_arrow_schema(live.schema, "history")), snapshot_properties=props),
                history_new)
            report["history_rows"] = history_rows.height
        if need_main:
            rows = _since(log, starts)
            new = LakeSnapshot(None, tiered, table_id, tiered_at, ids)
            if kind == "log":
                report["snapshot_id"] = _commit(main, lambda tx, props: tx.append(
                    to_lake_rows(rows, lake_arrow_schema(live.schema, "log")), snapshot_properties=props), new)
            else:
                report.update(_merge_commit(live, lake, main, rows, base, bootstrap, new))
            report["rows"] = rows.height
            report["committed"] = True
        if history_job is not None:
            report["history_snapshot_id"] = history_job.result()
            report["committed"] = True
    return TableTieringReport(**report, seconds=time.perf_counter() - started)


def _read_log(live: Table, now: LiveOffsets, read_from: Mapping[Key, int]) -> pl.DataFrame:
    """The live log ``[read_from, end)`` of every partition and bucket, with a ``_partition`` name column."""
    frames = []
    for name, handle in now.handles.items():
        starts, ends = now.of(name, read_from), now.of(name, now.end)
        if all(starts[b] >= ends[b] for b in ends):
            continue
        try:
            frame = log_reader(handle).scan_log(start_offsets=starts, end_offsets=ends)
        except Exception:
            if name is not None and name not in {p.name for p in live.list_partitions()}:
                raise _Conflict() from None  # dropped during the round: plan again without it
            raise
        frames.append(frame.with_columns(pl.lit(name, pl.String).alias(PARTITION)))
    if not frames:
        return pl.DataFrame(schema={PARTITION: pl.String, "_bucket": pl.Int32, "_offset": pl.Int64,
                                    "_change_type": pl.String, "_commit_timestamp": pl.Datetime("ms", "UTC"),
                                    **live.schema.polars_schema})
    return pl.concat(frames, how="diagonal_relaxed")


def _snapshot(table: IcebergTable, table_id: str) -> LakeSnapshot:
    snap = LakeSnapshot.of_table(table)
    if snap.table_id not in (None, table_id):
        raise LakeTableMismatchError(f"lake table {'.'.join(table.name())} holds offsets of live table id "
                                     f"{snap.table_id}, not {table_id}; drop the lake table (Lake.drop) and tier again")
    return snap


def _check_not_ahead(live: Table, starts: Mapping[Key, int], end: Mapping[Key, int]) -> None:
    """The lake can never be ahead of the live log (that would mean another store or a rolled-back store)."""
    ahead = {(k if k[0] is not None else k[1]): (s, end[k]) for k, s in starts.items() if s > end[k]}
    if ahead:
        if live.is_partitioned:  # a partition re-created since its end was read: the round plans again
            listed = {p.name for p in live.list_partitions()}
            if any(k[0] not in listed for k in ahead):  # type: ignore[index]
                raise _Conflict()
        raise LakeTableMismatchError(f"the lake of {live.path} has tiered offsets beyond the live log end "
                                     f"(bucket: (lake, live) {ahead}); was the live store replaced? Drop the lake "
                                     "table (Lake.drop) and tier again")


def _since(log: pl.DataFrame, starts: Mapping[Key, int]) -> pl.DataFrame:
    """Rows at or after each (partition, bucket)'s start offset."""
    if not log.height:
        return log
    keys = pl.DataFrame({PARTITION: [k[0] for k in starts], "_bucket": [k[1] for k in starts],
                         "__start": list(starts.values())},
                        schema={PARTITION: pl.String, "_bucket": log.schema["_bucket"], "__start": pl.Int64})
    return log.join(keys, on=[PARTITION, "_bucket"], how="left", nulls_equal=True, maintain_order="left") \
        .filter(pl.col("_offset") >= pl.col("__start").fill_null(0)).drop("__start")


def _commit(table: IcebergTable, write: Callable[[Any, dict[str, str]], None], new: LakeSnapshot) -> int | None:
    """Run `write` in one transaction with the new offsets in the snapshot summary; a lost race is a _Conflict."""
    from pyiceberg.exceptions import CommitFailedException

    try:
        with table.transaction() as tx:
            write(tx, new.summary_properties())
    except CommitFailedException:
        table.refresh()
        raise _Conflict() from None
    current = table.current_snapshot()
    return current.snapshot_id if current is not None else None


def _bootstrap_rows(now: LiveOffsets, keys: set[Key]) -> tuple[pl.DataFrame | None, dict[Key, int]]:
    """Current rows of buckets whose log expired before tiering, from the live state, with the state's offset."""
    if not keys:
        return None, {}
    frames, offsets = [], {}
    for name, b in sorted(keys, key=lambda k: (k[0] or "", k[1])):
        tablet = now.handles[name].kv_tablet(b)
        with tablet.lock:
            tablet.catch_up()
            rows = tablet.kv.scan()
            offsets[(name, b)] = tablet.applied
        frames.append(rows.with_columns(pl.lit(b, pl.Int32).alias(BUCKET), pl.lit(-1, pl.Int64).alias(OFFSET),
                                        pl.lit(-1, pl.Int64).cast(pl.Datetime("ms", "UTC")).alias(TIMESTAMP)))
    return pl.concat(frames, how="vertical_relaxed"), offsets


def _merge_commit(live: Table, lake: Lake, main: IcebergTable, log: pl.DataFrame, base: pl.DataFrame | None,
                  rebuilt: set[Key], new: LakeSnapshot) -> dict[str, int | None]:
    """Apply the folded changes merge-on-read: position deletes for the old rows of changed or deleted keys, the
    new after-images as new data files, all in ONE snapshot with the new offsets (buckets rebuilt from the
    live state replace their files wholesale)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    from tiering.deletes import RowDelta, write_position_deletes

    pk = list(live.schema.primary_key)
    target = lake_arrow_schema(live.schema, "primary-key")
    upserts, touched = fold_changes(log, pk) if log.height else (log, log.select(pk))
    upserts = to_lake_rows(upserts, target) if upserts.height else target.empty_table()
    touched = _as_lake_types(touched, target, pk)
    touched_keys: set[Key] = set(log.select(PARTITION, "_bucket").unique().iter_rows()) if log.height else set()
    tasks = _partition_tasks(live, main, touched_keys | rebuilt)
    dropped = [t for t, key in tasks if key in rebuilt]  # replaced wholesale by the live state
    candidates = [t for t, key in tasks if key not in rebuilt]
    hits = state_index(lake).live_positions(main, candidates, touched, pk)
    removed = {f.file_path: f for t in dropped for f in (t.file, *t.delete_files)}
    parts = [conform(base, target)] if base is not None and base.height else []
    parts = [t for t in (*parts, upserts) if t.num_rows]
    rows = pa.concat_tables(parts).cast(target) if parts else target.empty_table()
    files = {t.file.file_path: t.file for t in candidates}
    per_partition: dict[Any, list[pa.Table]] = {}
    for (path,), positions in hits.partition_by("file_path", as_dict=True).items() if hits.height else ():
        per_partition.setdefault(files[path].partition, []).append(positions.to_arrow())  # type: ignore[index]
    deletes = [(partition, _folder(frames[0]["file_path"][0].as_py()), pa.concat_tables(frames))
               for partition, frames in per_partition.items()]
    written: list[Any] = []

    def write(tx: Any, props: dict[str, str]) -> None:
        with RowDelta(tx, main.io, snapshot_properties=props) as delta:
            for data_file in removed.values():
                delta.delete_data_file(data_file)
            if rows.num_rows:
                for data_file in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=main.io,
                                                          write_uuid=delta.commit_uuid):
                    delta.append_data_file(data_file)
            written[:] = write_position_deletes(main.io, tx.table_metadata.default_spec_id, deletes)
            for delete_file in written:
                delta.add_delete_file(delete_file)

    snapshot_id = _commit(main, write, new)
    return {"snapshot_id": snapshot_id, "files_rewritten": len(dropped), "position_deletes": hits.height,
            "delete_files": len(written)}


def _folder(path: str) -> str:
    """The folder of a data file (its partition's folder): delete files go beside the data they delete from."""
    return path.rsplit("/", 1)[0]


def _as_lake_types(keys: pl.DataFrame, target: pa.Schema, pk: list[str]) -> pl.DataFrame:
    """Key columns cast to the lake's types (TINYINT keys are int in Iceberg), so joins with lake rows line up."""
    frame = pl.from_arrow(keys.to_arrow().cast(pa.schema([target.field(k).with_nullable(True) for k in pk])))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _partition_tasks(live: Table, main: IcebergTable, keys: set[Key]) -> list[tuple[Any, Key]]:
    """Scan tasks (data file + its delete files) of the given (partition, bucket)s, from the manifests alone."""
    from pyiceberg.expressions import In

    if main.current_snapshot() is None or not keys:
        return []
    scan = main.scan(row_filter=In(BUCKET, sorted({b for _, b in keys})))
    found = []
    for task in scan.plan_files():  # manifests give each file's partition: keep the touched partitions' files
        key = file_key(main, task.file, live.schema, live.partition_keys)
        if key in keys:
            found.append((task, key))
    return found


def _is_unavailable(exc: BaseException) -> bool:
    """Whether an exception from pyiceberg / pyarrow / s3fs / botocore means the lake storage did not answer."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name, module = type(exc).__name__, type(exc).__module__
        text = str(exc)
        if isinstance(exc, (ConnectionError, TimeoutError)) or "Timeout" in name or "ConnectTimeout" in name:
            return True
        if module.startswith(("botocore", "aiobotocore", "aiohttp", "urllib3")) and (
                "Connect" in name or "Timeout" in name or "Endpoint" in name):
            return True
        if isinstance(exc, OSError) and any(s in text for s in ("NETWORK_CONNECTION", "Could not connect", "timed out",
                                                                 "Connection refused", "Connection reset", "curlCode")):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False
