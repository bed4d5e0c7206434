"""The Feast-shaped HTTP endpoint: Feast's request and response shape for /get-online-features, the same tokens,
scopes and limits as the Flight server, named views from a file."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

import fluss_lake as fl
import serving
from tests.serving.conftest import OTHER, READER


def _post(port: int, body, token: str | None = READER, raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/get-online-features", data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_feast_request_and_response_shape(secured, clock):
    port = secured.http.port
    status, body = _post(port, {"features": ["shop.customer:tier", "shop.customer:score"],
                                "entities": {"id": [1, 9, 3]}})
    assert status == 200
    assert body["metadata"]["feature_names"] == ["id", "tier", "score"]
    ids, tier, score = body["results"]
    assert ids["values"] == [1, 9, 3] and ids["statuses"] == ["PRESENT"] * 3
    assert tier["values"] == ["gold", None, "bronze"]
    assert tier["statuses"] == ["PRESENT", "NOT_FOUND", "PRESENT"]
    assert score["values"] == [0.9, None, 0.1]
    assert tier["event_timestamps"][0].startswith("2026-01-01T00:00:00") and tier["event_timestamps"][1] == \
        "1970-01-01T00:00:00Z"
    _, full = _post(port, {"features": ["shop.customer:tier"], "entities": {"id": [2]}, "full_feature_names": True})
    assert full["metadata"]["feature_names"] == ["id", "shop.customer__tier"]


def test_http_refusals(secured):
    port = secured.http.port
    ok = {"features": ["shop.customer:tier"], "entities": {"id": [1]}}
    assert _post(port, ok, token=None)[0] == 401
    assert _post(port, ok, token="wrong-token-xyz")[0] == 401
    assert _post(port, ok, token=OTHER)[0] == 403
    assert _post(port, {"features": ["other.secret:v"], "entities": {"id": [1]}})[0] == 403
    status, body = _post(port, None, raw=b"{nope")
    assert status == 400 and body["error"] == "MalformedRequestError"
    assert _post(port, {"features": "tier", "entities": {"id": [1]}})[0] == 400
    assert _post(port, {"features": ["shop.customer:tier"], "entities": {"id": [1], "x": [1, 2]}})[0] == 400
    status, body = _post(port, {"features": ["shop.nope:tier"], "entities": {"id": [1]}})
    assert status == 404 and body["error"] == "TableNotExistError"
    status, body = _post(port, {"features": ["shop/../x:tier"], "entities": {"id": [1]}})
    assert status == 400 and body["error"] == "InvalidNameError"
    assert _post(port, ok)[0] == 200  # still serving


def test_named_views_from_a_file(conn, tmp_path, clock):
    views = tmp_path / "views.json"
    views.write_text(json.dumps({"views": [{"name": "customer", "table": "shop.customer", "ttl": "500 ms",
                                            "entity_keys": ["customer_id"]}]}))
    clock.now += 200  # the second write is 0.2 s old, the first 1.2 s
    server = serving.FlussLakeServer(serving.ServerConfig(port=0, http_port=0, feature_views=str(views)),
                                     connection=conn)
    try:
        status, body = _post(server.http.port, {"features": ["customer:tier"], "entities": {"customer_id": [1, 2]}},
                             token=None)
        assert status == 200
        assert body["results"][1]["statuses"] == ["OUTSIDE_MAX_AGE", "PRESENT"]
        assert body["results"][1]["values"] == [None, "gold"]
    finally:
        server.stop()
    views.write_text("{}")
    with pytest.raises(fl.InvalidConfigError, match="views"):  # the file is checked at start
        serving.FlussLakeServer(serving.ServerConfig(port=0, http_port=0, feature_views=str(views)), connection=conn)
