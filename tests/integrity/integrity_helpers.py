"""The damage toolkit of the integrity tests: small stores built once, the objects to damage in them, the damages,
the read paths and what their answers must be (imported as a plain module: tests/integrity is on sys.path, and the
child processes of the "reopen" tests import it the same way).

Three pristine stores are built (each once per test process, then copied per case):

``log``
    ``d.ev``, a log table with 2 buckets: in each, two compacted log segments (``Table.compact_log`` with
    ``log_compaction_grace_ms=0``), loose batches after them, and a last one-row append whose batch is the newest
    of one bucket.
``pk``
    ``d.pk``, a primary-key table with 2 buckets and two state snapshots per bucket (segments of about 3,000 rows,
    so they have index files), a delete, a one-row tail upsert after the last snapshot; ``d.dim`` and ``d.view``
    with a delta join ``j`` (``d.pk`` left join ``d.dim``) that ran two steps (two job checkpoints) and has more to
    do.
``parted``
    ``d.parted``, a log table partitioned by ``day`` (three partitions: partition records), altered once (a second
    table metadata version) and written to after the ALTER.

Each store is also saved as it was right before its last write (``untailed``): the answer a read path gives there
is what a write that never happened looks like (the known limit, see ``test_damage_matrix``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import fluss_lake as fl
from fluss_lake.exceptions import CorruptedDataError, FlussLakeError
from fluss_lake.io.checksum import loads_json

LAKE_ON = {"table.datalake.enabled": True}
#: The fixtures' types (conftest.py): a pristine store by name, a copy of a store folder, the integrity warnings.
Pristine = Callable[[str], Path]
CopyStore = Callable[[Path, str], Path]
IntegrityLog = Callable[[], list[str]]
INTEGRITY_LOGGER = "fluss_lake.integrity"
JOB_NAME = "j"
#: Keys looked up: present, updated (every 7th), deleted (5, 6), written last (20000), never written.
LOOKUP_KEYS = [0, 5, 6, 7, 13, 2984, 3000, 5999, 6000, 9001, 11999, 12000, 20000, -1]

# ---------------------------------------------------------------- damages
#: Every damage of the matrix: truncations, one flipped byte (its lowest bit) at several positions, deletion, and
#: the bytes of two objects of the same kind in the same bucket (or folder) exchanged.
DAMAGES = (
    "truncate@0",
    "truncate@half",
    "truncate@-8",
    "flip@start",
    "flip@middle",
    "flip@end-8",
    "flip@last",
    "delete",
    "swap",
)
#: JSON objects (metadata, partition records, manifests, checkpoints) also get one digit changed in the first value
#: after their seal (a manifest's offset, a checkpoint's number, an id): the edit an operator makes by hand.
JSON_DAMAGES = (*DAMAGES, "digit@first-value")


def damaged_bytes(data: bytes, how: str) -> bytes | None:
    """The bytes of an object after damage `how` (None: deleted); ``swap`` is applied by :func:`damage`."""
    size = len(data)
    if how == "delete":
        return None
    kind, _, where = how.partition("@")
    if how == "digit@first-value":
        body = data.index(b",") + 1  # after {"_crc32c":<crc>,
        position = next(i for i in range(body, size) if data[i : i + 1].isdigit())
        return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]
    if kind == "truncate":
        return data[: {"0": 0, "half": size // 2, "-8": max(size - 8, 0)}[where]]
    if kind == "flip":
        position = {"start": 0, "middle": size // 2, "end-8": max(size - 8, 0), "last": size - 1}[where]
        flipped = bytearray(data)
        flipped[position] ^= 0x01
        return bytes(flipped)
    raise ValueError(f"unknown damage {how!r}")


class Objects:
    """The objects of a store by key (relative to its root): a local folder (or a bucket prefix: :class:`S3Objects`)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def listing(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, data: bytes) -> None:
        """Overwrite in place (as an operator's editor or a torn write would: same file, new bytes)."""
        with open(self.root / key, "r+b") as handle:
            handle.write(data)
            handle.truncate(len(data))

    def delete(self, key: str) -> None:
        (self.root / key).unlink()


