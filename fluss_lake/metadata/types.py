"""Column types: Fluss type names (``INT``, ``DECIMAL(10,2)``, ``ARRAY<ROW<a INT, b MAP<STRING, DOUBLE>>>``...)
<-> Polars/Arrow.

A table stores Polars dtypes; Fluss names are accepted everywhere a type is asked for, so a Fluss user's
DDL carries over, and are used when a type is shown. Nested names parse recursively into Arrow types (``ARRAY`` ->
list, ``MAP`` -> map, ``ROW`` -> struct), which keep what Polars cannot: ``NOT NULL`` on elements, values and
fields. A Polars ``Array`` (Arrow ``fixed_size_list``) is an ``ARRAY`` of a fixed length, written ``ARRAY<FLOAT>(768)``:
a vector (embedding). Fluss has no vector type, so the length suffix is ours; without it an ``ARRAY`` has any length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

import polars as pl
import pyarrow as pa

from fluss_lake.exceptions import InvalidTableError

__all__ = [
    "DataTypeLike",
    "KEY_UNSUPPORTED",
    "DeclaredType",
    "arrow_type_name",
    "declare",
    "fluss_type_name",
    "has_inner_not_null",
    "is_key_supported",
    "parse_type",
    "to_polars_dtype",
    "type_name_of",
]

DataTypeLike: TypeAlias = str | pl.DataType | type[pl.DataType] | pa.DataType

_SIMPLE: dict[str, pl.DataType] = {
    "BOOLEAN": pl.Boolean(),
    "TINYINT": pl.Int8(),
    "SMALLINT": pl.Int16(),
    "INT": pl.Int32(),
    "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(),
    "FLOAT": pl.Float32(),
    "DOUBLE": pl.Float64(),
    "STRING": pl.String(),
    "BYTES": pl.Binary(),
    "DATE": pl.Date(),
}
_PARAM = re.compile(r"^\s*([A-Z_]+)\s*(?:\(\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*)?\))?\s*$")


def _time_unit(precision: int) -> Literal["ms", "us", "ns"]:
    """Smallest Polars time unit that keeps `precision` fractional digits."""
    return "ms" if precision <= 3 else ("us" if precision <= 6 else "ns")


def _parse(name: str) -> pl.DataType:
    """Parse a Fluss type name."""
    match = _PARAM.match(name.upper())
    if match is None:
        raise InvalidTableError(
            f"unknown column type {name!r}; use a Fluss type name such as INT, "
            "BIGINT, STRING, DECIMAL(10,2), TIMESTAMP(3), TIMESTAMP_LTZ(6), or a Polars dtype"
        )
    base, p1, p2 = match.group(1), match.group(2), match.group(3)
    if base in _SIMPLE and p1 is None:
        return _SIMPLE[base]
    if base in ("CHAR", "VARCHAR"):
        return pl.String()
    if base in ("BINARY", "VARBINARY"):
        return pl.Binary()
    if base == "DECIMAL":
        return pl.Decimal(int(p1 or 10), int(p2 or 0))
    if base == "TIMESTAMP":
        return pl.Datetime(_time_unit(int(p1 if p1 is not None else 6)))
    if base == "TIMESTAMP_LTZ":
        return pl.Datetime(_time_unit(int(p1 if p1 is not None else 6)), "UTC")
    if base == "TIME":
        return pl.Time()
    raise InvalidTableError(
        f"unknown column type {name!r}; use a Fluss type name such as INT, BIGINT, "
        "STRING, DECIMAL(10,2), TIMESTAMP(3), or a Polars dtype"
    )


_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|([0-9]+)|([<>(),]))")
_NESTED = ("ARRAY", "MAP", "ROW")


class _Parser:
    """Recursive-descent parser of one Fluss type string (``ARRAY<ROW<a INT NOT NULL, b ARRAY<STRING>>>``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None or match.end() == pos:
                if text[pos:].strip():
                    raise self._error(f"unexpected {text[pos:].strip()[:10]!r}")
                break
            quoted, word, number, punct = match.groups()
            if quoted is not None:
                self.tokens.append(("name", quoted[1:-1].replace("``", "`")))
            elif word is not None:
                self.tokens.append(("word", word))
            elif number is not None:
                self.tokens.append(("number", number))
            elif punct is not None:
                self.tokens.append(("punct", punct))
            pos = match.end()
        self.at = 0

    def _error(self, what: str) -> InvalidTableError:
        return InvalidTableError(
            f"cannot parse column type {self.text!r}: {what}; write a Fluss type such as INT, DECIMAL(10,2), "
            "ARRAY<FLOAT>, MAP<STRING, BIGINT> or ROW<a INT, b STRING NOT NULL>"
        )

    def _peek(self, offset: int = 0) -> tuple[str, str] | None:
        at = self.at + offset
        return self.tokens[at] if at < len(self.tokens) else None

    def _take(self, kind: str | None = None, value: str | None = None) -> str:
        token = self._peek()
        if token is None or (kind is not None and token[0] != kind) or (value is not None and token[1] != value):
            raise self._error(f"expected {value or kind} at {'the end' if token is None else repr(token[1])}")
        self.at += 1
        return token[1]

    def _is(self, value: str) -> bool:
        token = self._peek()
        return token is not None and token[0] in ("punct", "word") and token[1].upper() == value

    def parse(self) -> tuple[pa.DataType, bool]:
        result = self._type()
        if self._peek() is not None:
            raise self._error(f"unexpected {self._peek()[1]!r}")  # type: ignore[index]
        return result

    def _nullable(self) -> bool:
        if self._is("NOT"):
            self.at += 1
            if not self._is("NULL"):
                raise self._error("expected NULL after NOT")
            self.at += 1
            return False
        if self._is("NULL"):
            self.at += 1
        return True

    def _type(self) -> tuple[pa.DataType, bool]:
        base = self._take("word").upper()
        if base in _NESTED and (self._is("<") or self._is("(")):
            close = ">" if self._take("punct") == "<" else ")"
            if base == "ARRAY":
                element, nullable = self._type()
                kind: pa.DataType = pa.large_list(pa.field("item", element, nullable))
            elif base == "MAP":
                key, _ = self._type()  # keys are never null (Arrow's map, and every write is checked)
                self._take("punct", ",")
                value, nullable = self._type()
                kind = pa.map_(pa.field("key", key, False), pa.field("value", value, nullable))
            else:
                fields = [self._field()]
                while self._is(","):
                    self.at += 1
                    fields.append(self._field())
                names = [f.name for f in fields]
                if len(set(names)) != len(names):
                    raise self._error(f"ROW fields {names} name a field twice")
                kind = pa.struct(fields)
            self._take("punct", close)
            if base == "ARRAY" and self._is("("):
                kind = pa.list_(kind.value_field, self._length())
            return kind, self._nullable()
        if base in _NESTED:
            raise self._error(f"{base} needs its element types ({base}<...>)")
        text = base
        if self._is("("):
            self.at += 1
            params = [self._take("number")]
            while self._is(","):
                self.at += 1
                params.append(self._take("number"))
            self._take("punct", ")")
            text += "(" + ",".join(params) + ")"
        return _leaf_arrow(_parse(text)), self._nullable()

    def _length(self) -> int:
        """The ``(n)`` after ``ARRAY<...>``: a vector's fixed length, at least 1."""
        self._take("punct", "(")
        length = int(self._take("number"))
        self._take("punct", ")")
        if length < 1:
            raise self._error(f"a fixed-length ARRAY needs a length of at least 1, got {length}")
        return length

    def _field(self) -> pa.Field:
        token = self._peek()
        if token is None or token[0] not in ("name", "word"):
            raise self._error("expected a ROW field name")
        self.at += 1
        kind, nullable = self._type()
        return pa.field(token[1], kind, nullable)


def _leaf_arrow(dtype: pl.DataType) -> pa.DataType:
    """The Arrow type Polars uses for a dtype (``STRING`` -> ``large_string``)."""
    return pl.Series([], dtype=dtype).to_arrow().type


def parse_type(name: str) -> tuple[pa.DataType, bool]:
    """Parse a Fluss type string into its Arrow type and nullability (``False`` for a trailing ``NOT NULL``).

    Nested types parse recursively; ``NOT NULL`` inside them is kept on the Arrow fields.

    Examples
    --------
    >>> kind, nullable = parse_type("MAP<STRING, ARRAY<DOUBLE NOT NULL>> NOT NULL")
    >>> arrow_type_name(kind), nullable
    ('MAP<STRING, ARRAY<DOUBLE NOT NULL>>', False)
    """
    return _Parser(name).parse()


def _is_nested_arrow(kind: pa.DataType) -> bool:
    return isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType | pa.MapType | pa.StructType)


