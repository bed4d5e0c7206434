"""Runs the test vectors lifted from Apache Fluss's own tests (``shared/conformance/fluss-vectors.jsonl``)
through the public API: table creation, writes in batches, state, changelog, ``$changelog`` and ``$binlog``.

Cases that belong to a later issue or that we deliberately do not follow are listed in ``NOT_HERE`` with
the reason; the test fails if the file gains a case this runner does not know how to run.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import fluss_lake as fl
from fluss_lake.keys.hashing import fluss_murmur_bucket, paimon_bucket
from fluss_lake.keys.key_encoding import encode_compacted_key
from fluss_lake.metadata.types import to_polars_dtype

VECTORS = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "fluss-vectors.jsonl"

NOT_HERE: dict[str, str] = {}


def _load() -> list[dict]:
    if not VECTORS.exists():
        pytest.fail(f"conformance vectors not found at {VECTORS}; check out shared/ beside the repository")
    return [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


CASES = _load()


def _column(name: str, values: list, dtype: pl.DataType) -> pl.Series:
    """JSON vector values as a typed column (timestamps keep their nanoseconds)."""
    if isinstance(dtype, pl.Datetime):
        nanos = [None if v is None else int(np.datetime64(v.replace("Z", ""), "ns").astype(np.int64)) for v in values]
        return pl.Series(name, nanos, dtype=pl.Int64).cast(pl.Datetime("ns", dtype.time_zone)).dt.cast_time_unit(dtype.time_unit)
    if isinstance(dtype, pl.Decimal):
        values = [None if v is None else decimal.Decimal(str(v)) for v in values]
    return pl.Series(name, values, dtype=dtype)


def _value(value, dtype: pl.DataType):
    """One JSON vector value as a Python value (for list comparisons)."""
    return _column("v", [value], dtype)[0]


def _row(row: dict, dtypes: dict[str, pl.DataType]) -> dict:
    return {k: _value(v, dtypes[k]) for k, v in row.items()}


def _frame(rows: list[dict], dtypes: dict[str, pl.DataType], columns: list[str]) -> pl.DataFrame:
    """Raw JSON rows as a typed frame with `columns`."""
    return pl.DataFrame([_column(c, [r.get(c) for r in rows], dtypes[c]) for c in columns])


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def _create(conn: fl.Connection, name: str, schema_cols: list[dict], primary_key: list[str], options: dict) -> fl.Table:
    opts = dict(options)
    for col in schema_cols:
        if col.get("agg") and f"fields.{col['name']}.agg" not in opts:
            opts[f"fields.{col['name']}.agg"] = col["agg"]
    schema = fl.Schema.of([(c["name"], c["type"], c.get("nullable", True)) for c in schema_cols], primary_key=primary_key)
    conn.create_table(f"conf.{name}", schema=schema, options=opts)
    return conn.get_table(f"conf.{name}")


def _groups(writes: list[dict]):
    """Consecutive writes of one batch (and one kind of writer) form one flush; unbatched writes flush alone."""
    def key(indexed):
        i, w = indexed
        batch = w.get("batch")
        return (batch if batch is not None else f"solo-{i}", tuple(w.get("target_columns") or ()), w.get("merge_mode", "DEFAULT"))
    for (_, targets, mode), group in itertools.groupby(enumerate(writes), key=key):
        yield (list(targets) or None), mode.lower(), [w for _, w in group]


def _apply(table: fl.Table, writes: list[dict], dtypes: dict, clock: list[int] | None = None) -> None:
    for targets, mode, group in _groups(writes):
        if clock is not None and "commit_ts_ms" in group[0]:
            clock[0] = group[0]["commit_ts_ms"]
        writer = table.new_upsert(target_columns=targets, merge_mode=mode) if table.is_primary_key_table else table.new_append()
        for write in group:
            row = write["row"]
            if write["op"] == "upsert":
                writer.upsert(_frame([row], dtypes, list(row)))
            elif write["op"] == "delete":
                writer.delete(_frame([row], dtypes, [k for k in row if k in table.schema.primary_key]))
            elif write["op"] == "append":
                writer.append(_frame([row], dtypes, list(row)))
            else:
                raise AssertionError(f"unknown op {write['op']}")
        writer.flush()


def _check_changelog(table: fl.Table, expected: list[dict], dtypes: dict, per_key: bool = False) -> None:
    log = table.scan_log()
    columns = list(table.schema.names)
    if per_key:  # the source asserted the order of records per key only
        pk = list(table.schema.primary_key)
        key = lambda e: tuple(e["row"][k] for k in pk)
        expected = sorted(expected, key=key)
        log = log.with_row_index("__i").sort([*pk, "__i"]).drop("__i")
    got_ops = log.get_column("_change_type").cast(pl.String).to_list()
    assert got_ops == [e["op"] for e in expected]
    got_rows = log.select(columns)
    want_rows = _frame([e["row"] for e in expected], dtypes, columns)
    assert got_rows.equals(want_rows), f"\n{got_rows}\n!=\n{want_rows}"
    offsets = [e.get("offset") for e in expected]
    if all(o is not None for o in offsets):
        assert log.get_column("_offset").to_list() == offsets


RUN = [c for c in CASES if c["name"] not in NOT_HERE]


def test_every_case_is_run_or_listed() -> None:
    names = {c["name"] for c in CASES}
    assert set(NOT_HERE) <= names, f"NOT_HERE names cases that no longer exist: {set(NOT_HERE) - names}"
    assert len(RUN) + len(NOT_HERE) == len(CASES)


@pytest.mark.parametrize("case", RUN, ids=[c["name"] for c in RUN])
def test_vector(case: dict, tmp_path: Path) -> None:
    clock = [1_000]
    conn = fl.connect(tmp_path, clock=lambda: clock[0])
    conn.create_database("conf")
    kinds = {w["op"] for w in case.get("writes") or []}
    if case["name"].startswith("delta_join_"):
        import delta_join_vectors as dj  # beside this file (pytest puts this folder on sys.path)

        if case.get("expected_errors"):
            dj.run_ineligible_case(conn, case)
        else:
            dj.run_result_case(conn, case, _frame, _check_changelog)
    elif kinds & {"bucket", "encode_key"}:
        _run_bucketing(case)
    elif kinds == {"variants"}:
        _run_variants(conn, case)
    elif kinds == {"merge_pair"}:
        _run_merge_pairs(conn, case)
    else:
        _run_table_case(conn, case, clock)


def _run_table_case(conn: fl.Connection, case: dict, clock: list[int]) -> None:
    schema = case["schema"]
    evolved = None
    if isinstance(schema, dict):
        schema, evolved = schema["schema_v1"], schema["schema_v2"]
    table = _create(conn, case["name"], schema, case["primary_key"], case["options"])
    dtypes = {c["name"]: to_polars_dtype(c["type"]) for c in schema}
    writes = case["writes"]
    if evolved is not None:
        for col in evolved:
            dtypes.setdefault(col["name"], to_polars_dtype(col["type"]))
    if "expected_state_after_write_2" in case:
        _apply(table, writes[:2], dtypes)
        cols = list(table.schema.names)
        assert _sorted(table.to_polars()).equals(_sorted(_frame(case["expected_state_after_write_2"], dtypes, cols)))
        writes = writes[2:]
    done = 0
    for index, write in enumerate(writes):  # schema evolution: add columns when a write first names them
        new_cols = [c for c in write.get("row", {}) if c not in table.schema.names]
        if new_cols:
            _apply(table, writes[done:index], dtypes)
            done = index
            conn.alter_table(table.path, add_columns={c: dtypes[c] for c in new_cols})
            table = conn.get_table(table.path)
    ticking = any("commit_ts_ms" in w for w in writes)
    if "batches committed at clock 1000ms, 2000ms, 3000ms" in (case.get("notes") or "").lower():
        writes = [dict(w, commit_ts_ms=1000 * w["batch"]) for w in writes]
        ticking = True
    _apply(table, writes[done:], dtypes, clock if ticking else None)
    columns = list(table.schema.names)
    if case.get("expected_state") is not None:
        expected = case["expected_state"]
        got = table.to_polars()
        if expected and set(expected[0]) != set(columns):  # the source asserted only some columns
            got = got.select(list(expected[0]))
        want = _frame(expected, dtypes, list(got.columns))
        assert _sorted(got).equals(_sorted(want)), f"\n{got}\n!=\n{want}"
    if case.get("expected_changelog") is not None:
        per_key = "order asserted per key only" in (case.get("notes") or "").lower()
        _check_changelog(table, case["expected_changelog"], dtypes, per_key)
    if case.get("expected_binlog") is not None:
        binlog = table.binlog()
        want = case["expected_binlog"]
        assert binlog.get_column("_change_type").to_list() == [w["_change_type"] for w in want]
        if all("_log_offset" in w for w in want):
            assert binlog.get_column("_log_offset").to_list() == [w["_log_offset"] for w in want]
        assert binlog.get_column("before").to_list() == [None if w["before"] is None else _row(w["before"], dtypes) for w in want]
        assert binlog.get_column("after").to_list() == [None if w["after"] is None else _row(w["after"], dtypes) for w in want]
    if case.get("expected_virtual_changelog") is not None:
        view = table.changelog()
        want = case["expected_virtual_changelog"]
        assert view.get_column("_change_type").to_list() == [w["_change_type"] for w in want]
        assert view.get_column("_log_offset").to_list() == [w["_log_offset"] for w in want]
        stamps = [dt.datetime.fromisoformat(w["_commit_timestamp"].replace("Z", "+00:00")) for w in want]
        assert view.get_column("_commit_timestamp").to_list() == stamps
        assert view.select(columns).to_dicts() == [{c: w[c] for c in columns} for w in want]
    if case["name"] == "changelog_and_binlog_virtual_tables_batch_read":  # scan.startup.mode=timestamp, 1500
        assert table.binlog(start_timestamp=1500).select("_change_type", "_log_offset").rows() == [("update", 2), ("delete", 4)]
        assert table.changelog(start_timestamp=1500).select("_change_type", "_log_offset").rows() == [
            ("update_before", 2), ("update_after", 3), ("delete", 4)]
    # the state is always the fold of the changelog
    _assert_state_is_changelog_fold(table)


def _assert_state_is_changelog_fold(table: fl.Table) -> None:
    if not table.is_primary_key_table:
        return
    pk = list(table.schema.primary_key)
    log = table.scan_log().filter(pl.col("_change_type").cast(pl.String) != "-U")
    folded = log.unique(subset=pk, keep="last", maintain_order=True).filter(
        pl.col("_change_type").cast(pl.String) != "-D").select(table.schema.names)
    assert _sorted(folded).equals(_sorted(table.to_polars()))


def _run_variants(conn: fl.Connection, case: dict) -> None:
    template = case["schema"]
    for number, variant in enumerate(case["writes"][0]["variants"]):
        schema = [dict(c, type=variant["type"]) if c["type"] == "<variant type>" else c for c in template]
        table = _create(conn, f"{case['name'][:40]}_{number}", schema, case["primary_key"], case["options"])
        dtypes = {c["name"]: to_polars_dtype(c["type"]) for c in schema}
        for value in variant["inputs"]:
            table.upsert(_frame([{"id": 1, "value": value}], dtypes, ["id", "value"]))
        got = table.to_polars().get_column("value").to_list()
        expected = _value(variant["expected"], dtypes["value"])
        assert got == [expected], f"{variant}: got {got}"


def _run_merge_pairs(conn: fl.Connection, case: dict) -> None:
    schema = [{"name": "k", "type": "INT", "nullable": False}, *case["schema"]]
    dtypes = {c["name"]: to_polars_dtype(c["type"]) for c in schema}
    for number, pair in enumerate(case["writes"]):
        table = _create(conn, f"{case['name'][:40]}_{number}", schema, ["k"], case["options"])
        names = list(dtypes)
        table.upsert(_frame([{"k": 1, **pair["old"]}], dtypes, names))
        result = table.upsert(_frame([{"k": 1, **pair["new"]}], dtypes, names))
        winner = pair[pair["expected_winner"]]
        assert table.to_polars().equals(_frame([{"k": 1, **winner}], dtypes, names))
        assert (result.records > 0) == (pair["expected_winner"] == "new")


def _run_bucketing(case: dict) -> None:
    import pyarrow as pa

    from fluss_lake.keys.bucketing import assign_buckets

    for write in case["writes"]:
        if write["op"] == "bucket":
            raw = bytes.fromhex(write["key_bytes_hex"]) if "key_bytes_hex" in write else write["key_utf8"].encode()
            keys = pa.array([raw], type=pa.binary())
            n = write["num_buckets"]
            assert int(fluss_murmur_bucket(keys, n)[0]) == write["expected"]["fluss"]
            assert int(fluss_murmur_bucket(keys, n)[0]) == write["expected"]["lance"]
            assert int(paimon_bucket(keys, n)[0]) == write["expected"]["paimon"]
            if "key_utf8" in write:  # through the table-level API: an Iceberg-format STRING bucket key
                column = pa.array([write["key_utf8"]])
                assert int(assign_buckets([column], n, lake_format="iceberg")[0]) == write["expected"]["iceberg"]
        else:
            types = {"INT": pa.int32(), "BIGINT": pa.int64()}
            columns = [pa.array([v], type=types[t]) for t, v in zip(write["types"], write["values"])]
            assert encode_compacted_key(columns)[0].as_py().hex() == write["expected_hex"]
