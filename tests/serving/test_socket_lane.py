"""The socket lane (small lookups and online features over a kept-open TCP connection) gives the Flight answers and
errors, keeps the tokens and limits, survives bad frames, falls back to Flight when it cannot be reached, retries a
read on a connection the server closed, and drains on stop. Real server, real sockets."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import fluss_lake as fl
import serving
from fluss_lake.training import FeatureView, online_features
from serving import lane as lane_module
from serving.protocol import encode_command, error_from_info, read_ipc
from tests.serving.conftest import OTHER, READER, TOKENS

_REQUEST, _ANSWER = struct.Struct(">I"), struct.Struct(">BI")


class RawLane:
    """A hand-driven lane connection: frames exactly as written, answers as (status, payload)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, body: bytes, *, size: int | None = None) -> None:
        self.sock.sendall(_REQUEST.pack(len(body) if size is None else size) + body)

    def answer(self) -> tuple[int, bytes]:
        head = self._exact(_ANSWER.size)
        status, size = _ANSWER.unpack(head)
        return status, self._exact(size)

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = self.sock.recv(n - len(data))
            if not more:
                raise ConnectionError("closed")
            data += more
        return data

    def hello(self, token: str | None = None) -> tuple[int, bytes]:
        self.send(json.dumps({"lane": 1, "token": token}).encode())
        return self.answer()

    def close(self) -> None:
        self.sock.close()


def _lookup_body(table: str, key: dict) -> bytes:
    return encode_command("lookup", table=table, with_found=True, key=key) + b"\n"


def _error(payload: bytes) -> fl.FlussLakeError:
    exc = error_from_info(payload)
    assert exc is not None, payload
    return exc


def test_the_client_uses_the_lane_the_server_offers(server, conn):
    port = server.lane.port
    with serving.connect(server.location) as client:
        assert client.health()["socket_port"] == port
        table = client.get_table("shop.customer")
        assert table.lookup_one({"id": 2}) == {"id": 2, "tier": "gold", "score": 0.5}
        assert client._lane is not None
        assert_frame_equal(table.lookup(pl.DataFrame({"id": [3, 1, 7]}), with_found=True),
                           conn.get_table("shop.customer").lookup(pl.DataFrame({"id": [3, 1, 7]}), with_found=True))
    lookups = server.metrics.snapshot()["tables"]["shop.customer"]["lookup"]
    assert lookups["requests"] == 2 and lookups["rows_in"] == 4  # the lane's requests are counted as Flight's are
    with serving.connect(server.location, socket_lane=False) as client:
        assert client.get_table("shop.customer").lookup_one({"id": 2})["tier"] == "gold"
        assert client._lane is None


def test_a_server_without_a_lane_serves_everything_over_flight(conn):
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0, socket_port=None), connection=conn)
    try:
        assert srv.lane is None
        with serving.connect(srv.location) as client:
            assert client.health()["socket_port"] is None
            assert client.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"
            assert client._lane is None
    finally:
        srv.stop()
    with pytest.raises(fl.InvalidConfigError, match="socket_port"):
        serving.ServerConfig(port=0, socket_port=-1).check()


def test_an_unreachable_lane_falls_back_to_flight(server, monkeypatch):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead_port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    real_health = serving.RemoteConnection.health
    monkeypatch.setattr(serving.RemoteConnection, "health", lambda self: {**real_health(self), "socket_port": dead_port})
    with serving.connect(server.location) as client:
        assert client.get_table("shop.customer").lookup_one({"id": 3})["tier"] == "bronze"  # answered by Flight
        assert client._lane is None  # given up for this connection
        assert client.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"


def test_tokens_are_checked_on_the_lane(secured, conn):
    port = secured.lane.port
    raw = RawLane(port)
    try:
        status, payload = raw.hello("not-a-token")
        assert status == 1 and isinstance(_error(payload), serving.AuthenticationError)
        with pytest.raises(ConnectionError):  # refused connections are closed
            raw.hello(READER)
    finally:
        raw.close()
    anonymous = RawLane(port)
    try:
        assert anonymous.hello(None) == (0, b"")
        anonymous.send(_lookup_body("shop.customer", {"id": 1}))
        status, payload = anonymous.answer()
        assert status == 1 and "needs a bearer token" in str(_error(payload))
    finally:
        anonymous.close()
    with serving.connect(secured.location, token=OTHER) as other, pytest.raises(serving.PermissionDeniedError):
        other.get_table("shop.customer").lookup_one({"id": 1})
    with serving.connect(secured.location, token="wrong") as wrong:
        wrong._lane_known, wrong._lane = True, lane_module.LaneClient(
            "127.0.0.1", port, token="wrong", timeout=10, error=lambda p: _error(bytes(p)))
        with pytest.raises(serving.AuthenticationError, match="unknown bearer token"):
            wrong._unary("lookup", _lookup_body("shop.customer", {"id": 1}))
    with serving.connect(secured.location, token=READER) as reader:
        assert reader.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"
        assert reader._lane is not None


