"""`new_upsert(skip_unchanged=True)`: an update whose merged row equals the current row writes no changelog record
and leaves the state alone; any difference (a value, a null) is still an update; deletes, inserts and tables with
``table.kv.ttl`` are unaffected; a delta join replaying its steps adds no records to its result's changelog."""

from __future__ import annotations

import fluss_lake as fl
from fluss_lake.jobs import DeltaJoin, Join


def _table(tmp_path, **options) -> fl.Table:
    conn = fl.connect(tmp_path)
    conn.create_database("d", ignore_if_exists=True)
    conn.create_table("d.t", schema={"id": "INT", "v": "STRING", "x": "DOUBLE"}, primary_key=["id"],
                      options=options or None)
    return conn.get_table("d.t")


def _write(table: fl.Table, rows: list[dict], *, deletes: list[dict] | None = None) -> None:
    writer = table.new_upsert(skip_unchanged=True)
    if rows:
        writer.upsert(rows)
    if deletes:
        writer.delete(deletes)
    writer.flush()


def _records(table: fl.Table) -> list[tuple[str, int]]:
    log = table.changelog().sort("_log_offset")
    return list(zip(log.get_column("_change_type").to_list(), log.get_column("id").to_list()))


def test_equal_rows_write_nothing_and_changes_still_do(tmp_path) -> None:
    table = _table(tmp_path)
    _write(table, [{"id": 1, "v": "a", "x": 1.0}, {"id": 2, "v": None, "x": 2.0}])
    before = _records(table)
    _write(table, [{"id": 1, "v": "a", "x": 1.0}, {"id": 2, "v": None, "x": 2.0}])  # same rows, nulls included
    assert _records(table) == before
    _write(table, [{"id": 1, "v": "a", "x": 1.5}, {"id": 2, "v": "b", "x": 2.0}, {"id": 3, "v": "c", "x": 3.0}],
           deletes=None)
    new = _records(table)[len(before):]
    assert new == [("update_before", 1), ("update_after", 1), ("update_before", 2), ("update_after", 2),
                   ("insert", 3)]
    _write(table, [{"id": 3, "v": "c", "x": 3.0}], deletes=[{"id": 1}])
    assert _records(table)[-1] == ("delete", 1), "deletes are never skipped"
    assert table.to_polars().sort("id").to_dicts() == [{"id": 2, "v": "b", "x": 2.0}, {"id": 3, "v": "c", "x": 3.0}]


def test_table_upsert_takes_the_option(tmp_path) -> None:
    table = _table(tmp_path)
    table.upsert([{"id": 1, "v": "a", "x": 1.0}])
    result = table.upsert([{"id": 1, "v": "a", "x": 1.0}], skip_unchanged=True)
    assert result.records == 0 and len(_records(table)) == 1


def test_repeated_key_in_one_batch(tmp_path) -> None:
    """A batch touching a key twice (merge rounds): the unchanged round is skipped, the changing one is not."""
    table = _table(tmp_path)
    _write(table, [{"id": 1, "v": "a", "x": 1.0}])
    before = len(_records(table))
    _write(table, [{"id": 1, "v": "a", "x": 1.0}, {"id": 1, "v": "z", "x": 1.0}])
    assert _records(table)[before:] == [("update_before", 1), ("update_after", 1)]
    assert table.to_polars().to_dicts() == [{"id": 1, "v": "z", "x": 1.0}]


def test_default_writers_and_ttl_tables_keep_every_update(tmp_path) -> None:
    plain = _table(tmp_path / "plain")
    plain.upsert([{"id": 1, "v": "a", "x": 1.0}])
    plain.upsert([{"id": 1, "v": "a", "x": 1.0}])
    assert [t for t, _ in _records(plain)] == ["insert", "update_before", "update_after"]
    ttl = _table(tmp_path / "ttl", **{"table.kv.ttl": "1 d"})
    _write(ttl, [{"id": 1, "v": "a", "x": 1.0}])
    _write(ttl, [{"id": 1, "v": "a", "x": 1.0}])  # renews the row's time: must be written
    assert [t for t, _ in _records(ttl)] == ["insert", "update_before", "update_after"]


def test_a_replayed_delta_join_step_adds_no_result_records(tmp_path) -> None:
    conn = fl.connect(tmp_path)
    conn.create_database("s")
    conn.create_table("s.o", schema={"cid": "INT", "oid": "INT"}, primary_key=["cid", "oid"], bucket_keys=["cid"])
    conn.create_table("s.c", schema={"cid": "INT", "name": "STRING"}, primary_key=["cid"])
    conn.create_table("s.r", schema={"cid": "INT", "oid": "INT", "name": "STRING"}, primary_key=["cid", "oid"])
    o, c, r = conn.get_table("s.o"), conn.get_table("s.c"), conn.get_table("s.r")
    o.upsert([{"cid": i % 3, "oid": i} for i in range(10)])
    c.upsert([{"cid": i, "name": f"n{i}"} for i in range(3)])
    DeltaJoin(r, {"o": o, "c": c}, [Join("o", "c", ["cid"])], name="j").run_once()
    records = len(r.changelog())
    assert r.to_polars().height == 10
    job = DeltaJoin(r, {"o": o, "c": c}, [Join("o", "c", ["cid"])], name="j")
    job.reset()  # a crash that lost every checkpoint: the whole changelog is processed again
    DeltaJoin(r, {"o": o, "c": c}, [Join("o", "c", ["cid"])], name="j").run_once()
    assert len(r.changelog()) == records, "every re-derived row equals the current one: no -U/+U pairs"
    c.upsert([{"cid": 1, "name": "renamed"}])
    DeltaJoin(r, {"o": o, "c": c}, [Join("o", "c", ["cid"])], name="j").run_once()
    changed = r.changelog().height - records
    assert changed == 2 * 3, "the three orders of customer 1 are updated (-U/+U each)"
