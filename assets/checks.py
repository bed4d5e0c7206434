"""Asset checks on the live tables: the stored schema is the declared one, primary keys (and payment ids) are
unique, and the aggregation engine's spend per customer equals the payments it was fed.

Each check reads the store through :class:`~assets.resources.LiveStore` and reports what it found as metadata.
"""

from collections.abc import Sequence

import dagster as dg
import polars as pl
import polars.selectors as cs

from assets.resources import LiveStore
from assets.tables import (
    DEMO_TABLES,
    JOB_TABLES,
    SOURCE_TABLES,
    LiveTableSpec,
    schema_differences,
)

__all__ = [
    "JOB_CHECKS",
    "LIVE_CHECKS",
    "duplicate_keys",
    "payment_ids_unique",
    "primary_key_check",
    "schema_check",
    "spend_matches_payments",
]


def duplicate_keys(rows: pl.LazyFrame, key: Sequence[str]) -> pl.DataFrame:
    """Key values that occur more than once, with their count (empty when the key is unique).

    Examples
    --------
    >>> duplicate_keys(pl.LazyFrame({"id": [1, 2, 2]}), ["id"]).to_dicts()
    [{'id': 2, 'len': 2}]
    """
    return rows.group_by(list(key)).len().filter(pl.col("len") > 1).sort(list(key)).collect()


def _missing(spec: LiveTableSpec) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=False, description=f"{spec.path} does not exist yet; materialize the asset")


def schema_check(spec: LiveTableSpec) -> dg.AssetChecksDefinition:
    """Check that the stored schema (columns, types, primary key, merge engine) is the declared one."""

    @dg.asset_check(
        asset=dg.AssetKey(spec.name),
        name="schema_matches_declaration",
        description=f"{spec.path} has the declared columns, types, primary key and merge engine",
    )
    def _check(live: LiveStore) -> dg.AssetCheckResult:
        connection = live.connection()
        if not connection.table_exists(spec.path):
            return _missing(spec)
        problems = schema_differences(spec, connection.get_table(spec.path))
        return dg.AssetCheckResult(
            passed=not problems,
            description="; ".join(problems) or "schema as declared",
            metadata={"differences": dg.MetadataValue.json(problems)},
        )

    return _check


def primary_key_check(spec: LiveTableSpec) -> dg.AssetChecksDefinition:
    """Check that the table's current state holds each primary key once."""
    key = list(spec.primary_key)

    @dg.asset_check(
        asset=dg.AssetKey(spec.name),
        name="primary_key_unique",
        description=f"the state of {spec.path} holds each {', '.join(key)} once",
    )
    def _check(live: LiveStore) -> dg.AssetCheckResult:
        connection = live.connection()
        if not connection.table_exists(spec.path):
            return _missing(spec)
        table = connection.get_table(spec.path)
        stored = list(table.schema.primary_key)  # the stored key (the schema check reports a changed declaration)
        duplicates = duplicate_keys(table.to_polars(columns=stored).lazy(), stored)  # key columns only
        return dg.AssetCheckResult(
            passed=duplicates.height == 0,
            metadata={
                "duplicate_keys": duplicates.height,
                "examples": dg.MetadataValue.json(duplicates.head(5).to_dicts()),
            },
        )

    return _check


@dg.asset_check(
    asset=dg.AssetKey("payments"),
    description="each payment_id occurs once in the payments log (re-runs append nothing twice)",
)
def payment_ids_unique(live: LiveStore) -> dg.AssetCheckResult:
    """The log table has no primary key; the demo's payment ids must still be unique across batches and re-runs."""
    spec = DEMO_TABLES["payments"]
    connection = live.connection()
    if not connection.table_exists(spec.path):
        return _missing(spec)
    ids = connection.get_table(spec.path).scan_log(columns=["payment_id"]).lazy()
    duplicates = duplicate_keys(ids, ["payment_id"])
    return dg.AssetCheckResult(
        passed=duplicates.height == 0,
        metadata={"duplicate_ids": duplicates.height, "examples": dg.MetadataValue.json(duplicates.head(5).to_dicts())},
    )


@dg.asset_check(
    asset=dg.AssetKey("customer_spend"),
    description="totals per customer equal a batch group-by of the payments the aggregation job consumed",
)
def spend_matches_payments(live: LiveStore) -> dg.AssetCheckResult:
    """The aggregation engine's totals against a recomputation from the payments log up to the job's offsets.

    The job checkpoints its offsets in the store with each write (exactly once), so the two must agree exactly:
    a replayed or double-counted step would show here.
    """
    from assets.jobs import customer_spend_job

    connection = live.connection()
    for name in ("payments", "customer_spend"):
        if not connection.table_exists(DEMO_TABLES[name].path):
            return _missing(DEMO_TABLES[name])
    job = customer_spend_job(connection)
    payments = job.source.scan_log(end_offsets=job.offsets("source"), columns=["customer_id", "amount", "paid_at"])
    expected = payments.group_by("customer_id").agg(
        pl.col("amount").sum().alias("expected_spend"),
        pl.len().cast(pl.Int64).alias("expected_count"),
        pl.col("amount").max().alias("expected_max"),
        pl.col("paid_at").max().alias("expected_last"),
    )
    kept = job.result.to_polars().select("customer_id", "total_spend", "order_count", "max_order", "last_order_at")
    joined = expected.join(kept, on="customer_id", how="full", coalesce=True)
    off = joined.filter(
        (pl.col("order_count") != pl.col("expected_count")).fill_null(True)
        | ((pl.col("total_spend") - pl.col("expected_spend")).abs() > 1e-6).fill_null(True)
        | (pl.col("max_order") != pl.col("expected_max")).fill_null(True)
        | (pl.col("last_order_at") != pl.col("expected_last")).fill_null(True)
    )
    return dg.AssetCheckResult(
        passed=off.height == 0,
        metadata={
            "customers": joined.height,
            "customers_off": off.height,
            "payments_consumed": payments.height,
            "examples": dg.MetadataValue.json(off.head(5).with_columns(cs.temporal().cast(pl.String)).to_dicts()),
        },
    )


#: Checks of the tables the generators write.
LIVE_CHECKS = [
    *(schema_check(DEMO_TABLES[name]) for name in SOURCE_TABLES),
    *(primary_key_check(DEMO_TABLES[name]) for name in SOURCE_TABLES if DEMO_TABLES[name].is_primary_key_table),
    payment_ids_unique,
]
#: Checks of the zero-state jobs' result tables.
JOB_CHECKS = [
    *(schema_check(DEMO_TABLES[name]) for name in JOB_TABLES),
    *(primary_key_check(DEMO_TABLES[name]) for name in JOB_TABLES if DEMO_TABLES[name].is_primary_key_table),
    spend_matches_payments,
]
