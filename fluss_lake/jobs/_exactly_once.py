"""Exactly-once output into sinks where a repeated write would count twice (log tables, aggregation tables).

A step is announced before it writes: a checkpoint records the input range it consumes (``until``) and the
sink's log ends (``marks``). Its output is written with a writer id derived from the job and the step
(``<job uid>-<step>``). A replay after a crash re-reads exactly the announced range, so it computes the same
rows; before writing it reads the headers of the sink's batches committed since the marks (headers only, no
rows) and leaves out the buckets that already hold a batch with that writer id. Then a second checkpoint
moves the offsets past the range. The cost of a restart is the headers written since the announcement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from fluss_lake.jobs.job import Job
    from fluss_lake.log.log_batch import BatchHeader
    from fluss_lake.table import Table

__all__ = ["begin_step", "finish_step", "pending_step", "write_once"]

_PENDING = "pending"


def pending_step(job: Job) -> dict[str, Any] | None:
    """The announced step a crash left unfinished, if any."""
    return job.checkpoint.extra.get(_PENDING)


def begin_step(job: Job, sink: Table, until: Mapping[str, Mapping[int, int]]) -> dict[str, Any]:
    """Announce a step: the ranges it consumes and where the sink's logs end now (committed before writing)."""
    step = {"step": job.checkpoint.number + 1,
            "until": {a: {str(b): o for b, o in offs.items()} for a, offs in until.items()},
            "marks": {str(b): o for b, o in sink.end_offsets().items()}}
    job._advance({}, extra={**job.checkpoint.extra, _PENDING: step})
    job._save()
    return step


def _writer_id(job: Job, step: Mapping[str, Any]) -> str:
    return f"job-{job.checkpoint.job_uid}-{step['step']}"


def _committed_buckets(sink: Table, marks: Mapping[str, int], writer_id: str) -> set[int]:
    """Sink buckets holding a batch of `writer_id` committed after the marks (reads batch headers only)."""
    done: set[int] = set()
    for bucket in range(sink.bucket_num):
        tablet = sink.log_tablet(bucket)
        start = int(marks.get(str(bucket), 0))
        if tablet.refresh() <= start:
            continue

        def seen(header: BatchHeader, bucket: int = bucket) -> bool:
            if header.writer_id == writer_id:
                done.add(bucket)
            return False  # never decode the rows

        for _ in tablet.read(start, header_filter=seen):
            pass
    return done


def write_once(job: Job, sink: Table, step: Mapping[str, Any], rows: pl.DataFrame) -> int:
    """Write the step's rows unless (per bucket) a previous attempt of the same step committed them."""
    if not rows.height:
        return 0
    writer_id = _writer_id(job, step)
    done = _committed_buckets(sink, step["marks"], writer_id)
    if done:
        if sink.is_primary_key_table or sink.info.bucket_keys:
            buckets = pl.Series(sink.buckets_of(rows))
            rows = rows.filter(~buckets.is_in(sorted(done)))
        else:
            rows = rows.clear()  # a key-less log sink got the whole batch in one bucket
    if not rows.height:
        return 0
    writer = sink.new_upsert() if sink.is_primary_key_table else sink.new_append()
    writer.writer_id = writer_id  # deterministic: a replay of this step is recognised as already committed
    if sink.is_primary_key_table:
        writer.upsert(rows)  # type: ignore[union-attr]
    else:
        writer.append(rows)  # type: ignore[union-attr]
    writer.flush()
    return rows.height


def finish_step(job: Job, step: Mapping[str, Any]) -> None:
    """Move the offsets past the announced range and clear the announcement."""
    until = {a: {int(b): int(o) for b, o in offs.items()} for a, offs in step["until"].items()}
    extra = {k: v for k, v in job.checkpoint.extra.items() if k != _PENDING}
    job._advance(until, extra=extra)
    job._save()


def step_ranges(job: Job, step: Mapping[str, Any], alias: str) -> dict[int, tuple[int, int]]:
    """The announced range of one input as [start, end) per bucket."""
    until = {int(b): int(o) for b, o in step["until"].get(alias, {}).items()}
    return {b: (job.offsets(alias)[b], o) for b, o in until.items() if o > job.offsets(alias)[b]}
