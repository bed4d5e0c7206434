"""A small HTTP JSON endpoint shaped like Feast's feature server, for single requests (standard library only).

``POST /get-online-features`` takes Feast's request::

    {"features": ["shop.customer:tier", "shop.customer:score"], "entities": {"id": [1, 2]},
     "full_feature_names": false}

and answers in Feast's shape::

    {"metadata": {"feature_names": ["id", "tier", "score"]},
     "results": [{"values": [1, 2], "statuses": ["PRESENT", "PRESENT"], "event_timestamps": [...]}, ...]}

A feature reference is ``<view>:<feature>``. Views are named in the server's ``--feature-views`` file
(``{"views": [{"name": "customer", "table": "shop.customer", "ttl": "7 d", "entity_keys": ["customer_id"]}]}``)
or, by default, every primary-key table is a view named ``db.table`` keyed by its primary key. Statuses map as
Feast's: ``PRESENT``, ``NULL_VALUE`` (present but null), ``NOT_FOUND`` (absent, deleted or not valid yet),
``OUTSIDE_MAX_AGE`` (older than the TTL). ``GET /health`` answers without a token; everything else takes the
same bearer tokens and scopes as the Flight server.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from fluss_lake.exceptions import (
    FlussLakeError,
    InvalidConfigError,
    InvalidNameError,
    TableNotExistError,
)
from fluss_lake.options import parse_duration_ms
from fluss_lake.training import FeatureView
from serving.errors import (
    AuthenticationError,
    MalformedRequestError,
    PermissionDeniedError,
    RequestTimeoutError,
    RequestTooLargeError,
)

if TYPE_CHECKING:
    from serving.server import FlussLakeServer

__all__ = ["FeastHttpServer"]

_EPOCH = "1970-01-01T00:00:00Z"
_STATUS = {"NOT_FOUND": "NOT_FOUND", "NOT_YET_VALID": "NOT_FOUND", "OUTSIDE_MAX_AGE": "OUTSIDE_MAX_AGE"}


def _http_status(exc: FlussLakeError) -> int:
    if isinstance(exc, AuthenticationError):
        return 401
    if isinstance(exc, PermissionDeniedError):
        return 403
    if isinstance(exc, TableNotExistError):
        return 404
    if isinstance(exc, RequestTooLargeError):
        return 413
    if isinstance(exc, RequestTimeoutError):
        return 504
    return 400


def _load_views(path: str | None) -> dict[str, dict[str, Any]]:
    """Named view definitions from a JSON file (name -> the fields of a view definition)."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidConfigError(f"cannot read the feature views file {path!r}: {exc}") from None
    entries = data.get("views") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise InvalidConfigError(f'{path}: expected {{"views": [{{"name": ..., "table": ..., ...}}]}}')
    views = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "table" not in entry:
            raise InvalidConfigError(f"{path}: each view needs 'name' and 'table'")
        definition = {k: v for k, v in entry.items() if k not in ("name", "ttl")}
        if entry.get("ttl") is not None:
            definition["ttl_us"] = parse_duration_ms("ttl", str(entry["ttl"])) * 1000
        views[entry["name"]] = definition
    return views


def _jsonable(values: list[Any]) -> list[Any]:
    return [v.isoformat() if isinstance(v, datetime) else v for v in values]


