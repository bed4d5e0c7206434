"""Small requests travel as one action each way (a one-key lookup with its key in the JSON command, a few keys as
Arrow IPC after it) instead of a DoExchange stream: the answers must be the local table's, for every flat type,
and malformed bodies are refused with a clear error while the server keeps serving."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import polars as pl
import pyarrow.flight as flight
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
import serving
from serving.protocol import UNARY_MAX_BYTES, encode_command, from_flight_error
from tests.serving.conftest import OTHER, READER

SCHEMA = {
    "id": "BIGINT", "tiny": "TINYINT", "small": "SMALLINT", "flag": "BOOLEAN", "f": "FLOAT", "d": "DOUBLE",
    "s": "STRING", "b": "BYTES", "day": "DATE", "at": "TIMESTAMP(6)", "at_tz": "TIMESTAMP_LTZ(6)",
    "amount": "DECIMAL(10, 2)", "t": "TIME",
}


@pytest.fixture
def typed(conn) -> fl.Table:
    conn.create_table("shop.typed", schema=SCHEMA, primary_key=["id"], bucket_num=3)
    conn.create_table("shop.nested", schema={"id": "BIGINT", "tags": "ARRAY<STRING>"}, primary_key=["id"])
    table = conn.get_table("shop.typed")
    table.upsert([
        {"id": i, "tiny": i - 3, "small": 300 * i, "flag": i % 2 == 0, "f": i / 4, "d": i / 3, "s": f"s{i}",
         "b": bytes([i, 255 - i]), "day": dt.date(2026, 1, 1 + i), "at": dt.datetime(2026, 1, 1, i, 30),
         "at_tz": dt.datetime(2026, 1, 1, i, tzinfo=dt.UTC), "amount": Decimal(f"{i}.25"), "t": dt.time(i, 15)}
        for i in range(6)
    ] + [{"id": 9, **dict.fromkeys(list(SCHEMA)[1:])}])  # a row of nulls
    conn.get_table("shop.nested").upsert([{"id": 1, "tags": ["a", "b"]}])
    return table


@pytest.mark.parametrize("key", [0, 4, 9, 77])  # found rows, a row of nulls, an absent key
@pytest.mark.parametrize("with_found", [False, True])
def test_one_key_lookups_equal_the_local_table(typed, remote, key, with_found):
    served = remote.get_table("shop.typed")
    got = served.lookup([{"id": key}], with_found=with_found)
    assert_frame_equal(got, typed.lookup([{"id": key}], with_found=with_found))
    assert served.lookup_one({"id": key}) == typed.lookup_one({"id": key})


FLAT = {"id": "BIGINT", "tiny": "TINYINT", "small": "SMALLINT", "n": "INT", "flag": "BOOLEAN", "f": "FLOAT",
        "d": "DOUBLE", "s": "STRING", "b": "BYTES", "day": "DATE"}


@pytest.mark.parametrize("key", [0, 4, 9, 77])
@pytest.mark.parametrize("with_found", [False, True])
def test_one_key_answers_packed_by_the_server_equal_the_local_table(conn, remote, key, with_found):
    # only types serving.one_row packs: the server writes these answers itself, not through pyarrow
    conn.create_table("shop.flat", schema=FLAT, primary_key=["id"], bucket_num=3)
    local = conn.get_table("shop.flat")
    local.upsert([
        {"id": i, "tiny": i - 3, "small": 300 * i, "n": -i * 70_000, "flag": i % 2 == 0, "f": i / 4, "d": i / 3,
         "s": "é" * i, "b": bytes(range(i)), "day": dt.date(1960 + i, 1, 1)}
        for i in range(6)
    ] + [{"id": 9, **dict.fromkeys(list(FLAT)[1:])}])
    served = remote.get_table("shop.flat")
    got = served.lookup([{"id": key}], with_found=with_found)
    assert_frame_equal(got, local.lookup([{"id": key}], with_found=with_found))
    assert served.lookup_one({"id": key}) == local.lookup_one({"id": key})


@pytest.mark.parametrize("with_found", [False, True])
def test_one_key_commands_of_one_column_keys_carry_any_value(conn, remote, with_found):
    # the client writes a one-column key's value after a cached head: quotes, escapes, non-ASCII and the int64
    # extremes must reach the server as the same key
    conn.create_table("shop.by_name", schema={"name": "STRING", "v": "INT"}, primary_key=["name"], bucket_num=3)
    conn.create_table("shop.by_id", schema={"id": "BIGINT", "v": "INT"}, primary_key=["id"], bucket_num=3)
    names = ['a"b', "back\\slash", "é🙂", "line\nbreak\t", "", " ", "{}", '"}']
    ids = [0, -1, 2**63 - 1, -(2**63), 12345678901]
    conn.get_table("shop.by_name").upsert([{"name": n, "v": i} for i, n in enumerate(names)])
    conn.get_table("shop.by_id").upsert([{"id": k, "v": i} for i, k in enumerate(ids)])
    for path, column, keys in (("shop.by_name", "name", [*names, "absent"]), ("shop.by_id", "id", [*ids, 7])):
        served, local = remote.get_table(path), conn.get_table(path)
        for key in keys:
            got = served.lookup([{column: key}], with_found=with_found)
            assert_frame_equal(got, local.lookup([{column: key}], with_found=with_found))
            assert got.height == 1 and got[column][0] == key


def test_one_key_of_a_nested_table_and_a_few_keys_equal_the_local_table(conn, typed, remote):
    nested = remote.get_table("shop.nested")
    assert_frame_equal(nested.lookup([{"id": 1}], with_found=True), conn.get_table("shop.nested").lookup(
        [{"id": 1}], with_found=True))
    keys = pl.DataFrame({"id": [5, 77, 0, 9, 3]})
    for options in ({}, {"with_found": True}, {"with_offsets": True}):
        assert_frame_equal(remote.get_table("shop.typed").lookup(keys, **options), typed.lookup(keys, **options))


def test_a_large_request_still_streams(remote, monkeypatch):
    import serving.client

    unary = []
    real = serving.client.encode_unary
    monkeypatch.setattr(serving.client, "encode_unary", lambda *a: unary.append(1) or real(*a))
    customer = remote.get_table("shop.customer")
    assert customer.lookup(pl.DataFrame({"id": [1, 2]}))["tier"].to_list() == ["gold", "gold"]
    assert len(unary) == 1  # a few keys: one action
    ids = list(range(UNARY_MAX_BYTES // 8 + 10))  # over the size that goes as one action
    got = customer.lookup(pl.DataFrame({"id": ids}), with_found=True)
    assert got.height == len(ids) and got["_found"].sum() == 3
    assert len(unary) == 1  # streamed through DoExchange


def test_one_key_lookups_keep_the_library_errors(typed, remote):
    served = remote.get_table("shop.typed")
    with pytest.raises(fl.InvalidConfigError, match="primary-key columns"):
        served.lookup_one({"id": 1, "s": "x"})
    with pytest.raises(fl.FlussLakeError):
        served.lookup([{"id": 2**70}])  # out of BIGINT: the library's conformance refuses it
    assert served.lookup_one({"id": 1})["s"] == "s1"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"verb":"lookup","table":"shop.customer"}', "no input rows"),
        (b"not json\n", "not valid JSON"),
        (b'{"verb":"lookup","table":"shop.customer"}\nnot arrow', "not an Arrow IPC stream"),
        (b'{"verb":"lookup","table":"shop.customer","key":[1]}\n', "takes its key in the command"),
        (b'{"verb":"lookup","table":"shop.customer","key":{"id":1},"with_offsets":true}\n', "without offsets"),
        (b'{"verb":"lookup","table":"../x","key":{"id":1}}\n', "must look like"),
    ],
)
def test_malformed_small_requests_are_refused_and_the_server_keeps_serving(conn, remote, server, body, message):
    client = flight.connect(server.location)
    with pytest.raises(flight.FlightError, match=message):
        list(client.do_action(flight.Action("lookup", body)))
    with pytest.raises(flight.FlightError, match="over the limit"):
        list(client.do_action(flight.Action("lookup", b"x" * (70 << 10) + b"\n")))
    assert remote.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"
    assert remote.health()["status"] == "ok"


def test_tokens_hold_on_the_point_path(secured):
    """A token for other tables, or none, gets no row through the one-key path either."""
    client = flight.connect(secured.location)
    body = encode_command("lookup", table="shop.customer", key={"id": 1}) + b"\n"
    for headers, error in (([], serving.AuthenticationError), ([(b"authorization", f"Bearer {OTHER}".encode())],
                                                               serving.PermissionDeniedError)):
        with pytest.raises(flight.FlightError) as caught:
            list(client.do_action(flight.Action("lookup", body), flight.FlightCallOptions(headers=headers)))
        assert isinstance(from_flight_error(caught.value), error)
    with serving.connect(secured.location, token=READER) as reader:
        assert reader.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"
