"""Delta join behaviour around the oracle test: restart in a new process, one instance per job, explain() and
the stateful fallback, bad configurations, continuous runs with a concurrent writer, S3."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.jobs import DeltaJoin, Join, StatefulJoin, explain_join, join

REPO = Path(__file__).resolve().parents[2]


def _tables(conn: fl.Connection) -> tuple[fl.Table, fl.Table, fl.Table]:
    if not conn.database_exists("shop"):
        conn.create_database("shop")
        conn.create_table("shop.orders", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "INT"},
                          primary_key=["cid", "oid"], bucket_keys=["cid"], bucket_num=3)
        conn.create_table("shop.customers", schema={"cid": "BIGINT", "name": "STRING"}, primary_key=["cid"],
                          bucket_num=2)
        conn.create_table("shop.view", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "INT", "name": "STRING"},
                          primary_key=["cid", "oid"], bucket_num=2)
    return conn.get_table("shop.orders"), conn.get_table("shop.customers"), conn.get_table("shop.view")


def _want(orders: fl.Table, customers: fl.Table, how: str = "left") -> pl.DataFrame:
    return orders.to_polars().join(customers.to_polars(), on="cid", how=how).sort("cid", "oid")


def _job(conn: fl.Connection, **kwargs) -> DeltaJoin:
    orders, customers, view = _tables(conn)
    return DeltaJoin(view, {"o": orders, "c": customers}, [Join("o", "c", ["cid"], how="left")], **kwargs)


def test_restart_in_a_new_process_resumes_from_the_checkpoint(tmp_path) -> None:
    path = str(tmp_path / "lake")
    conn = fl.connect(path)
    orders, customers, view = _tables(conn)
    orders.upsert([{"cid": c, "oid": o, "amount": o} for c in range(20) for o in range(5)])
    customers.upsert([{"cid": c, "name": f"c{c}"} for c in range(0, 20, 2)])
    child = textwrap.dedent(f"""
        import fluss_lake as fl
        from fluss_lake.jobs import DeltaJoin, Join
        conn = fl.connect({path!r})
        t = conn.get_table
        job = DeltaJoin(t("shop.view"), {{"o": t("shop.orders"), "c": t("shop.customers")}},
                        [Join("o", "c", ["cid"], how="left")], batch_rows=16)
        print(job.run_once(max_steps=3).steps)
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=REPO, check=False,
                         env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"
    job = _job(conn, batch_rows=16)  # resumes: the first three steps are not repeated
    assert job.checkpoint.number == 2 and sum(job.offsets("o").values()) == 48
    assert job.lag()["o"] == 100 - 48  # records not consumed yet
    customers.delete([{"cid": 0}])
    customers.upsert([{"cid": 1, "name": "one"}])
    job.run_once()
    assert job.lag() == {"o": 0, "c": 0}
    assert view.to_polars().sort("cid", "oid").equals(_want(orders, customers).select(view.schema.names))
    checkpoints = [n for n in conn.store.list(f".jobs/{job.name}") if n.startswith("ckpt-")]
    assert len(checkpoints) == 2  # restart reads one small object; the folder does not grow
    assert job.state_bytes() < 1024


