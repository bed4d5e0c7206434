"""The only place that touches storage: a tiny object-store interface over a local folder or fsspec.

Commits rely on one primitive, :meth:`ObjectStore.put_if_absent`: an atomic create that fails when the object
exists. Local folders get it from ``link(2)`` of a fully written temp file (exclusive and never half-visible);
S3 from a conditional put (``If-None-Match: *``) through s3fs. A put whose answer was lost and whose retry finds
the object already there is recognised as our own by comparing bytes (every batch carries a unique writer id).
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from fluss_lake.exceptions import StorageError, StorageUnavailableError

__all__ = ["ObjectStore", "LocalStore", "FsspecStore", "open_store"]

T = TypeVar("T")


class ObjectStore(Protocol):
    """Objects addressed by '/'-separated keys relative to the store root."""

    url: str

    def put_if_absent(self, key: str, data: bytes) -> bool: ...
    def put(self, key: str, data: bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def exists(self, key: str) -> bool: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete(self, key: str) -> None: ...
    def delete_prefix(self, prefix: str) -> None: ...
    def local_path(self, key: str) -> str | None: ...


class LocalStore:
    """A local folder: the embedded default."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = self.root
        os.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def local_path(self, key: str) -> str | None:
        """Path of the object on local disk (for memory mapping)."""
        return self._path(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create `key` with `data` atomically; False if it exists already."""
        path = self._path(key)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def put(self, key: str, data: bytes) -> None:
        """Create or replace `key` atomically (rename of a complete temp file)."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)

    def get(self, key: str) -> bytes:
        """The object's bytes; FileNotFoundError if absent."""
        with open(self._path(key), "rb") as handle:
            return handle.read()

    def exists(self, key: str) -> bool:
        """Whether the object exists."""
        return os.path.exists(self._path(key))

    def list(self, prefix: str) -> list[str]:
        """Names (not keys) directly under the folder `prefix`, sorted; hidden temp files left out."""
        try:
            return sorted(n for n in os.listdir(self._path(prefix)) if not n.startswith(".tmp-"))
        except FileNotFoundError:
            return []

    def delete(self, key: str) -> None:
        """Remove an object if present."""
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def delete_prefix(self, prefix: str) -> None:
        """Remove a whole folder."""
        import shutil

        shutil.rmtree(self._path(prefix), ignore_errors=True)


_UNAVAILABLE_NAMES = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                      "ServerDisconnectedError", "ClientConnectorError", "ClientOSError", "TimeoutError")


def _is_unavailable(exc: BaseException) -> bool:
    """Whether an exception (or its cause chain) means the endpoint did not answer."""
    seen = 0
    while exc is not None and seen < 10:
        if type(exc).__name__ in _UNAVAILABLE_NAMES or isinstance(exc, ConnectionError | TimeoutError):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


class FsspecStore:
    """Any fsspec filesystem (``s3://bucket/prefix`` by configuration)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self.root = self.root.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def local_path(self, key: str) -> str | None:
        """Remote stores have no local path."""
        return None

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """Run a storage call, turning endpoint failures into StorageUnavailableError."""
        try:
            return fn()
        except (FileNotFoundError, FileExistsError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            if _is_unavailable(exc):
                raise StorageUnavailableError(
                    f"storage at {self.url} did not answer while trying to {what} {key!r} ({type(exc).__name__}); "
                    "nothing was committed by this call, retry it when the endpoint is back") from exc
            raise StorageError(f"storage at {self.url} failed to {what} {key!r}: {exc}") from exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Conditional put; a conflict with our own earlier (unacknowledged) put counts as success."""
        def create() -> bool:
            try:
                self.fs.pipe_file(self._path(key), data, mode="create")
                return True
            except FileExistsError:
                try:
                    return bool(self.fs.cat_file(self._path(key)) == data)
                except FileNotFoundError:
                    return False
        return self._call("create", key, create)

    def put(self, key: str, data: bytes) -> None:
        """Create or replace an object."""
        self._call("write", key, lambda: self.fs.pipe_file(self._path(key), data))

    def get(self, key: str) -> bytes:
        """The object's bytes."""
        return self._call("read", key, lambda: self.fs.cat_file(self._path(key)))

    def exists(self, key: str) -> bool:
        """Whether the object exists (fresh answer, no listing cache)."""
        def check() -> bool:
            try:
                self.fs.info(self._path(key), refresh=True)
                return True
            except FileNotFoundError:
                return False
        return self._call("check", key, check)

    def list(self, prefix: str) -> list[str]:
        """Names directly under `prefix`, sorted."""
        def ls() -> list[str]:
            try:
                entries = self.fs.ls(self._path(prefix), detail=False, refresh=True)
            except FileNotFoundError:
                return []
            return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)
        return self._call("list", prefix, ls)

    def delete(self, key: str) -> None:
        """Remove an object if present."""
        def rm() -> None:
            try:
                self.fs.rm_file(self._path(key))
            except FileNotFoundError:
                pass
        self._call("delete", key, rm)

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything under `prefix`."""
        def rm() -> None:
            try:
                self.fs.rm(self._path(prefix), recursive=True)
            except FileNotFoundError:
                pass
        self._call("delete", prefix, rm)


def open_store(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
    """A store for a local folder (plain path or ``file://``) or any fsspec URL such as ``s3://bucket/prefix``."""
    text = os.fspath(url)
    if "://" not in text:
        return LocalStore(text)
    if text.startswith("file://"):
        return LocalStore(text[len("file://"):])
    return FsspecStore(text, storage_options)
