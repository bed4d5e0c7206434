"""Where a Ray worker finds the tables: the store's URL and storage options, opened once per worker.

A :class:`~fluss_lake.Connection` holds open files and caches; it is not sent to workers. A :class:`Store` is a
small frozen value that is (pickled with the task or actor), and each worker connects to it itself.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fluss_lake as fl
from fluss_lake.exceptions import InvalidConfigError

__all__ = ["Store"]


@dataclass(frozen=True)
class Store:
    """A store every worker of a cluster can reach (``s3://...`` with its storage options, or a shared folder).

    Examples
    --------
    >>> import tempfile
    >>> store = Store(tempfile.mkdtemp())
    >>> store.connect().list_databases()
    []
    """

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise InvalidConfigError(f"Store url={self.url!r}: give the store's folder or s3:// URL as a string")
        if not isinstance(self.storage_options, Mapping):
            raise InvalidConfigError(
                f"Store storage_options={self.storage_options!r}: give a mapping of fsspec options (or nothing)"
            )

    def connect(self) -> fl.Connection:
        """A new connection to the store (state segments of a remote store cached in a folder of this worker)."""
        local_dir = None
        if "://" in self.url and not self.url.startswith("file://"):
            local_dir = tempfile.mkdtemp(prefix=f"fluss-lake-ray-{os.getpid()}-")
        return fl.connect(self.url, storage_options=dict(self.storage_options) or None, local_dir=local_dir)
