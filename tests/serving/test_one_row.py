"""The server's hand-packed one-row IPC messages read back, through pyarrow's and Polars' readers, exactly as the
batch pyarrow builds from the same values (every packed type, nulls in any column, empty and long strings)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving.one_row import row_encoder

_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def _ints(bits: int, signed: bool = True) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else st.integers(0, 2**bits - 1)


TYPES: list[tuple[pa.DataType, st.SearchStrategy]] = [
    (pa.int8(), _ints(8)), (pa.int16(), _ints(16)), (pa.int32(), _ints(32)), (pa.int64(), _ints(64)),
    (pa.uint8(), _ints(8, False)), (pa.uint16(), _ints(16, False)), (pa.uint32(), _ints(32, False)),
    (pa.uint64(), _ints(64, False)),
    (pa.float32(), st.floats(width=32, allow_nan=False)), (pa.float64(), st.floats(allow_nan=False)),
    (pa.bool_(), st.booleans()), (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    (pa.large_string(), st.text(max_size=30)), (pa.string(), st.text(max_size=30)),
    (pa.large_binary(), st.binary(max_size=30)), (pa.binary(), st.binary(max_size=30)),
]  # fmt: skip


@st.composite
def rows(draw):
    chosen = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=8))
    schema = pa.schema([pa.field(f"c{i}", kind) for i, (kind, _) in enumerate(chosen)])
    values = [draw(st.none() | strategy) for _, strategy in chosen]
    return schema, values


@settings(max_examples=400, deadline=None)
@given(rows())
def test_a_packed_row_reads_back_as_pyarrows_own(row) -> None:
    schema, values = row
    encode = row_encoder(schema)
    assert encode is not None
    stream = schema.serialize().to_pybytes() + encode(values) + _END
    expected = pa.RecordBatch.from_pylist([dict(zip(schema.names, values, strict=True))], schema=schema)
    got = pa.ipc.open_stream(stream).read_all()
    assert got.schema == schema
    assert got.to_pylist() == expected.to_pylist()
    assert got.column(0).null_count == (values[0] is None)
    assert pl.read_ipc_stream(stream).equals(pl.from_arrow(pa.Table.from_batches([expected])))  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "kind", [pa.timestamp("us"), pa.decimal128(10, 2), pa.list_(pa.int64()), pa.time64("us"), pa.string_view()]
)
def test_types_it_does_not_pack_are_left_to_pyarrow(kind) -> None:
    assert row_encoder(pa.schema([("k", pa.int64()), ("v", kind)])) is None


def test_a_value_of_the_wrong_type_is_refused_not_packed() -> None:
    encode = row_encoder(pa.schema([("d", pa.date32())]))
    assert encode is not None
    with pytest.raises(TypeError):
        encode([dt.datetime(2024, 1, 1)])
