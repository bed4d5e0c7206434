"""Zero-state job assets (group ``jobs``): each materialization runs one :mod:`fluss_lake.jobs` job once.

* ``orders_enriched``: orders LEFT JOIN customers as a :class:`~fluss_lake.jobs.DeltaJoin` (orders are bucketed by
  customer, so each side is probed by an index: customers by primary key, orders by bucket-key prefix);
* ``fraud_risk``: payments enriched with the current ``customer_360`` row by a
  :class:`~fluss_lake.jobs.LookupJoin` into a log table, with fraud signals and a score (:func:`fraud_signals`);
* ``customer_spend``: an :class:`~fluss_lake.jobs.Aggregation` of payments into the aggregation merge-engine table.

Each job keeps its offsets in the store (``.jobs/<job name>/``), not in Dagster: a run processes what arrived
since the job's last checkpoint, and a run killed at any point neither loses nor double-counts (the lookup join
and the aggregation write exactly once, the delta join's upserts are idempotent). Run config ``reset: true``
forgets the checkpoints and rebuilds the result table from the inputs' earliest offsets.

Examples
--------
>>> import polars as pl
>>> frame = pl.DataFrame({"amount": [40.0, 400.0], "card_country": ["DE", "DE"], "ip_country": ["DE", "BR"],
...                       "is_new_device": [False, True], "txn_count_30d": [4, None],
...                       "txn_amount_30d": [160.0, None], "open_tickets": [0, None],
...                       "last_ticket_topic": ["billing", None], "sessions_7d": [3, None]})
>>> fraud_signals(frame).select("known_customer", "ip_mismatch", "amount_ratio", "risk_band").rows()
[(True, False, 1.0, 'low'), (False, True, None, 'high')]
"""

from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg
import polars as pl
from pydantic import Field

import fluss_lake as fl
from assets.cluster import RayCluster
from assets.live import live_metadata, open_table
from assets.resources import LiveStore
from assets.tables import DEMO_TABLES
from fluss_lake.exceptions import JobStateError
from fluss_lake.jobs import Aggregation, DeltaJoin, Job, JobReport, Join, LookupJoin, Shard

__all__ = [
    "JOB_ASSETS",
    "ORDERS_ENRICHED_JOINS",
    "ORDERS_ENRICHED_SELECT",
    "JobConfig",
    "customer_spend",
    "customer_spend_job",
    "fraud_risk",
    "fraud_risk_job",
    "fraud_signals",
    "orders_enriched",
    "orders_enriched_job",
]

_GROUP = "jobs"
_KINDS = {"fluss", "polars"}
#: customer_360 columns the fraud-risk table takes from the lookup
_C360_COLUMNS = ["sessions_7d", "txn_count_30d", "txn_amount_30d", "open_tickets", "last_ticket_topic", "crashes_7d"]


class JobConfig(dg.Config):
    """Options of a job materialization."""

    reset: bool = Field(
        default=False,
        description="Forget the job's checkpoints and rebuild its result table from the inputs' earliest offsets",
    )


def _table(connection: fl.Connection, name: str) -> fl.Table:
    return open_table(connection, DEMO_TABLES[name])


#: The projection of orders (``o``) LEFT JOIN customers (``c``) into ``orders_enriched``.
ORDERS_ENRICHED_SELECT = {
    "customer_id": "o.customer_id",
    "order_id": "o.order_id",
    "amount": "o.amount",
    "currency": "o.currency",
    "status": "o.status",
    "channel": "o.channel",
    "created_at": "o.created_at",
    "customer_name": "c.name",
    "customer_country": "c.country",
    "segment": "c.segment",
}
ORDERS_ENRICHED_JOINS = [Join("o", "c", ["customer_id"], how="left")]


def orders_enriched_job(connection: fl.Connection, shard: Shard | None = None) -> DeltaJoin:
    """The delta join orders LEFT JOIN customers into ``orders_enriched`` (one `shard` of it if given)."""
    return DeltaJoin(
        _table(connection, "orders_enriched"),
        {"o": _table(connection, "orders"), "c": _table(connection, "customers")},
        ORDERS_ENRICHED_JOINS,
        select=ORDERS_ENRICHED_SELECT,
        name=_job_name("orders_enriched"),
        shard=shard,
    )


