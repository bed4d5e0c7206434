"""The fraud training set (group ``training``): one partition per day, built from the lake's history.

Entity rows are the day's payments from the lake (``lake/payments``) with their chargeback label ``is_fraud``;
the decision time is ``paid_at`` minus one millisecond (what was known just before the payment). Features come
from the lake histories of ``customer_360`` and ``customer_spend`` through :func:`fluss_lake.training.training_set`
in event-time mode, so no value from after the decision leaks in:

* ``customer_360``: each partial update carries ``updated_at``, the end of the event window it reflects, so a
  payment sees the profile as of the last window closed before it (TTL 7 days);
* ``customer_spend``: the aggregation's ``last_order_at`` (latest payment time it includes) is the event time,
  so a payment's own amount and later payments never count.

Each day is written as one Parquet object in the live store, ``_training/fraud_training_set/day=<date>.parquet``
(a local folder or S3 alike); re-running a day replaces its file. The partitions are the days the lake holds
payments for (:mod:`assets.partitions`). Backfills of a range run as one run (``BackfillPolicy.single_run``):
``fluss-lake backfill --from 2026-11-01 --to 2026-11-03`` or a backfill from the UI.

Each partition's materialization carries its own day's figures (``dagster/row_count``, ``fraud_rate``,
``feature_null_rate``); the run's are ``run_row_count`` and ``days``. The check ``every_day_has_rows`` fails for a
day without payments (its file is written empty) instead of leaving a green partition.

Reproducible: the three lake tables are read pinned to one snapshot each, recorded as ``lake_snapshots``
(``{"c360.payments": id, "c360.customer_360__history": id, ...}``). Re-run a day on the same data with the run
config ``{"ops": {"training__fraud_training_set": {"config": {"snapshot_ids": <lake_snapshots>}}}}``, or pin all
three to the snapshots committed by a time with ``{"as_of": "2026-11-03T00:00:00+00:00"}``.
"""

import io
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

import fluss_lake as fl
import tiering
from assets.lake import lake_key
from assets.partitions import TRAINING_DAYS
from assets.resources import LakeCatalog, LiveStore
from assets.tables import DEMO_TABLES
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.training import FeatureView, training_set
from tiering.snapshots import pinned_snapshot

__all__ = [
    "EVERY_DAY_HAS_ROWS",
    "TRAINING_ASSETS",
    "TRAINING_PARTITIONS",
    "TRAINING_PREFIX",
    "TrainingSetConfig",
    "build_training_set",
    "training_snapshots",
    "fraud_training_set",
    "read_training_set",
    "training_key",
]

#: The days the lake holds payments for (dynamic partitions, see :mod:`assets.partitions`).
TRAINING_PARTITIONS = TRAINING_DAYS
TRAINING_PREFIX = "_training/fraud_training_set"
_ENTITY_COLUMNS = [
    "payment_id",
    "customer_id",
    "amount",
    "method",
    "card_country",
    "ip_country",
    "is_new_device",
    "paid_at",
    "is_fraud",
]
_C360_FEATURES = [
    "sessions_7d",
    "pages_per_session",
    "txn_count_30d",
    "txn_amount_30d",
    "open_tickets",
    "csat",
    "email_clicks_30d",
    "crashes_7d",
    "active_minutes_7d",
]
_SPEND_FEATURES = ["total_spend", "order_count", "max_order", "last_order_at"]


def training_key(day: str) -> str:
    """Store key of one day's training set.

    Examples
    --------
    >>> training_key("2026-11-02")
    '_training/fraud_training_set/day=2026-11-02.parquet'
    """
    return f"{TRAINING_PREFIX}/day={day}.parquet"


def _day_start(day: str) -> datetime:
    try:
        return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidConfigError(f"day {day!r} is not a date; write it as YYYY-MM-DD") from None


EVERY_DAY_HAS_ROWS = "every_day_has_rows"


class TrainingSetConfig(dg.Config):
    """Pin the lake reads of a run (default: the current snapshot of each table, recorded in the metadata)."""

    snapshot_ids: dict[str, int] | None = Field(
        default=None,
        description="lake table -> snapshot id, as recorded in a materialization's lake_snapshots metadata",
    )
    as_of: str | None = Field(
        default=None, description="ISO time: read each lake table's latest snapshot committed at or before it"
    )


