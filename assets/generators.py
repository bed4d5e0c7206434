"""Seeded, vectorized generators of the Customer 360 and fraud-signals streams.

Every generator is a pure function of ``(scenario, batch)``: batch ``n`` covers the event-time window
``[epoch + n * window, epoch + (n + 1) * window)`` and is the same frame every time it is generated, which is
what makes re-running a materialization harmless (see ``docs/DAGSTER.md``). Attributes that belong to a
customer (name, country, signup time...) are a fixed function of the customer id, so any batch can restate a
customer's row without knowing earlier batches. All columns are built with numpy/Polars over whole arrays.

Examples
--------
>>> s = Scenario(customers=50, orders_per_batch=20)
>>> orders(s, 0).height >= 20, orders(s, 0).equals(orders(s, 0))
(True, True)
>>> sorted(stream(s, "crm_tickets", 1).columns)
['csat', 'customer_id', 'last_ticket_topic', 'open_tickets']
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import polars as pl

from assets.tables import DEMO_TABLES, STREAM_COLUMNS
from fluss_lake.exceptions import InvalidConfigError

__all__ = ["ORDER_ID_STRIDE", "STREAMS", "Scenario", "customers", "orders", "payments", "stream"]

#: Order (and payment) ids of batch ``n`` are ``n * ORDER_ID_STRIDE + i``.
ORDER_ID_STRIDE = 10_000_000
STREAMS = tuple(STREAM_COLUMNS)

_COUNTRIES = np.array(["US", "DE", "GB", "FR", "NL", "ES", "BR", "IN"])
_COUNTRY_P = np.array([0.34, 0.16, 0.14, 0.1, 0.07, 0.07, 0.06, 0.06])
_CURRENCY = {"US": "USD", "DE": "EUR", "GB": "GBP", "FR": "EUR", "NL": "EUR", "ES": "EUR", "BR": "BRL", "IN": "INR"}
_SEGMENTS = np.array(["consumer", "smb", "enterprise"])
_DOMAINS = np.array(["example.com", "mail.test", "corp.example", "shop.test"])
_FIRST = np.array(["Ada", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea"])
_LAST = np.array(["Smith", "Müller", "Rossi", "Silva", "Kumar", "Dubois", "Novak", "Jensen", "Garcia", "Okafor"])
_CHANNELS = np.array(["web", "ios", "android"])
_ORDER_CHANNELS = np.array(["web", "ios", "android", "store"])
_METHODS = np.array(["card", "wallet", "bank_transfer"])
_TOPICS = np.array(["billing", "delivery", "login", "refund", "fraud_report"])
_CAMPAIGNS = np.array(["black_friday", "winback", "newsletter", "onboarding"])
_VERSIONS = np.array(["5.2.0", "5.3.1", "5.4.0"])
#: Share of customers each stream touches per batch.
_ACTIVITY = {"sessions": 0.30, "transactions": 0.15, "crm_tickets": 0.03, "marketing": 0.20, "telemetry": 0.25}


@dataclass(frozen=True, slots=True)
class Scenario:
    """Sizes, seed and clock of the demo; batch ``n`` is one ``batch_window_ms`` of event time."""

    seed: int = 7
    customers: int = 2_000
    new_customers_per_batch: int = 25
    orders_per_batch: int = 600
    epoch: datetime = datetime(2026, 11, 1, tzinfo=UTC)
    batch_window_ms: int = 3_600_000

    def __post_init__(self) -> None:
        checks = {
            "customers": self.customers >= 1,
            "new_customers_per_batch": self.new_customers_per_batch >= 0,
            "orders_per_batch": 1 <= self.orders_per_batch < ORDER_ID_STRIDE,
            "batch_window_ms": self.batch_window_ms >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise InvalidConfigError(
                    f"demo scenario {name}={getattr(self, name)!r} is out of range; use a "
                    f"positive value (orders_per_batch below {ORDER_ID_STRIDE})"
                )
        if self.epoch.tzinfo is None:
            raise InvalidConfigError(
                "demo scenario epoch must be timezone-aware, e.g. datetime(2026, 11, 1, tzinfo=UTC)"
            )

    def customers_at(self, batch: int) -> int:
        """How many customers exist once batch `batch` of ``customers`` is applied."""
        return self.customers + batch * self.new_customers_per_batch

    def window(self, batch: int) -> tuple[int, int]:
        """Event-time window of a batch, epoch milliseconds ``[start, end)``."""
        start = int(self.epoch.timestamp() * 1000) + batch * self.batch_window_ms
        return start, start + self.batch_window_ms

    def rng(self, name: str, batch: int) -> np.random.Generator:
        """The random generator of one stream's batch (independent of every other stream and batch)."""
        _check_batch(batch)
        return np.random.default_rng([self.seed, zlib.crc32(name.encode()), batch])


