"""The stateful regular join (a symmetric hash join): the fallback for joins that cannot run as delta joins,
and the baseline the benchmarks compare the delta join against.

Both (all) sides are kept in operator state: one Polars frame per input with the current row of every key,
maintained from the changelogs. A batch of changes is joined twice against the state, before and after it is
applied: tuples of the old state give the result keys to retract, tuples of the new state the rows to upsert,
so updates that move a row to another join key (possible here: join columns need not be key columns) retract
the old partners exactly. The state is checkpointed with the offsets (Arrow IPC objects in the store), so its
size, memory and restart time grow with the inputs - which is what the delta join avoids.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence

import polars as pl

from fluss_lake._utils.distinct import distinct
from fluss_lake.exceptions import JoinNotSupportedError
from fluss_lake.jobs._expansion import TUPLE_LIVE, emit, expand
from fluss_lake.jobs.checkpoint import BucketOffsets
from fluss_lake.jobs.job import Job, JobReport, StartFrom, default_job_name, partition_names
from fluss_lake.jobs.join_plan import LIVE, Explanation, Join, JoinPlan
from fluss_lake.jobs.result_writes import write_changes
from fluss_lake.jobs.shard import Shard
from fluss_lake.table import Table

__all__ = ["StatefulJoin"]


class StatefulJoin(Job):
    """A join that keeps every input's current rows in operator state (checkpointed with the offsets).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import Join, StatefulJoin
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.orders", schema={"oid": "INT", "cid": "INT"}, primary_key=["oid"])
    >>> _ = conn.create_table("d.customers", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    >>> _ = conn.create_table("d.view", schema={"oid": "INT", "cid": "INT", "name": "STRING"}, primary_key=["oid"])
    >>> orders, customers = conn.get_table("d.orders"), conn.get_table("d.customers")
    >>> job = StatefulJoin(conn.get_table("d.view"), {"o": orders, "c": customers}, [Join("o", "c", ["cid"])])
    >>> print(job.explain().strategy)
    stateful
    >>> _ = customers.upsert([{"cid": 1, "name": "ann"}, {"cid": 2, "name": "bob"}])
    >>> _ = orders.upsert([{"oid": 7, "cid": 1}]); _ = job.run_once()
    >>> _ = orders.upsert([{"oid": 7, "cid": 2}]); _ = job.run_once()  # the order moves to another customer
    >>> conn.get_table("d.view").to_polars().to_dicts()
    [{'oid': 7, 'cid': 2, 'name': 'bob'}]
    """

    kind = "stateful_join"

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
        batch_rows: int = 100_000,
        start: StartFrom = "earliest",
        shard: Shard | None = None,
    ) -> None:
        if shard is not None and not (isinstance(shard, Shard) and shard.count == 1):
            raise JoinNotSupportedError(
                f"shard={shard!r}: a stateful join keeps the rows of all its inputs' buckets in one state and "
                "cannot be split into shards; run it unsharded, or make the join a delta join (see explain())"
            )
        self.plan = JoinPlan(inputs, joins, result, select=select, where=where, condition=condition)
        self.result = result
        super().__init__(
            result.connection,
            name or default_job_name(self.kind, result, "join"),
            inputs,
            batch_rows=batch_rows,
            start=start,
        )
        self._state = self._load_state()

    def explain(self) -> Explanation:
        """Says this join keeps state, and why it could not run as a delta join (if it could not)."""
        return self.plan.explain("stateful")

    # ------------------------------------------------------------ state
    def _empty(self, alias: str) -> pl.DataFrame:
        schema = self.inputs[alias].schema.polars_schema
        return pl.DataFrame(schema={c: schema[c] for c in self.plan.needed[alias]})

    def _load_state(self) -> dict[str, pl.DataFrame]:
        names = self.checkpoint.extra.get("state") or {}
        state = {}
        for alias in self.inputs:
            obj = names.get(alias)
            state[alias] = pl.read_ipc(io.BytesIO(self.checkpoints.get_attachment(obj))) if obj else self._empty(alias)
        return state

    def _forget(self, alias: str, names: Sequence[str]) -> None:
        """Rows of dropped partitions leave the state (no retractions are emitted, as in the delta join): later
        changes of their partners no longer join with them."""
        super()._forget(alias, names)
        state = getattr(self, "_state", None)
        if state is not None and state[alias].height:
            frame = state[alias]
            self._state = {**state, alias: frame.filter(~partition_names(self.inputs[alias], frame).is_in(list(names)))}

    def state_bytes(self) -> int:
        """Checkpoint plus the in-memory state of every input (grows with the inputs)."""
        return super().state_bytes() + sum(int(f.estimated_size()) for f in self._state.values())

    def _fetch_from(
        self, state: dict[str, pl.DataFrame], images: dict[str, pl.DataFrame] | None = None
    ) -> Callable[[str, tuple[str, ...], pl.DataFrame], pl.DataFrame]:
        """A probe of the state (a hash join on any columns), plus the step's images when retracting."""

        def fetch(alias: str, probe: tuple[str, ...], keys: pl.DataFrame) -> pl.DataFrame:
            frame = state[alias]
            keys = keys.with_columns([pl.col(c).cast(frame.schema[c]) for c in probe])
            rows = frame.join(keys, on=list(probe), how="semi")
            extra = (images or {}).get(alias)
            if extra is not None and extra.height:
                rows = distinct(pl.concat([rows, extra.join(keys, on=list(probe), how="semi")], how="vertical"))
            return self.plan.live(alias, rows)

        return fetch

    # ------------------------------------------------------------ steps
    def _step(self) -> JobReport | None:
        changes: dict[str, pl.DataFrame] = {}
        consumed: dict[str, BucketOffsets] = {}
        records = 0
        for alias in self.inputs:
            ranges = self._ranges(alias)
            if ranges:
                frame = self._read(alias, ranges, self.plan.needed[alias])
                records += frame.height
                changes[alias] = frame
                consumed[alias] = {b: r[1] for b, r in ranges.items()}
        if not consumed:
            return None
        old = self._state
        new = dict(old)
        affected: dict[str, pl.DataFrame] = {}
        images_of: dict[str, pl.DataFrame] = {}  # every image of the step: what a lost attempt of it could have used
        for alias, frame in changes.items():
            pk = list(self.inputs[alias].schema.primary_key)
            needed = self.plan.needed[alias]
            images = distinct(frame.filter(pl.col("_change_type") != "-U"), pk, keep="last")
            keys = images.select(pk)
            alive = images.filter(pl.col("_change_type") != "-D").select(needed)
            new[alias] = pl.concat([old[alias].join(keys, on=pk, how="anti"), alive], how="vertical")
            affected[alias] = keys
            images_of[alias] = distinct(frame.select(needed))
        parts = []
        for alias, keys in affected.items():
            pk = list(keys.columns)
            before = self.plan.live(
                alias, distinct(pl.concat([old[alias].join(keys, on=pk, how="semi"), images_of[alias]], how="vertical"))
            )
            present = new[alias].join(keys, on=pk, how="semi")
            gone = keys.join(present.select(pk), on=pk, how="anti").with_columns(pl.lit(False).alias(LIVE))
            # deleted keys stay as (not live) seeds: the left side of a LEFT join gets its null-padded row back
            after = pl.concat([self.plan.live(alias, present), gone], how="diagonal")
            retract = expand(self.plan, alias, before, self._fetch_from(old, images_of), index_probes=False)
            parts.append(retract.with_columns(pl.lit(False).alias(TUPLE_LIVE)))
            parts.append(expand(self.plan, alias, after, self._fetch_from(new), index_probes=False))
        upserts, deletes = emit(self.plan, pl.concat(parts, how="diagonal_relaxed"))
        write_changes(self.result, upserts, deletes)
        self._state = new
        self._advance(consumed)
        self._save_with_state()
        return JobReport(steps=1, records_read=records, rows_upserted=upserts.height, rows_deleted=deletes.height)

    def _save_with_state(self) -> None:
        """Write the state (one Arrow IPC object per input) and a checkpoint naming it with the offsets.

        Every step is checkpointed: a step repeated after a crash then starts from the state the lost attempt
        started from, and retracting from that state plus every image of the step covers what it wrote."""
        number = self.checkpoint.number + 1
        names = {}
        for alias, frame in self._state.items():
            sink = io.BytesIO()
            frame.write_ipc(sink)
            names[alias] = self.checkpoints.put_attachment(number, alias, sink.getvalue())
        self._advance({}, extra={"state": names})
        self._save()
