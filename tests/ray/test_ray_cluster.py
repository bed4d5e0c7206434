"""fluss_ray on a real multi-node Ray cluster on this machine, with the tables on moto S3.

One module-scoped ``ray.cluster_utils.Cluster`` (a head and two worker raylets, each its own processes and
object store) serves every scenario, so CI starts Ray once. The store and the lake warehouse are buckets of the
session's moto *server* (127.0.0.1), reached by every worker over HTTP; the lake catalog is a real pyiceberg
sqlite catalog in a folder all raylets of this machine see.

Scenarios: sharded jobs (delta join with writers running while a shard's actor is killed and a whole node is
removed; aggregation with a killed actor; lookup join as tasks) equal to the oracle, nothing lost, nothing
duplicated; two tiering tasks racing on one table (lake equals live, offsets never regress); Ray Data readers
of the live table and the lake; a Dagster materialization whose job runs on the cluster.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import dagster as dg
import polars as pl
import pytest
import ray
import ray.cloudpickle
from ray.cluster_utils import Cluster

import fluss_lake as fl
import fluss_ray
from fluss_lake.jobs import Aggregation, DeltaJoin, Join, LookupJoin
from fluss_ray import Store
from fluss_ray.jobs import worker_options
from fluss_ray.rounds import tier_table_task
from tiering import Lake, tier_table
from tiering.lake_snapshot import LakeSnapshot

pytestmark = [
    pytest.mark.xdist_group("ray_cluster"),  # one worker starts the cluster once (CI: pytest -n 2 --dist loadgroup)
    pytest.mark.s3,
    pytest.mark.slow,
    # Ray Data's own DataContext warns about its deprecated options (each one) whenever it is copied to the workers
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
    pytest.mark.filterwarnings("ignore::UserWarning:ray.data.context"),
]

SHARDS = 2  # shards per job (each its own actor or task, its own checkpoint)
_MB = 1024 * 1024


# ------------------------------------------------------------------------------------------- the cluster
@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A head (no shard slots) and two workers with four ``shard`` slots each (room for every shard actor on one
    worker, so a lost worker's actors restart on the other at once); the test process is the driver.

    Session-scoped: xdist hands this module's tests to one worker (their group) but not one after the other, and a
    module-scoped cluster was started again after each interruption (12-24 s each)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    nodes = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "object_store_memory": 80 * _MB, "include_dashboard": False},
    )
    for _ in range(2):
        nodes.add_node(num_cpus=2, resources={"shard": 4}, object_store_memory=80 * _MB)
    ray.init(address=nodes.address, logging_level="ERROR", log_to_driver=False)
    nodes.wait_for_nodes()
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture
def store(cluster, s3_url) -> Store:
    url, options = s3_url
    fl.connect(url, storage_options=options).create_database("d")
    return Store(url, options)


@pytest.fixture
def lake(store, moto_endpoint, tmp_path) -> Lake:
    bucket = store.url.split("/")[2]
    return Lake({"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": f"s3://{bucket}/wh",
                 "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "s3.endpoint": moto_endpoint,
                 "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"})


ON_WORKERS = {"resources": {"shard": 1}}
#: a quarter CPU per shard actor: all four fit on the two CPUs of the worker that survives a lost node
ACTOR_CPUS = 0.25


# ------------------------------------------------------------------------------------------- the jobs
def make_delta_join(connection: fl.Connection, shard: Any) -> DeltaJoin:
    return DeltaJoin(
        connection.get_table("d.view"),
        {"o": connection.get_table("d.orders"), "c": connection.get_table("d.customers")},
        [Join("o", "c", ["cid"], how="left")],
        batch_rows=400,
        shard=shard,
    )


def make_aggregation(connection: fl.Connection, shard: Any) -> Aggregation:
    return Aggregation(connection.get_table("d.payments"), connection.get_table("d.spend"), group_by=["cid"],
                       aggregates={"n": ("count", None), "total": ("sum", "amount")}, batch_rows=300, shard=shard)


def make_lookup_join(connection: fl.Connection, shard: Any) -> LookupJoin:
    return LookupJoin(connection.get_table("d.customers"), on=["cid"], columns=["name"],
                      source=connection.get_table("d.payments"), sink=connection.get_table("d.enriched"),
                      batch_rows=300, shard=shard)


def _create_inputs(conn: fl.Connection) -> None:
    conn.create_table("d.orders", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "BIGINT"},
                      primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=4)
    conn.create_table("d.customers", schema={"cid": "BIGINT", "name": "STRING"}, primary_key=["cid"], bucket_num=4)
    conn.create_table("d.view", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "BIGINT", "name": "STRING"},
                      primary_key=["cid", "oid"], bucket_num=4)
    conn.create_table("d.payments", schema={"pid": "BIGINT", "cid": "BIGINT", "amount": "BIGINT"}, bucket_num=4,
                      bucket_keys=["cid"])
    conn.create_table("d.spend", schema={"cid": "BIGINT", "n": "BIGINT", "total": "BIGINT"}, primary_key=["cid"],
                      bucket_num=4, options={"table.merge-engine": "aggregation", "fields.n.agg": "sum",
                                             "fields.total.agg": "sum"})
    conn.create_table("d.enriched", schema={"pid": "BIGINT", "cid": "BIGINT", "amount": "BIGINT", "name": "STRING"},
                      bucket_num=4)


class Writers:
    """Random upserts and deletes of orders and customers and appended payments, in a thread, until stopped."""

    def __init__(self, conn: fl.Connection, seed: int) -> None:
        self.conn, self.rng, self.pid = conn, random.Random(seed), 0
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run)

    def round(self) -> None:
        rng, conn = self.rng, self.conn
        orders = [{"cid": rng.randrange(30), "oid": rng.randrange(20), "amount": rng.randrange(1000)}
                  for _ in range(40)]
        conn.get_table("d.orders").upsert(orders)
        conn.get_table("d.customers").upsert([{"cid": c, "name": f"n{rng.randrange(99)}"}
                                              for c in rng.sample(range(30), 5)])
        if rng.random() < 0.3:
            conn.get_table("d.orders").delete([{"cid": o["cid"], "oid": o["oid"]} for o in orders[:5]])
        if rng.random() < 0.2:
            conn.get_table("d.customers").delete([{"cid": rng.randrange(30)}])
        payments = [{"pid": self.pid + i, "cid": rng.randrange(30), "amount": rng.randrange(100)} for i in range(30)]
        self.pid += len(payments)
        conn.get_table("d.payments").append(payments)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.round()
                self.stop.wait(1.0)  # a delta join step re-probes when a writer commits meanwhile: leave it room on slow moto
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.errors.append(exc)

    def start(self) -> Writers:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        assert not self.errors, self.errors


def _delta_oracle(conn: fl.Connection) -> list[dict]:
    orders, customers = conn.get_table("d.orders").to_polars(), conn.get_table("d.customers").to_polars()
    joined = orders.join(customers, on="cid", how="left").select("cid", "oid", "amount", "name")
    return joined.sort("cid", "oid").to_dicts()


def _frame(dataset: Any) -> pl.DataFrame:
    """A Ray Dataset's blocks as one Polars frame (through Arrow, not pandas)."""
    blocks = [pl.from_arrow(block) for block in ray.get(dataset.to_arrow_refs())]
    return pl.concat([b for b in blocks if b.height]) if any(b.height for b in blocks) else blocks[0]


