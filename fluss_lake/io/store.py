"""The only place that touches storage: a tiny object-store interface over a local folder or fsspec.

Commits rely on one primitive, :meth:`ObjectStore.put_if_absent`: an atomic create that fails when the object
exists. Local folders get it from ``link(2)`` of a fully written temp file (exclusive and never half-visible);
S3 from a conditional put (``If-None-Match: *``) through s3fs. A put whose answer was lost and whose retry finds
the object already there is recognised as our own by a unique id sent with it as user metadata.
Other fsspec backends are refused: their ``pipe_file(mode="create")`` is an exists-check followed by a write,
which two writers can both pass.

Every remote call has a deadline (``call_timeout`` storage option, seconds, plus one second per MiB sent), so an
endpoint that stops answering makes the call fail with :class:`StorageUnavailableError` instead of hanging.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from fluss_lake.exceptions import StorageError, StorageUnavailableError
from fluss_lake.io.files import fsync_dir, unlink_quietly

__all__ = ["ObjectStore", "LocalStore", "FsspecStore", "is_storage_unavailable", "open_store"]

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
    def collect_temp(self, prefix: str, older_than_s: float) -> int: ...


_TMP_PREFIX = ".tmp-"
#: Flush a new file's bytes and size to disk. ``fdatasync`` (where the OS has it) skips the timestamps, which a
#: reader never needs; the folder entry made afterwards is made durable by its own fsync.
_datasync = getattr(os, "fdatasync", os.fsync)


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
        """Create `key` with `data` atomically; False if it exists already.

        The bytes are written and fsynced under a hidden temp name, then hard-linked to the final name (which
        fails if it exists) and the folder is fsynced, so an acknowledged create survives a crash and a
        reader never sees a partial object.
        """
        path, directory, tmp = self._stage(key, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            unlink_quietly(tmp)
        fsync_dir(directory)
        return True

    def _stage(self, key: str, data: bytes) -> tuple[str, str, str]:
        """Final path, its folder, and a complete fsynced temp file holding `data` beside it."""
        path = self._path(key)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        return path, directory, self._write_temp(directory, data)

    def put(self, key: str, data: bytes) -> None:
        """Create or replace `key` atomically (rename of a complete, fsynced temp file)."""
        path, directory, tmp = self._stage(key, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            unlink_quietly(tmp)
            raise
        fsync_dir(directory)

    @staticmethod
    def _write_temp(directory: str, data: bytes) -> str:
        """A complete, fsynced hidden temp file in `directory` (removed again if writing fails)."""
        tmp = os.path.join(directory, f"{_TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                _datasync(handle.fileno())
        except BaseException:
            unlink_quietly(tmp)
            raise
        return tmp

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
            return sorted(n for n in os.listdir(self._path(prefix)) if not n.startswith(_TMP_PREFIX))
        except FileNotFoundError:
            return []

    def delete(self, key: str) -> None:
        """Remove an object if present."""
        unlink_quietly(self._path(key))

    def collect_temp(self, prefix: str, older_than_s: float) -> int:
        """Delete temp files a killed writer left under the folder `prefix`; returns how many."""
        import time

        folder, removed = self._path(prefix), 0
        try:
            names = [n for n in os.listdir(folder) if n.startswith(_TMP_PREFIX)]
        except FileNotFoundError:
            return 0
        for name in names:
            path = os.path.join(folder, name)
            try:
                if time.time() - os.path.getmtime(path) > older_than_s:
                    os.unlink(path)
                    removed += 1
            except FileNotFoundError:
                pass
        return removed

    def delete_prefix(self, prefix: str) -> None:
        """Remove a whole folder."""
        import shutil

        shutil.rmtree(self._path(prefix), ignore_errors=True)


#: Exception class names (botocore, aiohttp, s3fs/fsspec, builtins) that mean the endpoint did not answer.
_UNAVAILABLE_NAMES = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ServerDisconnectedError",
    "ClientConnectorError",
    "ClientOSError",
    "TimeoutError",
    "FSTimeoutError",
)
#: S3 error codes that mean "the service is overloaded or failed; the same request may succeed later".
_UNAVAILABLE_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "Throttling",
        "ThrottlingException",
        "500",
        "502",
        "503",
        "504",
    }
)
#: HTTP client libraries whose connection, endpoint and timeout errors (by class name) mean "no answer".
_CLIENT_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3")
_CLIENT_NAME_PARTS = ("Connect", "Timeout", "Endpoint")
_UNAVAILABLE_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT})
#: What OSErrors of pyarrow's S3 filesystem (AWS SDK over curl) and of sockets say when the endpoint is gone.
_UNAVAILABLE_MESSAGES = (
    "NETWORK_CONNECTION",
    "Could not connect",
    "timed out",
    "Connection refused",
    "Connection reset",
    "curlCode",
)


def is_storage_unavailable(exc: BaseException | None) -> bool:
    """Whether an exception, or one in its ``__cause__`` / ``__context__`` chain, means the storage endpoint did
    not answer or answered "try later" (so the same call may succeed when it is back).

    It recognises connection and timeout errors (builtin, by errno, and botocore / aiobotocore / aiohttp / urllib3 /
    s3fs classes), S3 answers with a 5xx status or a throttling code (botocore ``ClientError``), and pyarrow's S3
    errors by their message (``AWS Error NETWORK_CONNECTION``, ``curlCode``, ``Could not connect``, ...).

    Examples
    --------
    >>> is_storage_unavailable(ConnectionRefusedError(111, "Connection refused"))
    True
    >>> is_storage_unavailable(OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7"))
    True
    >>> try:
    ...     try:
    ...         raise TimeoutError("read timed out")
    ...     except TimeoutError as exc:
    ...         raise RuntimeError("commit failed") from exc
    ... except RuntimeError as outer:
    ...     is_storage_unavailable(outer)
    True
    >>> is_storage_unavailable(FileNotFoundError("no such key")), is_storage_unavailable(ValueError("timed out"))
    (False, False)
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _says_unavailable(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _says_unavailable(exc: BaseException) -> bool:
    """Whether this one exception (not its chain) means the endpoint did not answer, or answered 'try later'."""
    name, module = type(exc).__name__, type(exc).__module__
    if isinstance(exc, ConnectionError | TimeoutError) or name in _UNAVAILABLE_NAMES or "Timeout" in name:
        return True
    if module.startswith(_CLIENT_MODULES) and any(part in name for part in _CLIENT_NAME_PARTS):
        return True
    if isinstance(exc, OSError) and (
        exc.errno in _UNAVAILABLE_ERRNOS or any(text in str(exc) for text in _UNAVAILABLE_MESSAGES)
    ):
        return True
    response = getattr(exc, "response", None)  # botocore ClientError: a 5xx or throttling answer
    if isinstance(response, Mapping):
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        code = str((response.get("Error") or {}).get("Code", ""))
        if (isinstance(status, int) and status >= 500) or code in _UNAVAILABLE_CODES:
            return True
    return False


#: Protocols whose ``pipe_file(..., mode="create")`` is an atomic conditional create (``If-None-Match: *``).
_ATOMIC_CREATE_PROTOCOLS = frozenset({"s3", "s3a"})
#: In-process filesystems: an atomic create only needs a lock.
_IN_PROCESS_PROTOCOLS = frozenset({"memory"})
_IN_PROCESS_LOCK = threading.Lock()
_DEFAULT_CALL_TIMEOUT = 120.0
_SECONDS_PER_MIB = 1.0
_WRITES = ("create", "write", "delete")
_PUT_ID = "fluss-lake-put-id"


def _drop_expect_100_continue(request: Any, **_: Any) -> None:
    """botocore sends ``Expect: 100-continue`` with uploads; aiohttp then waits for the interim answer with no
    timeout at all, so a PUT to an endpoint that stopped answering hangs forever. Send the body directly."""
    request.headers.pop("Expect", None)


class FsspecStore:
    """Any fsspec filesystem with an atomic create: ``s3://bucket/prefix`` (s3fs), or ``memory://`` in-process.

    ``storage_options`` go to fsspec, except ``call_timeout`` (seconds, default 120): the deadline of one
    storage call, retries included, plus one second per MiB uploaded. A call past it is cancelled and raises
    :class:`StorageUnavailableError`.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec

        options = dict(storage_options or {})
        self.call_timeout = float(options.pop("call_timeout", _DEFAULT_CALL_TIMEOUT))
        # Never answer from fsspec's listing cache: s3fs's cat_file/info consult it, and a cached listing of a
        # log folder hides every batch other processes committed since (a writer then loses every race forever).
        options["use_listings_cache"] = False
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        self.root = self.root.rstrip("/")
        protocols = {self.fs.protocol} if isinstance(self.fs.protocol, str) else set(self.fs.protocol)
        self._in_process = bool(protocols & _IN_PROCESS_PROTOCOLS)
        if not protocols & (_ATOMIC_CREATE_PROTOCOLS | _IN_PROCESS_PROTOCOLS):
            raise StorageError(
                f"{self.url}: fsspec protocol {sorted(protocols)} has no atomic create-if-absent, so "
                "two writers could both commit the same log offset; use a local folder or s3://"
            )
        self._patched_client: Any = None

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def local_path(self, key: str) -> str | None:
        """Remote stores have no local path."""
        return None

    # ------------------------------------------------------------ plumbing
    def _prepare_client(self) -> None:
        """Install the no-``Expect`` hook on the s3fs client (again if s3fs made a new client)."""
        if not hasattr(self.fs, "set_session"):
            return
        client = getattr(self.fs, "_s3", None)
        if client is None:
            self.fs.connect()
            client = self.fs._s3
        if client is not self._patched_client:
            # a client without botocore events: the call deadline still bounds a hang
            with contextlib.suppress(AttributeError):
                client.meta.events.register(
                    "before-send.s3", _drop_expect_100_continue, unique_id="fluss-lake-no-expect-100-continue"
                )
            self._patched_client = client

    def _run(self, method: str, *args: Any, nbytes: int = 0, **kwargs: Any) -> Any:
        """Call a filesystem method, with a deadline (and cancellation) when the filesystem is asynchronous."""
        coroutine = getattr(self.fs, f"_{method}", None)
        if getattr(self.fs, "async_impl", False) and coroutine is not None:
            from fsspec.asyn import sync

            self._prepare_client()
            deadline = self.call_timeout + _SECONDS_PER_MIB * nbytes / 2**20
            return sync(self.fs.loop, coroutine, *args, timeout=deadline, **kwargs)
        return getattr(self.fs, method)(*args, **kwargs)

    def _read(self, path: str) -> bytes:
        """An object's bytes in one GET (s3fs would first ask for the size, a HEAD, to split big objects)."""
        if getattr(self.fs, "async_impl", False) and hasattr(self.fs, "max_concurrency"):
            return self._run("cat_file", path, max_concurrency=1)
        return self._run("cat_file", path)

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """Run a storage call, turning endpoint failures into StorageUnavailableError."""
        try:
            return fn()
        except FileNotFoundError as exc:
            if what in ("create", "write"):  # the object cannot be missing: the bucket or container is
                raise StorageError(
                    f"storage at {self.url} failed to {what} {key!r}: {exc!r} (does the bucket exist?)"
                ) from exc
            raise
        except (FileExistsError, StorageError):
            raise
        except Exception as exc:
            if is_storage_unavailable(exc):
                outcome = (
                    "the request may or may not have reached the store; re-read before relying on either"
                    if what in _WRITES
                    else "nothing was changed"
                )
                raise StorageUnavailableError(
                    f"storage at {self.url} did not answer while trying to {what} {key!r} ({type(exc).__name__}); "
                    f"{outcome}; retry when the endpoint is back"
                ) from exc
            raise StorageError(f"storage at {self.url} failed to {what} {key!r}: {exc}") from exc

    # ------------------------------------------------------------ objects
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Conditional put; True only if this call created the object.

        Each call tags its PUT with a fresh id (user metadata). When a retry (s3fs/botocore retry after a lost
        answer) meets an existing object, the id tells whether an earlier attempt of this very call created it,
        even when another writer happened to write identical bytes.
        """
        path = self._path(key)

        def create() -> bool:
            if self._in_process:
                with _IN_PROCESS_LOCK:
                    if self.fs.exists(path):
                        return False
                    self.fs.pipe_file(path, data)
                    return True
            put_id = uuid.uuid4().hex
            try:
                self._run("pipe_file", path, data, mode="create", Metadata={_PUT_ID: put_id}, nbytes=len(data))
                return True
            except FileExistsError:
                try:
                    return bool(self._run("metadata", path).get(_PUT_ID) == put_id)
                except FileNotFoundError:
                    return False

        return self._call("create", key, create)

    def put(self, key: str, data: bytes) -> None:
        """Create or replace an object."""
        self._call("write", key, lambda: self._run("pipe_file", self._path(key), data, nbytes=len(data)))

    def get(self, key: str) -> bytes:
        """The object's bytes."""
        return self._call("read", key, lambda: self._read(self._path(key)))

    def exists(self, key: str) -> bool:
        """Whether the object exists (fresh answer, no listing cache)."""

        def check() -> bool:
            try:
                self._run("info", self._path(key), refresh=True)
                return True
            except FileNotFoundError:
                return False

        return self._call("check", key, check)

    def list(self, prefix: str) -> list[str]:
        """Names directly under `prefix`, sorted."""

        def ls() -> list[str]:
            try:
                entries = self._run("ls", self._path(prefix), detail=False, refresh=True)
            except FileNotFoundError:
                return []
            return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

        return self._call("list", prefix, ls)

    def delete(self, key: str) -> None:
        """Remove an object if present."""

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self._run("rm_file", self._path(key))

        self._call("delete", key, rm)

    def collect_temp(self, prefix: str, older_than_s: float) -> int:
        """Object stores commit whole objects: there are no temp files to collect."""
        return 0

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything under `prefix`."""

        def rm() -> None:
            with contextlib.suppress(FileNotFoundError):
                self._run("rm", self._path(prefix), recursive=True)

        self._call("delete", prefix, rm)


def open_store(url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None) -> ObjectStore:
    """A store for a local folder (plain path or ``file://``) or any fsspec URL such as ``s3://bucket/prefix``."""
    text = os.fspath(url)
    if "://" not in text:
        return LocalStore(text)
    if text.startswith("file://"):
        return LocalStore(text[len("file://") :])
    return FsspecStore(text, storage_options)
