"""Jobs over partitioned tables: inputs read per (partition, bucket), partitions created after the job started read
from their start, dropped partitions forgotten, partitioned result/aggregation/sink tables, explain() on
partitioned sides, and exactly-once replays into partitioned tables.

The oracle test drops a partition of an input together with the same day of the result table (what a retention
policy applied to both does): the result must then equal the batch join of the inputs' current states. A drop of
an input partition alone keeps the results derived from it (no delete records; as in Fluss): tested separately.
"""

from __future__ import annotations

import tempfile

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fluss_lake as fl
from fluss_lake.jobs import (
    Aggregation,
    DeltaJoin,
    Join,
    LookupJoin,
    StatefulJoin,
    explain_join,
    join,
)

DAYS = ["d1", "d2", "d3"]


class SimulatedCrash(Exception):
    """Stands for the process dying between writing a step's results and committing its checkpoint."""


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


# ---------------------------------------------------------------- delta join oracle
class _Orders:
    """orders(day, k, x) and shipments(day, k, y), both partitioned by day with bucket key k, joined on (day, k)
    (partition keys + bucket key: a prefix lookup on each side), LEFT JOIN rates(day, k) by its primary key."""

    def __init__(self, *, result_partitioned: bool, stateful: bool = False) -> None:
        self.stateful = stateful
        self.conn = fl.connect(tempfile.mkdtemp(prefix="jobs-part-"))
        self.conn.create_database("o")
        c = self.conn.create_table
        c("o.a", schema={"day": "STRING", "k": "INT", "x": "INT", "v": "INT"}, primary_key=["day", "k", "x"],
          partition_keys=["day"], bucket_keys=["k"], bucket_num=2)
        c("o.b", schema={"day": "STRING", "k": "INT", "y": "INT", "w": "INT"}, primary_key=["day", "k", "y"],
          partition_keys=["day"], bucket_keys=["k"], bucket_num=2)
        c("o.c", schema={"day": "STRING", "k": "INT", "z": "INT"}, primary_key=["day", "k"], partition_keys=["day"])
        c("o.result", schema={"day": "STRING", "k": "INT", "x": "INT", "y": "INT", "v": "INT", "w": "INT", "z": "INT"},
          primary_key=["day", "k", "x", "y"], partition_keys=["day"] if result_partitioned else (), bucket_num=2)
        self.tables = {a: self.conn.get_table(f"o.{a}") for a in "abc"}
        self.result = self.conn.get_table("o.result")
        self.job = self.new_job()

    def new_job(self) -> DeltaJoin | StatefulJoin:
        return (StatefulJoin if self.stateful else DeltaJoin)(self.result, self.tables, [Join("a", "b", ["day", "k"]), Join("a", "c", ["day", "k"], how="left")],
                         name="orders", batch_rows=3)

    def write(self, op: tuple) -> None:
        kind, t, day, k, second, value = op
        alias = "abc"[t]
        table = self.tables[alias]
        row = {"day": DAYS[day], "k": k}
        if alias == "c":
            key, row = dict(row), {**row, "z": value}
        else:
            other = "x" if alias == "a" else "y"
            key = {**row, other: second}
            row = {**key, ("v" if alias == "a" else "w"): value}
        if kind == "upsert":
            table.upsert([row])
        elif kind == "delete":
            if DAYS[day] in {p.name for p in table.list_partitions()}:
                table.delete([key])
        elif kind == "drop" and alias != "c":  # retention drops the input's day and the result's day
            table.drop_partition(DAYS[day], ignore_if_not_exists=True)
            if self.result.is_partitioned:
                self.result.drop_partition(DAYS[day], ignore_if_not_exists=True)
            else:
                stale = self.result.to_polars().filter(pl.col("day") == DAYS[day])
                if stale.height:
                    self.result.delete(stale.select("day", "k", "x", "y"))

    def crash_before_checkpoint(self) -> None:
        def boom(_checkpoint):
            raise SimulatedCrash()
        self.job.checkpoints.commit = boom
        try:
            self.job.run_once()
        except SimulatedCrash:
            pass
        self.job = self.new_job()

    def check(self) -> None:
        self.job.run_once()
        s = {a: t.to_polars() for a, t in self.tables.items()}
        want = (s["a"].join(s["b"], on=["day", "k"]).join(s["c"], on=["day", "k"], how="left")
                .select("day", "k", "x", "y", "v", "w", "z"))
        got = _sorted(self.result.to_polars())
        want = _sorted(want.cast(got.schema))
        assert got.equals(want), f"\nresult:\n{got}\noracle:\n{want}"


