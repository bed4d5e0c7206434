"""What a Polars predicate says about single columns: the filter conditions a log batch's statistics can check.

Polars hands an IO source its predicate as an expression (``pl.Expr``). Its serialized tree is read here for the
parts batch statistics can rule out: comparisons of a column with a constant, ``is_between``, ``is_in``,
``is_null`` / ``is_not_null``, joined by ``&`` and ``|``. The result is a DNF (:mod:`fluss_lake.log.filters`) that
every row satisfying the predicate also satisfies (a *necessary* condition): a batch it rules out holds no
matching row and is not decoded. Anything else in the predicate (a cast column, a function, ``~``) is simply not
used for skipping; the full predicate is always applied to the rows read.
"""

from __future__ import annotations

import io
import json
from collections.abc import Collection
from typing import Any

import polars as pl

from fluss_lake.log.filters import Condition

__all__ = ["necessary_conditions"]

_MAX_GROUPS = 32  # a DNF growing beyond this (ANDs of ORs) is cut back to one side: still necessary, just coarser
_COMPARISONS = {"Eq": "=", "NotEq": "!=", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_BETWEEN = {"Both": (">=", "<="), "Left": (">=", "<"), "Right": (">", "<="), "None": (">", "<")}

DNF = list[list[Condition]]


def necessary_conditions(predicate: pl.Expr | None, columns: Collection[str]) -> DNF:
    """A DNF on `columns` implied by `predicate` (``[]``: nothing usable, read every batch).

    Examples
    --------
    >>> necessary_conditions((pl.col("id") > 5) & pl.col("name").str.contains("x"), ["id", "name"])
    [[('id', '>', 5)]]
    >>> necessary_conditions(pl.col("id").is_between(1, 3) | (pl.col("id") == 9), ["id"])
    [[('id', '>=', 1), ('id', '<=', 3)], [('id', '=', 9)]]
    """
    if predicate is None:
        return []
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
    except Exception:  # noqa: BLE001 - an expression Polars cannot serialize: no skipping, the rows decide
        return []
    return _dnf(tree, set(columns)) or []


def _dnf(node: Any, columns: set[str]) -> DNF | None:
    """The DNF implied by `node`, or None when it implies nothing usable."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    kind, body = next(iter(node.items()))
    if kind == "BinaryExpr":
        op = body.get("op")
        if op in ("And", "LogicalAnd"):
            left, right = _dnf(body["left"], columns), _dnf(body["right"], columns)
            if left is None or right is None:
                return left if right is None else right
            product = [lg + rg for lg in left for rg in right]
            return product if len(product) <= _MAX_GROUPS else min(left, right, key=len)
        if op in ("Or", "LogicalOr"):
            left, right = _dnf(body["left"], columns), _dnf(body["right"], columns)
            if left is None or right is None or len(left) + len(right) > _MAX_GROUPS:
                return None
            return left + right
        if op in _COMPARISONS:
            return _comparison(body["left"], _COMPARISONS[op], body["right"], columns)
        return None
    if kind == "Function":
        return _function(body, columns)
    if kind == "Column" and body in columns:  # a boolean column as the predicate (Polars folds `== True` to it)
        return [[(body, "=", True)]]
    return None


def _column(node: Any, columns: set[str]) -> str | None:
    if isinstance(node, dict) and isinstance(node.get("Column"), str) and node["Column"] in columns:
        return str(node["Column"])
    return None


_NO_VALUE = object()


def _constant(node: Any) -> Any:
    """The value of a subtree without columns (a literal, or an expression of literals), else ``_NO_VALUE``."""
    if "Column" in json.dumps(node):  # names a column somewhere: not a constant
        return _NO_VALUE
    try:
        expr = pl.Expr.deserialize(io.BytesIO(json.dumps(node).encode()), format="json")
        values = pl.select(expr).to_series()
    except Exception:  # noqa: BLE001 - anything Polars cannot evaluate alone is not a constant
        return _NO_VALUE
    if values.len() != 1:
        return _NO_VALUE
    value = values[0]
    return value.to_list() if isinstance(value, pl.Series) else value


def _comparison(left: Any, op: str, right: Any, columns: set[str]) -> DNF | None:
    column = _column(left, columns)
    other = right
    if column is None:
        column, other, op = _column(right, columns), left, _FLIPPED[op]
    if column is None:
        return None
    value = _constant(other)
    if value is _NO_VALUE or value is None or isinstance(value, list):
        return None
    return [[(column, op, value)]]


def _function(body: dict, columns: set[str]) -> DNF | None:
    function = body.get("function")
    inputs = body.get("input") or []
    if not isinstance(function, dict) or "Boolean" not in function or not inputs:
        return None
    kind = function["Boolean"]
    column = _column(inputs[0], columns)
    if column is None:
        return None
    if kind in ("IsNull", "IsNotNull") and len(inputs) == 1:
        return [[(column, "is null" if kind == "IsNull" else "is not null", None)]]
    if isinstance(kind, dict) and "IsBetween" in kind and len(inputs) == 3:
        low, high = _constant(inputs[1]), _constant(inputs[2])
        closed = kind["IsBetween"].get("closed", "Both")
        if any(v is _NO_VALUE or v is None or isinstance(v, list) for v in (low, high)) or closed not in _BETWEEN:
            return None
        lower, upper = _BETWEEN[closed]
        return [[(column, lower, low), (column, upper, high)]]
    if isinstance(kind, dict) and "IsIn" in kind and len(inputs) == 2:
        values = _constant(inputs[1])
        if not isinstance(values, list) or (kind["IsIn"].get("nulls_equal") and None in values):
            return None
        return [[(column, "in", [v for v in values if v is not None])]]
    return None
