"""Fluss options that fluss-lake does not implement are refused when a table is created or altered (never accepted
and then ignored); keys outside Fluss's namespaces stay custom properties; tables an earlier version created with
such a key still open, say once that the key is ignored, and can be altered and cleaned."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import fluss_lake as fl
from fluss_lake import InvalidAlterError, InvalidConfigError
from fluss_lake.io import layout


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def conn(root: Path) -> fl.Connection:
    connection = fl.connect(root)
    connection.create_database("db")
    return connection


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


PK = {"schema": {"k": "STRING", "v": "BIGINT", "n": "INT"}, "primary_key": ["k"]}

# option -> words the refusal must say (the key, the refusal, what to do)
REFUSED = [
    ({"table.kv.format": "INDEXED"}, ("table.kv.format", "INDEXED", "not supported", "remove it", "COMPACTED")),
    ({"table.datalake.format": "lance"}, ("table.datalake.format", "LANCE", "not supported", "iceberg")),
    ({"table.datalake.format": "paimon"}, ("table.datalake.format", "PAIMON", "not supported", "iceberg")),
    ({"table.datalake.format": "hudi"}, ("table.datalake.format", "HUDI", "not supported")),
    ({"table.log.local-ttl": "1 h"}, ("table.log.local-ttl", "does not support", "remove it", "table.log.ttl")),
    ({"table.log.tiered.local-segments": "2"}, ("table.log.tiered.local-segments", "remove it")),
    ({"table.datalake.auto-compaction": "true"}, ("table.datalake.auto-compaction", "CompactionPolicy")),
    ({"table.datalake.auto-expire-snapshot": "true"}, ("table.datalake.auto-expire-snapshot", "remove it")),
    ({"table.datalake.historical-partition.enabled": "true"}, ("historical-partition", "remove it")),
    ({"table.kv.format-version": "2"}, ("table.kv.format-version", "remove it")),
    ({"table.kv.standby-replica.enabled": "true"}, ("standby-replica", "no replicas")),
    ({"table.replication.factor": "3"}, ("table.replication.factor", "no replicas")),
    ({"table.auto-inc.batch-size": "10"}, ("table.auto-inc.batch-size", "table.auto-increment.cache-size")),
    ({"client.writer.dynamic-create-partition.enabled": "false"}, ("dynamic_partition_creation",)),
    ({"client.writer.acks": "all"}, ("client.writer.acks", "'client.' namespace", "remove it", "custom properties")),
    ({"lookup.cache": "PARTIAL"}, ("lookup.cache", "LookupCache", "remove it")),
    ({"lookup.partial-cache.max-rows": "10"}, ("lookup.partial-cache.max-rows", "max_rows")),
    ({"lookup.async": "true"}, ("lookup.async", "remove it")),
    ({"lookup.insert-if-not-exist": "true"}, ("did you mean 'lookup.insert-if-not-exists'",)),
    ({"scan.startup.mode": "earliest"}, ("scan.startup.mode", "'scan.' namespace", "start")),
    ({"sink.ignore-delete": "true"}, ("sink.ignore-delete", "remove it")),
    ({"datalake.format": "iceberg"}, ("datalake.format", "fl.connect(datalake_format='iceberg')")),
    ({"kv.snapshot.interval": "1 min"}, ("kv.snapshot.interval", "snapshot_every")),
    ({"log.segment.file-size": "1 gb"}, ("log.segment.file-size", "fl.connect()")),
    ({"remote.data.dir": "/x"}, ("remote.data.dir", "remove it")),
    ({"auto-increment.field": "n"}, ("did you mean 'auto-increment.fields'",)),
    ({"auto-increment.start": "5"}, ("auto-increment.start", "auto-increment.fields")),
    ({"table.auto-increment.cache-size": "10"}, ("table.auto-increment.cache-size", "auto-increment.fields")),
    ({"lookup.insert-if-not-exists": "maybe"}, ("maybe", "true", "false")),
]


@pytest.mark.parametrize(("option", "words"), REFUSED, ids=[next(iter(o)) + "=" + next(iter(o.values()))
                                                           for o, _ in REFUSED])
def test_create_refuses_unsupported_fluss_options_and_leaves_the_store_as_before(
        conn: fl.Connection, root: Path, option: dict, words: tuple[str, ...]) -> None:
    before = _tree(root)
    with pytest.raises(InvalidConfigError) as err:
        conn.create_table("db.t", **PK, options=option)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert _tree(root) == before and conn.list_tables("db") == []


@pytest.mark.parametrize(("option", "words"), REFUSED[:14], ids=[next(iter(o)) for o, _ in REFUSED[:14]])
def test_alter_refuses_unsupported_fluss_options_and_leaves_the_table_as_before(
        conn: fl.Connection, root: Path, option: dict, words: tuple[str, ...]) -> None:
    conn.create_table("db.t", **PK, options={"table.log.ttl": "2 d"})
    before, tree = conn.get_table_info("db.t"), _tree(root)
    with pytest.raises((InvalidConfigError, InvalidAlterError)) as err:
        conn.alter_table("db.t", set_options={**option, "table.log.ttl": "3 d"})
    assert next(iter(option)) in str(err.value)
    assert conn.get_table_info("db.t") == before and _tree(root) == tree
    assert fl.connect(root).get_table_info("db.t").options["table.log.ttl"] == "2 d"


@pytest.mark.parametrize(("kwargs", "words"), [
    (dict(schema={"k": "STRING", "v": "INT"}, primary_key=["k"],
          options={"client.writer.bucket.no-key-assigner": "round_robin"}), ("without a bucket key", "['k']")),
    (dict(schema={"k": "STRING", "v": "INT"}, bucket_keys=["k"], bucket_num=2,
          options={"client.writer.bucket.no-key-assigner": "round_robin"}), ("without a bucket key",)),
    (dict(schema={"k": "STRING"}, options={"lookup.insert-if-not-exists": "true"}), ("log table", "primary key")),
], ids=["no-key-assigner-on-pk-table", "no-key-assigner-with-bucket-key", "insert-if-not-exists-on-log-table"])
def test_options_without_effect_on_this_kind_of_table_are_refused(conn: fl.Connection, root: Path, kwargs: dict,
                                                                 words: tuple[str, ...]) -> None:
    before = _tree(root)
    with pytest.raises(InvalidConfigError) as err:
        conn.create_table("db.t", **kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)
    assert _tree(root) == before


def test_keys_outside_flusss_namespaces_stay_custom_properties(conn: fl.Connection) -> None:
    custom = {"owner": "team-a", "connector": "fluss", "bootstrap.servers": "x:9123", "my.table.note": "keep",
              "tables.count": "3"}
    info = conn.create_table("db.t", **PK, options=custom)
    assert {k: info.options[k] for k in custom} == custom
    assert info.ignored_options() == {}


def test_implemented_namespaced_options_are_accepted(conn: fl.Connection) -> None:
    info = conn.create_table("db.t", **PK, options={
        "table.kv.format": "COMPACTED", "table.datalake.format": "ICEBERG", "auto-increment.fields": "n",
        "table.auto-increment.cache-size": 10, "lookup.insert-if-not-exists": True})
    assert info.options["table.kv.format"] == "compacted" and info.options["table.datalake.format"] == "iceberg"
    assert info.options["lookup.insert-if-not-exists"] == "true"
    assert info.schema.auto_increment_columns == ("n",) and info.auto_increment_cache_size == 10


def test_lookup_insert_if_not_exists_is_alterable(conn: fl.Connection, root: Path) -> None:
    conn.create_table("db.t", **PK)
    assert conn.alter_table("db.t", set_options={"lookup.insert-if-not-exists": "TRUE"}).options[
        "lookup.insert-if-not-exists"] == "true"
    assert "lookup.insert-if-not-exists" not in conn.alter_table(
        "db.t", reset_options=["lookup.insert-if-not-exists"]).options


def test_connect_refuses_a_lake_format_other_than_iceberg(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="'lance' is not supported by fluss-lake.*'iceberg'"):
        fl.connect(tmp_path / "s", datalake_format="lance")
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------------------------- older tables
LEGACY = {"table.datalake.format": "lance", "table.replication.factor": "3", "table.kv.format": "indexed",
          "auto-increment.fields": "n", "table.auto-increment.cache-size": "7", "lookup.cache": "partial"}


def _legacy_table(conn: fl.Connection, root: Path) -> None:
    """A table as an earlier version stored it: options it accepted then (custom properties and ignored keys),
    no auto-increment column in the schema."""
    conn.create_table("db.old", **PK, options={"table.log.ttl": "2 d"})
    key = root / layout.meta_key("db", "old", 0)
    stored = json.loads(key.read_text())
    stored["options"].update(LEGACY)
    key.write_text(json.dumps(stored))


def test_an_older_table_with_ignored_options_opens_and_says_so_once(conn: fl.Connection, root: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    _legacy_table(conn, root)
    caplog.set_level(logging.WARNING, logger="fluss_lake.catalog")
    other = fl.connect(root)
    table = other.get_table("db.old")
    assert set(table.info.ignored_options()) == set(LEGACY)
    said = [r.getMessage() for r in caplog.records if r.name == "fluss_lake.catalog" and "db.old" in r.getMessage()]
    assert sorted(m.split(" option ")[1].split("=")[0] for m in said) == sorted(LEGACY)
    assert all("ignored" in m and "reset_options" in m for m in said)
    caplog.clear()
    fl.connect(root).get_table_info("db.old")
    assert not [r for r in caplog.records if r.name == "fluss_lake.catalog" and "db.old" in r.getMessage()]  # once
    # it works as a table without those options: no auto-increment numbering, rows as written
    table.upsert([{"k": "a", "v": 1, "n": 42}])
    assert table.to_polars().to_dicts() == [{"k": "a", "v": 1, "n": 42}]
    assert table.info.auto_increment_column is None


def test_an_older_table_can_be_altered_and_its_ignored_options_reset(conn: fl.Connection, root: Path) -> None:
    _legacy_table(conn, root)
    info = conn.alter_table("db.old", set_options={"table.log.ttl": "3 d"}, add_columns={"x": "STRING"})
    assert info.options["table.log.ttl"] == "3 d" and info.schema.names[-1] == "x"
    assert {k: info.options[k] for k in LEGACY} == LEGACY  # kept as they were, still ignored
    info = conn.alter_table("db.old", reset_options=["table.replication.factor", "auto-increment.fields"])
    assert "table.replication.factor" not in info.options and "auto-increment.fields" not in info.options
    assert info.schema.auto_increment_columns == ()
    with pytest.raises(InvalidConfigError, match="table.replication.factor"):  # setting it again is refused
        conn.alter_table("db.old", set_options={"table.replication.factor": "2"})
    with pytest.raises(InvalidAlterError, match="cannot be altered"):  # a key it implements stays non-alterable
        conn.alter_table("db.old", reset_options=["bucket.num"])
    assert fl.connect(root).get_table_info("db.old") == conn.get_table_info("db.old")
