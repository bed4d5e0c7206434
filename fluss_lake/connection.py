"""Connections and the catalog: databases and tables kept as small immutable JSON objects in the store.

Creating a table is an atomic create of its first metadata version; each ALTER adds the next version with the
same primitive, so concurrent admins in many processes never overwrite each other.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fluss_lake import options as opt
from fluss_lake.exceptions import (DatabaseAlreadyExistError, DatabaseNotEmptyError, DatabaseNotExistError,
                                   InvalidAlterError, InvalidConfigError, InvalidPartitionError,
                                   PartitionAlreadyExistError, PartitionNotExistError, TableAlreadyExistError,
                                   TableNotExistError, TooManyPartitionsError, UnsupportedOperationError)
from fluss_lake.io.store import ObjectStore, open_store
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.metadata.partition import PartitionInfo, spec_of
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath, check_name
from fluss_lake.metadata.types import DataTypeLike

__all__ = ["Connection", "connect", "DEFAULT_URL_ENV"]

DEFAULT_URL_ENV = "FLUSS_LAKE_URL"
_DEFAULT_DIR = "fluss-lake-data"
_DB_MARKER = "_database.json"
_META = "_meta"
_PARTITIONS = "_partitions"


def _system_clock() -> int:
    """Wall clock in epoch milliseconds."""
    return int(time.time() * 1000)


class Connection:
    """A handle on a store: admin operations (databases, tables) and :class:`~fluss_lake.table.Table` objects.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp())
    >>> conn.create_database("shop")
    >>> conn.list_databases()
    ['shop']
    """

    def __init__(self, store: ObjectStore, *, local_dir: str | None = None, clock: Callable[[], int] | None = None,
                 snapshot_every: int = 1_000_000, dynamic_partition_creation: bool = True,
                 max_partition_num: int = 1000, log_compaction_grace_ms: int = 600_000) -> None:
        self.store = store
        self.log_compaction_grace_ms = log_compaction_grace_ms
        self.dynamic_partition_creation = dynamic_partition_creation
        self.max_partition_num = max_partition_num
        self.clock = clock or _system_clock
        self.snapshot_every = snapshot_every
        if local_dir is None:
            local_dir = tempfile.mkdtemp(prefix="fluss-lake-state-")
            atexit.register(shutil.rmtree, local_dir, True)
        self.local_dir = local_dir
        self._tables: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """Where the store lives."""
        return self.store.url

    # ------------------------------------------------------------ databases
    def create_database(self, name: str, *, ignore_if_exists: bool = False, comment: str | None = None) -> None:
        """Create a database."""
        check_name("database", name)
        body = json.dumps({"name": name, "comment": comment, "created_ms": self.clock()}).encode()
        if not self.store.put_if_absent(f"{name}/{_DB_MARKER}", body) and not ignore_if_exists:
            raise DatabaseAlreadyExistError(f"database {name!r} exists already; pass ignore_if_exists=True to reuse it")

    def database_exists(self, name: str) -> bool:
        """Whether the database exists."""
        check_name("database", name)
        return self.store.exists(f"{name}/{_DB_MARKER}")

    def list_databases(self) -> list[str]:
        """Database names, sorted."""
        return [n for n in self.store.list("") if not n.startswith(".") and self.store.exists(f"{n}/{_DB_MARKER}")]

    def drop_database(self, name: str, *, ignore_if_not_exists: bool = False, cascade: bool = False) -> None:
        """Drop a database (with its tables when `cascade`)."""
        if not self.database_exists(name):
            if ignore_if_not_exists:
                return
            raise DatabaseNotExistError(f"database {name!r} does not exist")
        tables = self.list_tables(name)
        if tables and not cascade:
            raise DatabaseNotEmptyError(f"database {name!r} still has tables {tables}; drop them or pass cascade=True")
        for table in tables:
            self.drop_table(TablePath(name, table), ignore_if_not_exists=True)
        self.store.delete_prefix(name)

    # ------------------------------------------------------------ tables
    def _require_database(self, name: str) -> None:
        if not self.database_exists(name):
            raise DatabaseNotExistError(f"database {name!r} does not exist; create it with create_database({name!r})")

    def list_tables(self, database: str) -> list[str]:
        """Table names of a database, sorted."""
        self._require_database(database)
        return [n for n in self.store.list(database) if n != _DB_MARKER and not n.startswith(".")
                and self._versions(TablePath(database, n))]

    def _versions(self, path: TablePath) -> list[int]:
        """Metadata version numbers of a table, ascending."""
        return sorted(int(n.split(".")[0][1:]) for n in self.store.list(f"{path.database}/{path.table}/{_META}")
                      if n.startswith("v") and n.endswith(".json"))

    def table_exists(self, path: str | TablePath) -> bool:
        """Whether the table exists."""
        return bool(self._versions(TablePath.of(path)))

    def create_table(self, path: str | TablePath, descriptor: TableDescriptor | None = None, *,
                     schema: Schema | Mapping[str, DataTypeLike] | None = None, primary_key: Sequence[str] = (),
                     bucket_num: int | None = None, bucket_keys: Sequence[str] | None = None,
                     options: Mapping[str, object] | None = None, comment: str | None = None,
                     partition_keys: Sequence[str] = (), ignore_if_exists: bool = False) -> TableInfo:
        """Create a table from a descriptor, or from `schema` + keyword options.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("shop")
        >>> info = conn.create_table("shop.orders", schema={"id": "BIGINT", "amount": "DOUBLE"},
        ...                          primary_key=["id"], bucket_num=4)
        >>> info.bucket_num, info.options["table.delete.behavior"]
        (4, 'allow')
        """
        path = TablePath.of(path)
        if descriptor is None:
            if schema is None:
                raise InvalidConfigError("create_table needs a TableDescriptor or a schema")
            built = schema if isinstance(schema, Schema) else Schema.of(schema, primary_key=primary_key)
            descriptor = TableDescriptor(built, bucket_num, tuple(bucket_keys) if bucket_keys is not None else None,
                                         dict(options or {}), comment, tuple(partition_keys))
        elif (schema is not None or primary_key or bucket_num is not None or bucket_keys is not None or options
              or comment is not None or partition_keys):
            raise InvalidConfigError("pass either a TableDescriptor or schema/primary_key/bucket_num/bucket_keys/"
                                     "options/comment/partition_keys keywords, not both")
        self._require_database(path.database)
        descriptor = descriptor.validated()
        if self.default_lake_format and opt.DATALAKE_FORMAT not in descriptor.options:
            descriptor = dataclasses.replace(descriptor, options={**descriptor.options,
                                                                  opt.DATALAKE_FORMAT: self.default_lake_format})
            descriptor = descriptor.validated()
        info = TableInfo.new(path, descriptor)
        if not self.store.put_if_absent(self._meta_key(path, 0), json.dumps(info.to_json()).encode()):
            if ignore_if_exists:
                return self.get_table_info(path)
            raise TableAlreadyExistError(f"table {path} exists already; pass ignore_if_exists=True or drop it first")
        self.store.put_if_absent(self.table_marker(info), info.table_id.encode())
        return info

    def table_marker(self, info: TableInfo) -> str:
        """An object that exists exactly while this incarnation of the table does (checked before commits)."""
        return f"{self.table_prefix(info)}/_table_id"

    def check_table_alive(self, info: TableInfo) -> None:
        """Raise TableNotExistError if the table was dropped (or dropped and created anew) since `info` was read."""
        if not self.store.exists(self.table_marker(info)):
            raise TableNotExistError(f"table {info.path} was dropped (or re-created) after this Table object was "
                                     "opened; get_table() it again")

    default_lake_format: str | None = None

    @staticmethod
    def _meta_key(path: TablePath, version: int) -> str:
        return f"{path.database}/{path.table}/{_META}/v{version:06d}.json"

    def get_table_info(self, path: str | TablePath) -> TableInfo:
        """The table's current metadata."""
        path = TablePath.of(path)
        versions = self._versions(path)
        if not versions:
            raise TableNotExistError(f"table {path} does not exist; list_tables({path.database!r}) shows what does")
        return TableInfo.from_json(json.loads(self.store.get(self._meta_key(path, versions[-1]))))

    def drop_table(self, path: str | TablePath, *, ignore_if_not_exists: bool = False) -> None:
        """Drop a table with its log and state."""
        path = TablePath.of(path)
        if not self.table_exists(path):
            if ignore_if_not_exists:
                return
            raise TableNotExistError(f"table {path} does not exist")
        info = self.get_table_info(path)
        self._tables.pop(info.table_id, None)
        self.store.delete_prefix(f"{path.database}/{path.table}")

    def alter_table(self, path: str | TablePath, *, add_columns: Mapping[str, DataTypeLike] | None = None,
                    set_options: Mapping[str, object] | None = None, reset_options: Sequence[str] = ()) -> TableInfo:
        """Add nullable columns at the end and/or change alterable options (Fluss's ALTER TABLE)."""
        path = TablePath.of(path)
        for key in [*(set_options or {}), *reset_options]:
            if key not in opt.ALTERABLE_OPTIONS:
                raise InvalidAlterError(f"option {key!r} cannot be altered after creation; alterable options are "
                                        f"{sorted(opt.ALTERABLE_OPTIONS)}")
        for _ in range(100):
            versions = self._versions(path)
            if not versions:
                raise TableNotExistError(f"table {path} does not exist")
            info = self.get_table_info(path)
            schema = info.schema
            for name, dtype in (add_columns or {}).items():
                schema = schema.add_column(name, dtype)
            new_options = {k: v for k, v in info.options.items() if k not in reset_options}
            new_options.update(opt.normalize_options(set_options or {}))
            descriptor = dataclasses.replace(info.descriptor, schema=schema, options=new_options).validated()
            new_info = dataclasses.replace(info, descriptor=descriptor, modified_ms=self.clock())
            if self.store.put_if_absent(self._meta_key(path, versions[-1] + 1), json.dumps(new_info.to_json()).encode()):
                cached = self._tables.get(info.table_id)
                if cached is not None:
                    cached._reload(new_info)
                return new_info
        raise InvalidAlterError(f"table {path} kept changing while altering it; try again")

    def get_table(self, path: str | TablePath):  # -> Table (import cycle avoided)
        """A :class:`~fluss_lake.table.Table` to write, scan and look up (one per table per connection)."""
        from fluss_lake.table import Table

        info = self.get_table_info(path)
        table = self._tables.get(info.table_id)
        if table is None:
            table = self._tables[info.table_id] = Table(self, info)
        elif table.info.descriptor != info.descriptor:
            table._reload(info)
        return table

    def table_prefix(self, info: TableInfo) -> str:
        """Where a table's log and state live in the store."""
        return f"{info.path.database}/{info.path.table}/data-{info.table_id}"

    # ------------------------------------------------------------ partitions
    def partition_prefix(self, info: TableInfo, partition: PartitionInfo) -> str:
        """Where one partition's log and state live (a fresh id per creation, so a re-created name starts empty)."""
        return f"{self.table_prefix(info)}/part-{partition.partition_id}"

    def partition_marker(self, info: TableInfo, partition: PartitionInfo) -> str:
        """An object that exists exactly while this incarnation of the partition does."""
        return f"{self.partition_prefix(info, partition)}/_partition_id"

    def _partition_key(self, info: TableInfo, name: str) -> str:
        return f"{self.table_prefix(info)}/{_PARTITIONS}/{name}.json"

    @staticmethod
    def _require_partitioned(info: TableInfo) -> None:
        if not info.partition_keys:
            raise UnsupportedOperationError(f"table {info.path} is not partitioned; partitions need partition_keys "
                                            "at creation")

    def _get_or_none(self, key: str) -> bytes | None:
        try:
            return self.store.get(key)
        except FileNotFoundError:
            return None

    def list_partitions(self, path: str | TablePath) -> list[PartitionInfo]:
        """The partitions of a partitioned table, by name."""
        info = self.get_table_info(path)
        self._require_partitioned(info)
        names = sorted(n[: -len(".json")] for n in self.store.list(f"{self.table_prefix(info)}/{_PARTITIONS}")
                       if n.endswith(".json"))
        found = []
        for name in names:
            body = self._get_or_none(self._partition_key(info, name))
            if body is not None:
                found.append(PartitionInfo.from_json(json.loads(body)))
        return found

    def get_partition(self, path: str | TablePath, spec: str | Mapping[str, object]) -> PartitionInfo:
        """One partition by name (``"eu$20241111"``) or spec (``{"region": "eu", "day": "20241111"}``)."""
        info = self.get_table_info(path)
        self._require_partitioned(info)
        name = "$".join(spec_of(info.partition_keys, spec).values())
        body = self._get_or_none(self._partition_key(info, name))
        if body is None:
            raise PartitionNotExistError(f"partition {name!r} of {info.path} does not exist; create_partition() it or "
                                         "write rows with those values (dynamic creation)")
        return PartitionInfo.from_json(json.loads(body))

    def create_partition(self, path: str | TablePath, spec: str | Mapping[str, object], *,
                         ignore_if_exists: bool = False, _now_ms: int | None = None) -> PartitionInfo:
        """Create a partition (Fluss's ``ALTER TABLE ... ADD PARTITION``); rejects values past auto-partition retention."""
        from fluss_lake.metadata.auto_partition import AutoPartitionStrategy

        info = self.get_table_info(path)
        self._require_partitioned(info)
        resolved = spec_of(info.partition_keys, spec)
        now = self.clock() if _now_ms is None else _now_ms
        partition = PartitionInfo.new(info.partition_keys, resolved, created_ms=now)
        strategy = AutoPartitionStrategy.from_options(info.options, info.partition_keys,
                                                      {c.name: c.dtype for c in info.schema.columns})
        if strategy is not None and strategy.enabled and strategy.is_expired(resolved[strategy.key], now):
            raise InvalidPartitionError(f"partition {partition.name!r} of {info.path} is past the auto-partition "
                                        f"retention (values below {strategy.cutoff(now)!r} are dropped); it cannot be "
                                        "created")
        existing = self._get_or_none(self._partition_key(info, partition.name))
        if existing is None and len(self.store.list(f"{self.table_prefix(info)}/{_PARTITIONS}")) >= self.max_partition_num:
            raise TooManyPartitionsError(f"{info.path} has {self.max_partition_num} partitions already "
                                         "(max_partition_num); drop old ones or raise the limit in connect()")
        if existing is None:
            self.store.put(self.partition_marker(info, partition), partition.partition_id.encode())
            if self.store.put_if_absent(self._partition_key(info, partition.name), json.dumps(partition.to_json()).encode()):
                return partition
            self.store.delete_prefix(self.partition_prefix(info, partition))  # another process won the race
        if ignore_if_exists:
            return self.get_partition(path, partition.name)
        raise PartitionAlreadyExistError(f"partition {partition.name!r} of {info.path} exists already; pass "
                                         "ignore_if_exists=True to reuse it")

    def drop_partition(self, path: str | TablePath, spec: str | Mapping[str, object], *,
                       ignore_if_not_exists: bool = False) -> None:
        """Drop a partition with its log and state; no delete records are written (Fluss's DROP PARTITION)."""
        info = self.get_table_info(path)
        try:
            partition = self.get_partition(path, spec)
        except PartitionNotExistError:
            if ignore_if_not_exists:
                return
            raise
        self.store.delete(self._partition_key(info, partition.name))
        self.store.delete_prefix(self.partition_prefix(info, partition))
        cached = self._tables.get(info.table_id)
        if cached is not None:
            cached._forget_partition(partition.name)

    def check_partition_alive(self, info: TableInfo, partition: PartitionInfo) -> None:
        """Raise PartitionNotExistError if the partition was dropped since `partition` was read."""
        if not self.store.exists(self.partition_marker(info, partition)):
            raise PartitionNotExistError(f"partition {partition.name!r} of {info.path} was dropped after it was "
                                         "opened; write again to create it anew")


