"""``fluss-lake serve``: the Flight server (and optionally the HTTP endpoint) over a store until SIGTERM/SIGINT.

(The core's ``fluss-lake`` command finds this verb through the ``fluss_lake.commands`` entry-point group;
``python -m serving serve ...`` runs it too.)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from typing import Any, TextIO

from fluss_lake.exceptions import FlussLakeError

__all__ = ["main", "register", "run"]

_DESCRIPTION = (
    "Serve a store over Arrow Flight: lookups, prefix lookups, online features (from the training definitions), "
    "limit scans, changelog reads and writes, with bearer tokens scoped to tables (required beyond loopback), TLS, "
    "request limits, metrics and a graceful stop on SIGTERM. --http-port adds a Feast-shaped "
    "POST /get-online-features endpoint."
)


def register(subparsers: Any) -> None:
    """Add the ``serve`` sub-command to an argparse sub-parsers object."""
    parser = subparsers.add_parser("serve", help="serve a store over Arrow Flight (and HTTP)", description=_DESCRIPTION)
    parser.add_argument(
        "--store", help="store folder or URL (default: $FLUSS_LAKE_URL, else the home's store $FLUSS_LAKE_HOME/live)"
    )
    parser.add_argument("--storage-options", type=json.loads, default=None, metavar="JSON", help="fsspec options")
    parser.add_argument("--local-dir", default=None, help="cache folder for primary-key state of a remote store")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (beyond loopback needs --tokens)")
    parser.add_argument("--port", type=int, default=8815, help="Flight port (0: any free port; default 8815)")
    parser.add_argument(
        "--tokens",
        default=None,
        metavar="FILE",
        help="token file (JSON); default $FLUSS_LAKE_SERVE_TOKENS_FILE or $FLUSS_LAKE_SERVE_TOKENS",
    )
    parser.add_argument("--tls-cert", default=None, metavar="PEM", help="serve TLS with this certificate")
    parser.add_argument("--tls-key", default=None, metavar="PEM", help="the certificate's private key")
    parser.add_argument(
        "--socket-port",
        type=int,
        default=0,
        help="socket lane port for small lookups and online features (default 0: any free port, told in health)",
    )
    parser.add_argument("--no-socket-lane", action="store_true", help="serve everything over Flight only")
    parser.add_argument("--http-port", type=int, default=None, help="also serve HTTP /get-online-features here")
    parser.add_argument("--feature-views", default=None, metavar="FILE", help="named feature views (JSON) for HTTP")
    parser.add_argument(
        "--log-table",
        default=None,
        metavar="DB.TABLE",
        help="append every online-features answer to this served-feature log (created if missing)",
    )
    parser.add_argument("--max-request-mb", type=float, default=64.0, help="largest request stream (MiB)")
    parser.add_argument("--max-request-rows", type=int, default=1_000_000, help="most rows in one request")
    parser.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS", help="per-request limit")
    parser.add_argument("--log-interval", type=float, default=60.0, metavar="SECONDS", help="progress line period")
    parser.set_defaults(func=run)


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)


class _LineHandler(logging.Handler):
    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        _say(self.out, f"[serve] {record.getMessage()}")


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the ``serve`` command until SIGTERM/SIGINT; returns the exit code (0 stopped cleanly, 2 bad arguments)."""
    from serving.auth import TokenSet
    from serving.server import FlussLakeServer, ServerConfig

    out = out or sys.stdout
    handler = _LineHandler(out)
    logger = logging.getLogger("serving")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # The handlers come first: the server answers (health included) as soon as it is built, and a SIGTERM from
    # then on must drain, not kill.
    stop = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        config = ServerConfig(
            store=args.store,
            storage_options=args.storage_options,
            local_dir=args.local_dir,
            host=args.host,
            port=args.port,
            tokens=TokenSet.load(args.tokens),
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            max_request_bytes=int(args.max_request_mb * (1 << 20)),
            max_request_rows=args.max_request_rows,
            request_timeout_s=args.request_timeout,
            log_table=args.log_table,
            http_port=args.http_port,
            socket_port=None if args.no_socket_lane else args.socket_port,
            feature_views=args.feature_views,
            log_interval_s=args.log_interval,
        )
        server = FlussLakeServer(config)
        if config.log_table:
            from fluss_lake.metadata.table_path import TablePath
            from fluss_lake.training import create_feature_log

            server.connection.create_database(TablePath.of(config.log_table).database, ignore_if_exists=True)
            create_feature_log(server.connection, config.log_table)
    except FlussLakeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        logger.removeHandler(handler)
        for sig, old in previous.items():
            signal.signal(sig, old)
        return 2
    auth = f"{len(config.tokens.tokens)} token(s)" if config.tokens else "no authentication (loopback)"
    http = f", http://{config.host}:{server.http.port}/get-online-features" if server.http is not None else ""
    if server.lane is not None:
        http += f", socket lane on port {server.lane.port}"
    _say(out, f"serving {server.connection.url} on {server.location}{http} ({auth}; pid {os.getpid()})")
    try:
        while not stop.wait(0.2):
            pass
        _say(out, f"draining {server.metrics.snapshot()['in_flight']} request(s) in flight, then stopping")
        server.stop()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        logger.removeHandler(handler)
    _say(out, "stopped cleanly")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m serving serve ...`` (the same command as ``fluss-lake serve``)."""
    parser = argparse.ArgumentParser(prog="python -m serving")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))
