"""Live-table assets (group ``live``): each materialization writes one batch of the demo's streams.

Batch semantics (also in ``docs/DAGSTER.md``): a materialization writes batch ``n`` (run config ``batch``; by
default the batch after the one this asset's latest materialization recorded, 0 on a fresh Dagster instance).
Generators are pure functions of the batch, so re-running batch ``n`` restates the same rows, as a replayed
source would:

* primary-key tables (``customers``, ``orders``, ``customer_360``) upsert the same values again. Re-running the
  latest batch leaves the state unchanged (the changelog records the re-application as updates); re-running
  an older batch sets the rows it mentions back to that batch's values (orders: each batch has its own keys);
* ``payments`` (a log table) appends only the payments of the batch that are not in the log yet (payment ids
  are ``batch * ORDER_ID_STRIDE + i``; a statistics column makes the check skip other batches);
* ``customer_360`` applies one partial upsert per stream; each also sets ``updated_at`` to the end of the
  batch's event window (what the row reflects; the training set's event time).

The tables fed from these by zero-state jobs (``orders_enriched``, ``fraud_risk``, ``customer_spend``) are in
:mod:`assets.jobs`.
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

import fluss_lake as fl
from assets import generators as gen
from assets.generators import ORDER_ID_STRIDE, STREAMS, Scenario
from assets.resources import DemoScenario, LiveStore
from assets.tables import (
    DEMO_DATABASE,
    DEMO_TABLES,
    LAKE_OPTIONS,
    STREAM_COLUMNS,
    LiveTableSpec,
    schema_differences,
)
from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError

__all__ = [
    "LIVE_ASSETS",
    "Customer360Config",
    "LiveBatchConfig",
    "customer_360",
    "customers",
    "live_metadata",
    "open_table",
    "orders",
    "payments",
    "previous_metadata",
    "table_row_count",
]

_GROUP = "live"
LAKE_OPTIONS_KEY = "table.datalake.enabled"
_KINDS = {"fluss", "polars"}


class LiveBatchConfig(dg.Config):
    """Which batch of events to write."""

    batch: int | None = Field(
        default=None,
        description="Batch to write (default: the one after the last materialized batch; 0 on a fresh instance)",
    )


class Customer360Config(LiveBatchConfig):
    """Which batch, and which source systems write their columns into ``customer_360``."""

    streams: list[str] = Field(default_factory=lambda: list(STREAMS), description="Source systems to apply")


def open_table(connection: fl.Connection, spec: LiveTableSpec) -> fl.Table:
    """The demo table (created from its spec if missing); a stored table with another schema is an error."""
    connection.create_database(DEMO_DATABASE, ignore_if_exists=True)
    connection.create_table(spec.path, **spec.create_kwargs(), ignore_if_exists=True)
    table = connection.get_table(spec.path)
    problems = schema_differences(spec, table)
    if problems:
        raise SchemaMismatchError(
            f"table {spec.path} in {connection.url} does not match the demo's declaration "
            f"({'; '.join(problems)}); drop it, or point FLUSS_LAKE_HOME / FLUSS_LAKE_URL at "
            "another store"
        )
    if LAKE_OPTIONS_KEY not in table.info.options:  # created before the demo was tiered: enable the lake
        connection.alter_table(spec.path, set_options=dict(LAKE_OPTIONS))
        table = connection.get_table(spec.path)
    return table


def table_row_count(table: fl.Table) -> int:
    """Rows of a primary-key table's state, or records of a log table."""
    if table.is_primary_key_table:
        return int(table.to_lazy(columns=list(table.schema.primary_key)).select(pl.len()).collect().item())
    return table.scan_log(columns=[table.schema.names[0]]).height


def previous_metadata(context: dg.AssetExecutionContext) -> dict[str, Any] | None:
    """Metadata of this asset's latest materialization, or None on a fresh instance."""
    event = context.instance.get_latest_materialization_event(context.asset_key)
    if event is None or event.asset_materialization is None:
        return None
    return {key: value.value for key, value in event.asset_materialization.metadata.items()}


def _batch(context: dg.AssetExecutionContext, config: LiveBatchConfig) -> int:
    """The batch this materialization writes."""
    if config.batch is not None:
        if config.batch < 0:
            raise InvalidConfigError(f"batch={config.batch} must be >= 0 (batch 0 is the first event window)")
        return config.batch
    previous = previous_metadata(context)
    return int(previous["batch"]) + 1 if previous and "batch" in previous else 0


