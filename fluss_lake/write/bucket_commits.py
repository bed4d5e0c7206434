"""The buckets of one write commit side by side: each in a thread of a small process-wide pool.

A bucket's commit is independent of the others' (its own log, state and lock), and much of it runs without the
GIL: the fsyncs of its object and folder, Arrow IPC encoding, the Polars work of its merge. Committing a write's
buckets one after the other made a small write cost the sum of those waits; side by side it costs about the
slowest bucket's. Each bucket stays all-or-nothing as before: a bucket whose commit fails is not committed (and
is retried, exactly once, by the writer's next flush), the others are committed and reported.

The pool is made on first use and again in a forked child (a fork keeps the pool object, not its threads).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["commit_side_by_side", "MAX_THREADS"]

T = TypeVar("T")

#: Threads of the pool: more would only wait for the GIL and the disk (the fsyncs of a few buckets at once).
MAX_THREADS = 8

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1


def _executor() -> ThreadPoolExecutor:
    """The process's commit pool (a new one after a fork)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="fluss-lake-commit")
            _pool_pid = os.getpid()
        return _pool


def commit_side_by_side(commits: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """Run every commit (one per bucket) and return, in order, its result or the exception it raised.

    One commit runs in the calling thread; with more, all but the first go to the pool and the first runs here
    meanwhile. Every commit runs to its end before this returns, whatever the others do.
    """
    if not commits:
        return []
    if len(commits) == 1:
        try:
            return [commits[0]()]
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller, which raises it
            return [exc]
    pool = _executor()
    futures: list[Future[T]] = [pool.submit(commit) for commit in commits[1:]]
    out: list[T | BaseException] = []
    try:
        out.append(commits[0]())
    except BaseException as exc:  # noqa: BLE001
        out.append(exc)
    for future in futures:
        try:
            out.append(future.result())
        except BaseException as exc:  # noqa: BLE001
            out.append(exc)
    return out
