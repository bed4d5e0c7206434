"""Jobs and schedules: materialize the live demo tables on demand or every few minutes (stopped by default)."""

from __future__ import annotations

import dagster as dg

__all__ = ["demo_pipeline_job", "live_demo_job", "live_demo_schedule"]

#: One run that writes the next batch of every live table (sources before the tables fed from them).
live_demo_job = dg.define_asset_job(
    "live_demo",
    selection=dg.AssetSelection.groups("live"),
    description="Write the next batch of every Customer 360 stream into the live tables",
)

#: Turn it on in the UI (Automation) to keep the streams flowing: one batch every five minutes.
live_demo_schedule = dg.ScheduleDefinition(
    name="live_demo_every_5_minutes",
    job=live_demo_job,
    cron_schedule="*/5 * * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
)

#: The whole unpartitioned pipeline in one run: sources, zero-state jobs, then a tiering round.
demo_pipeline_job = dg.define_asset_job(
    "demo_pipeline",
    selection=dg.AssetSelection.groups("live", "jobs", "lake"),
    description="Next batch of every stream, then the delta join, lookup join and aggregation, then tiering",
)
