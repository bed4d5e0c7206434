"""The ``fluss-lake`` command: ``demo`` runs the live-tables tour on the embedded default (a local folder)."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from importlib.metadata import entry_points

import polars as pl

import fluss_lake as fl

#: What ``fluss-lake --help`` says: every verb, whichever package brings it.
_DESCRIPTION = (
    "fluss-lake: streaming tables whose state lives in storage. 'demo' is a tour of the live tables in the "
    "terminal. The other verbs work on a home folder (--home, else $FLUSS_LAKE_HOME, else ./.fluss-lake: the "
    "store in live/, the Iceberg lake in lake/, the Dagster instance in dagster/): 'ui' starts the Dagster UI "
    "with the Customer 360 demo; 'materialize' runs the demo pipeline without the UI (--days N writes N days); "
    "'backfill' builds the training set of a range of days; 'tier' copies lake-enabled tables into Iceberg, once "
    "or continuously; 'check' verifies (and repairs) a store's objects; 'dagster' runs any dagster command with the "
    "home's instance; 'jobs run' runs a demo job in shards, here or on a Ray cluster (--ray). 'fluss-lake VERB "
    "--help' says more."
)


def _say(text: str) -> None:
    print(text, flush=True)


def demo(path: str | None, rows: int) -> int:
    """Create log and primary-key tables, write, merge, look up and read changelogs back."""
    root = path or tempfile.mkdtemp(prefix="fluss-lake-demo-")
    conn = fl.connect(root)
    _say(f"store: {conn.url}")
    conn.create_database("demo", ignore_if_exists=True)
    for name in ("clicks", "customer_360", "spend", "first_seen"):
        conn.drop_table(f"demo.{name}", ignore_if_not_exists=True)

    conn.create_table(
        "demo.clicks",
        schema={"customer_id": "BIGINT", "url": "STRING", "ts": "TIMESTAMP_LTZ(3)"},
        bucket_num=4,
        bucket_keys=["customer_id"],
        options={"table.statistics.columns": "customer_id"},
    )
    clicks = conn.get_table("demo.clicks")
    rng = random.Random(7)
    now = int(time.time() * 1000)
    frame = pl.DataFrame(
        {
            "customer_id": [rng.randrange(1000) for _ in range(rows)],
            "url": [rng.choice(["/", "/cart", "/pay", "/help"]) for _ in range(rows)],
            "ts": [now + i for i in range(rows)],
        }
    ).with_columns(pl.col("ts").cast(pl.Datetime("ms", "UTC")))
    result = clicks.append(frame)
    _say(f"log table demo.clicks: appended {result.rows} rows, end offsets {clicks.end_offsets()}")
    hot = clicks.scan_log(filters=[("customer_id", "<", 10)])
    _say(f"  filtered scan customer_id < 10: {hot.height} rows")

    conn.create_table(
        "demo.customer_360",
        schema={"customer_id": "BIGINT", "email": "STRING", "sessions": "INT", "tickets": "INT", "segment": "STRING"},
        primary_key=["customer_id"],
        bucket_num=4,
    )
    c360 = conn.get_table("demo.customer_360")
    c360.upsert(
        [{"customer_id": i, "email": f"c{i}@example.com"} for i in range(5)], target_columns=["customer_id", "email"]
    )
    c360.upsert([{"customer_id": i, "sessions": i * 3} for i in range(3)], target_columns=["customer_id", "sessions"])
    c360.upsert([{"customer_id": 1, "tickets": 2}], target_columns=["customer_id", "tickets"])
    c360.delete([{"customer_id": 4}])
    _say("primary-key table demo.customer_360 (partial updates: each stream writes its own columns):")
    _say(str(c360.to_polars().sort("customer_id")))
    _say("  $changelog of customer 1:")
    _say(
        str(
            c360.changelog()
            .filter(pl.col("customer_id") == 1)
            .select("_change_type", "_log_offset", "email", "sessions", "tickets")
        )
    )
    _say(f"  lookup of customers [1, 4, 2]: {c360.lookup([{'customer_id': k} for k in (1, 4, 2)])['email'].to_list()}")

    conn.create_table(
        "demo.spend",
        schema={"customer_id": "BIGINT", "total": "DOUBLE", "orders": "BIGINT", "biggest": "DOUBLE", "items": "STRING"},
        primary_key=["customer_id"],
        options={
            "table.merge-engine": "aggregation",
            "fields.total.agg": "sum",
            "fields.orders.agg": "sum",
            "fields.biggest.agg": "max",
            "fields.items.agg": "listagg",
        },
    )
    spend = conn.get_table("demo.spend")
    for order in range(6):
        amount = round(rng.uniform(5, 100), 2)
        spend.upsert(
            [{"customer_id": order % 2, "total": amount, "orders": 1, "biggest": amount, "items": f"sku{order}"}]
        )
    _say("aggregation table demo.spend (totals kept by the storage, not by a job):")
    _say(str(spend.to_polars().sort("customer_id")))

    conn.create_table(
        "demo.first_seen",
        schema={"customer_id": "BIGINT", "channel": "STRING"},
        primary_key=["customer_id"],
        options={"table.merge-engine": "first_row"},
    )
    first = conn.get_table("demo.first_seen")
    first.upsert([{"customer_id": 1, "channel": "web"}, {"customer_id": 1, "channel": "mobile"}])
    _say(f"first_row table keeps the first channel: {first.to_polars().to_dicts()}")
    reopened = fl.connect(root).get_table("demo.customer_360")
    same = reopened.to_polars().sort("customer_id").equals(c360.to_polars().sort("customer_id"))
    _say(f"a fresh connection restores the same state from snapshot + log tail: {same}")
    return 0 if same else 1


COMMAND_GROUP = "fluss_lake.commands"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fluss-lake`` console script.

    Packages built on the core (``tiering``, ``assets``) add sub-commands through the entry-point group
    ``fluss_lake.commands``: each entry is a callable ``register(subparsers)`` that adds a parser and sets
    ``func`` (taking the parsed arguments, returning an exit code). The core never imports them.
    """
    parser = argparse.ArgumentParser(prog="fluss-lake", description=_DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("demo", help="create tables, write, merge, look up and read changelogs back")
    run.add_argument("--path", help="store folder or URL (default: a new temporary folder)")
    run.add_argument("--rows", type=int, default=10_000, help="click rows to append")
    run.set_defaults(func=lambda args: demo(args.path, args.rows))
    seen: set[str] = set()
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        if entry.name not in seen:  # the same command declared twice (e.g. two installs on the path): first wins
            seen.add(entry.name)
            entry.load()(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