def _check_batch(batch: int) -> None:
    if not isinstance(batch, int | np.integer) or batch < 0:
        raise InvalidConfigError(f"batch {batch!r} must be a non-negative integer (batch 0 is the first window)")


def _mix(ids: np.ndarray, salt: int) -> np.ndarray:
    """A fixed per-id pseudo-random uint64 (splitmix64 finalizer), so per-customer attributes need no state."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (salt + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _unit(ids: np.ndarray, salt: int) -> np.ndarray:
    """A fixed per-id uniform number in [0, 1)."""
    return (_mix(ids, salt) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _pick(values: np.ndarray, u: np.ndarray, p: np.ndarray | None = None) -> np.ndarray:
    """Map uniforms to `values` with probabilities `p` (uniform when None)."""
    if p is None:
        return values[np.minimum((u * len(values)).astype(np.int64), len(values) - 1)]
    return values[np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), len(values) - 1)]


def _ts(ms: np.ndarray) -> pl.Series:
    """Epoch milliseconds as a UTC ``TIMESTAMP_LTZ(3)`` column."""
    return pl.Series(ms.astype(np.int64)).cast(pl.Datetime("ms")).dt.replace_time_zone("UTC")


def _conform(frame: pl.DataFrame, table: str, columns: tuple[str, ...] | None = None) -> pl.DataFrame:
    """Cast to the declared column types of `table`, in declared order."""
    from fluss_lake.metadata.types import to_polars_dtype

    schema = DEMO_TABLES[table].schema
    names = columns or tuple(schema)
    return frame.select([pl.col(n).cast(to_polars_dtype(schema[n])) for n in names])


def customer_country(ids: np.ndarray) -> np.ndarray:
    """Home country of each customer (a fixed function of the id)."""
    return _pick(_COUNTRIES, _unit(ids, 1), _COUNTRY_P)


def customers(s: Scenario, batch: int) -> pl.DataFrame:
    """Sign-ups of the batch (batch 0: the initial population) and profile changes (segment) of ~1% of others."""
    rng = s.rng("customers", batch)
    start, end = s.window(batch)
    first, last = (0, s.customers) if batch == 0 else (s.customers_at(batch - 1), s.customers_at(batch))
    new = np.arange(first, last, dtype=np.int64)
    changed = np.unique(rng.integers(0, first, size=max(first // 100, 0))) if first else np.zeros(0, np.int64)
    ids = np.concatenate([new, changed])
    segment = _pick(_SEGMENTS, _unit(ids, 3), np.array([0.8, 0.15, 0.05]))
    segment[len(new) :] = _pick(_SEGMENTS, rng.random(len(changed)), np.array([0.5, 0.35, 0.15]))
    year_ms = 365 * 86_400_000
    signup = np.where(
        ids < s.customers,
        s.window(0)[0] - (_unit(ids, 4) * year_ms).astype(np.int64),
        s.window(np.maximum((ids - s.customers) // max(s.new_customers_per_batch, 1) + 1, 0))[0]
        + (_unit(ids, 4) * s.batch_window_ms).astype(np.int64),
    )
    updated = np.where(
        np.arange(len(ids)) < len(new),
        np.maximum(signup, start),
        start + (rng.random(len(ids)) * (end - start)).astype(np.int64),
    )
    frame = pl.DataFrame(
        {
            "customer_id": ids,
            "first": _pick(_FIRST, _unit(ids, 5)),
            "last": _pick(_LAST, _unit(ids, 6)),
            "domain": _pick(_DOMAINS, _unit(ids, 7)),
            "country": customer_country(ids),
            "segment": segment,
            "signup_at": _ts(signup),
            "updated_at": _ts(updated),
        }
    )
    frame = frame.with_columns(
        pl.format("{} {}", "first", "last").alias("name"),
        pl.format(
            "{}.{}{}@{}", pl.col("first").str.to_lowercase(), pl.col("last").str.to_lowercase(), "customer_id", "domain"
        ).alias("email"),
    )
    return _conform(frame, "customers")


def _placed_orders(s: Scenario, batch: int) -> pl.DataFrame:
    """The orders placed in the batch's window; older customers order more often."""
    rng = s.rng("orders", batch)
    n = s.orders_per_batch
    start, end = s.window(batch)
    population = s.customers_at(batch)
    customer = np.minimum((population * rng.random(n) ** 2).astype(np.int64), population - 1)
    country = customer_country(customer)
    return pl.DataFrame(
        {
            "order_id": batch * ORDER_ID_STRIDE + np.arange(n, dtype=np.int64),
            "customer_id": customer,
            "amount": np.round(rng.lognormal(3.5, 0.8, n), 2),
            "currency": pl.Series(country).replace_strict(_CURRENCY),
            "status": np.full(n, "placed"),
            "channel": _pick(_ORDER_CHANNELS, rng.random(n), np.array([0.45, 0.25, 0.2, 0.1])),
            "created_at": _ts(np.sort(start + (rng.random(n) * (end - start)).astype(np.int64))),
        }
    )


