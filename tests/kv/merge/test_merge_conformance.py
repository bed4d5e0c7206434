"""Run the merge-engine cases of the shared Fluss conformance vectors through the row mergers.

A tiny in-test KV table splits each write batch into rounds (the r-th occurrence of every key), merges them,
emits ``+I/-U/+U/-D`` in batch order at dense offsets (an empty batch consumes one offset), and applies
``table.changelog.image=WAL`` by dropping ``-U``, i.e. the caller's job, so the emit codes are checked end to end.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fluss_lake.kv.merge import (
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_UPDATE,
    AggSpec,
    MergeRound,
    MergeSpec,
    create_row_merger,
    default_delete_behavior,
)

VECTORS = Path(__file__).resolve().parents[3].parent / "shared" / "conformance" / "fluss-vectors.jsonl"
if not VECTORS.exists():
    pytest.skip(f"conformance vectors not found at {VECTORS.name}", allow_module_level=True)

ALL_CASES = [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]
MERGE_OPS = {"upsert", "delete", "variants", "merge_pair"}
CASES = {
    c["name"]: c
    for c in ALL_CASES
    if c["writes"] and {w["op"] for w in c["writes"]} <= MERGE_OPS and "left" not in c["options"]
}
_SIMPLE: dict[str, pl.DataType] = {
    "TINYINT": pl.Int8, "SMALLINT": pl.Int16, "INT": pl.Int32, "INTEGER": pl.Int32, "BIGINT": pl.Int64,
    "FLOAT": pl.Float32, "DOUBLE": pl.Float64, "STRING": pl.String, "BYTES": pl.Binary, "BOOLEAN": pl.Boolean,
    "DATE": pl.Date, "TIME": pl.Time,
}


def parse_type(name: str) -> pl.DataType:
    """Map a Fluss type name to its Polars dtype."""
    name = name.strip().upper()
    if name in _SIMPLE:
        return _SIMPLE[name]
    if m := re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", name):
        return pl.Decimal(int(m[1]), int(m[2]))
    if m := re.fullmatch(r"TIMESTAMP(_LTZ)?(?:\((\d)\))?", name):
        p = int(m[2] or 6)
        return pl.Datetime("ms" if p <= 3 else "us" if p <= 6 else "ns", "UTC" if m[1] else None)
    raise AssertionError(f"unknown Fluss type {name}")


def column_series(values: list[Any], dtype: pl.DataType) -> pl.Series:
    """Build a typed column from JSON values (timestamps and decimals arrive as strings or numbers)."""
    if isinstance(dtype, pl.Datetime):
        return pl.Series(values, dtype=pl.String).str.to_datetime(time_unit=dtype.time_unit, time_zone=dtype.time_zone)
    if isinstance(dtype, pl.Decimal):
        return pl.Series([None if v is None else str(Decimal(str(v))) for v in values], dtype=pl.String).cast(dtype)
    return pl.Series(values, dtype=dtype)


def to_frame(dtypes: dict[str, pl.DataType], rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Typed frame of JSON rows; missing columns are null."""
    return pl.DataFrame([column_series([r.get(c) for r in rows], t).alias(c) for c, t in dtypes.items()])


