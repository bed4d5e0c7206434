"""One-row Arrow IPC record batches written straight from Python values, for the server's single-key answers.

``pa.RecordBatch.from_pylist([row]).serialize()`` costs ~50-80 us for a row of four columns (a converter per
column, type inference hooks, a C++ batch and its serializer), which was a third of the server's CPU for a one-key
lookup. A one-row batch of flat columns has a fixed shape, so its message is packed here directly: the Flatbuffer
``Message``/``RecordBatch`` header in one fixed layout (any layout with valid offsets is a valid Flatbuffer) and
the body's buffers, 8-byte aligned, in a few microseconds. Columns of other types (timestamps, decimals, nested)
make :func:`row_encoder` return None and the caller keeps pyarrow's path. ``tests/serving/test_one_row.py``
checks every supported type, nulls included, against pyarrow's own reader.

>>> import pyarrow as pa
>>> schema = pa.schema([("id", pa.int64()), ("name", pa.large_string())])
>>> encode = row_encoder(schema)
>>> stream = schema.serialize().to_pybytes() + encode([7, "ann"]) + b"\\xff\\xff\\xff\\xff\\x00\\x00\\x00\\x00"
>>> pa.ipc.open_stream(stream).read_all().to_pylist()
[{'id': 7, 'name': 'ann'}]
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import pyarrow as pa

__all__ = ["row_encoder"]

_PAD: Final = bytes(8)
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()
_CONTINUATION: Final = b"\xff\xff\xff\xff"


def _fixed(fmt: str) -> Callable[[Any], tuple[bytes, ...]]:
    pack = struct.Struct("<" + fmt).pack
    zero = pack(0)

    def buffers(value: Any) -> tuple[bytes, ...]:
        return (zero,) if value is None else (pack(value),)

    return buffers


def _date(value: Any) -> tuple[bytes, ...]:
    if value is None:
        return (bytes(4),)
    if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
        raise TypeError(f"expected a date, got {type(value).__name__}")
    return (struct.pack("<i", value.toordinal() - _EPOCH_ORDINAL),)


def _bool(value: Any) -> tuple[bytes, ...]:
    return (b"\x01" if value else b"\x00",)


def _variable(offset: str, utf8: bool) -> Callable[[Any], tuple[bytes, ...]]:
    pack = struct.Struct("<" + offset * 2).pack
    empty = pack(0, 0)

    def buffers(value: Any) -> tuple[bytes, ...]:
        if value is None:
            return empty, b""
        data = value.encode() if utf8 else bytes(value)
        return pack(0, len(data)), data

    return buffers


_FIXED: Final = {
    pa.int8(): "b", pa.int16(): "h", pa.int32(): "i", pa.int64(): "q",
    pa.uint8(): "B", pa.uint16(): "H", pa.uint32(): "I", pa.uint64(): "Q",
    pa.float32(): "f", pa.float64(): "d",
}  # fmt: skip


def _column(kind: pa.DataType) -> Callable[[Any], tuple[bytes, ...]] | None:
    if kind in _FIXED:
        return _fixed(_FIXED[kind])
    if kind == pa.bool_():
        return _bool
    if kind == pa.date32():
        return _date
    if kind in (pa.large_string(), pa.string()):
        return _variable("q" if kind == pa.large_string() else "i", True)
    if kind in (pa.large_binary(), pa.binary()):
        return _variable("q" if kind == pa.large_binary() else "i", False)
    return None


def _message(nodes: int, buffers: int) -> Callable[..., bytes]:
    """A packer of the encapsulated ``Message`` (a ``RecordBatch`` of one row) with `nodes` columns and `buffers`
    body buffers: called with the body length, then each column's null count, then each buffer's offset and
    length.

    Fixed layout: root offset; Message vtable (4 fields) and table (soffset, version, header type, body length,
    header offset); RecordBatch vtable (3 fields) and table (soffset, length, nodes and buffers offsets); then
    the nodes and buffers vectors, their structs 8-byte aligned.
    """
    n, b = nodes, buffers
    nodes_at = 76
    buffers_at = 84 + 16 * n  # after the nodes and 4 bytes of padding: the buffer structs start 8-aligned
    size = 88 + 16 * n + 16 * b  # a multiple of 8
    # prefix, root, Message vtable and table, RecordBatch vtable and table, nodes, buffers
    layout = struct.Struct("<4siI6HiHBxqI5Hxxi4xqII4xI" + "qq" * n + "4xI" + "qq" * b)
    head = (
        _CONTINUATION, size,
        16,  # root: the Message table at 16
        12, 20, 4, 6, 16, 8,  # Message vtable: size, table size, version, header_type, header, bodyLength
        12, 4, 3,  # Message: soffset to its vtable, V5, RecordBatch; then bodyLength
    )  # fmt: skip
    middle = (
        48 - 32,  # the RecordBatch table at 48
        10, 24, 8, 16, 20,  # RecordBatch vtable: size, table size, length, nodes, buffers
        12, 1, nodes_at - 64, buffers_at - 68,  # RecordBatch: soffset, one row, the two vectors
        n,
    )  # fmt: skip
    pack = layout.pack

    def message(body: int, nulls: list[int], spans: list[int]) -> bytes:
        counts: list[int] = []
        for count in nulls:
            counts += (1, count)
        return pack(*head, body, *middle, *counts, b, *spans)

    return message


def row_encoder(schema: pa.Schema) -> Callable[[Sequence[Any]], bytes] | None:
    """A function packing one row (values in `schema`'s column order) as an Arrow IPC record-batch message, or
    None if a column's type is not one it packs (flat numbers, booleans, dates, strings and binaries)."""
    columns = [_column(field.type) for field in schema]
    if any(c is None for c in columns):
        return None
    packers: list[Callable[[Any], tuple[bytes, ...]]] = [c for c in columns if c is not None]
    buffers = sum(1 + len(pack(None)) for pack in packers)
    message = _message(len(packers), buffers)

    def encode(values: Sequence[Any]) -> bytes:
        nulls: list[int] = []
        spans: list[int] = []
        parts: list[bytes] = []
        at = 0
        for pack, value in zip(packers, values, strict=True):
            if value is None:
                nulls.append(1)
                spans += (at, 1)
                parts.append(_PAD)  # the validity bitmap: bit 0 clear
                at += 8
            else:
                nulls.append(0)
                spans += (at, 0)  # no nulls: no validity bitmap
            for data in pack(value):
                size = len(data)
                spans += (at, size)
                parts.append(data)
                pad = -size % 8
                if pad:
                    parts.append(_PAD[:pad])
                at += size + pad
        return message(at, nulls, spans) + b"".join(parts)

    return encode
