"""Grow changed rows of one input into whole joined tuples, one vectorized probe per join edge.

Shared by the delta join (probes the other inputs' tables) and the stateful join (probes in-memory state): a
`fetch(alias, probe_columns, keys)` returns the rows of `alias` whose probe columns equal one of the key rows,
each with a ``__live`` flag. Rows that are not live (deleted rows known only by their key, rows failing
``where``) still form tuples: their result keys are the retraction candidates. A tuple is *live* when every
inner-joined row is live and the conditions hold; the right side of a LEFT join only decides whether its
columns are filled or null-padded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import polars as pl

from fluss_lake._utils.distinct import distinct
from fluss_lake.jobs.join_plan import LIVE, Edge, JoinPlan

__all__ = ["PENDING", "TUPLE_LIVE", "emit", "expand", "project"]

TUPLE_LIVE = "__tuple_live"
#: Optional flag of fetched rows: the row's last change is not consumed yet, so the tuples it is in are derived
#: again when that change is (see :func:`project`).
PENDING = "__pending"
Fetch = Callable[[str, tuple[str, ...], pl.DataFrame], pl.DataFrame]


def expand(plan: JoinPlan, seed_alias: str, seeds: pl.DataFrame, fetch: Fetch, *, index_probes: bool) -> pl.DataFrame:
    """Every tuple containing a seed row (qualified columns, ``alias.__live`` flags and ``__tuple_live``)."""
    tuples = plan.qualify(seed_alias, seeds)
    visited = {seed_alias}
    frontier = [seed_alias]
    gates: list[pl.Expr] = []
    left_gates: dict[str, list[pl.Expr]] = {}
    lefts = plan.left_children()
    while frontier:
        u = frontier.pop(0)
        for edge, v in plan.neighbours(u):
            if v in visited:
                continue
            visited.add(v)
            frontier.append(v)
            down = v == edge.child
            if index_probes:
                probe = edge.child_probe if down else edge.parent_probe
            else:
                probe = tuple(c for _, c in edge.pairs) if down else tuple(p for p, _ in edge.pairs)
            u_cols = [f"{u}.{edge.partner(v, c)}" for c in probe]
            keys = distinct(tuples.select(u_cols).drop_nulls())
            keys.columns = list(probe)
            fetched = plan.qualify(v, fetch(v, probe, keys))
            how: Literal["left", "inner"] = "left" if down and edge.how == "left" else "inner"
            tuples = tuples.join(fetched, left_on=u_cols, right_on=[f"{v}.{c}" for c in probe], how=how, coalesce=False)
            if how == "left":
                tuples = tuples.with_columns(pl.col(f"{v}.{LIVE}").fill_null(False))
            extra = [
                pl.col(f"{u}.{edge.partner(v, c)}") == pl.col(f"{v}.{c}") for c in _side_cols(edge, v) if c not in probe
            ]
            if v in lefts:
                left_gates.setdefault(v, []).extend(extra)
            else:
                gates.extend(extra)
    gate = pl.lit(True)
    for alias in plan.aliases:
        if alias not in lefts:
            gate = gate & pl.col(f"{alias}.{LIVE}")
    for condition in gates:
        gate = gate & condition
    if plan.condition is not None:
        gate = gate & plan.condition
    columns = []
    for alias in lefts:
        match = pl.col(f"{alias}.{LIVE}")
        for condition in left_gates.get(alias, []):
            match = match & condition
        match = match.fill_null(False)
        columns += [
            pl.when(match).then(pl.col(c)).otherwise(None).alias(c)
            for c in tuples.columns
            if c.startswith(f"{alias}.") and c != f"{alias}.{LIVE}"
        ]
    return tuples.with_columns(gate.fill_null(False).alias(TUPLE_LIVE)).with_columns(columns)


def _side_cols(edge: Edge, alias: str) -> list[str]:
    """Join columns of `alias` on this edge."""
    return [c for _, c in edge.pairs] if alias == edge.child else [p for p, _ in edge.pairs]


def project(plan: JoinPlan, tuples: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(live tuples as result rows, result keys of the other tuples) of some tuples, not yet deduplicated: the
    small part of a batch of tuples :func:`emit` needs, so tuples of several inputs need not be held at once.

    A live tuple holding a fetched row flagged :data:`PENDING` gives no row: that row's own change, read later,
    derives the tuple again from the then current rows (retractions are never deferred)."""
    key = plan.result_key()
    live = pl.col(TUPLE_LIVE)
    pending = [c for c in tuples.columns if c.endswith(f".{PENDING}")]
    if pending:
        live = live & ~pl.any_horizontal([pl.col(c).fill_null(False) for c in pending])
    rows = tuples.filter(live).select(list(plan.projection.values()))
    # keys of live tuples are upserted anyway: only the others can need a delete
    keys = tuples.filter(~pl.col(TUPLE_LIVE)).select([plan.projection[k] for k in key]).drop_nulls()
    return rows, keys


def emit(
    plan: JoinPlan, tuples: pl.DataFrame | list[tuple[pl.DataFrame, pl.DataFrame]], exclude: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(result rows to upsert, result keys to delete) for the tuples of one batch of changes (a frame, or the
    :func:`project` parts of several).

    Upserts are the live tuples projected to the result; deletes are the keys of all tuples that no live tuple
    has (nor `exclude`, the upserts of the same step).
    """
    key = plan.result_key()
    parts = [project(plan, tuples)] if isinstance(tuples, pl.DataFrame) else tuples
    rows = parts[0][0] if len(parts) == 1 else pl.concat([r for r, _ in parts], how="vertical_relaxed")
    upserts = distinct(rows, key, keep="any")
    del rows
    keys = parts[0][1] if len(parts) == 1 else pl.concat([k for _, k in parts], how="vertical_relaxed")
    keys = distinct(keys)
    if not keys.height:  # the common case (no retractions): no hash table over the upserts' keys
        return upserts, keys
    deletes = keys.join(upserts.select(key), on=key, how="anti", nulls_equal=True)
    if exclude is not None and exclude.height:
        deletes = deletes.join(exclude.select(key), on=key, how="anti", nulls_equal=True)
    return upserts, deletes