def orders(s: Scenario, batch: int) -> pl.DataFrame:
    """Placed orders, then a ``shipped`` update of ~40% of them: one key may appear twice (applied in order)."""
    placed = _placed_orders(s, batch)
    shipped = placed.filter(pl.Series(s.rng("shipments", batch).random(placed.height) < 0.4))
    return _conform(pl.concat([placed, shipped.with_columns(pl.lit("shipped").alias("status"))]), "orders")


def payments(s: Scenario, batch: int) -> pl.DataFrame:
    """One payment per placed order, 0.5-30 s after it but within the batch's window; fraud is likelier with a
    foreign IP, a new device and a large amount."""
    placed = _placed_orders(s, batch)
    rng = s.rng("payments", batch)
    n = placed.height
    customer = placed["customer_id"].to_numpy()
    home = customer_country(customer)
    foreign_card = rng.random(n) < 0.03
    card_country = np.where(foreign_card, _pick(_COUNTRIES, rng.random(n)), home)
    foreign_ip = rng.random(n) < 0.06
    ip_country = np.where(foreign_ip, _pick(_COUNTRIES, rng.random(n)), card_country)
    new_device = rng.random(n) < 0.08
    amount = placed["amount"].to_numpy()
    logit = -4.6 + 2.2 * (ip_country != card_country) + 1.6 * new_device + 0.9 * np.log(amount / 40.0)
    is_fraud = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    device = np.where(new_device, rng.integers(0, 1 << 40, n), _mix(customer, 9) >> np.uint64(24))
    last_moment = _ts(np.array([s.window(batch)[1] - 1]))[0]  # paid within the batch's window, as it covers
    frame = placed.select("order_id", "customer_id", "amount", "created_at").with_columns(
        pl.col("order_id").alias("payment_id"),
        pl.Series("method", _pick(_METHODS, rng.random(n), np.array([0.7, 0.22, 0.08]))),
        pl.Series("card_country", card_country),
        pl.Series("ip_country", ip_country),
        pl.Series("device_id", device.astype(np.int64)).cast(pl.String).str.pad_start(13, "0"),
        pl.Series("is_new_device", new_device),
        (pl.col("created_at") + pl.duration(milliseconds=pl.lit(pl.Series(rng.integers(500, 30_000, n)))))
        .clip(upper_bound=pl.lit(last_moment))
        .alias("paid_at"),
        pl.Series("is_fraud", is_fraud),
    )
    return _conform(frame, "payments")


def stream(s: Scenario, name: str, batch: int) -> pl.DataFrame:
    """One source system's partial update of ``customer_360``: the key plus only the columns it owns."""
    if name not in STREAM_COLUMNS:
        raise InvalidConfigError(f"unknown stream {name!r}; the demo's streams are {list(STREAMS)}")
    rng = s.rng(name, batch)
    start, end = s.window(batch)
    population = s.customers_at(batch)
    ids = np.flatnonzero(rng.random(population) < _ACTIVITY[name]).astype(np.int64)
    n = len(ids)

    def moment() -> pl.Series:
        return _ts(start + (rng.random(n) * (end - start)).astype(np.int64))

    if name == "sessions":
        cols = {
            "last_seen_at": moment(),
            "sessions_7d": rng.poisson(4, n) + 1,
            "last_channel": _pick(_CHANNELS, rng.random(n), np.array([0.5, 0.3, 0.2])),
            "pages_per_session": np.round(rng.gamma(2.0, 2.5, n), 1),
        }
    elif name == "transactions":
        count = rng.poisson(6, n) + 1
        cols = {
            "txn_count_30d": count,
            "txn_amount_30d": np.round(count * rng.lognormal(3.5, 0.6, n), 2),
            "last_txn_at": moment(),
        }
    elif name == "crm_tickets":
        cols = {
            "open_tickets": rng.poisson(0.7, n),
            "last_ticket_topic": _pick(_TOPICS, rng.random(n)),
            "csat": np.round(np.clip(rng.normal(4.0, 0.9, n), 1.0, 5.0), 1),
        }
    elif name == "marketing":
        opens = rng.poisson(3, n)
        cols = {
            "email_opens_30d": opens,
            "email_clicks_30d": rng.binomial(opens, 0.25),
            "last_campaign": _pick(_CAMPAIGNS, rng.random(n)),
            "unsubscribed": rng.random(n) < 0.01,
        }
    else:
        cols = {
            "app_version": _pick(_VERSIONS, rng.random(n), np.array([0.2, 0.3, 0.5])),
            "crashes_7d": rng.poisson(0.3, n),
            "active_minutes_7d": np.round(rng.gamma(2.0, 45.0, n)),
        }
    frame = pl.DataFrame({"customer_id": ids, **cols})
    return _conform(frame, "customer_360", ("customer_id", *STREAM_COLUMNS[name]))
