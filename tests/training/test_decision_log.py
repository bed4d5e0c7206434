"""The decision log: created with its documented schema, appended to, read back, recomputed from history."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.training import (
    DECISION_LOG_SCHEMA,
    FeatureView,
    create_decision_log,
    log_decision,
    log_decisions,
    reconstruct_decisions,
)

T0 = 1_767_225_600_000


@pytest.fixture
def setup(tmp_store):
    clock = [T0]
    conn = fl.connect(tmp_store, clock=lambda: clock[0])
    conn.create_database("risk")
    conn.create_table("risk.customer", schema={"id": "BIGINT", "tier": "STRING", "score": "DOUBLE"},
                      primary_key=["id"], bucket_num=2)
    customer = conn.get_table("risk.customer")
    customer.upsert([{"id": 1, "tier": "gold", "score": 0.9}, {"id": 2, "tier": "bronze", "score": 0.2}])
    return conn, customer, create_decision_log(conn, "risk.decisions", bucket_num=2), clock


def test_schema_and_append_only(setup):
    conn, _, log, _ = setup
    assert dict(log.schema.polars_schema) == DECISION_LOG_SCHEMA
    assert not log.is_primary_key_table and log.info.bucket_keys == ("request_id",)
    assert create_decision_log(conn, "risk.decisions").path == log.path  # reopening is fine
    with pytest.raises(fl.SchemaMismatchError, match="not a decision log"):
        create_decision_log(conn, "risk.customer")
    with pytest.raises(fl.TableAlreadyExistError):
        create_decision_log(conn, "risk.decisions", ignore_if_exists=False)


def test_decisions_are_reconstructed_and_recomputed_from_history(setup):
    _, customer, log, clock = setup
    clock[0] = T0 + 10
    log_decision(log, request_id="r1", entity={"id": 1}, features={"c__tier": "gold", "c__score": 0.9},
                 model_version="m3", rule_version="r7", result="approve", reason_codes=["LOW_RISK", "VIP"])
    clock[0] = T0 + 20
    customer.upsert([{"id": 1, "tier": "silver", "score": 0.4}])  # the feature changes after decision r1
    clock[0] = T0 + 30
    frame = pl.DataFrame({"request_id": ["r2", "r3"], "entity": [{"id": 1}, {"id": 2}],
                          "features": [{"c__tier": "silver", "c__score": 0.4}, {"c__tier": "gold", "c__score": 0.2}],
                          "result": ["review", "approve"], "reason_codes": [["MID"], []]})
    log_decisions(log, frame)  # struct columns: JSON-encoded vectorized; decision_ts = the clock
    view = FeatureView.from_table(customer, features=["tier", "score"], prefix="c__")
    out = reconstruct_decisions(log, ["r3", "r1", "r2"], views=[view])
    assert out["request_id"].to_list() == ["r3", "r1", "r2"]
    assert out["decision_ts"].to_list() == [datetime.fromtimestamp((T0 + t) / 1000, tz=UTC) for t in (30, 10, 30)]
    assert out["features_match"].to_list() == [False, True, True]  # r3 logged a tier the store never served
    assert out["features_asof"].struct.field("c__tier").to_list() == ["bronze", "gold", "silver"]
    assert out.filter(pl.col("request_id") == "r1").select("model_version", "rule_version", "result",
                                                           "reason_codes").to_dicts() == [
        {"model_version": "m3", "rule_version": "r7", "result": "approve", "reason_codes": ["LOW_RISK", "VIP"]}]
    assert reconstruct_decisions(log).height == 3


@pytest.mark.parametrize("bad, match", [
    ([{"request_id": "x", "verdict": "no"}], "verdict"),
    ([{"result": "no"}], "request_id"),
    ([{"request_id": "x", "features": [1, 2]}], "dict or a JSON string"),
    (pl.DataFrame({"request_id": ["x"], "result": [1]}), "result"),
    (pl.DataFrame({"request_id": ["x"], "decision_ts": [5]}), "decision_ts"),
    (pl.DataFrame({"request_id": [None, "y"]}, schema={"request_id": pl.String}), "request_id"),
    ("not decisions", "DataFrame or a list of dicts"),
])
def test_bad_decisions_append_nothing(setup, bad, match):
    _, _, log, _ = setup
    log_decision(log, request_id="ok", result="approve", features={"a": 1})
    before = (log.end_offsets(), log.to_polars())
    with pytest.raises(fl.SchemaMismatchError, match=match):
        log_decisions(log, bad)
    assert log.end_offsets() == before[0] and log.to_polars().equals(before[1])


def test_unknown_request_ids_and_missing_entities(setup):
    _, customer, log, _ = setup
    with pytest.raises(fl.DecisionNotFoundError, match="holds no decisions"):
        reconstruct_decisions(log, views=FeatureView.from_table(customer))
    log_decision(log, request_id="r1", result="approve", features={"a": 1})
    with pytest.raises(fl.DecisionNotFoundError, match="nope"):
        reconstruct_decisions(log, ["r1", "nope"])
    with pytest.raises(fl.InvalidConfigError, match="entity"):
        reconstruct_decisions(log, ["r1"], views=FeatureView.from_table(customer))
