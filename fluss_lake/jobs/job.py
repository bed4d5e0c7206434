"""What every job shares: inputs read from checkpointed offsets, a step loop, run once or continuously.

A job consumes the changelogs of its input tables in *steps*. A step reads a bounded range of each input's
log (``batch_rows`` records), writes its results, then commits a checkpoint naming the offsets it consumed.
If the process dies between the write and the checkpoint, the next run repeats the step: every job makes that
repetition harmless (idempotent upserts/deletes, or writer ids recognised as already committed).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from fluss_lake.exceptions import InvalidConfigError, JobStateError
from fluss_lake.jobs.checkpoint import BucketOffsets, Checkpoint, CheckpointStore

if TYPE_CHECKING:
    from fluss_lake.catalog import Connection
    from fluss_lake.table import Table

__all__ = ["Job", "JobReport"]


@dataclass(frozen=True)
class JobReport:
    """What one :meth:`Job.run_once` (or a whole :meth:`Job.run`) did."""

    steps: int = 0
    records_read: int = 0
    rows_upserted: int = 0
    rows_deleted: int = 0
    rows_appended: int = 0
    seconds: float = 0.0
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)

    def combine(self, other: JobReport) -> JobReport:
        return JobReport(self.steps + other.steps, self.records_read + other.records_read,
                         self.rows_upserted + other.rows_upserted, self.rows_deleted + other.rows_deleted,
                         self.rows_appended + other.rows_appended, self.seconds + other.seconds,
                         other.offsets or self.offsets)


class Job:
    """Base of the jobs: checkpointed offsets per input bucket and the run loop (subclasses define a step)."""

    kind = "job"

    def __init__(self, connection: Connection, name: str, inputs: Mapping[str, Table], *,
                 batch_rows: int = 100_000, start: str = "earliest") -> None:
        if batch_rows <= 0:
            raise InvalidConfigError(f"batch_rows={batch_rows}: must be positive")
        if start not in ("earliest", "latest"):
            raise InvalidConfigError(f"start={start!r}: use 'earliest' or 'latest'")
        self.connection = connection
        self.name = name
        self.inputs = dict(inputs)
        self.batch_rows = batch_rows
        self.checkpoints = CheckpointStore(connection, name)
        loaded = self.checkpoints.load()
        if loaded is None:
            offsets = {alias: self._start_offsets(table, start) for alias, table in self.inputs.items()}
            loaded = Checkpoint(-1, uuid.uuid4().hex, offsets, {a: t.info.table_id for a, t in self.inputs.items()})
        else:
            for alias, table in self.inputs.items():
                if loaded.table_ids.get(alias, table.info.table_id) != table.info.table_id:
                    raise JobStateError(f"job {name!r}: input {alias!r} ({table.path}) was re-created since the "
                                        "last checkpoint; its offsets mean nothing now. Call reset() to start over")
                loaded.offsets.setdefault(alias, self._start_offsets(table, start))
        self.checkpoint = loaded
        self._budget: int | None = None  # steps the current run_once may still take

    @staticmethod
    def _start_offsets(table: Table, start: str) -> BucketOffsets:
        ends = table.end_offsets() if start == "latest" else table.earliest_offsets()
        return {(None, b): o for b, o in ends.items()}

    # ------------------------------------------------------------ offsets
    def offsets(self, alias: str) -> dict[int, int]:
        """Next offset to consume per bucket of an input."""
        return {b: o for (_, b), o in self.checkpoint.offsets[alias].items()}

    def lag(self) -> dict[str, int]:
        """Records not yet consumed per input (log end minus checkpoint, summed over buckets)."""
        out = {}
        for alias, table in self.inputs.items():
            ends = table.end_offsets()
            out[alias] = sum(max(ends[b] - o, 0) for b, o in self.offsets(alias).items())
        return out

    def state_bytes(self) -> int:
        """Bytes of operator state this job keeps (a zero-state job: its checkpoint of offsets)."""
        return self.checkpoint.size_bytes()

    def _ranges(self, alias: str, budget: int | None = None,
                ends: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
        """[start, end) per bucket with new records (up to the log ends, or `ends`), at most `budget` records in
        all (whole buckets first)."""
        table = self.inputs[alias]
        ends = table.end_offsets() if ends is None else ends
        budget = self.batch_rows if budget is None else budget
        out = {}
        for bucket, start in sorted(self.offsets(alias).items()):
            end = ends[bucket]
            if end > start and budget > 0:
                take = min(end, start + budget)
                out[bucket] = (start, take)
                budget -= take - start
        return out

    def _read(self, alias: str, ranges: Mapping[int, tuple[int, int]], columns: Sequence[str]) -> pl.DataFrame:
        """Changelog rows of the ranges (system columns + `columns`)."""
        starts = dict(self.offsets(alias))
        ends = dict(starts)
        for bucket, (start, end) in ranges.items():
            starts[bucket], ends[bucket] = start, end
        return self.inputs[alias].scan_log(start_offsets=starts, end_offsets=ends, columns=list(columns))

    def _advance(self, consumed: Mapping[str, Mapping[int, int]], extra: Mapping | None = None) -> None:
        """Move the in-memory checkpoint past consumed offsets (the others keep theirs); :meth:`_save` commits it."""
        old = self.checkpoint
        offsets = {alias: dict(offs) for alias, offs in old.offsets.items()}
        for alias, per_bucket in consumed.items():
            for bucket, offset in per_bucket.items():
                offsets[alias][(None, bucket)] = offset
        self.checkpoint = Checkpoint(old.number, old.job_uid, offsets, old.table_ids,
                                     dict(extra) if extra is not None else old.extra)

    def _save(self) -> None:
        """Commit the in-memory checkpoint as the next one in the store."""
        current = self.checkpoint
        new = Checkpoint(current.number + 1, current.job_uid, current.offsets, current.table_ids, current.extra)
        self.checkpoints.commit(new)
        self.checkpoint = new

    # ------------------------------------------------------------ running
    def _step(self) -> JobReport | None:
        """Process one bounded step and commit its checkpoint; None when nothing new was there."""
        raise NotImplementedError

    def run_once(self, *, max_steps: int | None = None) -> JobReport:
        """Process everything available now (in steps of at most ``batch_rows`` records), then return."""
        started = time.perf_counter()
        report = JobReport()
        while max_steps is None or report.steps < max_steps:
            self._budget = None if max_steps is None else max_steps - report.steps
            step = self._step()
            if step is None:
                break
            report = report.combine(step)
        return JobReport(report.steps, report.records_read, report.rows_upserted, report.rows_deleted,
                         report.rows_appended, time.perf_counter() - started,
                         {a: self.offsets(a) for a in self.inputs})

    def run(self, stop_event: threading.Event, *, poll_interval: float = 0.5) -> JobReport:
        """Run continuously: process what arrives, poll every `poll_interval` seconds, until `stop_event` is set."""
        report = JobReport()
        while not stop_event.is_set():
            step = self.run_once()
            report = report.combine(step)
            if step.steps == 0:
                stop_event.wait(poll_interval)
        return report

    def reset(self) -> None:
        """Forget the checkpoints (the next job object starts from the beginning)."""
        self.checkpoints.reset()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} inputs={list(self.inputs)}>"


def default_job_name(kind: str, target: Table | None, fallback: str) -> str:
    """A job name from its kind and result table (``delta_join-shop-orders_view``)."""
    base = f"{target.path.database}-{target.path.table}" if target is not None else fallback
    return f"{kind}-{base}"
