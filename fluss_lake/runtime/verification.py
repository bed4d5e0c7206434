"""Verify every stored object of a table, and repair what the log can rebuild.

Checks the table's metadata versions and partition records, every bucket's log (checksums, decoding, names,
continuity: :meth:`~fluss_lake.log.log_tablet.LogTablet.verify`) and, for primary-key tables, every retained state
snapshot with the segments and index files it names (:func:`~fluss_lake.kv.kv_snapshot.verify_snapshots`).

Repair follows one rule, the log is the truth: damaged snapshots, segments and index files are deleted and the
bucket's state is rebuilt from the log (an older snapshot the log still covers, or the whole log) and published
as a new snapshot. Damaged log objects are not repaired here: their records exist only in the lake (tiering can
restore them, ``fluss-lake check --repair`` with a lake), or nowhere.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from fluss_lake.catalog import data_prefix
from fluss_lake.exceptions import CorruptedDataError
from fluss_lake.io import layout
from fluss_lake.io.checksum import is_sealed, loads_json, unseal
from fluss_lake.io.store import ObjectStore
from fluss_lake.kv.kv_snapshot import KvSnapshots, verify_snapshots
from fluss_lake.kv.segment import INDEX_SUFFIX, Segment, SegmentIndex, file_crc
from fluss_lake.metadata.partition import PartitionInfo
from fluss_lake.runtime.table_runtime import TableRuntime
from fluss_lake.runtime.tablet_set import TabletSet

__all__ = ["Damage", "IntegrityReport", "damage_of", "verify_jobs", "verify_table"]

_log = logging.getLogger("fluss_lake.integrity")


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged object: its key, what is wrong, where it belongs, and whether it was repaired."""

    key: str
    problem: str
    partition: str | None = None
    bucket: int | None = None
    offsets: tuple[int, int] | None = None
    kind: str = "log"  # "metadata", "log", "state" or "job"
    repaired: bool = False


