"""The ``assets`` code location: ``dagster dev -m assets.definitions`` (or ``fluss-lake ui``).

Each concern is one module and contributes a list here: live tables (``assets.live``), their checks
(``assets.checks``), jobs and schedules (``assets.schedules``). Zero-state jobs and lake tables plug in the
same way as their packages land.

Runs execute in one process (``in_process_executor``): the demo's steps take milliseconds, so a process per
step (Dagster's default) would spend seconds importing for each. The store is safe across processes, so
switching to ``dg.multiprocess_executor`` is a one-line change.
"""

from __future__ import annotations

import dagster as dg

from assets.checks import LIVE_CHECKS
from assets.live import LIVE_ASSETS
from assets.resources import DemoScenario, LakeCatalog, LiveStore
from assets.schedules import live_demo_job, live_demo_schedule

__all__ = ["default_resources", "defs"]


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """The embedded default: everything under ``$FLUSS_LAKE_HOME`` (or ``./.fluss-lake``), see ``assets.resources``."""
    return {"live": LiveStore(), "lake": LakeCatalog(), "demo": DemoScenario()}


defs = dg.Definitions(
    assets=[*LIVE_ASSETS],
    asset_checks=[*LIVE_CHECKS],
    jobs=[live_demo_job],
    schedules=[live_demo_schedule],
    resources=default_resources(),
    executor=dg.in_process_executor,
)
