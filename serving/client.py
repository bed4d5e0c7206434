"""The Python client of ``fluss-lake serve``: a connection and tables with the verbs of the local ones.

``serving.connect("grpc://host:port", token=...)`` gives a :class:`RemoteConnection`; its
:meth:`~RemoteConnection.get_table` gives a :class:`RemoteTable` with the read and write verbs of
:class:`fluss_lake.Table` (``lookup``, ``prefix_lookup``, ``limit_scan``, ``changelog``, ``scan_log``,
``to_polars``, ``append``, ``upsert``, ``delete``, offsets and metadata), returning the same polars frames and
raising the same :class:`~fluss_lake.FlussLakeError` subclasses. ``FeatureView.from_table(remote_table, ...)``
makes a view of a served table, and :func:`fluss_lake.training.online_features` answers views of a served store
through its server (one request for all views), so scoring code moves between embedded and served unchanged.

(Why ``serving.connect`` and not ``fluss_lake.connect("grpc://...")``: the core never imports ``serving``, and a
runtime plugin hook would make ``fluss_lake.connect`` return an object that is not a ``Connection``;
``docs/SERVING.md`` says more.)
"""

from __future__ import annotations

import json
import logging
import ssl
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import polars as pl
import pyarrow as pa
import pyarrow.flight as flight

from fluss_lake._utils.arguments import check_seconds
from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.metadata.conform import conform, to_frame
from fluss_lake.metadata.descriptor import TableInfo
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.training import STATUS, FeatureView, OnlineFeatures
from fluss_lake.training.history import as_utc
from fluss_lake.write.write_result import WriteResult
from serving.errors import ServerUnavailableError
from serving.lane import LaneClient, LaneUnreachableError
from serving.protocol import (
    UNARY_MAX_BYTES,
    encode_command,
    encode_unary,
    error_from_info,
    from_flight_error,
    offsets_from_json,
    offsets_to_json,
    read_ipc,
)
from serving.server import STATUS_PREFIX, TIME_PREFIX

__all__ = ["RemoteConnection", "RemoteTable", "connect"]

_log = logging.getLogger("serving")


def _lane_error(payload: bytes | bytearray) -> Exception:
    """The library error a lane error frame carries."""
    unreadable = ServerUnavailableError(f"the server answered an unreadable error: {bytes(payload[:200])!r}")
    return error_from_info(payload) or unreadable


@contextmanager
def _errors() -> Iterator[None]:
    """Flight errors back into the library's errors."""
    try:
        yield
    except flight.FlightError as exc:
        raise from_flight_error(exc) from None


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def connect(
    url: str,
    *,
    token: str | None = None,
    tls_root_certs: str | bytes | None = None,
    timeout: float | None = 60.0,
    socket_lane: bool = True,
) -> RemoteConnection:
    """Connect to ``fluss-lake serve`` at `url` (``grpc://host:port``, or ``grpc+tls://host:port`` with TLS).

    Parameters
    ----------
    token
        The bearer token (``$FLUSS_LAKE_TOKEN`` is not read implicitly: pass it).
    tls_root_certs
        PEM certificate(s) to trust (a path or the bytes), for a server with its own certificate.
    timeout
        Seconds each call may take (None: no limit).
    socket_lane
        Send small lookups and online-feature requests over the server's socket lane when it offers one
        (:mod:`serving.lane`: same answers and errors, a fraction of a Flight call's cost); False: Flight only.
        A lane that cannot be reached is given up for Flight after a short connect attempt.

    Examples
    --------
    >>> import tempfile, serving
    >>> server = serving.FlussLakeServer(serving.ServerConfig(store=tempfile.mkdtemp(), port=0))
    >>> remote = serving.connect(server.location)
    >>> remote.health()["status"], remote.list_databases()
    ('ok', [])
    >>> server.stop()
    """
    return RemoteConnection(url, token=token, tls_root_certs=tls_root_certs, timeout=timeout, socket_lane=socket_lane)


