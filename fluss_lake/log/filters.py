"""Row filters that can skip whole log batches using their column statistics (``table.statistics.columns``).

A filter is a list of conditions ``(column, op, value)`` that must all hold, or a list of such lists (any
of them may hold): the DNF form pyarrow and pyiceberg use. A batch is skipped only when its min/max/null
counts prove no row can match; rows of kept batches are still filtered exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from fluss_lake.exceptions import InvalidConfigError
from fluss_lake.log.log_batch import BatchHeader
from fluss_lake.metadata.types import fluss_type_name

__all__ = ["Filters", "normalize_filters", "to_expression", "may_match"]

Condition = tuple[str, str, Any]
Filters = Sequence[Condition] | Sequence[Sequence[Condition]]
_OPS = ("=", "==", "!=", "<>", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null", "between")


def normalize_filters(filters: Filters | None, columns: Sequence[str] | pl.Schema) -> list[list[Condition]]:
    """DNF as a list of AND-groups; checks columns and operators."""
    if not filters:
        return []
    groups: list[list[Any]] = [list(filters)] if isinstance(filters[0], tuple) else [list(g) for g in filters]
    for group in groups:
        for condition in group:
            if not isinstance(condition, tuple) or len(condition) not in (2, 3):
                raise InvalidConfigError(f"filter {condition!r} must be a tuple (column, op, value)")
            column, op = condition[0], str(condition[1]).lower()
            if column not in columns:
                raise InvalidConfigError(f"filter names unknown column {column!r}; the table has {list(columns)}")
            if op not in _OPS:
                raise InvalidConfigError(f"filter operator {condition[1]!r} is not supported; use one of {list(_OPS)}")
    normalized: list[list[Condition]] = [
        [(c[0], str(c[1]).lower(), c[2] if len(c) == 3 else None) for c in g] for g in groups
    ]
    if isinstance(columns, pl.Schema):
        for group in normalized:
            for condition in group:
                _check_value(columns, *condition)
    return normalized


def _check_value(schema: pl.Schema, column: str, op: str, value: Any) -> None:
    """The value must suit the operator and compare with the column's type; say which column if not."""
    if op in ("in", "not in") and not isinstance(value, list | tuple | set | frozenset):
        raise InvalidConfigError(f"filter on {column!r}: '{op}' takes a list of values, not {value!r}")
    if op == "between" and not (isinstance(value, list | tuple) and len(value) == 2):
        raise InvalidConfigError(f"filter on {column!r}: 'between' takes two values (low, high), not {value!r}")
    if op in ("is null", "is not null"):
        return
    try:
        pl.DataFrame(schema={column: schema[column]}).filter(_condition_expr(column, op, value))
    except Exception as exc:  # noqa: BLE001 - polars raises several error types for mismatched literals
        raise InvalidConfigError(
            f"filter on {column!r} ({fluss_type_name(schema[column])}): value {value!r} cannot be "
            f"compared with the column ({type(exc).__name__}); pass a value of the column's type"
        ) from None


def _condition_expr(column: str, op: str, value: Any) -> pl.Expr:
    """A Polars expression for one condition."""
    col = pl.col(column)
    if op in ("=", "=="):
        return col == value
    if op in ("!=", "<>"):
        return col != value
    if op == "<":
        return col < value
    if op == "<=":
        return col <= value
    if op == ">":
        return col > value
    if op == ">=":
        return col >= value
    if op == "in":
        return col.is_in(list(value))
    if op == "not in":
        return ~col.is_in(list(value))
    if op == "is null":
        return col.is_null()
    if op == "is not null":
        return col.is_not_null()
    lo, hi = value
    return col.is_between(lo, hi)


def to_expression(groups: list[list[Condition]]) -> pl.Expr | None:
    """The exact row filter."""
    if not groups:
        return None
    ors = [pl.all_horizontal([_condition_expr(*c) for c in g]) for g in groups]
    return pl.any_horizontal(ors) if len(ors) > 1 else ors[0]


def _condition_may_match(header: BatchHeader, column: str, op: str, value: Any) -> bool:
    """False only if the batch's statistics prove no row satisfies the condition."""
    stats = header.stats
    count = header.record_count
    if count == 0:
        return False
    nulls = header.null_counts.get(column)
    if op == "is null":
        return nulls is None or nulls > 0
    if op == "is not null":
        return nulls is None or nulls < count
    if stats is None or column not in stats.columns or column in header.no_stats:
        return True
    lo, hi = stats.get_column(column)[0], stats.get_column(column)[1]
    if lo is None or hi is None:  # every value null
        return nulls is None
    try:
        if op in ("=", "=="):
            return bool(lo <= value <= hi)
        if op in ("!=", "<>"):
            return not (lo == hi == value and nulls == 0)
        if op == "<":
            return bool(lo < value)
        if op == "<=":
            return bool(lo <= value)
        if op == ">":
            return bool(hi > value)
        if op == ">=":
            return bool(hi >= value)
        if op == "in":
            return any(lo <= v <= hi for v in value if v is not None)
        if op == "between":
            return bool(value[0] <= hi and value[1] >= lo)
    except TypeError:
        return True  # incomparable values: keep the batch, the row filter decides
    return True


def may_match(groups: list[list[Condition]], header: BatchHeader) -> bool:
    """Whether a batch may hold a matching row (any AND-group not provably false)."""
    if not groups:
        return True
    return any(all(_condition_may_match(header, *c) for c in g) for g in groups)
