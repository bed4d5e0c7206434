"""Lazy, streaming scans of live tables: Polars IO sources with projection, predicate and ``n_rows`` push-down."""

from fluss_lake.scan.predicates import necessary_conditions
from fluss_lake.scan.sources import VIEWS, scan_lazy

__all__ = ["VIEWS", "necessary_conditions", "scan_lazy"]
