"""The Arrow Flight server over a fluss-lake store: the library's verbs, with tokens, limits and metrics.

=================  ==========================================================================================
Flight call        verbs
=================  ==========================================================================================
``DoExchange``     ``lookup``, ``prefix_lookup``, ``online_features``: keys / entity rows in, rows out (a small
                   input comes as an action of the verb's name instead: the JSON command, a newline, Arrow IPC)
``DoGet``          ``limit_scan``, ``changelog``, ``scan_log``, ``to_polars``
``DoPut``          ``append``, ``upsert`` (``target_columns``: partial update), ``delete``: rows in, a JSON
                   ``WriteResult`` back as metadata
``DoAction``       ``health``, ``ready``, ``metrics``, ``list_databases``, ``list_tables``, ``table_info``,
                   ``end_offsets``, ``earliest_offsets``, ``list_partitions``
=================  ==========================================================================================

Every verb calls the library, so validation and errors are the library's (:mod:`serving.protocol` carries them
to the client). gRPC serves calls on a thread pool: concurrent clients and batched requests are the unit of work
(one lookup of many keys costs one probe pass), which is what a benchmark should drive.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.flight as flight

import fluss_lake as fl
from fluss_lake._utils.arguments import check_int, check_seconds
from fluss_lake.exceptions import FlussLakeError, InvalidConfigError, TableNotExistError
from fluss_lake.io.store import LocalStore
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.training import FeatureView, OnlineFeatures, online_features
from fluss_lake.training.feature_log import log_served_many
from serving.auth import Token, TokenSet
from serving.coalesce import Coalescer
from serving.errors import (
    AuthenticationError,
    MalformedRequestError,
    RequestTimeoutError,
    RequestTooLargeError,
    ServerUnavailableError,
)
from serving.lane import LaneServer
from serving.metrics import Metrics
from serving.one_row import row_encoder
from serving.protocol import (
    ACTIONS,
    EXCHANGE_VERBS,
    GET_VERBS,
    PUT_VERBS,
    decode_command,
    decode_unary,
    ipc_bytes,
    offsets_from_json,
    offsets_to_json,
    to_flight_error,
)

__all__ = ["FlussLakeServer", "ServerConfig", "is_loopback"]

_log = logging.getLogger("serving")
_IPC_END = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an Arrow IPC stream's end-of-stream marker
#: A table's point answers: their Arrow schema, its IPC stream head, the packer of one row (or None: pyarrow's).
_PointEncoder = tuple[pa.Schema, bytes, Callable[[Sequence[Any]], bytes] | None, tuple[str, ...]]
STATUS_PREFIX = "__fl_status_"
TIME_PREFIX = "__fl_time_"


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (``localhost``, ``127.0.0.0/8``, ``::1``).

    >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0"), is_loopback("localhost")
    (True, False, True)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None))
        except (OSError, ValueError):
            return False


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """How ``fluss-lake serve`` runs.

    Parameters
    ----------
    store, storage_options, local_dir
        The store to serve (a folder or ``s3://...``), as :func:`fluss_lake.connect` takes it.
    host, port
        Where to listen (port 0: the OS picks one; see :attr:`FlussLakeServer.port`). A host beyond loopback needs
        `tokens`.
    tokens
        Accepted bearer tokens and their scopes; None: no authentication (loopback only).
    tls_cert, tls_key
        PEM files: serve ``grpc+tls`` with this certificate.
    max_request_bytes, max_request_rows, max_command_bytes
        Size limits of one request's input stream and of its JSON command.
    request_timeout_s
        A request still reading its input or not yet answered after this long fails with
        :class:`~serving.errors.RequestTimeoutError` (a write already committed is never reported as failed).
    log_table
        ``db.table`` of a served-feature log: every online-features answer is appended there.
    http_port
        Also serve the Feast-shaped HTTP endpoint (``POST /get-online-features``) on this port (0: any).
    feature_views
        JSON file of named feature views for the HTTP endpoint (default: every primary-key table is a view
        named ``db.table``).
    log_interval_s
        Seconds between two progress lines.
    socket_port
        Port of the socket lane (:mod:`serving.lane`: small lookups and online-feature requests without Flight's
        per-call cost, same tokens, TLS and limits; 0: any free port, told in ``health``; None: no lane).
    """

    store: str | None = None
    storage_options: Mapping[str, Any] | None = None
    local_dir: str | None = None
    host: str = "127.0.0.1"
    port: int = 8815
    tokens: TokenSet | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    max_request_bytes: int = 64 << 20
    max_request_rows: int = 1_000_000
    max_command_bytes: int = 64 << 10
    request_timeout_s: float = 30.0
    log_table: str | None = None
    http_port: int | None = None
    feature_views: str | None = None
    log_interval_s: float = 60.0
    socket_port: int | None = 0
    _extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def check(self) -> None:
        """Refuse unsafe or inconsistent settings before anything listens."""
        if not is_loopback(self.host) and self.tokens is None:
            raise InvalidConfigError(
                f"refusing to listen on {self.host!r} (beyond loopback) without authentication: give --tokens FILE "
                "(or $FLUSS_LAKE_SERVE_TOKENS) and preferably --tls-cert/--tls-key, or listen on 127.0.0.1"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidConfigError("TLS needs both a certificate (--tls-cert) and its private key (--tls-key)")
        check_int("port", self.port, minimum=0, hint="0 lets the OS pick a free port")
        check_int("http_port", self.http_port, minimum=0, optional=True, hint="0 lets the OS pick a free port")
        check_int("socket_port", self.socket_port, minimum=0, optional=True, hint="0 lets the OS pick; None: no lane")
        for name in ("port", "http_port", "socket_port"):
            if (getattr(self, name) or 0) > 65535:
                raise InvalidConfigError(f"{name}={getattr(self, name)}: a TCP port is at most 65535")
        for name in ("max_request_bytes", "max_request_rows", "max_command_bytes"):
            check_int(name, getattr(self, name), minimum=1, hint="a size limit")
        check_seconds("request_timeout_s", self.request_timeout_s)
        check_seconds("log_interval_s", self.log_interval_s)


class _Caller(flight.ServerMiddleware):
    """Who is calling: the token found in the ``authorization`` header (None: no header)."""

    def __init__(self, token: Token | None) -> None:
        self.token = token


class _AuthFactory(flight.ServerMiddlewareFactory):
    """Reads ``Authorization: Bearer <token>``; a header with an unknown token is refused before any work."""

    def __init__(self, tokens: TokenSet | None) -> None:
        self.tokens = tokens

    def start_call(self, info: Any, headers: Mapping[str, list[str]]) -> _Caller:
        if self.tokens is None:
            return _Caller(None)
        values = headers.get("authorization") or []
        if not values:
            return _Caller(None)  # refused by every verb but health (see FlussLakeServer._authorize)
        scheme, _, secret = values[0].partition(" ")
        token = self.tokens.find(secret.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            raise to_flight_error(AuthenticationError("unknown bearer token; check the token the client sends"))
        return _Caller(token)


class _LaneContext:
    """A lane connection's caller, shaped as the Flight call context the shared request path reads."""

    __slots__ = ("caller",)

    def __init__(self, caller: _Caller) -> None:
        self.caller = caller

    def get_middleware(self, name: str) -> _Caller | None:
        return self.caller if name == "auth" else None


class _Request:
    """One request's deadline and size accounting."""

    def __init__(self, config: ServerConfig, verb: str) -> None:
        self.verb = verb
        self.deadline = time.monotonic() + config.request_timeout_s
        self.config = config
        self.rows_in = 0
        self.rows_out = 0

    def check_time(self, what: str) -> None:
        if time.monotonic() > self.deadline:
            raise RequestTimeoutError(
                f"{self.verb}: over the server's time limit of {self.config.request_timeout_s:g} s while {what}; "
                "send smaller requests"
            )

    def read(self, reader: Any) -> pa.Table:
        """The input stream as one Arrow table, within the size and time limits."""
        batches, nbytes, rows = [], 0, 0
        for chunk in reader:
            data = chunk.data
            if data is None:
                continue
            nbytes += data.nbytes
            rows += data.num_rows
            if nbytes > self.config.max_request_bytes or rows > self.config.max_request_rows:
                raise RequestTooLargeError(
                    f"{self.verb}: the request is over the server's limit of {self.config.max_request_bytes} bytes / "
                    f"{self.config.max_request_rows} rows; split it into smaller batches"
                )
            self.check_time("reading the request")
            batches.append(data)
        self.rows_in = rows
        return pa.Table.from_batches(batches, schema=reader.schema)


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


class FlussLakeServer(flight.FlightServerBase):
    """A Flight server over one store (see the module docstring for the verbs).

    Examples
    --------
    >>> import tempfile
    >>> server = FlussLakeServer(ServerConfig(store=tempfile.mkdtemp(), port=0))
    >>> server.port > 0
    True
    >>> server.stop()
    """

    def __init__(self, config: ServerConfig, *, connection: fl.Connection | None = None) -> None:
        config.check()
        self.config = config
        self.connection = connection or fl.connect(
            config.store, storage_options=config.storage_options, local_dir=config.local_dir
        )
        self.metrics = Metrics()
        self._tables: dict[str, tuple[fl.Table, float]] = {}
        self._tables_lock = threading.Lock()
        self._views: OrderedDict[tuple[str, int], FeatureView] = OrderedDict()
        self._view_lists: dict[str, list[FeatureView]] = {}  # the views of a request's definitions (its JSON)
        self._write_locks: dict[str, threading.Lock] = {}
        self._schemas: dict[tuple[str, bool], tuple[Any, _PointEncoder | None]] = {}
        self._coalescer = Coalescer()
        self._commands: dict[bytes, dict[str, Any]] = {}  # unary commands decoded before (protocol.decode_unary)
        self._points: dict[bytes, dict[str, Any]] = {}  # heads of one-key lookups decoded before (the same)
        self._views_keys: dict[int, tuple[dict[str, Any], str]] = {}  # a known command's views key, by its id
        self._stopped = threading.Event()
        tls = config.tls_cert is not None
        scheme = "grpc+tls" if tls else "grpc+tcp"
        certificates = []
        if tls:
            assert config.tls_cert is not None and config.tls_key is not None
            try:
                pair = flight.CertKeyPair(Path(config.tls_cert).read_bytes(), Path(config.tls_key).read_bytes())
            except OSError as exc:
                raise InvalidConfigError(f"cannot read the TLS certificate or key: {exc}") from None
            certificates.append(pair)
        host = f"[{config.host}]" if ":" in config.host else config.host
        super().__init__(
            f"{scheme}://{host}:{config.port}",
            tls_certificates=certificates or None,
            middleware={"auth": _AuthFactory(config.tokens)},
        )
        self.location = f"{'grpc+tls' if tls else 'grpc'}://{host}:{self.port}"
        self.lane: LaneServer | None = None
        if config.socket_port is not None:
            context = None
            if tls:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
            try:
                self.lane = LaneServer(
                    host=config.host,
                    port=config.socket_port,
                    authenticate=self._lane_caller,
                    answer=self._lane_answers,
                    max_frame_bytes=config.max_request_bytes + config.max_command_bytes,
                    timeout_s=config.request_timeout_s,
                    tls=context,
                    threads=0 if isinstance(self.connection.store, LocalStore) else 8,
                    mergeable=_mergeable,
                )
            except OSError as exc:
                self.shutdown()
                raise InvalidConfigError(f"cannot listen on socket lane port {config.socket_port}: {exc}") from None
        self.http: Any = None
        if config.http_port is not None:
            from serving.http_api import FeastHttpServer

            try:
                self.http = FeastHttpServer(self, port=config.http_port)
            except BaseException:
                if self.lane is not None:
                    self.lane.stop(drain_s=0)
                self.shutdown()  # nothing keeps listening after a failed start
                raise
        self._reporter = threading.Thread(target=self._report, name="serving-progress", daemon=True)
        self._reporter.start()

    # ------------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        """Stop accepting calls, wait for the calls in flight to finish (a graceful stop), then stop the rest."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.http is not None:
            self.http.stop()
        if self.lane is not None:
            self.lane.stop(drain_s=self.config.request_timeout_s)
        self.shutdown()
        _log.info("stopped; %s", self.metrics.progress_line(max(time.time() - self.metrics.started, 1e-9)))

    def _report(self) -> None:
        interval = self.config.log_interval_s
        while not self._stopped.wait(interval):
            _log.info("%s", self.metrics.progress_line(interval))

    # ------------------------------------------------------------------ shared pieces
    def _authorize(self, context: Any, table: str | None, *, write: bool) -> Token | None:
        """The caller's token after checking it may reach `table` (None: the server has no tokens)."""
        if self.config.tokens is None:
            return None
        caller = context.get_middleware("auth") if context is not None else None
        token = caller.token if caller is not None else None
        if token is None:
            raise AuthenticationError("this server needs a bearer token: send 'Authorization: Bearer <token>'")
        if table is not None:
            token.check(table, write=write)
        return token

    def table(self, name: Any) -> fl.Table:
        """The served table `name` (metadata re-read at most every two seconds)."""
        if not isinstance(name, str):
            raise MalformedRequestError(f"the request must name a table as 'database.table', got {name!r}")
        now = time.monotonic()
        cached = self._tables.get(name)  # the common case: a name as the client sent it before
        if cached is not None and now - cached[1] < 2.0:
            return cached[0]
        path = str(TablePath.of(name))
        with self._tables_lock:
            cached = self._tables.get(path)
            if cached is not None and now - cached[1] < 2.0:
                return cached[0]
            try:
                table = cached[0].refresh() if cached is not None else self.connection.get_table(path)
            except TableNotExistError:
                self._tables.pop(path, None)
                raise
            self._tables[path] = (table, now)
            return table

    def view(self, definition: Any) -> FeatureView:
        """The feature view a client's definition describes, on the served table (cached)."""
        if not isinstance(definition, dict) or not isinstance(definition.get("table"), str):
            raise MalformedRequestError("a feature view definition is an object with at least 'table'")
        table = self.table(definition["table"])
        key = (json.dumps(definition, sort_keys=True), id(table))
        with self._tables_lock:
            found = self._views.get(key)
            if found is not None and found.table is table:
                self._views.move_to_end(key)
                return found
        known = {"table", "keys", "features", "entity_keys", "event_time", "committed_only", "ttl_us", "prefix", "name"}
        unknown = set(definition) - known
        if unknown:
            raise MalformedRequestError(f"unknown feature view field(s) {sorted(unknown)}")
        ttl_us = definition.get("ttl_us")
        if ttl_us is not None and not isinstance(ttl_us, int):
            raise MalformedRequestError("ttl_us must be an integer number of microseconds or null")
        view = FeatureView.from_table(
            table,
            features=definition.get("features") or None,
            entity_keys=definition.get("entity_keys"),
            event_time=definition.get("event_time"),
            committed_only=bool(definition.get("committed_only", False)),
            ttl=None if ttl_us is None else timedelta(microseconds=ttl_us),
            prefix=str(definition.get("prefix") or ""),
        )
        keys = definition.get("keys")
        if keys is not None and sorted(keys) != sorted(view.keys):
            raise MalformedRequestError(f"view keys {keys} are not the primary key {list(view.keys)} of {table.path}")
        with self._tables_lock:
            self._views[key] = view
            while len(self._views) > 1024:
                self._views.popitem(last=False)
        return view

    @staticmethod
    def _public_error(exc: BaseException, verb: str, table: str | None) -> BaseException:
        """What a client is told of a failed request: the library's error, or an internal error without internals
        (the traceback goes to the server log)."""
        if isinstance(exc, FlussLakeError):
            return to_flight_error(exc)
        if isinstance(exc, flight.FlightError) or not isinstance(exc, Exception):
            return exc
        _log.error("internal error in %s on %s:\n%s", verb, table, "".join(traceback.format_exception(exc)).rstrip())
        return flight.FlightInternalError(f"{verb}: internal server error ({type(exc).__name__}); see the server log")

    def _run(self, verb: str, table: str | None, work: Callable[[_Request], Any]) -> Any:
        """Run one request: metrics, the library's errors as Flight errors, internal errors without internals."""
        request = _Request(self.config, verb)
        started = time.perf_counter()
        self.metrics.begin()
        failed = False
        try:
            return work(request)
        except Exception as exc:  # noqa: BLE001 - never send internals (tracebacks, paths) to a client
            failed = True
            raise self._public_error(exc, verb, table) from None
        finally:
            self.metrics.end()
            known = isinstance(table, str) and table in self._tables  # unknown names would grow the metrics
            self.metrics.record(
                verb,
                table if known else None,
                seconds=time.perf_counter() - started,
                rows_in=request.rows_in,
                rows_out=request.rows_out,
                error=failed,
            )

    # ------------------------------------------------------------------ DoExchange: lookups, online features
    def do_exchange(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        try:
            command = decode_command(descriptor.command, limit=self.config.max_command_bytes, expected=EXCHANGE_VERBS)
        except FlussLakeError as exc:
            self.metrics.record("exchange", None, seconds=0.0, error=True)
            raise to_flight_error(exc) from None
        verb = command["verb"]

        def work(request: _Request) -> None:
            out = self._answer(context, command, _frame(request.read(reader)), request).to_arrow()
            writer.begin(out.schema)
            writer.write_table(out)

        self._run(verb, command.get("table") or _view_tables(command), work)

    def _answer(self, context: Any, command: dict, data: pl.DataFrame, request: _Request) -> pl.DataFrame:
        """The rows an exchange verb (lookups, online features) answers for its input rows."""
        verb = command["verb"]
        if verb == "online_features":
            result = self._online(context, command, data, request)
        else:
            table = self.table(command.get("table"))
            self._authorize(context, str(table.path), write=False)
            keys = data
            request.check_time("looking up")
            if verb == "lookup":
                result = table.lookup(
                    keys,
                    with_found=bool(command.get("with_found")),
                    with_offsets=bool(command.get("with_offsets")),
                )
            else:
                result = table.prefix_lookup(keys, with_offsets=bool(command.get("with_offsets")))
        request.check_time("answering")
        request.rows_out = result.height
        return result

    def _point(self, context: Any, command: dict, request: _Request) -> bytes:
        """A ``lookup`` of the one key its command holds, through the table's point path."""
        if command["verb"] != "lookup" or not isinstance(command.get("key"), dict) or command.get("with_offsets"):
            raise MalformedRequestError("only a lookup without offsets takes its key in the command ('key': {...})")
        table = self.table(command.get("table"))
        if self.config.tokens is not None:
            self._authorize(context, str(table.path), write=False)
        key = command["key"]
        with_found = bool(command.get("with_found"))
        encoder = self._point_encoder(table, command["table"], with_found)
        request.rows_in = request.rows_out = 1
        request.check_time("looking up")
        if encoder is None:  # nested columns: the batched path builds the row
            return ipc_bytes(table.lookup([key], with_found=with_found))
        row = table.lookup_one(key)
        request.check_time("answering")
        values = row if row is not None else key  # absent: the key columns set, the others null
        if with_found:
            values = {**values, "_found": row is not None}
        schema, head, pack, names = encoder
        if pack is not None:
            return head + pack([values.get(name) for name in names]) + _IPC_END
        return head + pa.RecordBatch.from_pylist([values], schema=schema).serialize().to_pybytes() + _IPC_END

    def _point_encoder(self, table: fl.Table, name: str, with_found: bool) -> _PointEncoder | None:
        """The Arrow schema of `table`'s point answers, its IPC stream head, the packer of one answer row
        (:mod:`serving.one_row`; None for column types it does not pack: pyarrow builds those rows) and the
        columns' names, made once per table version (None if a column is nested: those rows go through the batched
        path). `name`: the table's name as the request spells it (the cache key)."""
        cache_key = (name, with_found)
        cached = self._schemas.get(cache_key)
        if cached is not None and cached[0] is table.info:
            return cached[1]
        dtypes = table.schema.polars_schema
        encoder = None
        if not any(d.is_nested() for d in dtypes.values()):
            schema = pl.DataFrame(schema=dtypes).to_arrow().schema
            if with_found:
                schema = schema.append(pa.field("_found", pa.bool_()))
            encoder = (schema, schema.serialize().to_pybytes(), row_encoder(schema), tuple(schema.names))
        self._schemas[cache_key] = (table.info, encoder)
        return encoder

    def _lane_caller(self, secret: str | None) -> _LaneContext:
        """The caller of a lane connection from its hello's token (as the Flight middleware reads the header)."""
        if self.config.tokens is None or secret is None:
            return _LaneContext(_Caller(None))
        token = self.config.tokens.find(secret.strip())
        if token is None:
            raise AuthenticationError("unknown bearer token; check the token the client sends")
        return _LaneContext(_Caller(token))

    def _unary(self, context: Any, body: Any) -> Iterator[flight.Result]:
        """An exchange verb sent as an action (a small input; see :data:`serving.protocol.UNARY_MAX_BYTES`)."""
        return iter([flight.Result(self._unary_answer(context, body))])

    def _unary_answer(self, context: Any, body: Any, decoded: tuple[dict, pl.DataFrame | None] | None = None) -> bytes:
        """The answer's bytes to an exchange verb's unary body (an action's or a lane frame's; `decoded`: its
        command and rows, when the lane decoded them already)."""
        config = self.config
        if decoded is not None:
            command, data = decoded
        else:
            try:
                command, data = self._decode(body)
            except FlussLakeError as exc:
                self.metrics.record("exchange", None, seconds=0.0, error=True)
                raise to_flight_error(exc) from None

        def work(request: _Request) -> bytes:
            if data is None:
                return self._point(context, command, request)
            if data.height > config.max_request_rows:
                raise RequestTooLargeError(
                    f"{request.verb}: the request is over the server's limit of {config.max_request_rows} rows; "
                    "split it into smaller batches"
                )
            request.rows_in = data.height
            return ipc_bytes(self._answer(context, command, data, request))

        answer: bytes = self._run(command["verb"], command.get("table") or _view_tables(command), work)
        return answer

    def _decode(self, body: Any) -> tuple[dict, pl.DataFrame | None]:
        """A unary body's command and rows, checked (a command seen before is not parsed again)."""
        config = self.config
        if body is None or memoryview(body).nbytes > config.max_request_bytes + config.max_command_bytes:
            raise RequestTooLargeError(
                f"the request is over the server's limit of {config.max_request_bytes} bytes; split it into "
                "smaller batches"
            )
        return decode_unary(
            body, limit=config.max_command_bytes, expected=EXCHANGE_VERBS, known=self._commands, points=self._points
        )

    def _views_key(self, command: dict) -> str:
        """:func:`_views_key`, remembered for the commands :meth:`_decode` keeps (the same dict each time)."""
        known = self._views_keys.get(id(command))
        if known is not None and known[0] is command:
            return known[1]
        key = _views_key(command)
        if len(self._views_keys) >= 256:
            self._views_keys.clear()
        self._views_keys[id(command)] = (command, key)
        return key

    def _online_views(self, context: Any, command: dict, key: str | None = None) -> list[FeatureView]:
        """The views an online-features request names, each checked against the caller's token (the list is kept
        per `key`, the JSON of the definitions, while its tables stay the served ones)."""
        definitions = command.get("views")
        if not isinstance(definitions, list) or not definitions:
            raise MalformedRequestError("online_features needs 'views': a list of feature view definitions")
        key = key if key is not None else self._views_key(command)
        known = self._view_lists.get(key)
        if known is not None and all(
            v.table is self.table(d["table"]) for v, d in zip(known, definitions, strict=True)
        ):
            views = known
        else:
            views = [self.view(d) for d in definitions]
            if len(self._view_lists) >= 1024:
                self._view_lists.clear()
            self._view_lists[key] = views
        for v in views:
            assert v.table is not None
            self._authorize(context, str(v.table.path), write=False)
        if command.get("log"):
            self._authorize(context, str(TablePath.of(command["log"])), write=True)
        return views

    def _shared(self, command: dict, views_key: str) -> tuple[str, ...] | None:
        """The key under which concurrent online-features requests may share one call (None: this one may not: it
        is logged under its own id, or asks for its own time)."""
        if command.get("log") or self.config.log_table or command.get("now") is not None:
            return None
        return (str(bool(command.get("with_status"))), views_key)

    def _online(self, context: Any, command: dict, entities: pl.DataFrame, request: _Request) -> pl.DataFrame:
        views_key = self._views_key(command)
        views = self._online_views(context, command, views_key)
        request.check_time("computing features")
        key = self._shared(command, views_key)
        if key is None:  # one call each
            log_name = command.get("log") or self.config.log_table
            result = self.serve_features(
                entities, views, now=command.get("now"), log=log_name, request_id=command.get("request_id")
            )
        else:  # concurrent requests for the same views: one call for all (serving.coalesce)
            statuses = bool(command.get("with_status"))
            result = self._coalescer.run(key, entities, partial(self._shared_features, views, statuses))
        return _online_frame(result, command)

    def _lane_answers(self, items: list[tuple[Any, bytes]]) -> list[bytes | BaseException]:
        """The answers to the lane requests read in one pass of its loop, in order. Online-features requests for
        the same views among them share one call (as :class:`~serving.coalesce.Coalescer` does for threads), and
        those that go to the same served-feature log share one append (one commit), each under its own id."""
        answers: list[bytes | BaseException | None] = [None] * len(items)
        decoded: list[tuple[dict, pl.DataFrame | None] | None] = [None] * len(items)
        groups: dict[tuple[str, ...], list[tuple[int, dict, pl.DataFrame, list[FeatureView]]]] = {}
        for i, (context, body) in enumerate(items if len(items) > 1 else ()):
            try:
                command, data = decoded[i] = self._decode(body)
                if command["verb"] != "online_features" or data is None or data.height > self.config.max_request_rows:
                    continue
                if command.get("now") is None:  # a request at its own time is answered alone
                    views_key = self._views_key(command)
                    views = self._online_views(context, command, views_key)
                    log_name = command.get("log") or self.config.log_table or ""
                    statuses = str(bool(command.get("with_status")))
                    groups.setdefault((log_name, statuses, views_key), []).append((i, command, data, views))
            except FlussLakeError:
                continue  # answered alone below, with its error and its metrics
        for key, members in groups.items():
            if len(members) > 1:
                self._answer_together(key[0], key[1] == "True", members, answers)
        out: list[bytes | BaseException] = []
        for (context, body), answer, request in zip(items, answers, decoded, strict=True):
            if answer is None:
                try:
                    answer = self._unary_answer(context, body, request)
                except Exception as exc:  # noqa: BLE001 - the lane sends it as an error frame
                    answer = exc
            out.append(answer)
        return out

    def _answer_together(
        self,
        log_name: str,
        statuses: bool,
        members: list[tuple[int, dict, pl.DataFrame, list[FeatureView]]],
        answers: list[bytes | BaseException | None],
    ) -> None:
        """One online-features call for requests of the same views (then one log append if they are logged)."""
        started = time.perf_counter()
        results: list[OnlineFeatures | BaseException] = self._coalescer.together(
            [m[2] for m in members], partial(self._shared_features, members[0][3], statuses or bool(log_name))
        )
        if log_name:
            answered = [(k, r) for k, r in enumerate(results) if not isinstance(r, BaseException)]
            ids = {k: members[k][1].get("request_id") or uuid.uuid4().hex for k, _ in answered}
            try:
                if answered:
                    log_served_many(self.table(log_name), [(r, ids[k]) for k, r in answered])
            except Exception as exc:  # noqa: BLE001 - a failed log write fails each call it would have logged
                for k, _ in answered:
                    results[k] = exc
        seconds = time.perf_counter() - started
        for (i, command, data, _), result in zip(members, results, strict=True):
            table = _view_tables(command)
            failed = isinstance(result, BaseException)
            if isinstance(result, BaseException):
                answers[i] = self._public_error(result, "online_features", table)
            else:
                answers[i] = ipc_bytes(_online_frame(result, command))
            self.metrics.record(
                "online_features",
                table if table in self._tables else None,
                seconds=seconds,
                rows_in=data.height,
                rows_out=0 if failed else data.height,
                error=failed,
            )

    def _shared_features(self, views: list[FeatureView], statuses: bool, entities: pl.DataFrame) -> OnlineFeatures:
        return self.serve_features(entities, views, now=None, log=None, request_id=None, statuses=statuses)

    def serve_features(
        self,
        entities: pl.DataFrame,
        views: list[FeatureView],
        *,
        now: Any,
        log: str | None,
        request_id: str | None,
        statuses: bool = True,
    ) -> OnlineFeatures:
        """Online features for already authorized views, appended to the served-feature log if one is set.

        Without `statuses` (nobody asked for them, nothing is logged) the answer carries the features only: a
        commit-time view without a TTL then needs no commit times at all."""
        log_name = log or self.config.log_table
        log_table = self.table(log_name) if log_name else None
        if not statuses and log_table is None:
            frame = online_features(entities, views, now=now)
            return OnlineFeatures(frame, datetime.now(UTC), (), (), tuple(views))
        return online_features(entities, views, now=now, with_status=True, log=log_table, request_id=request_id)

    # ------------------------------------------------------------------ DoGet: scans and changelogs
    def do_get(self, context: Any, ticket: Any) -> flight.RecordBatchStream:
        try:
            command = decode_command(ticket.ticket, limit=self.config.max_command_bytes, expected=GET_VERBS)
        except FlussLakeError as exc:
            self.metrics.record("get", None, seconds=0.0, error=True)
            raise to_flight_error(exc) from None
        verb = command["verb"]

        def work(request: _Request) -> flight.RecordBatchStream:
            table = self.table(command.get("table"))
            self._authorize(context, str(table.path), write=False)
            columns = command.get("columns")
            if verb == "limit_scan":
                limit = command.get("limit")
                if not isinstance(limit, int) or limit < 0:
                    raise MalformedRequestError("limit_scan needs 'limit': a non-negative integer")
                frame = table.limit_scan(limit, columns=columns)
            elif verb == "to_polars":
                frame = table.to_polars(columns=columns)
            elif verb == "changelog":
                frame = table.changelog(
                    start_offsets=offsets_from_json(command.get("start_offsets")),
                    end_offsets=offsets_from_json(command.get("end_offsets")),
                    start_timestamp=command.get("start_timestamp"),
                    with_bucket=bool(command.get("with_bucket")),
                )
            else:
                frame = table.scan_log(
                    start_offsets=offsets_from_json(command.get("start_offsets")),
                    end_offsets=offsets_from_json(command.get("end_offsets")),
                    columns=columns,
                    start_timestamp=command.get("start_timestamp"),
                    change_types=command.get("change_types"),
                )
            request.check_time("answering")
            out = frame.to_arrow()
            request.rows_out = out.num_rows
            return flight.RecordBatchStream(out)

        result: flight.RecordBatchStream = self._run(verb, command.get("table"), work)
        return result

    # ------------------------------------------------------------------ DoPut: writes
    def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
        try:
            command = decode_command(descriptor.command, limit=self.config.max_command_bytes, expected=PUT_VERBS)
        except FlussLakeError as exc:
            self.metrics.record("put", None, seconds=0.0, error=True)
            raise to_flight_error(exc) from None
        verb = command["verb"]

        def work(request: _Request) -> None:
            table = self.table(command.get("table"))
            path = str(table.path)
            self._authorize(context, path, write=True)
            rows = _frame(request.read(reader))
            request.check_time("receiving the rows")  # after this the write runs to its end
            with self._write_lock(path):
                if verb == "append":
                    result = table.append(rows)
                elif verb == "upsert":
                    result = table.upsert(
                        rows,
                        target_columns=command.get("target_columns"),
                        merge_mode=command.get("merge_mode", "default"),
                        skip_unchanged=bool(command.get("skip_unchanged")),
                    )
                else:
                    result = table.delete(
                        rows,
                        target_columns=command.get("target_columns"),
                        merge_mode=command.get("merge_mode", "default"),
                    )
            answer = {"rows": result.rows, "records": result.records, "offsets": offsets_to_json(result.offsets)}
            writer.write(pa.py_buffer(json.dumps(answer).encode()))

        self._run(verb, command.get("table"), work)

    def _write_lock(self, path: str) -> threading.Lock:
        with self._tables_lock:
            return self._write_locks.setdefault(path, threading.Lock())

    # ------------------------------------------------------------------ DoAction: metadata, health, metrics
    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return list(ACTIONS.items())

    def do_action(self, context: Any, action: Any) -> Iterator[flight.Result]:
        kind = action.type
        if kind in EXCHANGE_VERBS:
            return self._unary(context, action.body)
        if kind == "health":  # liveness: no token needed, no store access
            if self._stopped.is_set():
                raise to_flight_error(ServerUnavailableError("the server is shutting down"))
            body: Any = {
                "status": "ok",
                "store": self.connection.url,
                "uptime_s": self.metrics.snapshot()["uptime_s"],
                "socket_port": self.lane.port if self.lane is not None else None,
            }
            return iter([flight.Result(json.dumps(body).encode())])
        try:
            if kind not in ACTIONS:
                raise MalformedRequestError(f"unknown action {kind!r}; actions: {sorted(ACTIONS)}")
            raw = action.body.to_pybytes() if action.body is not None else b""
            command = decode_command(raw, limit=self.config.max_command_bytes)
        except FlussLakeError as exc:
            self.metrics.record(str(kind), None, seconds=0.0, error=True)
            raise to_flight_error(exc) from None

        def work(request: _Request) -> Any:
            if kind in ("ready", "metrics", "list_databases", "list_tables"):
                token = self._authorize(context, None, write=False)
                if kind == "ready":
                    self.connection.list_databases()  # the store answers
                    return {"status": "ready", "store": self.connection.url}
                if kind == "metrics":
                    return self.metrics.snapshot()
                if kind == "list_databases":
                    names = self.connection.list_databases()
                    if token is None:
                        return names
                    return [d for d in names if any(token.covers(f"{d}.{t}") for t in self.connection.list_tables(d))]
                database = command.get("database")
                if not isinstance(database, str):
                    raise MalformedRequestError("list_tables needs 'database'")
                tables = self.connection.list_tables(database)
                return [t for t in tables if token is None or token.covers(f"{database}.{t}")]
            table = self.table(command.get("table"))
            self._authorize(context, str(table.path), write=False)
            if kind == "table_info":
                return table.info.to_json()
            if kind == "list_partitions":
                return [p.to_json() for p in table.list_partitions()]
            offsets = table.end_offsets() if kind == "end_offsets" else table.earliest_offsets()
            return offsets_to_json(offsets)

        answer = self._run(str(kind), command.get("table"), work)
        return iter([flight.Result(json.dumps(answer, default=str).encode())])


def _mergeable(body: bytes) -> bool:
    """Whether a lane request is an online-features one (as the client encodes it), which concurrent requests
    may share a call for; anything else is answered without waiting for company."""
    return body.startswith(b'{"verb":"online_features"')


def _views_key(command: dict) -> str:
    """The views of an online-features request as one canonical JSON string (what requests share a call by)."""
    return json.dumps(command.get("views"), sort_keys=True)


def _online_frame(result: OnlineFeatures, command: dict) -> pl.DataFrame:
    """An online-features answer as sent: the features, then (asked for) each view's status and value time."""
    if not command.get("with_status"):
        return result.frame
    extra = [s.cast(pl.String).alias(f"{STATUS_PREFIX}{i}") for i, s in enumerate(result.status)]
    extra += [s.alias(f"{TIME_PREFIX}{i}") for i, s in enumerate(result.value_times)]
    return result.frame.hstack(extra)  # hstack: no query plan


def _view_tables(command: dict) -> str | None:
    """The table an online-features request reads first (for the metrics)."""
    views = command.get("views")
    if isinstance(views, list) and views and isinstance(views[0], dict):
        name = views[0].get("table")
        return name if isinstance(name, str) else None
    return None