def fraud_signals(enriched: pl.DataFrame) -> pl.DataFrame:
    """Fraud signals and a score for payments enriched with their customer's ``customer_360`` row (vectorized).

    ``known_customer``: the customer has transaction history; ``ip_mismatch``: the IP country differs from the
    card's; ``amount_ratio``: the amount over the customer's average transaction; ``risk_score`` in [0, 1] a
    logistic score of those plus a new device and an open fraud report; ``risk_band`` low / medium / high.
    """
    known = pl.col("txn_count_30d").is_not_null() & (pl.col("txn_count_30d") > 0)
    ratio = pl.when(known).then(pl.col("amount") / (pl.col("txn_amount_30d") / pl.col("txn_count_30d")))
    logit = (
        -4.0
        + 2.2 * pl.col("ip_mismatch").cast(pl.Float64)
        + 1.6 * pl.col("is_new_device").cast(pl.Float64)
        + 0.8 * pl.col("amount_ratio").fill_null(3.0).clip(0.05, 50.0).log()
        + 1.0 * (~pl.col("known_customer")).cast(pl.Float64)
        + 1.5 * (pl.col("last_ticket_topic") == "fraud_report").fill_null(False).cast(pl.Float64)
    )
    score = 1.0 / (1.0 + (-logit).exp())
    return (
        enriched.with_columns(
            known.alias("known_customer"),
            (pl.col("ip_country") != pl.col("card_country")).fill_null(True).alias("ip_mismatch"),
            ratio.alias("amount_ratio"),
        )
        .with_columns(score.alias("risk_score"))
        .with_columns(
            pl.when(pl.col("risk_score") >= 0.5)
            .then(pl.lit("high"))
            .when(pl.col("risk_score") >= 0.15)
            .then(pl.lit("medium"))
            .otherwise(pl.lit("low"))
            .alias("risk_band")
        )
    )


class _ScoredLookupJoin(LookupJoin):
    """The lookup join whose enriched batches also get :func:`fraud_signals` before they are appended."""

    def enrich(self, frame: pl.DataFrame) -> pl.DataFrame:
        return fraud_signals(super().enrich(frame))


def fraud_risk_job(connection: fl.Connection, shard: Shard | None = None) -> LookupJoin:
    """The lookup join payments -> current ``customer_360`` row -> ``fraud_risk`` (appended exactly once)."""
    return _ScoredLookupJoin(
        _table(connection, "customer_360"),
        on={"customer_id": "customer_id"},
        columns=_C360_COLUMNS,
        source=_table(connection, "payments"),
        sink=_table(connection, "fraud_risk"),
        name=_job_name("fraud_risk"),
        shard=shard,
    )


def customer_spend_job(connection: fl.Connection, shard: Shard | None = None) -> Aggregation:
    """The aggregation push-down payments -> ``customer_spend`` (totals in the table, offsets in the store)."""
    return Aggregation(
        _table(connection, "payments"),
        _table(connection, "customer_spend"),
        group_by=["customer_id"],
        aggregates={
            "total_spend": ("sum", "amount"),
            "order_count": ("count", None),
            "max_order": ("max", "amount"),
            "first_order_at": ("min", "paid_at"),
            "last_order_at": ("max", "paid_at"),
        },
        name=_job_name("customer_spend"),
        shard=shard,
    )


_J = TypeVar("_J", bound=Job)


def _run(
    live: LiveStore, make: Callable[..., _J], result: str, config: JobConfig, cluster: RayCluster
) -> tuple[_J, JobReport, bool]:
    """Build the job (resetting it first if asked), run it once, return the job, its report and whether it reset.

    On a Ray cluster (`cluster` has an address) the run is one Ray task per shard (``cluster.shards``), each
    building its shard from its own connection; the job returned is shard 0, built again here after the run.
    """
    connection = live.connection()
    shards = cluster.shards if cluster.enabled else 1

    def build() -> list[_J]:
        if shards == 1:
            return [make(connection)]
        return [make(connection, shard) for shard in Shard.all(shards)]

    reset = config.reset
    jobs: list[_J] | None
    try:
        jobs = build()
    except JobStateError as exc:
        if not reset:
            exc.add_note("materialize this asset with run config {reset: true} to rebuild it from the inputs")
            raise
        jobs = None
    if (
        jobs is not None
        and not reset
        and all(job.never_ran for job in jobs)
        and table_has_rows(_table(connection, result))
    ):
        reset = True  # rows written before this job existed (e.g. by an earlier feed): rebuild, never add twice
    if reset:
        if jobs is None:  # the checkpoint names inputs that were re-created: the job cannot be built to reset it
            from fluss_lake.jobs.checkpoint import CheckpointStore

            CheckpointStore(connection, _job_name(result)).reset()
            connection.drop_table(DEMO_TABLES[result].path, ignore_if_not_exists=True)
        else:
            jobs[0].reset()  # a shard's reset forgets every shard of the job (and an unsharded job's checkpoints)
            connection.drop_table(DEMO_TABLES[result].path, ignore_if_not_exists=True)
        jobs = build()
    assert jobs is not None  # None only when building failed with reset, and the reset branch built them again
    if not cluster.enabled:
        return jobs[0], jobs[0].run_once(), reset
    import fluss_ray

    store = fluss_ray.Store(live.resolved_url(), live.resolved_storage_options())
    reports = fluss_ray.run_job_once(make, store=store, shards=shards)
    report = reports[0]
    for other in reports[1:]:
        report = report.combine(other)
    return build()[0], report, reset


