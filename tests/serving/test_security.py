"""Every refusal is clear, writes nothing, and leaves the server serving: no token, a wrong token, a read token
writing, a token for another table, oversized and malformed requests, table names with '..' or '/', a request
over the time limit, binding beyond loopback without tokens; and TLS with a given certificate."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import fluss_lake as fl
import serving
from serving.protocol import from_flight_error
from tests.serving.conftest import OTHER, READER, WRITER


def _still_serving(server, conn) -> None:
    with serving.connect(server.location, token=READER) as client:
        assert client.health()["status"] == "ok"
        assert client.get_table("shop.customer").lookup([{"id": 1}])["tier"].to_list() == ["gold"]
    assert conn.get_table("shop.payments").scan_log().height == 0  # nothing was written


def _payment(i: int = 1) -> list[dict]:
    return [{"payment_id": i, "customer_id": 1, "amount": 1.0}]


def test_tokens_and_scopes(secured, conn):
    url = secured.location
    with serving.connect(url) as anonymous:
        assert anonymous.health()["status"] == "ok"  # liveness needs no token
        with pytest.raises(serving.AuthenticationError, match="needs a bearer token"):
            anonymous.list_databases()
        with pytest.raises(serving.AuthenticationError):
            anonymous.get_table("shop.customer")
    with serving.connect(url, token="not-a-token-at-all") as wrong, \
            pytest.raises(serving.AuthenticationError, match="unknown bearer token"):
        wrong.health()
    with serving.connect(url, token=READER) as reader:
        payments = reader.get_table("shop.payments")
        with pytest.raises(serving.PermissionDeniedError, match="may only read"):
            payments.append(_payment())
        with pytest.raises(serving.PermissionDeniedError, match="does not cover table 'other.secret'"):
            reader.get_table("other.secret")
        assert reader.list_databases() == ["shop"]  # only what the token reaches
    with serving.connect(url, token=OTHER) as other, pytest.raises(serving.PermissionDeniedError):
        other.get_table("shop.customer").lookup([{"id": 1}])
    with serving.connect(url, token=WRITER) as writer:
        assert writer.get_table("shop.payments").append(_payment()).rows == 1
    assert conn.get_table("shop.payments").scan_log().height == 1
    with serving.connect(url, token=READER) as client:
        assert client.get_table("shop.customer").lookup([{"id": 1}])["tier"].to_list() == ["gold"]


def test_online_features_check_every_view_and_the_log(secured):
    from fluss_lake.training import FeatureView, online_features

    with serving.connect(secured.location, token=READER) as reader:
        view = FeatureView.from_table(reader.get_table("shop.customer"))
        assert online_features({"id": [1]}, view)["tier"].to_list() == ["gold"]
        with pytest.raises(serving.PermissionDeniedError, match="audit.served"):
            online_features({"id": [1]}, view, log="audit.served")


def test_bad_requests_are_refused_and_nothing_is_written(secured, conn):
    client = flight.FlightClient(secured.location)
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {WRITER}".encode())])

    def put(command: bytes, data: pa.Table) -> None:
        try:
            writer, meta = client.do_put(flight.FlightDescriptor.for_command(command), data.schema, options)
            writer.write_table(data)
            writer.done_writing()
            meta.read()
            writer.close()
        except flight.FlightError as exc:
            raise from_flight_error(exc) from None

    rows = pa.table({"payment_id": [1], "customer_id": [1], "amount": [1.0]})
    with pytest.raises(serving.MalformedRequestError, match="not valid JSON"):
        put(b"{not json", rows)
    with pytest.raises(serving.MalformedRequestError, match="unknown verb"):
        put(json.dumps({"verb": "drop_table", "table": "shop.payments"}).encode(), rows)
    with pytest.raises(serving.MalformedRequestError, match="name a table"):
        put(json.dumps({"verb": "append", "table": 7}).encode(), rows)
    for name in ("shop..payments", "shop/payments", "../etc.passwd", "shop.pay/../ments"):
        with pytest.raises(fl.InvalidNameError):
            put(json.dumps({"verb": "append", "table": name}).encode(), rows)
    with pytest.raises(serving.RequestTooLargeError, match="command"):
        put(json.dumps({"verb": "append", "table": "shop.payments", "pad": "x" * 70_000}).encode(), rows)
    big = pa.table({"payment_id": list(range(1001)), "customer_id": [1] * 1001, "amount": [1.0] * 1001})
    with pytest.raises(serving.RequestTooLargeError, match="split it"):  # over max_request_rows=1000
        put(json.dumps({"verb": "append", "table": "shop.payments"}).encode(), big)
    with pytest.raises(serving.MalformedRequestError, match="unknown action"):
        try:
            list(client.do_action(flight.Action("shutdown", b""), options))
        except flight.FlightError as exc:
            raise from_flight_error(exc) from None
    with serving.connect(secured.location, token=WRITER) as writer, pytest.raises(fl.SchemaMismatchError):
        writer.get_table("shop.payments").append([{"payment_id": 1, "customer_id": "one", "amount": 1.0}])
    _still_serving(secured, conn)


def test_time_limit_refuses_before_writing(conn):
    server = serving.FlussLakeServer(serving.ServerConfig(port=0, request_timeout_s=1e-9), connection=conn)
    try:
        with serving.connect(server.location) as client:
            with pytest.raises(serving.RequestTimeoutError, match="time limit"):
                client.get_table("shop.payments").append(_payment())
            with pytest.raises(serving.RequestTimeoutError):
                client.get_table("shop.customer").lookup([{"id": 1}])
            assert client.health()["status"] == "ok"
    finally:
        server.stop()
    assert conn.get_table("shop.payments").scan_log().height == 0


def test_no_bind_beyond_loopback_without_tokens(conn):
    with pytest.raises(fl.InvalidConfigError, match="beyond loopback"):
        serving.FlussLakeServer(serving.ServerConfig(host="0.0.0.0", port=0), connection=conn)
    tokens = serving.TokenSet.from_json({"tokens": [{"name": "a", "token": READER, "tables": ["*"]}]})
    server = serving.FlussLakeServer(serving.ServerConfig(host="0.0.0.0", port=0, tokens=tokens), connection=conn)
    try:
        with serving.connect(f"grpc://127.0.0.1:{server.port}", token=READER) as client:
            assert client.list_tables("shop") == ["customer", "orders", "payments"]
    finally:
        server.stop()


def test_token_files_are_checked():
    with pytest.raises(fl.InvalidConfigError, match="at least 8"):
        serving.TokenSet.from_json({"tokens": [{"token": "short", "tables": ["*"]}]})
    with pytest.raises(fl.InvalidConfigError, match="access"):
        serving.TokenSet.from_json({"tokens": [{"token": READER, "tables": ["*"], "access": "admin"}]})
    import hashlib

    hashed = serving.TokenSet.from_json({"tokens": [{"sha256": hashlib.sha256(READER.encode()).hexdigest(),
                                                    "tables": ["shop.customer"]}]})
    assert hashed.find(READER) is not None and hashed.find(WRITER) is None


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_tls_with_a_given_certificate(conn, tmp_path):
    cert, key = _self_signed(tmp_path)
    server = serving.FlussLakeServer(serving.ServerConfig(host="localhost", port=0, tls_cert=cert, tls_key=key),
                                     connection=conn)
    try:
        assert server.location.startswith("grpc+tls://")
        with serving.connect(f"grpc+tls://localhost:{server.port}", tls_root_certs=cert) as client:
            assert client.get_table("shop.customer").lookup([{"id": 3}])["tier"].to_list() == ["bronze"]
        with serving.connect(f"grpc://localhost:{server.port}", timeout=5) as plain, \
                pytest.raises(serving.ServerUnavailableError):
            plain.health()
    finally:
        server.stop()
    with pytest.raises(fl.InvalidConfigError, match="both"):
        serving.FlussLakeServer(serving.ServerConfig(port=0, tls_cert=cert), connection=conn)
