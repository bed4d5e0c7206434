"""The socket lane: small lookups and online-feature requests over a plain TCP (or TLS) connection.

A Flight call costs a Python client and server about 0.3 ms of CPU each before any work (gRPC's machinery and its
thread handoffs; ``bench.serving`` reports this floor), which is most of a one-key lookup. The server therefore
also listens on a second port (``ServerConfig.socket_port``; its number is in the ``health`` answer) where the
small exchange verbs (``lookup``, ``prefix_lookup``, ``online_features`` up to
:data:`~serving.protocol.UNARY_MAX_BYTES`) travel as length-prefixed frames on a kept-open connection, with the
same bodies, answers, tokens, limits, metrics and errors as the Flight actions. The client uses it when the server
offers it; everything else stays on Flight.

Frames: ``<u32 length><body>`` from the client, ``<u8 status><u32 length><payload>`` back (status 0: the answer,
Arrow IPC; 1: an error, the JSON of :func:`~serving.protocol.to_flight_error`'s ``extra_info``). The first frame
of a connection is a hello, ``{"lane": 1, "token": ...}``, answered by a status frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
import struct
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from fluss_lake.exceptions import FlussLakeError
from serving.errors import MalformedRequestError, RequestTooLargeError, ServerUnavailableError

__all__ = ["LaneClient", "LaneServer", "LaneUnreachableError", "LANE_VERSION"]

_log = logging.getLogger("serving")
LANE_VERSION: Final = 1
_REQUEST: Final = struct.Struct(">I")
_ANSWER: Final = struct.Struct(">BI")
_OK, _ERROR = 0, 1
#: Connections one server keeps open at once; more are answered with an error and closed.
MAX_CONNECTIONS: Final = 256
#: A connection that sent a mergeable request this recently is expected to send another (LaneServer._hold).
MERGE_WINDOW_S: Final = 0.005
#: The longest a pass of mergeable requests waits for the expected ones.
MERGE_WAIT_S: Final = 0.0005


class _Closed(Exception):
    """The peer closed the connection between frames."""


class LaneUnreachableError(ServerUnavailableError):
    """No lane connection could be opened (a firewall, a proxy that passes only gRPC): use Flight instead."""


def _read_exact(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise _Closed
        got += n
    return buffer


def _error_payload(exc: FlussLakeError) -> bytes:
    return json.dumps({"class": type(exc).__name__, "message": str(exc), "retriable": bool(exc.retriable)}).encode()


# ---------------------------------------------------------------------------------------------------- server
class LaneServer:
    """Accepts lane connections and answers their frames with ``answer([(caller, body), ...])``.

    `authenticate(token)` returns the caller object handed to `answer` (raising
    :class:`~serving.errors.AuthenticationError` for an unknown token). `answer` gets every request the loop read
    in one pass (so it may answer several with one call) and returns, in order, each answer's bytes or the
    exception to send: a :class:`~fluss_lake.FlussLakeError`, or a Flight error whose ``extra_info`` is sent as
    is. One event-loop thread reads every connection and answers in arrival order: a one-key request costs tens
    of microseconds, and threads answering them at once would spend more than that trading the interpreter lock.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        authenticate: Callable[[str | None], Any],
        answer: Callable[[list[tuple[Any, bytes]]], list[bytes | BaseException]],
        max_frame_bytes: int,
        timeout_s: float,
        tls: ssl.SSLContext | None = None,
        threads: int = 0,
        mergeable: Callable[[bytes], bool] | None = None,
    ) -> None:
        self._authenticate = authenticate
        # requests `answer` may answer with one call (online features): a pass of only those waits a moment for
        # the connections that sent one just before and are about to send the next (see _hold)
        self._mergeable = mergeable
        self._held: asyncio.TimerHandle | None = None
        self._expected: set[_Connection] = set()
        self._all_mergeable = True
        self._answer = answer
        # threads > 0: passes are answered on a pool (a store on object storage waits on the network per lookup:
        # those waits overlap); 0: on the loop thread itself (a local store: nothing to wait for)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="serving-lane-work") if threads else None
        self._running = 0
        self.max_frame = max_frame_bytes
        self.timeout_s = timeout_s
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(128)
        except OSError:
            listener.close()
            raise
        self.port: int = listener.getsockname()[1]
        self.connections: set[_Connection] = set()
        self._pending: list[tuple[_Connection, bytes]] = []
        self._scheduled = False
        self._stopping = False
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            self._loop.create_server(
                lambda: _Connection(self), sock=listener, ssl=tls, ssl_handshake_timeout=timeout_s if tls else None
            )
        )
        self._thread = threading.Thread(target=self._loop.run_forever, name="serving-lane", daemon=True)
        self._thread.start()

    def stop(self, *, drain_s: float = 30.0) -> None:
        """Accept nothing more, answer the requests already received, close every connection."""
        if self._stopping:
            return
        self._stopping = True
        done = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            done.result(timeout=drain_s + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        while self._pending or self._scheduled or self._running:  # answered by _drain between these sleeps
            await asyncio.sleep(0.001)
        for conn in list(self.connections):
            conn.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    # ---- called on the loop thread
    def hello(self, body: bytes) -> Any:
        """The caller a connection's first frame names (raises the library error that refuses it)."""
        try:
            hello = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            hello = None
        if not isinstance(hello, dict) or hello.get("lane") != LANE_VERSION:
            raise MalformedRequestError(f"a lane connection starts with a hello frame of version {LANE_VERSION}")
        token = hello.get("token")
        return self._authenticate(token if isinstance(token, str) else None)

    def submit(self, conn: _Connection, body: bytes) -> None:
        """Queue a request; the queue is answered once the loop has read every connection that is ready. A request
        no other can share (a lookup), with nothing queued or held, is answered at once: a second pass of the loop
        would only add its wake-up (an ``epoll_wait`` and the loop's bookkeeping, ~15 % of a one-key request)."""
        mergeable = self._mergeable(body) if self._mergeable is not None else True
        if self._pool is None and not mergeable and not self._pending and self._held is None:
            self._deliver([(conn, body)], self._answers([(conn.caller, body)]))
            return
        self._pending.append((conn, body))
        if self._mergeable is not None:
            if mergeable:
                conn.merged_at = self._loop.time()
            else:
                self._all_mergeable = False
        if self._held is not None:  # a pass waits for requests about to come: go once they are all here
            self._expected.discard(conn)
            if not self._expected or not self._all_mergeable:
                self._held.cancel()
                self._held = None
                self._loop.call_soon(self._drain, True)
            return
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def _hold(self) -> bool:
        """Whether to hold this pass for a moment: every request in it can share one call, and other connections
        sent such a request within the last :data:`MERGE_WINDOW_S` and have none in work now (their next one is
        on its way: a client turns an answer around in ~0.1-0.2 ms, while one call for 4 requests costs little
        more than for one). The pass goes when they have all sent theirs, at the latest after
        :data:`MERGE_WAIT_S`; any other request sends it at once."""
        if self._mergeable is None or not self._all_mergeable or self._stopping:
            return False
        now = self._loop.time()
        expected = {c for c in self.connections if not c.busy and now - c.merged_at < MERGE_WINDOW_S}
        if not expected:
            return False
        self._expected = expected
        self._held = self._loop.call_later(MERGE_WAIT_S, self._drain, True)
        return True

    def _drain(self, held: bool = False) -> None:
        if not held and self._hold():
            return
        self._held = None
        self._expected = set()
        self._all_mergeable = True
        pending, self._pending = self._pending, []
        self._scheduled = False
        items = [(conn.caller, body) for conn, body in pending]
        if self._pool is None:
            self._deliver(pending, self._answers(items))
            return
        self._running += 1
        future = self._pool.submit(self._answers, items)
        future.add_done_callback(lambda done: self._loop.call_soon_threadsafe(self._finish, pending, done))

    def _finish(self, pending: list[tuple[_Connection, bytes]], done: Future[list[bytes | BaseException]]) -> None:
        self._running -= 1
        self._deliver(pending, done.result())

    def _answers(self, items: list[tuple[Any, bytes]]) -> list[bytes | BaseException]:
        try:
            return self._answer(items)
        except Exception as exc:  # noqa: BLE001 - every request of the pass gets the error
            return [exc] * len(items)

    def _deliver(self, pending: list[tuple[_Connection, bytes]], answers: list[bytes | BaseException]) -> None:
        for (conn, _), answer in zip(pending, answers, strict=True):
            if isinstance(answer, bytes | bytearray):
                conn.send(_OK, answer)
            elif isinstance(answer, FlussLakeError):
                conn.send(_ERROR, _error_payload(answer))
            else:
                info = getattr(answer, "extra_info", None)
                conn.send(_ERROR, bytes(info) if info else _error_payload(ServerUnavailableError(str(answer))))
            conn.busy = False
            conn.next_request()


class _Connection(asyncio.Protocol):
    """One lane connection: splits the byte stream into frames (the size checked before a body is kept)."""

    def __init__(self, lane: LaneServer) -> None:
        self.lane = lane
        self.caller: Any = None
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._greeted = False
        self._skip = 0  # bytes of an oversized frame still to read past
        self._skipped = 0
        self._timer: asyncio.TimerHandle | None = None
        self.busy = False  # a request of this connection is being answered
        self.merged_at = float("-inf")  # loop time of its last mergeable request
        self.backlog: deque[bytes] = deque()
        self._stalled = False  # the client does not read its answers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.lane.connections) >= MAX_CONNECTIONS:
            self.send(_ERROR, _error_payload(ServerUnavailableError("the server is at its connection limit")))
            transport.close()
            return
        self.lane.connections.add(self)

    def pause_writing(self) -> None:  # answers pile up unread: read and answer nothing more until they drain
        self._stalled = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._stalled = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        self.next_request()

    def request(self, body: bytes) -> None:
        self.backlog.append(body)
        self.next_request()

    def next_request(self) -> None:
        """Hand the next frame to the lane, unless one is in work (a connection's answers keep their order) or
        its answers are not being read."""
        if self.backlog and not self.busy and not self._stalled:
            self.busy = True
            self.lane.submit(self, self.backlog.popleft())

    def connection_lost(self, exc: Exception | None) -> None:
        self.lane.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def send(self, status: int, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_ANSWER.pack(status, len(payload)) + payload)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while True:
            if self._skip:
                n = min(self._skip, len(buffer))
                del buffer[:n]
                self._skip -= n
                if self._skip:
                    break
                self._refuse_size(self._skipped)
                continue
            if len(buffer) < _REQUEST.size:
                break
            (size,) = _REQUEST.unpack_from(buffer)
            if size > self.lane.max_frame:
                del buffer[: _REQUEST.size]
                self._skip, self._skipped = size, size  # read past it, then refuse it (_refuse_size)
                continue
            end = _REQUEST.size + size
            if len(buffer) < end:
                break
            body = bytes(buffer[_REQUEST.size : end])
            del buffer[:end]
            if not self._greeted:
                try:
                    self.caller = self.lane.hello(body)
                except FlussLakeError as exc:
                    self.send(_ERROR, _error_payload(exc))
                    self.close()
                    return
                self._greeted = True
                self.send(_OK, b"")
            else:
                self.request(body)
        self._watch(bool(buffer) or bool(self._skip))

    def _refuse_size(self, size: int) -> None:
        limit = self.lane.max_frame
        exc = RequestTooLargeError(
            f"the request is {size} bytes, over the server's limit of {limit}; split it into smaller batches"
        )
        self.send(_ERROR, _error_payload(exc))

    def _watch(self, partial: bool) -> None:
        """A frame that has begun must arrive whole within the request time limit, or the connection closes."""
        if not partial:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        elif self._timer is None and self.transport is not None:
            self._timer = asyncio.get_running_loop().call_later(self.lane.timeout_s, self.close)


# ---------------------------------------------------------------------------------------------------- client
class LaneClient:
    """Kept-open lane connections to one server (one per concurrent caller, reused), sending frame bodies.

    :meth:`request` returns the answer's bytes or raises the library error the server sent; a transport failure
    raises :class:`~serving.errors.ServerUnavailableError`.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str | None,
        timeout: float | None,
        tls: ssl.SSLContext | None = None,
        error: Callable[[bytes | bytearray], Exception],
        connect_s: float = 2.0,
    ) -> None:
        self._address = (host, port)
        self._connect_s = connect_s
        self._token = token
        self._timeout = timeout
        self._tls = tls
        self._error = error
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _open(self) -> socket.socket:
        host = self._address[0]
        limit = self._connect_s if self._timeout is None else min(self._connect_s, self._timeout)
        raw = socket.create_connection(self._address, timeout=limit)
        raw.settimeout(self._timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = self._tls.wrap_socket(raw, server_hostname=host) if self._tls is not None else raw
        try:
            status, payload = self._send(conn, json.dumps({"lane": LANE_VERSION, "token": self._token}).encode())
        except _Closed:
            conn.close()
            raise OSError("the server closed the lane connection during its hello") from None
        except BaseException:
            conn.close()
            raise
        if status != _OK:
            conn.close()
            raise self._error(payload)
        return conn

    @staticmethod
    def _send(conn: socket.socket, body: bytes) -> tuple[int, bytes | bytearray]:
        conn.sendall(_REQUEST.pack(len(body)) + body)
        first = conn.recv(1 << 16)  # a small answer arrives whole: one read for the header and the payload
        while len(first) < _ANSWER.size:
            more = conn.recv(1 << 16)
            if not more:
                raise _Closed
            first += more
        status, size = _ANSWER.unpack_from(first)
        end = _ANSWER.size + size
        if len(first) >= end:
            return status, first[_ANSWER.size : end]
        rest = _read_exact(conn, end - len(first))
        return status, first[_ANSWER.size :] + rest

    def request(self, body: bytes, *, retry: bool) -> bytes | bytearray:
        """The answer to one frame body. `retry`: a read that may be sent again on a fresh connection if a kept
        connection turns out closed (a server restarted since)."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        if conn is None:
            try:
                conn = self._open()
            except (OSError, ssl.SSLError) as exc:
                raise LaneUnreachableError(f"cannot open the socket lane {self._address}: {exc!r}") from None
        try:
            status, payload = self._send(conn, body)
        except (_Closed, OSError, ssl.SSLError) as exc:
            conn.close()
            if reused and retry:
                return self.request(body, retry=False)
            raise ServerUnavailableError(f"the server's socket lane {self._address} did not answer: {exc!r}") from None
        with self._lock:
            self._idle.append(conn)
        if status != _OK:
            raise self._error(payload)
        return payload
