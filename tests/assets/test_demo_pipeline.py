# ruff: noqa: F811 - pytest fixtures imported from demo_fixtures are redefined as test arguments
"""The pipeline after the live tables: zero-state job assets, the lake (tiering, checks, lag sensor) and the
day-partitioned training set, called directly and materialized for real (local folder and moto S3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from demo_fixtures import SMALL, home, local_resources, s3_resources  # noqa: F401 - fixtures

import tiering
from assets import generators as gen
from assets.checks import JOB_CHECKS, LIVE_CHECKS
from assets.cluster import RayCluster
from assets.jobs import (
    JOB_ASSETS,
    JobConfig,
    customer_spend,
    fraud_risk,
    orders_enriched,
)
from assets.lake import (
    LAKE_ASSETS,
    LAKE_CHECKS,
    lagging_tables,
    lake_key,
    tiering_lag_sensor,
)
from assets.live import LIVE_ASSETS, LiveBatchConfig, customers, orders, payments
from assets.resources import DemoScenario
from assets.tables import DEMO_TABLES
from assets.training import TRAINING_ASSETS, fraud_training_set, read_training_set
from fluss_lake.exceptions import JobStateError

REPO = Path(__file__).resolve().parents[2]
UNPARTITIONED = [*LIVE_ASSETS, *JOB_ASSETS, *LAKE_ASSETS, *LIVE_CHECKS, *JOB_CHECKS, *LAKE_CHECKS]


def _table(resources, name):
    return resources["live"].connection().get_table(DEMO_TABLES[name].path)


def _meta(result, key):
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey.from_user_string(key)]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def _write_sources(resources, batch):
    ctx = dg.build_asset_context()
    for asset in (customers, orders, payments):
        asset(ctx, config=LiveBatchConfig(batch=batch), live=resources["live"], demo=resources["demo"])
    from assets.live import Customer360Config, customer_360

    customer_360(ctx, config=Customer360Config(batch=batch), live=resources["live"], demo=resources["demo"])


def _expected_enriched(resources) -> pl.DataFrame:
    c = _table(resources, "customers").to_polars().select("customer_id", pl.col("name").alias("customer_name"),
                                                           pl.col("country").alias("customer_country"), "segment")
    return (_table(resources, "orders").to_polars().join(c, on="customer_id", how="left")
            .select(list(DEMO_TABLES["orders_enriched"].schema)).sort("customer_id", "order_id"))


def _expected_spend(resources) -> pl.DataFrame:
    return (_table(resources, "payments").to_polars().group_by("customer_id").agg(
        pl.col("amount").sum().alias("total_spend"), pl.len().cast(pl.Int64).alias("order_count"),
        pl.col("amount").max().alias("max_order"), pl.col("paid_at").min().alias("first_order_at"),
        pl.col("paid_at").max().alias("last_order_at")).sort("customer_id"))


def _assert_spend_exact(resources) -> None:
    kept = _table(resources, "customer_spend").to_polars().sort("customer_id")
    want = _expected_spend(resources)
    assert kept.select("customer_id", "order_count", "first_order_at", "last_order_at").equals(
        want.select("customer_id", "order_count", "first_order_at", "last_order_at"))
    assert (kept["total_spend"] - want["total_spend"]).abs().max() < 1e-6


# ------------------------------------------------------------------ called directly
def test_job_assets_called_directly_compute_the_join_the_enrichment_and_the_spend(local_resources):
    live = local_resources["live"]
    for batch in (0, 1):
        _write_sources(local_resources, batch)
        joined = orders_enriched(config=JobConfig(), live=live, ray=RayCluster())
        scored = fraud_risk(config=JobConfig(), live=live, ray=RayCluster())
        spent = customer_spend(config=JobConfig(), live=live, ray=RayCluster())
    assert joined.metadata["strategy"].startswith("delta") and joined.metadata["steps"] == 1
    assert _table(local_resources, "orders_enriched").to_polars().sort("customer_id", "order_id").equals(
        _expected_enriched(local_resources))
    _assert_spend_exact(local_resources)
    assert spent.metadata["state_bytes"] < 2_000  # offsets only
    risk = _table(local_resources, "fraud_risk").scan_log().sort("payment_id")
    pays = _table(local_resources, "payments").scan_log().sort("payment_id")
    assert risk["payment_id"].equals(pays["payment_id"]) and scored.metadata["rows_appended"] == SMALL["orders_per_batch"]
    assert risk["risk_score"].is_between(0, 1).all() and set(risk["risk_band"]) <= {"low", "medium", "high"}
    assert risk["ip_mismatch"].equals(pays["ip_country"] != pays["card_country"], check_names=False)
    # the score separates the labelled frauds (known only to the payments log) from the rest
    labelled = risk.join(pays.select("payment_id", "is_fraud"), on="payment_id")
    means = labelled.group_by("is_fraud").agg(pl.col("risk_score").mean()).sort("is_fraud")["risk_score"]
    assert means[1] > means[0]

    # nothing new: every job runs no step and the results stay as they are (no double count)
    again = [asset(config=JobConfig(), live=live, ray=RayCluster()) for asset in (orders_enriched, fraud_risk, customer_spend)]
    assert [r.metadata["steps"] for r in again] == [0, 0, 0]
    _assert_spend_exact(local_resources)
    assert _table(local_resources, "fraud_risk").scan_log().height == risk.height


def test_the_interim_feed_gap_is_closed_offsets_live_in_the_store(local_resources):
    live = local_resources["live"]
    _write_sources(local_resources, 0)
    connection = live.connection()
    # a spend table fed earlier by something else (the old interim feed): the job rebuilds it instead of adding
    from assets.live import open_table

    spend = open_table(connection, DEMO_TABLES["customer_spend"])
    spend.upsert([{"customer_id": 1, "total_spend": 1e6, "order_count": 99}],
                 target_columns=["customer_id", "total_spend", "order_count"])
    first = customer_spend(config=JobConfig(), live=live, ray=RayCluster())
    assert first.metadata["reset"] is True
    _assert_spend_exact(local_resources)
    # Dagster's records play no part: a new resource (a new process, a fresh instance) resumes from the store
    from assets.resources import LiveStore

    fresh = LiveStore(url=live.resolved_url())
    _write_sources(local_resources, 1)
    second = customer_spend(config=JobConfig(), live=fresh, ray=RayCluster())
    assert second.metadata["reset"] is False and second.metadata["records_read"] == SMALL["orders_per_batch"]
    _assert_spend_exact(local_resources)


def test_a_recreated_input_is_a_clear_error_until_reset_and_changes_nothing(local_resources):
    live = local_resources["live"]
    _write_sources(local_resources, 0)
    orders_enriched(config=JobConfig(), live=live, ray=RayCluster())
    connection = live.connection()
    rows = _table(local_resources, "customers").to_polars()
    connection.drop_table(DEMO_TABLES["customers"].path)
    from assets.live import open_table

    open_table(connection, DEMO_TABLES["customers"]).upsert(rows.head(10))
    before = _table(local_resources, "orders_enriched").to_polars()
    with pytest.raises(JobStateError, match="re-created") as info:
        orders_enriched(config=JobConfig(), live=live, ray=RayCluster())
    assert any("reset: true" in note for note in info.value.__notes__)
    assert _table(local_resources, "orders_enriched").to_polars().equals(before)
    result = orders_enriched(config=JobConfig(reset=True), live=live, ray=RayCluster())
    assert result.metadata["reset"] is True
    assert _table(local_resources, "orders_enriched").to_polars().sort("customer_id", "order_id").equals(
        _expected_enriched(local_resources))


# ------------------------------------------------------------------ the lag sensor
def test_the_lag_sensor_requests_a_run_only_past_freshness_and_never_twice_for_the_same_offsets(local_resources):
    live, lake = local_resources["live"], local_resources["lake"]
    _write_sources(local_resources, 0)
    connection = live.connection()
    now = connection.clock()
    # nothing tiered yet, but every table is younger than its freshness (1 min): no run
    assert lagging_tables(connection, lake.lake(), now_ms=now) == {}
    assert set(lagging_tables(connection, lake.lake(), now_ms=now + 61_000)) == {
        "customers", "orders", "payments", "customer_360"}

    def tick(cursor):
        context = dg.build_sensor_context(cursor=cursor, resources={"live": live, "lake": lake})
        return tiering_lag_sensor(context), context.cursor

    result, cursor = tick(None)
    assert isinstance(result, dg.SkipReason) and cursor is None
    connection.alter_table(DEMO_TABLES["payments"].path, set_options={"table.datalake.freshness": "1 s"})
    time.sleep(1.2)
    result, cursor = tick(None)
    assert isinstance(result, dg.RunRequest) and result.asset_selection == [lake_key("payments")]
    assert json.loads(cursor) == {"payments": {str(b): o for b, o in _table(local_resources, "payments")
                                               .end_offsets().items()}}
    # the same lag at the same offsets: no second run (the cursor), and the run key would be the same
    again, same_cursor = tick(cursor)
    assert isinstance(again, dg.SkipReason) and same_cursor == cursor
    assert tick(None)[0].run_key == result.run_key
    # new payments move the offsets: one new run with a new key
    payments(dg.build_asset_context(), config=LiveBatchConfig(batch=1), live=live, demo=local_resources["demo"])
    newer, newer_cursor = tick(cursor)
    assert isinstance(newer, dg.RunRequest) and newer.run_key != result.run_key and newer_cursor != cursor
    # once tiered, the lag is zero and nothing is requested
    assert dg.materialize(LAKE_ASSETS, resources=local_resources, selection=[lake_key("payments")]).success
    assert isinstance(tick(None)[0], dg.SkipReason)


# ------------------------------------------------------------------ materialize everything
def _day_window_resources(resources):
    return {**resources, "demo": DemoScenario(**SMALL, batch_window_minutes=24 * 60)}  # batch n = day n + 1


def test_the_whole_demo_materializes_then_three_training_days_backfill_from_the_cli(local_resources, home):
    resources = _day_window_resources(local_resources)
    instance = dg.DagsterInstance.ephemeral()
    for batch in range(3):
        result = dg.materialize([*LIVE_ASSETS, *JOB_ASSETS, *LIVE_CHECKS, *JOB_CHECKS], resources=resources,
                                instance=instance)
        assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    assert _meta(result, "orders")["batch"] == 2
    result = dg.materialize(UNPARTITIONED, resources=resources, instance=instance,
                            selection=dg.AssetSelection.groups("lake"))
    evaluations = result.get_asset_check_evaluations()
    assert result.success and len(evaluations) == len(LAKE_CHECKS)
    assert [(e.asset_key.to_user_string(), e.check_name) for e in evaluations if not e.passed] == []
    lake = resources["lake"].lake()
    assert _meta(result, "lake/payments")["dagster/row_count"] == 3 * SMALL["orders_per_batch"]
    assert tiering.read_lake(lake, "c360.customer_spend").collect().height == \
        _table(resources, "customer_spend").to_polars().height

    # tiering the payments made their days the training set's partitions (derived from the data)
    assert instance.get_dynamic_partitions("fraud_training_days") == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert _meta(result, "lake/payments")["training_days_added"] == ["2026-11-01", "2026-11-02", "2026-11-03"]

    # backfill the three days in one run with the CLI, on the embedded default (the home's own Dagster instance,
    # which has no partitions yet: the backfill adds the lake's days first)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-m", "assets.cli", "backfill", "--home", str(home),
                          "--from", "2026-11-01", "--to", "2026-11-03"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2026-11-01 .. 2026-11-03 (3 days)" in out.stdout and "succeeded" in out.stdout
    runs = dg.DagsterInstance.from_config(str(home / "dagster")).get_runs()
    assert len(runs) == 1 and runs[0].tags["dagster/asset_partition_range_end"] == "2026-11-03"  # one run

    scenario = resources["demo"].scenario()
    connection = resources["live"].connection()
    for batch, day in enumerate(("2026-11-01", "2026-11-02", "2026-11-03")):
        frame = read_training_set(connection, day)
        paid = gen.payments(scenario, batch)
        assert frame["payment_id"].sort().equals(paid["payment_id"].sort())
        assert frame["is_fraud"].sum() == paid["is_fraud"].sum()
        # point in time: a payment on day n + 1 sees spend and profile as of the end of day n, never its own day
        before = (pl.concat([gen.payments(scenario, b) for b in range(batch)]) if batch else paid.clear())
        counts = before.group_by("customer_id").agg(pl.len().cast(pl.Int64).alias("want"))
        got = frame.join(counts, on="customer_id", how="left")
        assert got["spend__order_count"].equals(got["want"], check_names=False)
        sessions = pl.concat([gen.stream(scenario, "sessions", b).with_columns(pl.lit(b).alias("b"))
                              for b in range(batch)]) if batch else None
        if sessions is None:
            assert frame["c360__sessions_7d"].null_count() == frame.height
        else:
            last = sessions.sort("b").unique("customer_id", keep="last").select("customer_id", "sessions_7d")
            got = frame.join(last, on="customer_id", how="left")
            assert got["c360__sessions_7d"].equals(got["sessions_7d"], check_names=False)
            assert got["c360__sessions_7d"].null_count() < got.height


@pytest.mark.s3
def test_the_whole_demo_on_moto_s3_with_the_lake_on_s3(s3_resources):
    resources = _day_window_resources(s3_resources)
    instance = dg.DagsterInstance.ephemeral()
    for _ in range(2):
        assert dg.materialize([*LIVE_ASSETS, *JOB_ASSETS], resources=resources, instance=instance).success
    result = dg.materialize(UNPARTITIONED, resources=resources, instance=instance,
                            selection=dg.AssetSelection.groups("lake") | dg.AssetSelection.groups("jobs"))
    assert result.success
    assert [(e.asset_key.to_user_string(), e.check_name) for e in result.get_asset_check_evaluations()
            if not e.passed] == []
    assert resources["lake"].lake().load("c360.payments").location().startswith("s3://")
    assert instance.get_dynamic_partitions("fraud_training_days") == ["2026-11-01", "2026-11-02"]
    training = dg.materialize([*TRAINING_ASSETS], resources=resources, instance=instance, partition_key="2026-11-02")
    assert training.success
    frame = read_training_set(resources["live"].connection(), "2026-11-02")
    assert frame.height == SMALL["orders_per_batch"] and frame["spend__order_count"].null_count() < frame.height
    assert resources["live"].connection().url.startswith("s3://")
    assert fraud_training_set.partitions_def.get_partition_keys(dynamic_partitions_store=instance) == [
        "2026-11-01", "2026-11-02"]
