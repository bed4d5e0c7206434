"""Helpers shared by the tiering tests (imported as a plain module: tests/tiering is on sys.path)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import polars as pl

from tiering import Lake

LAKE_ON = {"table.datalake.enabled": True}


def lake_properties(endpoint: str, bucket: str, catalog_db: str, **extra: str) -> dict[str, str]:
    """pyiceberg SqlCatalog properties for a warehouse on a moto bucket (STACK-NOTES §3's recommended keys)."""
    return {"type": "sql", "uri": f"sqlite:///{catalog_db}", "warehouse": f"s3://{bucket}/warehouse",
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "s3.endpoint": endpoint,
            "s3.access-key-id": "testing", "s3.secret-access-key": "testing", "s3.region": "us-east-1", **extra}


def lake_rows(lake: Lake, path: str, kind: str = "log") -> pl.DataFrame:
    """Every row of a lake table read through pyiceberg itself (an independent reader)."""
    table = lake.load(path, kind)  # type: ignore[arg-type]
    frame = pl.from_arrow(table.scan().to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame


def sorted_rows(frame: pl.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """Rows of `columns`, sorted, as dicts (order-free comparison)."""
    return frame.select(columns).sort(columns, nulls_last=True).to_dicts()


try:
    from pyarrow.fs import AwsStandardS3RetryStrategy as _Standard
except ImportError:  # pragma: no cover - pyarrow built without S3
    _Standard = object  # type: ignore[assignment,misc]


class FailFastRetry(_Standard):  # type: ignore[misc,valid-type]
    """pyarrow S3 retry strategy with one attempt (``s3.retry-strategy-impl``): a dead endpoint fails fast."""

    def __init__(self) -> None:
        super().__init__(max_attempts=1)


def run_writer_with_tierers(writer: Callable[[], None], tierer: Callable[[int], None], stop: threading.Event, *,
                            tierers: int) -> None:
    """Run a writer thread beside `tierers` tiering threads (`tierer(i)`); when they finish, stop the writer."""
    threads = [threading.Thread(target=writer)] + [threading.Thread(target=tierer, args=(i,)) for i in range(tierers)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()