def test_bad_frames_are_refused_and_the_connection_keeps_serving(conn):
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0, max_request_bytes=4096, max_command_bytes=1024),
                                  connection=conn)
    raw = RawLane(srv.lane.port)
    try:
        assert raw.hello() == (0, b"")
        raw.send(b"x" * 6000)  # over the frame limit: read past, refused, the connection stays usable
        status, payload = raw.answer()
        assert status == 1 and isinstance(_error(payload), serving.RequestTooLargeError)
        for body, error in [
            (b"{not json\n", serving.MalformedRequestError),
            (encode_command("append", table="shop.payments") + b"\n", serving.MalformedRequestError),  # no writes
            (encode_command("lookup", table="shop.nope", key={"id": 1}) + b"\n", fl.TableNotExistError),
            (encode_command("lookup", table="../etc", key={"id": 1}) + b"\n", fl.FlussLakeError),
            (encode_command("lookup", table="shop.customer") + b"\nnot arrow", serving.MalformedRequestError),
        ]:
            raw.send(body)
            status, payload = raw.answer()
            assert status == 1 and isinstance(_error(payload), error), payload
        raw.send(_lookup_body("shop.customer", {"id": 3}))
        status, payload = raw.answer()
        assert status == 0 and read_ipc(payload).to_dicts() == [
            {"id": 3, "tier": "bronze", "score": 0.1, "_found": True}]
        assert conn.get_table("shop.payments").scan_log().height == 0  # nothing was written
    finally:
        raw.close()
        srv.stop()


def test_a_bad_hello_and_a_stalled_frame_close_the_connection(conn):
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0, request_timeout_s=0.3), connection=conn)
    try:
        raw = RawLane(srv.lane.port)
        raw.send(b'{"lane": 99}')
        status, payload = raw.answer()
        assert status == 1 and "hello" in str(_error(payload))
        with pytest.raises(ConnectionError):
            raw.answer()
        raw.close()
        stalled = RawLane(srv.lane.port)
        assert stalled.hello() == (0, b"")
        stalled.send(b"{", size=100)  # a frame that never arrives whole
        time.sleep(0.8)
        with pytest.raises((ConnectionError, OSError)):
            stalled.send(b"x" * 99)
            stalled.answer()
        stalled.close()
        with serving.connect(srv.location) as client:  # the server still serves
            assert client.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"
    finally:
        srv.stop()


def test_the_connection_limit_is_kept(server, monkeypatch):
    monkeypatch.setattr(lane_module, "MAX_CONNECTIONS", 1)
    first = RawLane(server.lane.port)
    try:
        assert first.hello() == (0, b"")
        second = RawLane(server.lane.port)
        status, payload = second.answer()  # refused at once, before any hello
        assert status == 1 and isinstance(_error(payload), serving.ServerUnavailableError)
        second.close()
    finally:
        first.close()


def test_a_read_is_retried_on_a_connection_the_server_closed(server):
    with serving.connect(server.location) as client:
        table = client.get_table("shop.customer")
        assert table.lookup_one({"id": 1})["tier"] == "gold"
        done = threading.Event()

        def close_all() -> None:
            for c in list(server.lane.connections):
                c.close()
            done.set()

        server.lane._loop.call_soon_threadsafe(close_all)
        assert done.wait(5)
        time.sleep(0.05)
        assert table.lookup_one({"id": 2})["tier"] == "gold"  # the kept connection was closed: sent again