def _lake_tables() -> dict[str, tuple[str, Any]]:
    """Name in ``lake_snapshots`` -> (live path, lake kind) of the three tables the training set reads."""
    payments, c360, spend = (str(DEMO_TABLES[n].path) for n in ("payments", "customer_360", "customer_spend"))
    return {payments: (payments, "log"), f"{c360}__history": (c360, "history"), f"{spend}__history": (spend, "history")}


def training_snapshots(
    lake: tiering.Lake, *, snapshot_ids: dict[str, int] | None = None, as_of: str | None = None
) -> dict[str, int]:
    """The snapshot of each lake table a training run reads: `snapshot_ids` (all three tables), the ones
    committed by `as_of`, or the current ones; checked to exist (a clear error otherwise)."""
    tables = _lake_tables()
    if snapshot_ids is not None and as_of is not None:
        raise InvalidConfigError("give snapshot_ids or as_of, not both")
    if snapshot_ids is not None and set(snapshot_ids) != set(tables):
        raise InvalidConfigError(
            f"snapshot_ids must name exactly the lake tables {sorted(tables)} (as in lake_snapshots), "
            f"got {sorted(snapshot_ids)}"
        )
    pins = {}
    for name, (path, kind) in tables.items():
        table = lake.load(path, kind)
        current = table.current_snapshot() if table is not None else None
        if table is None or current is None:
            raise InvalidConfigError(f"the lake has no {name} yet; tier the tables (materialize group lake) first")
        pinned = pinned_snapshot(table, snapshot_id=(snapshot_ids or {}).get(name), as_of=as_of)
        pins[name] = pinned if pinned is not None else current.snapshot_id
    return pins


def build_training_set(
    lake: tiering.Lake,
    start_day: str,
    end_day: str | None = None,
    *,
    snapshots: dict[str, int] | None = None,
) -> pl.DataFrame:
    """The point-in-time training set of the payments paid in ``[start_day, end_day]`` (whole UTC days).

    One row per payment (entity columns, ``decision_ts``, the label ``is_fraud``), then ``c360__*`` and
    ``spend__*`` features as of ``decision_ts``, all read from the lake (tier the tables first), pinned to
    `snapshots` (see :func:`training_snapshots`; default: the current ones).
    """
    start = _day_start(start_day)
    end = _day_start(end_day or start_day) + timedelta(days=1)
    if end <= start:
        raise InvalidConfigError(f"end_day {end_day} is before start_day {start_day}")
    c360, spend, payments = (DEMO_TABLES[n].path for n in ("customer_360", "customer_spend", "payments"))
    pins = training_snapshots(lake, snapshot_ids=snapshots)
    entities = (
        tiering.read_lake(lake, payments, snapshot_id=pins[str(payments)])
        .filter((pl.col("paid_at") >= start) & (pl.col("paid_at") < end))
        .select(_ENTITY_COLUMNS)
        .with_columns((pl.col("paid_at") - pl.duration(milliseconds=1)).alias("decision_ts"))
        .sort("paid_at", "payment_id")
        .collect()
    )
    views = [
        FeatureView(
            tiering.read_history(lake, c360, snapshot_id=pins[f"{c360}__history"]),
            keys=["customer_id"],
            features=_C360_FEATURES,
            event_time="updated_at",
            ttl="7 d",
            prefix="c360__",
            name="customer_360",
        ),
        FeatureView(
            tiering.read_history(lake, spend, snapshot_id=pins[f"{spend}__history"]),
            keys=["customer_id"],
            features=_SPEND_FEATURES,
            event_time="last_order_at",
            prefix="spend__",
            name="customer_spend",
        ),
    ]
    frame = training_set(entities, views, timestamp_column="decision_ts")
    assert isinstance(frame, pl.DataFrame)  # a DataFrame of entities gives a DataFrame
    return frame


def read_training_set(connection: fl.Connection, day: str) -> pl.DataFrame:
    """One day's training set as written by the asset."""
    return pl.read_parquet(io.BytesIO(connection.store.get(training_key(day))))


