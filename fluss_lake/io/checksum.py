"""Checksums on stored objects: a CRC32C (the checksum of Fluss's and Kafka's record batches) sealed into every
object a writer stores, checked when a process first reads or maps the object.

Binary objects (log batches and segments, job attachments) end with an 8-byte trailer: the CRC32C of every byte
before it (little-endian ``uint32``), then the magic ``FLC1``. KV segments stay plain Arrow IPC files (Polars scans
them lazily): their CRC32C is kept by the snapshot manifests that name them and by their index files. JSON objects
(table metadata, partition records, snapshot manifests, job checkpoints) start with ``{"_crc32c":<crc>,`` followed by
the rest of the document, and the CRC covers the document exactly as written without that field. Objects written
before checksums existed have neither: they read as "not verified" (said once per process in the log) unless the
caller requires a checksum, as tables created by a version that seals every object do.

Examples
--------
>>> sealed = seal(b"ARROW1 payload ARROW1")
>>> unseal(sealed, key="d/t/log/b00000/x.arrow").to_pybytes()
b'ARROW1 payload ARROW1'
>>> damaged = bytearray(sealed); damaged[3] ^= 1
>>> try:
...     unseal(bytes(damaged), key="d/t/log/b00000/x.arrow")
... except CorruptedDataError as exc:
...     print(exc.key)
d/t/log/b00000/x.arrow
>>> loads_json(dumps_json({"offset": 42}), key="d/t/snap.json")
{'offset': 42}
"""

from __future__ import annotations

import json
import logging
import re
import struct
from typing import Any

import crc32c as _crc32c
import pyarrow as pa

from fluss_lake.exceptions import CorruptedDataError

__all__ = [
    "TRAILER_BYTES",
    "DEFAULT_REMEDY",
    "trailer",
    "crc32c",
    "seal",
    "unseal",
    "is_sealed",
    "dumps_json",
    "loads_json",
    "corrupted",
    "describe_key",
]

_MAGIC = b"FLC1"
_TRAILER = struct.Struct("<I4s")
TRAILER_BYTES = _TRAILER.size
_ARROW_MAGIC = b"ARROW1"
_JSON_SEAL = re.compile(rb'\A\{"_crc32c":(\d{1,10})(,|\})')
_log = logging.getLogger("fluss_lake.integrity")
_unverified_said: set[str] = set()
_BUCKET = re.compile(r"/(?:log|kv)/b(\d{5})(?:/|$)")
_OFFSET = re.compile(r"/(\d{20})(?:\.(\d{20}))?\.(?:arrow|segment)$")

#: What to do about damage, unless the caller knows better.
DEFAULT_REMEDY = (
    "run `fluss-lake check --repair` (state, segments and indexes are rebuilt from the log; log batches that were "
    "tiered are restored from the lake), or restore the object from a backup"
)


def crc32c(data: bytes | bytearray | memoryview | Any, value: int = 0) -> int:
    """The CRC32C (Castagnoli) of a bytes-like object (an Arrow buffer or a memory map too), hardware-accelerated;
    `value` continues the CRC of the bytes before it."""
    return int(_crc32c.crc32c(data, value))


def seal(data: bytes | bytearray | memoryview | Any) -> bytes:
    """`data` followed by its checksum trailer (one copy of the bytes)."""
    return b"".join((memoryview(data), _TRAILER.pack(crc32c(data), _MAGIC)))


def trailer(data: bytes | bytearray | memoryview | Any) -> bytes:
    """Only the trailer of `data` (for writers that append it to a file they wrote)."""
    return _TRAILER.pack(crc32c(data), _MAGIC)


def is_sealed(data: bytes | memoryview | Any) -> bool:
    """Whether the object ends with a checksum trailer."""
    view = memoryview(data)
    return len(view) >= TRAILER_BYTES and bytes(view[-4:]) == _MAGIC