def test_stop_answers_the_requests_in_flight(conn, monkeypatch):
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0), connection=conn)
    real = srv.serve_features
    started = threading.Event()

    def slow(*args, **kwargs):
        started.set()
        time.sleep(0.4)
        return real(*args, **kwargs)

    monkeypatch.setattr(srv, "serve_features", slow)
    client = serving.connect(srv.location)
    view = FeatureView.from_table(client.get_table("shop.customer"), entity_keys=["id"], features=["tier"])
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.online_features, {"id": [1, 2]}, view)
        assert started.wait(5)
        srv.stop()
        assert pending.result(10)["tier"].to_list() == ["gold", "gold"]
    client.close()


def test_concurrent_online_features_share_a_call_and_a_bad_one_gets_its_own_error(conn, server, monkeypatch):
    # Deterministic overlap (no sleeps): every client first opens its lane connection, then all send at once, and the first
    # call the server makes holds its loop (a local store answers on the loop thread) until every online-features
    # request has been sent, so the rest queue behind it and are read in one pass.
    real = server.serve_features
    calls = []
    sets = [[1, 2], [3], [2, 99], [1], [3, 3, 1]]
    ready = threading.Barrier(len(sets) + 1)
    sent: list[int] = []
    all_sent = threading.Event()
    real_send = lane_module.LaneClient._send

    class Signalling:
        def __init__(self, sock):
            self._sock = sock

        def sendall(self, data):
            self._sock.sendall(data)
            if b"online_features" in data:
                sent.append(1)
                if len(sent) >= len(sets) + 1:
                    all_sent.set()

        def __getattr__(self, name):
            return getattr(self._sock, name)

    monkeypatch.setattr(lane_module.LaneClient, "_send", staticmethod(lambda sock, body: real_send(Signalling(sock), body)))

    def slow(entities, *args, **kwargs):
        calls.append(entities.height)
        all_sent.wait(10)
        return real(entities, *args, **kwargs)

    monkeypatch.setattr(server, "serve_features", slow)
    local = FeatureView.from_table(conn.get_table("shop.customer"), entity_keys=["id"], features=["tier", "score"])

    def ask(ids):
        with serving.connect(server.location) as client:
            table = client.get_table("shop.customer")
            view = FeatureView.from_table(table, entity_keys=["id"], features=["tier", "score"])
            assert table.lookup_one({"id": 1}) is not None  # opens the lane connection (its hello needs the loop)
            ready.wait(10)
            if ids is None:  # a view of a table the server does not have: refused by the server
                command = encode_command("online_features", views=[{**view.definition(), "table": "shop.gone"}])
                return client._exchange("online_features", command, pl.DataFrame({"id": [1]}).to_arrow())
            return client.online_features({"id": ids}, view)

    with ThreadPoolExecutor(len(sets) + 1) as pool:
        futures = [pool.submit(ask, ids) for ids in [*sets, None]]
        for ids, future in zip(sets, futures, strict=False):
            assert_frame_equal(future.result(10), online_features({"id": ids}, local))
        with pytest.raises(fl.TableNotExistError, match="shop.gone"):
            futures[-1].result(10)
    assert all_sent.is_set() and server._coalescer.batches >= 1 and len(calls) < len(sets)


def conn_table_answer(server):
    return server.connection.get_table("shop.customer").lookup(pl.DataFrame({"id": list(range(20_000))}),
                                                               with_found=True).to_arrow()


def test_a_client_that_does_not_read_its_answers_is_not_read_from(server):
    raw = RawLane(server.lane.port)
    try:
        assert raw.hello() == (0, b"")
        keys = pl.DataFrame({"id": list(range(20_000))}).to_arrow()
        from serving.protocol import encode_unary

        body = encode_unary(encode_command("lookup", table="shop.customer", with_found=True), keys)
        raw.sock.settimeout(0.5)
        sent = 0
        with pytest.raises(TimeoutError):  # the server stops reading once the unread answers fill its buffers
            for _ in range(10_000):
                raw.send(body)
                sent += 1
        assert 0 < sent < 10_000
        time.sleep(1.0)  # let the server answer all it has read
        buffered = max(c.transport.get_write_buffer_size() for c in list(server.lane.connections))
        one_answer = len(encode_unary(b"", conn_table_answer(server)))
        assert buffered <= 3 * one_answer, (buffered, one_answer)  # not every request the kernel held
        raw.sock.settimeout(30)
        status, payload = raw.answer()  # reading again lets it go on
        assert status == 0 and read_ipc(payload).height == 20_000
    finally:
        raw.close()
    with serving.connect(server.location) as client:
        assert client.get_table("shop.customer").lookup_one({"id": 1})["tier"] == "gold"


