"""A real Flight server in this process on 127.0.0.1 port 0 over a small store, with and without tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import fluss_lake as fl
import serving
from fluss_lake.training import create_feature_log

READER, WRITER, OTHER = "reader-token-1", "writer-token-2", "other-token-3"
TOKENS = {"tokens": [
    {"name": "reader", "token": READER, "access": "read", "tables": ["shop.*"]},
    {"name": "writer", "token": WRITER, "access": "read-write", "tables": ["shop.payments", "shop.customer", "audit.*"]},
    {"name": "other", "token": OTHER, "access": "read-write", "tables": ["other.*"]},
]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_767_225_600_000  # 2026-01-01 00:00 UTC

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def conn(tmp_path, clock) -> fl.Connection:
    conn = fl.connect(str(tmp_path / "store"), clock=clock)
    for db in ("shop", "audit", "other"):
        conn.create_database(db)
    conn.create_table("shop.customer", schema={"id": "BIGINT", "tier": "STRING", "score": "DOUBLE"},
                      primary_key=["id"], bucket_num=2)
    conn.create_table("shop.orders", schema={"customer_id": "BIGINT", "order_id": "BIGINT", "amount": "DOUBLE"},
                      primary_key=["customer_id", "order_id"], bucket_keys=["customer_id"], bucket_num=2)
    conn.create_table("shop.payments", schema={"payment_id": "BIGINT", "customer_id": "BIGINT", "amount": "DOUBLE"})
    conn.create_table("other.secret", schema={"id": "BIGINT", "v": "STRING"}, primary_key=["id"])
    create_feature_log(conn, "audit.served")
    customer = conn.get_table("shop.customer")
    customer.upsert([{"id": 1, "tier": "gold", "score": 0.9}, {"id": 2, "tier": "silver", "score": 0.4}])
    clock.now += 1000
    customer.upsert([{"id": 2, "tier": "gold", "score": 0.5}, {"id": 3, "tier": "bronze", "score": 0.1}])
    conn.get_table("shop.orders").upsert([{"customer_id": c, "order_id": o, "amount": float(c * 10 + o)}
                                          for c in (1, 2) for o in (1, 2, 3)])
    conn.get_table("other.secret").upsert([{"id": 1, "v": "hidden"}])
    return conn


@pytest.fixture
def server(conn) -> Iterator[serving.FlussLakeServer]:
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0), connection=conn)
    yield srv
    srv.stop()


@pytest.fixture
def secured(conn) -> Iterator[serving.FlussLakeServer]:
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0, tokens=serving.TokenSet.from_json(TOKENS),
                                                       max_request_rows=1000, http_port=0), connection=conn)
    yield srv
    srv.stop()


@pytest.fixture(params=["lane", "flight"])
def remote(server, request) -> Iterator[serving.RemoteConnection]:
    """A client of `server`: small requests over the socket lane, or every call over Flight."""
    with serving.connect(server.location, socket_lane=request.param == "lane") as client:
        yield client