def _wait_for(predicate: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# ------------------------------------------------------------------------------------------- scenarios
def test_delta_join_and_aggregation_survive_a_killed_actor_and_a_lost_node(cluster, store):
    conn = store.connect()
    _create_inputs(conn)
    writers = Writers(conn, seed=1)
    for _ in range(3):
        writers.round()
    join = fluss_ray.start_job(make_delta_join, store=store, shards=SHARDS, ray_options=ON_WORKERS, poll_interval=0.1,
                               num_cpus=ACTOR_CPUS)
    spend = fluss_ray.start_job(make_aggregation, store=store, shards=SHARDS, ray_options=ON_WORKERS,
                                poll_interval=0.1, num_cpus=ACTOR_CPUS)
    try:
        writers.start()
        try:
            _wait_for(lambda: all(s.checkpoint >= 1 for s in join.status() + spend.status()), "first checkpoints")
            before = spend.status()[0]
            ray.kill(spend.actors[0], no_restart=False)  # the process dies mid-run; Ray starts it again
            ray.kill(join.actors[0], no_restart=False)
            _wait_for(lambda: spend.status()[0].restarted and join.status()[0].restarted, "the restarts")
            assert spend.status()[0].pid != before.pid
            # a whole node goes away: its shards come back on the other node, from their checkpoints
            node_id = join.status()[-1].node_id
            doomed = next(n for n in cluster.worker_nodes if n.node_id == node_id)
            cluster.remove_node(doomed)
            _wait_for(lambda: join.status(timeout_s=120)[-1].node_id != node_id, "the shard on another node")
            time.sleep(1.0)  # the writers keep writing while the shards recover
        finally:
            writers.finish()
        statuses = join.wait_caught_up(timeout_s=120) + spend.wait_caught_up(timeout_s=120)
        assert all(s.error is None for s in statuses)
        assert conn.get_table("d.view").to_polars().sort("cid", "oid").to_dicts() == _delta_oracle(conn)
        payments = conn.get_table("d.payments").to_polars()
        expected = payments.group_by("cid").agg(pl.len().cast(pl.Int64).alias("n"), pl.col("amount").sum().alias("total"))
        assert conn.get_table("d.spend").to_polars().sort("cid").to_dicts() == expected.sort("cid").to_dicts()
        final = join.stop() + spend.stop()
        assert all(not s.running for s in final)
        assert sum(s.records_read for s in final) > 0
    finally:
        for job in (join, spend):
            for actor in job.actors:
                ray.kill(actor, no_restart=True)


def test_lookup_join_as_tasks_appends_each_payment_once(cluster, store):
    conn = store.connect()
    _create_inputs(conn)
    writers = Writers(conn, seed=2)
    for _ in range(4):
        writers.round()
    first = fluss_ray.run_job_once(make_lookup_join, store=store, shards=SHARDS, ray_options=ON_WORKERS)
    writers.round()
    again = fluss_ray.run_job_once(make_lookup_join, store=store, shards=SHARDS, ray_options=ON_WORKERS)
    assert len(first) == len(again) == SHARDS
    payments = conn.get_table("d.payments").to_polars()
    enriched = conn.get_table("d.enriched").to_polars()
    assert enriched["pid"].is_duplicated().sum() == 0
    assert sorted(enriched["pid"].to_list()) == sorted(payments["pid"].to_list())
    assert sum(r.rows_appended for r in first + again) == payments.height


def test_two_tiering_tasks_racing_on_one_table_keep_the_lake_equal_to_live(cluster, store, lake):
    conn = store.connect()
    conn.create_table("d.ev", schema={"v": "BIGINT"}, bucket_num=2, bucket_keys=["v"],
                      options={"table.datalake.enabled": True})
    conn.create_table("d.kv", schema={"k": "BIGINT", "n": "BIGINT"}, primary_key=["k"], bucket_num=2,
                      options={"table.datalake.enabled": True})
    task = ray.remote(tier_table_task).options(num_cpus=0.5)
    ev, kv = conn.get_table("d.ev"), conn.get_table("d.kv")
    for i in range(2):  # each round races two tasks on each table
        ev.append([{"v": i * 10 + j} for j in range(10)])
        kv.upsert([{"k": j, "n": i} for j in range(i, i + 5)])
        racing = [task.remote(store, dict(lake.properties), lake.name, t, False, None) for t in ("d.ev", "d.ev", "d.kv", "d.kv")]
        ray.get(racing)
    reports = fluss_ray.tier_on_ray(store, lake, shards=2)  # each table as two tasks of half its buckets
    assert sorted(str(r.table) for r in reports) == ["d.ev", "d.ev", "d.kv", "d.kv"]
    lake_ev = pl.from_arrow(lake.load("d.ev").scan().to_arrow())
    assert lake_ev.select("__bucket", "__offset").is_duplicated().sum() == 0
    assert sorted(lake_ev["v"].to_list()) == sorted(ev.to_polars()["v"].to_list())
    lake_kv = _frame(fluss_ray.read_lake(lake, "d.kv"))
    assert sorted(lake_kv.select("k", "n").rows()) == sorted(kv.to_polars().select("k", "n").rows())
    for path in ("d.ev", "d.kv"):  # offsets never regress from one snapshot to the next
        table = lake.load(path)
        seen: dict = {}
        for snap in table.snapshots():
            offsets = LakeSnapshot.from_summary(snap.snapshot_id, snap.summary.additional_properties).offsets
            assert all(offsets.get(k, 0) >= o for k, o in seen.items()), (path, seen, offsets)
            seen = dict(offsets) or seen
        assert seen == {(None, b): o for b, o in conn.get_table(path).end_offsets().items()}


def test_ray_data_reads_the_live_table_per_bucket_and_the_lake(cluster, store, lake):
    conn = store.connect()
    conn.create_table("d.u", schema={"k": "BIGINT", "v": "STRING"}, primary_key=["k"], bucket_num=3,
                      options={"table.datalake.enabled": True})
    users = conn.get_table("d.u")
    users.upsert([{"k": i, "v": f"a{i}"} for i in range(50)])
    middle = users.end_offsets()
    users.upsert([{"k": i, "v": f"b{i}"} for i in range(0, 50, 3)])
    users.delete([{"k": 1}, {"k": 2}])
    source = fluss_ray.LiveTableDatasource(store, "d.u")
    assert len(source.get_read_tasks(8)) == 3  # one per bucket, whatever the parallelism asked
    state = _frame(fluss_ray.read_table("d.u", store=store))
    assert state.sort("k").to_dicts() == users.to_polars().sort("k").to_dicts()
    tail = _frame(fluss_ray.read_table("d.u", store=store, changelog=True, start_offsets=middle))
    expected = users.scan_log(start_offsets=middle)
    assert sorted(tail.select("_change_type", "_offset", "k").rows()) == sorted(
        expected.select("_change_type", "_offset", "k").rows())
    tier_table(users, lake)
    from_lake = _frame(fluss_ray.read_lake(lake, "d.u", columns=["k", "v"]))
    assert from_lake.sort("k").to_dicts() == users.to_polars().sort("k").to_dicts()


def test_a_shards_polars_pool_is_as_wide_as_the_cpus_it_reserves(cluster, store):
    """Ray sizes a worker's OMP_NUM_THREADS (Arrow's pool) to its CPUs; fluss_ray does the same for Polars' in a
    shard's actor, unless the caller's runtime_env says otherwise."""
    conn = store.connect()
    _create_inputs(conn)
    conn.create_table("d.widths", schema={"run": "STRING", "shard": "INT", "threads": "INT"}, bucket_num=1)

    def factory(run: str):
        def make(connection: fl.Connection, shard: Any) -> DeltaJoin:
            row = {"run": run, "shard": -1 if shard is None else shard.index, "threads": pl.thread_pool_size()}
            connection.get_table("d.widths").append([row])
            return make_delta_join(connection, shard)

        return make

    fluss_ray.start_job(factory("actors"), store=store, shards=2, num_cpus=ACTOR_CPUS, ray_options=ON_WORKERS).stop()
    mine = {**ON_WORKERS, "runtime_env": {"env_vars": {"POLARS_MAX_THREADS": "2"}}}
    fluss_ray.start_job(factory("theirs"), store=store, num_cpus=ACTOR_CPUS, ray_options=mine).stop()
    # tasks size theirs when asked to (they run in Ray's shared workers otherwise)
    sized = worker_options(ACTOR_CPUS, ON_WORKERS)
    fluss_ray.run_job_once(factory("task"), store=store, num_cpus=ACTOR_CPUS, ray_options=sized)
    widths = conn.get_table("d.widths").to_polars().sort("run", "shard")
    assert widths.rows() == [("actors", 0, 1), ("actors", 1, 1), ("task", -1, 1), ("theirs", -1, 2)]


def test_bad_input_is_refused_before_anything_runs(cluster, store):
    conn = store.connect()
    _create_inputs(conn)
    with pytest.raises(fl.InvalidConfigError, match="shards"):
        fluss_ray.start_job(make_delta_join, store=store, shards=0)
    with pytest.raises(fl.InvalidConfigError, match="make"):
        fluss_ray.run_job_once("not a function", store=store)  # type: ignore[arg-type]
    with pytest.raises(fl.InvalidConfigError, match="fluss_ray.Store"):
        fluss_ray.start_job(make_delta_join, store=store.url)  # type: ignore[arg-type]
    with pytest.raises(fl.InvalidConfigError, match="changelog=True"):
        fluss_ray.read_table("d.orders", store=store, start_offsets={0: 0})
    with pytest.raises(fl.InvalidConfigError, match="outside the log"):
        fluss_ray.read_table("d.orders", store=store, changelog=True, start_offsets={0: 5})
    with pytest.raises(fl.InvalidConfigError, match="no columns"):
        fluss_ray.read_table("d.orders", store=store, columns=["nope"])
    assert not ray.util.list_named_actors()
    assert conn.get_table("d.view").end_offsets() == {0: 0, 1: 0, 2: 0, 3: 0}


def test_dagster_runs_the_demo_jobs_shards_and_tiering_on_the_cluster(cluster, s3_url, moto_endpoint, tmp_path):
    """The demo's job and tiering assets with a RayCluster resource: shards as Ray tasks, still one asset each."""
    import json

    from assets.cluster import RayCluster
    from assets.jobs import ORDERS_ENRICHED_SELECT, customer_spend, orders_enriched
    from assets.lake import tier_lake
    from assets.live import customers, orders, payments
    from assets.resources import DemoScenario, LakeCatalog, LiveStore
    from assets.tables import DEMO_TABLES

    url, options = s3_url
    bucket = url.split("/")[2]
    lake_props = {"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "s3.endpoint": moto_endpoint,
                  "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1"}
    resources = {
        "live": LiveStore(url=url, storage_options=json.dumps(options), local_dir=str(tmp_path / "state")),
        "lake": LakeCatalog(uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"s3://{bucket}/wh",
                            properties=json.dumps(lake_props)),
        "demo": DemoScenario(customers=60, new_customers_per_batch=3, orders_per_batch=50),
        "ray": RayCluster(address=cluster.address, shards=SHARDS),
    }
    selection = [customers, orders, payments, orders_enriched, customer_spend, tier_lake]
    for _ in range(2):
        result = dg.materialize(selection, resources=resources)
        assert result.success
    materialized = result.asset_materializations_for_node("orders_enriched")
    assert len(materialized) == 1 and materialized[0].metadata["ray_shards"].value == SHARDS
    conn = resources["live"].connection()
    o = conn.get_table(DEMO_TABLES["orders"].path).to_polars()
    c = conn.get_table(DEMO_TABLES["customers"].path).to_polars()
    joined = o.join(c, on="customer_id", how="left", suffix="_c")
    columns = {out: src.split(".")[1] + ("_c" if src.startswith("c.") and src.split(".")[1] in o.columns else "")
               for out, src in ORDERS_ENRICHED_SELECT.items()}
    expected = joined.select([pl.col(src).alias(out) for out, src in columns.items()])
    got = conn.get_table(DEMO_TABLES["orders_enriched"].path).to_polars().select(list(columns))
    keys = ["customer_id", "order_id"]
    assert got.sort(keys).to_dicts() == expected.sort(keys).to_dicts()
    spend = conn.get_table(DEMO_TABLES["customer_spend"].path).to_polars()
    paid = conn.get_table(DEMO_TABLES["payments"].path).to_polars()
    assert int(spend["order_count"].sum()) == paid.height  # each payment counted once over both shards and runs
    lake = resources["lake"].lake()
    tiered = lake.load(DEMO_TABLES["payments"].path).scan().to_arrow().num_rows
    assert tiered == paid.height


def test_the_jobs_verb_runs_a_demo_job_in_shards_on_the_cluster_and_in_process(cluster, s3_url, tmp_path,
                                                                               monkeypatch, capsys):
    """``fluss-lake jobs run JOB``: once on Ray (tasks), continuously in this process, once again: each payment
    counted exactly once; bad input exits 2 with a message and changes nothing."""
    import json

    from assets.jobs_cli import main
    from assets.live import payments
    from assets.resources import DemoScenario, LiveStore
    from assets.tables import DEMO_TABLES

    url, options = s3_url
    monkeypatch.setenv("FLUSS_LAKE_URL", url)
    monkeypatch.setenv("FLUSS_LAKE_STORAGE_OPTIONS", json.dumps(options))
    resources = {"live": LiveStore(), "demo": DemoScenario(customers=40, new_customers_per_batch=2,
                                                           orders_per_batch=40)}
    assert dg.materialize([payments], resources=resources).success
    home = str(tmp_path / "home")
    assert main(["run", "customer_spend", "--home", home, "--once", "--shards", "2", "--ray", cluster.address]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["shard"] for line in lines] == ["0/2", "1/2"]
    assert dg.materialize([payments], resources=resources).success
    assert main(["run", "customer_spend", "--home", home, "--shards", "2", "--duration", "3",
                 "--status-every", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "stopped" in json.loads(out[-1])
    assert main(["run", "customer_spend", "--home", home, "--once", "--shards", "2"]) == 0
    conn = LiveStore().connection()
    paid = conn.get_table(DEMO_TABLES["payments"].path).to_polars()
    spend = conn.get_table(DEMO_TABLES["customer_spend"].path).to_polars()
    assert int(spend["order_count"].sum()) == paid.height
    before = conn.get_table(DEMO_TABLES["customer_spend"].path).end_offsets()
    capsys.readouterr()
    assert main(["run", "customer_spend", "--home", home, "--once", "--shards", "0"]) == 2
    assert "shards" in capsys.readouterr().err
    assert conn.get_table(DEMO_TABLES["customer_spend"].path).end_offsets() == before