def test_a_store_on_s3_is_served_by_a_pool_and_answers_stay_in_order(s3_url, tmp_path):
    url, options = s3_url  # moto's server on 127.0.0.1: each lookup waits on the network, so passes overlap
    store = fl.connect(url, storage_options=options, local_dir=str(tmp_path / "cache"))
    store.create_database("shop")
    store.create_table("shop.customer", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"],
                       bucket_num=2)
    local = store.get_table("shop.customer")
    local.upsert([{"id": i, "tier": f"t{i}"} for i in range(40)])
    srv = serving.FlussLakeServer(serving.ServerConfig(port=0), connection=store)
    try:
        assert srv.lane._pool is not None

        def ask(i: int) -> list:
            with serving.connect(srv.location) as client:
                table = client.get_table("shop.customer")
                return [table.lookup_one({"id": (i + j) % 45}) for j in range(10)]

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(ask, range(6)))
        for i, rows in enumerate(answers):
            assert rows == [local.lookup_one({"id": (i + j) % 45}) for j in range(10)]
        raw = RawLane(srv.lane.port)  # three frames sent at once: three answers, in order
        try:
            assert raw.hello() == (0, b"")
            raw.sock.sendall(b"".join(_REQUEST.pack(len(b)) + b for b in (
                _lookup_body("shop.customer", {"id": k}) for k in (3, 41, 7))))
            got = [read_ipc(raw.answer()[1]).to_dicts()[0] for _ in range(3)]
            assert [(r["id"], r["_found"]) for r in got] == [(3, True), (41, False), (7, True)]
        finally:
            raw.close()
    finally:
        srv.stop()


def test_logged_requests_answered_together_share_one_log_append(conn, server, monkeypatch):
    from fluss_lake.training import served_features

    import serving.server as server_module

    real, appends = server.serve_features, []
    real_many = server_module.log_served_many

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    def counted(log, answers):
        appends.append([request_id for _, request_id in answers])
        return real_many(log, answers)

    monkeypatch.setattr(server, "serve_features", slow)
    monkeypatch.setattr(server_module, "log_served_many", counted)
    local = FeatureView.from_table(conn.get_table("shop.customer"), entity_keys=["id"], features=["tier"])
    sets = {f"r{i}": ids for i, ids in enumerate([[1], [2, 3], [3], [1, 2], [99]])}

    def ask(request_id):
        with serving.connect(server.location) as client:
            view = FeatureView.from_table(client.get_table("shop.customer"), entity_keys=["id"], features=["tier"])
            return client.online_features({"id": sets[request_id]}, view, log="audit.served", request_id=request_id)

    with ThreadPoolExecutor(len(sets)) as pool:
        answers = dict(zip(sets, pool.map(ask, sets), strict=True))
    for request_id, ids in sets.items():
        assert_frame_equal(answers[request_id], online_features({"id": ids}, local))
    logged = served_features(conn.get_table("audit.served"))
    for request_id, ids in sets.items():  # every request logged once, under its own id, with what it was served
        mine = logged.filter(pl.col("request_id") == request_id).sort("row")
        assert mine.get_column("id").to_list() == ids
        assert mine.get_column("tier").to_list() == answers[request_id]["tier"].to_list()
    assert appends and any(len(ids) > 1 for ids in appends)  # requests answered together: one append
    assert {r for ids in appends for r in ids} <= set(sets)  # each under its own id


def test_a_failed_shared_log_append_fails_each_request_it_would_have_logged(conn, server, monkeypatch):
    from fluss_lake.training import served_features

    import serving.server as server_module

    real, shared = server.serve_features, []

    def slow(*args, **kwargs):
        time.sleep(0.05)
        return real(*args, **kwargs)

    def broken(log, answers):
        shared.extend(request_id for _, request_id in answers)
        raise fl.StorageError("the log's storage refused the write")

    monkeypatch.setattr(server, "serve_features", slow)
    monkeypatch.setattr(server_module, "log_served_many", broken)

    def ask(request_id):
        with serving.connect(server.location) as client:
            view = FeatureView.from_table(client.get_table("shop.customer"), entity_keys=["id"], features=["tier"])
            return client.online_features({"id": [1, 2]}, view, log="audit.served", request_id=request_id)

    ids = [f"q{i}" for i in range(5)]
    outcomes = {}
    with ThreadPoolExecutor(len(ids)) as pool:
        for request_id, future in zip(ids, [pool.submit(ask, r) for r in ids], strict=True):
            try:
                outcomes[request_id] = future.result(10)
            except fl.FlussLakeError as exc:
                outcomes[request_id] = exc
    logged = set(served_features(conn.get_table("audit.served")).get_column("request_id").to_list())
    assert shared  # some requests were answered together
    for request_id in ids:
        if request_id in shared:  # its shared append failed: the call failed, nothing of it logged
            assert isinstance(outcomes[request_id], fl.StorageError) and request_id not in logged
        else:  # answered alone: logged by its own call
            assert not isinstance(outcomes[request_id], BaseException) and request_id in logged


