"""Unit tests of the last-row, first_row and versioned mergers, the OVERWRITE mode and the registry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from fluss_lake.exceptions import (
    DeletionDisabledError,
    InvalidConfigError,
    InvalidPartialUpdateError,
    UnsupportedMergeEngineError,
)
from fluss_lake.kv.merge import (
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    AggregationMerger,
    AggSpec,
    FirstRowMerger,
    LastRowMerger,
    MergeRound,
    MergeSpec,
    RowMerger,
    VersionedMerger,
    check_delete_behavior,
    create_row_merger,
    default_delete_behavior,
)

Row = dict[str, Any]


def make_spec(dtypes: dict[str, pl.DataType], pk: tuple[str, ...] = ("k",), *, not_null: tuple[str, ...] = (),
              **kwargs: Any) -> MergeSpec:
    """Build a MergeSpec; key columns and ``not_null`` are NOT NULL."""
    nullable = {c: c not in pk and c not in not_null for c in dtypes}
    return MergeSpec(columns=tuple(dtypes), dtypes=dtypes, nullable=nullable, primary_key=pk, **kwargs)


def run(merger: RowMerger, spec: MergeSpec, rows: list[tuple[Row | None, Row, bool]]) -> list[tuple[int, bool, Row]]:
    """Merge one round given as (stored row or None, written row, is_delete); return (emit, exists, after)."""
    old = pl.DataFrame([o or {} for o, _, _ in rows], schema=spec.dtypes)
    new = pl.DataFrame([n for _, n, _ in rows], schema=spec.dtypes)
    exists = pl.Series([o is not None for o, _, _ in rows], dtype=pl.Boolean)
    deletes = pl.Series([d for _, _, d in rows], dtype=pl.Boolean)
    out = merger.merge(MergeRound(old=old, exists=exists, new=new, is_delete=deletes))
    assert out.after.schema == pl.Schema(spec.dtypes)
    assert out.emit.dtype == pl.Int8 and out.after_exists.dtype == pl.Boolean
    assert len(out.after) == len(out.emit) == len(out.after_exists) == len(rows)
    return list(zip(out.emit.to_list(), out.after_exists.to_list(), out.after.to_dicts(), strict=True))


KV = make_spec({"k": pl.Int32, "b": pl.String, "c": pl.String})


# ---------------------------------------------------------------- last row, full rows


def test_last_row_full_writes() -> None:
    merger = create_row_merger(KV)
    assert isinstance(merger, LastRowMerger)
    got = run(merger, KV, [
        (None, {"k": 1, "b": "x", "c": None}, False),
        ({"k": 2, "b": "x", "c": "y"}, {"k": 2, "b": "x", "c": "y"}, False),  # identical values still update
        ({"k": 3, "b": "x", "c": "y"}, {"k": 3}, True),
        (None, {"k": 4}, True),
    ])
    assert got[0] == (EMIT_INSERT, True, {"k": 1, "b": "x", "c": None})
    assert got[1] == (EMIT_UPDATE, True, {"k": 2, "b": "x", "c": "y"})
    assert got[2][:2] == (EMIT_DELETE, False)
    assert got[3][:2] == (EMIT_NOTHING, False)


def test_last_row_empty_round() -> None:
    assert run(create_row_merger(KV), KV, []) == []


def test_last_row_delete_ignore_keeps_row() -> None:
    spec = make_spec(dict(KV.dtypes), delete_behavior="ignore")
    got = run(create_row_merger(spec), spec, [({"k": 1, "b": "x", "c": None}, {"k": 1}, True), (None, {"k": 2}, True)])
    assert got[0] == (EMIT_NOTHING, True, {"k": 1, "b": "x", "c": None})
    assert got[1][:2] == (EMIT_NOTHING, False)


def test_delete_disable_raises_only_when_a_delete_is_present() -> None:
    spec = make_spec(dict(KV.dtypes), delete_behavior="disable")
    merger = create_row_merger(spec)
    assert run(merger, spec, [(None, {"k": 1, "b": "x"}, False)])[0][0] == EMIT_INSERT
    with pytest.raises(DeletionDisabledError, match="disable"):
        run(merger, spec, [(None, {"k": 1, "b": "x"}, False), ({"k": 2, "b": "y"}, {"k": 2}, True)])


# ---------------------------------------------------------------- last row, partial update / delete


def test_partial_update_rules() -> None:
    merger = create_row_merger(KV, target_columns=["k", "b"])
    got = run(merger, KV, [
        (None, {"k": 1, "b": "v1", "c": "ignored"}, False),  # fresh: non-target null
        ({"k": 2, "b": "old", "c": "keep"}, {"k": 2, "b": None, "c": "ignored"}, False),  # null target overwrites
        ({"k": 3, "b": "old", "c": "keep"}, {"k": 3, "b": "new", "c": None}, False),
    ])
    assert got[0] == (EMIT_INSERT, True, {"k": 1, "b": "v1", "c": None})
    assert got[1] == (EMIT_UPDATE, True, {"k": 2, "b": None, "c": "keep"})
    assert got[2] == (EMIT_UPDATE, True, {"k": 3, "b": "new", "c": "keep"})


def test_partial_update_targets_only_primary_key() -> None:
    merger = create_row_merger(KV, target_columns=["k"])
    got = run(merger, KV, [
        ({"k": 1, "b": "x", "c": "y"}, {"k": 1, "b": "ignored", "c": None}, False),
        (None, {"k": 2, "b": "ignored", "c": "ignored"}, False),
    ])
    assert got[0] == (EMIT_NOTHING, True, {"k": 1, "b": "x", "c": "y"})
    assert got[1] == (EMIT_INSERT, True, {"k": 2, "b": None, "c": None})


def test_targets_covering_every_column_are_a_full_write() -> None:
    merger = create_row_merger(KV, target_columns=["c", "b", "k"])
    got = run(merger, KV, [({"k": 1, "b": "x", "c": "y"}, {"k": 1}, True)])
    assert got[0][:2] == (EMIT_DELETE, False)  # a partial delete would null b, c instead


def test_table_of_only_key_columns_still_updates() -> None:
    spec = make_spec({"k": pl.Int32, "j": pl.String}, pk=("k", "j"))
    for targets in (None, ["j", "k"]):
        merger = create_row_merger(spec, target_columns=targets)
        got = run(merger, spec, [({"k": 1, "j": "a"}, {"k": 1, "j": "a"}, False)])
        assert got[0] == (EMIT_UPDATE, True, {"k": 1, "j": "a"})


def test_partial_delete_both_branches() -> None:
    merger = create_row_merger(KV, target_columns=["k", "b"])
    got = run(merger, KV, [
        ({"k": 1, "b": "x", "c": "y"}, {"k": 1}, True),  # c (non-target) set: null the targets
        ({"k": 2, "b": "x", "c": None}, {"k": 2}, True),  # every non-target null: delete the row
        (None, {"k": 3}, True),
    ])
    assert got[0] == (EMIT_UPDATE, True, {"k": 1, "b": None, "c": "y"})
    assert got[1][:2] == (EMIT_DELETE, False)
    assert got[2][:2] == (EMIT_NOTHING, False)


def test_partial_delete_with_primary_key_targets() -> None:
    merger = create_row_merger(KV, target_columns=["k"])
    got = run(merger, KV, [({"k": 1, "b": None, "c": None}, {"k": 1}, True),
                           ({"k": 2, "b": "x", "c": None}, {"k": 2}, True)])
    assert got[0][:2] == (EMIT_DELETE, False)
    assert got[1] == (EMIT_UPDATE, True, {"k": 2, "b": "x", "c": None})  # nothing to null, still -U/+U


def test_partial_delete_ignored_behavior() -> None:
    spec = make_spec(dict(KV.dtypes), delete_behavior="ignore")
    merger = create_row_merger(spec, target_columns=["k", "b"])
    got = run(merger, spec, [({"k": 1, "b": "x", "c": None}, {"k": 1}, True)])
    assert got[0] == (EMIT_NOTHING, True, {"k": 1, "b": "x", "c": None})


# ---------------------------------------------------------------- first_row


FIRST = make_spec(dict(KV.dtypes), merge_engine="first_row", delete_behavior="ignore")


def test_first_row_keeps_first() -> None:
    merger = create_row_merger(FIRST)
    assert isinstance(merger, FirstRowMerger)
    got = run(merger, FIRST, [
        (None, {"k": 1, "b": "v1", "c": None}, False),
        ({"k": 2, "b": "v2", "c": None}, {"k": 2, "b": "v22", "c": "z"}, False),
        ({"k": 3, "b": "v3", "c": None}, {"k": 3}, True),
    ])
    assert got[0] == (EMIT_INSERT, True, {"k": 1, "b": "v1", "c": None})
    assert got[1] == (EMIT_NOTHING, True, {"k": 2, "b": "v2", "c": None})
    assert got[2] == (EMIT_NOTHING, True, {"k": 3, "b": "v3", "c": None})


def test_first_row_rejects_allow_partial_update_and_disable_deletes() -> None:
    with pytest.raises(InvalidConfigError, match="allow"):
        create_row_merger(make_spec(dict(KV.dtypes), merge_engine="first_row", delete_behavior="allow"))
    with pytest.raises(InvalidConfigError, match="allow"):
        FirstRowMerger(make_spec(dict(KV.dtypes), merge_engine="first_row"))
    with pytest.raises(InvalidPartialUpdateError, match="partial"):
        create_row_merger(FIRST, target_columns=["k", "b"])
    spec = make_spec(dict(KV.dtypes), merge_engine="first_row", delete_behavior="disable")
    with pytest.raises(DeletionDisabledError):
        run(create_row_merger(spec), spec, [(None, {"k": 1}, True)])


# ---------------------------------------------------------------- versioned


def versioned(dtype: pl.DataType) -> MergeSpec:
    """Versioned table with version column ``v`` of ``dtype``."""
    return make_spec({"k": pl.Int32, "v": dtype, "p": pl.String}, merge_engine="versioned",
                     delete_behavior="ignore", version_column="v")


@pytest.mark.parametrize(("old_v", "new_v", "winner"), [
    (1, 2, "new"), (2, 1, "old"), (1, 1, "new"), (None, 1, "new"), (1, None, "old"), (None, None, "new"),
    (-(2**31), None, "old"),
])
def test_versioned_rules_int(old_v: int | None, new_v: int | None, winner: str) -> None:
    for dtype in (pl.Int32, pl.Int64):
        spec = versioned(dtype)
        old, new = {"k": 1, "v": old_v, "p": "old"}, {"k": 1, "v": new_v, "p": "new"}
        got = run(create_row_merger(spec), spec, [(old, new, False)])
        expected = (EMIT_UPDATE, True, new) if winner == "new" else (EMIT_NOTHING, True, old)
        assert got[0] == expected


def test_versioned_timestamp_full_precision() -> None:
    spec = versioned(pl.Datetime("ns"))
    base = pl.Series(["2025-01-10T12:00:00.123456789", "2025-01-10T12:00:00.123456788"]).str.to_datetime(time_unit="ns")
    old = pl.DataFrame({"k": [1, 2], "v": base.gather([0, 0]), "p": ["o", "o"]}, schema=spec.dtypes)
    new = pl.DataFrame({"k": [1, 2], "v": base.gather([1, 0]), "p": ["n", "n"]}, schema=spec.dtypes)
    out = create_row_merger(spec).merge(MergeRound(old, pl.Series([True, True]), new, pl.Series([False, False])))
    assert out.emit.to_list() == [EMIT_NOTHING, EMIT_UPDATE]  # 1 ns older loses, a tie replaces
    assert out.after["p"].to_list() == ["o", "n"]
    assert out.after["v"].to_physical().to_list() == old["v"].to_physical().to_list()
    assert out.after.schema == pl.Schema(spec.dtypes)


def test_versioned_timestamp_ltz_and_fresh_keys() -> None:
    spec = versioned(pl.Datetime("ms", "UTC"))
    t0, t1 = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)
    got = run(create_row_merger(spec), spec, [
        (None, {"k": 1, "v": t0, "p": "a"}, False),
        ({"k": 2, "v": t1, "p": "a"}, {"k": 2, "v": t0, "p": "b"}, False),
        ({"k": 3, "v": t0, "p": "a"}, {"k": 3}, True),
    ])
    assert [g[0] for g in got] == [EMIT_INSERT, EMIT_NOTHING, EMIT_NOTHING]
    assert got[2] == (EMIT_NOTHING, True, {"k": 3, "v": t0, "p": "a"})


def test_versioned_configuration_errors() -> None:
    with pytest.raises(InvalidConfigError, match="ver-column"):
        create_row_merger(make_spec(dict(KV.dtypes), merge_engine="versioned", delete_behavior="ignore"))
    with pytest.raises(InvalidConfigError, match="not a column"):
        create_row_merger(make_spec(dict(KV.dtypes), merge_engine="versioned", delete_behavior="ignore",
                                    version_column="zz"))
    with pytest.raises(InvalidConfigError, match="INT, BIGINT"):
        create_row_merger(versioned(pl.String))
    with pytest.raises(InvalidConfigError, match="allow"):
        VersionedMerger(make_spec({"k": pl.Int32, "v": pl.Int64}, merge_engine="versioned", version_column="v"))
    with pytest.raises(InvalidPartialUpdateError, match="partial"):
        create_row_merger(versioned(pl.Int64), target_columns=["k", "v"])


# ---------------------------------------------------------------- OVERWRITE merge mode


AGG = make_spec({"id": pl.Int32, "count": pl.Int64, "max_val": pl.Int32, "name": pl.String}, pk=("id",),
                merge_engine="aggregation", delete_behavior="ignore",
                aggregations={"count": AggSpec("sum"), "max_val": AggSpec("max"), "name": AggSpec("last_value")})


def test_overwrite_bypasses_aggregation_and_applies_deletes() -> None:
    assert isinstance(create_row_merger(AGG), AggregationMerger)
    merger = create_row_merger(AGG, merge_mode="overwrite")
    assert isinstance(merger, LastRowMerger)
    stored = {"id": 1, "count": 150, "max_val": 600, "name": "Updated"}
    got = run(merger, AGG, [
        (stored, {"id": 1, "count": 100, "max_val": 500, "name": "Original"}, False),
        (dict(stored, id=2), {"id": 2}, True),
    ])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "count": 100, "max_val": 500, "name": "Original"})
    assert got[1][:2] == (EMIT_DELETE, False)


def test_overwrite_partial_update_replaces_targets() -> None:
    merger = create_row_merger(AGG, target_columns=["id", "count"], merge_mode="overwrite")
    got = run(merger, AGG, [({"id": 1, "count": 10, "max_val": 100, "name": "Alice"},
                             {"id": 1, "count": 5, "max_val": None, "name": None}, False)])
    assert got[0] == (EMIT_UPDATE, True, {"id": 1, "count": 5, "max_val": 100, "name": "Alice"})


def test_overwrite_on_first_row_and_disable() -> None:
    spec = make_spec(dict(KV.dtypes), merge_engine="first_row", delete_behavior="disable")
    merger = create_row_merger(spec, target_columns=["k", "b"], merge_mode="overwrite")
    got = run(merger, spec, [({"k": 1, "b": "x", "c": "y"}, {"k": 1, "b": "z"}, False),
                             ({"k": 2, "b": "x", "c": None}, {"k": 2}, True)])
    assert got[0] == (EMIT_UPDATE, True, {"k": 1, "b": "z", "c": "y"})
    assert got[1][:2] == (EMIT_DELETE, False)


# ---------------------------------------------------------------- registry


def test_unknown_engine_lists_valid_ones() -> None:
    spec = make_spec(dict(KV.dtypes), merge_engine="last_row")  # type: ignore[arg-type]
    with pytest.raises(UnsupportedMergeEngineError, match="first_row, versioned, aggregation"):
        create_row_merger(spec)
    with pytest.raises(UnsupportedMergeEngineError):
        default_delete_behavior("nope")


def test_engine_and_behavior_names_are_case_insensitive() -> None:
    spec = make_spec(dict(KV.dtypes), merge_engine="FIRST_ROW", delete_behavior="IGNORE")  # type: ignore[arg-type]
    assert isinstance(create_row_merger(spec), FirstRowMerger)
    loud = make_spec(dict(KV.dtypes), delete_behavior="ALLOW")  # type: ignore[arg-type]
    got = run(create_row_merger(loud), loud, [({"k": 1, "b": "x", "c": None}, {"k": 1}, True)])
    assert got[0][0] == EMIT_DELETE


def test_target_column_validation() -> None:
    with pytest.raises(InvalidPartialUpdateError, match="do not exist"):
        create_row_merger(KV, target_columns=["k", "nope"])
    with pytest.raises(InvalidPartialUpdateError, match="primary key"):
        create_row_merger(KV, target_columns=["b"])
    strict = make_spec(dict(KV.dtypes), not_null=("c",))
    with pytest.raises(InvalidPartialUpdateError, match="nullable"):
        create_row_merger(strict, target_columns=["k", "c"])
    with pytest.raises(InvalidPartialUpdateError, match="nullable"):
        create_row_merger(strict, target_columns=["k", "b"], merge_mode="overwrite")
    assert isinstance(create_row_merger(strict, target_columns=["k", "b", "c"]), LastRowMerger)  # full write


def test_merge_mode_and_aggregation_declarations() -> None:
    with pytest.raises(InvalidConfigError, match="merge mode"):
        create_row_merger(KV, merge_mode="upsert")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="aggregation"):
        create_row_merger(make_spec(dict(KV.dtypes), aggregations={"b": AggSpec("max")}))
    on_pk = make_spec(dict(KV.dtypes), merge_engine="aggregation", aggregations={"k": AggSpec("sum")})
    with pytest.raises(InvalidConfigError, match="primary-key"):
        create_row_merger(on_pk)
    unknown = make_spec(dict(KV.dtypes), merge_engine="aggregation", aggregations={"zz": AggSpec("sum")})
    with pytest.raises(InvalidConfigError, match="does not exist"):
        create_row_merger(unknown)
    bad_type = make_spec(dict(KV.dtypes), merge_engine="aggregation", aggregations={"b": AggSpec("sum")})
    with pytest.raises(InvalidConfigError, match="accepts TINYINT"):
        create_row_merger(bad_type)


def test_delete_behavior_helpers() -> None:
    assert default_delete_behavior(None) == "allow"
    assert {default_delete_behavior(e) for e in ("first_row", "versioned", "aggregation")} == {"ignore"}
    for engine in (None, "aggregation"):
        for behavior in ("allow", "ignore", "disable"):
            check_delete_behavior(engine, behavior)
    for engine in ("first_row", "versioned"):
        check_delete_behavior(engine, "ignore")
        check_delete_behavior(engine, "disable")
        with pytest.raises(InvalidConfigError, match="allow"):
            check_delete_behavior(engine, "allow")
    with pytest.raises(InvalidConfigError, match="choose one of"):
        check_delete_behavior(None, "sometimes")