def live_metadata(
    table: fl.Table, scenario: Scenario | None, batch: int | None, written: dict[str, Any]
) -> dict[str, Any]:
    """What a live asset reports: table, store, batch window, rows written and the log end offsets."""
    meta: dict[str, Any] = {
        "table": str(table.path),
        "store": table.connection.url,
        "dagster/row_count": table_row_count(table),
        "end_offsets": dg.MetadataValue.json({str(b): o for b, o in table.end_offsets().items()}),
        **written,
    }
    if batch is not None and scenario is not None:
        start, end = scenario.window(batch)
        meta["batch"] = batch
        meta["event_window"] = " .. ".join(datetime.fromtimestamp(t / 1000, UTC).isoformat() for t in (start, end))
    return meta


def _asset(name: str, **kwargs: Any) -> Any:
    """``@dg.asset`` with the live group, kinds and the table's description."""
    spec = DEMO_TABLES[name]
    return dg.asset(
        name=name,
        group_name=_GROUP,
        kinds=_KINDS,
        description=spec.description,
        metadata={"table": spec.path},
        **kwargs,
    )


def _upsert_generated(
    context: dg.AssetExecutionContext,
    config: LiveBatchConfig,
    live: LiveStore,
    demo: DemoScenario,
    name: str,
    generate: Callable[[Scenario, int], pl.DataFrame],
) -> dg.MaterializeResult:
    """Upsert the generated rows of the run's batch into one demo table and report what the write did."""
    scenario, batch = demo.scenario(), _batch(context, config)
    table = open_table(live.connection(), DEMO_TABLES[name])
    result = table.upsert(generate(scenario, batch))
    return dg.MaterializeResult(
        metadata=live_metadata(
            table, scenario, batch, {"rows_written": result.rows, "changelog_records": result.records}
        )
    )


@_asset("customers")
def customers(
    context: dg.AssetExecutionContext, config: LiveBatchConfig, live: LiveStore, demo: DemoScenario
) -> dg.MaterializeResult:
    """Upsert the batch's sign-ups and profile changes."""
    return _upsert_generated(context, config, live, demo, "customers", gen.customers)


@_asset("orders", deps=["customers"])
def orders(
    context: dg.AssetExecutionContext, config: LiveBatchConfig, live: LiveStore, demo: DemoScenario
) -> dg.MaterializeResult:
    """Upsert the batch's orders: placed, then shipped (two changes of one key in one write)."""
    return _upsert_generated(context, config, live, demo, "orders", gen.orders)


@_asset("payments", deps=["orders"])
def payments(
    context: dg.AssetExecutionContext, config: LiveBatchConfig, live: LiveStore, demo: DemoScenario
) -> dg.MaterializeResult:
    """Append the batch's payments that are not in the log yet (re-running a batch appends nothing twice)."""
    scenario, batch = demo.scenario(), _batch(context, config)
    table = open_table(live.connection(), DEMO_TABLES["payments"])
    events = gen.payments(scenario, batch)
    lo, hi = batch * ORDER_ID_STRIDE, (batch + 1) * ORDER_ID_STRIDE
    present = table.scan_log(columns=["payment_id"], filters=[("payment_id", ">=", lo), ("payment_id", "<", hi)])
    missing = events.join(present.select("payment_id"), on="payment_id", how="anti")
    rows = table.append(missing).rows if missing.height else 0
    return dg.MaterializeResult(
        metadata=live_metadata(table, scenario, batch, {"rows_written": rows, "already_present": present.height})
    )


@_asset("customer_360", deps=["customers"])
def customer_360(
    context: dg.AssetExecutionContext, config: Customer360Config, live: LiveStore, demo: DemoScenario
) -> dg.MaterializeResult:
    """Each source system upserts only its own columns (one partial update per stream)."""
    unknown = sorted(set(config.streams) - set(STREAMS))
    if unknown:
        raise InvalidConfigError(f"unknown streams {unknown}; choose among {list(STREAMS)}")
    scenario, batch = demo.scenario(), _batch(context, config)
    table = open_table(live.connection(), DEMO_TABLES["customer_360"])
    written = {}
    window_end = pl.lit(scenario.window(batch)[1]).cast(pl.Datetime("ms")).dt.replace_time_zone("UTC")
    for name in config.streams:
        frame = gen.stream(scenario, name, batch).with_columns(window_end.alias("updated_at"))
        result = table.upsert(frame, target_columns=["customer_id", *STREAM_COLUMNS[name], "updated_at"])
        written[name] = result.rows
    return dg.MaterializeResult(
        metadata=live_metadata(
            table,
            scenario,
            batch,
            {"rows_written": sum(written.values()), "rows_per_stream": dg.MetadataValue.json(written)},
        )
    )


LIVE_ASSETS = [customers, orders, payments, customer_360]