def test_the_views_of_a_request_are_rebuilt_when_their_table_is(conn, server, tmp_path, clock):
    """A request's views are kept by their definitions' JSON, and rebuilt once the server serves another table object
    under that name, so answers follow the served table, never a stale view."""
    from serving.server import _LaneContext, _Caller

    customer = conn.get_table("shop.customer")
    view = FeatureView.from_table(customer, features=["tier"], prefix="c__")
    command = {"verb": "online_features", "views": [view.definition()]}
    context = _LaneContext(_Caller(None))
    first = server._online_views(context, command)
    assert server._online_views(context, command) is first  # kept: no view rebuilt per request
    path = str(customer.path)
    conn.alter_table(path, add_columns={"extra": "BIGINT"})
    reopened = fl.connect(str(tmp_path / "store"), clock=clock).get_table(path)  # another Table object
    server._tables[path] = (reopened, time.monotonic())
    renewed = server._online_views(context, command)
    assert renewed is not first and renewed[0].table is reopened
    with serving.connect(server.location) as client:
        served = FeatureView.from_table(client.get_table(path), features=["tier", "extra"], prefix="c__")
        got = client.online_features(pl.DataFrame({"id": [3, 99]}), [served])
    assert got["c__tier"].to_list() == ["bronze", None] and got["c__extra"].to_list() == [None, None]


def test_a_pass_of_mergeable_requests_waits_for_the_connections_about_to_send_theirs(monkeypatch):
    """Connections that sent a mergeable request recently and have none in work hold a pass of mergeable requests
    until they have sent theirs (then one `answer` call gets all of them); a lone connection, or any other request,
    is answered without waiting. The wait limit is set to an hour: a pass held wrongly fails by the socket timeout."""
    monkeypatch.setattr(lane_module, "MERGE_WINDOW_S", 3600.0)
    monkeypatch.setattr(lane_module, "MERGE_WAIT_S", 3600.0)
    passes: list[list[bytes]] = []

    def answer(items):
        passes.append([body for _, body in items])
        return [b"re:" + body for _, body in items]

    server = lane_module.LaneServer(host="127.0.0.1", port=0, authenticate=lambda token: None, answer=answer,
                                    max_frame_bytes=1 << 16, timeout_s=30.0,
                                    mergeable=lambda body: body.startswith(b"m"))
    a, b = RawLane(server.port), RawLane(server.port)
    try:
        assert a.hello() == (0, b"") and b.hello() == (0, b"")
        a.send(b"m-a1")  # alone: no other connection has sent a mergeable request yet
        assert a.answer() == (0, b"re:m-a1")
        b.send(b"m-b1")  # a sent one and has none in work: b's pass waits for a's next
        a.send(b"m-a2")
        assert a.answer() == (0, b"re:m-a2") and b.answer() == (0, b"re:m-b1")
        assert sorted(passes[-1]) == [b"m-a2", b"m-b1"]  # one pass for both
        a.send(b"m-a3")  # waits for b ...
        b.send(b"lookup-b")  # ... whose request cannot share the call: the pass goes at once, with both
        assert a.answer() == (0, b"re:m-a3") and b.answer() == (0, b"re:lookup-b")
        assert sorted(passes[-1]) == [b"lookup-b", b"m-a3"]
        b.close()  # a connection that left is not waited for
        deadline = time.monotonic() + 10
        while len(server.connections) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        a.send(b"m-a4")
        assert a.answer() == (0, b"re:m-a4") and passes[-1] == [b"m-a4"]
        a.send(b"x-a5")  # never held
        assert a.answer() == (0, b"re:x-a5")
    finally:
        a.close()
        b.close()
        server.stop(drain_s=1)
