"""Exactly-once output into sinks where a repeated write would count twice (log tables, aggregation tables).

A step is announced before it writes: a checkpoint records the input range it consumes (``until``) and the
sink's log ends (``marks``). Its output is written with a writer id derived from the job and the step
(``<job uid>-<step>``). A replay after a crash re-reads exactly the announced range, so it computes the same
rows; before writing it reads the headers of the sink's batches committed since the marks (headers only, no
rows) and leaves out the buckets that already hold a batch with that writer id. Then a second checkpoint
moves the offsets past the range. The cost of a restart is the headers written since the announcement.

A job may finish a step without committing (``finish_step(..., commit=False)``): the offsets move in memory and
the next commit carries them, which is the next step's announcement while records keep coming (one commit per
step instead of two), or the commit :meth:`Job.run_once` makes before it returns when no records are waiting. So
only while records are waiting (a lag anyway) can the stored checkpoint still announce a finished step: a
restart then replays it and writes nothing (its batches are found by writer id), and another process's
``status()`` counts its records as lag too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from fluss_lake.exceptions import OffsetOutOfRangeError, PartitionNotExistError
from fluss_lake.jobs.job import Job, partition_names
from fluss_lake.keys.bucketing import buckets_of
from fluss_lake.table import Table

__all__ = ["begin_step", "finish_step", "pending_step", "write_once"]

_PENDING = "pending"


def pending_step(job: Job) -> dict[str, Any] | None:
    """The announced step a crash left unfinished, if any."""
    return job.checkpoint.extra.get(_PENDING)


Key = tuple[str | None, int]


def _encode(offsets: Mapping[Key, int]) -> list[list[Any]]:
    return [[p, b, o] for (p, b), o in offsets.items()]


def _decode(body: Any) -> dict[Key, int]:
    """[[partition, bucket, offset], ...]; also the older {"bucket": offset} form of unpartitioned tables."""
    if isinstance(body, Mapping):
        return {(None, int(b)): int(o) for b, o in body.items()}
    return {(p, int(b)): int(o) for p, b, o in body}


def _sink_parts(sink: Table) -> list[Table]:
    return sink.partition_tables()


def begin_step(job: Job, sink: Table, until: Mapping[str, Mapping[Key, int]]) -> dict[str, Any]:
    """Announce a step: the ranges it consumes and where the sink's logs end now (committed before writing).

    On a partitioned sink the marks are per (partition, bucket), with the partition ids: a partition created
    (or re-created) after the announcement is searched from its start."""
    marks: dict[Key, int] = {}
    ids: dict[str, str] = {}
    for part in _sink_parts(sink):
        try:
            marks.update({(part.partition_name, b): o for b, o in part.end_offsets().items()})
        except PartitionNotExistError:
            continue
        if part.partition_info is not None:
            ids[part.partition_name] = part.partition_info.partition_id  # type: ignore[index]
    step = {
        "step": job.checkpoint.number + 1,
        "until": {a: _encode(offs) for a, offs in until.items()},
        "marks": _encode(marks),
        "mark_ids": ids,
        "input_ids": {a: job.checkpoint.partitions.get(a, {}) for a in until},
    }
    job._advance({}, extra={**job.checkpoint.extra, _PENDING: step})
    job._save()
    return step


def _writer_id(job: Job, step: Mapping[str, Any]) -> str:
    return f"job-{job.checkpoint.job_uid}-{step['step']}"


def _committed_buckets(sink: Table, step: Mapping[str, Any], writer_id: str) -> set[Key]:
    """Sink (partition, bucket)s holding a batch of `writer_id` committed after the marks (reads batch headers
    only)."""
    marks = _decode(step["marks"])
    ids = step.get("mark_ids") or {}
    done: set[Key] = set()
    for part in _sink_parts(sink):
        name = part.partition_name
        same = part.partition_info is None or ids.get(name) == part.partition_info.partition_id
        for bucket in range(part.bucket_num):
            key = (name, bucket)
            start = marks.get(key, 0) if same else 0
            try:
                if any(h.writer_id == writer_id for h in part.batch_headers(bucket, start_offset=start)):
                    done.add(key)
            except (PartitionNotExistError, OffsetOutOfRangeError):
                if part.partition_info is None:
                    raise
                break  # dropped since we listed it: its rows are written again into a new partition of that name
    return done


def _row_keys(sink: Table, rows: pl.DataFrame) -> pl.Series:
    """The (partition, bucket) of every row as a string "<partition>/<bucket>" (work per distinct partition)."""
    buckets = pl.Series("b", buckets_of(sink.info, rows)).cast(pl.String)
    if not sink.is_partitioned:
        return pl.select(pl.lit("/") + buckets).to_series()
    part = partition_names(sink, rows)
    return pl.select(part + "/" + buckets).to_series()


def write_once(job: Job, sink: Table, step: Mapping[str, Any], rows: pl.DataFrame) -> int:
    """Write the step's rows unless (per partition and bucket) a previous attempt of the same step committed
    them."""
    if not rows.height:
        return 0
    writer_id = _writer_id(job, step)
    done = _committed_buckets(sink, step, writer_id)
    if done:
        if sink.is_primary_key_table or sink.info.bucket_keys:
            rows = rows.filter(~_row_keys(sink, rows).is_in([f"{p or ''}/{b}" for p, b in done]))
        elif sink.is_partitioned:  # a key-less log sink got each partition's rows in one bucket
            gone = {p for p, _ in done}
            part = partition_names(sink, rows)
            rows = rows.filter(~part.is_in(sorted(gone)))
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


def finish_step(job: Job, step: Mapping[str, Any], *, commit: bool = True) -> None:
    """Move the offsets past the announced range and clear the announcement; without `commit` only in memory (the
    job's next commit carries it, see the module docstring)."""
    until = {a: _until(job, step, a) for a in step["until"]}
    extra = {k: v for k, v in job.checkpoint.extra.items() if k != _PENDING}
    job._advance(until, extra=extra)
    if commit:
        job._save()
    else:
        job._deferred = True


def step_ranges(job: Job, step: Mapping[str, Any], alias: str) -> dict[Key, tuple[int, int]]:
    """The announced range of one input as [start, end) per (partition, bucket) (partitions dropped since the
    announcement are left out: their rows are gone)."""
    job._log_ends(alias)
    offsets = job.checkpoint.offsets[alias]
    until = _until(job, step, alias)
    return {k: (offsets[k], o) for k, o in until.items() if k in offsets and o > offsets[k]}


def _until(job: Job, step: Mapping[str, Any], alias: str) -> dict[Key, int]:
    """The announced end offsets of one input, without partitions dropped (or re-created) since."""
    until = _decode(step["until"].get(alias, []))
    then = (step.get("input_ids") or {}).get(alias, {})
    now = job.checkpoint.partitions.get(alias, {})
    return {k: o for k, o in until.items() if k[0] is None or then.get(k[0]) == now.get(k[0])}
