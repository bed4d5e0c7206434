"""The demo's live tables, declared once: schema, keys, buckets and Fluss options per table.

Assets create the tables from these specs on first use and refuse to write into a table whose stored schema
differs (the ``schema matches the declaration`` check reports the same comparison).

Examples
--------
>>> DEMO_TABLES["customer_360"].primary_key, sorted(STREAM_COLUMNS)[:2]
(('customer_id',), ['crm_tickets', 'marketing'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import fluss_lake as fl

__all__ = [
    "DEMO_DATABASE",
    "DEMO_TABLES",
    "JOB_TABLES",
    "LAKE_OPTIONS",
    "SOURCE_TABLES",
    "STREAM_COLUMNS",
    "LiveTableSpec",
    "schema_differences",
]

DEMO_DATABASE = "c360"

#: Every demo table is tiered into the lake and should be there within a minute (the lag sensor's bound).
LAKE_OPTIONS: Mapping[str, str] = MappingProxyType(
    {"table.datalake.enabled": "true", "table.datalake.freshness": "1 min"}
)


@dataclass(frozen=True, slots=True)
class LiveTableSpec:
    """One live table of the demo: ``schema`` maps column names to Fluss type names."""

    name: str
    schema: Mapping[str, str]
    description: str
    primary_key: tuple[str, ...] = ()
    bucket_num: int = 4
    bucket_keys: tuple[str, ...] | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str:
        """``database.table``."""
        return f"{DEMO_DATABASE}.{self.name}"

    @property
    def is_primary_key_table(self) -> bool:
        """Whether the table keeps state per primary key."""
        return bool(self.primary_key)

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :meth:`fluss_lake.Connection.create_table` (the lake options included)."""
        return {
            "schema": dict(self.schema),
            "primary_key": list(self.primary_key),
            "bucket_num": self.bucket_num,
            "bucket_keys": list(self.bucket_keys) if self.bucket_keys is not None else None,
            "options": {**LAKE_OPTIONS, **self.options},
            "comment": self.description,
        }


_TS = "TIMESTAMP_LTZ(3)"

#: The columns each source system owns in ``customer_360``: every stream writes only these (plus the key).
STREAM_COLUMNS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "sessions": ("last_seen_at", "sessions_7d", "last_channel", "pages_per_session"),
        "transactions": ("txn_count_30d", "txn_amount_30d", "last_txn_at"),
        "crm_tickets": ("open_tickets", "last_ticket_topic", "csat"),
        "marketing": ("email_opens_30d", "email_clicks_30d", "last_campaign", "unsubscribed"),
        "telemetry": ("app_version", "crashes_7d", "active_minutes_7d"),
    }
)

_C360_TYPES = {
    "last_seen_at": _TS,
    "sessions_7d": "INT",
    "last_channel": "STRING",
    "pages_per_session": "DOUBLE",
    "txn_count_30d": "INT",
    "txn_amount_30d": "DOUBLE",
    "last_txn_at": _TS,
    "open_tickets": "INT",
    "last_ticket_topic": "STRING",
    "csat": "DOUBLE",
    "email_opens_30d": "INT",
    "email_clicks_30d": "INT",
    "last_campaign": "STRING",
    "unsubscribed": "BOOLEAN",
    "app_version": "STRING",
    "crashes_7d": "INT",
    "active_minutes_7d": "INT",
}

