"""Keep null lists and maps whose elements or values are structs null when pyiceberg writes or reads them.

pyiceberg 0.12's ``ArrowProjectionVisitor`` (every data file it writes, every file its ``ArrowScan`` reads,
so tiering and compaction) rebuilds such a list or map from its offsets and drops its null mask: a null
``ARRAY<ROW<...>>`` or ``MAP<k, ROW<...>>`` becomes an empty one, at rest, for every reader
(apache/iceberg-python#3833, open). :func:`install` wraps the visitor's ``list`` and ``map`` steps to put the
source array's null mask back; where pyiceberg already keeps the nulls the wrapper changes nothing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["install", "with_nulls_of"]

_MARK = "_fluss_lake_keeps_nested_nulls"


def with_nulls_of(result: Any, source: Any) -> Any:
    """`result` (a list or map array rebuilt from `source`) with `source`'s nulls; anything else unchanged.

    Examples
    --------
    >>> import pyarrow as pa
    >>> source = pa.array([[{"a": 1}], None], pa.large_list(pa.struct([("a", pa.int32())])))
    >>> lost = pa.LargeListArray.from_arrays(source.offsets, source.values)  # what pyiceberg 0.12 does
    >>> lost.to_pylist(), with_nulls_of(lost, source).to_pylist()
    ([[{'a': 1}], []], [[{'a': 1}], None])
    """
    if not isinstance(result, pa.ListArray | pa.LargeListArray | pa.MapArray) or not isinstance(source, pa.Array):
        return result
    if not source.null_count or result.null_count == source.null_count or len(result) != len(source):
        return result
    offsets = result.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))  # a fresh array: Arrow refuses a sliced one
    mask = source.is_null()
    if isinstance(result, pa.MapArray):
        keys, items = result.keys.slice(start, end - start), result.items.slice(start, end - start)
        return pa.MapArray.from_arrays(rebased, keys, items, type=result.type, mask=mask)
    values = result.values.slice(start, end - start)
    return type(result).from_arrays(rebased, values, type=result.type, mask=mask)


def install() -> None:
    """Wrap pyiceberg's projection of lists and maps once per process (idempotent)."""
    from pyiceberg.io.pyarrow import ArrowProjectionVisitor

    if getattr(ArrowProjectionVisitor, _MARK, False):
        return
    project_list, project_map = ArrowProjectionVisitor.list, ArrowProjectionVisitor.map

    def list_(self: Any, list_type: Any, list_array: Any, value_array: Any) -> Any:
        return with_nulls_of(project_list(self, list_type, list_array, value_array), list_array)

    def map_(self: Any, map_type: Any, map_array: Any, key_result: Any, value_result: Any) -> Any:
        return with_nulls_of(project_map(self, map_type, map_array, key_result, value_result), map_array)

    setattr(ArrowProjectionVisitor, "list", list_)  # noqa: B010
    setattr(ArrowProjectionVisitor, "map", map_)  # noqa: B010
    setattr(ArrowProjectionVisitor, _MARK, True)
