"""Rules shared by training sets and online features, so both read a view the same way (one definition)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import polars as pl

from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.training.feature_view import FeatureView

#: Columns the engine adds while it works; entity and output columns may not use it.
INTERNAL_PREFIX: Final = "__fl_"


def within_ttl(value_time: pl.Expr, prediction_time: pl.Expr, ttl: timedelta | str | None) -> pl.Expr:
    """Whether a value with time `value_time` still counts at `prediction_time`: its age is at most `ttl`
    (an age exactly equal to the TTL counts; no TTL: always)."""
    if ttl is None:
        return pl.lit(True)
    return value_time >= prediction_time - pl.lit(ttl)


def check_names(schema: pl.Schema, views: list[FeatureView], timestamp_column: str | None) -> None:
    """Reject missing entity columns and clashing output names before any work."""
    if timestamp_column is not None and timestamp_column not in schema:
        raise SchemaMismatchError(
            f"the entity frame has no prediction time column {timestamp_column!r} (columns: "
            f"{schema.names()}); pass timestamp_column="
        )
    internal = [c for c in schema if c.startswith(INTERNAL_PREFIX)]
    if internal:
        raise SchemaMismatchError(f"entity columns {internal} use the reserved prefix {INTERNAL_PREFIX!r}; rename them")
    seen: dict[str, str] = {c: "the entity frame" for c in schema}
    for view in views:
        missing = [e for e, _ in view.key_pairs() if e not in schema]
        if missing:
            raise SchemaMismatchError(
                f"{view.label}: the entity frame lacks key column(s) {missing}; pass "
                "entity_keys= to name the entity columns matching the view's keys"
            )
        for name in view.output_names():
            if name.startswith(INTERNAL_PREFIX):
                raise InvalidConfigError(
                    f"{view.label}: output column {name!r} uses the reserved prefix "
                    f"{INTERNAL_PREFIX!r}; give the view another prefix="
                )
            if name in seen:
                raise InvalidConfigError(
                    f"{view.label}: output column {name!r} clashes with {seen[name]}; give the "
                    "view a prefix= (e.g. 'customer__') or select fewer features"
                )
            seen[name] = view.label


def common_key_dtype(left: pl.DataType, right: pl.DataType, what: str) -> pl.DataType | None:
    """The dtype both key columns are compared in (None: they already agree)."""
    if left == right:
        return None
    if left.is_integer() and right.is_integer():
        return pl.concat(
            [pl.DataFrame(schema={"k": left}), pl.DataFrame(schema={"k": right})], how="vertical_relaxed"
        ).schema["k"]
    stringy = (pl.String, pl.Categorical, pl.Enum)
    if isinstance(left, stringy) and isinstance(right, stringy):
        return pl.String()
    raise SchemaMismatchError(f"{what}: entity key is {left} but the history key is {right}; cast one side")
