"""Auto-partitioning (``table.auto-partition.*``) on a clock the tests set: pre-creation per time unit, formats,
time zones, and Fluss's lexicographic retention rule (partitions below ``format(now - retention)`` are dropped)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import fluss_lake as fl


def _ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


class Clock:
    """An epoch-millisecond clock the test moves."""

    def __init__(self, start: str) -> None:
        self.now = _ms(start)

    def __call__(self) -> int:
        return self.now


def _table(tmp_path, clock, *, schema=None, partition_keys=("dt",), primary_key=(), **options):
    conn = fl.connect(str(tmp_path), clock=clock)
    conn.create_database("d", ignore_if_exists=True)
    opts = {"table.auto-partition.enabled": "true", "table.auto-partition.time-zone": "UTC"}
    opts.update({f"table.auto-partition.{k.replace('_', '-')}": str(v) for k, v in options.items()})
    conn.create_table("d.t", schema=schema or {"dt": "STRING", "v": "INT"}, partition_keys=list(partition_keys),
                      primary_key=list(primary_key), options=opts)
    return conn.get_table("d.t")


@pytest.mark.parametrize("unit, now, precreate, expected", [
    ("HOUR", "2024-11-11T10:30:00", 3, ["2024111110", "2024111111", "2024111112"]),
    ("DAY", "2024-12-31T23:59:00", 2, ["20241231", "20250101"]),
    ("MONTH", "2024-01-31T08:00:00", 2, ["202401", "202402"]),
    ("QUARTER", "2024-11-11T00:00:00", 2, ["20244", "20251"]),
    ("YEAR", "2024-11-11T00:00:00", 3, ["2024", "2025", "2026"]),
])
def test_precreation_per_time_unit(tmp_path, unit, now, precreate, expected) -> None:
    table = _table(tmp_path, Clock(now), time_unit=unit, num_precreate=precreate)
    created, dropped = table.auto_partition()
    assert (created, dropped) == (expected, [])
    assert [p.name for p in table.list_partitions()] == expected
    assert table.auto_partition() == ([], [])  # idempotent


def test_custom_time_format_and_date_keys(tmp_path) -> None:
    table = _table(tmp_path / "a", Clock("2024-11-11T00:00:00"), time_format="yyyy-MM-dd")
    assert table.auto_partition()[0] == ["2024-11-11", "2024-11-12"]
    table = _table(tmp_path / "b", Clock("2024-11-11T00:00:00"), schema={"day": "DATE", "v": "INT"},
                   partition_keys=("day",))
    assert table.auto_partition()[0] == ["2024-11-11", "2024-11-12"]
    table.append(pl.DataFrame({"day": [dt.date(2024, 11, 12)], "v": [1]}))
    assert table.partition("2024-11-12").to_polars()["v"].to_list() == [1]
    assert len(table.list_partitions()) == 2  # the row went to the pre-created partition


def test_time_zone_decides_the_current_period(tmp_path) -> None:
    table = _table(tmp_path, Clock("2024-11-11T20:00:00"), time_zone="Asia/Shanghai", num_precreate=1)
    assert table.auto_partition()[0] == ["20241112"]


def test_retention_rule(tmp_path) -> None:
    """Fluss's documented example: now 2024-11-11, DAY, retention 3 keeps 20241108 and later; the comparison is
    on strings, so a value like ``abc`` (letters sort after digits) is kept."""
    clock = Clock("2024-11-07T00:00:00")
    table = _table(tmp_path, clock, num_retention=3, num_precreate=0)
    for name in ("20241106", "20241107", "20241108", "20241111", "abc"):
        table.create_partition(name)
    table.append([{"dt": "20241106", "v": 1}, {"dt": "20241108", "v": 2}])
    clock.now = _ms("2024-11-11T00:00:00")
    created, dropped = table.auto_partition()
    assert (created, dropped) == ([], ["20241106", "20241107"])
    assert [p.name for p in table.list_partitions()] == ["20241108", "20241111", "abc"]
    assert table.to_polars()["v"].to_list() == [2]
    with pytest.raises(fl.InvalidPartitionError, match="past the auto-partition retention"):
        table.create_partition("20241107")
    assert [p.name for p in table.list_partitions()] == ["20241108", "20241111", "abc"]


def test_a_write_to_an_expired_partition_changes_nothing(tmp_path) -> None:
    clock = Clock("2024-11-11T00:00:00")
    table = _table(tmp_path, clock, num_retention=2, schema={"dt": "STRING", "id": "INT", "v": "INT"},
                   primary_key=("dt", "id"))
    table.upsert([{"dt": "20241111", "id": 1, "v": 1}])
    before = (table.to_polars().to_dicts(), [p.name for p in table.list_partitions()], table.end_offsets())
    with pytest.raises(fl.InvalidPartitionError, match="past the auto-partition retention"):
        table.upsert([{"dt": "20241111", "id": 2, "v": 2}, {"dt": "20241101", "id": 1, "v": 1}])
    assert (table.to_polars().to_dicts(), [p.name for p in table.list_partitions()], table.end_offsets()) == before


def test_multi_key_auto_partitioning_retains_by_the_time_key(tmp_path) -> None:
    clock = Clock("2024-11-01T00:00:00")
    table = _table(tmp_path, clock, schema={"region": "STRING", "dt": "STRING", "v": "INT"},
                   partition_keys=("region", "dt"), key="dt", num_retention=5)
    assert table.auto_partition() == ([], [])  # nothing pre-created: other keys' values are unknown
    table.append([{"region": r, "dt": d, "v": 1} for r in ("eu", "us") for d in ("20241101", "20241110")])
    clock.now = _ms("2024-11-12T00:00:00")
    assert table.auto_partition() == ([], ["eu$20241101", "us$20241101"])
    assert [p.name for p in table.list_partitions()] == ["eu$20241110", "us$20241110"]


def test_writers_apply_auto_partitioning_as_the_clock_moves(tmp_path) -> None:
    """No separate service: a flush runs the check at most every ten minutes of the table clock."""
    clock = Clock("2024-11-01T00:00:00")
    table = _table(tmp_path, clock, num_retention=1, num_precreate=1)
    table.append([{"dt": "20241101", "v": 1}])
    assert [p.name for p in table.list_partitions()] == ["20241101"]
    clock.now = _ms("2024-11-03T00:00:00")
    table.append([{"dt": "20241103", "v": 2}])
    assert [p.name for p in table.list_partitions()] == ["20241103"]
    assert "delete" not in table.changelog()["_change_type"].to_list()


def test_retention_can_be_altered_and_auto_partitioning_switched_off(tmp_path) -> None:
    clock = Clock("2024-11-01T00:00:00")
    table = _table(tmp_path, clock, num_retention=40, num_precreate=0)
    table.append([{"dt": d, "v": 1} for d in ("20241001", "20241020")])
    conn = table.connection
    conn.alter_table("d.t", set_options={"table.auto-partition.num-retention": "5"})
    assert conn.get_table("d.t").auto_partition() == ([], ["20241001", "20241020"])
    conn.alter_table("d.t", set_options={"table.auto-partition.enabled": "false"})
    table = conn.get_table("d.t")
    table.create_partition("19990101")  # no retention rule any more
    assert table.auto_partition() == ([], [])
    assert [p.name for p in table.list_partitions()] == ["19990101"]


def test_log_ttl_and_partition_retention_are_separate_knobs(tmp_path) -> None:
    """``table.log.ttl`` trims old log batches inside partitions (never partitions, never state);
    partition retention drops whole partitions. ``table.log.local-ttl`` only concerns Fluss's local copy of a log
    already tiered to remote storage, which this store does not have (every batch lives in the store): refused."""
    clock = Clock("2024-11-10T00:00:00")
    table = _table(tmp_path, clock, num_retention=2, num_precreate=0, schema={"dt": "STRING", "id": "INT", "v": "INT"},
                   primary_key=("dt", "id"))
    conn = table.connection
    before = conn.get_table_info("d.t")
    with pytest.raises(fl.InvalidConfigError, match="table.log.local-ttl.*not support.*remove it"):
        conn.alter_table("d.t", set_options={"table.log.ttl": "1 h", "table.log.local-ttl": "1 ms"})
    assert conn.get_table_info("d.t") == before
    conn.alter_table("d.t", set_options={"table.log.ttl": "1 h"})
    table = conn.get_table("d.t")
    table.upsert([{"dt": "20241110", "id": 1, "v": 1}])
    clock.now = _ms("2024-11-10T00:30:00")
    table.upsert([{"dt": "20241110", "id": 1, "v": 2}])
    assert table.changelog().height == 3  # younger than the log TTL: nothing expired yet
    clock.now = _ms("2024-11-10T03:00:00")
    table.upsert([{"dt": "20241110", "id": 2, "v": 3}])
    table.expire_log()
    assert table.changelog()["_log_offset"].min() > 0  # log.ttl trimmed the old batches...
    assert table.to_polars().sort("id")["v"].to_list() == [2, 3]  # ...never the state
    assert [p.name for p in table.list_partitions()] == ["20241110"]  # ...nor the partition
    clock.now = _ms("2024-11-13T00:00:00")
    assert table.auto_partition() == ([], ["20241110"])  # retention drops the whole partition
    assert table.to_polars().height == 0
