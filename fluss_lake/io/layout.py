"""The store's key layout: where every object of a database, table, partition, bucket and job lives.

One definition of each key, so the catalog, the tablets, the jobs and tiering (which reads logs without opening a
table's state) agree. Keys are relative to the store's root; the layout is a file format: changing it makes
existing stores unreadable.

```
<db>/_database.json                              the database record
<db>/<table>/_meta/v000000.json ...              table metadata versions (ALTER adds the next)
<db>/<table>/_meta/_latest.json                  the newest version written (a lower one present lost the newest)
<db>/<table>/data-<table id>/                    one incarnation of the table (re-creating it starts anew)
    _table_id                                    exists while this incarnation does
    _partitions/<name>.json                      partition records
    part-<partition id>/                         one partition's data (same layout as the table's data)
        _partition_id
    log/b00000/...                               a bucket's log (Arrow IPC batches and segments)
    kv/b00000/{segments,snapshots}/...           a primary-key bucket's published state
    _auto_increment/c00001/r0000...0007.json     a claimed range of an auto-increment column (column id 1)
.jobs/<job name>/                                a job's checkpoints
    shards-<count>/<index>/ckpt-<n>.json         a shard's checkpoints (docs/SHARDS.md)
    shards-<count>/{write.lock,journal/}         its shards' result write lock and key journal (delta join)
    layouts/<generation>.json                    the shard count of each reassignment
```

Examples
--------
>>> table = table_data("shop", "orders", "abc")
>>> log_prefix(partition_data(table, "p1"), 3)
'shop/orders/data-abc/part-p1/log/b00003'
"""

from __future__ import annotations

__all__ = [
    "DATABASE_MARKER",
    "database_marker",
    "table_root",
    "meta_folder",
    "meta_key",
    "meta_latest",
    "META_LATEST",
    "meta_version",
    "table_data",
    "table_marker",
    "partitions_folder",
    "partition_record",
    "partition_data",
    "partition_marker",
    "log_prefix",
    "kv_prefix",
    "jobs_root",
    "job_prefix",
    "auto_increment_folder",
    "auto_increment_range",
    "auto_increment_range_index",
]

DATABASE_MARKER = "_database.json"
META_LATEST = "_latest.json"
_META = "_meta"
_PARTITIONS = "_partitions"
_JOBS = ".jobs"
_AUTO_INCREMENT = "_auto_increment"


def database_marker(database: str) -> str:
    """The object that makes a database exist."""
    return f"{database}/{DATABASE_MARKER}"


def table_root(database: str, table: str) -> str:
    """Everything of one table name: its metadata versions and each incarnation's data."""
    return f"{database}/{table}"


def meta_folder(database: str, table: str) -> str:
    """The folder of a table's metadata versions."""
    return f"{table_root(database, table)}/{_META}"


def meta_key(database: str, table: str, version: int) -> str:
    """Metadata version `version` of a table."""
    return f"{meta_folder(database, table)}/v{version:06d}.json"


def meta_latest(database: str, table: str) -> str:
    """The record of a table's newest metadata version (written after each version; a version below it that is
    missing was lost)."""
    return f"{meta_folder(database, table)}/{META_LATEST}"


def meta_version(name: str) -> int | None:
    """The version number of an object name in the metadata folder (None for other objects)."""
    if name.startswith("v") and name.endswith(".json"):
        return int(name[1:].split(".")[0])
    return None


def table_data(database: str, table: str, table_id: str) -> str:
    """The data of one incarnation of a table (its log, state and partitions)."""
    return f"{table_root(database, table)}/data-{table_id}"


def table_marker(data: str) -> str:
    """An object that exists exactly while this incarnation of the table does (checked before commits)."""
    return f"{data}/_table_id"


def partitions_folder(data: str) -> str:
    """The folder of a table's partition records."""
    return f"{data}/{_PARTITIONS}"


def partition_record(data: str, name: str) -> str:
    """The record of partition `name` of a table."""
    return f"{partitions_folder(data)}/{name}.json"


def partition_data(data: str, partition_id: str) -> str:
    """One partition's data (a fresh id per creation, so a re-created name starts empty)."""
    return f"{data}/part-{partition_id}"


def partition_marker(data: str) -> str:
    """An object that exists exactly while this incarnation of a partition does."""
    return f"{data}/_partition_id"


def log_prefix(data: str, bucket: int) -> str:
    """One bucket's log, under the data of a table or partition."""
    return f"{data}/log/b{bucket:05d}"


def kv_prefix(data: str, bucket: int) -> str:
    """One primary-key bucket's published state (segments and snapshots)."""
    return f"{data}/kv/b{bucket:05d}"


def jobs_root() -> str:
    """The folder of every job's checkpoints."""
    return _JOBS


def job_prefix(name: str) -> str:
    """One job's checkpoints and attachments."""
    return f"{_JOBS}/{name}"


def auto_increment_folder(data: str, column_id: int) -> str:
    """The claimed value ranges of a table's auto-increment column (one table-wide sequence, as in Fluss)."""
    return f"{data}/{_AUTO_INCREMENT}/c{column_id:05d}"


def auto_increment_range(folder: str, index: int) -> str:
    """The claim of range `index` of an auto-increment column (created once, by the bucket that gets it)."""
    return f"{folder}/r{index:020d}.json"


def auto_increment_range_index(name: str) -> int | None:
    """The range index of an object name in an auto-increment folder (None for other objects)."""
    if name.startswith("r") and name.endswith(".json") and name[1:-5].isdigit():
        return int(name[1:-5])
    return None
