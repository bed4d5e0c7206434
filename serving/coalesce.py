"""Online-feature requests for the same views that arrive while one is being answered are answered together.

One ``online_features`` call costs mostly per call (a lookup per view and bucket, the rules per view), little per
entity row. So when several clients ask at once, the requests that queued while a call ran are answered by one
call over all their entity rows, split back per request (as Fluss's lookup client batches the lookups of
concurrent callers). A request waits at most for the call running when it came plus its own batch; alone, it runs
at once. A batch that fails is answered request by request, so each request gets its own error.

Requests that log their answer, name a prediction time or whose entity columns differ are never merged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

import polars as pl

from fluss_lake.training import OnlineFeatures

__all__ = ["Coalescer"]


@dataclass
class _Waiter:
    entities: pl.DataFrame
    done: threading.Event = field(default_factory=threading.Event)
    batch: list[_Waiter] | None = None  # set when this waiter is made the leader of a batch
    result: OnlineFeatures | None = None
    error: BaseException | None = None


class Coalescer:
    """Runs ``compute(entities)`` for batches of concurrent requests with the same key.

    >>> import polars as pl
    >>> from datetime import UTC, datetime
    >>> from fluss_lake.training import OnlineFeatures
    >>> calls = []
    >>> def compute(entities):
    ...     calls.append(entities.height)
    ...     return OnlineFeatures(entities, datetime.now(UTC), (), (), ())
    >>> Coalescer().run("views", pl.DataFrame({"id": [1, 2]}), compute).frame["id"].to_list(), calls
    ([1, 2], [2])
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[Hashable] = set()
        self._queues: dict[Hashable, list[_Waiter]] = {}
        self.batches = 0  # calls that answered more than one request

    def run(
        self, key: Hashable, entities: pl.DataFrame, compute: Callable[[pl.DataFrame], OnlineFeatures]
    ) -> OnlineFeatures:
        """The answer for `entities`, computed alone or together with concurrent requests of the same `key`."""
        me = _Waiter(entities)
        with self._lock:
            if key in self._running:
                self._queues.setdefault(key, []).append(me)
                batch = None
            else:
                self._running.add(key)
                batch = [me]
        if batch is None:
            me.done.wait()
            if me.batch is None:  # answered inside another request's batch
                return _outcome(me)
            batch = me.batch  # made the leader of the requests that queued meanwhile
        try:
            if _answer(batch, compute):
                self.batches += 1
        finally:
            self._hand_over(key)
        return _outcome(me)

    def together(
        self, requests: list[pl.DataFrame], compute: Callable[[pl.DataFrame], OnlineFeatures]
    ) -> list[OnlineFeatures | BaseException]:
        """The answers to requests already gathered (by one event loop rather than by threads), in order: one
        call for all of them, or, if that fails, one call each (each its own answer or error)."""
        batch = [_Waiter(entities) for entities in requests]
        if _answer(batch, compute):
            self.batches += 1
        return [w.error if w.error is not None else _outcome(w) for w in batch]

    def _hand_over(self, key: Hashable) -> None:
        """Give the requests that queued meanwhile to one of them, which answers them all, or end the run."""
        with self._lock:
            queued = self._queues.pop(key, [])
            if not queued:
                self._running.discard(key)
                return
        leader = queued[0]
        leader.batch = queued
        leader.done.set()


def _outcome(waiter: _Waiter) -> OnlineFeatures:
    if waiter.error is not None:
        raise waiter.error
    assert waiter.result is not None
    return waiter.result


def _answer(batch: list[_Waiter], compute: Callable[[pl.DataFrame], OnlineFeatures]) -> bool:
    """Set every waiter's result (or error) and wake the others; one call if the batch allows it (then True)."""
    leader = batch[0]
    others = batch[1:]
    try:
        schema = leader.entities.schema
        if len(batch) == 1 or any(w.entities.schema != schema for w in others):
            raise _Separately
        merged = compute(_stacked([w.entities for w in batch]))
        start = 0
        for waiter in batch:
            n = waiter.entities.height
            waiter.result = replace(
                merged,
                frame=merged.frame.slice(start, n),
                status=tuple(s.slice(start, n) for s in merged.status),
                value_times=tuple(t.slice(start, n) for t in merged.value_times),
            )
            start += n
        return True
    except BaseException:  # noqa: BLE001 - one call per request instead: each gets its own answer or error
        for waiter in batch:
            try:
                waiter.result, waiter.error = compute(waiter.entities), None
            except BaseException as exc:  # noqa: BLE001 - handed to the request's own thread
                waiter.result, waiter.error = None, exc
        return False
    finally:
        for waiter in others:
            waiter.done.set()


def _stacked(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames one after the other, by appending chunks (``vstack``): ``pl.concat`` hands the work to Polars'
    thread pool, ~0.1-0.3 ms from a server thread whose peers hold the cores."""
    out = frames[0]
    for frame in frames[1:]:
        out = out.vstack(frame)
    return out


class _Separately(Exception):
    """The batch cannot be one call (a single request, or entity columns that differ)."""
