"""Table descriptors (what a user asks for) and table infos (what the store keeps), validated as Fluss does."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import InvalidConfigError, InvalidTableError
from fluss_lake.metadata.auto_partition import TIME_ZONE, AutoPartitionStrategy
from fluss_lake.metadata.partition import PARTITION_KEY_TYPES, is_partition_key_type
from fluss_lake.metadata.schema import Schema
from fluss_lake.metadata.table_path import TablePath
from fluss_lake.metadata.types import KEY_UNSUPPORTED, is_key_supported

__all__ = ["TableDescriptor", "TableInfo"]

STATS_TYPES = (
    pl.Boolean,
    pl.Int8,
    pl.Int16,
    pl.Int32,
    pl.Int64,
    pl.Float32,
    pl.Float64,
    pl.String,
    pl.Decimal,
    pl.Date,
    pl.Time,
    pl.Datetime,
)


@dataclass(frozen=True, slots=True)
class TableDescriptor:
    """What to create: schema, buckets and Fluss options.

    Examples
    --------
    >>> d = TableDescriptor(Schema.of({"id": "INT", "v": "STRING"}, primary_key=["id"]), bucket_num=4)
    >>> d.is_primary_key_table, d.resolved_bucket_keys()
    (True, ('id',))
    """

    schema: Schema
    bucket_num: int | None = None
    bucket_keys: tuple[str, ...] | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    comment: str | None = None
    partition_keys: tuple[str, ...] = ()

    @property
    def is_primary_key_table(self) -> bool:
        """Whether the table has a primary key (upserts, deletes, changelog) rather than append-only rows."""
        return bool(self.schema.primary_key)

    @property
    def is_partitioned(self) -> bool:
        """Whether rows are split into partitions by the values of `partition_keys`."""
        return bool(self.partition_keys)

    def physical_primary_key(self) -> tuple[str, ...]:
        """The primary key without the partition columns (what identifies a row inside its partition)."""
        return tuple(k for k in self.schema.primary_key if k not in self.partition_keys)

    def resolved_bucket_keys(self) -> tuple[str, ...]:
        """The bucket key: as given (``bucket.key``), else the primary key minus partition columns, else none."""
        if self.bucket_keys is not None:
            return tuple(self.bucket_keys)
        if opt.BUCKET_KEY in self.options:
            return tuple(k.strip() for k in self.options[opt.BUCKET_KEY].split(",") if k.strip())
        return self.physical_primary_key()

    def validated(self) -> TableDescriptor:
        """Check every Fluss rule and return the descriptor with normalized options and defaults filled in."""
        options = opt.normalize_options(self.options)
        if (
            self.bucket_num is not None
            and opt.BUCKET_NUM in options
            and int(options[opt.BUCKET_NUM]) != self.bucket_num
        ):
            raise InvalidConfigError(
                f"bucket_num={self.bucket_num} disagrees with option {opt.BUCKET_NUM}="
                f"{options[opt.BUCKET_NUM]!r}; give the bucket count once"
            )
        if self.bucket_keys is not None and opt.BUCKET_KEY in options:
            from_option = tuple(k.strip() for k in options[opt.BUCKET_KEY].split(",") if k.strip())
            if from_option != tuple(self.bucket_keys):
                raise InvalidConfigError(
                    f"bucket_keys={list(self.bucket_keys)} disagrees with option {opt.BUCKET_KEY}="
                    f"{options[opt.BUCKET_KEY]!r}; give the bucket key once"
                )
        schema, pk = self.schema, self.schema.primary_key
        names = set(schema.names)
        bucket_num = (
            self.bucket_num if self.bucket_num is not None else int(options.get(opt.BUCKET_NUM, opt.DEFAULT_BUCKET_NUM))
        )
        if not isinstance(bucket_num, int) or not 1 <= bucket_num <= opt.MAX_BUCKET_NUM:
            raise InvalidConfigError(
                f"{opt.BUCKET_NUM}={bucket_num!r} must be an integer from 1 to {opt.MAX_BUCKET_NUM}"
            )
        bucket_keys = self.resolved_bucket_keys()
        for key in bucket_keys:
            if key not in names:
                raise InvalidTableError(f"bucket key column {key!r} is not in the schema {sorted(names)}")
        if len(set(bucket_keys)) != len(bucket_keys):
            raise InvalidTableError(f"bucket key {list(bucket_keys)} names a column twice")
        for key in (*pk, *bucket_keys):
            if not is_key_supported(schema.column(key).dtype):
                raise InvalidTableError(
                    f"column {key!r} of type {schema.column(key).type_name} cannot be a "
                    f"primary-key or bucket-key column ({KEY_UNSUPPORTED} are not allowed)"
                )
        if pk and not set(bucket_keys) <= set(pk):
            raise InvalidTableError(f"bucket key {list(bucket_keys)} must be a subset of the primary key {list(pk)}")
        if options.get(opt.LOG_FORMAT, "arrow") != "arrow":
            raise InvalidConfigError(
                f"{opt.LOG_FORMAT}={options[opt.LOG_FORMAT]!r}: only 'ARROW' logs are implemented; drop the option"
            )
        level = options.get(opt.LOG_ZSTD_LEVEL)
        if level is not None and not (level.isdigit() and 1 <= int(level) <= 22):
            raise InvalidConfigError(f"{opt.LOG_ZSTD_LEVEL}={level!r} must be an integer from 1 to 22")
        lake_format = options.get(opt.DATALAKE_FORMAT)  # only 'iceberg' passes normalize_options
        if lake_format == "iceberg" and len(bucket_keys) > 1:
            raise InvalidConfigError(
                f"an Iceberg-format table buckets by exactly one column; set {opt.BUCKET_KEY} "
                f"to one of {list(bucket_keys)}"
            )
        self._validate_partitioning(options, bucket_keys)
        if "table.kv.ttl" in options:
            if not pk:
                raise InvalidConfigError("table.kv.ttl expires primary-key rows; a log table uses table.log.ttl")
            if opt.parse_duration_ms("table.kv.ttl", options["table.kv.ttl"]) <= 0:
                raise InvalidConfigError(
                    "table.kv.ttl must be a positive duration such as '7 d'; leave it unset to keep rows forever"
                )
        for problem in _misplaced_options(options, bool(pk), bucket_keys).values():
            raise InvalidConfigError(problem)
        schema = self._auto_increment_schema(options)
        options = self._validate_pk_options(options) if pk else self._validate_log_options(options)
        options[opt.BUCKET_NUM] = str(bucket_num)
        if bucket_keys:
            options[opt.BUCKET_KEY] = ",".join(bucket_keys)
        return dataclasses.replace(self, schema=schema, bucket_num=bucket_num, bucket_keys=bucket_keys, options=options)

    def _auto_increment_schema(self, options: dict[str, str]) -> Schema:
        """The schema with its auto-increment column (Fluss's ``Schema.normalizeColumns`` rules), which
        ``auto-increment.fields`` names (the option is written in when only the schema names it).

        One INT or BIGINT column of a primary-key table, outside the primary key; its values are assigned, so the
        versioned engine may not compare them and the aggregation engine may not aggregate them.
        """
        schema = self.schema
        named, declared = opt.auto_increment_columns(options), schema.auto_increment_columns
        if not named and not declared:
            if opt.AUTO_INCREMENT_CACHE_SIZE in options:
                raise InvalidConfigError(
                    f"{opt.AUTO_INCREMENT_CACHE_SIZE} sizes the value ranges of an auto-increment column; name the "
                    f"column with {opt.AUTO_INCREMENT_FIELDS} or drop the option"
                )
            return schema
        if named and declared and named != declared:
            raise InvalidConfigError(
                f"{opt.AUTO_INCREMENT_FIELDS}={options[opt.AUTO_INCREMENT_FIELDS]!r} disagrees with the schema's "
                f"auto-increment column {list(declared)}; name it once"
            )
        columns = named or declared
        where = f"{opt.AUTO_INCREMENT_FIELDS}={','.join(columns)!r}"
        if not schema.primary_key:
            raise InvalidConfigError(
                f"{where}: an auto-increment column can only be used in a primary-key table; declare a primary key "
                "or drop the option"
            )
        if len(columns) != 1 or not columns[0]:
            raise InvalidConfigError(f"{where}: a table can have only one auto-increment column; name one")
        name = columns[0]
        if name not in schema.names:
            raise InvalidConfigError(f"{where}: column {name!r} does not exist; columns are {list(schema.names)}")
        if name in schema.primary_key:
            raise InvalidConfigError(
                f"{where}: the auto-increment column cannot be part of the primary key {list(schema.primary_key)}; "
                "use another column (e.g. key by the raw id and let the column number it)"
            )
        if not isinstance(schema.column(name).dtype, pl.Int32 | pl.Int64):
            raise InvalidConfigError(
                f"{where}: the auto-increment column must be INT or BIGINT, not {schema.column(name).type_name}"
            )
        if options.get(opt.VERSIONED_VER_COLUMN) == name:
            raise InvalidConfigError(
                f"{where}: the auto-increment column cannot be the version column of the versioned merge engine "
                "(its values are assigned, not written); choose another version column"
            )
        if name in opt.field_options(options):
            raise InvalidConfigError(
                f"{where}: the auto-increment column keeps the value assigned on insert and cannot be aggregated; "
                f"drop the 'fields.{name}.*' options"
            )
        options[opt.AUTO_INCREMENT_FIELDS] = name
        return dataclasses.replace(schema, auto_increment_columns=(name,))

    def _validate_partitioning(self, options: dict[str, str], bucket_keys: tuple[str, ...]) -> None:
        """Fluss's partition rules (``TableDescriptorValidation.checkPartition``) and the auto-partition options."""
        keys, schema = tuple(self.partition_keys), self.schema
        if keys:
            if len(set(keys)) != len(keys):
                raise InvalidTableError(f"partition keys {list(keys)} name a column twice")
            for key in keys:
                if key not in schema.names:
                    raise InvalidTableError(f"partition key {key!r} is not a column of {list(schema.names)}")
                if not is_partition_key_type(schema.column(key).dtype):
                    raise InvalidTableError(
                        f"partition key {key!r} has type {schema.column(key).type_name}; partition "
                        f"keys must be one of {', '.join(PARTITION_KEY_TYPES)}"
                    )
            pk = schema.primary_key
            if pk and not set(keys) <= set(pk):
                raise InvalidTableError(
                    f"partition keys {list(keys)} must be part of the primary key {list(pk)} "
                    "(each key then lives in exactly one partition)"
                )
            if pk and set(pk) == set(keys):
                raise InvalidTableError(
                    f"the primary key {list(pk)} must not consist of the partition keys only; add "
                    "the column(s) that identify a row inside a partition"
                )
            overlap = [k for k in bucket_keys if k in keys]
            if overlap:
                raise InvalidTableError(
                    f"bucket key {list(bucket_keys)} must not include partition keys {overlap}: "
                    "every row of a partition has the same value there"
                )
        strategy = AutoPartitionStrategy.from_options(options, keys, {c.name: c.dtype for c in schema.columns})
        if strategy is not None and TIME_ZONE not in options:
            options[TIME_ZONE] = strategy.time_zone  # fixed at creation, like Fluss's coordinator defaults

    def _validate_log_options(self, options: dict[str, str]) -> dict[str, str]:
        """Rules for log tables: statistics columns must exist and be supported (merge options: ``kv.merge``)."""
        stats = options.get(opt.STATISTICS_COLUMNS)
        if stats is not None and stats.strip() != "*":
            for name in (s.strip() for s in stats.split(",") if s.strip()):
                if name not in self.schema.names:
                    raise InvalidConfigError(f"{opt.STATISTICS_COLUMNS} names unknown column {name!r}")
                if not isinstance(self.schema.column(name).dtype, STATS_TYPES):
                    raise InvalidConfigError(
                        f"{opt.STATISTICS_COLUMNS}: column {name!r} of type "
                        f"{self.schema.column(name).type_name} has no statistics support"
                    )
        return options

    def _validate_pk_options(self, options: dict[str, str]) -> dict[str, str]:
        """Rules for primary-key tables that need no merge engine (the engine's own: ``kv.merge``)."""
        if opt.STATISTICS_COLUMNS in options:
            raise InvalidConfigError(f"{opt.STATISTICS_COLUMNS} is only allowed on log tables")
        return options


def _misplaced_options(options: Mapping[str, str], primary_key: bool, bucket_keys: tuple[str, ...]) -> dict[str, str]:
    """Options that have no effect on this kind of table (so they are refused rather than ignored)."""
    found = {}
    if opt.NO_KEY_ASSIGNER in options and bucket_keys:
        found[opt.NO_KEY_ASSIGNER] = (
            f"{opt.NO_KEY_ASSIGNER} picks buckets for tables without a bucket key; this table buckets rows by "
            f"{list(bucket_keys)}, drop the option"
        )
    if opt.LOOKUP_INSERT_IF_NOT_EXISTS in options and not primary_key:
        found[opt.LOOKUP_INSERT_IF_NOT_EXISTS] = (
            f"{opt.LOOKUP_INSERT_IF_NOT_EXISTS} inserts the keys a lookup misses; a log table has no lookups, "
            "declare a primary key or drop the option"
        )
    return found


@dataclass(frozen=True, slots=True)
class TableInfo:
    """A created table as the store keeps it: id, path, validated descriptor and timestamps."""

    table_id: str
    path: TablePath
    descriptor: TableDescriptor
    created_ms: int
    modified_ms: int
    #: Every object of this table carries a checksum (created by a version that seals them; see
    #: :mod:`fluss_lake.io.checksum`): an object without one is damaged. Tables from earlier versions read unverified.
    checksums: bool = False
    #: Log compaction leaves batches younger than this alone, and every process re-lists a log whose view is older
    #: than half of it: one value per table, shared by every process (None: created before it was recorded).
    log_compaction_grace_ms: int | None = None

    @property
    def schema(self) -> Schema:
        """The current schema."""
        return self.descriptor.schema

    @property
    def options(self) -> Mapping[str, str]:
        """Normalized options (defaults written in, as Fluss's coordinator does)."""
        return self.descriptor.options

    @property
    def bucket_num(self) -> int:
        """Number of buckets."""
        return int(self.descriptor.bucket_num or 1)

    @property
    def bucket_keys(self) -> tuple[str, ...]:
        """Bucket key columns (empty for a log table without one)."""
        return tuple(self.descriptor.bucket_keys or ())

    @property
    def is_primary_key_table(self) -> bool:
        """Whether the table has a primary key."""
        return self.descriptor.is_primary_key_table

    @property
    def partition_keys(self) -> tuple[str, ...]:
        """Partition key columns (empty for an unpartitioned table)."""
        return tuple(self.descriptor.partition_keys)

    @property
    def prefix_key(self) -> tuple[str, ...]:
        """The bucket key when it is a strict leading prefix of the primary key inside a partition (then prefix
        lookups work), else ``()``."""
        pk, bk = self.descriptor.physical_primary_key(), self.bucket_keys
        return bk if pk and len(bk) < len(pk) and tuple(pk[: len(bk)]) == bk else ()

    @property
    def auto_increment_column(self) -> str | None:
        """The column filled with the next auto-increment value when a key is inserted, or None."""
        columns = self.schema.auto_increment_columns
        return columns[0] if columns else None

    @property
    def auto_increment_cache_size(self) -> int:
        """How many auto-increment values a bucket takes at a time (``table.auto-increment.cache-size``)."""
        return int(self.options.get(opt.AUTO_INCREMENT_CACHE_SIZE, opt.DEFAULT_AUTO_INCREMENT_CACHE_SIZE))

    def ignored_options(self) -> dict[str, str]:
        """Options this table holds that fluss-lake ignores, with why: a table created by an earlier version may
        hold a Fluss option (or value) that is refused today; it still opens and the option has no effect.

        Examples
        --------
        >>> info = TableInfo.from_json({**TableInfo.new(TablePath("d", "t"), TableDescriptor(
        ...     Schema.of({"id": "INT"}, primary_key=["id"])).validated()).to_json(),
        ...     "options": {"bucket.num": "1", "table.replication.factor": "3"}})
        >>> list(info.ignored_options())
        ['table.replication.factor']
        """
        found = {}
        for key, value in self.options.items():
            problem = opt.option_problem(key, value)
            if problem is not None:
                found[key] = problem
        for key, problem in _misplaced_options(self.options, self.is_primary_key_table, self.bucket_keys).items():
            found[key] = problem
        if not self.schema.auto_increment_columns:
            for key in (opt.AUTO_INCREMENT_FIELDS, opt.AUTO_INCREMENT_CACHE_SIZE):
                if key in self.options:
                    found[key] = (
                        f"{key!r} was stored as a plain property when this table was created (fluss-lake did not "
                        "implement auto-increment columns then); re-create the table to get one"
                    )
        return found

    @property
    def log_compression(self) -> tuple[str | None, int | None]:
        """``table.log.arrow.compression.type`` and its zstd level (3 unless set; None for other codecs)."""
        codec = self.options.get(opt.LOG_COMPRESSION, "zstd")
        level = self.options.get(opt.LOG_ZSTD_LEVEL)
        return codec, int(level) if level else (3 if codec == "zstd" else None)

    @classmethod
    def new(cls, path: TablePath, descriptor: TableDescriptor, *, log_compaction_grace_ms: int = 600_000) -> TableInfo:
        """A fresh table id and timestamps for a validated descriptor."""
        now = int(time.time() * 1000)
        return cls(
            uuid.uuid4().hex,
            path,
            descriptor,
            now,
            now,
            checksums=True,
            log_compaction_grace_ms=log_compaction_grace_ms,
        )

    def to_json(self) -> dict:
        """Serializable form, stored as one immutable version file per change."""
        d = self.descriptor
        return {
            "table_id": self.table_id,
            "database": self.path.database,
            "table": self.path.table,
            "schema": d.schema.to_json(),
            "bucket_num": d.bucket_num,
            "bucket_keys": list(d.bucket_keys or ()),
            "options": dict(d.options),
            "comment": d.comment,
            "partition_keys": list(d.partition_keys),
            "created_ms": self.created_ms,
            "modified_ms": self.modified_ms,
            "checksums": self.checksums,
            "log_compaction_grace_ms": self.log_compaction_grace_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> TableInfo:
        """Inverse of :meth:`to_json`."""
        descriptor = TableDescriptor(
            Schema.from_json(data["schema"]),
            data["bucket_num"],
            tuple(data["bucket_keys"]),
            dict(data["options"]),
            data.get("comment"),
            tuple(data.get("partition_keys", ())),
        )
        return cls(
            data["table_id"],
            TablePath(data["database"], data["table"]),
            descriptor,
            data["created_ms"],
            data["modified_ms"],
            bool(data.get("checksums", False)),
            data.get("log_compaction_grace_ms"),
        )