def test_a_second_instance_of_a_job_is_stopped(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    orders, _customers, _view = _tables(conn)
    first, second = _job(conn), _job(conn)
    orders.upsert([{"cid": 1, "oid": 1, "amount": 1}])
    first.run_once()
    with pytest.raises(fl.JobConflictError, match="another instance"):
        second.run_once()


def test_input_recreated_since_the_checkpoint(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    orders, _customers, _view = _tables(conn)
    orders.upsert([{"cid": 1, "oid": 1, "amount": 1}])
    _job(conn).run_once()
    conn.drop_table("shop.customers")
    conn.create_table("shop.customers", schema={"cid": "BIGINT", "name": "STRING"}, primary_key=["cid"])
    with pytest.raises(fl.JobStateError, match="reset"):
        _job(conn)


def test_continuous_run_with_a_concurrent_writer(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    orders, customers, view = _tables(conn)
    job = _job(conn, batch_rows=7)
    stop = threading.Event()
    runner = threading.Thread(target=job.run, args=(stop,), kwargs={"poll_interval": 0.01})
    runner.start()
    try:
        for i in range(30):
            orders.upsert([{"cid": i % 4, "oid": i % 9, "amount": i}])
            if i % 3 == 0:
                customers.upsert([{"cid": i % 4, "name": f"n{i}"}])
            if i % 5 == 4:
                customers.delete([{"cid": (i + 1) % 4}])
                orders.delete([{"cid": i % 4, "oid": (i + 2) % 9}])
    finally:
        stop.set()
        runner.join(60)
    job.run_once()
    assert view.to_polars().sort("cid", "oid").equals(_want(orders, customers).select(view.schema.names))


def test_explain_and_the_stateful_fallback(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    conn.create_database("d")
    conn.create_table("d.orders", schema={"oid": "INT", "cid": "INT", "amount": "INT"}, primary_key=["oid"])
    conn.create_table("d.customers", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    conn.create_table("d.view", schema={"oid": "INT", "cid": "INT", "name": "STRING"}, primary_key=["oid"])
    t = conn.get_table
    args = (t("d.view"), {"o": t("d.orders"), "c": t("d.customers")}, [Join("o", "c", ["cid"])])
    why = explain_join(*args)
    assert not why.delta and why.strategy == "rejected"
    assert "join columns ['cid'] of o (d.orders) contain neither its primary key ['oid']" in why.reasons[0]
    assert "probe c (d.customers) by ['cid']: lookup by primary key" in str(why)
    with pytest.raises(fl.JoinNotSupportedError, match="fallback='stateful'"):
        join(*args)
    with pytest.raises(fl.JoinNotSupportedError, match="contain neither"):
        DeltaJoin(*args)
    job = join(*args, fallback="stateful")
    assert isinstance(job, StatefulJoin) and job.explain().strategy == "stateful"
    assert "stateful regular join" in str(job.explain()) and "not delta:" in str(job.explain())
    t("d.customers").upsert([{"cid": 1, "name": "a"}])
    t("d.orders").upsert([{"oid": i, "cid": 1, "amount": i} for i in range(100)])
    small = job.run_once() and job.state_bytes()
    t("d.orders").upsert([{"oid": i, "cid": 1, "amount": i} for i in range(100, 1000)])
    job.run_once()
    assert job.state_bytes() > small  # the stateful join's state grows with its inputs
    assert t("d.view").to_polars().height == 1000


def test_bad_joins_are_rejected_and_change_nothing(tmp_path) -> None:
    conn = fl.connect(str(tmp_path))
    orders, customers, view = _tables(conn)
    orders.upsert([{"cid": 1, "oid": 1, "amount": 1}])
    conn.create_table("shop.events", schema={"cid": "BIGINT", "x": "INT"})
    conn.create_table("shop.narrow", schema={"cid": "BIGINT", "amount": "INT"}, primary_key=["cid"])
    conn.create_table("shop.agg", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "INT", "name": "STRING"},
                      primary_key=["cid", "oid"], options={"table.merge-engine": "first_row"})
    conn.create_table("shop.nodel", schema={"cid": "BIGINT", "oid": "BIGINT", "amount": "INT", "name": "STRING"},
                      primary_key=["cid", "oid"], options={"table.delete.behavior": "ignore"})
    t = conn.get_table
    snapshot = {n: t(f"shop.{n}").scan_log() for n in conn.list_tables("shop")}
    ins = {"o": orders, "c": customers}
    cases = [
        (lambda: DeltaJoin(view, ins, [Join("o", "c", ["cid"], how="full")]), fl.InvalidConfigError, "how='full'"),
        (lambda: DeltaJoin(view, {"c": customers, "o": orders}, [Join("c", "o", ["cid"], how="left")]),
         fl.InvalidConfigError,
         "whole primary key"),
        (lambda: DeltaJoin(t("shop.narrow"), ins, [Join("o", "c", ["cid"])]), fl.InvalidConfigError,
         "does not cover the primary key of input o"),
        (lambda: DeltaJoin(t("shop.agg"), ins, [Join("o", "c", ["cid"])]), fl.InvalidConfigError, "default merge"),
        (lambda: DeltaJoin(t("shop.nodel"), ins, [Join("o", "c", ["cid"])]), fl.InvalidConfigError, "allow deletes"),
        (lambda: DeltaJoin(view, ins, [Join("o", "x", ["cid"])]), fl.InvalidConfigError, "unknown input"),
        (lambda: DeltaJoin(view, ins, [Join("o", "c", {"cid": "nope"})]), fl.InvalidConfigError, "no column"),
        (lambda: DeltaJoin(view, {"o": orders, "e": t("shop.events")}, [Join("o", "e", ["cid"])],
                           select={"name": "o.amount"}), fl.JoinNotSupportedError, "log table"),
        (lambda: DeltaJoin(view, ins, [Join("o", "c", ["cid"], how="left")], condition=pl.col("o.amount") > 0),
         fl.InvalidConfigError, "INNER joins only"),
        (lambda: DeltaJoin(view, ins, [Join("o", "c", ["cid"])], name="bad name"), fl.InvalidNameError, "not allowed"),
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()
    assert all(t(f"shop.{n}").scan_log().equals(f) for n, f in snapshot.items())
    assert conn.store.list(".jobs") == []


@pytest.mark.s3
def test_delta_join_on_s3(s3_url) -> None:
    url, options = s3_url
    conn = fl.connect(url, storage_options=options)
    orders, customers, _view = _tables(conn)
    orders.upsert([{"cid": c, "oid": o, "amount": o} for c in range(4) for o in range(3)])
    customers.upsert([{"cid": c, "name": f"c{c}"} for c in range(3)])
    _job(conn, batch_rows=5).run_once(max_steps=1)
    customers.delete([{"cid": 2}])
    conn2 = fl.connect(url, storage_options=options)
    _job(conn2).run_once()
    got = conn2.get_table("shop.view").to_polars().sort("cid", "oid")
    assert got.equals(_want(orders, customers).select(got.columns))


def test_deleted_key_reads_skip_batches_without_deletes(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys deleted in the pending changelog are read from the batches that have deletes only (their headers
    count them); the result is still the batch join."""
    import fluss_lake.log.log_tablet as log_tablet_module

    conn = fl.connect(tmp_path)
    orders, customers, view = _tables(conn)
    for start in range(0, 60, 10):  # six insert-only batches per table
        orders.upsert([{"cid": i % 7, "oid": i, "amount": i} for i in range(start, start + 10)])
        customers.upsert([{"cid": i, "name": f"c{i}"} for i in range(start // 10, start // 10 + 2)])
    orders.delete([{"cid": 3, "oid": 3}])
    customers.delete([{"cid": 2}])
    decoded: list[int] = []
    original = log_tablet_module.LogTablet._batch

    def counting(self, base, columns, **kwargs):
        decoded.append(base)
        return original(self, base, columns, **kwargs)

    job = _job(conn, batch_rows=1000)
    monkeypatch.setattr(log_tablet_module.LogTablet, "_batch", counting)
    keys = {alias: job._deleted_keys(alias, job._ranges(alias, 1 << 62)) for alias in job.inputs}
    assert sorted(keys["o"].rows()) == [(3, 3)] and keys["c"].rows() == [(2,)]
    assert len(decoded) == 2  # one batch with a delete per table; the twelve insert batches stay unread
    job.run_once()
    got = view.to_polars().sort("cid", "oid")
    assert got.equals(_want(orders, customers).select(got.columns))


@pytest.mark.parametrize("slice_rows", [262_144, 4])
def test_deleted_keys_of_all_buckets_come_from_few_scans(tmp_path, monkeypatch: pytest.MonkeyPatch, slice_rows) -> None:
    """Delete records in every bucket are found with one scan of all the buckets' ranges while they fit in a slice
    (a small step's fixed cost), and with slices of at most `slice_rows` records when they do not; the result is
    still the batch join."""
    import fluss_lake.jobs.delta_join as delta_join_module

    conn = fl.connect(tmp_path)
    orders, customers, view = _tables(conn)
    orders.upsert([{"cid": i % 7, "oid": i, "amount": i} for i in range(30)])
    customers.upsert([{"cid": i, "name": f"c{i}"} for i in range(7)])
    gone = [{"cid": i % 7, "oid": i} for i in range(0, 30, 4)]  # spread over the three buckets of orders
    orders.delete(gone)
    job = _job(conn, batch_rows=1)
    monkeypatch.setattr(delta_join_module, "_DELETE_SLICE_ROWS", slice_rows)
    ranges = job._ranges("o", 1 << 62)
    assert len(ranges) == 3
    scans: list[dict] = []
    original = fl.Table.scan_log

    def counting(self, *args, **kwargs):
        scans.append(kwargs.get("end_offsets") or {})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(fl.Table, "scan_log", counting)
    keys = job._deleted_keys("o", ranges)
    assert sorted(keys.rows()) == sorted((g["cid"], g["oid"]) for g in gone)
    records = sum(end - start for start, end in ranges.values())
    if slice_rows >= records:
        assert len(scans) == 1
    else:
        assert records / slice_rows <= len(scans) <= records / slice_rows + len(ranges)
    monkeypatch.setattr(fl.Table, "scan_log", original)
    job.run_once()
    got = view.to_polars().sort("cid", "oid")
    assert got.equals(_want(orders, customers).select(got.columns))


@pytest.mark.parametrize("defer", [True, False])
def test_a_backlog_writes_each_result_row_once(tmp_path, defer) -> None:
    """Inputs written before the job starts: a change probes rows whose own changes the job has not read yet.
    Their tuples are left to those changes (lookups return each row's changelog offset), so every result row is
    written once; without deferring, rows are derived again by the later change (the old behaviour, kept by
    ``emit_per_input``)."""
    conn = fl.connect(tmp_path)
    orders, customers, view = _tables(conn)
    for start in range(0, 300, 60):  # interleaved: each side's changes are spread over the logs
        orders.upsert([{"cid": (o * 7) % 50, "oid": o, "amount": o} for o in range(start, start + 60)])
        customers.upsert([{"cid": c, "name": f"c{c}"} for c in range(start // 6, start // 6 + 10) if c % 9])
    orders.upsert([{"cid": 7, "oid": 700, "amount": -1}])  # read last: probes of customer 7 find it unread
    job = _job(conn, batch_rows=40)
    job._defer_pending = defer
    report = job.run_once()
    want = _want(orders, customers)
    assert view.to_polars().sort("cid", "oid").equals(want)
    if defer:
        assert report.rows_upserted == want.height
    else:
        assert report.rows_upserted > want.height * 1.3
    assert job.run_once().rows_upserted == 0


@pytest.mark.parametrize("batch_rows", [10_000, 2])
def test_a_step_that_takes_the_whole_backlog_reads_each_input_once(tmp_path, monkeypatch, batch_rows) -> None:
    """When an input's whole backlog fits the step, its delete keys come from the -D records of the changes the step
    reads (one scan per input, no second pass); a backlog larger than the step still scans its deletes first. The
    result, deletes on both sides included, is the batch join either way."""
    conn = fl.connect(tmp_path)
    orders, customers, view = _tables(conn)
    job = _job(conn, batch_rows=batch_rows)
    orders.upsert([{"cid": i % 5, "oid": i, "amount": i} for i in range(20)])
    customers.upsert([{"cid": i, "name": f"c{i}"} for i in range(5)])
    job.run_once()
    orders.delete([{"cid": 1, "oid": 1}, {"cid": 2, "oid": 7}])
    customers.delete([{"cid": 3}])
    customers.upsert([{"cid": 4, "name": "new"}])
    scans: list[str] = []
    original = fl.Table.scan_log

    def counting(self, *args, **kwargs):
        scans.append(self.path.table)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(fl.Table, "scan_log", counting)
    report = job.run_once()
    monkeypatch.setattr(fl.Table, "scan_log", original)
    if batch_rows >= 10_000:
        assert report.steps == 1 and sorted(scans) == ["customers", "orders"]
    else:  # orders' 2 records fit; customers' 3 (-D, -U, +U) do not: a delete scan, then 2 steps of changes
        assert report.steps == 2 and scans.count("orders") == 1 and scans.count("customers") == 3
    got = view.to_polars().sort("cid", "oid")
    assert got.equals(_want(orders, customers).select(got.columns))
    assert got.filter(pl.col("cid") == 3)["name"].null_count() == 4 and (got["name"] == "new").sum() == 4
