"""What travels between the Flight server and its client: JSON commands, offsets, errors.

Every call names a *verb* and its options in a small JSON object: the descriptor command of ``DoExchange``
(lookups and online features: the keys or entity rows are the input stream; a small input travels instead as
an action of the verb's name, see :func:`encode_unary`) and ``DoPut`` (writes: the rows are
the input stream), the ticket of ``DoGet`` (scans and changelog reads) or the body of an action. Errors cross the
wire as Flight errors whose ``extra_info`` is ``{"class": ..., "message": ..., "retriable": ...}``; the client
raises the same :class:`~fluss_lake.FlussLakeError` subclass with the same message.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any, Final

import polars as pl
import pyarrow as pa
import pyarrow.flight as flight

import fluss_lake.exceptions as core_errors
from fluss_lake.exceptions import FlussLakeError
from serving import errors as serving_errors
from serving.errors import (
    AuthenticationError,
    MalformedRequestError,
    PermissionDeniedError,
    RequestTimeoutError,
    ServerUnavailableError,
)

__all__ = [
    "EXCHANGE_VERBS",
    "GET_VERBS",
    "PUT_VERBS",
    "ACTIONS",
    "decode_command",
    "decode_unary",
    "encode_command",
    "encode_unary",
    "error_from_info",
    "ipc_bytes",
    "read_ipc",
    "UNARY_MAX_BYTES",
    "from_flight_error",
    "offsets_from_json",
    "offsets_to_json",
    "to_flight_error",
]

EXCHANGE_VERBS: Final = ("lookup", "prefix_lookup", "online_features")
GET_VERBS: Final = ("limit_scan", "changelog", "scan_log", "to_polars")
PUT_VERBS: Final = ("append", "upsert", "delete")
ACTIONS: Final = {
    "health": "liveness: the server answers (no token needed)",
    "ready": "readiness: the store answers a listing",
    "metrics": "per-table request counters and latency histograms (JSON)",
    "list_databases": "databases the token reaches",
    "list_tables": "tables of a database the token reaches",
    "table_info": "a table's metadata (TableInfo JSON)",
    "end_offsets": "log end offset of every bucket",
    "earliest_offsets": "first retained offset of every bucket",
    "list_partitions": "a partitioned table's partitions",
}


#: Inputs up to this size travel as one action (one gRPC message each way) instead of a DoExchange stream: a
#: request for one key or a few hundred is the latency case, and an exchange costs about four times an action.
UNARY_MAX_BYTES: Final = 1 << 20


def ipc_bytes(rows: pa.Table | pl.DataFrame) -> bytes:
    """`rows` as one Arrow IPC stream in memory (a Polars frame written by Polars: converting it to a pyarrow
    table first hands work to Polars' thread pool, ~0.1 ms from a server thread)."""
    if isinstance(rows, pl.DataFrame):
        sink = io.BytesIO()
        rows.write_ipc_stream(sink)
        return sink.getvalue()
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, rows.schema) as writer:
        writer.write_table(rows)
    return out.getvalue().to_pybytes()


def _polars_stream_reader() -> Any:
    """Polars' own IPC stream reader without ``pl.read_ipc_stream``'s argument handling (~40-60 us a call, most of
    the cost of reading a request's 100 entity rows or its answer); None where this Polars lacks it or reads a
    sample differently (then the public function is used)."""
    try:
        from polars._plr import PyDataFrame
        from polars._utils.wrap import wrap_df

        def read(data: Any) -> pl.DataFrame:
            frame: pl.DataFrame = wrap_df(
                PyDataFrame.read_ipc_stream(io.BytesIO(memoryview(data)), None, None, None, None, rechunk=False)
            )
            return frame

        sample = pl.DataFrame({"k": [1, None], "s": ["a", None]})
        sink = io.BytesIO()
        sample.write_ipc_stream(sink)
        return read if read(sink.getvalue()).equals(sample) else None
    except Exception:  # noqa: BLE001 - any other Polars: the public reader
        return None


_READ_STREAM = _polars_stream_reader()


def read_ipc(data: Any) -> pl.DataFrame:
    """The Polars frame of one Arrow IPC stream (bytes or a buffer)."""
    if _READ_STREAM is not None:
        return _READ_STREAM(data)
    return pl.read_ipc_stream(io.BytesIO(memoryview(data)))


