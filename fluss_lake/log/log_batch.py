"""One committed log batch: Arrow IPC bytes with a header (base offset, record count, commit timestamp,
schema id, writer id, column statistics) kept in the schema metadata, sealed with a CRC32C over header and body
(:mod:`fluss_lake.io.checksum`; the log tablet checks it and strips it before decoding).

A batch of ``n`` records occupies offsets ``[base, base + n)``; a batch with no records still takes one
offset (Fluss's empty batch for a write that changed nothing).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from fluss_lake._utils.arrow_pool import pool
from fluss_lake._utils.frames import to_arrow as frame_to_arrow
from fluss_lake.exceptions import CorruptedDataError
from fluss_lake.io.checksum import corrupted, is_sealed, seal, unseal

__all__ = [
    "LogBatch",
    "CHANGE_TYPE_COLUMN",
    "encode_batch",
    "decode_batch",
    "decode_header",
    "BatchHeader",
    "encode_segment",
    "SegmentReader",
    "delete_count",
    "DELETE_CODE",
]

#: Column holding the change type byte (+A 0, +I 1, -U 2, +U 3, -D 4) as Fluss numbers them.
CHANGE_TYPE_COLUMN = "_change_type"
DELETE_CODE = 4  # the -D code of the change type column (see kv_tablet)
_META_KEY = b"fluss.batch"
_SEGMENT_KEY = b"fluss.segment"


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What a batch says about itself without its rows."""

    base_offset: int
    record_count: int
    commit_ts: int
    schema_id: int
    writer_id: str
    null_counts: dict[str, int] = field(default_factory=dict)
    stats: pl.DataFrame | None = None  # two rows: min, max of each statistics column
    no_stats: tuple[str, ...] = ()  # statistics columns whose min/max are unknown in this batch (NaN present)
    batch_seq: int = -1  # the writer's sequence number for this bucket (idempotent retries)
    deletes: int | None = None  # its -D records (None: not recorded, as in batches of older versions)

    @property
    def next_offset(self) -> int:
        """The offset right after this batch (an empty batch still takes one)."""
        return self.base_offset + max(self.record_count, 1)


@dataclass(frozen=True, slots=True)
class LogBatch:
    """A decoded batch: header + rows (change type column first, then the columns of its schema)."""

    header: BatchHeader
    rows: pa.Table


def _stats_frame(data: pl.DataFrame, columns: tuple[str, ...]) -> tuple[pl.DataFrame | None, dict[str, int], list[str]]:
    """Min/max rows, null counts, and the float columns holding NaN (their min/max would mislead)."""
    if not columns or data.height == 0:
        return None, {}, []
    selected = data.select(columns)
    nan_columns = [c for c in columns if selected.schema[c].is_float() and bool(selected.get_column(c).is_nan().any())]
    stats = pl.concat([selected.min(), selected.max()])
    return stats, {c: int(n) for c, n in zip(columns, selected.null_count().row(0), strict=True)}, nan_columns


def delete_count(rows: pa.Table) -> int:
    """The -D records of a batch (code 4 of the change type column; none without that column), recorded in its
    header so readers that only want deletes skip the batches that have none."""
    if CHANGE_TYPE_COLUMN not in rows.column_names:
        return 0
    types = rows.column(CHANGE_TYPE_COLUMN)
    if types.null_count == 0 and types.num_chunks == 1:  # the common case: one compare, without two Arrow kernels
        return int(np.count_nonzero(types.chunk(0).to_numpy(zero_copy_only=False) == DELETE_CODE))
    return int(pc.sum(pc.equal(types, pa.scalar(DELETE_CODE, pa.int8()))).as_py() or 0)


