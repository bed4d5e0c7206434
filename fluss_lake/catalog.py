"""The catalog: databases, tables and partitions kept as small immutable JSON objects in the store.

Creating a table is an atomic create of its first metadata version; each ALTER adds the next version with the
same primitive, so concurrent admins in many processes never overwrite each other. The catalog holds no table
state: :class:`~fluss_lake.connection.Connection` puts the admin verbs in front of it, and a table's runtime
lists, creates and checks its partitions through it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from fluss_lake import options as opt
from fluss_lake.exceptions import (
    DatabaseAlreadyExistError,
    DatabaseNotExistError,
    InvalidAlterError,
    InvalidPartitionError,
    PartitionAlreadyExistError,
    PartitionNotExistError,
    TableAlreadyExistError,
    TableNotExistError,
    TooManyPartitionsError,
    UnsupportedOperationError,
)
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted, dumps_json, loads_json
from fluss_lake.io.store import ObjectStore
from fluss_lake.keys.bucketing import check_bucket_key_types
from fluss_lake.kv.merge import check_merge_options, default_delete_behavior
from fluss_lake.metadata.auto_partition import AutoPartitionStrategy
from fluss_lake.metadata.descriptor import TableDescriptor, TableInfo
from fluss_lake.metadata.partition import PartitionInfo, spec_of
from fluss_lake.metadata.table_path import TablePath, check_name
from fluss_lake.metadata.types import DataTypeLike

__all__ = ["Catalog", "data_prefix"]

_log = logging.getLogger(__name__)
#: (table id, option key) pairs already reported as ignored by this process: each is said once.
_reported_ignored: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def report_ignored_options(info: TableInfo) -> None:
    """Log once per process and table each option an earlier version stored that fluss-lake ignores."""
    ignored = info.ignored_options()
    if not ignored:
        return
    with _reported_lock:
        fresh = {k: v for k, v in ignored.items() if (info.table_id, k) not in _reported_ignored}
        _reported_ignored.update((info.table_id, k) for k in fresh)
    for key, why in fresh.items():
        _log.warning(
            "table %s: option %s=%r is ignored: %s. It was accepted by an earlier fluss-lake version; "
            "alter_table(reset_options=[%r]) removes it",
            info.path,
            key,
            info.options[key],
            why,
            key,
        )


def data_prefix(info: TableInfo, partition: PartitionInfo | None = None) -> str:
    """Where the log and state of a table (or of one of its partitions) live in the store."""
    data = layout.table_data(info.path.database, info.path.table, info.table_id)
    return data if partition is None else layout.partition_data(data, partition.partition_id)


def validate_descriptor(descriptor: TableDescriptor) -> TableDescriptor:
    """Every rule a new or altered table must meet (the descriptor's own, its bucket key's and its merge engine's),
    with the engine's default ``table.delete.behavior`` written in, as Fluss's coordinator does."""
    checked = descriptor.validated()
    check_bucket_key_types(checked)
    check_merge_options(checked)
    if checked.is_primary_key_table and opt.DELETE_BEHAVIOR not in checked.options:
        default = default_delete_behavior(checked.options.get(opt.MERGE_ENGINE))
        checked = dataclasses.replace(checked, options={**checked.options, opt.DELETE_BEHAVIOR: default})
    return checked


class Catalog:
    """Databases, tables and partitions of one store.

    Examples
    --------
    >>> import tempfile
    >>> from fluss_lake.io.store import open_store
    >>> catalog = Catalog(open_store(tempfile.mkdtemp()), clock=lambda: 0)
    >>> catalog.create_database("shop"); catalog.list_databases()
    ['shop']
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Callable[[], int],
        max_partition_num: int = 1000,
        default_lake_format: str | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.max_partition_num = max_partition_num
        self.default_lake_format = default_lake_format

    # ------------------------------------------------------------ databases
    def create_database(self, name: str, *, ignore_if_exists: bool = False, comment: str | None = None) -> None:
        """Create a database."""
        check_name("database", name)
        body = dumps_json({"name": name, "comment": comment, "created_ms": self.clock()})
        if not self.store.put_if_absent(layout.database_marker(name), body) and not ignore_if_exists:
            raise DatabaseAlreadyExistError(f"database {name!r} exists already; pass ignore_if_exists=True to reuse it")

    def database_exists(self, name: str) -> bool:
        """Whether the database exists."""
        check_name("database", name)
        return self.store.exists(layout.database_marker(name))

    def list_databases(self) -> list[str]:
        """Database names, sorted."""
        return [
            n for n in self.store.list("") if not n.startswith(".") and self.store.exists(layout.database_marker(n))
        ]

    def require_database(self, name: str) -> None:
        """Raise DatabaseNotExistError unless the database exists."""
        if not self.database_exists(name):
            raise DatabaseNotExistError(f"database {name!r} does not exist; create it with create_database({name!r})")

    def drop_database(self, name: str) -> None:
        """Delete a database's objects (its tables must be dropped first)."""
        self.store.delete_prefix(name)

    # ------------------------------------------------------------ tables
    def list_tables(self, database: str) -> list[str]:
        """Table names of a database, sorted."""
        self.require_database(database)
        return [
            n
            for n in self.store.list(database)
            if n != layout.DATABASE_MARKER and not n.startswith(".") and self._versions(TablePath(database, n))
        ]

    def _versions(self, path: TablePath) -> list[int]:
        """Metadata version numbers of a table, ascending."""
        return self._listing(path)[0]

    def _listing(self, path: TablePath) -> tuple[list[int], bool]:
        """Metadata version numbers of a table, ascending, and whether its newest-version record exists."""
        names = self.store.list(layout.meta_folder(path.database, path.table))
        found = (layout.meta_version(n) for n in names)
        return sorted(v for v in found if v is not None), layout.META_LATEST in names

    def _record_latest(self, path: TablePath, version: int) -> None:
        """Record the newest metadata version after writing it (a later lower record only weakens the check)."""
        self.store.put(layout.meta_latest(path.database, path.table), dumps_json({"version": version}))

    def table_exists(self, path: TablePath) -> bool:
        """Whether the table exists."""
        return bool(self._versions(path))

    def create_table(
        self,
        path: TablePath,
        descriptor: TableDescriptor,
        *,
        ignore_if_exists: bool = False,
        log_compaction_grace_ms: int = 600_000,
    ) -> TableInfo:
        """Create a table from a descriptor (validated here, the store's lake format stamped on it)."""
        self.require_database(path.database)
        if self.default_lake_format and opt.DATALAKE_FORMAT not in descriptor.options:
            descriptor = dataclasses.replace(
                descriptor, options={**descriptor.options, opt.DATALAKE_FORMAT: self.default_lake_format}
            )
        info = TableInfo.new(path, validate_descriptor(descriptor), log_compaction_grace_ms=log_compaction_grace_ms)
        key = layout.meta_key(path.database, path.table, 0)
        if not self.store.put_if_absent(key, dumps_json({**info.to_json(), "version": 0})):
            if ignore_if_exists:
                return self.get_table_info(path)
            raise TableAlreadyExistError(f"table {path} exists already; pass ignore_if_exists=True or drop it first")
        self.store.put_if_absent(layout.table_marker(data_prefix(info)), info.table_id.encode())
        self._record_latest(path, 0)
        return info

    def check_table_alive(self, info: TableInfo) -> None:
        """Raise TableNotExistError if the table was dropped (or dropped and created anew) since `info` was read."""
        if not self.store.exists(layout.table_marker(data_prefix(info))):
            raise TableNotExistError(
                f"table {info.path} was dropped (or re-created) after this Table object was "
                "opened; get_table() it again"
            )

    def get_table_info(self, path: TablePath) -> TableInfo:
        """The table's current metadata."""
        versions, recorded = self._listing(path)
        if recorded:
            latest_key = layout.meta_latest(path.database, path.table)
            try:
                latest = int(loads_json(self.store.get(latest_key), key=latest_key, what="metadata record")["version"])
            except FileNotFoundError:
                latest = -1  # dropped meanwhile
            except (KeyError, TypeError, ValueError) as exc:
                raise corrupted(latest_key, f"it is not a metadata record ({exc})", what="metadata record") from exc
            if latest > (versions[-1] if versions else -1):
                raise corrupted(
                    layout.meta_key(path.database, path.table, latest),
                    f"metadata version {latest} of {path} was written but is missing"
                    + (f" (the newest present is {versions[-1]})" if versions else ""),
                    what="table metadata",
                )
        if not versions:
            raise TableNotExistError(f"table {path} does not exist; list_tables({path.database!r}) shows what does")
        key = layout.meta_key(path.database, path.table, versions[-1])
        data = loads_json(self.store.get(key), key=key, what="table metadata")
        if data.get("version", versions[-1]) != versions[-1]:  # versions of earlier releases do not say
            raise corrupted(
                key,
                f"it holds metadata version {data['version']}, not {versions[-1]} (versions swapped or renamed)",
                what="table metadata",
            )
        info = TableInfo.from_json(data)
        report_ignored_options(info)
        return info

    def drop_table(self, path: TablePath) -> None:
        """Delete a table with its log and state."""
        self.store.delete_prefix(layout.table_root(path.database, path.table))

    def alter_table(
        self,
        path: TablePath,
        *,
        add_columns: Mapping[str, DataTypeLike] | None = None,
        set_options: Mapping[str, object] | None = None,
        reset_options: Sequence[str] = (),
    ) -> TableInfo:
        """Add nullable columns at the end and/or change alterable options (Fluss's ALTER TABLE).

        An option an earlier version stored that fluss-lake ignores (:meth:`TableInfo.ignored_options`) may be
        reset (removed), whatever its key; it is kept as it is otherwise.
        """
        for _ in range(100):
            versions = self._versions(path)
            if not versions:
                raise TableNotExistError(f"table {path} does not exist")
            info = self.get_table_info(path)
            ignored = info.ignored_options()
            for key in [*(set_options or {}), *(k for k in reset_options if k not in ignored)]:
                opt.check_option_key(key)  # misspelt ("did you mean ...?") or a Fluss option we refuse
            for key in [*(set_options or {}), *(k for k in reset_options if k not in ignored)]:
                if key not in opt.ALTERABLE_OPTIONS:
                    raise InvalidAlterError(
                        f"option {key!r} cannot be altered after creation; alterable options are "
                        f"{sorted(opt.ALTERABLE_OPTIONS)}"
                    )
            schema = info.schema
            for name, dtype in (add_columns or {}).items():
                schema = schema.add_column(name, dtype)
            kept = {k: v for k, v in info.options.items() if k not in reset_options}
            legacy = {k: v for k, v in kept.items() if k in ignored}  # not validated again, kept as they are
            new_options = {k: v for k, v in kept.items() if k not in legacy}
            new_options.update(opt.normalize_options(set_options or {}))
            descriptor = validate_descriptor(dataclasses.replace(info.descriptor, schema=schema, options=new_options))
            if legacy:
                descriptor = dataclasses.replace(descriptor, options={**descriptor.options, **legacy})
            new_info = dataclasses.replace(info, descriptor=descriptor, modified_ms=self.clock())
            key = layout.meta_key(path.database, path.table, versions[-1] + 1)
            if self.store.put_if_absent(key, dumps_json({**new_info.to_json(), "version": versions[-1] + 1})):
                self._record_latest(path, versions[-1] + 1)
                return new_info
        raise InvalidAlterError(f"table {path} kept changing while altering it; try again")

    # ------------------------------------------------------------ partitions
    @staticmethod
    def _require_partitioned(info: TableInfo) -> None:
        if not info.partition_keys:
            raise UnsupportedOperationError(
                f"table {info.path} is not partitioned; partitions need partition_keys at creation"
            )

    def _get_or_none(self, key: str) -> bytes | None:
        try:
            return self.store.get(key)
        except FileNotFoundError:
            return None

    def list_partitions(self, info: TableInfo) -> list[PartitionInfo]:
        """The partitions of a partitioned table, by name."""
        self._require_partitioned(info)
        data = data_prefix(info)
        names = sorted(
            n[: -len(".json")] for n in self.store.list(layout.partitions_folder(data)) if n.endswith(".json")
        )
        found = []
        for name in names:
            key = layout.partition_record(data, name)
            body = self._get_or_none(key)
            if body is not None:
                found.append(PartitionInfo.from_json(loads_json(body, key=key, what="partition record")))
        if info.checksums:
            self._check_orphans(data, {p.partition_id for p in found})
        return found

    def _check_orphans(self, data: str, listed: set[str]) -> None:
        """A partition whose data is live (its marker says so) must have its record: one without lost it, and its
        rows would vanish from every read (a partition being created or dropped says so in its marker)."""
        stem = layout.partition_data(data, "").rsplit("/", 1)[-1]  # the folder name of a partition, before its id
        for name in self.store.list(data):
            if not name.startswith(stem) or name[len(stem) :] in listed:
                continue
            marker = layout.partition_marker(f"{data}/{name}")
            body = self._get_or_none(marker)
            if body is None or not body.startswith(b'{"_crc32c"'):
                continue  # gone meanwhile, or a marker of an earlier version (a plain id)
            state = loads_json(body, key=marker, what="partition marker")
            if state.get("state") == "live":
                raise corrupted(
                    layout.partition_record(data, str(state.get("name"))),
                    f"partition {state.get('name')!r} is missing its record while its data ({name}) is live: its "
                    "rows would vanish from every read",
                    what="partition record",
                    remedy="restore the record from a backup (or drop the partition's data folder to give up its rows)",
                )

    def get_partition(self, info: TableInfo, spec: str | Mapping[str, object]) -> PartitionInfo:
        """One partition by name (``"eu$20241111"``) or spec (``{"region": "eu", "day": "20241111"}``)."""
        self._require_partitioned(info)
        name = "$".join(spec_of(info.partition_keys, spec).values())
        key = layout.partition_record(data_prefix(info), name)
        body = self._get_or_none(key)
        if body is None:
            raise PartitionNotExistError(
                f"partition {name!r} of {info.path} does not exist; create_partition() it or "
                "write rows with those values (dynamic creation)"
            )
        return PartitionInfo.from_json(loads_json(body, key=key, what="partition record"))

    def create_partition(
        self,
        info: TableInfo,
        spec: str | Mapping[str, object],
        *,
        ignore_if_exists: bool = False,
        now_ms: int | None = None,
    ) -> PartitionInfo:
        """Create a partition (Fluss's ``ALTER TABLE ... ADD PARTITION``); rejects values past auto-partition
        retention."""
        self._require_partitioned(info)
        resolved = spec_of(info.partition_keys, spec)
        now = self.clock() if now_ms is None else now_ms
        partition = PartitionInfo.new(info.partition_keys, resolved, created_ms=now)
        strategy = AutoPartitionStrategy.from_options(
            info.options, info.partition_keys, {c.name: c.dtype for c in info.schema.columns}
        )
        if strategy is not None and strategy.enabled and strategy.is_expired(resolved[strategy.key], now):
            raise InvalidPartitionError(
                f"partition {partition.name!r} of {info.path} is past the auto-partition "
                f"retention (values below {strategy.cutoff(now)!r} are dropped); it cannot be "
                "created"
            )
        data = data_prefix(info)
        record = layout.partition_record(data, partition.name)
        existing = self._get_or_none(record)
        if existing is None and len(self.store.list(layout.partitions_folder(data))) >= self.max_partition_num:
            raise TooManyPartitionsError(
                f"{info.path} has {self.max_partition_num} partitions already "
                "(max_partition_num); drop old ones or raise the limit in connect()"
            )
        if existing is None:
            own = data_prefix(info, partition)
            marker = {"partition_id": partition.partition_id, "name": partition.name}
            self.store.put(layout.partition_marker(own), dumps_json({**marker, "state": "creating"}))
            if self.store.put_if_absent(record, dumps_json(partition.to_json())):
                self.store.put(layout.partition_marker(own), dumps_json({**marker, "state": "live"}))
                return partition
            self.store.delete_prefix(own)  # another process won the race
        if ignore_if_exists:
            return self.get_partition(info, partition.name)
        raise PartitionAlreadyExistError(
            f"partition {partition.name!r} of {info.path} exists already; pass ignore_if_exists=True to reuse it"
        )

    def drop_partition(self, info: TableInfo, partition: PartitionInfo) -> None:
        """Delete a partition with its log and state; no delete records are written (Fluss's DROP PARTITION)."""
        own = data_prefix(info, partition)
        if self.store.exists(layout.partition_marker(own)):  # a record gone before its data is then no damage
            marker = {"partition_id": partition.partition_id, "name": partition.name, "state": "dropping"}
            self.store.put(layout.partition_marker(own), dumps_json(marker))
        self.store.delete(layout.partition_record(data_prefix(info), partition.name))
        self.store.delete_prefix(data_prefix(info, partition))

    def check_partition_alive(self, info: TableInfo, partition: PartitionInfo) -> None:
        """Raise PartitionNotExistError if the partition was dropped since `partition` was read."""
        if not self.store.exists(layout.partition_marker(data_prefix(info, partition))):
            raise PartitionNotExistError(
                f"partition {partition.name!r} of {info.path} was dropped after it was "
                "opened; write again to create it anew"
            )