def encode_unary(command: bytes, rows: pa.Table | pl.DataFrame) -> bytes:
    """An exchange verb as an action body: the JSON command, a newline (JSON escapes its own), the rows as IPC."""
    return command + b"\n" + ipc_bytes(rows)


_KEY_FIELD: Final = b'"key":'


def decode_unary(
    body: Any,
    *,
    limit: int,
    expected: tuple[str, ...],
    known: dict[bytes, dict[str, Any]] | None = None,
    points: dict[bytes, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], pl.DataFrame | None]:
    """The command and the input rows of :func:`encode_unary`'s body, checked as :func:`decode_command` does (no
    rows: the command holds its input, as a one-key ``lookup``'s ``key``).

    `known`: commands decoded before, by their bytes (a client sends the same online-features command, the JSON of
    its views, with every request): a repeated one is not parsed again. Only commands naming ``views`` and no
    ``request_id`` are kept, at most 256; callers must not change the dict they get back.

    `points`: the heads of one-key lookups decoded before (the command up to its ``"key":``, exactly as
    :func:`encode_command` writes it; at most 256): a body with a known head has only its key parsed, the rest of
    the command is the head's (a fresh dict each call)."""
    if points is not None and type(body) is bytes and len(body) <= limit and body.endswith(b"}\n"):
        at = body.find(_KEY_FIELD)
        template = points.get(body[:at]) if at > 0 else None
        if template is not None:
            key = _point_key(body, at + len(_KEY_FIELD), template)
            if key is not None:
                command = {"verb": "lookup", "table": template["table"], "with_found": template["with_found"]}
                command["key"] = key
                return command, None
    if isinstance(body, bytes):
        cut = body.find(b"\n", 0, limit + 1)
        raw = memoryview(body)
    else:
        raw = memoryview(body)
        cut = bytes(raw[: limit + 1]).find(b"\n")
    if cut < 0:
        if len(raw) > limit:
            raise serving_errors.RequestTooLargeError(
                f"the request command is over the limit of {limit} bytes; send data in the stream"
            )
        raise MalformedRequestError("the request has no input rows after its command")
    head = bytes(raw[:cut])
    seen = known.get(head) if known is not None else None
    if seen is not None and seen.get("verb") in expected:
        command = seen
    else:
        command = decode_command(head, limit=limit, expected=expected)
        if known is not None and "views" in command and not command.get("request_id"):
            if len(known) >= 256:
                known.clear()
            known[head] = command
    if len(raw) == cut + 1:
        if points is not None and command.get("verb") == "lookup" and list(command) == _POINT_FIELDS:
            _remember_point(points, head, command)
        return command, None
    try:
        rows = read_ipc(raw[cut + 1 :])
    except (pl.exceptions.ComputeError, pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise MalformedRequestError(f"the request's rows are not an Arrow IPC stream: {exc}") from None
    return command, rows


_POINT_FIELDS: Final = ["verb", "table", "with_found", "key"]


def _point_key(body: bytes, start: int, template: dict[str, Any]) -> dict[str, Any] | None:
    """The key object of a one-key lookup's body from `start` (it ends the command: ``<key>}\n``), or None if it is
    not exactly one JSON object. An integer after the head of a one-column key (``{"id":``) is read as JSON reads
    it: digits, an optional minus, no leading zero (``json.loads`` costs ~5 us a call whatever it parses)."""
    column, field = template["column"], template["field"]
    if column is not None and body.startswith(field, start) and body.endswith(b"}}\n"):
        digits = body[start + len(field) : -3]
        plain = digits[1:] if digits[:1] == b"-" else digits
        if plain.isdigit() and (plain[:1] != b"0" or len(plain) == 1):
            return {column: int(digits)}
    try:
        key = json.loads(body[start:-2])
    except ValueError:  # not one JSON value (e.g. more fields after it): the whole command is parsed
        return None
    return key if type(key) is dict else None


def _remember_point(points: dict[bytes, dict[str, Any]], head: bytes, command: dict[str, Any]) -> None:
    """Keep a one-key lookup's head for :func:`decode_unary` if the command is written as the client writes it."""
    table, with_found = command["table"], command["with_found"]
    if not (isinstance(table, str) and type(with_found) is bool and isinstance(command["key"], dict)):
        return
    canonical = encode_command("lookup", table=table, with_found=with_found, key=None)[: -len(b"null}")]
    at = head.find(_KEY_FIELD)
    if at > 0 and head[: at + len(_KEY_FIELD)] == canonical:
        if len(points) >= 256:
            points.clear()
        key = command["key"]
        column = next(iter(key)) if len(key) == 1 else None
        field = b"{" + json.dumps(column).encode() + b":" if column is not None else b""
        points[canonical[:at]] = {"table": table, "with_found": with_found, "column": column, "field": field}


def encode_command(verb: str, **options: Any) -> bytes:
    """A request as JSON bytes."""
    return json.dumps({"verb": verb, **options}, separators=(",", ":"), default=str).encode()


def decode_command(raw: bytes, *, limit: int, expected: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A request's JSON object, checked for size, shape and verb."""
    if len(raw) > limit:
        raise serving_errors.RequestTooLargeError(
            f"the request command is {len(raw)} bytes, over the limit of {limit}; send data in the stream"
        )
    try:
        command = json.loads(bytes(raw).decode() if raw else "{}")  # str: json skips guessing the encoding
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedRequestError(f"the request command is not valid JSON: {exc}") from None
    if not isinstance(command, dict):
        raise MalformedRequestError(f"the request command must be a JSON object, got {type(command).__name__}")
    if expected is not None and command.get("verb") not in expected:
        raise MalformedRequestError(f"unknown verb {command.get('verb')!r} here; expected one of {list(expected)}")
    return command


def offsets_to_json(offsets: Mapping | None) -> list | None:
    """Offsets keyed by bucket or by ``(partition name, bucket)`` as JSON pairs."""
    if offsets is None:
        return None
    return [[list(k) if isinstance(k, tuple) else k, v] for k, v in offsets.items()]


def offsets_from_json(data: Any) -> dict | None:
    """The inverse of :func:`offsets_to_json`."""
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(p, list) and len(p) == 2 for p in data):
        raise MalformedRequestError("offsets must be a list of [bucket or [partition, bucket], offset] pairs")
    return {(tuple(k) if isinstance(k, list) else k): v for k, v in data}


_FLIGHT_ERRORS: dict[type[FlussLakeError], type[flight.FlightError]] = {
    AuthenticationError: flight.FlightUnauthenticatedError,
    PermissionDeniedError: flight.FlightUnauthorizedError,
    RequestTimeoutError: flight.FlightTimedOutError,
    ServerUnavailableError: flight.FlightUnavailableError,
}


def to_flight_error(exc: FlussLakeError) -> flight.FlightError:
    """The Flight error carrying `exc`'s class, message and retriable flag."""
    kind: type[flight.FlightError] = flight.FlightServerError
    for cls, flight_cls in _FLIGHT_ERRORS.items():
        if isinstance(exc, cls):
            kind = flight_cls
            break
    info = {"class": type(exc).__name__, "message": str(exc), "retriable": bool(exc.retriable)}
    return kind(str(exc), extra_info=json.dumps(info).encode())


def _error_class(name: str) -> type[FlussLakeError] | None:
    for module in (core_errors, serving_errors):
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, FlussLakeError):
            return cls
    return None


def error_from_info(raw: bytes | bytearray | None) -> FlussLakeError | None:
    """The library error of an error's JSON (``{"class", "message", "retriable"}``), or None if it names none."""
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(info, dict):
        cls = _error_class(str(info.get("class")))
        if cls is not None:
            return cls(str(info.get("message", "")))
    return None


def from_flight_error(exc: flight.FlightError) -> FlussLakeError:
    """The library error a Flight error carries (a :class:`ServerUnavailableError` for transport failures)."""
    carried = error_from_info(getattr(exc, "extra_info", None))
    if carried is not None:
        return carried
    message = str(exc).split(". Detail:")[0]
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return AuthenticationError(message)
    if isinstance(exc, flight.FlightUnauthorizedError):
        return PermissionDeniedError(message)
    if isinstance(exc, flight.FlightTimedOutError):
        return RequestTimeoutError(message)
    return ServerUnavailableError(f"the server did not answer the request: {message}")
