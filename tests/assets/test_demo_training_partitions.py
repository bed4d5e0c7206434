# ruff: noqa: F811 - pytest fixtures imported from demo_fixtures are redefined as test arguments
"""The training asset per partition: each day's own row counts, a failed check for a day without payments, and
a run pinned to the lake snapshots another run recorded gives the same rows, bad pins fail the run and write
nothing (real ``materialize``)."""

from __future__ import annotations

import dagster as dg
import pytest
from demo_fixtures import SMALL, home, local_resources  # noqa: F401 - fixtures

from assets import generators as gen
from assets.jobs import JOB_ASSETS
from assets.lake import LAKE_ASSETS
from assets.live import LIVE_ASSETS
from assets.resources import DemoScenario
from assets.training import EVERY_DAY_HAS_ROWS, TRAINING_ASSETS, read_training_set

KEY = dg.AssetKey(["training", "fraud_training_set"])
OP = "training__fraud_training_set"


def _batch_and_tier(resources, instance):
    assert dg.materialize([*LIVE_ASSETS, *JOB_ASSETS], resources=resources, instance=instance).success
    assert dg.materialize([*LIVE_ASSETS, *JOB_ASSETS, *LAKE_ASSETS], resources=resources, instance=instance,
                          selection=dg.AssetSelection.groups("lake")).success


def _train(resources, instance, days, config=None):
    kwargs = {"run_config": {"ops": {OP: {"config": config}}}} if config else {}
    if len(days) == 1:
        kwargs["partition_key"] = days[0]
    else:
        kwargs["tags"] = {"dagster/asset_partition_range_start": days[0], "dagster/asset_partition_range_end": days[-1]}
    result = dg.materialize(TRAINING_ASSETS, resources=resources, instance=instance, **kwargs)
    assert result.success
    metas = {e.partition: {k: v.value for k, v in e.materialization.metadata.items()}
             for e in result.get_asset_materialization_events() if e.asset_key == KEY}
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == EVERY_DAY_HAS_ROWS
    return metas, check


def test_each_partition_reports_its_own_rows_an_empty_day_fails_its_check_and_a_pinned_rerun_reproduces(
        local_resources):
    resources = {**local_resources, "demo": DemoScenario(**SMALL, batch_window_minutes=24 * 60)}
    instance = dg.DagsterInstance.ephemeral()
    _batch_and_tier(resources, instance)  # day 2026-11-01
    _batch_and_tier(resources, instance)  # day 2026-11-02
    first, check = _train(resources, instance, ["2026-11-01", "2026-11-02"])
    scenario, connection = resources["demo"].scenario(), resources["live"].connection()
    want = {d: gen.payments(scenario, b).height for b, d in enumerate(("2026-11-01", "2026-11-02"))}
    assert {d: m["dagster/row_count"] for d, m in first.items()} == want  # each day its own count
    assert all(m["run_row_count"] == sum(want.values()) for m in first.values())
    assert check.passed and check.metadata["rows_per_day"].value == want
    pins = first["2026-11-02"]["lake_snapshots"]
    assert set(pins) == {"c360.payments", "c360.customer_360__history", "c360.customer_spend__history"}
    day2 = read_training_set(connection, "2026-11-02")

    _batch_and_tier(resources, instance)  # day 2026-11-03: more rounds on every lake table
    # a day the lake holds no payments for: its partition gets a failed check, not a green one
    instance.add_dynamic_partitions("fraud_training_days", ["2026-11-04", "2026-11-05"])
    empty, failed = _train(resources, instance, ["2026-11-05"])
    assert empty["2026-11-05"]["dagster/row_count"] == 0
    assert not failed.passed and failed.metadata["empty_days"].value == ["2026-11-05"]
    assert "no payments" in (failed.description or "")

    # re-run day 2 pinned to the recorded snapshots: the same snapshots, the same rows
    again, check = _train(resources, instance, ["2026-11-02"], {"snapshot_ids": pins})
    assert again["2026-11-02"]["lake_snapshots"] == pins and check.passed
    assert read_training_set(connection, "2026-11-02").equals(day2)
    newer, _ = _train(resources, instance, ["2026-11-03"])
    assert newer["2026-11-03"]["lake_snapshots"] != pins
    # pinned to before day 3 was tiered, day 3 has no rows: the check says so
    before, failed = _train(resources, instance, ["2026-11-03"], {"snapshot_ids": pins})
    assert before["2026-11-03"]["dagster/row_count"] == 0 and not failed.passed

    # bad pins fail the run with a clear error and write nothing
    for config, message in (({"snapshot_ids": {"c360.payments": 1}}, "exactly the lake tables"),
                            ({"as_of": "2000-01-01T00:00:00+00:00"}, "no snapshot committed at or before")):
        result = dg.materialize(TRAINING_ASSETS, resources=resources, instance=instance, partition_key="2026-11-04",
                                run_config={"ops": {OP: {"config": config}}}, raise_on_error=False)
        assert not result.success
        [failure] = [e for e in result.all_events if e.is_step_failure]
        assert message in str(failure.step_failure_data.error)
        with pytest.raises(FileNotFoundError):
            read_training_set(connection, "2026-11-04")