def _day_metadata(rows: pl.DataFrame) -> dict[str, Any]:
    """One day's figures: its row count, fraud rate and feature null rates."""
    features = [c for c in rows.columns if c.startswith(("c360__", "spend__"))]
    fraud_rate = rows["is_fraud"].mean() if rows.height else None
    return {
        "dagster/row_count": rows.height,
        "fraud_rate": round(float(fraud_rate), 4) if isinstance(fraud_rate, float) else None,
        "feature_null_rate": dg.MetadataValue.json(
            {c: round(rows[c].null_count() / rows.height, 4) if rows.height else None for c in features}
        ),
    }


def _fraud_training_set(
    context: dg.AssetExecutionContext, config: TrainingSetConfig, live: LiveStore, lake: LakeCatalog
) -> dg.MaterializeResult:
    """Build the partition's days (a backfill range in one go) and write one Parquet object per day."""
    days = sorted(context.partition_keys)
    day_of = pl.col("paid_at").dt.strftime("%Y-%m-%d")
    the_lake = lake.lake()
    pins = training_snapshots(the_lake, snapshot_ids=config.snapshot_ids, as_of=config.as_of)
    frame = build_training_set(the_lake, days[0], days[-1], snapshots=pins).filter(day_of.is_in(days))
    store = live.connection().store
    per_day: dict[str, int] = {}
    for day in days:  # one write per day (a handful), not per row
        rows = frame.filter(day_of == day)
        buffer = io.BytesIO()
        rows.write_parquet(buffer, compression="zstd")
        store.put(training_key(day), buffer.getvalue())
        per_day[day] = rows.height
        context.add_asset_metadata(_day_metadata(rows), partition_key=day)
    empty = [day for day, n in per_day.items() if n == 0]
    fraud_rate = frame["is_fraud"].mean() if frame.height else 0.0
    assert isinstance(fraud_rate, float)  # the mean of the Boolean label
    meta: dict[str, Any] = {
        "run_row_count": frame.height,
        "days": dg.MetadataValue.json(per_day),
        "location": f"{live.connection().url}/{TRAINING_PREFIX}",
        "run_fraud_rate": round(fraud_rate, 4),
        "lake_snapshots": dg.MetadataValue.json(pins),
        "dagster/column_schema": dg.TableSchema(
            columns=[dg.TableColumn(name, str(dtype)) for name, dtype in frame.schema.items()]
        ),
    }
    if config.as_of is not None:
        meta["as_of"] = config.as_of
    check = dg.AssetCheckResult(
        check_name=EVERY_DAY_HAS_ROWS,
        passed=not empty,
        description=(
            f"no payments in the lake on {', '.join(empty)}: those days' training sets are empty (tier the "
            "payments, or check the pinned snapshots)"
            if empty
            else f"every day has rows ({min(per_day.values()):,} at least)"
        ),
        metadata={"empty_days": dg.MetadataValue.json(empty), "rows_per_day": dg.MetadataValue.json(per_day)},
    )
    return dg.MaterializeResult(metadata=meta, check_results=[check])


with warnings.catch_warnings():  # backfill_policy is beta in Dagster 1.13; single-run backfills are what we want
    warnings.simplefilter("ignore", dg.BetaWarning)
    fraud_training_set = dg.asset(
        key=["training", "fraud_training_set"],
        group_name="training",
        kinds={"polars", "parquet"},
        partitions_def=TRAINING_PARTITIONS,
        backfill_policy=dg.BackfillPolicy.single_run(),
        check_specs=[
            dg.AssetCheckSpec(
                EVERY_DAY_HAS_ROWS,
                asset=dg.AssetKey(["training", "fraud_training_set"]),
                description="every day of the run has payments in the lake (a day without any fails)",
            )
        ],
        deps=[lake_key("payments"), lake_key("customer_360", history=True), lake_key("customer_spend", history=True)],
        description="Payments of the day with their fraud label and point-in-time features from the lake histories "
        "of customer_360 and customer_spend (one Parquet object per day in the store)",
    )(_fraud_training_set)

TRAINING_ASSETS = [fraud_training_set]