# (kind, table, day, key, second key, value)
PART_OPS = st.lists(st.tuples(
    st.sampled_from(["upsert", "upsert", "upsert", "upsert", "delete", "delete", "drop", "run", "run", "crash",
                     "crash_before_checkpoint"]),
    st.integers(0, 2), st.integers(0, 2), st.sampled_from([0, 0, 1]), st.integers(0, 1), st.integers(0, 3)),
    min_size=1, max_size=25)

#: joined rows, a drop of one side's day (with the result's), then rows of that day again: a new partition
DROP_AND_RECREATE = [("upsert", 0, 0, 0, 0, 1), ("upsert", 1, 0, 0, 0, 2), ("upsert", 2, 0, 0, 0, 3),
                     ("run", 0, 0, 0, 0, 0), ("drop", 0, 0, 0, 0, 0), ("run", 0, 0, 0, 0, 0),
                     ("upsert", 0, 0, 0, 1, 5), ("delete", 1, 0, 0, 0, 0), ("upsert", 1, 0, 0, 1, 6)]
#: a day seen by the job is dropped and written again before the job runs: same name, new partition id
RECREATED_UNSEEN = [("upsert", 0, 0, 0, 0, 1), ("upsert", 1, 0, 0, 0, 2), ("run", 0, 0, 0, 0, 0),
                    ("drop", 0, 0, 0, 0, 0), ("upsert", 0, 0, 0, 1, 5)]
#: the drop happens before the job consumed the dropped partition's changes
DROP_UNCONSUMED = [("upsert", 0, 1, 0, 0, 1), ("upsert", 1, 1, 0, 0, 2), ("drop", 1, 1, 0, 0, 0),
                   ("upsert", 1, 1, 0, 1, 4), ("crash_before_checkpoint", 0, 0, 0, 0, 0)]


def _run_orders(ops: list[tuple], *, result_partitioned: bool, stateful: bool = False) -> None:
    h = _Orders(result_partitioned=result_partitioned, stateful=stateful)
    for op in ops:
        kind = op[0]
        if kind in ("upsert", "delete", "drop"):
            h.write(op)
        elif kind == "run":
            h.job.run_once(max_steps=1 + op[4])
        elif kind == "crash":
            h.job.run_once(max_steps=op[4])
            h.job = h.new_job()
        else:
            h.crash_before_checkpoint()
    h.check()
    h.job = h.new_job()  # from the stored checkpoint only: nothing to do, the result unchanged
    h.check()
    known = h.job.checkpoint.partitions
    for alias in "abc":  # the checkpoint holds exactly the partitions that exist, under their current ids
        assert known[alias] == {p.name: p.partition_id for p in h.tables[alias].list_partitions()}
        assert {p for p, _ in h.job.offsets(alias)} == set(known[alias])


@pytest.mark.parametrize("result_partitioned", [True, False])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=PART_OPS)
@example(ops=DROP_AND_RECREATE)
@example(ops=DROP_UNCONSUMED)
@example(ops=RECREATED_UNSEEN)
def test_partitioned_delta_join_equals_batch_join(result_partitioned: bool, ops: list[tuple]) -> None:
    _run_orders(ops, result_partitioned=result_partitioned)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=PART_OPS)
@example(ops=DROP_AND_RECREATE)
@example(ops=RECREATED_UNSEEN)
def test_partitioned_stateful_join_equals_batch_join(ops: list[tuple]) -> None:
    """The stateful join drops a dropped partition's rows from its state, so it behaves as the delta join."""
    _run_orders(ops, result_partitioned=True, stateful=True)


