"""Live-table assets (group ``live``): each materialization writes one batch of the demo's streams.

Batch semantics (also in ``docs/DAGSTER.md``): a materialization writes batch ``n`` (run config ``batch``; by
default the batch after the one this asset's latest materialization recorded, 0 on a fresh Dagster instance),
or ``batches`` consecutive batches from it in one write (``fluss-lake materialize --days 3``: three days of
one-hour batches; each batch generated as it would be alone, so the rows are the same either way).
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
from functools import partial
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
    batches: int = Field(
        default=1,
        description="How many consecutive batches to write from `batch` in this run (24 one-hour batches: a day)",
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
        # the key columns only (to_polars reads mapped segments; to_lazy's scan_ipc of sealed segment files fails)
        return table.to_polars(columns=list(table.schema.primary_key)).height
    return table.scan_log(columns=[table.schema.names[0]]).height


def previous_metadata(context: dg.AssetExecutionContext) -> dict[str, Any] | None:
    """Metadata of this asset's latest materialization, or None on a fresh instance."""
    event = context.instance.get_latest_materialization_event(context.asset_key)
    if event is None or event.asset_materialization is None:
        return None
    return {key: value.value for key, value in event.asset_materialization.metadata.items()}


def _batches(context: dg.AssetExecutionContext, config: LiveBatchConfig) -> range:
    """The batches this materialization writes (``config.batches`` of them, from ``config.batch`` or the next)."""
    if config.batches < 1:
        raise InvalidConfigError(f"batches={config.batches} must be >= 1 (one batch is one event window)")
    if config.batch is not None:
        if config.batch < 0:
            raise InvalidConfigError(f"batch={config.batch} must be >= 0 (batch 0 is the first event window)")
        first = config.batch
    else:
        previous = previous_metadata(context)
        first = int(previous["batch"]) + 1 if previous and "batch" in previous else 0
    return range(first, first + config.batches)


def _generate(generate: Callable[[Scenario, int], pl.DataFrame], scenario: Scenario, batches: range) -> pl.DataFrame:
    """The batches' rows in batch order (each batch vectorized; one frame per batch, not per row)."""
    return pl.concat([generate(scenario, batch) for batch in batches])


def live_metadata(
    table: fl.Table, scenario: Scenario | None, batches: range | None, written: dict[str, Any]
) -> dict[str, Any]:
    """What a live asset reports: table, store, batch window, rows written and the log end offsets.

    ``batch`` is the last batch written (the next run continues after it), ``batches`` how many this run wrote.
    """
    meta: dict[str, Any] = {
        "table": str(table.path),
        "store": table.connection.url,
        "dagster/row_count": table_row_count(table),
        "end_offsets": dg.MetadataValue.json({str(b): o for b, o in table.end_offsets().items()}),
        **written,
    }
    if batches is not None and scenario is not None:
        start, end = scenario.window(batches[0])[0], scenario.window(batches[-1])[1]
        meta["batch"] = batches[-1]
        meta["batches"] = len(batches)
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
    scenario, batches = demo.scenario(), _batches(context, config)
    table = open_table(live.connection(), DEMO_TABLES[name])
    result = table.upsert(_generate(generate, scenario, batches))
    return dg.MaterializeResult(
        metadata=live_metadata(
            table, scenario, batches, {"rows_written": result.rows, "changelog_records": result.records}
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
    scenario, batches = demo.scenario(), _batches(context, config)
    table = open_table(live.connection(), DEMO_TABLES["payments"])
    events = _generate(gen.payments, scenario, batches)
    lo, hi = batches[0] * ORDER_ID_STRIDE, (batches[-1] + 1) * ORDER_ID_STRIDE
    present = table.scan_log(columns=["payment_id"], filters=[("payment_id", ">=", lo), ("payment_id", "<", hi)])
    missing = events.join(present.select("payment_id"), on="payment_id", how="anti", maintain_order="left")
    rows = table.append(missing).rows if missing.height else 0
    return dg.MaterializeResult(
        metadata=live_metadata(table, scenario, batches, {"rows_written": rows, "already_present": present.height})
    )


def _stream_batch(name: str, scenario: Scenario, batch: int) -> pl.DataFrame:
    """One stream's partial update of one batch (the key and the stream's own columns)."""
    return gen.stream(scenario, name, batch)


@_asset("customer_360", deps=["customers"])
def customer_360(
    context: dg.AssetExecutionContext, config: Customer360Config, live: LiveStore, demo: DemoScenario
) -> dg.MaterializeResult:
    """Each source system upserts only its own columns (one partial update per stream)."""
    unknown = sorted(set(config.streams) - set(STREAMS))
    if unknown:
        raise InvalidConfigError(f"unknown streams {unknown}; choose among {list(STREAMS)}")
    scenario, batches = demo.scenario(), _batches(context, config)
    table = open_table(live.connection(), DEMO_TABLES["customer_360"])
    written = {}
    # what the rows reflect: the end of the event window this write covers (of its last batch). A write of
    # several batches applies each stream's batches together, so an image may hold another stream's values of a
    # later batch of the span: stamping the span's end keeps every image out of view before all of them are true.
    span_end = pl.lit(scenario.window(batches[-1])[1]).cast(pl.Datetime("ms")).dt.replace_time_zone("UTC")
    for name in config.streams:
        frame = _generate(partial(_stream_batch, name), scenario, batches).with_columns(span_end.alias("updated_at"))
        result = table.upsert(frame, target_columns=["customer_id", *STREAM_COLUMNS[name], "updated_at"])
        written[name] = result.rows
    return dg.MaterializeResult(
        metadata=live_metadata(
            table,
            scenario,
            batches,
            {"rows_written": sum(written.values()), "rows_per_stream": dg.MetadataValue.json(written)},
        )
    )


LIVE_ASSETS = [customers, orders, payments, customer_360]
