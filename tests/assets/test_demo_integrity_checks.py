# ruff: noqa: F811 - pytest fixtures imported from demo_fixtures are redefined as test arguments
"""The integrity asset checks run `Table.verify()` on every demo table for real (`dg.materialize`): they pass on
a whole store and fail, naming the object, once one is damaged."""

from __future__ import annotations

import glob
import os

import dagster as dg
from demo_fixtures import home, local_resources  # noqa: F401 - fixtures

from assets.integrity import INTEGRITY_CHECKS
from assets.live import LIVE_ASSETS
from assets.tables import DEMO_TABLES, SOURCE_TABLES


def test_integrity_checks_pass_then_name_a_damaged_object(local_resources) -> None:
    instance = dg.DagsterInstance.ephemeral()
    checks = [c for c in INTEGRITY_CHECKS if next(iter(c.check_keys)).asset_key.path[0] in SOURCE_TABLES]
    result = dg.materialize([*LIVE_ASSETS, *checks], resources=local_resources, instance=instance)
    evaluations = result.get_asset_check_evaluations()
    assert result.success and len(evaluations) == len(SOURCE_TABLES) and all(e.passed for e in evaluations)
    assert all(e.metadata["objects_checked"].value > 0 for e in evaluations)
    orders = DEMO_TABLES["orders"]
    root = local_resources["live"].connection().url
    db, name = orders.path.split(".")
    batch = sorted(glob.glob(f"{root}/{db}/{name}/data-*/log/b00000/*.arrow"))[0]
    with open(batch, "r+b") as handle:
        handle.seek(os.path.getsize(batch) // 2)
        byte = handle.read(1)
        handle.seek(os.path.getsize(batch) // 2)
        handle.write(bytes([byte[0] ^ 1]))
    again = dg.materialize(  # the checks alone: the assets' next batch would (rightly) refuse the damaged bucket
        [*LIVE_ASSETS, *checks],
        resources=local_resources,
        instance=instance,
        selection=dg.AssetSelection.checks(*checks),
    )
    by_asset = {e.asset_key.path[0]: e for e in again.get_asset_check_evaluations()}
    assert not by_asset["orders"].passed
    assert os.path.basename(batch) in str(by_asset["orders"].metadata["damaged"].value)
    assert all(e.passed for asset, e in by_asset.items() if asset != "orders")