def test_dropping_an_input_partition_keeps_the_results_derived_from_it() -> None:
    """Dropping writes no delete records (as in Fluss): joined rows of the dropped day stay in the result; the
    job forgets the partition's offsets, says so, and reads a partition re-created under that name from its
    start."""
    h = _Orders(result_partitioned=True)
    a, b = h.tables["a"], h.tables["b"]
    a.upsert([{"day": "d1", "k": 1, "x": 1, "v": 10}, {"day": "d2", "k": 1, "x": 1, "v": 20}])
    b.upsert([{"day": "d1", "k": 1, "y": 1, "w": 1}, {"day": "d2", "k": 1, "y": 1, "w": 2}])
    h.job.run_once()
    before = _sorted(h.result.to_polars())
    assert before["v"].to_list() == [10, 20]
    a.drop_partition("d1")
    report = h.job.run_once()
    assert report.steps == 0 and _sorted(h.result.to_polars()).equals(before)  # the d1 row stays
    assert h.job.forgotten_partitions == {"a": ["d1"]}
    assert {p for p, _ in h.job.offsets("a")} == {"d2"}
    b.delete([{"day": "d1", "k": 1, "y": 1}])  # its partner is gone: nothing to probe, the row stays (as in Fluss)
    h.job.run_once()
    assert _sorted(h.result.to_polars()).equals(before)
    a.upsert([{"day": "d1", "k": 1, "x": 2, "v": 30}])  # d1 re-created: a new partition, read from its start
    b.upsert([{"day": "d1", "k": 1, "y": 2, "w": 3}])
    h.job.run_once()
    got = h.result.to_polars().filter(pl.col("day") == "d1").sort("x")
    assert got.select("x", "y", "v").rows() == [(1, 1, 10), (2, 2, 30)]


def test_partitions_created_after_a_latest_start_are_read_from_their_start() -> None:
    h = _Orders(result_partitioned=True)
    a, b = h.tables["a"], h.tables["b"]
    a.upsert([{"day": "d1", "k": 1, "x": 1, "v": 1}])
    b.upsert([{"day": "d1", "k": 1, "y": 1, "w": 1}])
    h.job.reset()
    job = DeltaJoin(h.result, h.tables, [Join("a", "b", ["day", "k"]), Join("a", "c", ["day", "k"], how="left")],
                    name="late", start="latest")
    assert job.lag() == {"a": 0, "b": 0, "c": 0}
    a.upsert([{"day": "d2", "k": 1, "x": 1, "v": 2}, {"day": "d2", "k": 1, "x": 2, "v": 3}])  # new partition d2
    b.upsert([{"day": "d2", "k": 1, "y": 1, "w": 4}])
    assert job.lag() == {"a": 2, "b": 1, "c": 0}
    job.run_once()
    assert _sorted(h.result.to_polars()).select("day", "x", "v").rows() == [("d2", 1, 2), ("d2", 2, 3)]
    assert set(job.offsets("a")) == {("d1", 0), ("d1", 1), ("d2", 0), ("d2", 1)}


def test_explain_on_partitioned_sides() -> None:
    h = _Orders(result_partitioned=True)
    t = h.tables
    ok = explain_join(h.result, t, [Join("a", "b", ["day", "k"]), Join("a", "c", ["day", "k"], how="left")])
    assert ok.delta
    assert any("probe b (o.b) by ['day', 'k']: prefix lookup by partition keys + bucket key" in p for p in ok.probes)
    assert any("probe c (o.c) by ['day', 'k']: lookup by primary key" in p for p in ok.probes)
    # the join omits the partition column: neither side has an index among its join columns
    h.conn.create_table("o.r2", schema={"k": "INT", "x": "INT", "y": "INT", "d1": "STRING", "d2": "STRING"},
                        primary_key=["d1", "d2", "k", "x", "y"])
    bad = explain_join(h.conn.get_table("o.r2"), {"a": t["a"], "b": t["b"]}, [Join("a", "b", ["k"])],
                       select={"k": "a.k", "x": "a.x", "y": "b.y", "d1": "a.day", "d2": "b.day"})
    assert not bad.delta and len(bad.reasons) == 2
    assert "partition keys + bucket-key prefix ['day', 'k']" in bad.reasons[0]
    assert "must be joined on its partition columns ['day'] too" in bad.reasons[0]
    with pytest.raises(fl.JoinNotSupportedError, match="partition columns"):
        DeltaJoin(h.conn.get_table("o.r2"), {"a": t["a"], "b": t["b"]}, [Join("a", "b", ["k"])],
                  select={"k": "a.k", "x": "a.x", "y": "b.y", "d1": "a.day", "d2": "b.day"})
    # the stateful fallback runs it: rows of different days join
    t["a"].upsert([{"day": "d1", "k": 1, "x": 1, "v": 0}])
    t["b"].upsert([{"day": "d2", "k": 1, "y": 5, "w": 0}, {"day": "d3", "k": 2, "y": 6, "w": 0}])
    job = join(h.conn.get_table("o.r2"), {"a": t["a"], "b": t["b"]}, [Join("a", "b", ["k"])],
               select={"k": "a.k", "x": "a.x", "y": "b.y", "d1": "a.day", "d2": "b.day"}, fallback="stateful")
    assert job.explain().strategy == "stateful"
    job.run_once()
    assert h.conn.get_table("o.r2").to_polars().select("d1", "d2", "k", "y").rows() == [("d1", "d2", 1, 5)]