def _job_name(result: str) -> str:
    """The job's name, i.e. its checkpoint folder ``.jobs/<name>/`` in the store."""
    kind = {"orders_enriched": "delta_join", "fraud_risk": "lookup_join", "customer_spend": "aggregation"}[result]
    return f"{kind}-{DEMO_TABLES[result].path.replace('.', '-')}"


def table_has_rows(table: fl.Table) -> bool:
    """Whether a table holds any row (state rows or log records)."""
    return any(o > 0 for o in table.end_offsets().values())


def _job_metadata(job: Job, report: JobReport, reset: bool, cluster: RayCluster) -> dict[str, Any]:
    return {
        "job": job.name,
        "ray_shards": cluster.shards if cluster.enabled else 0,  # 0: ran in the asset's process
        "steps": report.steps,
        "records_read": report.records_read,
        "rows_upserted": report.rows_upserted,
        "rows_deleted": report.rows_deleted,
        "rows_appended": report.rows_appended,
        "reset": reset,
        "state_bytes": job.state_bytes(),
        "checkpoint": job.checkpoint.number,
        "input_offsets": dg.MetadataValue.json(
            {alias: {str(b): o for b, o in offs.items()} for alias, offs in report.offsets.items()}
        ),
        "lag": dg.MetadataValue.json(job.lag()),
    }


def _asset(name: str, deps: list[str]) -> Any:
    spec = DEMO_TABLES[name]
    return dg.asset(
        name=name,
        group_name=_GROUP,
        kinds=_KINDS,
        description=spec.description,
        deps=deps,
        metadata={"table": spec.path},
    )


@_asset("orders_enriched", deps=["orders", "customers"])
def orders_enriched(config: JobConfig, live: LiveStore, ray: RayCluster) -> dg.MaterializeResult:
    """Run the delta join once: every orders/customers change since its checkpoint, probed against the other side."""
    job, report, reset = _run(live, orders_enriched_job, "orders_enriched", config, ray)
    explanation = job.explain()
    meta = _job_metadata(job, report, reset, ray)
    meta["strategy"] = "; ".join([explanation.strategy, *explanation.probes])
    return dg.MaterializeResult(metadata=live_metadata(job.result, None, None, meta))


@_asset("fraud_risk", deps=["payments", "customer_360"])
def fraud_risk(config: JobConfig, live: LiveStore, ray: RayCluster) -> dg.MaterializeResult:
    """Run the lookup join once: new payments enriched with their customer's current row, scored, appended."""
    job, report, reset = _run(live, fraud_risk_job, "fraud_risk", config, ray)
    assert job.sink is not None  # fraud_risk_job always appends into the fraud_risk table
    return dg.MaterializeResult(metadata=live_metadata(job.sink, None, None, _job_metadata(job, report, reset, ray)))


@_asset("customer_spend", deps=["payments"])
def customer_spend(config: JobConfig, live: LiveStore, ray: RayCluster) -> dg.MaterializeResult:
    """Run the aggregation once: one partial aggregate per customer of the new payments, summed by the table."""
    job, report, reset = _run(live, customer_spend_job, "customer_spend", config, ray)
    return dg.MaterializeResult(metadata=live_metadata(job.result, None, None, _job_metadata(job, report, reset, ray)))


JOB_ASSETS = [orders_enriched, fraud_risk, customer_spend]