class RemoteConnection:
    """A handle on a served store: the reading admin verbs, its tables, online features, health and metrics."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        tls_root_certs: str | bytes | None = None,
        timeout: float | None = 60.0,
        socket_lane: bool = True,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("grpc://", "grpc+tcp://", "grpc+tls://")):
            raise InvalidConfigError(
                f"serving.connect takes a grpc://host:port or grpc+tls://host:port URL, got {url!r}"
            )
        check_seconds("timeout", timeout, optional=True, hint="seconds each call may take, or None")
        certs = tls_root_certs
        if isinstance(certs, str):
            certs = Path(certs).read_bytes()
        self.url = url
        self._client = flight.FlightClient(url, tls_root_certs=certs) if certs else flight.FlightClient(url)
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        self._options = flight.FlightCallOptions(headers=headers, timeout=timeout)
        self._tables: dict[str, RemoteTable] = {}
        # the command of a plain online-features request, by its views (immutable objects) and with_status
        self._online_commands: dict[tuple[int, ...], tuple[list[FeatureView], bytes]] = {}
        self._token = token
        self._timeout = timeout
        self._certs = certs
        self._lane: LaneClient | None = None
        self._lane_known = not socket_lane  # False until the server said whether it has a lane

    def _lane_client(self) -> LaneClient | None:
        """The socket lane, asked of the server once (None: it has none, or it cannot be reached from here)."""
        if self._lane_known:
            return self._lane
        port = self.health().get("socket_port")
        if isinstance(port, int) and not isinstance(port, bool):
            parts = urlsplit(self.url)
            host = parts.hostname or "127.0.0.1"
            tls = None
            if parts.scheme == "grpc+tls":
                tls = ssl.create_default_context(cadata=self._certs.decode() if self._certs else None)
            self._lane = LaneClient(
                host, port, token=self._token, timeout=self._timeout, tls=tls, error=_lane_error, connect_s=2.0
            )
        self._lane_known = True
        return self._lane

    def _unary(self, verb: str, body: bytes, *, retry: bool = True) -> pl.DataFrame:
        """One small exchange-verb request: over the socket lane if there is one, else as a Flight action."""
        lane = self._lane_client()
        if lane is not None:
            try:
                return read_ipc(lane.request(body, retry=retry))
            except LaneUnreachableError as exc:
                _log.warning("%s; using Flight for every call of this connection", exc)
                self._lane = None
        with _errors():
            results = list(self._client.do_action(flight.Action(verb, body), self._options))
        return read_ipc(results[0].body)

    # ------------------------------------------------------------ transport
    def _action(self, kind: str, **body: Any) -> Any:
        with _errors():
            results = list(self._client.do_action(flight.Action(kind, json.dumps(body).encode()), self._options))
        return json.loads(results[0].body.to_pybytes())

    def _exchange(
        self, verb: str, command: bytes, rows: pa.Table | pl.DataFrame, *, retry: bool = True
    ) -> pl.DataFrame:
        size = rows.nbytes if isinstance(rows, pa.Table) else rows.estimated_size()
        if size <= UNARY_MAX_BYTES:  # one message each way: a quarter of an exchange's cost
            return self._unary(verb, encode_unary(command, rows), retry=retry)
        data = rows if isinstance(rows, pa.Table) else rows.to_arrow()
        with _errors():
            writer, reader = self._client.do_exchange(flight.FlightDescriptor.for_command(command), self._options)
            with writer:
                writer.begin(data.schema)
                writer.write_table(data)
                writer.done_writing()
                return _frame(reader.read_all())

    def _point(self, verb: str, command: bytes) -> pl.DataFrame:
        """An exchange verb whose input is all in its command (one key): one small message each way."""
        return self._unary(verb, command + b"\n")

    def _get(self, command: bytes) -> pa.Table:
        with _errors():
            return self._client.do_get(flight.Ticket(command), self._options).read_all()

    def _put(self, command: bytes, data: pa.Table) -> dict[str, Any]:
        with _errors():
            writer, metadata = self._client.do_put(
                flight.FlightDescriptor.for_command(command), data.schema, self._options
            )
            with writer:
                writer.write_table(data)
                writer.done_writing()
                answer = metadata.read()
        if answer is None:
            raise InvalidConfigError("the server sent no write result")
        result: dict[str, Any] = json.loads(answer.to_pybytes())
        return result

    def close(self) -> None:
        """Close the channel (and the socket lane's connections)."""
        if self._lane is not None:
            self._lane.close()
        self._client.close()

    def __enter__(self) -> RemoteConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ verbs
    def health(self) -> dict[str, Any]:
        """The server's liveness answer (no token needed)."""
        result: dict[str, Any] = self._action("health")
        return result

    def ready(self) -> dict[str, Any]:
        """Readiness: the server reached its store."""
        result: dict[str, Any] = self._action("ready")
        return result

    def metrics(self) -> dict[str, Any]:
        """Per-table request counters and latency histograms since the server started."""
        result: dict[str, Any] = self._action("metrics")
        return result

    def list_databases(self) -> list[str]:
        """Databases with tables this token reaches."""
        result: list[str] = self._action("list_databases")
        return result

    def list_tables(self, database: str) -> list[str]:
        """Tables of `database` this token reaches."""
        result: list[str] = self._action("list_tables", database=database)
        return result

    def table_exists(self, path: str | TablePath) -> bool:
        """Whether the table exists (and this token reaches it)."""
        path = TablePath.of(path)
        return path.table in self.list_tables(path.database)

    def get_table_info(self, path: str | TablePath) -> TableInfo:
        """The table's metadata."""
        return TableInfo.from_json(self._action("table_info", table=str(TablePath.of(path))))

    def get_table(self, path: str | TablePath) -> RemoteTable:
        """A :class:`RemoteTable` (one per table per connection; metadata read now)."""
        name = str(TablePath.of(path))
        info = self.get_table_info(name)
        table = self._tables.get(name)
        if table is None or table.info.table_id != info.table_id:
            table = self._tables[name] = RemoteTable(self, info)
        else:
            table._info = info
        return table

    def online_features(
        self,
        entity_rows: Any,
        views: FeatureView | Sequence[FeatureView],
        *,
        now: datetime | date | str | None = None,
        with_status: bool = False,
        log: Any = None,
        request_id: str | None = None,
    ) -> pl.DataFrame | OnlineFeatures:
        """:func:`fluss_lake.training.online_features`, answered by the server (one request for every view).

        `log` names the served-feature log (a table path or a table of this store); the server appends the
        answer there under `request_id` (default: a new UUID).
        """
        views = [views] if isinstance(views, FeatureView) else list(views)
        if isinstance(entity_rows, pl.DataFrame):
            entities = entity_rows
        else:
            from fluss_lake.training.online import _entity_frame

            entities = _entity_frame(entity_rows)
        log_name = None if log is None else str(getattr(log, "path", log))
        request_id = request_id or (uuid.uuid4().hex if log_name else None)
        command = self._online_command(views, now, with_status, log_name, request_id)
        # a logged request is not sent twice (a lane connection found closed is retried only for plain reads)
        out = self._exchange("online_features", command, entities, retry=log_name is None)
        if not with_status:
            return out
        status = [out.drop_in_place(f"{STATUS_PREFIX}{i}").cast(STATUS) for i in range(len(views))]
        times = [out.drop_in_place(f"{TIME_PREFIX}{i}") for i in range(len(views))]
        when = as_utc(now, what="now") if now is not None else None
        return OnlineFeatures(
            out,
            when if when is not None else datetime.now().astimezone(),
            tuple(s.alias(v.name or v.prefix or "status") for s, v in zip(status, views, strict=True)),
            tuple(t.alias(v.name or v.prefix or "time") for t, v in zip(times, views, strict=True)),
            tuple(views),
            request_id,
        )

    def _online_command(
        self,
        views: list[FeatureView],
        now: datetime | date | str | None,
        with_status: bool,
        log_name: str | None,
        request_id: str | None,
    ) -> bytes:
        """An online-features command; a plain one (no time, no log) is encoded once per list of views."""
        plain = now is None and log_name is None and request_id is None
        key = (*map(id, views), with_status)
        known = self._online_commands.get(key) if plain else None
        if known is not None and all(a is b for a, b in zip(known[0], views, strict=True)):
            return known[1]
        command = encode_command(
            "online_features",
            views=[v.definition() for v in views],
            now=None if now is None else as_utc(now, what="now").isoformat(),
            with_status=with_status,
            log=log_name,
            request_id=request_id,
        )
        if plain:
            if len(self._online_commands) >= 64:
                self._online_commands.clear()
            self._online_commands[key] = (views, command)
        return command

    def __repr__(self) -> str:
        return f"<RemoteConnection {self.url}>"


_INT_BITS: dict[str, int] = {"Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64}


def _key_ranges(dtypes: Mapping[str, pl.DataType]) -> dict[str, tuple[int, int] | None]:
    """Per column a plain key value may be given for: the range of its integer type, or None for a string."""
    ranges: dict[str, tuple[int, int] | None] = {}
    for name, dtype in dtypes.items():
        bits = _INT_BITS.get(str(dtype), 0)
        if bits:
            ranges[name] = (-(2 ** (bits - 1)), 2 ** (bits - 1))
        elif dtype == pl.String:
            ranges[name] = None
    return ranges


def _plain_key(keys: Any, ranges: Mapping[str, tuple[int, int] | None]) -> dict[str, Any] | None:
    """The one key of `keys` when it is a dict of plain ints/strings for integer/string key columns (a request per
    key is the latency case; `ranges` from :func:`_key_ranges`), else None: anything else goes through the
    library's conformance (and its errors)."""
    if not (isinstance(keys, list) and len(keys) == 1 and isinstance(keys[0], dict)):
        return None
    key: dict[str, Any] = keys[0]
    for name, value in key.items():
        if name not in ranges:
            return None
        bounds = ranges[name]
        if bounds is None:
            if type(value) is not str:
                return None
        elif not (type(value) is int and bounds[0] <= value < bounds[1]):
            return None
    return key


def _simple_keys(keys: Any, dtypes: Mapping[str, pl.DataType]) -> pa.Table | None:
    """:func:`_plain_key`'s key straight to Arrow."""
    key = _plain_key(keys, _key_ranges(dtypes))
    if key is None:
        return None
    fields = []
    for name, value in key.items():
        if type(value) is int:
            bits = _INT_BITS[str(dtypes[name])]
            fields.append(pa.field(name, getattr(pa, f"int{bits}")()))
        else:
            fields.append(pa.field(name, pa.large_string()))
    return pa.Table.from_pylist([key], schema=pa.schema(fields))


#: :meth:`RemoteTable._point_facts`.
_PointFacts = tuple[
    pl.Schema, dict[str, tuple[int, int] | None], frozenset[str], tuple[bytes, bytes], tuple[str, bytes, bytes] | None
]


class RemoteTable:
    """A served table with the verbs of :class:`fluss_lake.Table` (same arguments, same frames, same errors)."""

    def __init__(self, connection: RemoteConnection, info: TableInfo) -> None:
        self._connection = connection
        self._info = info
        self._cached_dtypes: tuple[TableInfo, _PointFacts] | None = None

    def _name(self) -> str:
        return str(self._info.path)

    def _dtypes(self) -> pl.Schema:
        """The columns' Polars types, made once per metadata version (a one-key request should not rebuild them)."""
        return self._point_facts()[0]

    def _point_facts(self) -> _PointFacts:
        """What a one-key lookup needs, made once per metadata version: the Polars types, the plain key values'
        ranges (:func:`_key_ranges`), the primary key's names and the JSON heads of its commands (by
        ``with_found``: ``encode_command`` up to the key's value) and, for a one-column key, its name and the heads
        up to that column's value (the value's JSON is then all a request adds: ``json.dumps`` of the key dict was
        a sixth of the client's CPU for a one-key lookup)."""
        cached = self._cached_dtypes
        if cached is None or cached[0] is not self._info:
            dtypes = self._info.schema.polars_schema
            head = [
                encode_command("lookup", table=self._name(), with_found=found, key=None)[: -len(b"null}")]
                for found in (False, True)
            ]
            heads = (head[0], head[1])
            primary_key = self._info.schema.primary_key
            single = None
            if len(primary_key) == 1:
                name = json.dumps(primary_key[0]).encode()
                single = (primary_key[0], heads[0] + b"{" + name + b":", heads[1] + b"{" + name + b":")
            facts = (dtypes, _key_ranges(dtypes), frozenset(primary_key), heads, single)
            cached = self._cached_dtypes = (self._info, facts)
        return cached[1]

    # ------------------------------------------------------------ metadata
    @property
    def connection(self) -> RemoteConnection:
        """The connection this table was opened from."""
        return self._connection

    @property
    def info(self) -> TableInfo:
        """The table's metadata as last read."""
        return self._info

    @property
    def path(self) -> TablePath:
        """``database.table``."""
        return self._info.path

    @property
    def schema(self) -> Schema:
        """The current schema (as last read)."""
        return self._info.schema

    @property
    def is_primary_key_table(self) -> bool:
        """Whether the table has a primary key."""
        return self._info.is_primary_key_table

    @property
    def partition_keys(self) -> tuple[str, ...]:
        """Partition key columns."""
        return self._info.partition_keys

    @property
    def is_partitioned(self) -> bool:
        """Whether the table is partitioned."""
        return bool(self._info.partition_keys)

    @property
    def partition_info(self) -> None:
        """Always None: a remote handle is the whole table."""
        return None

    @property
    def partition_name(self) -> None:
        """Always None: a remote handle is the whole table."""
        return None

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return self._info.bucket_num

    def refresh(self) -> RemoteTable:
        """Re-read the table metadata."""
        self._info = self._connection.get_table_info(self._name())
        return self

    def list_partitions(self) -> list[PartitionInfo]:
        """The table's partitions, sorted by name."""
        return [PartitionInfo.from_json(p) for p in self._connection._action("list_partitions", table=self._name())]

    def end_offsets(self) -> dict:
        """Log end offset of every bucket (keys ``(partition name, bucket)`` on a partitioned table)."""
        return offsets_from_json(self._connection._action("end_offsets", table=self._name())) or {}

    def earliest_offsets(self) -> dict:
        """First retained offset of every bucket."""
        return offsets_from_json(self._connection._action("earliest_offsets", table=self._name())) or {}

    # ------------------------------------------------------------ reads
    def _keys(self, keys: Any) -> pa.Table:
        simple = _simple_keys(keys, self._dtypes())
        if simple is not None:
            return simple
        frame = to_frame(keys, self.schema)
        try:
            return frame.to_arrow()
        except pa.ArrowException:  # a type Arrow cannot carry (Python ints beyond 64 bits): the library's error
            key_columns = [c for c in frame.columns if c in self.schema.names]
            conform(frame, self.schema, required=key_columns, key_columns=key_columns)
            raise InvalidConfigError(f"the keys cannot be sent as Arrow data (types {dict(frame.schema)})") from None

    def lookup(self, keys: Any, *, with_found: bool = False, with_offsets: bool = False) -> pl.DataFrame:
        """Current rows for the given primary keys, in key order (see :meth:`fluss_lake.Table.lookup`)."""
        if not with_offsets:
            _, ranges, primary_key, heads, single = self._point_facts()
            key = _plain_key(keys, ranges)
            if key is not None and key.keys() == primary_key:  # one key: the point path, no IPC in
                if single is not None:  # a plain int or str (_plain_key): its JSON as json.dumps writes it
                    value = key[single[0]]
                    text = str(value) if type(value) is int else json.dumps(value)
                    command = (single[2] if with_found else single[1]) + text.encode() + b"}}"
                else:
                    command = heads[with_found] + json.dumps(key, separators=(",", ":")).encode() + b"}"
                return self._connection._point("lookup", command)
        command = encode_command("lookup", table=self._name(), with_found=with_found, with_offsets=with_offsets)
        return self._connection._exchange("lookup", command, self._keys(keys))

    def lookup_one(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        """The current row of one primary key, or None (see :meth:`fluss_lake.Table.lookup_one`)."""
        if not isinstance(key, Mapping) or key.keys() != set(self.schema.primary_key):
            columns = list(self.schema.primary_key)
            raise InvalidConfigError(f"lookup_one takes a dict of exactly the primary-key columns {columns}")
        rows = self.lookup([dict(key)], with_found=True)
        if not rows.get_column("_found")[0]:
            return None
        rows.drop_in_place("_found")
        return rows.row(0, named=True)

    def prefix_lookup(self, keys: Any, *, with_offsets: bool = False) -> pl.DataFrame:
        """Every current row whose bucket key equals one of the given prefixes (see
        :meth:`fluss_lake.Table.prefix_lookup`)."""
        command = encode_command("prefix_lookup", table=self._name(), with_offsets=with_offsets)
        return self._connection._exchange("prefix_lookup", command, self._keys(keys))

    def limit_scan(self, limit: int, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """At most `limit` rows (see :meth:`fluss_lake.Table.limit_scan`)."""
        cols = list(columns) if columns is not None else None
        return _frame(
            self._connection._get(encode_command("limit_scan", table=self._name(), limit=limit, columns=cols))
        )

    def to_polars(self, *, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Current rows (a primary-key table's state, or every row of a log table)."""
        cols = list(columns) if columns is not None else None
        return _frame(self._connection._get(encode_command("to_polars", table=self._name(), columns=cols)))

    def changelog(
        self,
        *,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        start_timestamp: int | None = None,
        with_bucket: bool = False,
    ) -> pl.DataFrame:
        """The ``$changelog`` view from offsets (see :meth:`fluss_lake.Table.changelog`)."""
        command = encode_command(
            "changelog",
            table=self._name(),
            start_offsets=offsets_to_json(start_offsets),
            end_offsets=offsets_to_json(end_offsets),
            start_timestamp=start_timestamp,
            with_bucket=with_bucket,
        )
        return _frame(self._connection._get(command))

    def scan_log(
        self,
        *,
        start_offsets: Mapping | None = None,
        end_offsets: Mapping | None = None,
        columns: Sequence[str] | None = None,
        start_timestamp: int | None = None,
        change_types: Sequence[str] | None = None,
    ) -> pl.DataFrame:
        """A bounded read of the log with system columns first (see :meth:`fluss_lake.Table.scan_log`)."""
        command = encode_command(
            "scan_log",
            table=self._name(),
            start_offsets=offsets_to_json(start_offsets),
            end_offsets=offsets_to_json(end_offsets),
            columns=list(columns) if columns is not None else None,
            start_timestamp=start_timestamp,
            change_types=list(change_types) if change_types is not None else None,
        )
        return _frame(self._connection._get(command))

    # ------------------------------------------------------------ writes
    def _write(self, verb: str, data: Any, **options: Any) -> WriteResult:
        answer = self._connection._put(
            encode_command(verb, table=self._name(), **options), to_frame(data, self.schema).to_arrow()
        )
        offsets = offsets_from_json(answer.get("offsets")) or {}
        return WriteResult(answer["rows"], answer["records"], {k: tuple(v) for k, v in offsets.items()})

    def append(self, data: Any) -> WriteResult:
        """Append rows to a log table (committed when this returns)."""
        return self._write("append", data)

    def upsert(
        self,
        data: Any,
        *,
        target_columns: Sequence[str] | None = None,
        merge_mode: str = "default",
        skip_unchanged: bool = False,
    ) -> WriteResult:
        """Upsert rows into a primary-key table; `target_columns` makes it a partial update."""
        return self._write(
            "upsert",
            data,
            target_columns=list(target_columns) if target_columns is not None else None,
            merge_mode=merge_mode,
            skip_unchanged=skip_unchanged,
        )

    def delete(
        self, keys: Any, *, target_columns: Sequence[str] | None = None, merge_mode: str = "default"
    ) -> WriteResult:
        """Delete rows by primary key (a partial delete with `target_columns`)."""
        return self._write(
            "delete",
            keys,
            target_columns=list(target_columns) if target_columns is not None else None,
            merge_mode=merge_mode,
        )

    def __repr__(self) -> str:
        kind = "primary-key" if self.is_primary_key_table else "log"
        return f"<RemoteTable {self.path} ({kind}) at {self._connection.url}>"