# ---------------------------------------------------------------- lookup join with a partitioned dimension
@pytest.mark.parametrize("sink_bucket_keys", [["sku"], None])
def test_lookup_join_with_partitioned_dimension_and_sink_is_exactly_once(tmp_path, sink_bucket_keys) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.prices", schema={"day": "STRING", "sku": "INT", "price": "BIGINT"},
                      primary_key=["day", "sku"], partition_keys=["day"], bucket_num=2)
    conn.create_table("d.sales", schema={"day": "STRING", "sku": "INT", "qty": "INT"}, partition_keys=["day"],
                      bucket_keys=["sku"], bucket_num=2)
    conn.create_table("d.priced", schema={"day": "STRING", "sku": "INT", "qty": "INT", "price": "BIGINT"},
                      partition_keys=["day"], bucket_keys=sink_bucket_keys, bucket_num=2)
    prices, sales, priced = (conn.get_table(f"d.{n}") for n in ("prices", "sales", "priced"))
    prices.upsert([{"day": "d1", "sku": s, "price": 10 * s} for s in range(4)] + [{"day": "d2", "sku": 1, "price": 99}])
    sales.append([{"day": d, "sku": s, "qty": 1} for d in ("d1", "d2", "d3") for s in range(3)])

    def job():
        return LookupJoin(prices, on=["day", "sku"], source=sales, sink=priced, name="priced", batch_rows=4)

    j = job()
    real = j.checkpoints.commit

    def crash_after_write(checkpoint):
        if "pending" not in checkpoint.extra:
            raise SimulatedCrash()
        real(checkpoint)
    j.checkpoints.commit = crash_after_write
    with pytest.raises(SimulatedCrash):
        j.run_once()
    written = priced.scan_log().height
    assert written > 0
    j = job()
    j.run_once()  # replays the announced step (nothing twice), then the rest
    sales.append([{"day": "d4", "sku": 1, "qty": 2}])  # a partition created after the job started
    j.run_once()
    got = _sorted(priced.to_polars().select("day", "sku", "qty", "price"))
    s = sales.to_polars()
    want = s.join(prices.to_polars(), on=["day", "sku"], how="left").select("day", "sku", "qty", "price")
    assert got.equals(_sorted(want.cast(got.schema)))
    assert got.height == 10 and got.filter(pl.col("day") == "d2", pl.col("sku") == 1)["price"].to_list() == [99]
    # the dimension's lookups need the partition columns
    with pytest.raises(fl.InvalidConfigError, match="partition columns"):
        LookupJoin(prices, on=["sku"])


def test_prefix_lookup_join_on_partitioned_dimension(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.items", schema={"day": "STRING", "cart": "INT", "item": "INT"},
                      primary_key=["day", "cart", "item"], partition_keys=["day"], bucket_keys=["cart"], bucket_num=2)
    items = conn.get_table("d.items")
    items.upsert([{"day": "d1", "cart": 1, "item": i} for i in range(3)] + [{"day": "d2", "cart": 1, "item": 7}])
    enrich = LookupJoin(items, on={"d": "day", "c": "cart"}, how="inner")
    assert enrich.mode == "prefix" and enrich.keys == ("day", "cart")
    out = enrich.enrich(pl.DataFrame({"d": ["d1", "d2", "d9"], "c": [1, 1, 1]}))
    assert sorted(out.select("d", "item").rows()) == [("d1", 0), ("d1", 1), ("d1", 2), ("d2", 7)]


# ---------------------------------------------------------------- aggregation into a partitioned table
AGG = {"table.merge-engine": "aggregation", "fields.n.agg": "sum", "fields.total.agg": "sum"}


def _agg_setup(path: str, *, buckets: int = 2):
    conn = fl.connect(path)
    if not conn.database_exists("d"):
        conn.create_database("d")
        conn.create_table("d.events", schema={"day": "STRING", "g": "INT", "v": "BIGINT"}, partition_keys=["day"],
                          bucket_keys=["g"], bucket_num=2)
        conn.create_table("d.totals", schema={"day": "STRING", "g": "INT", "n": "BIGINT", "total": "BIGINT"},
                          primary_key=["day", "g"], partition_keys=["day"], bucket_num=buckets, options=AGG)
    events, totals = conn.get_table("d.events"), conn.get_table("d.totals")
    return conn, events, totals


