"""Pathway's side of ``bench.freshness``: the same events at the same rate, the same two joins, the same latency.

Run by ``bench.freshness`` with the interpreter of Pathway's own environment (Pathway is measured, never vendored:
its licence forbids it), as ``python bench/_freshness_pathway.py --rate R --seconds S --out DIR``. The event
generators below use numpy only, so ``bench.freshness`` imports them too: both sides write the same events.

Two Python connectors (``pw.io.python.read``) are fed from threads: ``customers`` (upsert session: a row with a
known ``cid`` replaces it), first all customers, then R/10 updates/s; ``orders`` at R events/s in batches every
``--interval-s``, each batch committed at once (``commit()``), its hand-over time noted after the commit. The delta
join is ``orders.join(customers)`` (incremental on both sides), the lookup join ``orders.asof_now_join(customers)``
(each order joined with the customers as they are when it arrives). ``pw.io.subscribe``'s ``on_change`` notes the
time each output row arrives; latency = that time - its batch's hand-over time.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import numpy as np

_wall = time.time

def orders_batch(start: int, n: int, customers: int, seed: int) -> dict[str, np.ndarray]:
    """Orders ``start .. start+n-1``: event id ``oid``, a customer and an amount, from the event ids alone (so
    every process, and Pathway's side, makes the same events)."""
    oid = np.arange(start, start + n, dtype=np.int64)
    mixed = (oid.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed)) >> np.uint64(20)
    return {
        "oid": oid,
        "cid": (mixed % np.uint64(customers)).astype(np.int64),
        "amount": (mixed % np.uint64(10_000)).astype(np.float64) / 100.0,
    }


def customers_batch(start: int, n: int, customers: int) -> dict[str, np.ndarray]:
    """Customer updates ``start .. start+n-1`` (update k changes customer ``k * 7919 % customers``)."""
    k = np.arange(start, start + n, dtype=np.int64)
    return {
        "cid": (k * 7919) % customers,
        "name": np.char.add("c", (k % 1000).astype(str)).astype(object),
        "tier": (k % 5).astype(np.int32),
    }


def main() -> None:
    import pathway as pw

    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--interval-s", type=float, default=0.01)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rate, seconds, interval, n_cust = args.rate, args.seconds, args.interval_s, args.customers
    loaded = threading.Event()
    commits: list[tuple[int, int, float]] = []
    state = {"events": 0, "elapsed_s": 0.0}

    class Customers(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            cid = np.arange(n_cust, dtype=np.int64)
            for c in cid.tolist():
                self.next(cid=c, name=f"c{c}", tier=c % 5)
            self.commit()
            loaded.set()
            time.sleep(1.0)  # as the orders' side: they start after Pathway has taken the customers in
            start, written, tick = time.perf_counter(), 0, 0
            while (now := time.perf_counter() - start) < seconds:
                owed = int(rate / 10 * now) - written
                if owed > 0:
                    b = customers_batch(written, owed, n_cust)
                    for c, name, tier in zip(b["cid"].tolist(), b["name"].tolist(), b["tier"].tolist(), strict=True):
                        self.next(cid=c, name=name, tier=tier)
                    self.commit()
                    written += owed
                tick += 1
                time.sleep(max(tick * interval - (time.perf_counter() - start), 0))

    class Orders(pw.io.python.ConnectorSubject):
        def run(self) -> None:
            loaded.wait()
            time.sleep(1.0)
            start, written, tick = time.perf_counter(), 0, 0
            while (now := time.perf_counter() - start) < seconds:
                owed = int(rate * now) - written
                if owed > 0:
                    b = orders_batch(written, owed, n_cust, args.seed)
                    for o, c, a in zip(b["oid"].tolist(), b["cid"].tolist(), b["amount"].tolist(), strict=True):
                        self.next(oid=o, cid=c, amount=a)
                    self.commit()
                    commits.append((written, owed, time.time()))
                    written += owed
                tick += 1
                time.sleep(max(tick * interval - (time.perf_counter() - start), 0))
            owed = int(rate * seconds) - written  # what the rate owes at the end (as on fluss-lake's side)
            if owed > 0:
                b = orders_batch(written, owed, n_cust, args.seed)
                for o, c, a in zip(b["oid"].tolist(), b["cid"].tolist(), b["amount"].tolist(), strict=True):
                    self.next(oid=o, cid=c, amount=a)
                self.commit()
                commits.append((written, owed, time.time()))
                written += owed
            state["events"], state["elapsed_s"] = written, time.perf_counter() - start

    class CustomerSchema(pw.Schema):
        cid: int = pw.column_definition(primary_key=True)
        name: str
        tier: int

    class OrderSchema(pw.Schema):
        oid: int = pw.column_definition(primary_key=True)
        cid: int
        amount: float

    customers = pw.io.python.read(Customers(session_type="upsert"), schema=CustomerSchema, autocommit_duration_ms=10)
    orders = pw.io.python.read(Orders(), schema=OrderSchema, autocommit_duration_ms=10)
    delta = orders.join(customers, orders.cid == customers.cid).select(
        orders.oid, orders.cid, orders.amount, customers.name, customers.tier
    )
    lookup = orders.asof_now_join(customers, orders.cid == customers.cid).select(
        orders.oid, orders.cid, orders.amount, customers.name, customers.tier
    )
    seen: dict[str, tuple[list[int], list[float]]] = {"delta": ([], []), "lookup": ([], [])}

    def watcher(name: str):  # noqa: ANN202
        oids, times = seen[name]

        def on_change(key, row, time, is_addition):  # noqa: ANN001, ANN202  (Pathway's keyword names)
            if is_addition:
                oids.append(row["oid"])
                times.append(_wall())

        return on_change

    pw.io.subscribe(delta, watcher("delta"))
    pw.io.subscribe(lookup, watcher("lookup"))
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)

    table = np.asarray(commits, dtype=np.float64).reshape(-1, 3)
    first, at = table[:, 0].astype(np.int64), table[:, 2]
    out = {}
    for name, (oids, times) in seen.items():
        oid = np.asarray(oids, dtype=np.int64)
        t = np.asarray(times, dtype=np.float64)
        order = np.lexsort((t, oid))
        oid, t = oid[order], t[order]
        keep = np.r_[True, oid[1:] != oid[:-1]] if len(oid) else np.array([], dtype=bool)  # first arrival per oid
        oid, t = oid[keep], t[keep]
        batch = np.searchsorted(first, oid, side="right") - 1
        out[name] = np.full(state["events"], np.nan)  # by event id; NaN: never seen
        out[name][oid] = t - at[batch]
    np.savez(os.path.join(args.out, "latency.npz"), **out)
    print(json.dumps({"events": state["events"], "elapsed_s": state["elapsed_s"]}), flush=True)


if __name__ == "__main__":
    main()
