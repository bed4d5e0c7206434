"""The ``assets`` code location: ``dagster dev -m assets.definitions`` (or ``fluss-lake ui``).

Each concern is one module and contributes a list here: live tables (``assets.live``) and their checks
(``assets.checks``), zero-state job results (``assets.jobs``), the lake with its tiering job, schedule, lag
sensor and checks (``assets.lake``), the daily training set (``assets.training``), and the demo's jobs and
schedule (``assets.schedules``).

Runs execute in one process (``in_process_executor``): the demo's steps take milliseconds, so a process per
step (Dagster's default) would spend seconds importing for each. The store is safe across processes, so
switching to ``dg.multiprocess_executor`` is a one-line change.
"""

from __future__ import annotations

import dagster as dg

from assets.checks import JOB_CHECKS, LIVE_CHECKS
from assets.cluster import RayCluster
from assets.integrity import INTEGRITY_CHECKS
from assets.jobs import JOB_ASSETS
from assets.lake import (
    LAKE_ASSETS,
    LAKE_CHECKS,
    LAKE_SCHEDULES,
    LAKE_SENSORS,
    tiering_job,
)
from assets.live import LIVE_ASSETS
from assets.resources import DemoScenario, LakeCatalog, LiveStore
from assets.schedules import demo_pipeline_job, live_demo_job, live_demo_schedule
from assets.training import TRAINING_ASSETS

__all__ = ["default_resources", "defs"]


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """The embedded default: everything under ``$FLUSS_LAKE_HOME`` (or ``./.fluss-lake``), see ``assets.resources``;
    no Ray cluster unless ``$FLUSS_LAKE_RAY_ADDRESS`` names one (``assets.cluster``)."""
    return {"live": LiveStore(), "lake": LakeCatalog(), "demo": DemoScenario(), "ray": RayCluster()}


defs = dg.Definitions(
    assets=[*LIVE_ASSETS, *JOB_ASSETS, *LAKE_ASSETS, *TRAINING_ASSETS],
    asset_checks=[*LIVE_CHECKS, *JOB_CHECKS, *LAKE_CHECKS, *INTEGRITY_CHECKS],
    jobs=[live_demo_job, demo_pipeline_job, tiering_job],
    schedules=[live_demo_schedule, *LAKE_SCHEDULES],
    sensors=[*LAKE_SENSORS],
    resources=default_resources(),
    executor=dg.in_process_executor,
)
