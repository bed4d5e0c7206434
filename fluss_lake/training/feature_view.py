"""FeatureView: which history frame to read features from, by which keys, under which time rules."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import polars as pl

from fluss_lake.exceptions import InvalidConfigError, SchemaMismatchError
from fluss_lake.options import parse_duration_ms
from fluss_lake.table import Table
from fluss_lake.training.history import ALL_SYSTEM_COLUMNS, LakeLike, check_history, history_source

__all__ = ["FeatureView"]


@dataclass(frozen=True, slots=True, eq=False)
class FeatureView:
    """Features of one primary-key table, read from its history frame as of each entity row's timestamp.

    Parameters
    ----------
    history
        The table's history frame (see :mod:`fluss_lake.training.history`): from the lake, or
        :func:`~fluss_lake.training.history_of` for a live table (:meth:`from_table` does that).
    keys
        The table's key columns the entity rows are matched on (usually its primary key).
    features
        Columns to return; default: every column that is not a key or a system column.
    entity_keys
        The entity frame's columns matching `keys`, position by position; default: the same names.
    event_time
        Event-time mode: the column holding each row's own event time (``Datetime``/``Date``; naive = UTC).
        A value is current from its event time on; a delete ends the value at its commit time (or at the
        deleted row's event time, if later). Default ``None``: commit-time mode (what the live store served).
    committed_only
        Event-time mode only: a row counts only once it was committed (its commit time is at or before the
        prediction time), so no late-arriving value leaks backwards.
    ttl
        A value older than this at the prediction time is null: its age is measured from its commit time
        (commit-time mode) or its event time (event-time mode); an age exactly equal to the TTL still counts.
        A ``timedelta`` or a Fluss duration string (``"1 d"``, ``"30min"``).
    prefix
        Prepended to every returned feature column (e.g. ``"customer__"``) to avoid name clashes.
    name
        Shown in error messages (and in the served-feature log).
    table
        The live primary-key table behind the history, if any (:meth:`from_table` sets it): what
        :func:`~fluss_lake.training.online_features` reads the current values from. Its primary key must be `keys`.

    Examples
    --------
    >>> import polars as pl
    >>> from datetime import datetime
    >>> history = pl.DataFrame({"id": [1], "score": [0.5], "__change_type": ["+I"], "__bucket": [0],
    ...                         "__offset": [0], "__timestamp": [datetime(2026, 1, 1)]})
    >>> view = FeatureView(history, keys=["id"], ttl="1 d", prefix="customer__")
    >>> view.output_names()
    ['customer__score']
    """

    history: pl.LazyFrame | pl.DataFrame
    keys: Sequence[str]
    features: Sequence[str] | None = None
    entity_keys: Sequence[str] | None = None
    event_time: str | None = None
    committed_only: bool = False
    ttl: timedelta | str | None = None
    prefix: str = ""
    name: str = ""
    table: Table | None = None
    _schema: pl.Schema = field(init=False, repr=False)

    def __post_init__(self) -> None:
        label = self.label
        if not isinstance(self.history, pl.LazyFrame | pl.DataFrame):
            raise InvalidConfigError(
                f"{label}: history must be a polars LazyFrame or DataFrame, got {type(self.history).__name__}"
            )
        for attr in ("keys", "features", "entity_keys"):
            value = getattr(self, attr)
            if isinstance(value, str):
                value = [value]
            object.__setattr__(self, attr, None if value is None else tuple(value))
        if not self.keys:
            raise InvalidConfigError(f"{label}: keys must name at least one key column")
        if self.entity_keys is not None and len(self.entity_keys) != len(self.keys):
            raise InvalidConfigError(
                f"{label}: entity_keys {list(self.entity_keys)} must pair with keys "
                f"{list(self.keys)} position by position"
            )
        ttl = self.ttl
        if isinstance(ttl, str):
            ttl = timedelta(milliseconds=parse_duration_ms("ttl", ttl))
        if ttl is not None and (not isinstance(ttl, timedelta) or ttl < timedelta(0)):
            raise InvalidConfigError(
                f"{label}: ttl={self.ttl!r} must be a non-negative timedelta or a duration such as '7 d'"
            )
        object.__setattr__(self, "ttl", ttl)
        if self.committed_only and self.event_time is None:
            raise InvalidConfigError(
                f"{label}: committed_only applies to event-time mode; set event_time= too "
                "(commit-time mode only ever sees committed values)"
            )
        schema = self.history.collect_schema()
        object.__setattr__(self, "_schema", schema)
        check_history(
            schema,
            what=label,
            needed=(*self.keys, *(self.features or ()), *((self.event_time,) if self.event_time else ())),
        )
        if self.features is None:
            skip = {*self.keys, *ALL_SYSTEM_COLUMNS}
            object.__setattr__(self, "features", tuple(c for c in schema if c not in skip))
        bad = [c for c in self.features or () if c in ALL_SYSTEM_COLUMNS]
        if bad:
            raise SchemaMismatchError(f"{label}: {bad} are system columns, not features")

    @property
    def label(self) -> str:
        """The view's name for messages."""
        return f"feature view {self.name!r}" if self.name else "feature view"

    @property
    def schema(self) -> pl.Schema:
        """The history frame's schema."""
        return self._schema

    def output_names(self) -> list[str]:
        """The feature columns this view adds to a training set (prefix applied)."""
        return [f"{self.prefix}{c}" for c in self.features or ()]

    def key_pairs(self) -> list[tuple[str, str]]:
        """(entity column, history column) for each key."""
        return list(zip(self.entity_keys or self.keys, self.keys, strict=True))

    @classmethod
    def from_table(
        cls,
        table: Table,
        *,
        lake: LakeLike | None = None,
        features: Sequence[str] | None = None,
        entity_keys: Sequence[str] | None = None,
        event_time: str | None = None,
        committed_only: bool = False,
        ttl: timedelta | str | None = None,
        prefix: str = "",
    ) -> FeatureView:
        """A view of a live primary-key table keyed by its primary key (history: `lake` + the live tail).

        `lake` is the lake's history frame of the table (``tiering.read_history``) or the lake (``tiering.Lake``).

        Nothing is read when the view is made: a training set reads the history when it is computed
        (:func:`~fluss_lake.training.history.history_source`: the live tail as of then), online features read the
        table's current rows, so one view serves both.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.customer", schema={"id": "INT", "tier": "STRING"}, primary_key=["id"])
        >>> FeatureView.from_table(conn.get_table("d.customer"), prefix="customer__").output_names()
        ['customer__tier']
        """
        return cls(
            history_source(table, lake=lake),
            keys=table.schema.primary_key,
            features=features,
            entity_keys=entity_keys,
            event_time=event_time,
            committed_only=committed_only,
            ttl=ttl,
            prefix=prefix,
            name=str(table.path),
            table=table,
        )

    def definition(self) -> dict[str, Any]:
        """The view's rules as JSON-ready data (what a served store rebuilds the view from, and what its
        :attr:`version` hashes); needs a view with a :attr:`table`.

        Examples
        --------
        >>> import tempfile, fluss_lake as fl
        >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
        >>> _ = conn.create_table("d.c", schema={"id": "INT", "tier": "STRING"}, primary_key=["id"])
        >>> view = FeatureView.from_table(conn.get_table("d.c"), ttl="1 d", prefix="c__")
        >>> view.definition()["table"], view.definition()["ttl_us"]
        ('d.c', 86400000000)
        """
        if self.table is None:
            raise InvalidConfigError(
                f"{self.label} has no live table; make it with FeatureView.from_table(table, ...) or pass table="
            )
        ttl = self.ttl
        assert ttl is None or isinstance(ttl, timedelta)
        return {
            "table": str(self.table.path),
            "keys": list(self.keys),
            "features": list(self.features or ()),
            "entity_keys": list(self.entity_keys) if self.entity_keys is not None else None,
            "event_time": self.event_time,
            "committed_only": self.committed_only,
            "ttl_us": None if ttl is None else ttl // timedelta(microseconds=1),
            "prefix": self.prefix,
            "name": self.name,
        }

    @property
    def version(self) -> str:
        """A short hash of the view's rules and of its table's identity and schema version: it changes when the
        definition or the table's schema does (the served-feature log records it per request)."""
        table = self.table
        identity = {} if table is None else {"table_id": table.info.table_id, "schema_id": table.schema.schema_id}
        rules = self.definition() if table is not None else {"keys": list(self.keys), "name": self.name}
        text = json.dumps({**rules, **identity}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]
