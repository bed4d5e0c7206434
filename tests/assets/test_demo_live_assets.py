# ruff: noqa: F811 - pytest fixtures imported from demo_fixtures are redefined as test arguments
"""Live-table assets at two levels: called directly, and materialized for real (local folder and moto S3)."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest
from demo_fixtures import (  # noqa: F401 - fixtures
    home,
    local_resources,
    s3_resources,
    same_states,
    snapshot_tables,
)

from assets import generators as gen
from assets.checks import LIVE_CHECKS
from assets.live import (
    LIVE_ASSETS,
    customer_360,
    customers,
    open_table,
    orders,
    payments,
)
from assets.tables import DEMO_TABLES, SOURCE_TABLES, STREAM_COLUMNS
from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError


def _table(resources, name):
    return resources["live"].connection().get_table(DEMO_TABLES[name].path)


def _meta(result, asset):
    [event] = result.asset_materializations_for_node(asset)
    return {key: value.value for key, value in event.metadata.items()}


# ------------------------------------------------------------------ called directly
def test_assets_called_directly_write_the_generated_batch(local_resources):
    scenario = local_resources["demo"].scenario()
    result = customers(dg.build_asset_context(), config=_config(batch=0), **_res(local_resources))
    table = _table(local_resources, "customers")
    assert table.to_polars().sort("customer_id").equals(gen.customers(scenario, 0))
    assert result.metadata["batch"] == 0 and result.metadata["rows_written"] == scenario.customers
    assert result.metadata["dagster/row_count"] == scenario.customers

    streams = ["sessions", "marketing"]
    result = customer_360(dg.build_asset_context(),
                          config=_c360_config(batch=0, streams=streams), **_res(local_resources))
    state = _table(local_resources, "customer_360").to_polars()
    sessions, marketing = gen.stream(scenario, "sessions", 0), gen.stream(scenario, "marketing", 0)
    assert set(state["customer_id"]) == set(sessions["customer_id"]) | set(marketing["customer_id"])
    # each stream wrote only its own columns: the columns of streams not applied are null everywhere
    for name, columns in STREAM_COLUMNS.items():
        if name not in streams:
            assert state.select(pl.all_horizontal(pl.col(list(columns)).is_null())).to_series().all(), name
    mine = state.join(sessions, on="customer_id", suffix="_expected")
    for column in STREAM_COLUMNS["sessions"]:
        assert mine[column].equals(mine[f"{column}_expected"], check_names=False)
    assert result.metadata["rows_per_stream"].data == {"sessions": sessions.height, "marketing": marketing.height}


def _config(**kwargs):
    from assets.live import LiveBatchConfig

    return LiveBatchConfig(**kwargs)


def _c360_config(**kwargs):
    from assets.live import Customer360Config

    return Customer360Config(**kwargs)


def _res(resources):
    return {"live": resources["live"], "demo": resources["demo"]}


def test_a_partial_update_keeps_the_other_streams_columns(local_resources):
    scenario = local_resources["demo"].scenario()
    for streams in (["transactions"], ["telemetry"]):
        customer_360(dg.build_asset_context(), config=_c360_config(batch=0, streams=streams),
                     **_res(local_resources))
    state = _table(local_resources, "customer_360").to_polars()
    tickets, telemetry = gen.stream(scenario, "transactions", 0), gen.stream(scenario, "telemetry", 0)
    both = set(tickets["customer_id"]) & set(telemetry["customer_id"])
    assert both, "the scenario should give customers touched by both streams"
    rows = state.filter(pl.col("customer_id").is_in(list(both)))
    assert rows["txn_count_30d"].null_count() == 0 and rows["app_version"].null_count() == 0
    log = _table(local_resources, "customer_360").changelog()
    assert log.filter(pl.col("_change_type") == "update_after").height == len(both)


# ------------------------------------------------------------------ materialize
def test_materialize_the_demo_twice_then_rerun_a_batch(local_resources):
    instance = dg.DagsterInstance.ephemeral()
    everything = [*LIVE_ASSETS, *LIVE_CHECKS]
    first = dg.materialize(everything, resources=local_resources, instance=instance)
    second = dg.materialize(everything, resources=local_resources, instance=instance)
    assert first.success and second.success
    assert [_meta(r, "orders")["batch"] for r in (first, second)] == [0, 1]
    for result in (first, second):
        evaluations = result.get_asset_check_evaluations()
        assert len(evaluations) == len(LIVE_CHECKS) and all(e.passed for e in evaluations)
    scenario = local_resources["demo"].scenario()
    assert _table(local_resources, "customers").to_polars().height == scenario.customers_at(1)
    assert _table(local_resources, "orders").to_polars().height == 2 * scenario.orders_per_batch
    assert _table(local_resources, "payments").to_polars().height == 2 * scenario.orders_per_batch
    c360 = _table(local_resources, "customer_360").to_polars()
    assert c360["updated_at"].max() == pl.Series([scenario.window(1)[1]]).cast(pl.Datetime("ms", "UTC"))[0]

    # re-running the latest batch of every source changes no state and appends no payment twice
    before = {name: _table(local_resources, name).to_polars().sort(next(iter(DEMO_TABLES[name].schema)))
              for name in SOURCE_TABLES}
    rerun = dg.materialize(everything, resources=local_resources, instance=instance, run_config=dg.RunConfig(ops={
        name: {"config": {"batch": 1}} for name in ("customers", "orders", "payments", "customer_360")}))
    assert rerun.success and all(e.passed for e in rerun.get_asset_check_evaluations())  # payment_ids_unique too
    assert _meta(rerun, "payments")["rows_written"] == 0
    assert _meta(rerun, "payments")["already_present"] == scenario.orders_per_batch
    for name, rows in before.items():
        after = _table(local_resources, name).to_polars().sort(next(iter(DEMO_TABLES[name].schema)))
        assert after.equals(rows), name
    # an older batch restates its own rows (as a replayed source would): orders of batch 0 are its own keys
    assert dg.materialize([orders], resources=local_resources, instance=instance,
                          run_config=dg.RunConfig(ops={"orders": {"config": {"batch": 0}}})).success
    assert _table(local_resources, "orders").to_polars().sort("order_id").equals(before["orders"])


def test_several_batches_in_one_run_write_what_the_runs_one_by_one_write(local_resources, tmp_path):
    from assets.resources import LiveStore

    instance = dg.DagsterInstance.ephemeral()
    one_run = {"ops": {name: {"config": {"batches": 3}} for name in SOURCE_TABLES}}
    result = dg.materialize([*LIVE_ASSETS, *LIVE_CHECKS], resources=local_resources, instance=instance,
                            run_config=one_run)
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    meta = _meta(result, "payments")
    scenario = local_resources["demo"].scenario()
    assert (meta["batch"], meta["batches"], meta["rows_written"]) == (2, 3, 3 * scenario.orders_per_batch)
    assert meta["event_window"].startswith("2026-11-01T00:00:00") and "2026-11-01T03:00:00" in meta["event_window"]
    # the same three batches written by three runs: the same state in every table, but for customer_360's
    # updated_at, which is the end of the window a write covers (all three batches here)
    apart = {**local_resources, "live": LiveStore(url=str(tmp_path / "apart"))}
    separate = dg.DagsterInstance.ephemeral()
    for _ in range(3):
        assert dg.materialize([*LIVE_ASSETS], resources=apart, instance=separate).success
    for name in SOURCE_TABLES:
        order = list(DEMO_TABLES[name].primary_key or ("payment_id",))
        together = _table(local_resources, name).to_polars().sort(order)
        one_by_one = _table(apart, name).to_polars().sort(order)
        if name == "customer_360":
            span_end = pl.Series([scenario.window(2)[1]]).cast(pl.Datetime("ms", "UTC"))[0]
            assert (together["updated_at"] == span_end).all()
            assert (one_by_one["updated_at"] <= span_end).all() and (one_by_one["updated_at"] < span_end).any()
            together, one_by_one = together.drop("updated_at"), one_by_one.drop("updated_at")
        assert together.equals(one_by_one), name
    # the next run continues after the last batch written
    assert _meta(dg.materialize([payments], resources=local_resources, instance=instance), "payments")["batch"] == 3
    with pytest.raises(InvalidConfigError, match="batches=0 must be >= 1"):
        payments(dg.build_asset_context(), config=_config(batches=0), **_res(local_resources))


@pytest.mark.s3
def test_materialize_the_demo_on_moto_s3(s3_resources):
    result = dg.materialize([*LIVE_ASSETS, *LIVE_CHECKS], resources=s3_resources)
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    assert _meta(result, "orders")["store"].startswith("s3://")
    scenario = s3_resources["demo"].scenario()
    assert _table(s3_resources, "payments").to_polars().height == scenario.orders_per_batch
    assert _table(s3_resources, "customer_360").to_polars()["customer_id"].is_unique().all()


# ------------------------------------------------------------------ bad input changes nothing
def test_bad_input_is_a_clear_error_and_changes_no_table(local_resources, snapshot_tables, same_states):
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([*LIVE_ASSETS], resources=local_resources, instance=instance).success
    connection = local_resources["live"].connection()
    before = snapshot_tables(connection)
    context = lambda: dg.build_asset_context(instance=instance)

    with pytest.raises(InvalidConfigError, match="unknown streams"):
        customer_360(context(), config=_c360_config(streams=["sessions", "clickstream"]), **_res(local_resources))
    with pytest.raises(InvalidConfigError, match="must be >= 0"):
        orders(context(), config=_config(batch=-1), **_res(local_resources))
    with pytest.raises(InvalidConfigError, match="ISO timestamp"):
        payments(context(), config=_config(), live=local_resources["live"],
                 demo=type(local_resources["demo"])(epoch="soon"))
    same_states(before, snapshot_tables(connection))

    # a stored table that does not match the declaration is never written into
    connection.drop_table(DEMO_TABLES["orders"].path)
    connection.create_table(DEMO_TABLES["orders"].path, schema={"order_id": "BIGINT", "amount": "DOUBLE"},
                            primary_key=["order_id"])
    connection.get_table(DEMO_TABLES["orders"].path).upsert([{"order_id": 1, "amount": 2.0}])
    before = snapshot_tables(connection)
    with pytest.raises(SchemaMismatchError, match="does not match the demo's declaration.*drop it"):
        orders(context(), config=_config(), **_res(local_resources))
    with pytest.raises(SchemaMismatchError):
        open_table(connection, DEMO_TABLES["orders"])
    result = dg.materialize([*LIVE_CHECKS], resources=local_resources, instance=instance, raise_on_error=False,
                            selection=dg.AssetSelection.checks_for_assets("orders"))
    failed = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert failed == {"schema_matches_declaration": False, "primary_key_unique": True}
    same_states(before, snapshot_tables(connection))


def test_the_checks_catch_a_duplicated_payment_and_a_missing_table(local_resources):
    instance = dg.DagsterInstance.ephemeral()
    checks = dg.AssetSelection.checks_for_assets("payments", "customer_360")
    result = dg.materialize([*LIVE_CHECKS], resources=local_resources, instance=instance, selection=checks)
    assert {(e.check_name, e.passed) for e in result.get_asset_check_evaluations()} == {
        ("schema_matches_declaration", False), ("payment_ids_unique", False), ("primary_key_unique", False)}
    assert dg.materialize([customers, orders, payments], resources=local_resources, instance=instance).success
    table = _table(local_resources, "payments")
    table.append(table.scan_log().select(table.schema.names).head(1))  # a second copy of one payment
    result = dg.materialize([*LIVE_CHECKS], resources=local_resources, instance=instance,
                            selection=dg.AssetSelection.checks_for_assets("payments"))
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["schema_matches_declaration"].passed
    assert not evaluations["payment_ids_unique"].passed
    assert evaluations["payment_ids_unique"].metadata["duplicate_ids"].value == 1
