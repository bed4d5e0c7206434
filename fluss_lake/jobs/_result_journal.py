"""The shards of one delta join write their result rows one at a time, and each knows which keys the others wrote.

Why: a result row (a, b) is derived from a change on A by the shard owning A's bucket and from a change on B by
the shard owning B's bucket, each probing the other side's current rows at its own moment. Run concurrently, the
shard that probed first may write last and leave a stale row. So the shards of a job serialize their *writes*
(not their reads and probes) with a lock object in the store, and every write appends the result keys it computed
to a journal. Before writing, a shard reads the journal entries of the other shards since it started probing; if
one of them wrote a key it is about to write, it probes again while holding the lock (nobody writes meanwhile).
Then every write is derived from input rows at least as new as those of every earlier write of the same key: after
the shards caught up, each result row comes from the inputs' current rows, as in the unsharded job.

The lock has a lease (``_LEASE_S``): a shard that died holding it is taken over after the lease, or at once by the
same shard started again (two live instances of one shard are refused by its checkpoints).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import uuid
from collections.abc import Iterator

import polars as pl

from fluss_lake.connection import Connection
from fluss_lake.exceptions import CommitConflictError
from fluss_lake.io import layout
from fluss_lake.jobs.shard import Shard

__all__ = ["ResultJournal"]

_LEASE_S = 30.0
_WAIT_S = 120.0
_KEEP_ENTRIES = 512


class ResultJournal:
    """The write lock and key journal shared by the shards of one job (one shard count)."""

    def __init__(self, connection: Connection, name: str, shard: Shard) -> None:
        self.store = connection.store
        self.shard = shard
        self.folder = f"{layout.job_prefix(name)}/shards-{shard.count}/journal"
        self.lock_key = f"{layout.job_prefix(name)}/shards-{shard.count}/write.lock"
        self.instance = uuid.uuid4().hex
        self.name = name

    def _entries(self) -> list[tuple[int, int]]:
        """(sequence number, shard index) of the journal's entries, oldest first."""
        out = []
        for entry in self.store.list(self.folder):
            seq, _, rest = entry.partition("-")
            if seq.isdigit() and rest.endswith(".ipc"):
                out.append((int(seq), int(rest[: -len(".ipc")])))
        return sorted(out)

    def mark(self) -> int:
        """The newest entry now (call before probing: later entries were written after the probes began)."""
        entries = self._entries()
        return entries[-1][0] if entries else -1

    def others_since(self, mark: int) -> pl.DataFrame | None:
        """Result keys other shards wrote after `mark` (an empty frame: none), or None if entries after it were
        collected meanwhile (then whatever they held must be assumed)."""
        entries = [e for e in self._entries() if e[0] > mark]
        if mark >= 0 and entries and entries[0][0] != mark + 1:
            return None
        frames = []
        for seq, index in entries:
            if index == self.shard.index:
                continue
            try:
                frames.append(pl.read_ipc(io.BytesIO(self.store.get(self._key(seq, index)))))
            except FileNotFoundError:
                return None
        return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()

    def _key(self, seq: int, index: int) -> str:
        return f"{self.folder}/{seq:020d}-{index}.ipc"

    def append(self, keys: pl.DataFrame) -> None:
        """Record the keys of a write (hold the lock); old entries beyond the newest few hundred are dropped."""
        entries = self._entries()
        seq = entries[-1][0] + 1 if entries else 0
        sink = io.BytesIO()
        keys.write_ipc(sink)
        if not self.store.put_if_absent(self._key(seq, self.shard.index), sink.getvalue()):
            raise CommitConflictError(
                f"job {self.name!r}: another shard wrote journal entry {seq} without holding the write lock; "
                "run each shard of the job once (one process per shard)"
            )
        for old, index in entries[: max(0, len(entries) + 1 - _KEEP_ENTRIES)]:
            self.store.delete(self._key(old, index))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the job's write lock (waiting for the other shards' writes)."""
        body = json.dumps(
            {"shard": self.shard.index, "instance": self.instance, "pid": os.getpid(), "at": time.time()}
        ).encode()
        deadline = time.monotonic() + _WAIT_S
        pause = 0.002
        while not self.store.put_if_absent(self.lock_key, body):
            if self._stale():
                with contextlib.suppress(FileNotFoundError):
                    self.store.delete(self.lock_key)
                continue
            if time.monotonic() > deadline:
                raise CommitConflictError(
                    f"job {self.name!r}: shard {self.shard} waited {_WAIT_S:.0f} s for the result write lock "
                    f"({self.lock_key}); another shard holds it: run the job again"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.store.delete(self.lock_key)

    def _stale(self) -> bool:
        """Whether the lock's holder is gone: its lease ran out, or it was an earlier instance of this shard."""
        try:
            held = json.loads(self.store.get(self.lock_key))
        except (FileNotFoundError, ValueError):
            return False
        if held.get("shard") == self.shard.index and held.get("instance") != self.instance:
            return True
        return time.time() - float(held.get("at", 0)) > _LEASE_S
