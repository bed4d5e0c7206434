"""The training set's partitions: the days the lake holds payments for, derived from the data.

The demo's event time starts wherever its scenario says (``DemoScenario.epoch``) and lasts as long as the
batches written, so a fixed calendar would offer empty days. The partitions are therefore Dagster *dynamic*
partitions named ``fraud_training_days``, one key ``YYYY-MM-DD`` per UTC day with at least one payment in the
lake: ``tier_lake`` adds the days of the payments it tiers, ``fluss-lake backfill`` adds every day the lake
holds before it runs. Keys are kept in calendar order (a day older than the newest key re-sorts them), so a
range ``2026-11-01...2026-11-03`` means those days.

Examples
--------
>>> import polars as pl
>>> from datetime import datetime, UTC
>>> days_of(pl.Series([datetime(2026, 11, 2, 23, tzinfo=UTC), datetime(2026, 11, 1, 5, tzinfo=UTC)]))
['2026-11-01', '2026-11-02']
"""

from __future__ import annotations

import dagster as dg
import polars as pl

import tiering
from assets.tables import DEMO_TABLES

__all__ = ["TRAINING_DAYS", "TRAINING_DAYS_NAME", "add_training_days", "days_of", "lake_payment_days"]

#: The partitions' name in the Dagster instance.
TRAINING_DAYS_NAME = "fraud_training_days"
#: One partition per UTC day that has payments in the lake.
TRAINING_DAYS = dg.DynamicPartitionsDefinition(name=TRAINING_DAYS_NAME)


def days_of(timestamps: pl.Series) -> list[str]:
    """The distinct UTC days (``YYYY-MM-DD``, sorted) of a timestamp column."""
    dtype = timestamps.dtype
    if isinstance(dtype, pl.Datetime) and dtype.time_zone is not None:
        timestamps = timestamps.dt.convert_time_zone("UTC")
    return timestamps.drop_nulls().dt.strftime("%Y-%m-%d").unique().sort().to_list()


def lake_payment_days(lake: tiering.Lake) -> list[str]:
    """Every day the lake's ``payments`` table holds a payment for (empty when it was never tiered)."""
    if lake.load(DEMO_TABLES["payments"].path) is None:
        return []
    paid = tiering.read_lake(lake, DEMO_TABLES["payments"].path).select("paid_at").collect()["paid_at"]
    return days_of(paid)


def add_training_days(instance: dg.DagsterInstance, days: list[str]) -> list[str]:
    """Add the days missing from the partitions, keeping every key in calendar order; returns the days added."""
    existing = list(instance.get_dynamic_partitions(TRAINING_DAYS_NAME))
    new = sorted(set(days) - set(existing))
    if not new:
        return []
    ordered = sorted({*existing, *new})
    if existing + new != ordered:  # an older day than the newest key: put every key back in calendar order
        for key in existing:
            instance.delete_dynamic_partition(TRAINING_DAYS_NAME, key)
        instance.add_dynamic_partitions(TRAINING_DAYS_NAME, ordered)
    else:
        instance.add_dynamic_partitions(TRAINING_DAYS_NAME, new)
    return new