def has_inner_not_null(kind: pa.DataType) -> bool:
    """Whether a nested Arrow type declares a NOT NULL element, value or field (a map's key is always NOT NULL).

    Examples
    --------
    >>> has_inner_not_null(pa.list_(pa.field("item", pa.int32(), nullable=False))), has_inner_not_null(pa.int32())
    (True, False)
    """
    if isinstance(kind, pa.MapType):
        return not kind.item_field.nullable or has_inner_not_null(kind.key_type) or has_inner_not_null(kind.item_type)
    if isinstance(kind, pa.ListType | pa.LargeListType | pa.FixedSizeListType):
        return not kind.value_field.nullable or has_inner_not_null(kind.value_type)
    if isinstance(kind, pa.StructType):
        return any(not f.nullable or has_inner_not_null(f.type) for f in kind)
    return False


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def arrow_type_name(kind: pa.DataType) -> str:
    """The Fluss name of an Arrow type, ``NOT NULL`` of nested elements and fields included.

    A ``fixed_size_list`` is an ``ARRAY`` with its length after it (Fluss has no vector type; see the module).

    Examples
    --------
    >>> arrow_type_name(pa.map_(pa.string(), pa.struct([pa.field("a b", pa.float32(), nullable=False)])))
    'MAP<STRING, ROW<`a b` FLOAT NOT NULL>>'
    >>> arrow_type_name(pa.list_(pa.float32(), 128))
    'ARRAY<FLOAT>(128)'
    """

    def inner(field: pa.Field) -> str:
        return arrow_type_name(field.type) + ("" if field.nullable else " NOT NULL")

    if isinstance(kind, pa.MapType):
        return f"MAP<{arrow_type_name(kind.key_type)}, {inner(kind.item_field)}>"
    if isinstance(kind, pa.FixedSizeListType):
        return f"ARRAY<{inner(kind.value_field)}>({kind.list_size})"
    if isinstance(kind, pa.ListType | pa.LargeListType):
        return f"ARRAY<{inner(kind.value_field)}>"
    if isinstance(kind, pa.StructType):
        names = [f.name if _IDENT.match(f.name) else "`" + f.name.replace("`", "``") + "`" for f in kind]
        return "ROW<" + ", ".join(f"{n} {inner(f)}" for n, f in zip(names, kind, strict=True)) + ">"
    return fluss_type_name(to_polars_dtype(kind))