def encode_batch(
    *,
    rows: pl.DataFrame | pa.Table,
    base_offset: int,
    commit_ts: int,
    schema_id: int,
    writer_id: str,
    batch_seq: int = -1,
    stats_columns: tuple[str, ...] = (),
    compression: str | None = "zstd",
    compression_level: int | None = None,
    deletes: int | None = None,
) -> bytes:
    """Serialize a batch (rows already carry the change type column when the table needs one; `deletes` is
    their -D count when the caller has it, else it is counted here)."""
    if isinstance(rows, pa.Table):
        table = rows
        frame = pl.DataFrame(pl.from_arrow(rows.select(list(stats_columns)))) if stats_columns else None
    else:
        table = frame_to_arrow(rows)
        frame = rows
    stats, nulls, nan_columns = _stats_frame(frame, stats_columns) if frame is not None else (None, {}, [])
    header = {
        "base_offset": base_offset,
        "record_count": table.num_rows,
        "commit_ts": commit_ts,
        "schema_id": schema_id,
        "writer_id": writer_id,
        "null_counts": nulls,
        "no_stats": nan_columns,
        "batch_seq": batch_seq,
        "deletes": delete_count(table) if deletes is None else deletes,
    }
    if stats is not None:
        sink = pa.BufferOutputStream()
        arrow_stats = frame_to_arrow(stats)
        with pa.ipc.new_stream(sink, arrow_stats.schema) as writer:
            writer.write_table(arrow_stats)
        header["stats"] = base64.b64encode(sink.getvalue().to_pybytes()).decode()
    table = table.replace_schema_metadata({_META_KEY: json.dumps(header, separators=(",", ":")).encode()})
    sink = pa.BufferOutputStream()
    codec = None if compression in (None, "none") else ("lz4" if compression == "lz4_frame" else compression)
    # Compressed on this thread: buffers that Arrow's thread pool allocates and this thread frees stay resident
    # in Arrow's allocator (measured: 25-30 MB more per writing process), and a batch is small enough that one
    # core compresses it about as fast.
    ipc_options = pa.ipc.IpcWriteOptions(
        compression=pa.Codec(codec, compression_level) if codec else None, use_threads=False
    )
    with pa.ipc.new_file(sink, table.schema, options=ipc_options) as writer:
        writer.write_table(table)
    return seal(sink.getvalue())


#: What a damaged batch or segment can raise while decoding (Arrow, LZ4/zstd, flatbuffers, its JSON header).
_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError)


def _header_from_schema(schema: pa.Schema, key: str) -> BatchHeader:
    """Read the header out of an IPC schema."""
    try:
        return _header_from_raw(json.loads(schema.metadata[_META_KEY]))
    except _DECODE_ERRORS as exc:
        raise corrupted(key, f"its header cannot be read ({exc})", what="log batch") from exc


def _header_from_raw(raw: dict) -> BatchHeader:
    stats = None
    if "stats" in raw:
        stats = pl.from_arrow(pa.ipc.open_stream(pa.py_buffer(base64.b64decode(raw["stats"]))).read_all())
    return BatchHeader(
        int(raw["base_offset"]),
        int(raw["record_count"]),
        int(raw["commit_ts"]),
        int(raw["schema_id"]),
        str(raw["writer_id"]),
        raw.get("null_counts", {}),
        stats,  # type: ignore[arg-type]
        tuple(raw.get("no_stats", ())),
        raw.get("batch_seq", -1),
        raw.get("deletes"),
    )


def _as_source(source: pa.NativeFile | pa.Buffer | bytes, key: str = "log batch") -> pa.NativeFile | pa.Buffer:
    """A decodable source: an object's whole bytes are checked and stripped of their checksum; a body (what the log
    tablet hands over, checked already) or a file is read as it is."""
    if isinstance(source, (bytes, pa.Buffer)) and is_sealed(source):
        return unseal(source, key=key, what="log batch")
    return source if not isinstance(source, bytes) else pa.py_buffer(source)


def decode_header(source: pa.NativeFile | pa.Buffer | bytes, *, key: str = "log batch") -> BatchHeader:
    """Only the header (reads the IPC footer/schema, not the rows) of a batch's body (its checksum stripped)."""
    try:
        reader = pa.ipc.open_file(_as_source(source, key))
    except _DECODE_ERRORS as exc:
        raise corrupted(key, f"it cannot be decoded ({exc})", what="log batch") from exc
    return _header_from_schema(reader.schema, key)


def decode_batch(
    source: pa.NativeFile | pa.Buffer | bytes, columns: list[str] | None = None, *, key: str = "log batch"
) -> LogBatch:
    """Header and rows of a batch's body (its checksum stripped); `columns` projects (the change type column is
    always kept if present)."""
    try:
        reader = pa.ipc.open_file(
            _as_source(source, key), memory_pool=pool()
        )  # decompressed buffers: fluss-lake's pool
        header = _header_from_schema(reader.schema, key)
        table = reader.read_all()
    except CorruptedDataError:
        raise
    except _DECODE_ERRORS as exc:
        raise corrupted(key, f"its rows cannot be decoded ({exc})", what="log batch") from exc
    if table.num_rows != header.record_count:
        raise corrupted(
            key,
            f"its header says {header.record_count} records but it holds {table.num_rows}",
            what="log batch",
            offsets=(header.base_offset, header.next_offset),
        )
    return project(LogBatch(header, table.replace_schema_metadata(None)), columns)


