"""A TCP proxy in front of a moto server that can make S3 stop answering at a chosen moment (shared by tests)."""

from __future__ import annotations

import re
import socket
import threading

__all__ = ["FlakyProxy"]


class FlakyProxy:
    """A TCP proxy in front of moto: ``pass``, ``refuse`` (reset), ``error503`` or ``blackhole`` (never answer).

    :meth:`arm` acts when a request matching a pattern goes by: it swallows it (the server never sees it) or,
    with ``lose_response``, forwards it and drops the answer (the server acts on it); then it switches to
    ``blackhole`` for everything else, or stays in ``pass`` so that only that one answer is lost.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode = "pass"
        self.trigger: tuple[re.Pattern[bytes], bool, str] | None = None
        self.triggered = threading.Event()
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()
        self.closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, pattern: bytes, *, lose_response: bool, then: str = "blackhole") -> None:
        """On the first request matching `pattern`: swallow it (or forward it and lose its answer), then `then`."""
        with self.lock:
            self.triggered.clear()
            self.trigger = (re.compile(pattern), lose_response, then)

    def set_mode(self, mode: str) -> None:
        with self.lock:
            self.mode = mode
            self.trigger = None
            if mode == "pass":  # drop every held connection; clients open new ones
                for sock in list(self.sockets):
                    self._close(sock)

    def close(self) -> None:
        self.closed = True
        self._close(self.listener)
        with self.lock:
            for sock in list(self.sockets):
                self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        self.sockets.discard(sock)
        try:
            sock.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                self._serve(client)
            except Exception:  # noqa: BLE001 - a broken client must not kill the proxy
                self._close(client)

    def _serve(self, client: socket.socket) -> None:
        with self.lock:
            mode = self.mode
            self.sockets.add(client)
        if mode == "refuse":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, (1).to_bytes(4, "little") + bytes(4))
            self._close(client)
            return
        if mode == "blackhole":
            return  # held open, never read, never answered
        if mode == "error503":
            threading.Thread(target=self._answer_503, args=(client,), daemon=True).start()
            return
        upstream = socket.create_connection(self.upstream, timeout=5)
        upstream.settimeout(None)
        with self.lock:
            self.sockets.add(upstream)
        state = {"lose": False, "held": False}
        threading.Thread(target=self._pump_up, args=(client, upstream, state), daemon=True).start()
        threading.Thread(target=self._pump_down, args=(upstream, client, state), daemon=True).start()

    def _answer_503(self, client: socket.socket) -> None:
        try:
            client.settimeout(5)
            client.recv(65536)
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass
        finally:
            self._close(client)

    def _pump_up(self, client: socket.socket, upstream: socket.socket, state: dict[str, bool]) -> None:
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                with self.lock:
                    if self.trigger is not None and self.trigger[0].search(data):
                        state["lose"] = self.trigger[1]
                        state["held"] = not self.trigger[1]
                        self.mode = self.trigger[2]
                        self.trigger = None
                        self.triggered.set()
                    elif self.mode != "pass" and not state["lose"]:
                        state["held"] = True
                if state["held"]:
                    continue  # swallowed: the server never sees it
                upstream.sendall(data)
        except OSError:
            pass

    def _pump_down(self, upstream: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if state["lose"] or state["held"]:
                    continue  # the answer is lost
                client.sendall(data)
        except OSError:
            pass
        finally:
            if not (state["lose"] or state["held"]):
                self._close(client)
            self._close(upstream)