def unseal(data: Any, *, key: str, required: bool = False, verify: bool = True, what: str = "object") -> pa.Buffer:
    """The body of a sealed binary object as an Arrow buffer (a zero-copy slice of `data`: bytes or a buffer).

    Raises :class:`CorruptedDataError` when the trailer does not match the bytes, or when there is no trailer and
    `required` is set; an object without one (written before checksums existed) is returned whole, "not verified".
    `verify=False` only strips the trailer (the object was verified earlier in this process).
    """
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    view = memoryview(buffer)
    size = len(view)
    if size >= TRAILER_BYTES and bytes(view[-4:]) == _MAGIC:
        body = buffer.slice(0, size - TRAILER_BYTES)
        if verify:
            expected, _ = _TRAILER.unpack(bytes(view[-TRAILER_BYTES:]))
            actual = crc32c(view[: size - TRAILER_BYTES])
            if actual != expected:
                raise corrupted(
                    key,
                    f"its checksum does not match its bytes (CRC32C {actual:08x}, stored {expected:08x})",
                    what=what,
                )
        return body
    if required:
        reason = "it is empty" if size == 0 else "it has no checksum trailer (truncated, or not written by fluss-lake)"
        raise corrupted(key, reason, what=what)
    if size < len(_ARROW_MAGIC) or bytes(view[-len(_ARROW_MAGIC) :]) != _ARROW_MAGIC:
        raise corrupted(key, "it is truncated or not written by fluss-lake (no checksum, no Arrow footer)", what=what)
    _say_unverified(key)
    return buffer


def dumps_json(obj: dict[str, Any]) -> bytes:
    """A JSON object sealed with the CRC32C of its text (see the module docstring)."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    crc = crc32c(body)
    return b'{"_crc32c":%d' % crc + (b"}" if body == b"{}" else b"," + body[1:])


def loads_json(data: bytes, *, key: str, required: bool = False, what: str = "record") -> Any:
    """Parse a JSON object written by :func:`dumps_json`, checking its checksum (or an older unsealed one)."""
    match = _JSON_SEAL.match(data)
    if match is not None:
        body = b"{" + data[match.end() :] if match.group(2) == b"," else b"{}"
        expected = int(match.group(1))
        if crc32c(body) != expected:
            raise corrupted(key, "its checksum does not match its text", what=what)
        return json.loads(body)
    if required:
        raise corrupted(key, "it has no checksum (truncated, or not written by fluss-lake)", what=what)
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise corrupted(key, f"it is not valid JSON ({exc})", what=what) from exc
    if not isinstance(value, dict):
        raise corrupted(key, "it is not a JSON object", what=what)
    _say_unverified(key)
    return value


def describe_key(key: str) -> tuple[str | None, int | None, tuple[int, int] | None]:
    """The table (``db.table``), bucket and offsets an object key names, where it names them."""
    parts = key.split("/")
    table = None
    for i, part in enumerate(parts):  # <db>/<table>/_meta/... or <db>/<table>/data-<id>/...
        if i >= 2 and (part == "_meta" or part.startswith("data-")):
            table = f"{parts[i - 2]}.{parts[i - 1]}"
            break
    bucket_match = _BUCKET.search(key)
    offset_match = _OFFSET.search(key)
    offsets = None
    if offset_match is not None:
        start = int(offset_match.group(1))
        offsets = (start, int(offset_match.group(2))) if offset_match.group(2) else (start, start)
    return table, int(bucket_match.group(1)) if bucket_match else None, offsets


def corrupted(
    key: str,
    problem: str,
    *,
    what: str = "object",
    offsets: tuple[int, int] | None = None,
    remedy: str = DEFAULT_REMEDY,
) -> CorruptedDataError:
    """A :class:`CorruptedDataError` naming the object, its table, bucket and offsets, and what to do."""
    table, bucket, named_offsets = describe_key(key)
    offsets = offsets or named_offsets
    where = []
    if table is not None:
        where.append(f"table {table}")
    if bucket is not None:
        where.append(f"bucket {bucket}")
    if offsets is not None:
        where.append(f"offsets [{offsets[0]}, {offsets[1]})" if offsets[1] > offsets[0] else f"offset {offsets[0]}")
    context = f" ({', '.join(where)})" if where else ""
    return CorruptedDataError(
        f"stored {what} {key!r}{context} is damaged: {problem}; {remedy}",
        key=key,
        table=table,
        bucket=bucket,
        offsets=offsets,
    )


def _say_unverified(key: str) -> None:
    """Say once per process and table that objects without checksums are read unverified."""
    table, _, _ = describe_key(key)
    scope = table or key.split("/")[0]
    if scope not in _unverified_said:
        _unverified_said.add(scope)
        _log.warning(
            "objects of %s were written before fluss-lake sealed checksums into them: they are read not verified",
            scope,
        )
