"""What every job shares: inputs read from checkpointed offsets, a step loop, run once or continuously.

A job consumes the changelogs of its input tables in *steps*. A step reads a bounded range of each input's
log (``batch_rows`` records), writes its results, then commits a checkpoint naming the offsets it consumed.
If the process dies between the write and the checkpoint, the next run repeats the step: every job makes that
repetition harmless (idempotent upserts/deletes, or writer ids recognised as already committed).

Partitioned inputs are read per (partition, bucket): each step lists the partitions, reads partitions the
checkpoint does not know (new, or re-created under a known name) from their start and forgets the offsets of
dropped ones (their results stay: a drop writes no delete records, as in Fluss).

Shards (``shard=Shard(index, count)``, :mod:`fluss_lake.jobs.shard`): a job split into `count` parts, each
reading only the (partition, bucket) pairs it owns and keeping its own checkpoint under
``.jobs/<name>/shards-<count>/<index>``; changing the count reassigns the buckets from the checkpoints
(:mod:`fluss_lake.jobs._layout`, ``docs/SHARDS.md``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.catalog import data_prefix
from fluss_lake.connection import Connection
from fluss_lake.exceptions import (
    CorruptedDataError,
    InvalidConfigError,
    JobStateError,
    OffsetOutOfRangeError,
    PartitionNotExistError,
)
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted
from fluss_lake.jobs._layout import fenced, open_checkpoint
from fluss_lake.jobs.checkpoint import BucketOffsets, Checkpoint, CheckpointStore
from fluss_lake.jobs.shard import Shard
from fluss_lake.log.log_tablet import batch_key
from fluss_lake.metadata.partition import partition_names as metadata_partition_names
from fluss_lake.metadata.table_path import check_name
from fluss_lake.table import Table

__all__ = ["Job", "JobReport", "JobStatus", "StartFrom"]

#: Where a job starts reading an input its checkpoint does not know: the log start, or its end now.
StartFrom = Literal["earliest", "latest"]


@dataclass(frozen=True)
class JobReport:
    """What one :meth:`Job.run_once` (or a whole :meth:`Job.run`) did."""

    steps: int = 0
    records_read: int = 0
    rows_upserted: int = 0
    rows_deleted: int = 0
    rows_appended: int = 0
    seconds: float = 0.0
    offsets: dict[str, dict] = field(default_factory=dict)

    def combine(self, other: JobReport) -> JobReport:
        return JobReport(
            self.steps + other.steps,
            self.records_read + other.records_read,
            self.rows_upserted + other.rows_upserted,
            self.rows_deleted + other.rows_deleted,
            self.rows_appended + other.rows_appended,
            self.seconds + other.seconds,
            other.offsets or self.offsets,
        )


@dataclass(frozen=True)
class JobStatus:
    """Where a job (or one shard of it) stands, from :meth:`Job.status`.

    `offsets`: the next offset to consume per input and ``(partition name or None, bucket)`` the job owns;
    `lag`: records per input between those and the log ends; `checkpoint`: the number of its newest checkpoint;
    `records_read` and `rows_per_second`: of its last run that did something (None before any)."""

    name: str
    shard: Shard | None
    offsets: dict[str, dict[tuple[str | None, int], int]]
    lag: dict[str, int]
    checkpoint: int
    records_read: int = 0
    rows_per_second: float | None = None


class Job:
    """Base of the jobs: checkpointed offsets per input (partition and) bucket and the run loop (subclasses define
    a step)."""

    kind = "job"

    def __init__(
        self,
        connection: Connection,
        name: str,
        inputs: Mapping[str, Table],
        *,
        batch_rows: int = 100_000,
        start: StartFrom = "earliest",
        shard: Shard | None = None,
    ) -> None:
        batch_rows = check_int("batch_rows", batch_rows, minimum=1, hint="changelog records per input and step")
        if start not in ("earliest", "latest"):
            raise InvalidConfigError(f"start={start!r}: use 'earliest' or 'latest'")
        if shard is not None and not isinstance(shard, Shard):
            raise InvalidConfigError(
                f"shard={shard!r}: pass a fluss_lake.jobs.Shard(index, count) (or None for all buckets)"
            )
        #: the (partition, bucket) pairs this job reads (None: all; ``Shard(0, 1)`` is the same as None)
        self.shard = shard if shard is not None and shard.count > 1 else None
        self.connection = connection
        self.name = name
        self.inputs = dict(inputs)
        self.batch_rows = batch_rows
        self.checkpoints = CheckpointStore(connection, name, self.shard)
        self._handles: dict[str, dict[str, Table]] = {}  # alias -> partition name -> handle (partitioned inputs)
        self.forgotten_partitions: dict[str, list[str]] = {}  # alias -> partitions dropped since the job saw them
        self._last_run: JobReport | None = None
        self._constructed = False
        #: a finished step moved the in-memory checkpoint without committing it: the next commit carries it (the
        #: next step's announcement, or the commit run_once makes when no records are waiting)
        self._deferred = False
        check_name("job", name)
        loaded, derived = open_checkpoint(connection, name, self.shard, self.inputs)
        if loaded is None:
            loaded = Checkpoint(-1, uuid.uuid4().hex, {}, {a: t.info.table_id for a, t in self.inputs.items()})
        for alias, table in self.inputs.items():
            if loaded.table_ids.get(alias, table.info.table_id) != table.info.table_id:
                raise JobStateError(
                    f"job {name!r}: input {alias!r} ({table.path}) was re-created since the "
                    "last checkpoint; its offsets mean nothing now. Call reset() to start over"
                )
        self.checkpoint = loaded
        for alias in self.inputs:
            if alias not in loaded.offsets:
                self._begin_input(alias, start)
        if derived or (self.shard is not None and self.checkpoint.number < 0):
            # a shard's checkpoint exists from its start: the other shards read its offsets, and a new layout
            # is complete once each of its shards committed one
            self._save()
        self._constructed = True
        self._budget: int | None = None  # steps the current run_once may still take

    def _begin_input(self, alias: str, start: StartFrom) -> None:
        """Offsets of an input the checkpoint does not know yet: its log ends ('latest') or starts ('earliest')."""
        table = self.inputs[alias]
        offsets: BucketOffsets = {}
        ids: dict[str, str] = {}
        for part in self._partitions_of(alias).values() if table.is_partitioned else [table]:
            try:
                ends = part.end_offsets() if start == "latest" else part.earliest_offsets()
            except PartitionNotExistError:  # dropped meanwhile
                continue
            offsets.update({(part.partition_name, b): o for b, o in ends.items() if self._owns(part.partition_name, b)})
            if part.partition_info is not None:
                ids[part.partition_name] = part.partition_info.partition_id  # type: ignore[index]
        old = self.checkpoint
        partitions = {**old.partitions, alias: ids} if table.is_partitioned else old.partitions
        self.checkpoint = dataclasses.replace(old, offsets={**old.offsets, alias: offsets}, partitions=partitions)

    def _owns(self, partition: str | None, bucket: int) -> bool:
        """Whether this job (shard) reads `bucket` of `partition`."""
        return self.shard is None or self.shard.owns(partition, bucket)

    # ------------------------------------------------------------ partitions
    def _partitions_of(self, alias: str) -> dict[str, Table]:
        """Handles of the input's partitions that exist now (one listing), remembered for reads."""
        handles = {t.partition_name: t for t in self.inputs[alias].partition_tables()}
        self._handles[alias] = handles  # type: ignore[assignment]
        return handles  # type: ignore[return-value]

    def _log_ends(self, alias: str) -> dict[tuple[str | None, int], int]:
        """Log end per (partition, bucket) of an input, after bringing its partitions up to date.

        Partitions created since the checkpoint (or dropped and created again: a new id) join at their earliest
        offset; the offsets of dropped partitions are forgotten (their names go to ``forgotten_partitions``).
        Results already derived from a dropped partition's rows stay: dropping writes no delete records."""
        table = self.inputs[alias]
        if not table.is_partitioned:
            return {(None, b): o for b, o in table.end_offsets().items()}
        owns = self._owns
        old = self.checkpoint
        known = old.partitions.get(alias, {})
        offsets = dict(old.offsets[alias])
        ids = dict(known)
        ends: dict[tuple[str | None, int], int] = {}
        handles = self._partitions_of(alias)
        for name, part in handles.items():
            pid = part.partition_info.partition_id  # type: ignore[union-attr]
            try:
                part_ends = part.end_offsets()
                if known.get(name) != pid:  # new (or re-created): from its start
                    if name in known:
                        self._forget(alias, [name])
                    offsets = {k: o for k, o in offsets.items() if k[0] != name}
                    offsets.update({(name, b): o for b, o in part.earliest_offsets().items() if owns(name, b)})
                    ids[name] = pid
                elif any(owns(name, b) and (name, b) not in offsets for b in part_ends):
                    # known to another shard of an older layout, but not to the one that owned these buckets
                    # then (it never saw the partition): they start at their beginning
                    earliest = part.earliest_offsets()
                    offsets.update(
                        {(name, b): earliest[b] for b in part_ends if owns(name, b) and (name, b) not in offsets}
                    )
            except PartitionNotExistError:
                continue
            ends.update({(name, b): o for b, o in part_ends.items()})
        gone = [n for n in known if n not in handles]
        if gone:
            self._forget(alias, gone)
            offsets = {k: o for k, o in offsets.items() if k[0] not in gone}
            ids = {n: i for n, i in ids.items() if n not in gone}
        offsets = {k: o for k, o in offsets.items() if k in ends}  # dropped while we listed
        if offsets != old.offsets[alias] or ids != known:
            self.checkpoint = dataclasses.replace(
                old, offsets={**old.offsets, alias: offsets}, partitions={**old.partitions, alias: ids}
            )
        return ends

    def _forget(self, alias: str, names: Sequence[str]) -> None:
        """Partitions of an input that were dropped (or re-created) since the checkpoint; a job keeping rows of
        its inputs overrides this to drop theirs."""
        self.forgotten_partitions.setdefault(alias, []).extend(names)

    # ------------------------------------------------------------ offsets
    def offsets(self, alias: str) -> dict:
        """Next offset to consume per bucket of an input; keys are ``(partition name, bucket)`` on a partitioned
        input (as :meth:`Table.end_offsets`), bucket numbers otherwise."""
        offs = self.checkpoint.offsets[alias]
        if self.inputs[alias].is_partitioned:
            return dict(offs)
        return {b: o for (_, b), o in offs.items()}

    def lag(self) -> dict[str, int]:
        """Records not yet consumed per input (log end minus checkpoint, summed over buckets and partitions; a
        partition the job has not seen yet counts from its start)."""
        out = {}
        for alias in self.inputs:
            ends = self._log_ends(alias)
            offs = self.checkpoint.offsets[alias]
            out[alias] = sum(max(e - offs.get(k, 0), 0) for k, e in ends.items() if self._owns(*k))
        return out

    def state_bytes(self) -> int:
        """Bytes of operator state this job keeps (a zero-state job: its checkpoint of offsets)."""
        return self.checkpoint.size_bytes()

    def _ranges(
        self, alias: str, budget: int | None = None, ends: Mapping[tuple[str | None, int], int] | None = None
    ) -> dict[tuple[str | None, int], tuple[int, int]]:
        """[start, end) per (partition, bucket) with new records (up to the log ends, or `ends`), at most `budget`
        records in all (whole buckets first)."""
        ends = self._log_ends(alias) if ends is None else ends
        budget = self.batch_rows if budget is None else budget
        out = {}
        offs = self.checkpoint.offsets[alias]
        for key in sorted(offs, key=lambda k: (k[0] or "", k[1])):
            start, end = offs[key], ends.get(key)
            if end is not None and end < start:
                raise self._behind(alias, key, start, end)
            if end is not None and end > start and budget > 0:
                take = min(end, start + budget)
                out[key] = (start, take)
                budget -= take - start
        return out

    def _behind(self, alias: str, key: tuple[str | None, int], consumed: int, end: int) -> CorruptedDataError:
        """The error for an input bucket whose log ends before the offset this job consumed up to: its newest
        batches are gone (a log never shrinks at its end), and the offsets would be handed out again to new writes
        the job would skip."""
        table = self.inputs[alias]
        part = table if key[0] is None else self._handle(alias, key[0])
        data = data_prefix(part.info if part is not None else table.info, part.partition_info if part else None)
        return corrupted(
            batch_key(layout.log_prefix(data, key[1]), end),
            f"job {self.name!r} consumed input {alias!r} ({table.path}) up to offset {consumed}, but the log of this "
            f"bucket ends at {end}: its batches from {end} on are missing (deleted or lost)",
            what="log batch",
            offsets=(end, consumed),
            remedy="restore them from a backup (or from the lake: `fluss-lake check --repair`); reset() the job only "
            "once the input is known to be right",
        )

    def _read(
        self,
        alias: str,
        ranges: Mapping[tuple[str | None, int], tuple[int, int]],
        columns: Sequence[str],
        change_types: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """Changelog rows of the ranges (system columns + `columns`; no ``_partition`` column: partition values
        are columns of the rows), only of `change_types` if given."""
        table = self.inputs[alias]
        by_part: dict[str | None, dict[int, tuple[int, int]]] = {}
        for (name, bucket), span in ranges.items():
            by_part.setdefault(name, {})[bucket] = span
        frames = []
        for name, spans in by_part.items():
            part = table if name is None else self._handle(alias, name)
            if part is None:
                continue
            offs = self.checkpoint.offsets[alias]
            starts, ends = {}, {}
            latest: dict[int, int] | None = None
            for b in range(part.bucket_num):
                if b in spans:
                    starts[b], ends[b] = spans[b]
                else:  # read nothing of this bucket
                    at = offs.get((name, b))
                    if at is None:
                        latest = part.end_offsets() if latest is None else latest
                        at = latest[b]
                    starts[b] = ends[b] = at
            try:
                frames.append(
                    part.scan_log(
                        start_offsets=starts, end_offsets=ends, columns=list(columns), change_types=change_types
                    )
                )
            except (PartitionNotExistError, OffsetOutOfRangeError):
                if name is None or self._partition_alive(alias, part):
                    raise
                continue  # dropped since we listed it: its rows are gone (as in Fluss); forgotten on the next sync
        if frames:
            return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
        if table.is_partitioned:
            return table.scan_log(end_offsets={}, columns=list(columns)).drop("_partition")
        ends_now = table.end_offsets()
        return table.scan_log(start_offsets=ends_now, end_offsets=ends_now, columns=list(columns))

    def _partition_alive(self, alias: str, part: Table) -> bool:
        """Whether the partition of this handle still exists (not dropped, not re-created under its name)."""
        try:
            now = self.connection.get_partition(self.inputs[alias].path, part.partition_name)  # type: ignore[arg-type]
        except PartitionNotExistError:
            return False
        return now.partition_id == part.partition_info.partition_id  # type: ignore[union-attr]

    def _handle(self, alias: str, name: str) -> Table | None:
        handles = self._handles.get(alias)
        if handles is None or name not in handles:
            handles = self._partitions_of(alias)
        return handles.get(name)

    def _advance(
        self, consumed: Mapping[str, Mapping[tuple[str | None, int], int]], extra: Mapping | None = None
    ) -> None:
        """Move the in-memory checkpoint past consumed offsets (the others keep theirs); :meth:`_save` commits it."""
        old = self.checkpoint
        offsets = {alias: dict(offs) for alias, offs in old.offsets.items()}
        for alias, per_bucket in consumed.items():
            for key, offset in per_bucket.items():
                if key in offsets[alias]:  # not a partition forgotten meanwhile
                    offsets[alias][key] = offset
        self.checkpoint = dataclasses.replace(
            old, offsets=offsets, extra=dict(extra) if extra is not None else old.extra
        )

    def _save(self) -> None:
        """Commit the in-memory checkpoint as the next one in the store (refused once the job was reassigned to
        another shard count: this instance's offsets were taken over)."""
        current = self.checkpoint
        generation = int(current.layout.get("generation", 0))
        if fenced(self.connection, self.name, generation):
            raise JobStateError(
                f"job {self.name!r} was reassigned to another shard count while {self._who()} ran; "
                "this instance stops here (run the shards of the new count)"
            )
        new = dataclasses.replace(current, number=current.number + 1)
        if "fresh" in new.layout and self._constructed:  # a step ran: no longer a job that never ran
            new = dataclasses.replace(new, layout={k: v for k, v in new.layout.items() if k != "fresh"})
        self.checkpoints.commit(new)
        self.checkpoint = new
        self._deferred = False

    def _commit_deferred(self) -> None:
        """Commit the in-memory checkpoint if a finished step left it uncommitted."""
        if self._deferred:
            self._save()

    # ------------------------------------------------------------ running
    def _step(self) -> JobReport | None:
        """Process one bounded step and commit its checkpoint; None when nothing new was there."""
        raise NotImplementedError

    def run_once(self, *, max_steps: int | None = None) -> JobReport:
        """Process everything available now (in steps of at most ``batch_rows`` records), then return."""
        max_steps = check_int("max_steps", max_steps, minimum=0, optional=True)
        started = time.perf_counter()
        report = JobReport()
        while max_steps is None or report.steps < max_steps:
            self._budget = None if max_steps is None else max_steps - report.steps
            step = self._step()
            if step is None:
                self._commit_deferred()  # caught up: the last step's checkpoint is committed before returning
                break
            report = report.combine(step)
        if self._deferred and not any(self.lag().values()):
            self._commit_deferred()  # nothing is waiting: no next announcement would carry it soon
        done = JobReport(
            report.steps,
            report.records_read,
            report.rows_upserted,
            report.rows_deleted,
            report.rows_appended,
            time.perf_counter() - started,
            {a: self.offsets(a) for a in self.inputs},
        )
        if done.steps:
            self._last_run = done
        return done

    @property
    def never_ran(self) -> bool:
        """Whether this job (shard) has consumed nothing yet: no checkpoint, or only the one a shard commits when it
        is first constructed (``checkpoint.number < 0`` alone does not tell that for a shard)."""
        return self.checkpoint.number < 0 or (self.checkpoint.number == 0 and "fresh" in self.checkpoint.layout)

    def _who(self) -> str:
        return "the job" if self.shard is None else f"shard {self.shard}"

    def status(self) -> JobStatus:
        """Where this job (shard) stands: its offsets, the records it has not consumed yet, its last run's speed.

        Reads the log ends of its inputs (one listing per partitioned input), nothing else.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> from fluss_lake.jobs import Aggregation, Shard
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.ev", schema={"k": "INT", "v": "BIGINT"}, bucket_num=2, bucket_keys=["k"])
        >>> _ = conn.create_table("d.tot", schema={"k": "INT", "v": "BIGINT"}, primary_key=["k"],
        ...                       options={"table.merge-engine": "aggregation", "fields.v.agg": "sum"})
        >>> job = Aggregation(conn.get_table("d.ev"), conn.get_table("d.tot"), group_by=["k"],
        ...                   aggregates={"v": ("sum", "v")}, shard=Shard(0, 2))
        >>> _ = conn.get_table("d.ev").append([{"k": k, "v": 1} for k in range(8)])
        >>> before = job.status().lag["source"]; _ = job.run_once(); after = job.status().lag["source"]
        >>> before > 0, after
        (True, 0)
        """
        lag = self.lag()
        last = self._last_run
        return JobStatus(
            name=self.name,
            shard=self.shard,
            offsets={a: dict(self.checkpoint.offsets[a]) for a in self.inputs},
            lag=lag,
            checkpoint=self.checkpoint.number,
            records_read=last.records_read if last is not None else 0,
            rows_per_second=(last.records_read / last.seconds) if last is not None and last.seconds > 0 else None,
        )

    def run(self, stop_event: threading.Event, *, poll_interval: float = 0.5) -> JobReport:
        """Run continuously: process what arrives, poll every `poll_interval` seconds, until `stop_event` is set."""
        poll_interval = check_seconds("poll_interval", poll_interval)
        if not (callable(getattr(stop_event, "is_set", None)) and callable(getattr(stop_event, "wait", None))):
            raise InvalidConfigError(f"stop_event={stop_event!r}: pass a threading.Event (set it to stop the job)")
        report = JobReport()
        while not stop_event.is_set():
            step = self.run_once()
            report = report.combine(step)
            if step.steps == 0:
                stop_event.wait(poll_interval)
        self._commit_deferred()
        return report

    def reset(self) -> None:
        """Forget the checkpoints of the whole job, every shard's too (the next job objects start from the
        beginning)."""
        CheckpointStore(self.connection, self.name).reset()

    def __repr__(self) -> str:
        name = getattr(self, "name", None)  # a LookupJoin without a source is no job: no name, no inputs
        return f"<{type(self).__name__} {name!r} inputs={list(getattr(self, 'inputs', {}))}>"


def partition_names(table: Table, frame: pl.DataFrame) -> pl.Series:
    """The partition name of every row of `frame` (which holds the table's partition columns)."""
    return metadata_partition_names(frame, table.partition_keys, table.schema.polars_schema)


def default_job_name(kind: str, target: Table | None, fallback: str) -> str:
    """A job name from its kind and result table (``delta_join-shop-orders_view``)."""
    base = f"{target.path.database}-{target.path.table}" if target is not None else fallback
    return f"{kind}-{base}"