DEMO_TABLES: Mapping[str, LiveTableSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            LiveTableSpec(
                "customers",
                {
                    "customer_id": "BIGINT",
                    "name": "STRING",
                    "email": "STRING",
                    "country": "STRING",
                    "segment": "STRING",
                    "signup_at": _TS,
                    "updated_at": _TS,
                },
                "CRM customer master: new sign-ups and profile changes (primary-key table).",
                primary_key=("customer_id",),
            ),
            LiveTableSpec(
                "orders",
                {
                    "order_id": "BIGINT",
                    "customer_id": "BIGINT",
                    "amount": "DOUBLE",
                    "currency": "STRING",
                    "status": "STRING",
                    "channel": "STRING",
                    "created_at": _TS,
                },
                "Order service: orders as placed, then shipped (several updates of one key per batch); bucketed by "
                "customer, so the delta join with customers probes it by its bucket-key prefix.",
                primary_key=("customer_id", "order_id"),
                bucket_keys=("customer_id",),
            ),
            LiveTableSpec(
                "payments",
                {
                    "payment_id": "BIGINT",
                    "order_id": "BIGINT",
                    "customer_id": "BIGINT",
                    "amount": "DOUBLE",
                    "method": "STRING",
                    "card_country": "STRING",
                    "ip_country": "STRING",
                    "device_id": "STRING",
                    "is_new_device": "BOOLEAN",
                    "paid_at": _TS,
                    "is_fraud": "BOOLEAN",
                },
                "Payment events (log table), bucketed by customer; `is_fraud` is the chargeback label.",
                bucket_keys=("customer_id",),
                options={"table.statistics.columns": "payment_id,customer_id"},
            ),
            LiveTableSpec(
                "customer_spend",
                {
                    "customer_id": "BIGINT",
                    "total_spend": "DOUBLE",
                    "order_count": "BIGINT",
                    "max_order": "DOUBLE",
                    "first_order_at": _TS,
                    "last_order_at": _TS,
                },
                "Spend per customer: the aggregation job writes partial aggregates of new payments, the aggregation "
                "merge engine keeps the totals (sum, count, max, min).",
                primary_key=("customer_id",),
                options={
                    "table.merge-engine": "aggregation",
                    "fields.total_spend.agg": "sum",
                    "fields.order_count.agg": "sum",
                    "fields.max_order.agg": "max",
                    "fields.first_order_at.agg": "min",
                    "fields.last_order_at.agg": "max",
                },
            ),
            LiveTableSpec(
                "customer_360",
                {"customer_id": "BIGINT", **_C360_TYPES, "updated_at": _TS},
                "One row per customer; sessions, transactions, CRM tickets, marketing and telemetry each write only "
                "their own columns (partial updates) and `updated_at`, the end of the event window they cover.",
                primary_key=("customer_id",),
            ),
            LiveTableSpec(
                "orders_enriched",
                {
                    "customer_id": "BIGINT",
                    "order_id": "BIGINT",
                    "amount": "DOUBLE",
                    "currency": "STRING",
                    "status": "STRING",
                    "channel": "STRING",
                    "created_at": _TS,
                    "customer_name": "STRING",
                    "customer_country": "STRING",
                    "segment": "STRING",
                },
                "Orders LEFT JOIN customers, kept by a delta join (zero state: only offsets).",
                primary_key=("customer_id", "order_id"),
                bucket_keys=("customer_id",),
            ),
            LiveTableSpec(
                "fraud_risk",
                {
                    "payment_id": "BIGINT",
                    "order_id": "BIGINT",
                    "customer_id": "BIGINT",
                    "amount": "DOUBLE",
                    "method": "STRING",
                    "card_country": "STRING",
                    "ip_country": "STRING",
                    "is_new_device": "BOOLEAN",
                    "paid_at": _TS,
                    "sessions_7d": "INT",
                    "txn_count_30d": "INT",
                    "txn_amount_30d": "DOUBLE",
                    "open_tickets": "INT",
                    "last_ticket_topic": "STRING",
                    "crashes_7d": "INT",
                    "known_customer": "BOOLEAN",
                    "ip_mismatch": "BOOLEAN",
                    "amount_ratio": "DOUBLE",
                    "risk_score": "DOUBLE",
                    "risk_band": "STRING",
                },
                "Payments enriched with the current customer_360 row by a lookup join, with fraud signals and a score "
                "(log table, appended exactly once).",
                bucket_keys=("customer_id",),
                options={"table.statistics.columns": "payment_id,customer_id"},
            ),
        )
    }
)

#: Tables the demo's generators write (group ``live``); the others are results of zero-state jobs (group ``jobs``).
SOURCE_TABLES = ("customers", "orders", "payments", "customer_360")
JOB_TABLES = ("orders_enriched", "fraud_risk", "customer_spend")


def schema_differences(spec: LiveTableSpec, table: fl.Table) -> list[str]:
    """What differs between the declared schema and the stored one (empty when they match).

    Columns added later (nullable, at the end) count as differences too: the demo's declarations are the
    contract its assets and checks rely on.
    """
    stored = table.schema
    declared = list(spec.schema.items())
    found = [(c.name, c.type_name) for c in stored.columns]
    problems = []
    if [name for name, _ in found] != [name for name, _ in declared]:
        problems.append(f"columns {[n for n, _ in found]} != declared {[n for n, _ in declared]}")
    for (name, kind), (other, stored_kind) in zip(declared, found, strict=False):
        if name == other and _normalize(kind) != stored_kind:
            problems.append(f"column {name}: {stored_kind} != declared {kind}")
    if tuple(stored.primary_key) != spec.primary_key:
        problems.append(f"primary key {list(stored.primary_key)} != declared {list(spec.primary_key)}")
    engine = table.info.options.get("table.merge-engine")
    if engine != spec.options.get("table.merge-engine"):
        problems.append(f"table.merge-engine {engine!r} != declared {spec.options.get('table.merge-engine')!r}")
    return problems


def _normalize(type_name: str) -> str:
    """The Fluss spelling the store reports for a declared type name."""
    from fluss_lake.metadata.types import type_name_of

    return type_name_of(type_name)
