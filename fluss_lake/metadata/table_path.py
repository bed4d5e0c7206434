"""Names of databases and tables, checked so they can never escape the store."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fluss_lake.exceptions import InvalidNameError

__all__ = ["TablePath", "check_name"]

_VALID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,199}$")


def check_name(kind: str, name: object) -> str:
    """Return `name` if it is a safe database/table name, else raise :class:`InvalidNameError`."""
    if not isinstance(name, str) or not _VALID.fullmatch(name) or name.startswith("__"):
        raise InvalidNameError(
            f"{kind} name {name!r} is not allowed: use 1-200 characters of letters, digits, '_' and '-', "
            "not starting with '-' or '__' (no '.', '/', spaces or control characters)"
        )
    return name


@dataclass(frozen=True, slots=True)
class TablePath:
    """A table's address: ``database.table``.

    Examples
    --------
    >>> TablePath.of("shop.orders")
    TablePath(database='shop', table='orders')
    """

    database: str
    table: str

    def __post_init__(self) -> None:
        check_name("database", self.database)
        check_name("table", self.table)

    @classmethod
    def of(cls, path: str | TablePath) -> TablePath:
        """Parse ``"db.table"`` (or return a TablePath unchanged)."""
        if isinstance(path, TablePath):
            return path
        if not isinstance(path, str) or path.count(".") != 1:
            raise InvalidNameError(f"table path {path!r} must look like 'database.table'")
        database, table = path.split(".")
        return cls(database, table)

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"