def _polars_of_arrow(kind: pa.DataType) -> pl.DataType:
    return pl.Series(pa.array([], type=kind)).dtype


def to_polars_dtype(dtype: DataTypeLike) -> pl.DataType:
    """Normalize a Fluss type name, Polars dtype or Arrow type to a Polars dtype instance.

    Examples
    --------
    >>> to_polars_dtype("DECIMAL(10,2)")
    Decimal(precision=10, scale=2)
    >>> to_polars_dtype("TIMESTAMP_LTZ(3)")
    Datetime(time_unit='ms', time_zone='UTC')
    >>> to_polars_dtype("ARRAY<ROW<a INT, b MAP<STRING, DOUBLE>>>")
    List(Struct({'a': Int32, 'b': Map(String, Float64)}))
    """
    if isinstance(dtype, str):
        return _polars_of_arrow(parse_type(dtype)[0])
    if isinstance(dtype, pa.DataType):
        return _polars_of_arrow(dtype)
    if isinstance(dtype, type) and issubclass(dtype, pl.DataType):
        return dtype()
    if isinstance(dtype, pl.DataType):
        return dtype
    raise InvalidTableError(f"cannot use {dtype!r} as a column type; pass a Fluss type name or a Polars dtype")


def fluss_type_name(dtype: pl.DataType) -> str:
    """The Fluss name of a Polars dtype (``Int32`` -> ``INT``)."""
    for name, simple in _SIMPLE.items():
        if name != "INTEGER" and dtype == simple:
            return name
    if isinstance(dtype, pl.Decimal):
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    if isinstance(dtype, pl.Datetime):
        precision = {"ms": 3, "us": 6, "ns": 9}[dtype.time_unit]
        return f"TIMESTAMP_LTZ({precision})" if dtype.time_zone else f"TIMESTAMP({precision})"
    if dtype == pl.Time():
        return "TIME"
    if isinstance(dtype, pl.List | pl.Array | pl.Map | pl.Struct):
        return arrow_type_name(_leaf_arrow(dtype))  # ARRAY<...>, MAP<...>, ROW<...> with quoted odd field names
    return str(dtype)


@dataclass(frozen=True, slots=True)
class DeclaredType:
    """A column type as declared: the Polars dtype, the nullability a type string gave (``NOT NULL``), and the
    Arrow type when it says more than the Polars dtype (``NOT NULL`` inside ARRAY/MAP/ROW), else None."""

    dtype: pl.DataType
    nullable: bool = True
    arrow: pa.DataType | None = None


def declare(dtype: DataTypeLike) -> DeclaredType:
    """A column type from a Fluss type string, a Polars dtype or an Arrow type.

    Examples
    --------
    >>> d = declare("ARRAY<FLOAT NOT NULL> NOT NULL")
    >>> d.dtype, d.nullable, arrow_type_name(d.arrow)
    (List(Float32), False, 'ARRAY<FLOAT NOT NULL>')
    """
    if isinstance(dtype, str):
        kind, nullable = parse_type(dtype)
        return DeclaredType(_polars_of_arrow(kind), nullable, kind if has_inner_not_null(kind) else None)
    if isinstance(dtype, pa.DataType):
        return DeclaredType(_polars_of_arrow(dtype), True, dtype if has_inner_not_null(dtype) else None)
    return DeclaredType(to_polars_dtype(dtype))


def type_name_of(dtype: DataTypeLike) -> str:
    """The Fluss name a column declared with `dtype` shows (``NOT NULL`` inside nested types kept, a trailing one
    dropped: that is the column's nullability).

    Examples
    --------
    >>> type_name_of("array<int not null> not null"), type_name_of("varchar(3)")
    ('ARRAY<INT NOT NULL>', 'STRING')
    """
    declared = declare(dtype)
    return arrow_type_name(declared.arrow) if declared.arrow is not None else fluss_type_name(declared.dtype)


KEY_UNSUPPORTED = "ARRAY, MAP and ROW"


def is_key_supported(dtype: pl.DataType) -> bool:
    """Whether a column of this type may be part of a primary key or bucket key."""
    return not isinstance(dtype, pl.List | pl.Array | pl.Map | pl.Struct | pl.Object | pl.Null)