def canonical(frame: pl.DataFrame, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples: temporal columns at full precision as integers."""
    frame = frame.select(columns or frame.columns)
    return frame.with_columns(pl.col(pl.Datetime).to_physical()).rows()


def make_spec(case: dict[str, Any], schema: list[dict[str, Any]]) -> MergeSpec:
    """Build the MergeSpec of a case from its schema and options."""
    options: dict[str, str] = case["options"]
    dtypes = {f["name"]: parse_type(f["type"]) for f in schema}
    engine = options.get("table.merge-engine")
    functions = {f["name"]: f["agg"] for f in schema if f.get("agg")}
    params: dict[str, dict[str, str]] = defaultdict(dict)
    for key, value in options.items():
        parts = key.split(".")
        if parts[0] == "fields" and len(parts) == 3 and parts[2] == "agg":
            functions[parts[1]] = value
        elif parts[0] == "fields" and len(parts) == 4:
            params[parts[1]][parts[3]] = value
    return MergeSpec(
        columns=tuple(dtypes), dtypes=dtypes, nullable={f["name"]: f["nullable"] for f in schema},
        primary_key=tuple(case["primary_key"]), merge_engine=engine,  # type: ignore[arg-type]
        delete_behavior=options.get("table.delete.behavior", default_delete_behavior(engine)).lower(),  # type: ignore[arg-type]
        version_column=options.get("table.merge-engine.versioned.ver-column"),
        aggregations={c: AggSpec(f, params.get(c, {})) for c, f in functions.items()},
    )


class KvTable:
    """Minimal KV table: state per key, changelog with offsets."""

    def __init__(self, spec: MergeSpec, *, wal: bool = False) -> None:
        self.spec, self.wal = spec, wal
        self.state: dict[tuple[Any, ...], pl.DataFrame] = {}
        self.changelog: list[tuple[str, pl.DataFrame, int]] = []
        self.next_offset = 0
        self._null_row = pl.DataFrame([pl.Series(c, [None], dtype=t) for c, t in spec.dtypes.items()])

    def write(self, writes: list[dict[str, Any]], *, targets: list[str] | None, mode: str) -> None:
        """Apply one write batch round by round; append its records (or one empty-batch offset)."""
        merger = create_row_merger(self.spec, target_columns=targets, merge_mode=mode)  # type: ignore[arg-type]
        seen: Counter[tuple[Any, ...]] = Counter()
        rounds: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for i, w in enumerate(writes):
            key = tuple(w["row"][c] for c in self.spec.primary_key)
            rounds[seen[key]].append((i, w))
            seen[key] += 1
        records: list[tuple[int, int, str, pl.DataFrame]] = []
        for r in sorted(rounds):
            items = rounds[r]
            keys = [tuple(w["row"][c] for c in self.spec.primary_key) for _, w in items]
            old = pl.concat([self.state.get(k, self._null_row) for k in keys])
            new = to_frame(dict(self.spec.dtypes), [w["row"] for _, w in items])
            out = merger.merge(MergeRound(
                old=old, exists=pl.Series([k in self.state for k in keys], dtype=pl.Boolean), new=new,
                is_delete=pl.Series([w["op"] == "delete" for _, w in items], dtype=pl.Boolean)))
            for j, ((i, _), key) in enumerate(zip(items, keys, strict=True)):
                emit, before, after = out.emit[j], old.slice(j, 1), out.after.slice(j, 1)
                if emit == EMIT_INSERT:
                    full_row_wal = self.wal and self.spec.merge_engine is None and targets is None
                    records.append((i, 0, "+U" if full_row_wal else "+I", after))
                elif emit == EMIT_UPDATE:
                    records += [(i, 0, "-U", before), (i, 1, "+U", after)]
                elif emit == EMIT_DELETE:
                    records.append((i, 0, "-D", before))
                if out.after_exists[j]:
                    self.state[key] = after
                else:
                    self.state.pop(key, None)
        records = [r for r in sorted(records, key=lambda r: r[:2]) if not (self.wal and r[2] == "-U")]
        if not records:
            self.next_offset += 1  # an empty batch still consumes one offset
        for _, _, op, row in records:
            self.changelog.append((op, row, self.next_offset))
            self.next_offset += 1


def write_groups(writes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group consecutive writes into batches (same batch id, target columns and merge mode)."""
    groups: list[list[dict[str, Any]]] = []
    last: object = object()
    for w in writes:
        ident = (w.get("batch", id(w)), tuple(w.get("target_columns") or ()), w.get("merge_mode", "DEFAULT"))
        if ident != last:
            groups.append([])
        groups[-1].append(w)
        last = ident
    return groups


def final_schema(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The latest schema of a case (schema-evolution cases list versions; rows of older ones pad with nulls)."""
    schema = case["schema"]
    return schema[sorted(schema)[-1]] if isinstance(schema, dict) else schema


def expected_rows(dtypes: dict[str, pl.DataType], rows: list[dict[str, Any]]) -> tuple[list[str], list[Any]]:
    """Canonical expected rows restricted to the columns the case asserts."""
    columns = [c for c in dtypes if any(c in r for r in rows)] or list(dtypes)
    return columns, sorted(canonical(to_frame({c: dtypes[c] for c in columns}, rows)), key=repr)


def run_table_case(case: dict[str, Any]) -> None:
    """Replay a case's writes and compare state and changelog."""
    spec = make_spec(case, final_schema(case))
    table = KvTable(spec, wal=case["options"].get("table.changelog.image", "").upper() == "WAL")
    for i, group in enumerate(write_groups(case["writes"]), start=1):
        table.write(group, targets=group[0].get("target_columns"), mode=group[0].get("merge_mode", "default").lower())
        if i == 2 and case.get("expected_state_after_write_2") is not None:
            columns, rows = expected_rows(dict(spec.dtypes), case["expected_state_after_write_2"])
            assert sorted((canonical(s, columns)[0] for s in table.state.values()), key=repr) == rows
    if case["expected_state"] is not None:
        columns, rows = expected_rows(dict(spec.dtypes), case["expected_state"])
        assert sorted((canonical(s, columns)[0] for s in table.state.values()), key=repr) == rows
    expected = case["expected_changelog"]
    if expected is None:
        return
    got = [(op, canonical(row)[0], offset) for op, row, offset in table.changelog]
    want = [(e["op"], canonical(to_frame(dict(spec.dtypes), [e["row"]]))[0], e.get("offset")) for e in expected]
    if all(e.get("offset") is not None for e in expected):
        assert got == want
    else:  # the source asserted the order per key only
        pk = [list(spec.columns).index(c) for c in spec.primary_key]
        by_key: dict[Any, list[Any]] = defaultdict(list)
        for op, row, _ in got:
            by_key[tuple(row[i] for i in pk)].append((op, row))
        want_by_key: dict[Any, list[Any]] = defaultdict(list)
        for op, row, _ in want:
            want_by_key[tuple(row[i] for i in pk)].append((op, row))
        assert by_key == want_by_key


def run_variants_case(case: dict[str, Any]) -> None:
    """Each variant: write its inputs to one key of a (id INT, value <type>) table; check the final value."""
    for variant in case["writes"][0]["variants"]:
        schema = [dict(f, type=variant["type"]) if f["type"] == "<variant type>" else f for f in case["schema"]]
        spec = make_spec(case, schema)
        table = KvTable(spec)
        for value in variant["inputs"]:
            table.write([{"op": "upsert", "row": {"id": 1, "value": value}}], targets=None, mode="default")
        want = canonical(to_frame(dict(spec.dtypes), [{"id": 1, "value": variant["expected"]}]))
        assert canonical(table.state[(1,)]) == want, variant


def run_merge_pair_case(case: dict[str, Any]) -> None:
    """Merger-level pairs: the new row replaces the old one iff it is the expected winner."""
    spec = make_spec(case, case["schema"])
    merger = create_row_merger(spec)
    for pair in case["writes"]:
        old, new = to_frame(dict(spec.dtypes), [pair["old"]]), to_frame(dict(spec.dtypes), [pair["new"]])
        out = merger.merge(MergeRound(old, pl.Series([True]), new, pl.Series([False])))
        winner = new if pair["expected_winner"] == "new" else old
        assert canonical(out.after) == canonical(winner), pair
        assert out.emit.to_list() == [EMIT_UPDATE if pair["expected_winner"] == "new" else 0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_conformance_case(name: str) -> None:
    case = CASES[name]
    ops = {w["op"] for w in case["writes"]}
    if ops == {"variants"}:
        run_variants_case(case)
    elif ops == {"merge_pair"}:
        run_merge_pair_case(case)
    else:
        run_table_case(case)


def test_every_merge_engine_case_is_covered() -> None:
    """Every case naming a merge engine or using target columns / merge mode / variants / merge pairs runs here."""
    for case in ALL_CASES:
        engine = case["options"].get("table.merge-engine")
        features = {k for w in case["writes"] for k in w if k in ("target_columns", "merge_mode")}
        ops = {w["op"] for w in case["writes"]}
        if (engine or features or ops & {"variants", "merge_pair"}) and "left" not in case["options"]:
            assert case["name"] in CASES, case["name"]
