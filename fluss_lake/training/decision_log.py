"""The decision log: an append-only log table recording what each decision saw and decided, for later audit.

A changelog tells what the data was; it does not tell which values a model actually used, under which model
and rule versions, and what it answered. The decision log keeps exactly that, one row per decision, in an
ordinary fluss-lake log table (so it is tiered into the lake like any other table):

================  ====================  ============================================================
``request_id``    STRING (bucket key)   the caller's id of the decision request
``decision_ts``   TIMESTAMP_LTZ(6)      when the decision was made (its prediction time)
``entity``        STRING (JSON object)  the entity key values, e.g. ``{"customer_id": 7}``
``features``      STRING (JSON object)  feature name -> value actually used
``model_version`` STRING                model that scored
``rule_version``  STRING                rule set applied
``result``        STRING                the outcome (e.g. ``approve``)
``reason_codes``  ARRAY<STRING>         reason codes given
================  ====================  ============================================================

JSON strings keep the log's schema fixed while models change their features. :func:`reconstruct_decisions`
reads decisions back and, given feature views, recomputes the features as of each decision time from the
table history and says whether they match what was logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from fluss_lake.connection import Connection
from fluss_lake.exceptions import (
    DecisionNotFoundError,
    InvalidConfigError,
    SchemaMismatchError,
)
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.table import Table
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.training.history import time_expr
from fluss_lake.training.training_set import training_set
from fluss_lake.write.write_result import WriteResult

__all__ = ["DECISION_LOG_SCHEMA", "create_decision_log", "log_decision", "log_decisions", "reconstruct_decisions"]

DECISION_LOG_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "decision_ts": pl.Datetime("us", "UTC"),
    "entity": pl.String(),
    "features": pl.String(),
    "model_version": pl.String(),
    "rule_version": pl.String(),
    "result": pl.String(),
    "reason_codes": pl.List(pl.String()),
}
_JSON_COLUMNS = ("entity", "features")


def create_decision_log(
    conn: Connection,
    path: str | TablePath,
    *,
    bucket_num: int | None = None,
    options: Mapping[str, object] | None = None,
    ignore_if_exists: bool = True,
) -> Table:
    """Create (or open) a decision-log table at `path` with :data:`DECISION_LOG_SCHEMA`, bucketed by request id.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("audit")
    >>> log = create_decision_log(conn, "audit.decisions")
    >>> log.schema.names[:3], log.is_primary_key_table
    (('request_id', 'decision_ts', 'entity'), False)
    """
    conn.create_table(
        path,
        schema=DECISION_LOG_SCHEMA,
        bucket_num=bucket_num,
        bucket_keys=["request_id"],
        options=options,
        ignore_if_exists=ignore_if_exists,
    )
    table = conn.get_table(path)
    if dict(table.schema.polars_schema) != DECISION_LOG_SCHEMA:
        raise SchemaMismatchError(
            f"{path} exists but is not a decision log (schema {table.schema.names}); choose another path"
        )
    return table


def log_decision(
    log: Table,
    *,
    request_id: str,
    result: str | None,
    features: Mapping[str, Any] | str,
    entity: Mapping[str, Any] | str | None = None,
    model_version: str | None = None,
    rule_version: str | None = None,
    reason_codes: Sequence[str] = (),
    decision_ts: Any = None,
) -> WriteResult:
    """Append one decision (see :func:`log_decisions`); `decision_ts` defaults to now.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("audit")
    >>> log = create_decision_log(conn, "audit.decisions")
    >>> _ = log_decision(log, request_id="r1", result="approve", features={"score": 0.9}, entity={"id": 7},
    ...                  model_version="m3", rule_version="r12", reason_codes=["LOW_RISK"])
    >>> reconstruct_decisions(log, ["r1"]).select("result", "features").to_dicts()
    [{'result': 'approve', 'features': '{"score": 0.9}'}]
    """
    return log_decisions(
        log,
        [
            {
                "request_id": request_id,
                "decision_ts": decision_ts,
                "entity": entity,
                "features": features,
                "model_version": model_version,
                "rule_version": rule_version,
                "result": result,
                "reason_codes": list(reason_codes),
            }
        ],
    )


def log_decisions(log: Table, decisions: pl.DataFrame | Sequence[Mapping[str, Any]]) -> WriteResult:
    """Append decisions (a DataFrame or a list of dicts with the log's columns) as one committed batch.

    ``entity``/``features`` may be dicts, struct columns (JSON-encoded, vectorized) or JSON strings; a missing
    or null ``decision_ts`` is the connection's clock now. Bad rows reject the whole batch and append nothing.

    Examples
    --------
    >>> import tempfile, polars as pl, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("audit")
    >>> log = create_decision_log(conn, "audit.decisions")
    >>> batch = pl.DataFrame({"request_id": ["a", "b"], "features": [{"score": 0.1}, {"score": 0.7}],
    ...                       "result": ["deny", "approve"]})
    >>> log_decisions(log, batch).rows
    2
    >>> log.to_polars()["features"].to_list()
    ['{"score":0.1}', '{"score":0.7}']
    """
    frame = _normalize(log, decisions)
    return log.append(frame)


def _normalize(log: Table, decisions: pl.DataFrame | Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Decisions as a frame of exactly the log's columns and types, or a SchemaMismatchError."""
    if isinstance(decisions, pl.DataFrame):
        frame = decisions
    elif isinstance(decisions, Sequence) and all(isinstance(d, Mapping) for d in decisions):
        unknown = sorted({k for d in decisions for k in d} - set(DECISION_LOG_SCHEMA))
        if unknown:
            raise SchemaMismatchError(
                f"decision fields {unknown} are not in the decision log; its fields are {list(DECISION_LOG_SCHEMA)}"
            )
        columns = {name: [d.get(name) for d in decisions] for name in DECISION_LOG_SCHEMA}
        for name in _JSON_COLUMNS:  # Python objects already: encode them as such (a DataFrame input stays vectorized)
            columns[name] = [v if v is None or isinstance(v, str) else _dumps(v, name) for v in columns[name]]
        ts = columns.pop("decision_ts")
        try:
            frame = pl.DataFrame(columns, schema={k: v for k, v in DECISION_LOG_SCHEMA.items() if k != "decision_ts"})
            frame = frame.with_columns(pl.Series("decision_ts", ts))
        except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
            raise SchemaMismatchError(f"decisions do not fit the decision log: {exc}") from None
    else:
        raise SchemaMismatchError("decisions must be a polars DataFrame or a list of dicts")
    unknown = [c for c in frame.columns if c not in DECISION_LOG_SCHEMA]
    if unknown:
        raise SchemaMismatchError(
            f"decision columns {unknown} are not in the decision log; its columns are {list(DECISION_LOG_SCHEMA)}"
        )
    if "request_id" not in frame.columns or frame["request_id"].null_count():
        raise SchemaMismatchError("every decision needs a request_id")
    exprs = []
    for name, dtype in DECISION_LOG_SCHEMA.items():
        if name not in frame.columns:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
            continue
        have = frame.schema[name]
        if name in _JSON_COLUMNS and isinstance(have, pl.Struct):
            exprs.append(pl.col(name).struct.json_encode().alias(name))
        elif name == "decision_ts":
            if have == pl.Null:
                exprs.append(pl.lit(None, dtype=dtype).alias(name))
            else:
                exprs.append(time_expr(name, have, unit="us", what="decision_ts").alias(name))
        elif have == dtype or have == pl.Null:
            exprs.append(pl.col(name).cast(dtype))
        else:
            raise SchemaMismatchError(f"decision column {name!r} is {have}; the decision log wants {dtype}")
    out = frame.select(exprs)
    now = pl.lit(log.connection.clock() * 1000, dtype=pl.Int64).cast(pl.Datetime("us", "UTC"))
    return out.with_columns(pl.col("decision_ts").fill_null(now))


def _dumps(value: Any, name: str) -> str:
    """JSON of one dict (keys sorted, times as ISO strings)."""
    if not isinstance(value, Mapping):
        raise SchemaMismatchError(
            f"decision field {name!r} must be a dict or a JSON string, got {type(value).__name__}"
        )
    return json.dumps(value, sort_keys=True, default=str)


def reconstruct_decisions(
    log: Table, request_ids: Sequence[str] | None = None, *, views: FeatureView | Sequence[FeatureView] | None = None
) -> pl.DataFrame:
    """Decisions as logged (in the order asked); with `views`, also the features recomputed as of each decision.

    With views, the ``entity`` JSON gives the entity keys and ``decision_ts`` the prediction time, the views'
    rules give the values (``features_asof``, a struct named like the training-set columns), and
    ``features_match`` says whether every recomputed feature equals the logged one (log features under those
    names to use this). Unknown request ids raise :class:`~fluss_lake.DecisionNotFoundError`.
    """
    frame = log.to_polars()
    if request_ids is not None:
        if isinstance(request_ids, str):
            request_ids = [request_ids]
        wanted = pl.DataFrame({"request_id": list(request_ids)}, schema={"request_id": pl.String})
        missing = wanted.join(frame.select("request_id"), on="request_id", how="anti")["request_id"].to_list()
        if missing:
            raise DecisionNotFoundError(f"request id(s) {missing} are not in the decision log {log.path}")
        frame = wanted.unique(maintain_order=True).join(frame, on="request_id", how="left", maintain_order="left")
    if views is None:
        return frame
    views = [views] if isinstance(views, FeatureView) else list(views)
    if frame.is_empty():
        raise DecisionNotFoundError(f"the decision log {log.path} holds no decisions to reconstruct")
    if frame["entity"].null_count():
        raise InvalidConfigError("decisions without an entity cannot be recomputed; log entity= with them")
    entity = frame["entity"].str.json_decode(infer_schema_length=None).struct.unnest()
    clash = [c for c in entity.columns if c in frame.columns]
    if clash:
        raise SchemaMismatchError(f"entity keys {clash} clash with decision-log columns; rename them")
    entities = pl.concat([frame.select("decision_ts"), entity], how="horizontal")
    recomputed = training_set(entities, views, timestamp_column="decision_ts")
    assert isinstance(recomputed, pl.DataFrame)
    names = [n for v in views for n in v.output_names()]
    asof = recomputed.select(pl.struct(names).alias("features_asof"))
    dtype = asof.schema["features_asof"]
    out = pl.concat([frame, asof], how="horizontal")
    logged = pl.col("features").str.json_decode(dtype)
    return out.with_columns(logged.eq_missing(pl.col("features_asof")).fill_null(False).alias("features_match"))
