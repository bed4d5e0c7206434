"""Table schemas: ordered, typed, nullable columns with stable column ids; only ADD COLUMN evolves them."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import InvalidAlterError, InvalidNameError, InvalidTableError
from fluss_lake.metadata.types import (
    DataTypeLike,
    arrow_type_name,
    declare,
    fluss_type_name,
    has_inner_not_null,
)

__all__ = ["Column", "Schema", "RESERVED_COLUMNS"]

#: Column names Fluss reserves for system columns (``TableDescriptorValidation.checkSystemColumns``), plus the
#: system columns our scans and lookups add. Every name starting with ``__`` is reserved too (internal columns).
RESERVED_COLUMNS = frozenset(
    {
        "__offset",
        "__timestamp",
        "__bucket",
        "_change_type",
        "_log_offset",
        "_partition",
        "_commit_timestamp",
        "_bucket",
        "_offset",
        "_found",
        "_key_index",
    }
)


@dataclass(frozen=True, slots=True)
class Column:
    """One column: name, Polars dtype, nullability and a stable id (never reused).

    `arrow` is the declared Arrow type when it says more than the Polars dtype can (``NOT NULL`` elements, map
    values or ROW fields: ``ARRAY<FLOAT NOT NULL>``); writes are checked against it. None otherwise.
    """

    name: str
    dtype: pl.DataType
    nullable: bool = True
    column_id: int = -1
    comment: str | None = None
    arrow: pa.DataType | None = None

    @property
    def type_name(self) -> str:
        """The Fluss spelling of the type (``BIGINT``, ``TIMESTAMP_LTZ(3)``, ``ARRAY<ROW<a INT NOT NULL>>``)."""
        return arrow_type_name(self.arrow) if self.arrow is not None else fluss_type_name(self.dtype)

    @property
    def vector_dimension(self) -> int | None:
        """The fixed length of an ``ARRAY`` column declared as a vector (Polars ``Array``), else None."""
        return self.dtype.size if isinstance(self.dtype, pl.Array) else None


def _check_column_name(name: object) -> str:
    """Column names: non-empty printable strings that are not reserved."""
    if not isinstance(name, str) or not name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidNameError(f"column name {name!r} is not allowed: use a non-empty name without control characters")
    if name in RESERVED_COLUMNS or name.startswith("__"):
        raise InvalidNameError(
            f"column name {name!r} is reserved for a system column "
            f"({sorted(RESERVED_COLUMNS)} and every name starting with '__'); rename the column"
        )
    return name


@dataclass(frozen=True, slots=True)
class Schema:
    """An ordered list of columns, the primary key (empty for log tables) and the auto-increment column, if any
    (Fluss's ``Schema.getAutoIncrementColumnNames``; set from the ``auto-increment.fields`` option when a table is
    created, never added later).

    Examples
    --------
    >>> s = Schema.of({"id": "BIGINT", "name": "STRING"}, primary_key=["id"])
    >>> s.names, s.primary_key, s.column("id").nullable
    (('id', 'name'), ('id',), False)
    """

    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    schema_id: int = 0
    highest_column_id: int = field(default=-1, compare=False)
    auto_increment_columns: tuple[str, ...] = ()
    _polars: pl.Schema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # built once: lookups and writes ask for it on every call (a pl.Schema checks each dtype as it is made)
        object.__setattr__(self, "_polars", pl.Schema([(c.name, c.dtype) for c in self.columns]))

    @classmethod
    def of(
        cls,
        columns: Mapping[str, DataTypeLike] | Iterable[Column | tuple] | pl.Schema | pa.Schema,
        *,
        primary_key: Sequence[str] = (),
        not_null: Sequence[str] = (),
    ) -> Schema:
        """Build a schema from a mapping ``name -> type``, a Polars/Arrow schema, or Column objects.

        Primary-key columns become NOT NULL; `not_null` names further NOT NULL columns, as does a type string
        ending in ``NOT NULL``. Types are Fluss type strings (nested ones too: ``ARRAY<ROW<a INT, b STRING>>``,
        ``MAP<STRING, DOUBLE>``), Polars dtypes or Arrow types; ``ARRAY<FLOAT>(768)``, a Polars ``Array`` or an Arrow
        ``fixed_size_list`` is an ARRAY of fixed length (a vector: every write must give that many values).
        """
        if isinstance(columns, pa.Schema):
            raw = [(f.name, f.type, f.nullable) for f in columns]
        elif isinstance(columns, Mapping | pl.Schema):
            raw = [(name, dtype, True) for name, dtype in columns.items()]
        else:
            raw = []
            for item in columns:
                if isinstance(item, Column):
                    raw.append((item.name, item.dtype, item.nullable))
                else:
                    raw.append((item[0], item[1], item[2] if len(item) > 2 else True))
        if not raw:
            raise InvalidTableError("a table needs at least one column")
        pk = tuple(primary_key)
        built: list[Column] = []
        seen: set[str] = set()
        for index, (name, dtype, nullable) in enumerate(raw):
            _check_column_name(name)
            if name in seen:
                raise InvalidTableError(f"column {name!r} appears twice; column names must be unique")
            seen.add(name)
            declared = declare(dtype)
            keep_null = bool(nullable) and declared.nullable and name not in pk and name not in not_null
            built.append(Column(name, declared.dtype, keep_null, index, arrow=declared.arrow))
        for name in (*pk, *not_null):
            if name not in seen:
                raise InvalidTableError(f"key column {name!r} is not in the schema {sorted(seen)}")
        if len(set(pk)) != len(pk):
            raise InvalidTableError(f"primary key {list(pk)} names a column twice")
        return cls(tuple(built), pk, 0, len(built) - 1)

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in order."""
        return tuple(c.name for c in self.columns)

    @property
    def polars_schema(self) -> pl.Schema:
        """The Polars schema of the table's rows (one shared object, built with the schema: do not modify it)."""
        return self._polars

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the table's rows (nullability included)."""
        empty = pl.DataFrame(schema=self.polars_schema).to_arrow()
        return pa.schema(
            [pa.field(c.name, c.arrow or empty.schema.field(c.name).type, c.nullable) for c in self.columns]
        )

    def column(self, name: str) -> Column:
        """The column called `name`."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def add_column(self, name: str, dtype: DataTypeLike, *, comment: str | None = None) -> Schema:
        """A new schema with a nullable column appended (the only evolution Fluss allows)."""
        _check_column_name(name)
        if name in self.names:
            raise InvalidAlterError(f"column {name!r} exists already; choose another name")
        declared = declare(dtype)
        if not declared.nullable:
            raise InvalidAlterError(f"column {name!r} cannot be added as NOT NULL: added columns are nullable")
        column = Column(name, declared.dtype, True, self.highest_column_id + 1, comment, declared.arrow)
        return Schema(
            (*self.columns, column),
            self.primary_key,
            self.schema_id + 1,
            column.column_id,
            self.auto_increment_columns,
        )

    def to_json(self) -> dict:
        """Serializable form; types travel as Arrow IPC schema bytes (a stable format) plus readable names."""
        data: dict = {
            "schema_id": self.schema_id,
            "primary_key": list(self.primary_key),
            "highest_column_id": self.highest_column_id,
            "columns": [
                {"name": c.name, "type": c.type_name, "nullable": c.nullable, "id": c.column_id, "comment": c.comment}
                for c in self.columns
            ],
            "arrow": base64.b64encode(self.arrow_schema.serialize().to_pybytes()).decode(),
        }
        if self.auto_increment_columns:  # absent otherwise: a schema without one is stored as before
            data["auto_increment_columns"] = list(self.auto_increment_columns)
        return data

    @classmethod
    def from_json(cls, data: Mapping) -> Schema:
        """Inverse of :meth:`to_json`."""
        arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["arrow"])))
        dtypes = pl.from_arrow(arrow.empty_table()).schema  # type: ignore[union-attr]
        kinds = {f.name: f.type for f in arrow}
        cols = tuple(
            Column(
                c["name"],
                dtypes[c["name"]],
                c["nullable"],
                c["id"],
                c.get("comment"),
                kinds[c["name"]] if has_inner_not_null(kinds[c["name"]]) else None,
            )
            for c in data["columns"]
        )
        return cls(
            cols,
            tuple(data["primary_key"]),
            data["schema_id"],
            data["highest_column_id"],
            tuple(data.get("auto_increment_columns", ())),
        )
