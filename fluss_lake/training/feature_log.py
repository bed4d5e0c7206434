"""The served-feature log: every online-features answer as rows of an ordinary log table (tiered like any table).

One row per entity row of each answered request:

===============  =====================  ==================================================================
``request_id``   STRING (bucket key)    the request's id (the caller's, or a generated one)
``row``          INT                    the entity row's position in the request
``served_ts``    TIMESTAMP_LTZ(6)       the prediction time the features were served for ("now")
``entity``       STRING (JSON object)   the entity key values of the row, e.g. ``{"customer_id": 7}``
``features``     STRING (JSON object)   every feature returned, by output name (``customer__tier``)
``views``        STRING (JSON array)    the views answered: name, table, prefix, version
===============  =====================  ==================================================================

So training can use the features exactly as served (:func:`served_features` gives them back as columns, with
``served_ts`` as the prediction time), and a decision can be reconstructed: ``training_set`` over the same views at
``served_ts`` recomputes them from history.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import polars as pl

from fluss_lake.connection import Connection
from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.table import Table
from fluss_lake.training.feature_view import FeatureView
from fluss_lake.write.write_result import WriteResult

if TYPE_CHECKING:
    from fluss_lake.training.online import OnlineFeatures

__all__ = ["FEATURE_LOG_SCHEMA", "create_feature_log", "log_served_features", "log_served_many", "served_features"]

FEATURE_LOG_SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "row": pl.Int32(),
    "served_ts": pl.Datetime("us", "UTC"),
    "entity": pl.String(),
    "features": pl.String(),
    "views": pl.String(),
}


def create_feature_log(
    conn: Connection,
    path: str | TablePath,
    *,
    bucket_num: int | None = None,
    options: Mapping[str, object] | None = None,
    ignore_if_exists: bool = True,
) -> Table:
    """Create (or open) a served-feature log table at `path` (:data:`FEATURE_LOG_SCHEMA`, bucketed by request id).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("audit")
    >>> log = create_feature_log(conn, "audit.served")
    >>> log.schema.names[:3], log.is_primary_key_table
    (('request_id', 'row', 'served_ts'), False)
    """
    conn.create_table(
        path,
        schema=FEATURE_LOG_SCHEMA,
        bucket_num=bucket_num,
        bucket_keys=["request_id"],
        options=options,
        ignore_if_exists=ignore_if_exists,
    )
    log = conn.get_table(path)
    _check_log(log)
    return log


def _check_log(log: Table) -> None:
    expected = {n: d for n, d in FEATURE_LOG_SCHEMA.items()}
    actual = dict(log.schema.polars_schema)
    if log.is_primary_key_table or any(actual.get(n) != d for n, d in expected.items()):
        raise SchemaMismatchError(
            f"{log.path} is not a served-feature log (a log table with {list(FEATURE_LOG_SCHEMA)}); create one with "
            "create_feature_log(conn, path)"
        )


def _entity_columns(views: Sequence[FeatureView]) -> list[str]:
    seen: dict[str, None] = {}
    for view in views:
        for entity_col, _ in view.key_pairs():
            seen.setdefault(entity_col)
    return list(seen)


def log_served_features(log: Table, result: OnlineFeatures, *, request_id: str | None = None) -> WriteResult:
    """Append one answered request (an :class:`~fluss_lake.training.OnlineFeatures`) to the log; one write batch.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.training import FeatureView, online_features
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.c", schema={"id": "BIGINT", "tier": "STRING"}, primary_key=["id"])
    >>> _ = conn.get_table("d.c").upsert([{"id": 1, "tier": "gold"}])
    >>> log = create_feature_log(conn, "d.served")
    >>> served = online_features({"id": [1, 2]}, FeatureView.from_table(conn.get_table("d.c")), with_status=True)
    >>> log_served_features(log, served, request_id="r1").rows
    2
    >>> served_features(log).select("request_id", "id", "tier").rows()
    [('r1', 1, 'gold'), ('r1', 2, None)]
    """
    _check_log(log)
    return log.append(_served_rows(result, request_id or uuid.uuid4().hex))


def log_served_many(log: Table, answers: Sequence[tuple[OnlineFeatures, str]]) -> WriteResult:
    """Append several answered requests (each with its request id) as one write batch: one commit for the
    requests a server answered together."""
    _check_log(log)
    if not answers:
        raise InvalidConfigError("log_served_many needs at least one (answer, request id) pair")
    return log.append(pl.concat([_served_rows(result, request_id) for result, request_id in answers]))


def _served_rows(result: OnlineFeatures, request_id: str) -> pl.DataFrame:
    """The log rows of one answered request."""
    views = result.views
    frame = result.frame
    entity = _entity_columns(views)
    features = [n for v in views for n in v.output_names()]
    described = json.dumps(
        [
            {"name": v.name, "table": str(v.table.path) if v.table is not None else None, "prefix": v.prefix}
            | {"version": v.version}
            for v in views
        ],
        separators=(",", ":"),
    )
    return frame.select(
        pl.lit(request_id, dtype=pl.String).alias("request_id"),
        pl.int_range(pl.len(), dtype=pl.Int32).alias("row"),
        pl.lit(result.now, dtype=pl.Datetime("us", "UTC")).alias("served_ts"),
        pl.struct(entity).struct.json_encode().alias("entity"),
        (pl.struct(features).struct.json_encode() if features else pl.lit("{}")).alias("features"),
        pl.lit(described, dtype=pl.String).alias("views"),
    )


def served_features(
    log: Table, *, request_ids: Sequence[str] | None = None, since: datetime | None = None
) -> pl.DataFrame:
    """The logged requests as columns: ``request_id``, ``row``, ``served_ts``, the entity keys and the features
    as served (JSON decoded; times come back as ISO strings), ordered by request and row: a training frame of
    exactly what was served (``served_ts`` is its prediction time).
    """
    _check_log(log)
    if request_ids is not None and (isinstance(request_ids, str) or not isinstance(request_ids, Sequence)):
        raise InvalidConfigError("request_ids must be a list of request ids")
    rows = log.scan_log(columns=list(FEATURE_LOG_SCHEMA))
    if request_ids is not None:
        rows = rows.filter(pl.col("request_id").is_in(list(request_ids)))
    if since is not None:
        rows = rows.filter(pl.col("served_ts") >= since)
    rows = rows.select(list(FEATURE_LOG_SCHEMA)).sort("served_ts", "request_id", "row", maintain_order=True)
    if rows.height == 0:
        return rows.select("request_id", "row", "served_ts")
    entity = rows.get_column("entity").str.json_decode(infer_schema_length=None).struct.unnest()
    features = rows.get_column("features").str.json_decode(infer_schema_length=None)
    decoded = features.struct.unnest() if isinstance(features.dtype, pl.Struct) else pl.DataFrame()
    return pl.concat([rows.select("request_id", "row", "served_ts"), entity, decoded], how="horizontal")
