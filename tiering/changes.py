"""Folding a primary-key changelog range into per-key outcomes, and applying them to a current-state frame.

Changelog rows are full after-images (for every merge engine), so the last ``+I``/``+U`` of a key is its new
row and a final ``-D`` removes it; ``-U`` rows carry nothing new. The same fold serves the tiering of the lake's
current-state table and the union read (lake snapshot + live tail).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

__all__ = ["apply_changes", "fold_changes"]


def fold_changes(log: pl.DataFrame, primary_key: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(upserts, touched_keys)`` of a changelog frame with ``_change_type`` (in offset order per bucket).

    `upserts` holds each key's last after-image (the full log row, system columns included) unless its last
    change is a delete; `touched_keys` holds every key that changed (the primary-key columns only).

    Examples
    --------
    >>> log = pl.DataFrame({"_change_type": ["+I", "+I", "-U", "+U", "-D"], "k": [1, 2, 1, 1, 2], "v": [1, 2, 1, 5, 2]})
    >>> upserts, touched = fold_changes(log, ["k"])
    >>> upserts.select("k", "v").to_dicts(), sorted(touched["k"].to_list())
    ([{'k': 1, 'v': 5}], [1, 2])
    """
    images = log.filter(pl.col("_change_type").cast(pl.String) != "-U")
    last = images.unique(subset=list(primary_key), keep="last", maintain_order=True)
    upserts = last.filter(pl.col("_change_type").cast(pl.String) != "-D")
    return upserts, last.select(primary_key)


def apply_changes(
    current: pl.LazyFrame, upserts: pl.LazyFrame, touched: pl.LazyFrame, primary_key: Sequence[str]
) -> pl.LazyFrame:
    """`current` without the touched keys, plus the upserted rows (same columns as `current`)."""
    kept = current.join(touched, on=list(primary_key), how="anti", nulls_equal=True)
    return pl.concat([kept, upserts.select(current.collect_schema().names())], how="vertical_relaxed")