@dataclass(frozen=True, slots=True)
class IntegrityReport:
    """What :func:`verify_table` found: objects read, objects without checksums (written before checksums
    existed: read "not verified"), and the damaged objects (repaired or not).

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("d")
    >>> _ = conn.create_table("d.t", schema={"id": "BIGINT"}, primary_key=["id"])
    >>> table = conn.get_table("d.t"); _ = table.upsert([{"id": 1}])
    >>> report = table.verify()
    >>> report.ok, report.damage
    (True, ())
    """

    table: str
    checked: int
    unverified: int
    damage: tuple[Damage, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether nothing is left damaged (damage found was repaired)."""
        return all(d.repaired for d in self.damage)

    @property
    def unrepaired(self) -> tuple[Damage, ...]:
        """The damage still there."""
        return tuple(d for d in self.damage if not d.repaired)

    def summary(self) -> str:
        """One line per damaged object after a headline (for the command line and logs)."""
        head = (
            f"{self.table}: {self.checked} objects checked, {len(self.damage)} damaged"
            f" ({sum(d.repaired for d in self.damage)} repaired)"
            + (f", {self.unverified} without checksums (written before checksums existed)" if self.unverified else "")
        )
        lines = [head]
        for d in self.damage:
            where = "".join(
                (
                    f" partition {d.partition}" if d.partition else "",
                    f" bucket {d.bucket}" if d.bucket is not None else "",
                    f" offsets [{d.offsets[0]}, {d.offsets[1]})" if d.offsets else "",
                )
            )
            lines.append(f"  {'repaired' if d.repaired else 'DAMAGED'} {d.kind}{where}: {d.key}: {d.problem}")
        return "\n".join(lines)


def verify_table(runtime: TableRuntime, *, repair: bool = False) -> IntegrityReport:
    """Check every stored object of a table (all partitions); with `repair`, rebuild damaged state from the log."""
    info = runtime.info
    store = runtime.context.store
    damage: list[Damage] = []
    checked = unverified = 0
    records: list[tuple[str, str, str | None]] = []  # (key, what, partition name) of each JSON record
    folder = layout.meta_folder(info.path.database, info.path.table)
    records += [
        (f"{folder}/{n}", "table metadata", None) for n in store.list(folder) if layout.meta_version(n) is not None
    ]
    partitions: list[PartitionInfo | None] = [None]
    if info.partition_keys:
        data = layout.partitions_folder(data_prefix(info))
        records += [
            (f"{data}/{n}", "partition record", n[: -len(".json")]) for n in store.list(data) if n.endswith(".json")
        ]
        partitions = list(runtime.list_partitions())
    column = info.auto_increment_column
    if column is not None:  # the claimed auto-increment ranges
        folder = layout.auto_increment_folder(data_prefix(info), info.schema.column(column).column_id)
        records += [(f"{folder}/{n}", "auto-increment range claim", None) for n in store.list(folder)]
    for key, what, partition_name in records:
        record = _check_record(store, key, what)
        if record is None:
            continue  # gone meanwhile
        checked += 1
        unverified += record[0]
        if record[1] is not None:
            damage.append(_damage(record[1], partition_name, None, "metadata"))
    for partition in partitions:
        tablets = runtime.tablets(partition)
        found = _verify_tablets(tablets, repair=repair)
        checked += found[0]
        unverified += found[1]
        damage.extend(found[2])
    return IntegrityReport(str(info.path), checked, unverified, tuple(damage))


def _verify_tablets(tablets: TabletSet, *, repair: bool) -> tuple[int, int, list[Damage]]:
    """Check the logs and state of one unpartitioned table or partition."""
    info, store = tablets.info, tablets.context.store
    name = tablets.name
    damage: list[Damage] = []
    checked = unverified = 0
    for bucket in range(tablets.bucket_num):
        log = tablets.fresh_log_tablet(bucket)
        found = log.verify()
        checked += found.checked
        unverified += found.unverified
        damage.extend(_damage(exc, name, bucket, "log") for exc in found.damage)
        if not info.is_primary_key_table:
            continue
        snapshots = KvSnapshots(store, layout.kv_prefix(tablets.prefix, bucket))
        state = verify_snapshots(snapshots, required=info.checksums)
        checked += state.checked
        unverified += state.unverified
        if not state.damage:
            continue
        repaired = repair and _rebuild_state(tablets, bucket, snapshots, state.damage, log_ok=not found.damage)
        damage.extend(_damage(exc, name, bucket, "state", repaired=repaired) for exc in state.damage)
    return checked, unverified, damage


def _rebuild_state(
    tablets: TabletSet, bucket: int, snapshots: KvSnapshots, damage: tuple[CorruptedDataError, ...], *, log_ok: bool
) -> bool:
    """Delete the damaged snapshot objects of a bucket and rebuild its state from the log; False if it cannot be."""
    if not log_ok:
        return False  # the log itself is damaged: rebuilding from it would not give the truth
    folder = f"{snapshots.kv_prefix}/snapshots/"
    for exc in damage:
        key = exc.key or ""
        if key.startswith(folder):
            snapshots.store.delete(key)
        elif key.endswith(INDEX_SUFFIX):  # rebuilt from its segment (which checked out)
            path = snapshots.store.local_path(key)
            segment_path = path.removesuffix(INDEX_SUFFIX) if path is not None else None
            if path is not None and segment_path is not None and os.path.exists(segment_path):
                indexed = Segment.open(segment_path)
                SegmentIndex.build(indexed.hashes).save(path, segment_crc=file_crc(segment_path) or -1)
            else:
                snapshots.store.delete(key)  # a remote copy: each download builds the index again
        else:  # a damaged segment: every manifest naming it goes (a new snapshot replaces them)
            segment = key.rsplit("/", 1)[-1]
            for name in snapshots.store.list(folder.rstrip("/")):
                manifest_key = folder + name
                try:
                    named = loads_json(snapshots.store.get(manifest_key), key=manifest_key)["segments"]
                except (FileNotFoundError, CorruptedDataError, KeyError):
                    continue
                if segment in named:
                    snapshots.store.delete(manifest_key)
            snapshots.store.delete(key)
            snapshots.store.delete(f"{key}{INDEX_SUFFIX}")
    try:
        tablet = tablets.reopen_kv(bucket)
        tablet.last_snapshot = -1
        tablet.snapshot()
    except CorruptedDataError as exc:
        _log.warning("%s", exc)
        return False
    _log.warning("rebuilt the state of bucket %d of %s from its log", bucket, tablets.prefix)
    return True


def verify_jobs(store: ObjectStore) -> IntegrityReport:
    """Check every job's checkpoints and attachments (the stateful join's state)."""
    damage: list[Damage] = []
    checked = unverified = 0
    root = layout.jobs_root()
    for job in store.list(root):
        job_prefix = layout.job_prefix(job)
        keys = [f"{job_prefix}/layouts/{n}" for n in store.list(f"{job_prefix}/layouts") if n.endswith(".json")]
        prefixes = [job_prefix]  # the unsharded job, then each shard: .jobs/<name>/shards-<count>/<index>
        for folder in store.list(job_prefix):
            if folder.startswith("shards-"):
                prefixes += [f"{job_prefix}/{folder}/{i}" for i in store.list(f"{job_prefix}/{folder}") if i.isdigit()]
        for prefix in prefixes:
            keys += [f"{prefix}/{n}" for n in store.list(prefix) if n.startswith("ckpt-") and n.endswith(".json")]
            keys += [f"{prefix}/attachments/{n}" for n in store.list(f"{prefix}/attachments")]
        for key in keys:
            what = (
                "job shard layout"
                if "/layouts/" in key
                else "job checkpoint"
                if key.endswith(".json")
                else "job attachment"
            )
            found = _check_record(store, key, what)
            if found is None:
                continue
            checked += 1
            unverified += found[0]
            if found[1] is not None:
                damage.append(_damage(found[1], None, None, "job"))
    return IntegrityReport(root, checked, unverified, tuple(damage))


def _check_record(store: ObjectStore, key: str, what: str) -> tuple[bool, CorruptedDataError | None] | None:
    """Read and check one sealed JSON record (or a sealed binary attachment): (written without a checksum, the damage
    or None); None if it is gone."""
    try:
        body = store.get(key)
    except FileNotFoundError:
        return None
    try:
        if key.endswith(".json"):
            loads_json(body, key=key, what=what)
            return not body.startswith(b'{"_crc32c"'), None
        unseal(body, key=key, what=what)
        return not is_sealed(body), None
    except CorruptedDataError as exc:
        return False, exc


def damage_of(exc: CorruptedDataError, kind: str) -> Damage:
    """A :class:`Damage` entry for an error raised while opening something."""
    return _damage(exc, None, None, kind)


def _damage(
    exc: CorruptedDataError, partition: str | None, bucket: int | None, kind: str, *, repaired: bool = False
) -> Damage:
    problem = str(exc).split(" is damaged: ", 1)[-1].split("; run `fluss-lake check", 1)[0]
    return Damage(
        exc.key or "", problem, partition, bucket if bucket is not None else exc.bucket, exc.offsets, kind, repaired
    )