class FeastHttpServer:
    """The HTTP endpoint, in a thread beside the Flight server (sharing its store, tokens, limits, metrics)."""

    def __init__(self, flight_server: FlussLakeServer, *, port: int) -> None:
        self.flight = flight_server
        self.views = _load_views(flight_server.config.feature_views)
        handler = _handler(self)
        self._httpd = ThreadingHTTPServer((flight_server.config.host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="serving-http", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._httpd.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def _token(self, header: str | None) -> Any:
        tokens = self.flight.config.tokens
        if tokens is None:
            return None
        if not header:
            raise AuthenticationError("this server needs a bearer token: send 'Authorization: Bearer <token>'")
        scheme, _, secret = header.partition(" ")
        token = tokens.find(secret.strip()) if scheme.lower() == "bearer" else None
        if token is None:
            raise AuthenticationError("unknown bearer token; check the token the client sends")
        return token

    def get_online_features(self, body: Any, token: Any) -> dict[str, Any]:
        """Answer one Feast-shaped request."""
        if not isinstance(body, dict):
            raise MalformedRequestError("the request body must be a JSON object")
        if body.get("feature_service") is not None:
            raise MalformedRequestError("feature services are not supported; list 'features' as '<view>:<feature>'")
        refs, entities = body.get("features"), body.get("entities")
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and ":" in r for r in refs):
            raise MalformedRequestError("'features' must be a non-empty list of '<view>:<feature>' strings")
        if not isinstance(entities, dict) or not entities or not all(isinstance(v, list) for v in entities.values()):
            raise MalformedRequestError("'entities' must be an object of equally long lists, e.g. {'id': [1, 2]}")
        if len({len(v) for v in entities.values()}) != 1:
            raise MalformedRequestError("every 'entities' list must have the same length")
        full = bool(body.get("full_feature_names", False))
        wanted: dict[str, list[str]] = {}
        for ref in refs:
            name, _, feature = ref.rpartition(":")
            wanted.setdefault(name, []).append(feature)
        views: list[FeatureView] = []
        for i, (name, features) in enumerate(wanted.items()):
            definition = dict(self.views.get(name) or {"table": name})
            definition.update(features=features, prefix=f"__v{i}__")
            views.append(self.flight.view(definition))
        for view in views:
            assert view.table is not None
            if token is not None:
                token.check(str(view.table.path), write=False)
        try:
            frame = pl.DataFrame(entities)
        except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
            raise MalformedRequestError(f"'entities' could not be read as columns: {exc}") from None
        result = self.flight.serve_features(frame, views, now=None, log=None, request_id=None)
        names: list[str] = list(entities)
        results: list[dict[str, Any]] = [
            {
                "values": _jsonable(frame.get_column(c).to_list()),
                "statuses": ["PRESENT"] * frame.height,
                "event_timestamps": [_EPOCH] * frame.height,
            }
            for c in entities
        ]
        for (name, features), view, status, times in zip(
            wanted.items(), views, result.status, result.value_times, strict=True
        ):
            codes = status.cast(pl.String).to_list()
            stamps = [_EPOCH if t is None else t.isoformat() for t in times.to_list()]
            for feature in features:
                values = result.frame.get_column(f"{view.prefix}{feature}").to_list()
                names.append(f"{name}__{feature}" if full else feature)
                statuses = [
                    ("NULL_VALUE" if v is None else "PRESENT") if c == "PRESENT" else _STATUS[c]
                    for v, c in zip(values, codes, strict=True)
                ]
                results.append({"values": _jsonable(values), "statuses": statuses, "event_timestamps": stamps})
        return {"metadata": {"feature_names": names}, "results": results}


def _handler(server: FeastHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # the progress line reports traffic; no per-request access log

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": "NotFound", "message": f"no endpoint {self.path}"})

        def do_POST(self) -> None:
            started = time.perf_counter()
            failed = False
            try:
                if self.path != "/get-online-features":
                    self._send(404, {"error": "NotFound", "message": f"no endpoint {self.path}"})
                    return
                token = server._token(self.headers.get("Authorization"))
                length = self.headers.get("Content-Length")
                if length is None or not length.isdigit():
                    raise MalformedRequestError("send a Content-Length header with the JSON body")
                limit = server.flight.config.max_request_bytes
                if int(length) > limit:
                    raise RequestTooLargeError(f"the request body is over the server's limit of {limit} bytes")
                raw = self.rfile.read(int(length))
                try:
                    body = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise MalformedRequestError(f"the request body is not valid JSON: {exc}") from None
                self._send(200, server.get_online_features(body, token))
            except (FlussLakeError, InvalidNameError) as exc:
                failed = True
                self.close_connection = True
                self._send(_http_status(exc), {"error": type(exc).__name__, "message": str(exc)})
            except Exception as exc:  # noqa: BLE001 - never send internals to a client
                failed = True
                self.close_connection = True
                self._send(500, {"error": "InternalError", "message": f"internal server error ({type(exc).__name__})"})
            finally:
                server.flight.metrics.record(
                    "http_get_online_features", None, seconds=time.perf_counter() - started, error=failed
                )

    return Handler