class S3Objects(Objects):
    """The objects under ``s3://bucket/prefix`` of a moto server, read and damaged through boto3."""

    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")

    def listing(self) -> list[str]:
        found = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + "/"):
            found += [o["Key"][len(self.prefix) + 1 :] for o in page.get("Contents", [])]
        return sorted(found)

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")["Body"].read()

    def write(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=data)

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")

    def upload(self, folder: str | os.PathLike) -> None:
        """Copy a local store folder here (same keys)."""
        local = Objects(folder)
        for key in local.listing():
            self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=local.read(key))


def damage(objects: Objects, key: str, how: str, partner: str | None = None) -> None:
    """Apply damage `how` to one object (``swap``: exchange its bytes with `partner`'s)."""
    if how == "swap":
        assert partner is not None, f"{key}: nothing of its kind to swap it with"
        mine, theirs = objects.read(key), objects.read(partner)
        assert mine != theirs
        objects.write(key, theirs)
        objects.write(partner, mine)
        return
    after = damaged_bytes(objects.read(key), how)
    if after is None:
        objects.delete(key)
    else:
        objects.write(key, after)


# ---------------------------------------------------------------- the pristine stores
def _clock() -> Callable[[], int]:
    """Commit times one second apart, an hour ago (compaction and TTL see old batches; deterministic order)."""
    tick = itertools.count(int(time.time() * 1000) - 3_600_000, 1000)
    return lambda: next(tick)


def _connect_builder(root: Path) -> fl.Connection:
    return fl.connect(str(root), log_compaction_grace_ms=0, clock=_clock(), local_dir=f"{root}-builder-state")


def build_log(root: Path) -> None:
    """``d.ev``: per bucket two log segments, loose batches, then a last one-row append (see the module docstring)."""
    conn = _connect_builder(root)
    conn.create_database("d")
    conn.create_table("d.ev", schema={"id": "BIGINT", "s": "STRING"}, bucket_num=2, bucket_keys=["id"], options=LAKE_ON)
    ev = conn.get_table("d.ev")
    row = itertools.count()

    def append() -> None:
        ids = [next(row) for _ in range(6)]
        ev.append([{"id": i, "s": f"s{i}"} for i in ids])

    for _ in range(4):
        append()
    assert ev.compact_log() > 0
    for _ in range(4):
        append()
    assert ev.compact_log() > 0
    for _ in range(4):
        append()
    _untail(root)
    ev.append([{"id": 1000, "s": "last"}])


def build_pk(root: Path) -> None:
    """``d.pk`` with two snapshots per bucket, ``d.dim``, ``d.view`` and a delta join two steps in."""
    from fluss_lake.jobs import DeltaJoin

    conn = _connect_builder(root)
    conn.create_database("d")
    conn.create_table(
        "d.pk", schema={"id": "BIGINT", "v": "STRING", "n": "INT"}, primary_key=["id"], bucket_num=2, options=LAKE_ON
    )
    conn.create_table("d.dim", schema={"id": "BIGINT", "tag": "STRING"}, primary_key=["id"], bucket_num=1)
    conn.create_table(
        "d.view", schema={"id": "BIGINT", "v": "STRING", "n": "INT", "tag": "STRING"}, primary_key=["id"], bucket_num=1
    )
    pk, dim = conn.get_table("d.pk"), conn.get_table("d.dim")

    def rows(lo: int, hi: int, step: int = 1, *, n: int = 0, v: str | None = None) -> pl.DataFrame:
        ids = np.arange(lo, hi, step)
        values = pl.Series(ids).cast(pl.String) if v is None else pl.Series([v] * len(ids))
        return pl.DataFrame({"id": ids, "v": values, "n": np.full(len(ids), n, dtype=np.int32)})

    pk.upsert(rows(0, 6000))
    dim.upsert(pl.DataFrame({"id": np.arange(0, 12000, 50), "tag": [f"t{i}" for i in range(0, 12000, 50)]}))
    job: DeltaJoin = delta_join(conn, batch_rows=1000)
    assert job.run_once(max_steps=2).steps == 2  # two checkpoints; most of d.pk is still to be joined
    pk.snapshot()
    pk.upsert(rows(6000, 12000))
    pk.upsert(rows(0, 12000, 7, n=1, v="u"))
    pk.delete([{"id": 5}, {"id": 6}])
    dim.upsert([{"id": 0, "tag": "zero"}, {"id": 7, "tag": "seven"}])
    pk.snapshot()
    _untail(root)
    pk.upsert([{"id": 20000, "v": "tail", "n": 3}])


