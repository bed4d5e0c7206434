"""Aggregation push-down: a streaming group-by that keeps no totals.

Each step groups the new changelog records of the source by key and writes one partial aggregate per group
into a primary-key table with the ``aggregation`` merge engine; the table adds it to the stored total (sum,
max, min, last value, ...). The job itself keeps only offsets. Replays are exactly once: each step is announced
in the checkpoint before it writes and its partial rows carry a writer id derived from the job and the step,
so a step repeated after a crash finds its batches already committed and skips them (see ``_exactly_once``).

Sources: log tables, or primary-key tables when every function can be retracted (``count`` and ``sum``:
``-U``/``-D`` records count negatively).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.jobs._exactly_once import (
    begin_step,
    finish_step,
    pending_step,
    step_ranges,
    write_once,
)
from fluss_lake.jobs.job import Job, JobReport, StartFrom, default_job_name
from fluss_lake.jobs.shard import Shard
from fluss_lake.kv.merge import MergeSpec
from fluss_lake.table import Table

__all__ = ["AGG_FUNCTIONS", "Aggregation"]

#: partial function -> the result table's ``fields.<col>.agg`` functions that combine partials correctly
AGG_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "count": ("sum",),
    "sum": ("sum",),
    "max": ("max",),
    "min": ("min",),
    "product": ("product",),
    "last_value": ("last_value", "last_value_ignore_nulls"),
    "first_value": ("first_value", "first_value_ignore_nulls"),
    "bool_and": ("bool_and",),
    "bool_or": ("bool_or",),
}
_RETRACTABLE = {"count", "sum"}


class Aggregation(Job):
    """A zero-state group-by whose totals live in an ``aggregation`` merge-engine table.

    `aggregates` maps result columns to ``(function, source column)``; ``count`` takes ``None`` as column.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import Aggregation
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.clicks", schema={"page": "STRING", "ms": "BIGINT"})
    >>> _ = conn.create_table("d.per_page", schema={"page": "STRING", "n": "BIGINT", "total_ms": "BIGINT"},
    ...                       primary_key=["page"], options={"table.merge-engine": "aggregation",
    ...                       "fields.n.agg": "sum", "fields.total_ms.agg": "sum"})
    >>> clicks = conn.get_table("d.clicks")
    >>> job = Aggregation(clicks, conn.get_table("d.per_page"), group_by=["page"],
    ...                   aggregates={"n": ("count", None), "total_ms": ("sum", "ms")})
    >>> _ = clicks.append([{"page": "a", "ms": 5}, {"page": "a", "ms": 7}]); _ = job.run_once()
    >>> _ = clicks.append([{"page": "a", "ms": 1}]); _ = job.run_once()
    >>> conn.get_table("d.per_page").to_polars().to_dicts()
    [{'page': 'a', 'n': 3, 'total_ms': 13}]
    """

    kind = "aggregation"

    def __init__(
        self,
        source: Table,
        result: Table,
        *,
        group_by: Sequence[str] | Mapping[str, str],
        aggregates: Mapping[str, tuple[str, str | None]],
        where: pl.Expr | None = None,
        name: str | None = None,
        batch_rows: int = 1_000_000,
        start: StartFrom = "earliest",
        shard: Shard | None = None,
    ) -> None:
        self.source, self.result, self.where = source, result, where
        self.group_by = dict(group_by) if isinstance(group_by, Mapping) else {c: c for c in group_by}
        self.aggregates = {c: (str(f).lower(), s) for c, (f, s) in aggregates.items()}
        self._validate()
        super().__init__(
            result.connection,
            name or default_job_name(self.kind, result, "aggregation"),
            {"source": source},
            batch_rows=batch_rows,
            start=start,
            shard=shard,
        )

    def _validate(self) -> None:
        result, source = self.result, self.source
        if result.info.options.get(opt.MERGE_ENGINE) != "aggregation":
            raise InvalidConfigError(
                f"result table {result.path} needs table.merge-engine='aggregation' (it stores "
                "the totals; the job only writes partial aggregates)"
            )
        if set(result.schema.primary_key) != set(self.group_by):
            raise InvalidConfigError(
                f"group_by {list(self.group_by)} must be exactly the primary key "
                f"{list(result.schema.primary_key)} of {result.path}"
            )
        specs = MergeSpec.of(result.info).aggregations
        retracting = source.is_primary_key_table and source.info.options.get(opt.MERGE_ENGINE) != "first_row"
        for column, (function, src) in self.aggregates.items():
            if function not in AGG_FUNCTIONS:
                raise InvalidConfigError(
                    f"aggregate {column!r}: unknown function {function!r}; use one of {sorted(AGG_FUNCTIONS)}"
                )
            if column not in specs:
                raise InvalidConfigError(f"aggregate {column!r} is not a value column of {result.path}")
            if specs[column].function not in AGG_FUNCTIONS[function]:
                raise InvalidConfigError(
                    f"aggregate {column!r}: partial {function}s combine with "
                    f"fields.{column}.agg={AGG_FUNCTIONS[function][0]!r}, but {result.path} has "
                    f"{specs[column].function!r}"
                )
            if (src is None) != (function == "count"):
                raise InvalidConfigError(
                    f"aggregate {column!r}: {function} needs "
                    f"{'no source column' if function == 'count' else 'a source column'}"
                )
            if src is not None and src not in source.schema.names:
                raise InvalidConfigError(f"aggregate {column!r}: {source.path} has no column {src!r}")
            if retracting and function not in _RETRACTABLE:
                raise InvalidConfigError(
                    f"aggregate {column!r}: {function} cannot take back the updates and deletes "
                    f"of primary-key table {source.path}; use count/sum, or a log table source"
                )
        if retracting and source.info.options.get(opt.CHANGELOG_IMAGE, "full").lower() == "wal":
            raise InvalidConfigError(
                f"{source.path} has table.changelog.image='wal' (no -U records): its updates cannot be taken back"
            )
        for src in self.group_by.values():
            if src not in source.schema.names:
                raise InvalidConfigError(f"group_by column {src!r} is not in {source.path}")

    def _partials(self, changes: pl.DataFrame) -> pl.DataFrame:
        """One partial aggregate per group of a batch of changelog records."""
        if self.where is not None:
            changes = changes.filter(self.where.fill_null(False))
        sign = pl.when(pl.col("_change_type").is_in(["-U", "-D"])).then(-1).otherwise(1)
        changes = changes.with_columns(sign.alias("__sign")).sort("_commit_timestamp", maintain_order=True)
        exprs = []
        for column, (function, src) in self.aggregates.items():
            value = pl.col(src) if src is not None else pl.lit(None)  # only count has no source column
            if function == "count":
                expr = pl.col("__sign").sum()
            elif function == "sum":
                expr = (value * pl.col("__sign")).sum()
            elif function == "last_value":
                expr = value.last()
            elif function == "first_value":
                expr = value.first()
            elif function == "bool_and":
                expr = value.all()
            elif function == "bool_or":
                expr = value.any()
            else:
                expr = getattr(value, function)()
            exprs.append(expr.alias(column))
        keys = [pl.col(src).alias(out) for out, src in self.group_by.items()]
        return changes.group_by(keys, maintain_order=True).agg(exprs)

    def _step(self) -> JobReport | None:
        step = pending_step(self)
        if step is None:
            ranges = self._ranges("source")
            if not ranges:
                return None
            step = begin_step(self, self.result, {"source": {b: r[1] for b, r in ranges.items()}})
        else:  # a crash left this step announced: redo exactly its range
            ranges = step_ranges(self, step, "source")
        columns = list(
            dict.fromkeys(
                [
                    *self.group_by.values(),
                    *[s for _, s in self.aggregates.values() if s],
                    *(self.where.meta.root_names() if self.where is not None else []),
                ]
            )
        )
        changes = self._read("source", ranges, columns) if ranges else pl.DataFrame()
        written = write_once(self, self.result, step, self._partials(changes) if changes.height else pl.DataFrame())
        finish_step(self, step)
        return JobReport(steps=1, records_read=changes.height, rows_upserted=written)