def _agg_job(events, totals, batch_rows: int = 3) -> Aggregation:
    return Aggregation(events, totals, group_by=["day", "g"], aggregates={"n": ("count", None), "total": ("sum", "v")},
                       name="agg", batch_rows=batch_rows)


def _crash_after_write(job) -> None:
    real = job.checkpoints.commit

    def commit(checkpoint):
        if "pending" not in checkpoint.extra:
            raise SimulatedCrash()
        real(checkpoint)
    job.checkpoints.commit = commit


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(-9, 9)),
                                 min_size=1, max_size=5), min_size=1, max_size=5),
       crashes=st.lists(st.booleans(), min_size=5, max_size=5))
def test_aggregation_into_partitioned_table_with_crashes(batches, crashes) -> None:
    _conn, events, totals = _agg_setup(tempfile.mkdtemp(prefix="agg-part-"))
    job = _agg_job(events, totals)
    for batch, crash in zip(batches, crashes):
        events.append([{"day": DAYS[d], "g": g, "v": v} for d, g, v in batch])
        if crash:
            _crash_after_write(job)
            with pytest.raises(SimulatedCrash):
                job.run_once()
            job = _agg_job(events, totals)
        job.run_once()
    got = totals.to_polars().sort("day", "g")
    want = (events.to_polars().group_by("day", "g").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("v").sum().alias("total"))
            .sort("day", "g"))
    assert got.equals(want.select(got.columns).cast(got.schema))


def test_aggregation_replay_into_partitioned_table_in_a_new_process(tmp_path) -> None:
    """The replay check reads batch headers per (partition, bucket): a crashed step's partials in two partitions
    are recognised after another writer committed to one of them, and a partition the step created is searched
    from its start."""
    path = str(tmp_path / "lake")
    _conn, events, totals = _agg_setup(path, buckets=1)
    totals.upsert([{"day": "d1", "g": 0, "n": 0, "total": 0}])  # d1 exists before the step; d2 is created by it
    events.append([{"day": "d1", "g": 1, "v": 10}, {"day": "d2", "g": 1, "v": 5}])
    job = _agg_job(events, totals, batch_rows=100)
    _crash_after_write(job)
    with pytest.raises(SimulatedCrash):
        job.run_once()
    totals.upsert([{"day": "d1", "g": 9, "n": 1, "total": 1}])  # someone else writes after the crashed step
    _conn2, events2, totals2 = _agg_setup(path, buckets=1)
    report = _agg_job(events2, totals2, batch_rows=100).run_once()
    assert report.rows_upserted == 0
    got = totals2.to_polars().sort("day", "g").select("day", "g", "n", "total").rows()
    assert got == [("d1", 0, 0, 0), ("d1", 1, 1, 10), ("d1", 9, 1, 1), ("d2", 1, 1, 5)]


def test_a_partition_dropped_while_the_job_reads_it_is_skipped() -> None:
    """The drop lands between the job's partition listing and its read of that partition's log."""
    h = _Orders(result_partitioned=True)
    a, b = h.tables["a"], h.tables["b"]
    a.upsert([{"day": "d1", "k": 1, "x": 1, "v": 1}, {"day": "d2", "k": 1, "x": 1, "v": 2}])
    b.upsert([{"day": "d1", "k": 1, "y": 1, "w": 1}, {"day": "d2", "k": 1, "y": 1, "w": 2}])
    dropped = []

    class Racing(DeltaJoin):
        def _read(self, alias, ranges, columns, change_types=None):
            if not dropped and any(p == "d1" for p, _ in ranges):
                a.drop_partition("d1")
                dropped.append("d1")
            return super()._read(alias, ranges, columns, change_types)

    job = Racing(h.result, h.tables, [Join("a", "b", ["day", "k"]), Join("a", "c", ["day", "k"], how="left")],
                 name="racing")
    job.run_once()
    assert dropped == ["d1"]
    assert h.result.to_polars().select("day", "v", "w").rows() == [("d2", 2, 2)]
    job.run_once()
    assert {p for p, _ in job.offsets("a")} == {"d2"} and job.forgotten_partitions == {"a": ["d1"]}
