"""Merge engines of primary-key tables: one vectorized merge per round of a write batch.

``create_row_merger`` picks the engine (default last row with partial updates, ``first_row``, ``versioned``,
``aggregation``) or the OVERWRITE merge mode, after validating the table's merge configuration.
``check_merge_options`` checks a new table's merge options; ``MergeSpec.of`` reads them from a created table.
"""

from fluss_lake.kv.merge.aggregation import AggregationMerger
from fluss_lake.kv.merge.aggregators import (
    AGG_FUNCTIONS,
    DEFAULT_LISTAGG_DELIMITER,
    AggregateFunction,
    create_aggregator,
    normalize_function_name,
    validate_aggregation,
)
from fluss_lake.kv.merge.first_row import FirstRowMerger
from fluss_lake.kv.merge.last_row import LastRowMerger
from fluss_lake.kv.merge.merge_options import check_merge_options
from fluss_lake.kv.merge.merge_spec import (
    DEFAULT_AGG_FUNCTION,
    AggSpec,
    DeleteBehavior,
    MergeEngineName,
    MergeSpec,
    field_aggregations,
)
from fluss_lake.kv.merge.registry import (
    MERGE_ENGINES,
    check_delete_behavior,
    create_row_merger,
    default_delete_behavior,
)
from fluss_lake.kv.merge.row_merger import (
    EMIT_DELETE,
    EMIT_INSERT,
    EMIT_NOTHING,
    EMIT_UPDATE,
    MergeMode,
    MergeOutcome,
    MergeRound,
    RowMerger,
)
from fluss_lake.kv.merge.versioned import VersionedMerger, check_version_column

__all__ = [
    "AGG_FUNCTIONS",
    "DEFAULT_AGG_FUNCTION",
    "DEFAULT_LISTAGG_DELIMITER",
    "EMIT_DELETE",
    "EMIT_INSERT",
    "EMIT_NOTHING",
    "EMIT_UPDATE",
    "MERGE_ENGINES",
    "AggSpec",
    "AggregateFunction",
    "AggregationMerger",
    "DeleteBehavior",
    "FirstRowMerger",
    "LastRowMerger",
    "MergeEngineName",
    "MergeMode",
    "MergeOutcome",
    "MergeRound",
    "MergeSpec",
    "RowMerger",
    "VersionedMerger",
    "check_delete_behavior",
    "check_merge_options",
    "check_version_column",
    "create_aggregator",
    "create_row_merger",
    "default_delete_behavior",
    "field_aggregations",
    "normalize_function_name",
    "validate_aggregation",
]
