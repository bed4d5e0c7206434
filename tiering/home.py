"""The *home*: one local folder that holds a store, its lake and the Dagster instance of the embedded default.

``fluss-lake ui``, ``materialize``, ``backfill``, ``tier`` and :meth:`tiering.Lake.for_home` all mean the same
folder: ``--home``, else ``$FLUSS_LAKE_HOME``, else ``./.fluss-lake``. Inside it:

=============  ==============================================================
``live/``      the fluss-lake store (``fluss_lake.connect(home.live)``)
``lake/``      the Iceberg lake: sqlite catalog ``catalog.db`` + ``warehouse/``
``dagster/``   the Dagster instance (``$DAGSTER_HOME`` of the demo's runs)
=============  ==============================================================

Reading a home never creates it: :meth:`Home.has_store` and :meth:`Home.has_lake` say whether there is
something to read, so commands can say so instead of creating empty folders.

Examples
--------
>>> home = Home.resolve("/tmp/demo-home")
>>> home.live.as_posix(), home.lake.as_posix()
('/tmp/demo-home/live', '/tmp/demo-home/lake')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fluss_lake.connection import DEFAULT_HOME, HOME_ENV
from fluss_lake.exceptions import InvalidConfigError

__all__ = [
    "DEFAULT_HOME",
    "HOME_ENV",
    "LEGACY_DEFAULT_STORE",
    "STORE_URL_ENV",
    "Home",
    "StoreNotFoundError",
    "existing_store",
    "resolve_store",
]

#: The environment variable naming the home folder, and the home when neither ``--home`` nor it says otherwise
#: (the core's: ``fluss_lake.connect()`` opens that home's store by default).
HOME_ENV, DEFAULT_HOME = HOME_ENV, DEFAULT_HOME
#: Where ``fluss-lake tier`` looked for a store before the home existed (still readable with ``--store``).
LEGACY_DEFAULT_STORE = "fluss-lake-data"
#: The environment variable naming a store URL (the core's ``fluss_lake.connect`` default).
STORE_URL_ENV = "FLUSS_LAKE_URL"


class StoreNotFoundError(InvalidConfigError, LookupError):
    """A command that reads was pointed at a store or lake that does not exist (it creates none)."""


@dataclass(frozen=True, slots=True)
class Home:
    """A home folder (absolute): its store, its lake and its Dagster instance live in fixed sub-folders."""

    root: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> Home:
        """`path`, else ``$FLUSS_LAKE_HOME``, else ``./.fluss-lake``; ``~`` expanded, made absolute."""
        chosen = path if path is not None else (os.environ.get(HOME_ENV) or DEFAULT_HOME)
        return cls(Path(chosen).expanduser().resolve())

    @property
    def live(self) -> Path:
        """The store folder."""
        return self.root / "live"

    @property
    def lake(self) -> Path:
        """The lake folder (sqlite catalog ``catalog.db`` and ``warehouse/``)."""
        return self.root / "lake"

    @property
    def dagster(self) -> Path:
        """The Dagster instance folder."""
        return self.root / "dagster"

    def has_store(self) -> bool:
        """Whether the store folder exists (it may still hold no table)."""
        return self.live.is_dir()

    def has_lake(self) -> bool:
        """Whether anything was ever tiered into this home's lake (its catalog file exists)."""
        return (self.lake / "catalog.db").is_file()

    def __str__(self) -> str:
        return str(self.root)


def resolve_store(*, home: str | os.PathLike[str] | None = None, store: str | None = None) -> tuple[Home | None, str]:
    """The store a command works on, and its home (None when the store was named rather than a home).

    ``--store`` wins, then ``--home``, then ``$FLUSS_LAKE_URL``, then the home from ``$FLUSS_LAKE_HOME`` or
    ``./.fluss-lake`` (its ``live/`` folder).

    Examples
    --------
    >>> resolve_store(store="s3://bucket/live")
    (None, 's3://bucket/live')
    >>> found, url = resolve_store(home="/tmp/h"); found.root.as_posix(), url
    ('/tmp/h', '/tmp/h/live')
    """
    if store is not None:
        return None, store
    if home is None and os.environ.get(STORE_URL_ENV):
        return None, os.environ[STORE_URL_ENV]
    found = Home.resolve(home)
    return found, str(found.live)


def existing_store(url: str, home: Home | None, *, doing: str) -> None:
    """Refuse a local store folder that does not exist (opening it would create an empty store).

    `doing` says what the command would do with it (``"nothing to tier"``). Object-store URLs pass: an empty
    prefix is a store without tables.
    """
    if "://" in url and not url.startswith("file://"):
        return
    folder = Path(url.removeprefix("file://")).expanduser()
    if folder.is_dir():
        return
    hint = "write tables first (`fluss-lake materialize` fills the demo's home) or pass --home/--store"
    if home is not None and Path(LEGACY_DEFAULT_STORE).is_dir():
        hint += (
            f"; ./{LEGACY_DEFAULT_STORE} holds a store (the default before homes): pass --store {LEGACY_DEFAULT_STORE}"
        )
    where = f"home {home} has no store ({folder})" if home is not None else f"no store at {folder}"
    raise StoreNotFoundError(f"{where}, so there is {doing}; {hint}")
