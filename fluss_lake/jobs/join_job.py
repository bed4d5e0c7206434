"""Choosing how a join runs: as a delta join when it can, else the stateful join or a clear rejection."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import polars as pl

from fluss_lake.exceptions import InvalidConfigError, JoinNotSupportedError
from fluss_lake.jobs.delta_join import DeltaJoin
from fluss_lake.jobs.job import StartFrom
from fluss_lake.jobs.join_plan import Explanation, Join, JoinPlan
from fluss_lake.jobs.shard import Shard
from fluss_lake.jobs.stateful_join import StatefulJoin
from fluss_lake.table import Table

__all__ = ["explain_join", "join"]


def explain_join(
    result: Table,
    inputs: Mapping[str, Table],
    joins: Sequence[Join],
    *,
    select: Mapping[str, str | pl.Expr] | None = None,
    where: Mapping[str, pl.Expr] | None = None,
    condition: pl.Expr | None = None,
) -> Explanation:
    """Whether this join can run as a delta join, how each side would be probed, or why not.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> from fluss_lake.jobs import Join, explain_join
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.a", schema={"id": "INT", "x": "INT"}, primary_key=["id"])
    >>> _ = conn.create_table("d.b", schema={"id": "INT", "y": "INT"}, primary_key=["id"])
    >>> _ = conn.create_table("d.r", schema={"id": "INT", "x": "INT", "y": "INT"}, primary_key=["id"])
    >>> t = conn.get_table
    >>> explain_join(t("d.r"), {"a": t("d.a"), "b": t("d.b")}, [Join("a", "b", ["id"])]).delta
    True
    >>> why = explain_join(t("d.r"), {"a": t("d.a"), "b": t("d.b")}, [Join("a", "b", {"x": "id"})],
    ...                    select={"id": "a.id", "x": "a.x", "y": "b.y"})
    >>> why.delta, why.reasons[0].startswith("join a -> b: the join columns ['x'] of a (d.a) contain neither")
    (False, True)
    """
    plan = JoinPlan(inputs, joins, result, select=select, where=where, condition=condition)
    return plan.explain()


def join(
    result: Table,
    inputs: Mapping[str, Table],
    joins: Sequence[Join],
    *,
    select: Mapping[str, str | pl.Expr] | None = None,
    where: Mapping[str, pl.Expr] | None = None,
    condition: pl.Expr | None = None,
    name: str | None = None,
    batch_rows: int | None = None,
    start: StartFrom = "earliest",
    fallback: Literal["reject", "stateful"] = "reject",
    shard: Shard | None = None,
) -> DeltaJoin | StatefulJoin:
    """A join job: a :class:`DeltaJoin` when the join allows it, otherwise the stateful join
    (``fallback="stateful"``, its ``explain()`` says why) or :class:`~fluss_lake.JoinNotSupportedError`.
    `batch_rows` defaults to the chosen job's own default; `shard` splits a delta join (a stateful join refuses it)."""
    if fallback not in ("reject", "stateful"):
        raise InvalidConfigError(f"fallback={fallback!r}: use 'reject' or 'stateful'")
    options = {
        "select": select,
        "where": where,
        "condition": condition,
        "name": name,
        "start": start,
        "shard": shard,
        **({} if batch_rows is None else {"batch_rows": batch_rows}),
    }
    plan = JoinPlan(inputs, joins, result, select=select, where=where, condition=condition)
    if not plan.reasons:
        return DeltaJoin(result, inputs, joins, **options)  # type: ignore[arg-type]
    if fallback == "stateful":
        return StatefulJoin(result, inputs, joins, **options)  # type: ignore[arg-type]
    raise JoinNotSupportedError(
        "this join cannot run as a delta join:\n  - "
        + "\n  - ".join(plan.reasons)
        + "\npass fallback='stateful' to run it as a stateful join instead"
    )