def build_parted(root: Path) -> None:
    """``d.parted``: three partitions, an ALTER (two metadata versions), rows before and after it."""
    conn = _connect_builder(root)
    conn.create_database("d")
    conn.create_table(
        "d.parted",
        schema={"day": "STRING", "id": "BIGINT", "s": "STRING"},
        partition_keys=["day"],
        bucket_num=1,
        options=LAKE_ON,
    )
    parted = conn.get_table("d.parted")
    days = ["20240101", "20240102", "20240103"]
    parted.append([{"day": d, "id": i, "s": f"{d}-{i}"} for d in days for i in range(3)])
    conn.alter_table("d.parted", add_columns={"x": "INT"})
    parted = conn.get_table("d.parted")
    parted.append([{"day": d, "id": i, "s": f"{d}-{i}", "x": i} for d in days for i in range(3, 5)])
    _untail(root)
    parted.append([{"day": days[-1], "id": 99, "s": "last", "x": 99}])


BUILDERS: dict[str, Callable[[Path], None]] = {"log": build_log, "pk": build_pk, "parted": build_parted}


def _untail(root: Path) -> None:
    """Save the store as it is before its last write (``<root>-untailed``)."""
    shutil.copytree(root, untailed(root))


def untailed(root: Path) -> Path:
    return Path(f"{root}-untailed")


def delta_join(conn: fl.Connection, *, batch_rows: int = 1000) -> Any:
    """The delta join of the ``pk`` store (``d.pk`` left join ``d.dim`` into ``d.view``), job ``j``."""
    from fluss_lake.jobs import DeltaJoin, Join

    t = conn.get_table
    return DeltaJoin(
        t("d.view"),
        {"p": t("d.pk"), "c": t("d.dim")},
        [Join("p", "c", ["id"], how="left")],
        batch_rows=batch_rows,
        name=JOB_NAME,
    )


# ---------------------------------------------------------------- objects to damage
def _files(objects: Objects, folder: str, suffix: str) -> list[str]:
    return [k for k in objects.listing() if os.path.dirname(k) == folder and k.endswith(suffix)]


def _data(objects: Objects, table: str) -> str:
    """The data folder (``<db>/<table>/data-<id>``) of a table."""
    db, name = table.split(".")
    found = {"/".join(k.split("/")[:3]) for k in objects.listing() if k.startswith(f"{db}/{name}/data-")}
    assert len(found) == 1, found
    return found.pop()


def _loose(objects: Objects, table: str, bucket: int) -> list[str]:
    return _files(objects, f"{_data(objects, table)}/log/b{bucket:05d}", ".arrow")


def _base(key: str) -> int:
    return int(os.path.basename(key).split(".")[0])


def _newest_manifest(objects: Objects, table: str, bucket: int) -> tuple[str, dict[str, Any]]:
    key = _files(objects, f"{_data(objects, table)}/kv/b{bucket:05d}/snapshots", ".json")[-1]
    return key, loads_json(objects.read(key), key=key)


#: The id of the last (one-row) write of each store.
LAST_ID = {"d.ev": 1000, "d.pk": 20000}


def _bucket_of_last_write(objects: Objects, table: str) -> int:
    """The bucket whose newest batch holds the store's last (one-row) write."""
    from fluss_lake.log.log_batch import decode_batch

    found = []
    for bucket in (0, 1):
        newest = max(_loose(objects, table, bucket), key=_base)
        rows = decode_batch(objects.read(newest), key=newest).rows
        if rows.column("id").to_pylist() == [LAST_ID[table]]:
            found.append(bucket)
    assert len(found) == 1, found
    return found[0]


