"""A one-key lookup whose command head the server has seen is decoded from its key alone
(``protocol.decode_unary(points=...)``): the command must be exactly what parsing the whole body gives, and
anything parsing would refuse (or read differently) must not be accepted by the short way."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluss_lake.exceptions import FlussLakeError
from serving.protocol import EXCHANGE_VERBS, decode_command, decode_unary, encode_command

LIMIT = 64 << 10


def _body(table: str, with_found: bool, key_json: bytes) -> bytes:
    head = encode_command("lookup", table=table, with_found=with_found, key=None)[: -len(b"null}")]
    return head + key_json + b"}\n"


def _full(body: bytes) -> dict | None:
    """What parsing the whole body gives (None: refused)."""
    try:
        return decode_command(body[:-1], limit=LIMIT, expected=EXCHANGE_VERBS)
    except FlussLakeError:
        return None


def _short(body: bytes, points: dict) -> dict | None:
    try:
        command, rows = decode_unary(body, limit=LIMIT, expected=EXCHANGE_VERBS, points=points)
    except FlussLakeError:
        return None
    assert rows is None
    return command


def _learned(table: str, with_found: bool, column: str) -> dict:
    points: dict = {}
    _short(_body(table, with_found, json.dumps({column: 1}).encode()), points)
    assert len(points) == 1  # the first body taught the head
    return points


keys = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=12),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(
    table=st.sampled_from(["bench.a", "d.t", 'd.we"ird', "d.é"]),
    with_found=st.booleans(),
    column=st.sampled_from(["id", "customer_id", 'c"ol', "é"]),
    value=keys,
    other=st.sampled_from([None, "id", "x"]),
)
def test_a_known_head_decodes_to_what_the_whole_body_parses_to(table, with_found, column, value, other):
    points = _learned(table, with_found, column)
    key = {column: value} if other is None or other == column else {column: value, other: 1}
    body = _body(table, with_found, json.dumps(key).encode())
    assert _short(body, points) == _full(body) == {
        "verb": "lookup", "table": table, "with_found": with_found, "key": key,
    }


@pytest.mark.parametrize(
    "key_json",
    [b'{"id":007}', b'{"id":-01}', b'{"id":1_000}', b'{"id": 12 }', b'{"id":+5}', b'{"id":12', b'{"id":12}}',
     b'{"id":1},"verb":"append"', b'{"id":1},"with_offsets":true', b'[1]', b'{"id":0x10}', b'{"id":1e3}',
     b'{"id":-}', b'{"id":}', b'{"id":"12"}', b'{"id":12,"id":13}', b'{"id":\xff}'],
)
def test_anything_else_after_a_known_head_reads_as_a_whole_parse_reads_it(key_json):
    points = _learned("d.t", False, "id")
    body = _body("d.t", False, key_json)
    assert _short(body, points) == _full(body)


def test_heads_are_learned_only_from_commands_written_as_the_client_writes_them():
    points: dict = {}
    for body in (
        b'{"verb": "lookup", "table": "d.t", "with_found": false, "key": {"id": 1}}\n',  # spaces
        b'{"table":"d.t","verb":"lookup","with_found":false,"key":{"id":1}}\n',  # another order
        b'{"verb":"lookup","table":"d.t","with_found":false,"with_offsets":true,"key":{"id":1}}\n',
        b'{"verb":"lookup","table":"d.t","with_found":0,"key":{"id":1}}\n',
        b'{"verb":"lookup","table":"d.t","with_found":false,"key":[1]}\n',
    ):
        assert _short(body, points) == _full(body)
    assert points == {}


def test_a_known_head_is_not_parsed_again(monkeypatch):
    points = _learned("d.t", True, "id")
    import serving.protocol as protocol

    def refuse(*args, **kwargs):
        raise AssertionError("the whole command was parsed")

    monkeypatch.setattr(protocol, "decode_command", refuse)
    for key in ({"id": 5}, {"id": -(2**63)}, {"id": 0}, {"id": "a\"b"}, {"id": None}):
        body = _body("d.t", True, json.dumps(key).encode())
        assert _short(body, points) == {"verb": "lookup", "table": "d.t", "with_found": True, "key": key}
