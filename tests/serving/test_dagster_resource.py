"""Assets use a served store through ServedStore exactly as they use a local one through LiveStore."""

from __future__ import annotations

import dagster as dg

from assets.resources import LiveStore
from assets.served import ServedStore


@dg.asset
def vip_customers(store: dg.ResourceParam[dg.ConfigurableResource]) -> dg.MaterializeResult:
    """The same body for both resources: read one table through the connection, write another."""
    conn = store.connection()  # type: ignore[attr-defined]
    rows = conn.get_table("shop.customer").lookup([{"id": i} for i in (1, 2, 3)])
    gold = rows.filter(rows["tier"] == "gold")
    conn.get_table("shop.payments").append([{"payment_id": int(i), "customer_id": int(i), "amount": 0.0}
                                            for i in gold["id"]])
    return dg.MaterializeResult(metadata={"gold": gold.height})


def test_an_asset_runs_on_a_served_and_on_a_local_store(server, conn):
    served = dg.materialize([vip_customers], resources={"store": ServedStore(url=server.location)})
    assert served.success
    assert conn.get_table("shop.payments").scan_log()["customer_id"].to_list() == [1, 2]
    local = dg.materialize([vip_customers], resources={"store": LiveStore(url=conn.url)})
    assert local.success
    assert conn.get_table("shop.payments").scan_log()["customer_id"].sort().to_list() == [1, 1, 2, 2]
