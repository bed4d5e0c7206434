"""Polars frames to Arrow without Polars' thread pool when they are small.

``DataFrame.to_arrow`` converts the columns in Polars' thread pool. For the small frames of a commit (a bucket's
share of a write batch) waking that pool costs more than the conversion: per-column ``Series.to_arrow`` on the
calling thread gives the same table 2-3x faster there (``docs/WRITE-PATH.md``). Large frames keep the pool.

>>> import polars as pl
>>> frame = pl.DataFrame({"id": [1, 2], "name": ["a", None]})
>>> to_arrow(frame).equals(frame.to_arrow())
True
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

__all__ = ["SMALL_ROWS", "to_arrow"]

#: Frames up to this many rows are converted column by column on the calling thread.
SMALL_ROWS = 1 << 16


def to_arrow(frame: pl.DataFrame) -> pa.Table:
    """``frame.to_arrow()``: the same schema and values, one chunk per column."""
    if frame.height > SMALL_ROWS or not frame.width:
        return frame.to_arrow()
    return pa.Table.from_arrays([s.to_arrow() for s in frame.get_columns()], names=frame.columns)
