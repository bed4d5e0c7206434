"""The process's background compactor: merges of file segments run off the write path, on a worker thread.

A write that flushes its memtable only asks for compaction; one daemon thread per process merges runs of
similar-size segments for the stores that asked, one merge at a time (RocksDB's background compaction, with
one thread: two cores are the norm here and the writer keeps the other). The heavy part of a merge reads
immutable segments and writes a new file without the store's lock; only picking the run and putting the
result in place take it (see ``KvStore.compact_step``). The merge work (numpy sorts, the compiled gathers,
Arrow IPC writes) releases the GIL, so it really runs beside the writer.

``FLUSS_LAKE_BACKGROUND_COMPACTION=0`` (or :func:`set_enabled`) turns it off: merges then run inline, as they
did before. At exit the worker finishes its current merge; a process killed meanwhile leaves at most a
temporary file in its private working folder (the state is in the log and the published snapshots).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import deque
from typing import Protocol

__all__ = ["Compactable", "drain", "enabled", "request", "set_enabled"]

_log = logging.getLogger(__name__)
_enabled = os.environ.get("FLUSS_LAKE_BACKGROUND_COMPACTION", "1") not in ("0", "false", "no")


class Compactable(Protocol):
    """What the compactor needs of a store (:class:`~fluss_lake.kv.kv_store.KvStore`): one merge at a time."""

    @property
    def directory(self) -> str:
        """The store's folder (names the store in the log when a merge fails)."""
        ...

    def compact_step(self) -> bool:
        """Run one merge; False when there is nothing (more) to merge."""
        ...


class _Worker:
    """The queue of stores waiting for compaction and the thread that serves it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: deque[Compactable] = deque()
        self.busy: Compactable | None = None
        self.thread: threading.Thread | None = None
        self.stopping = False

    def request(self, store: Compactable) -> None:
        with self.cond:
            if store not in self.queue:
                self.queue.append(store)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="fluss-lake-compactor", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    return
                store = self.busy = self.queue.popleft()
            try:
                while not self.stopping and store.compact_step():
                    pass
            except Exception:  # noqa: BLE001 -- a failed merge leaves the store as it was; the next flush asks again
                _log.exception("background compaction of %s failed", store.directory)
            finally:
                with self.cond:
                    self.busy = None
                    self.cond.notify_all()

    def drain(self, store: Compactable | None) -> None:
        with self.cond:
            while (store is None and (self.queue or self.busy is not None)) or (
                store is not None and (store in self.queue or self.busy is store)
            ):
                if self.thread is None or not self.thread.is_alive():
                    break
                self.cond.wait()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
            thread = self.thread
        if thread is not None:
            thread.join()


_worker = _Worker()


def enabled() -> bool:
    """Whether file merges run in the background (the default)."""
    return _enabled


def set_enabled(on: bool) -> None:
    """Turn background compaction on or off for this process (off: merges run inline, in the writer)."""
    global _enabled
    if not on:
        drain()
    _enabled = on


def request(store: Compactable) -> None:
    """Ask for the file segments of `store` to be compacted soon."""
    _worker.request(store)


def drain(store: Compactable | None = None) -> None:
    """Wait until the compactor has nothing left to do (for `store`, or for every store). Do not call it while
    holding a store's lock: the compactor needs it to finish."""
    _worker.drain(store)


def _after_fork() -> None:
    """A forked child has no worker thread (and maybe a lock held by the parent's): start afresh."""
    global _worker
    _worker = _Worker()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(lambda: _worker.stop())
