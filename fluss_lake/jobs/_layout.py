"""Shard layouts of a job: which shard count is current, and reassigning buckets when the count changes.

Generation 0 is the unsharded job (no marker: every job that never had shards). Each change of the shard count
claims the next generation with a marker ``.jobs/<name>/layouts/<generation>.json`` (create-if-absent, so two
processes reassigning at once cannot both win) naming the new count. A shard whose own checkpoint belongs to an
older generation (or that has none) builds its first checkpoint of the new generation from the checkpoints of
the previous one: for every (partition, bucket) it owns now, the offset of the old shard that owned it. The old
layout must be complete and stopped cleanly: every old shard has a checkpoint of that generation, none stopped
inside an announced step, and they agree on the ids of the input tables and partitions; otherwise the
reassignment is refused (:class:`~fluss_lake.JobStateError`) before anything is claimed. A shard of an older
generation still running when the next one is claimed fails at its next checkpoint (the fence): it never
commits offsets the new layout already took over.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from fluss_lake.connection import Connection
from fluss_lake.exceptions import JobStateError
from fluss_lake.io import layout
from fluss_lake.io.checksum import dumps_json, loads_json
from fluss_lake.jobs.checkpoint import BucketOffsets, Checkpoint, CheckpointStore
from fluss_lake.jobs.shard import Shard, owner
from fluss_lake.table import Table

__all__ = ["fenced", "generations", "open_checkpoint"]

_LAYOUTS = "layouts"
_PENDING = "pending"  # the exactly-once announcement (``_exactly_once``)


def _marker(name: str, generation: int) -> str:
    return f"{layout.job_prefix(name)}/{_LAYOUTS}/{generation:06d}.json"


def generations(connection: Connection, name: str) -> dict[int, int]:
    """Generation -> shard count of every layout the job had (generation 0: unsharded)."""
    store = connection.store
    out = {0: 1}
    folder = f"{layout.job_prefix(name)}/{_LAYOUTS}"
    for entry in store.list(folder):
        if entry.endswith(".json") and entry[:-5].isdigit():
            key = f"{folder}/{entry}"
            out[int(entry[:-5])] = int(loads_json(store.get(key), key=key, what="job shard layout")["count"])
    return out


def fenced(connection: Connection, name: str, generation: int) -> bool:
    """Whether a newer layout than `generation` was claimed (the job was reassigned)."""
    return connection.store.exists(_marker(name, generation + 1))


def _shard_of(index: int, count: int) -> Shard | None:
    return None if count == 1 else Shard(index, count)


def _generation(checkpoint: Checkpoint) -> int:
    return int(checkpoint.layout.get("generation", 0))


def _members(connection: Connection, name: str, count: int, generation: int) -> dict[int, Checkpoint]:
    """The checkpoints of the shards of one layout (those of another generation are not its members)."""
    found = {}
    for index in range(count):
        checkpoint = CheckpointStore(connection, name, _shard_of(index, count)).load()
        if checkpoint is not None and _generation(checkpoint) == generation:
            found[index] = checkpoint
    return found


def _source(
    connection: Connection, name: str, known: Mapping[int, int], generation: int
) -> tuple[int, int, dict[int, Checkpoint]]:
    """The newest layout before `generation` that holds checkpoints (generation, count, members); a layout
    claimed but never started (no member committed) consumed nothing, so its own source still holds the truth."""
    for gen in range(generation - 1, -1, -1):
        if gen not in known:
            continue
        members = _members(connection, name, known[gen], gen)
        if members:
            return gen, known[gen], members
    return 0, 1, {}


def _where(shard: Shard | None) -> str:
    return "the unsharded job" if shard is None else f"Shard({shard.index}, {shard.count})"


def _check_source(name: str, count: int, gen: int, members: Mapping[int, Checkpoint]) -> None:
    """Refuse a source layout that is incomplete or was not stopped cleanly."""
    missing = [i for i in range(count) if i not in members]
    if missing:
        raise JobStateError(
            f"job {name!r}: cannot reassign its buckets: the layout of {count} shards (generation {gen}) has no "
            f"checkpoint of shard(s) {missing}; construct (and stop) every shard of {count} once, then change the "
            "shard count"
        )
    for index, checkpoint in members.items():
        if _PENDING in checkpoint.extra:
            raise JobStateError(
                f"job {name!r}: {_where(_shard_of(index, count))} stopped inside a step (it crashed after announcing "
                "it); run it once more (run_once) so the step completes, then change the shard count"
            )
        if "state" in checkpoint.extra:
            raise JobStateError(
                f"job {name!r} keeps operator state in its checkpoints (a stateful join): it cannot be sharded"
            )


def _merge(
    name: str,
    shard: Shard | None,
    inputs: Mapping[str, Table],
    count: int,
    members: Mapping[int, Checkpoint],
) -> tuple[dict[str, BucketOffsets], dict[str, str], dict[str, dict[str, str]]]:
    """Offsets, table ids and partition ids for `shard` from the checkpoints of the old layout's shards."""
    table_ids: dict[str, str] = {}
    partitions: dict[str, dict[str, str]] = {}
    offsets: dict[str, BucketOffsets] = {}
    for index, checkpoint in sorted(members.items()):
        for alias, table_id in checkpoint.table_ids.items():
            if table_ids.setdefault(alias, table_id) != table_id:
                raise JobStateError(
                    f"job {name!r}: its old shards disagree on which table input {alias!r} is (one saw it "
                    "re-created): reset() the job and start over"
                )
        for alias, ids in checkpoint.partitions.items():
            merged = partitions.setdefault(alias, {})
            for part, pid in ids.items():
                if merged.setdefault(part, pid) != pid:
                    raise JobStateError(
                        f"job {name!r}: its old shards of {count} disagree on partition {part!r} of input {alias!r} "
                        "(dropped and re-created while they ran); run each of them once (run_once) so they all "
                        "see the partition, stop them, then change the shard count"
                    )
        for alias, offs in checkpoint.offsets.items():
            mine = offsets.setdefault(alias, {})
            for key, offset in offs.items():
                if count > 1 and owner(key[0], key[1], count) != index:
                    raise JobStateError(
                        f"job {name!r}: the checkpoint of Shard({index}, {count}) holds offsets of "
                        f"{key} that the shard does not own; the checkpoints were altered: reset() the job"
                    )
                if shard is None or shard.owns(*key):
                    mine[key] = offset
    for alias, table in inputs.items():
        if alias in offsets and not table.is_partitioned:
            absent = [b for b in range(table.bucket_num) if (shard is None or shard.owns(None, b))]
            absent = [b for b in absent if (None, b) not in offsets[alias]]
            if absent:
                raise JobStateError(
                    f"job {name!r}: the old shards' checkpoints hold no offsets of bucket(s) {absent} of input "
                    f"{alias!r}; they are incomplete: reset() the job"
                )
    return offsets, table_ids, partitions