def project(batch: LogBatch, columns: list[str] | None) -> LogBatch:
    """`batch` with only `columns` (the change type column is always kept if present; None keeps all)."""
    if columns is None:
        return batch
    table = batch.rows
    keep = [c for c in table.column_names if c == CHANGE_TYPE_COLUMN or c in columns]
    return LogBatch(batch.header, table.select(keep or table.column_names[:1]))  # one column keeps the row count


def encode_segment(
    sources: list[pa.NativeFile | pa.Buffer | bytes],
    *,
    compression: str | None = "zstd",
    compression_level: int | None = None,
    keys: list[str] | None = None,
) -> tuple[bytes, list[BatchHeader]]:
    """Several consecutive batches (same columns; their bodies, checksums stripped) as one sealed object: one record
    batch per original batch, their headers unchanged in the schema metadata, so offsets, commit times, statistics
    and writer sequences survive."""
    raws, tables = [], []
    for position, source in enumerate(sources):
        key = keys[position] if keys is not None else "log batch"
        try:
            reader = pa.ipc.open_file(_as_source(source, key))
            raws.append(json.loads(reader.schema.metadata[_META_KEY]))
            tables.append(reader.read_all().replace_schema_metadata(None))
        except _DECODE_ERRORS as exc:
            raise corrupted(key, f"it cannot be decoded ({exc})", what="log batch") from exc
    schema = tables[0].schema.with_metadata({_SEGMENT_KEY: json.dumps(raws, separators=(",", ":")).encode()})
    sink = pa.BufferOutputStream()
    codec = None if compression in (None, "none") else ("lz4" if compression == "lz4_frame" else compression)
    ipc_options = pa.ipc.IpcWriteOptions(compression=pa.Codec(codec, compression_level) if codec else None)
    with pa.ipc.new_file(sink, schema, options=ipc_options) as writer:
        for table in tables:
            combined = table.combine_chunks()
            batches = combined.to_batches()
            writer.write_batch(batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema))
    return seal(sink.getvalue()), [_header_from_raw(r) for r in raws]


class SegmentReader:
    """Random access to the batches of a compacted log segment (its body, checksum stripped)."""

    def __init__(self, source: pa.NativeFile | pa.Buffer | bytes, *, key: str = "log segment") -> None:
        self.key = key
        try:
            self._reader = pa.ipc.open_file(_as_source(source, key))
            raws = json.loads(self._reader.schema.metadata[_SEGMENT_KEY])
            self.headers = [_header_from_raw(r) for r in raws]
        except _DECODE_ERRORS as exc:
            raise corrupted(key, f"it cannot be decoded ({exc})", what="log segment") from exc
        if len(self.headers) != self._reader.num_record_batches:
            raise corrupted(
                key,
                f"its header lists {len(self.headers)} batches but it holds {self._reader.num_record_batches}",
                what="log segment",
            )
        for earlier, later in zip(self.headers, self.headers[1:], strict=False):
            if later.base_offset != earlier.next_offset:
                raise corrupted(
                    key,
                    f"its batches are not contiguous (one ends at {earlier.next_offset}, the next starts at "
                    f"{later.base_offset})",
                    what="log segment",
                )

    def batch(self, index: int, columns: list[str] | None = None) -> LogBatch:
        """The `index`-th original batch (projected like :func:`decode_batch`)."""
        header = self.headers[index]
        try:
            table = pa.Table.from_batches([self._reader.get_batch(index)]).replace_schema_metadata(None)
        except _DECODE_ERRORS as exc:
            raise corrupted(
                self.key,
                f"batch {index} cannot be decoded ({exc})",
                what="log segment",
                offsets=(header.base_offset, header.next_offset),
            ) from exc
        if table.num_rows != header.record_count:
            raise corrupted(
                self.key,
                f"batch {index} says {header.record_count} records but holds {table.num_rows}",
                what="log segment",
                offsets=(header.base_offset, header.next_offset),
            )
        if columns is not None:
            keep = [c for c in table.column_names if c == CHANGE_TYPE_COLUMN or c in columns]
            table = table.select(keep or table.column_names[:1])
        return LogBatch(self.headers[index], table)
