"""Delta join: a join of primary-key tables whose only operator state is the consumed offsets.

Each step reads up to ``batch_rows`` new changelog records of every input. From the last image of each changed
key (a delete: a key that is gone) it probes each other input once per join edge (a batched lookup or prefix
lookup of their current rows by the join key) and so grows whole joined tuples; live tuples become upserts into the
result table and the result keys of every other tuple the changed keys took part in become deletes. That covers
inserts, updates, deletes and the null-padded rows of LEFT joins with no per-row Python code. A step writes once
for all inputs (a joined row changed on both sides is written once); ``emit_per_input=True`` writes once per input
instead, as Fluss's delta join does (each side's changes probe the other and emit: ``+I r, -U r, +U r``).

A probed row whose last change lies beyond what the step consumes (a backlog: the inputs are ahead of the job)
gives no upsert: its own change record, read in a later step, derives the same tuples again from the rows current
then, so writing them now would only be overwritten (lookups return each row's changelog offset). Retractions are
never deferred. ``emit_per_input=True`` keeps Fluss's records and defers nothing.

Why retractions are complete without state: join keys are index columns, hence primary-key columns that never
change. A joined row whose partner was deleted too is still found because the probe of each side also returns
the keys of rows changed in the changelog not yet consumed (they are read before the probes, and again if a
writer committed while probing), so a pair deleted on both sides is retracted by whichever change comes first.
Everything written is an upsert or delete of the result key, so repeating a step after a crash is harmless.

Sharded (``shard=Shard(i, n)``): each shard reads the changelogs of the buckets it owns and probes the inputs'
current rows (all buckets). The delete records of the other shards' buckets not yet consumed by them (from their
committed checkpoints on) are known to its probes too, and the shards write one at a time, probing again when
another shard wrote one of the same result keys since they probed (``_result_journal``): after all shards caught
up, the result equals the unsharded job's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake._utils.distinct import distinct
from fluss_lake.exceptions import CommitConflictError, JoinNotSupportedError, PartitionNotExistError
from fluss_lake.jobs._expansion import PENDING, emit, expand, project
from fluss_lake.jobs._result_journal import ResultJournal
from fluss_lake.jobs.checkpoint import BucketOffsets, CheckpointStore
from fluss_lake.jobs.job import Job, JobReport, StartFrom, default_job_name, partition_names
from fluss_lake.jobs.join_plan import LIVE, Explanation, Join, JoinPlan
from fluss_lake.jobs.result_writes import write_changes
from fluss_lake.jobs.shard import Shard
from fluss_lake.table import Table

__all__ = ["DeltaJoin", "co_partitioned"]

_MAX_RACE_ROUNDS = 50
#: Default step: a delta join keeps nothing between steps, so its memory follows the step; at 25k records per input
#: a backlog of 1M rows per side runs in about two thirds of the memory of 100k-record steps, at about 30% fewer
#: rows/s (fixed costs per step), still faster than the stateful join (``docs/JOBS.md``, "Choosing batch_rows").
BATCH_ROWS = 25_000
_DELETE_SLICE_ROWS = 262_144


class DeltaJoin(Job):
    """A zero-state join of primary-key tables into a primary-key result table (two-way or multi-way).

    `inputs` maps aliases to tables (the first is the root of the join tree), `joins` attach the others;
    `select` maps result columns to ``"alias.column"`` or expressions over qualified columns (default: by name),
    `where` filters each input's rows, `condition` filters joined rows (INNER joins). A step reads up to
    `batch_rows` changelog records per input (25,000 by default: memory against throughput). See ``docs/JOBS.md``.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import DeltaJoin, Join
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("shop")
    >>> _ = conn.create_table("shop.orders", schema={"cid": "INT", "oid": "INT", "amount": "INT"},
    ...                       primary_key=["cid", "oid"], bucket_keys=["cid"])
    >>> _ = conn.create_table("shop.customers", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    >>> _ = conn.create_table("shop.view", schema={"cid": "INT", "oid": "INT", "amount": "INT", "name": "STRING"},
    ...                       primary_key=["cid", "oid"])
    >>> orders, customers = conn.get_table("shop.orders"), conn.get_table("shop.customers")
    >>> job = DeltaJoin(conn.get_table("shop.view"), {"o": orders, "c": customers}, [Join("o", "c", ["cid"])])
    >>> _ = orders.upsert([{"cid": 1, "oid": 10, "amount": 5}]); _ = customers.upsert([{"cid": 1, "name": "ann"}])
    >>> _ = job.run_once(); conn.get_table("shop.view").to_polars().to_dicts()
    [{'cid': 1, 'oid': 10, 'amount': 5, 'name': 'ann'}]
    >>> _ = customers.delete([{"cid": 1}]); _ = job.run_once(); conn.get_table("shop.view").to_polars().height
    0
    """

    kind = "delta_join"

    def __init__(
        self,
        result: Table,
        inputs: Mapping[str, Table],
        joins: Sequence[Join],
        *,
        select: Mapping[str, str | pl.Expr] | None = None,
        where: Mapping[str, pl.Expr] | None = None,
        condition: pl.Expr | None = None,
        name: str | None = None,
        batch_rows: int = BATCH_ROWS,
        start: StartFrom = "earliest",
        emit_per_input: bool = False,
        shard: Shard | None = None,
    ) -> None:
        self.plan = JoinPlan(inputs, joins, result, select=select, where=where, condition=condition)
        self.emit_per_input = emit_per_input
        if self.plan.reasons:
            raise JoinNotSupportedError(
                "this join cannot run as a delta join:\n  - "
                + "\n  - ".join(self.plan.reasons)
                + "\nuse fluss_lake.jobs.join(..., fallback='stateful') for a stateful join"
            )
        self.result = result
        super().__init__(
            result.connection,
            name or default_job_name(self.kind, result, "join"),
            inputs,
            batch_rows=batch_rows,
            start=start,
            shard=shard,
        )
        self._keys: dict[str, pl.DataFrame] = {}
        self._known: dict[str, BucketOffsets] = {}
        self._defer_pending = not emit_per_input  # Fluss's records (the conformance vectors) re-emit every probe
        self._consumed: dict[str, dict[tuple[str | None, int], int]] = {}  # per input: offsets after this step
        #: every input bucketed by its join keys alike: a shard's changes only ever join rows of its own buckets
        self.co_partitioned = co_partitioned(self.plan)
        self._journal = (
            ResultJournal(self.connection, self.name, self.shard)
            if self.shard is not None and not self.co_partitioned
            else None
        )
        self.reprobes = 0  # steps a shard probed again because another shard wrote one of its result keys

    def explain(self) -> Explanation:
        """How this join runs (a delta join: which index each side is probed by)."""
        return self.plan.explain("delta")

    # ------------------------------------------------------------ probes
    def _pk(self, alias: str) -> list[str]:
        return list(self.inputs[alias].schema.primary_key)

    def _fetch(self, alias: str, probe: tuple[str, ...], keys: pl.DataFrame) -> pl.DataFrame:
        """Current rows of `alias` matching the keys (live flag set), plus changed-but-absent keys (not live)."""
        table = self.inputs[alias]
        pk = self._pk(alias)
        needed = self.plan.needed[alias]
        schema = table.schema.polars_schema
        casts = [pl.col(c).cast(schema[c]) for c, dtype in keys.schema.items() if dtype != schema[c]]
        if casts:  # a Polars query only where a probe key's type differs from the table's
            keys = keys.with_columns(casts)
        defer = self._defer_pending
        if not keys.height:
            rows = pl.DataFrame(schema={c: schema[c] for c in needed})
            if defer:
                rows = rows.with_columns(pl.Series(PENDING, [], dtype=pl.Boolean))
        else:
            if list(probe) == pk:
                rows = table.new_lookup().lookup(keys.select(pk), with_found=True, with_offsets=defer)
                found = rows.get_column("_found").to_numpy()
                rows = rows if found.all() else rows[np.flatnonzero(found)]  # a gather, not a Polars query
            else:
                rows = table.prefix_lookup(keys.select(list(probe)), with_offsets=defer)
            rows = rows.select(*needed, self._pending(alias, rows).alias(PENDING)) if defer else rows.select(needed)
        rows = self.plan.live(alias, rows)
        known = self._keys.get(alias)
        if known is not None and known.height and keys.height:
            dead = known.join(keys, on=list(probe), how="semi").join(rows.select(pk), on=pk, how="anti")
            if dead.height:
                rows = pl.concat([rows, dead.with_columns(pl.lit(False).alias(LIVE))], how="diagonal")
        return rows

    def _pending(self, alias: str, rows: pl.DataFrame) -> pl.Expr:
        """Whether each fetched row's last change (``_offset`` in its ``_bucket``) is at or past what this step
        consumes of its bucket; unknown offsets and buckets the job does not track yet count as consumed."""
        consumed = self._consumed.get(alias, {})
        table = self.inputs[alias]
        if not table.is_partitioned:
            ends = np.full(table.bucket_num, np.iinfo(np.int64).max, dtype=np.int64)
            for (_, bucket), offset in consumed.items():
                ends[bucket] = offset
            limit = pl.Series(ends).gather(rows.get_column("_bucket").cast(pl.UInt32))
            return (pl.col("_offset") >= limit).fill_null(False)
        table_of = pl.DataFrame(
            {
                "__part": [k[0] for k in consumed],
                "_bucket": [k[1] for k in consumed],
                "__consumed": list(consumed.values()),
            },
            schema={"__part": pl.String, "_bucket": pl.Int32, "__consumed": pl.Int64},
        )
        keyed = pl.DataFrame({"__part": partition_names(table, rows), "_bucket": rows.get_column("_bucket")})
        joined = keyed.join(table_of, on=["__part", "_bucket"], how="left", maintain_order="left")
        return (pl.col("_offset") >= joined.get_column("__consumed")).fill_null(False)

    def _seeds(self, alias: str, changes: pl.DataFrame) -> pl.DataFrame:
        """The last image of each changed key in a batch of changelog records (a delete: not live).

        The image may be older than the current row; the later change is in the changelog and is processed
        after this one, so the result converges without looking the rows up again."""
        pk = self._pk(alias)
        images = distinct(changes.filter(pl.col("_change_type") != "-U"), pk, keep="last")
        found = images.get_column("_change_type") != "-D"
        return self.plan.live(alias, images.select(self.plan.needed[alias]), found)

    # ------------------------------------------------------------ steps
    def _deleted_keys(self, alias: str, ranges: Mapping[tuple[str | None, int], tuple[int, int]]) -> pl.DataFrame:
        """Keys with a delete record in the ranges (read in slices of at least ``_DELETE_SLICE_ROWS`` records, more
        with bigger steps; batches whose header counts no delete are skipped unread, the others are read for their
        key columns only).

        A row absent when probed was deleted, and its ``-D`` record lies after the checkpoint; joined rows it took
        part in are found through these keys even if its partner is gone too.
        """
        pk = self._pk(alias)
        parts = []
        size = max(self.batch_rows, _DELETE_SLICE_ROWS)  # few reads of a long backlog, whatever the step size
        # slices of at most `size` records each, several buckets' ranges in one read while they fit (a step's
        # fixed cost: one scan per read, and small steps read all their buckets at once)
        read: dict[tuple[str | None, int], tuple[int, int]] = {}
        held = 0
        for bucket, (start, end) in ranges.items():
            for lo in range(start, end, size):
                hi = min(end, lo + size)
                if read and held + (hi - lo) > size:
                    parts.append(self._read(alias, read, pk, change_types=["-D"]).select(pk))
                    read, held = {}, 0
                read[bucket] = (lo, hi)
                held += hi - lo
        if read:
            parts.append(self._read(alias, read, pk, change_types=["-D"]).select(pk))
        schema = self.inputs[alias].schema.polars_schema
        return distinct(pl.concat(parts)) if parts else pl.DataFrame(schema={c: schema[c] for c in pk})

    def _catch_up_keys(self) -> bool:
        """Read delete records committed since we last looked (after probing); True if there were any."""
        grew = False
        for alias in self.inputs:
            known = self._known[alias]
            # a partition created meanwhile counts from its start (its deletes are consumed in a later step anyway)
            extra = {k: (known.get(k, 0), e) for k, e in self._log_ends(alias).items() if e > known.get(k, 0)}
            if extra:
                deleted = self._deleted_keys(alias, extra)
                self._keys[alias] = distinct(pl.concat([self._keys[alias], deleted]))
                self._known[alias] = {**known, **{b: e for b, (_, e) in extra.items()}}
                grew = grew or deleted.height > 0
        return grew

    def _step(self) -> JobReport | None:
        ends = {alias: self._log_ends(alias) for alias in self.inputs}
        backlog = {alias: self._ranges(alias, 1 << 62, ends[alias]) for alias in self.inputs}
        if not any(backlog.values()):
            return None
        self._known = {a: dict(e) for a, e in ends.items()}
        # An input whose whole backlog fits one step is read once: its delete keys are the -D records of the
        # changes the step reads anyway (no second pass over the same batches' headers).
        ahead: dict[str, tuple[dict, pl.DataFrame]] = {}
        for a, full in backlog.items():
            if full and self._ranges(a, self.batch_rows, ends[a]) == full:
                ahead[a] = (full, self._read(a, full, self.plan.needed[a]))
        self._keys = {}
        for a in self.inputs:
            foreign = self._foreign_ranges(a, ends[a])
            if a not in ahead:
                self._keys[a] = self._deleted_keys(a, {**backlog[a], **foreign})
                continue
            pk = self._pk(a)
            own = ahead[a][1].filter(pl.col("_change_type") == "-D").select(pk)
            self._keys[a] = distinct(pl.concat([own, self._deleted_keys(a, foreign)]) if foreign else own)
        upserted = deleted = steps = records = 0
        groups = [[a] for a in self.inputs] if self.emit_per_input else [list(self.inputs)]
        for group in groups:
            while self._budget is None or steps < self._budget:
                ranges = {a: self._ranges(a, self.batch_rows, ends[a]) for a in group}
                ranges = {a: r for a, r in ranges.items() if r}
                if not ranges:
                    break
                seeds = {}
                for alias, r in ranges.items():
                    early = ahead.pop(alias, None)
                    changes = (
                        early[1]
                        if early is not None and early[0] == r
                        else self._read(alias, r, self.plan.needed[alias])
                    )
                    del early
                    records += changes.height
                    if changes.height:
                        seeds[alias] = self._seeds(alias, changes)
                    del changes  # a step holds as little as it can at once: the records are in their seeds now
                if seeds:
                    self._consumed = {
                        a: {**self.checkpoint.offsets[a], **{k: end for k, (_, end) in ranges.get(a, {}).items()}}
                        for a in self.inputs
                    }
                    mark = self._journal.mark() if self._journal is not None else -1  # before the probes
                    ups, dels = self._process(seeds)
                    ups, dels = self._write(seeds, ups, dels, mark)
                    seeds.clear()
                    upserted += ups.height
                    deleted += dels.height
                self._advance({a: {b: span[1] for b, span in r.items()} for a, r in ranges.items()})
                self._save()
                steps += 1
        return JobReport(steps=steps, records_read=records, rows_upserted=upserted, rows_deleted=deleted)

    def _foreign_ranges(
        self, alias: str, ends: Mapping[tuple[str | None, int], int]
    ) -> dict[tuple[str | None, int], tuple[int, int]]:
        """A shard's view of the other shards' buckets: [their committed offset, log end) per (partition, bucket),
        whose delete records the probes must know (a pair deleted on both sides, each side owned by another
        shard, is retracted by whichever shard comes first). Unknown offsets count from the log start."""
        if self.shard is None or self.co_partitioned:  # co-partitioned: no tuple of ours has a row in their buckets
            return {}
        generation = self.checkpoint.layout.get("generation")
        mine = self.checkpoint.partitions.get(alias, {})
        offsets: dict[tuple[str | None, int], int] = {}
        for other in Shard.all(self.shard.count):
            if other == self.shard:
                continue
            found = CheckpointStore(self.connection, self.name, other).load()
            if found is None or found.layout.get("generation") != generation:
                continue
            ids = found.partitions.get(alias, {})
            offsets.update(
                {
                    k: o
                    for k, o in found.offsets.get(alias, {}).items()
                    if k[0] is None or ids.get(k[0]) == mine.get(k[0])
                }
            )
        out: dict[tuple[str | None, int], tuple[int, int]] = {}
        starts: dict[str | None, dict[int, int]] = {}
        for key, end in ends.items():
            if self._owns(*key):
                continue
            start = offsets.get(key)
            if start is None:
                if key[0] not in starts:
                    part = self.inputs[alias] if key[0] is None else self._handle(alias, key[0])
                    try:
                        starts[key[0]] = part.earliest_offsets() if part is not None else {}
                    except PartitionNotExistError:
                        starts[key[0]] = {}
                start = starts[key[0]].get(key[1], end)
            if end > start:
                out[key] = (start, end)
        return out

    def _write(
        self, seeds: Mapping[str, pl.DataFrame], ups: pl.DataFrame, dels: pl.DataFrame, mark: int
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Write a step's result changes; a shard writes holding the job's write lock, and probes again first if
        another shard wrote one of its result keys since `mark` (``_result_journal``)."""
        skip = not self.emit_per_input  # Fluss's own records re-emit -U/+U for every probed row, changed or not
        if self._journal is None:
            write_changes(self.result, ups, dels, skip_unchanged=skip)
            return ups, dels
        if not ups.height and not dels.height:
            return ups, dels
        pk = list(self.result.schema.primary_key)
        with self._journal.locked():
            theirs = self._journal.others_since(mark)
            keys = pl.concat([ups.select(pk), dels.select(pk)], how="vertical_relaxed")
            if theirs is None or (theirs.height and keys.join(theirs.select(pk), on=pk, how="semi").height):
                ups, dels = self._process(seeds)  # nobody writes while we hold the lock: these probes are current
                keys = pl.concat([ups.select(pk), dels.select(pk)], how="vertical_relaxed")
                self.reprobes += 1
            write_changes(self.result, ups, dels, skip_unchanged=skip)
            self._journal.append(keys)
        return ups, dels

    def _process(self, seeds: Mapping[str, pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Upserts and deletes for batches of changed rows (per input)."""
        for _ in range(_MAX_RACE_ROUNDS):
            # each input's tuples shrink to result rows and keys before the next input's are grown
            parts = [
                project(self.plan, expand(self.plan, alias, rows, self._fetch, index_probes=True))
                for alias, rows in seeds.items()
            ]
            if not self._catch_up_keys():  # nobody committed while we probed: the probes saw a consistent picture
                return emit(self.plan, parts)
        raise CommitConflictError(
            f"job {self.name!r}: inputs kept changing while probing {_MAX_RACE_ROUNDS} times; run the job again"
        )


def co_partitioned(plan: JoinPlan) -> bool:
    """Whether every join edge equates the two sides' bucket keys column for column, with the same bucket count,
    bucketing (lake format) and key types, on unpartitioned inputs: then joined rows always share their bucket
    number, so each shard's tuples are built only from rows of the buckets it owns. Its result keys are its own
    (no other shard writes them: no write lock, no journal) and no other shard's deletes can concern it.

    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import Join
    >>> from fluss_lake.jobs.join_plan import JoinPlan
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("s")
    >>> _ = conn.create_table("s.o", schema={"cid": "INT", "oid": "INT"}, primary_key=["cid", "oid"],
    ...                       bucket_keys=["cid"], bucket_num=4)
    >>> _ = conn.create_table("s.c", schema={"cid": "INT", "n": "STRING"}, primary_key=["cid"], bucket_num=4)
    >>> _ = conn.create_table("s.r", schema={"cid": "INT", "oid": "INT", "n": "STRING"}, primary_key=["cid", "oid"])
    >>> t = conn.get_table
    >>> co_partitioned(JoinPlan({"o": t("s.o"), "c": t("s.c")}, [Join("o", "c", ["cid"])], t("s.r")))
    True
    """
    tables = plan.inputs
    first = next(iter(tables.values())).info
    lake = first.options.get(opt.DATALAKE_FORMAT)
    for table in tables.values():
        info = table.info
        if info.partition_keys or info.bucket_num != first.bucket_num or info.options.get(opt.DATALAKE_FORMAT) != lake:
            return False
    for edge in plan.edges:
        parent, child = tables[edge.parent], tables[edge.child]
        parent_keys, child_keys = parent.info.bucket_keys, child.info.bucket_keys
        if len(parent_keys) != len(child_keys):
            return False
        parent_types, child_types = parent.schema.polars_schema, child.schema.polars_schema
        for p, c in zip(parent_keys, child_keys, strict=True):
            try:
                partner = edge.partner(edge.parent, p)
            except KeyError:
                return False
            if partner != c or parent_types[p] != child_types[c]:
                return False
    return True