def connect(url: str | os.PathLike | None = None, *, storage_options: Mapping[str, Any] | None = None,
            local_dir: str | None = None, clock: Callable[[], int] | None = None,
            datalake_format: str | None = None, snapshot_every: int = 1_000_000,
            dynamic_partition_creation: bool = True, max_partition_num: int = 1000,
            log_compaction_grace_ms: int = 600_000) -> Connection:
    """Open a store: a local folder by default, or ``s3://bucket/prefix`` with fsspec storage options.

    Parameters
    ----------
    url
        Local folder or fsspec URL; defaults to ``$FLUSS_LAKE_URL`` or ``./fluss-lake-data``.
    storage_options
        Passed to fsspec (for S3: ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``...), except
        ``call_timeout``: seconds one storage call may take (default 120, plus one second per MiB sent) before it
        fails with the retriable :class:`~fluss_lake.StorageUnavailableError`. Raise it for large state
        segments on slow links.
    local_dir
        Where primary-key state segments of a remote store are cached (default: a temporary folder).
    clock
        Epoch-millisecond clock used for commit timestamps (tests set one).
    datalake_format
        Cluster-level ``datalake.format`` stamped on new tables (``"iceberg"`` buckets like Iceberg).
    snapshot_every
        Take a state snapshot of a bucket once this many log offsets were applied since its last one (a new
        process restores the snapshot and replays at most about this many records). Also see
        :meth:`~fluss_lake.table.Table.snapshot`.
    dynamic_partition_creation
        Create missing partitions when rows for them are written (Fluss's
        ``client.writer.dynamic-create-partition.enabled``); when off such a write fails and changes nothing.
    max_partition_num
        Most partitions a table may have (Fluss's ``max.partition.num``).
    log_compaction_grace_ms
        :meth:`~fluss_lake.table.Table.compact_log` merges only batches older than this, and a process whose view
        of a log is older than half of it re-lists before committing; every process sharing a store must use the
        same value (default ten minutes).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> fl.connect(tempfile.mkdtemp()).list_databases()
    []
    """
    target = url if url is not None else os.environ.get(DEFAULT_URL_ENV, _DEFAULT_DIR)
    if datalake_format not in (None, "iceberg", "lance"):
        raise InvalidConfigError(f"datalake_format={datalake_format!r}: use 'iceberg' or None")
    connection = Connection(open_store(target, storage_options), local_dir=local_dir, clock=clock,
                            snapshot_every=snapshot_every, dynamic_partition_creation=dynamic_partition_creation,
                            max_partition_num=max_partition_num, log_compaction_grace_ms=log_compaction_grace_ms)
    connection.default_lake_format = datalake_format
    return connection