def pick_log_batch(objects: Objects) -> tuple[str, str]:
    """A loose batch in the middle of bucket 0 of ``d.ev`` (neither its oldest nor its newest object)."""
    loose = sorted(_loose(objects, "d.ev", 0), key=_base)
    assert len(loose) >= 3, loose
    return loose[1], loose[2]


def pick_log_newest(objects: Objects) -> tuple[str, str]:
    """The newest batch of ``d.ev``'s bucket that took the last append (nothing recorded a later offset)."""
    loose = sorted(_loose(objects, "d.ev", _bucket_of_last_write(objects, "d.ev")), key=_base)
    return loose[-1], loose[-2]


def pick_log_segment(objects: Objects) -> tuple[str, str]:
    """The second (newer) compacted segment of bucket 0 of ``d.ev``; swapped with the first."""
    segments = sorted(_files(objects, f"{_data(objects, 'd.ev')}/log/b00000", ".segment"))
    assert len(segments) == 2, segments
    return segments[1], segments[0]


def pick_log_oldest(objects: Objects) -> tuple[str, str]:
    """The oldest object of bucket 0 of ``d.ev`` (its first segment)."""
    segments = sorted(_files(objects, f"{_data(objects, 'd.ev')}/log/b00000", ".segment"))
    return segments[0], segments[1]


def pick_pk_batch(objects: Objects) -> tuple[str, str]:
    """A changelog batch in the middle of bucket 0 of ``d.pk``: the newest snapshot covers it, the delta join has
    not consumed it yet."""
    loose = sorted(_loose(objects, "d.pk", 0), key=_base)
    return loose[1], loose[2]


def pick_pk_newest(objects: Objects) -> tuple[str, str]:
    """The newest changelog batch of the bucket of ``d.pk``'s tail upsert: after its newest snapshot."""
    bucket = _bucket_of_last_write(objects, "d.pk")
    loose = sorted(_loose(objects, "d.pk", bucket), key=_base)
    assert _base(loose[-1]) >= _newest_manifest(objects, "d.pk", bucket)[1]["offset"]
    return loose[-1], loose[-2]


def pick_pk_covered(objects: Objects) -> tuple[str, str]:
    """The newest changelog batch of the other bucket of ``d.pk``: its newest snapshot's offset lies past it."""
    bucket = 1 - _bucket_of_last_write(objects, "d.pk")
    loose = sorted(_loose(objects, "d.pk", bucket), key=_base)
    assert _base(loose[-1]) < _newest_manifest(objects, "d.pk", bucket)[1]["offset"]
    return loose[-1], loose[-2]


def _segments(objects: Objects) -> tuple[list[str], list[str]]:
    """(segments named by both snapshots, segments named only by the newest) of bucket 0 of ``d.pk``."""
    folder = f"{_data(objects, 'd.pk')}/kv/b00000"
    manifests = [loads_json(objects.read(k), key=k) for k in _files(objects, f"{folder}/snapshots", ".json")]
    old, new = (set(m["segments"]) for m in manifests)
    return [f"{folder}/segments/{n}" for n in sorted(old & new)], [f"{folder}/segments/{n}" for n in sorted(new - old)]


def pick_kv_segment(objects: Objects) -> tuple[str, str]:
    """The segment of bucket 0 of ``d.pk`` that both snapshots name; swapped with the one only the newest names."""
    both, newest = _segments(objects)
    return both[0], newest[0]


def pick_kv_index(objects: Objects) -> tuple[str, str]:
    """The index file of the segment only the newest snapshot of bucket 0 names; swapped with the other's."""
    both, newest = _segments(objects)
    return newest[0] + ".idx", both[0] + ".idx"


def pick_kv_manifest(objects: Objects) -> tuple[str, str]:
    """The newest snapshot manifest of bucket 0 of ``d.pk``; swapped with the older one."""
    manifests = _files(objects, f"{_data(objects, 'd.pk')}/kv/b00000/snapshots", ".json")
    return manifests[-1], manifests[-2]