def open_checkpoint(
    connection: Connection, name: str, shard: Shard | None, inputs: Mapping[str, Table]
) -> tuple[Checkpoint | None, bool]:
    """The checkpoint the job of `shard` starts from, and whether it was just built from another layout (then the
    caller commits it at once: the new layout exists from then on).

    None: a job that never ran (it starts from its `start` offsets)."""
    store = CheckpointStore(connection, name, shard)
    own = store.load()
    count = 1 if shard is None else shard.count
    known = generations(connection, name)
    top = max(known)
    if own is not None:
        gen = _generation(own)
        if gen > top or known.get(gen) != count:
            raise JobStateError(
                f"job {name!r}: the checkpoint of {_where(shard)} names shard layout {gen}, which the job's "
                f"layouts ({known}) do not record as {count} shard(s); the job's folder was altered: reset() the job"
            )
        if gen == top:
            return own, False
    elif top == 0 and count == 1:
        return None, False  # an unsharded job that never ran
    generation = top if known[top] == count else top + 1
    source_gen, source_count, members = _source(connection, name, known, generation)
    if members:
        _check_source(name, source_count, source_gen, members)
    if generation > top:
        marker = _marker(name, generation)
        if not connection.store.put_if_absent(marker, dumps_json({"count": count})):
            claimed = int(loads_json(connection.store.get(marker), key=marker, what="job shard layout")["count"])
            if claimed != count:
                raise JobStateError(
                    f"job {name!r}: another process reassigned it to {claimed} shard(s) at the same time; run "
                    f"the shards of {claimed}, or stop them and change the count again"
                )
        # an old shard that committed between our read and the claim is fenced from now on: read them again
        members = _members(connection, name, source_count, source_gen) if members else members
        if members:
            _check_source(name, source_count, source_gen, members)
    offsets, table_ids, partitions = _merge(name, shard, inputs, source_count, members)
    fresh = all(m.number == 0 and "fresh" in m.layout for m in members.values())
    if not table_ids:
        table_ids = {alias: table.info.table_id for alias, table in inputs.items()}
    checkpoint = Checkpoint(
        own.number if own is not None else -1,
        own.job_uid if own is not None else uuid.uuid4().hex,
        offsets,
        table_ids,
        {},
        partitions,
        # "fresh": nothing consumed yet (no old shard consumed anything); the job's first step drops it
        {"generation": generation, "count": count, **({"fresh": 1} if fresh else {})},
    )
    return checkpoint, True
