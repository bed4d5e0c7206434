"""Lookup join: enrich a stream with the current rows of a primary-key table, one batched lookup per batch.

The stream is a log table's changelog (read from checkpointed offsets; results appended exactly once to a log
table, or returned by :meth:`LookupJoin.poll`) or any iterator of frames (:meth:`LookupJoin.stream`). Keys are
looked up by the table's primary key, or by its bucket-key prefix (several rows per stream row). An optional
:class:`LookupCache` (Fluss/Flink's ``lookup.cache = PARTIAL``) keeps recently looked-up rows, missing keys too,
for a bounded number of keys and time. With insert-if-not-exists (the table option ``lookup.insert-if-not-exists``
or the ``insert_if_not_exists`` argument, primary-key lookups only) a key the table lacks is inserted and joined:
Fluss's way to build a dictionary table (string id -> auto-increment integer) while enriching a stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

from fluss_lake import options as opt
from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.jobs._exactly_once import (
    begin_step,
    finish_step,
    pending_step,
    step_ranges,
    write_once,
)
from fluss_lake.jobs.job import Job, JobReport, StartFrom, default_job_name
from fluss_lake.jobs.join_plan import index_columns
from fluss_lake.jobs.shard import Shard
from fluss_lake.table import Table

__all__ = ["LookupCache", "LookupJoin"]

_FOUND, _STAMP = "__found", "__cached_at"


@dataclass(frozen=True)
class LookupCache:
    """A partial cache of looked-up rows (``lookup.partial-cache.*``): at most `max_rows` keys, each for at most
    `expire_after_write` seconds (None: until evicted); `cache_missing_key` also remembers absent keys."""

    max_rows: int = 10_000
    expire_after_write: float | None = None
    cache_missing_key: bool = True

    def __post_init__(self) -> None:
        check_int("LookupCache(max_rows)", self.max_rows, minimum=1, hint="keys the cache holds")
        check_seconds("LookupCache(expire_after_write)", self.expire_after_write, optional=True)


class LookupJoin(Job):
    """Enrich frames (or a log table's records) with a primary-key table's current rows.

    Examples
    --------
    >>> import tempfile, polars as pl, fluss_lake as fl
    >>> from fluss_lake.jobs import LookupCache, LookupJoin
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.users", schema={"uid": "INT", "name": "STRING"}, primary_key=["uid"])
    >>> users = conn.get_table("d.users"); _ = users.upsert([{"uid": 1, "name": "ann"}])
    >>> enrich = LookupJoin(users, on={"user": "uid"}, cache=LookupCache(max_rows=1000))
    >>> enrich.enrich(pl.DataFrame({"user": [1, 2, 1], "page": ["a", "b", "c"]}))["name"].to_list()
    ['ann', None, 'ann']

    A dictionary table: unseen ids are inserted and numbered by the auto-increment column, in order of appearance.

    >>> _ = conn.create_table("d.uid_mapping", schema={"uid": "STRING", "uid_int32": "INT"}, primary_key=["uid"],
    ...                       options={"auto-increment.fields": "uid_int32", "lookup.insert-if-not-exists": True})
    >>> ids = LookupJoin(conn.get_table("d.uid_mapping"), on=["uid"])
    >>> ids.enrich(pl.DataFrame({"uid": ["user_a", "user_b", "user_a", "user_c"]}))["uid_int32"].to_list()
    [1, 2, 1, 3]
    """

    kind = "lookup_join"

    def __init__(
        self,
        table: Table,
        *,
        on: Mapping[str, str] | Sequence[str],
        columns: Sequence[str] | None = None,
        how: Literal["left", "inner"] = "left",
        cache: LookupCache | None = None,
        source: Table | None = None,
        sink: Table | None = None,
        name: str | None = None,
        batch_rows: int = 100_000,
        start: StartFrom = "earliest",
        clock: Callable[[], float] = time.monotonic,
        insert_if_not_exists: bool | None = None,
        shard: Shard | None = None,
    ) -> None:
        if not table.is_primary_key_table:
            raise InvalidConfigError(f"{table.path} is a log table; a lookup join needs a primary-key table")
        batch_rows = check_int("batch_rows", batch_rows, minimum=1, hint="records read per step")
        self.table = table
        self.on = dict(on) if isinstance(on, Mapping) else {c: c for c in on}
        dim_keys = tuple(self.on.values())
        pk, prefix = index_columns(table)
        if set(dim_keys) == set(pk):
            self.mode, self.keys = "pk", pk
        elif prefix and set(dim_keys) == set(prefix):
            self.mode, self.keys = "prefix", prefix
        else:
            raise InvalidConfigError(
                f"lookup join on {list(dim_keys)}: {table.path} can be looked up by its primary key {list(pk)}"
                + (
                    f" or its {'partition keys + ' if table.is_partitioned else ''}bucket-key prefix {list(prefix)}"
                    if prefix
                    else ""
                )
                + (" (a partitioned table's lookups need its partition columns)" if table.is_partitioned else "")
            )
        self.stream_keys = [next(s for s, d in self.on.items() if d == k) for k in self.keys]
        self.columns = [c for c in (columns or table.schema.names) if c not in self.keys]
        unknown = [c for c in self.columns if c not in table.schema.names]
        if unknown:
            raise InvalidConfigError(f"columns {unknown} are not in {table.path}")
        if how not in ("left", "inner"):
            raise InvalidConfigError(f"how={how!r}: use 'left' or 'inner'")
        if cache is not None and self.mode == "prefix":
            raise InvalidConfigError("a LookupCache works with primary-key lookups; prefix lookups are not cached")
        if insert_if_not_exists is None:  # the table's option (Fluss: WITH clause or an OPTIONS hint)
            insert_if_not_exists = table.info.options.get(opt.LOOKUP_INSERT_IF_NOT_EXISTS, "false") == "true"
        if insert_if_not_exists and self.mode == "prefix":
            raise InvalidConfigError(
                f"insert-if-not-exists works with primary-key lookups only; join {table.path} on its primary key "
                f"{list(pk)}, or set {opt.LOOKUP_INSERT_IF_NOT_EXISTS}=false (insert_if_not_exists=False)"
            )
        self.insert_if_not_exists = bool(insert_if_not_exists)
        # made now, so a table whose rows cannot be inserted from a key alone is refused here
        self._lookuper = table.new_lookup(insert_if_not_exists=self.insert_if_not_exists) if self.mode == "pk" else None
        if shard is not None and source is None:
            raise InvalidConfigError("shard= splits a job reading a source log table; this LookupJoin has no source")
        if sink is not None and source is None:
            raise InvalidConfigError("a sink needs a source log table to read from")
        if sink is not None and sink.is_primary_key_table:
            raise InvalidConfigError(f"sink {sink.path} must be a log table (enriched records are appended)")
        if source is not None and source.is_primary_key_table:
            raise InvalidConfigError(f"source {source.path} must be a log table (a stream of events)")
        self.how, self.cache, self.source, self.sink, self.clock = how, cache, source, sink, clock
        self._cached: pl.DataFrame | None = None
        self.hits = self.misses = 0
        if source is not None:
            super().__init__(
                table.connection,
                name or default_job_name(self.kind, sink or source, "lookup"),
                {"source": source},
                batch_rows=batch_rows,
                start=start,
                shard=shard,
            )

    # ------------------------------------------------------------ enrichment
    def _lookup(self, keys: pl.DataFrame) -> pl.DataFrame:
        """Rows (key columns, value columns, found flag) for distinct keys, through the cache."""
        schema = self.table.schema.polars_schema
        assert self._lookuper is not None
        if self.cache is None:
            rows = self._lookuper.lookup(keys, with_found=True)
            return rows.select(*self.keys, *self.columns, pl.col("_found").alias(_FOUND))
        now = self.clock()
        cached = self._cached
        if cached is None:
            cached = pl.DataFrame(
                schema={**{c: schema[c] for c in [*self.keys, *self.columns]}, _FOUND: pl.Boolean, _STAMP: pl.Float64}
            )
        if self.cache.expire_after_write is not None:
            cached = cached.filter(pl.col(_STAMP) > now - self.cache.expire_after_write)
        hits = cached.join(keys, on=list(self.keys), how="semi")
        missing = keys.join(hits.select(self.keys), on=list(self.keys), how="anti")
        self.hits += hits.height
        self.misses += missing.height
        fresh = self._lookuper.lookup(missing, with_found=True) if missing.height else None
        if fresh is not None:
            fresh = fresh.select(
                *self.keys, *self.columns, pl.col("_found").alias(_FOUND), pl.lit(now, pl.Float64).alias(_STAMP)
            )
            keep = fresh if self.cache.cache_missing_key else fresh.filter(pl.col(_FOUND))
            cached = pl.concat([cached, keep], how="vertical")
            if cached.height > self.cache.max_rows:  # evict the oldest writes
                cached = cached.sort(_STAMP, maintain_order=True).tail(self.cache.max_rows)
        self._cached = cached
        parts = [hits] + ([fresh] if fresh is not None else [])
        return pl.concat(parts, how="vertical").drop(_STAMP)

    def enrich(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` with the table's columns joined on (``how``: keep unmatched rows with nulls, or drop them)."""
        missing = [c for c in self.stream_keys if c not in frame.columns]
        if missing:
            raise InvalidConfigError(f"the stream lacks the join column(s) {missing}")
        clash = [c for c in self.columns if c in frame.columns]
        if clash:
            raise InvalidConfigError(f"columns {clash} exist on both sides; pick the table's with columns=[...]")
        schema = self.table.schema.polars_schema
        keys = frame.select(
            [pl.col(s).cast(schema[k]).alias(k) for s, k in zip(self.stream_keys, self.keys, strict=True)]
        )
        left_on = [pl.col(s).cast(schema[k]) for s, k in zip(self.stream_keys, self.keys, strict=True)]
        if self.mode == "pk":
            # inserted keys are numbered in order of appearance (a dictionary table's ids follow the stream)
            distinct = keys.drop_nulls().unique(maintain_order=self.insert_if_not_exists)
            rows = self._lookup(distinct) if distinct.height else None
            if rows is None:
                rows = pl.DataFrame(schema={**{c: schema[c] for c in [*self.keys, *self.columns]}, _FOUND: pl.Boolean})
            rows = rows.filter(pl.col(_FOUND)).drop(_FOUND)
        else:
            distinct = keys.drop_nulls().unique()
            rows = (
                self.table.prefix_lookup(distinct).select(*self.keys, *self.columns)
                if distinct.height
                else pl.DataFrame(schema={c: schema[c] for c in [*self.keys, *self.columns]})
            )
        joined = frame.join(rows, left_on=left_on, right_on=list(self.keys), how=self.how, maintain_order="left")
        return joined.drop([k for k in self.keys if k in joined.columns and k not in frame.columns])

    def stream(self, frames: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        """Enrich every frame of an iterator, lazily."""
        for frame in frames:
            yield self.enrich(frame)

    def state_bytes(self) -> int:
        """Checkpoint bytes (with a source) plus the cache's rows: the only memory a lookup join keeps."""
        cached = int(self._cached.estimated_size()) if self._cached is not None else 0
        return (super().state_bytes() if self.source is not None else 0) + cached

    # ------------------------------------------------------------ as a job over a log table
    def _require_source(self) -> Table:
        if self.source is None:
            raise InvalidConfigError("this LookupJoin has no source table; use enrich() or stream()")
        return self.source

    def poll(self) -> pl.DataFrame:
        """The next batch of source records, enriched; the checkpoint moves past them (at most once)."""
        source = self._require_source()
        ranges = self._ranges("source")
        if not ranges:
            return self.enrich(
                self._read("source", {}, source.schema.names).drop(
                    "_bucket", "_offset", "_change_type", "_commit_timestamp"
                )
            )
        frame = self._read("source", ranges, source.schema.names)
        out = self.enrich(frame.drop("_bucket", "_offset", "_change_type", "_commit_timestamp"))
        self._advance({"source": {b: r[1] for b, r in ranges.items()}})
        self._save()
        return out

    def _step(self) -> JobReport | None:
        self._require_source()
        if self.sink is None:
            raise InvalidConfigError("this LookupJoin has no sink; call poll() to receive enriched batches")
        step = pending_step(self)
        if step is None:
            ranges = self._ranges("source")
            if not ranges:
                return None
            step = begin_step(self, self.sink, {"source": {b: r[1] for b, r in ranges.items()}})
        else:
            ranges = step_ranges(self, step, "source")
        frame = self._read("source", ranges, self.source.schema.names) if ranges else None  # type: ignore[union-attr]
        written = 0
        if frame is not None and frame.height:
            out = self.enrich(frame.drop("_bucket", "_offset", "_change_type", "_commit_timestamp"))
            written = write_once(self, self.sink, step, out.select(self.sink.schema.names))
        # committed with the next step's announcement (one checkpoint commit per step while records keep coming),
        # or by run_once before it returns when nothing is waiting
        finish_step(self, step, commit=False)
        return JobReport(steps=1, records_read=0 if frame is None else frame.height, rows_appended=written)