def pick_checkpoint(objects: Objects) -> tuple[str, str]:
    """The newest checkpoint of job ``j``; swapped with the older one."""
    checkpoints = _files(objects, f".jobs/{JOB_NAME}", ".json")
    assert len(checkpoints) == 2, checkpoints
    return checkpoints[-1], checkpoints[-2]


def pick_meta(objects: Objects) -> tuple[str, str]:
    """The newest metadata version of ``d.parted`` (written by the ALTER); swapped with the first."""
    versions = [k for k in _files(objects, "d/parted/_meta", ".json") if os.path.basename(k).startswith("v")]
    assert len(versions) == 2, versions  # (beside them, _latest.json records the newest)
    return versions[-1], versions[0]


def pick_partition(objects: Objects) -> tuple[str, str]:
    """The record of partition 20240102 of ``d.parted``; swapped with 20240101's."""
    folder = f"{_data(objects, 'd.parted')}/_partitions"
    return f"{folder}/20240102.json", f"{folder}/20240101.json"


# ---------------------------------------------------------------- read paths
@dataclass(frozen=True)
class Answer:
    """A read path's answer, order-free: its columns and sorted rows."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    @classmethod
    def of(cls, frame: pl.DataFrame) -> Answer:
        frame = frame.sort(frame.columns, nulls_last=True) if frame.height else frame
        return cls(tuple(frame.columns), tuple(frame.rows()))

    def to_json(self) -> Any:
        return json.loads(json.dumps({"columns": self.columns, "rows": self.rows}, default=str))

    def __repr__(self) -> str:
        return f"Answer({len(self.rows)} rows of {self.columns})"


def connect(url: str, local_dir: Path, storage_options: dict[str, Any] | None = None) -> fl.Connection:
    """A fresh connection, as a reader in a new process would open it (its own state folder)."""
    return fl.connect(url, storage_options=storage_options, local_dir=str(local_dir))


def read_to_polars(conn: fl.Connection, table: str, _work: Path) -> Answer:
    return Answer.of(conn.get_table(table).to_polars())


def read_lookup(conn: fl.Connection, table: str, _work: Path) -> Answer:
    keys = pl.DataFrame({"id": LOOKUP_KEYS}, schema={"id": pl.Int64})
    return Answer.of(conn.get_table(table).new_lookup().lookup(keys, with_found=True))


def read_scan_log(conn: fl.Connection, table: str, _work: Path) -> Answer:
    return Answer.of(conn.get_table(table).scan_log())


def read_changelog(conn: fl.Connection, table: str, _work: Path) -> Answer:
    return Answer.of(conn.get_table(table).changelog(with_bucket=True))


def read_delta_join(conn: fl.Connection, _table: str, _work: Path) -> Answer:
    """The delta join resumed from its checkpoint and run to the end; the answer is its result table."""
    delta_join(conn, batch_rows=100_000).run_once()
    return Answer.of(conn.get_table("d.view").to_polars())


def read_tiering(conn: fl.Connection, table: str, work: Path) -> Answer:
    """A tiering round into a fresh lake (sqlite catalog, local warehouse); the answer is the lake's rows read
    back through pyiceberg (a primary-key table's current state)."""
    from tiering import Lake, tier_table

    lake = Lake.local(str(work))
    tier_table(conn.get_table(table), lake)
    frame = pl.from_arrow(lake.load(table).scan().to_arrow())  # type: ignore[union-attr]
    assert isinstance(frame, pl.DataFrame)
    return Answer.of(frame)


PATHS: dict[str, Callable[[fl.Connection, str, Path], Answer]] = {
    "to_polars": read_to_polars,
    "lookup": read_lookup,
    "scan_log": read_scan_log,
    "changelog": read_changelog,
    "delta-join": read_delta_join,
    "tiering": read_tiering,
}


def outcome(read: Callable[[], Answer]) -> Answer | BaseException:
    """A read path's answer, or what it raised."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - the caller judges it
        return exc


# ---------------------------------------------------------------- targets
LOG_PATHS = ("to_polars", "scan_log", "changelog", "tiering")
PK_PATHS = ("to_polars", "lookup", "scan_log", "changelog", "delta-join", "tiering")
KV_PATHS = ("to_polars", "lookup", "scan_log", "delta-join")


@dataclass(frozen=True)
class Target:
    """A kind of stored object: where it is, what reads it, and what damage to it must lead to."""

    name: str
    store: str
    table: str
    pick: Callable[[Objects], tuple[str, str | None]]
    paths: tuple[str, ...]
    damages: tuple[str, ...] = DAMAGES
    #: State data (KV segments, their index files, snapshot manifests): damage is repaired from the log, never
    #: raised; the damage is logged on ``fluss_lake.integrity`` by the paths listed in `warns` (None: every path).
    repaired: bool = False
    warns: tuple[str, ...] | None = None
    #: Damages the target survives without a trace (the answer must be right; nothing is logged).
    silent: tuple[str, ...] = ()
    #: The known limit: deleting it is a write that never happened (no later offset recorded anywhere).
    limit: tuple[str, ...] = ()


TARGETS = {
    t.name: t
    for t in (
        Target("log-batch", "log", "d.ev", pick_log_batch, LOG_PATHS),
        Target("log-batch@newest", "log", "d.ev", pick_log_newest, LOG_PATHS, limit=("delete",)),
        Target("log-segment", "log", "d.ev", pick_log_segment, LOG_PATHS),
        Target("log-segment@oldest", "log", "d.ev", pick_log_oldest, LOG_PATHS, damages=("delete",)),
        Target("pk-log-batch", "pk", "d.pk", pick_pk_batch, PK_PATHS),
        Target("pk-log-batch@newest", "pk", "d.pk", pick_pk_newest, PK_PATHS, limit=("delete",)),
        Target("pk-log-batch@covered", "pk", "d.pk", pick_pk_covered, PK_PATHS, damages=("delete", "swap")),
        Target("kv-segment", "pk", "d.pk", pick_kv_segment, KV_PATHS, repaired=True),
        # the index is read by lookups only (the delta join looks d.pk up when d.dim changes); a missing index file
        # is built again in memory (segments of older versions have none): no trace
        Target("kv-index", "pk", "d.pk", pick_kv_index, KV_PATHS, repaired=True, warns=("lookup",), silent=("delete",)),
        # a vanished newest manifest is a snapshot never published: the older one is restored and the log replayed
        Target(
            "kv-manifest",
            "pk",
            "d.pk",
            pick_kv_manifest,
            KV_PATHS,
            damages=JSON_DAMAGES,
            repaired=True,
            silent=("delete",),
        ),
        Target("job-checkpoint", "pk", "d.pk", pick_checkpoint, ("delta-join",), damages=JSON_DAMAGES),
        Target("table-meta", "parted", "d.parted", pick_meta, LOG_PATHS, damages=JSON_DAMAGES),
        Target("partition-record", "parted", "d.parted", pick_partition, LOG_PATHS, damages=JSON_DAMAGES),
    )
}


#: A tiering round costs about a second (a sqlite catalog, an Iceberg commit): it runs one damage of each class
#: (a checksum mismatch, a truncation, a deletion, a swap); the other truncations and flips differ only in bytes the
#: same checksum check reads, and every other path runs them.
TIERING_DAMAGES = ("truncate@half", "flip@middle", "delete", "swap", "digit@first-value")


def _every_path(target: str, damage: str, reason: str) -> dict[tuple[str, str, str], str]:
    return {(target, damage, path): reason for path in TARGETS[target].paths}


#: Cells that fail today, and why (run as strict xfails: they must start passing when the core is fixed).
XFAIL: dict[tuple[str, str, str], str] = {}  # none left


def cells() -> list[tuple[Target, str, str]]:
    """Every (target, damage, path) of the matrix."""
    return [
        (target, how, path)
        for target in TARGETS.values()
        for how in target.damages
        for path in target.paths
        if path != "tiering" or how in TIERING_DAMAGES
    ]


@dataclass
class Case:
    """One cell: a target damaged one way, read one way, in a store folder (or bucket) of its own."""

    target: Target
    damage: str
    path: str
    work: Path
    key: str = ""
    partner: str | None = None
    warnings: list[str] = field(default_factory=list)


def check_error(exc: BaseException, case: Case) -> None:
    """A damage may be reported, but only as a :class:`CorruptedDataError` naming the object (or a neighbour that
    reveals it: the object it was swapped with, another object of its bucket or folder, the bucket itself)."""
    if not isinstance(exc, CorruptedDataError):
        raise AssertionError(f"{case.key} ({case.damage}) raised {type(exc).__name__}, not CorruptedDataError: {exc}")
    assert isinstance(exc, FlussLakeError)
    assert exc.key, f"no key on {exc!r}"
    assert exc.key in str(exc), f"the message does not name its key {exc.key!r}: {exc}"
    folder = os.path.dirname(case.key)
    related = (
        exc.key in (case.key, case.partner)
        or os.path.dirname(exc.key) == folder
        or exc.key.rstrip("/") == folder  # its bucket (a state ahead of its log: the message gives the offsets)
    )
    assert related, f"{exc.key!r} does not point at the damaged {case.key!r}: {exc}"


def judge(expected: Answer, got: Answer | BaseException, case: Case, *, limit: Answer | None = None) -> None:
    """The right answer, or a :class:`CorruptedDataError` (see :func:`check_error`); never different data.

    Repaired targets must answer rightly (and leave a warning naming the object where it is read); `limit` is the
    answer of the store as if the damaged object had never been written (the known limit), also accepted.
    """
    target = case.target
    if isinstance(got, BaseException):
        if target.repaired:
            raise AssertionError(f"{case.key} ({case.damage}) was not repaired: {type(got).__name__}: {got}") from got
        try:
            check_error(got, case)
        except AssertionError as failure:
            raise failure from got
        return
    if limit is not None and got == limit and case.damage in target.limit:
        return
    assert got == expected, f"{case.key} ({case.damage}) via {case.path}: different data, {_diff(expected, got)}"
    if target.repaired and case.damage not in target.silent and (target.warns is None or case.path in target.warns):
        name = os.path.basename(case.key)
        assert any(name in w for w in case.warnings), f"no warning names {name}: {case.warnings}"


def _diff(expected: Answer, got: Answer) -> str:
    if expected.columns != got.columns:
        return f"columns {got.columns} instead of {expected.columns}"
    missing = set(expected.rows) - set(got.rows)
    extra = set(got.rows) - set(expected.rows)
    return (
        f"{len(got.rows)} rows instead of {len(expected.rows)}; missing {sorted(missing, key=str)[:3]}..., "
        f"extra {sorted(extra, key=str)[:3]}..."
    )


class Recorder(logging.Handler):
    """Collects the messages logged on ``fluss_lake.integrity`` (in a child process too)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> Recorder:
        logging.getLogger(INTEGRITY_LOGGER).addHandler(self)
        return self

    def __exit__(self, *_: object) -> None:
        logging.getLogger(INTEGRITY_LOGGER).removeHandler(self)


def child_main(argv: Iterable[str]) -> None:
    """The "reopen" child: for each ``(store url, table, path, work folder)`` print one JSON line with the answer or
    the exception (class, key, message) and the integrity warnings logged while reading."""
    for line in argv:
        url, table, path, work = json.loads(line)
        read = functools.partial(PATHS[path], connect(url, Path(work) / "state"), table, Path(work) / "lake")
        with Recorder() as recorder:
            got = outcome(read)
        if isinstance(got, BaseException):
            error = {"class": type(got).__name__, "key": getattr(got, "key", None), "message": str(got)}
            print(json.dumps({"error": error, "warnings": recorder.messages}))
        else:
            print(json.dumps({"answer": got.to_json(), "warnings": recorder.messages}, default=str))
