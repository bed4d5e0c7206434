"""Job checkpoints: the consumed offsets per input bucket, kept as small immutable objects in the store.

Checkpoint ``n`` of job ``name`` is ``.jobs/<name>/ckpt-<n>.json``, created with the store's atomic
create-if-absent. Two instances of one job racing to commit the same checkpoint cannot both win (the loser gets
:class:`~fluss_lake.JobConflictError`), and a job restarted in a new process reads the newest checkpoint: a listing
of a folder that never holds more than a few objects, so restart time does not grow with the data.

Offsets are keyed by (partition name or None, bucket); for a partitioned input the checkpoint also records the id
of every partition it holds offsets for, so a partition dropped and re-created under the same name (a fresh id,
an empty log) is read from its start instead of from the old partition's offsets.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fluss_lake.connection import Connection
from fluss_lake.exceptions import JobConflictError
from fluss_lake.io import layout
from fluss_lake.io.checksum import corrupted, dumps_json, loads_json, seal, unseal
from fluss_lake.jobs.shard import Shard
from fluss_lake.metadata.table_path import check_name

__all__ = ["BucketOffsets", "Checkpoint", "CheckpointStore", "shard_prefix"]

#: (partition name or None, bucket) -> next offset to consume
BucketOffsets = dict[tuple[str | None, int], int]

_KEEP = 2


def shard_prefix(job_prefix: str, shard: Shard) -> str:
    """Where shard `index` of `count` keeps its checkpoints: ``.jobs/<name>/shards-<count>/<index>``."""
    return f"{job_prefix}/shards-{shard.count}/{shard.index}"


@dataclass(frozen=True)
class Checkpoint:
    """What a job has consumed: offsets per input (alias) and bucket, plus job-specific fields."""

    number: int
    job_uid: str
    offsets: dict[str, BucketOffsets]
    table_ids: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    #: alias -> partition name -> partition id (partitioned inputs only)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    #: sharded jobs: {"generation": g, "count": n} of the shard layout this checkpoint belongs to (``_layout``)
    layout: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = {
            "number": self.number,
            "job_uid": self.job_uid,
            "table_ids": self.table_ids,
            "extra": self.extra,
            "offsets": {
                alias: [[p, b, o] for (p, b), o in sorted(offs.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))]
                for alias, offs in self.offsets.items()
            },
            "partitions": self.partitions,
        }
        if self.layout:  # written only by sharded or reassigned jobs: unsharded checkpoints stay as before
            body["layout"] = self.layout
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Checkpoint:
        offsets = {alias: {(p, int(b)): int(o) for p, b, o in rows} for alias, rows in body["offsets"].items()}
        partitions = {
            alias: {str(n): str(i) for n, i in ids.items()} for alias, ids in (body.get("partitions") or {}).items()
        }
        return cls(
            int(body["number"]),
            body["job_uid"],
            offsets,
            dict(body["table_ids"]),
            dict(body.get("extra") or {}),
            partitions,
            {str(k): int(v) for k, v in (body.get("layout") or {}).items()},
        )

    def size_bytes(self) -> int:
        """Size of the serialized checkpoint (a delta join's whole operator state)."""
        return len(json.dumps(self.to_json()).encode())


class CheckpointStore:
    """The checkpoints of one job in a connection's store."""

    def __init__(self, connection: Connection, name: str, shard: Shard | None = None) -> None:
        self.store = connection.store
        self.name = check_name("job", name)
        #: the job's folder (shard layouts, write journal); a shard's checkpoints are in a folder below it
        self.job_prefix = layout.job_prefix(name)
        self.prefix = self.job_prefix if shard is None else shard_prefix(self.job_prefix, shard)
        self.shard = shard

    def _names(self) -> list[str]:
        return sorted(n for n in self.store.list(self.prefix) if n.startswith("ckpt-") and n.endswith(".json"))

    def load(self) -> Checkpoint | None:
        """The newest checkpoint, or None for a job that never committed one."""
        for name in reversed(self._names()):
            try:
                key = f"{self.prefix}/{name}"
                checkpoint = Checkpoint.from_json(loads_json(self.store.get(key), key=key, what="job checkpoint"))
            except FileNotFoundError:  # collected meanwhile by a newer instance: take the next newest
                continue
            named = name[len("ckpt-") : -len(".json")]
            if named.isdigit() and checkpoint.number != int(named):  # its next commit would collide with a newer one
                raise corrupted(
                    key,
                    f"it holds checkpoint {checkpoint.number}, not {named} (checkpoints swapped or renamed)",
                    what="job checkpoint",
                )
            return checkpoint
        return None

    def commit(self, checkpoint: Checkpoint) -> None:
        """Create checkpoint ``number`` atomically; another instance that got there first makes this raise."""
        key = f"{self.prefix}/ckpt-{checkpoint.number:020d}.json"
        if not self.store.put_if_absent(key, dumps_json(checkpoint.to_json())):
            who = "this job" if self.shard is None else f"shard {self.shard} of this job"
            raise JobConflictError(
                f"job {self.name!r}: checkpoint {checkpoint.number} was committed by another "
                f"instance of {who}; run one instance per job name and shard (this one stops here)"
            )
        for old in self._names()[:-_KEEP]:
            self.store.delete(f"{self.prefix}/{old}")
        for name in self.store.list(f"{self.prefix}/attachments"):
            number = int(name.split("-", 1)[0])
            if number < checkpoint.number - _KEEP:
                self.store.delete(f"{self.prefix}/attachments/{name}")

    def put_attachment(self, number: int, name: str, data: bytes) -> str:
        """Store a blob a checkpoint will name (the stateful join's state); returns its object name."""
        obj = f"{number:020d}-{name}-{uuid.uuid4().hex[:8]}"
        self.store.put(f"{self.prefix}/attachments/{obj}", seal(data))
        return obj

    def get_attachment(self, obj: str) -> bytes:
        """A blob stored with :meth:`put_attachment` (its checksum checked)."""
        key = f"{self.prefix}/attachments/{obj}"
        return unseal(self.store.get(key), key=key, what="job attachment").to_pybytes()

    def reset(self) -> None:
        """Forget every checkpoint: the job starts again from the earliest offsets."""
        self.store.delete_prefix(self.prefix)
