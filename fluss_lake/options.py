"""Fluss option keys, their defaults, and the rules for which may be set where and altered later.

Keys are spelled exactly as in Fluss so a Fluss user recognises them. Keys outside the reserved namespaces
(``table.``, ``bucket.``, ``fields.``) are kept as custom properties.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from fluss_lake.exceptions import InvalidConfigError, UnsupportedMergeEngineError

BUCKET_NUM = "bucket.num"
BUCKET_KEY = "bucket.key"
MERGE_ENGINE = "table.merge-engine"
VERSIONED_VER_COLUMN = "table.merge-engine.versioned.ver-column"
DELETE_BEHAVIOR = "table.delete.behavior"
CHANGELOG_IMAGE = "table.changelog.image"
LOG_FORMAT = "table.log.format"
LOG_COMPRESSION = "table.log.arrow.compression.type"
LOG_ZSTD_LEVEL = "table.log.arrow.compression.zstd.level"
KV_FORMAT = "table.kv.format"
STATISTICS_COLUMNS = "table.statistics.columns"
LOG_TTL = "table.log.ttl"
KV_TTL = "table.kv.ttl"
AUTO_PARTITION_ENABLED = "table.auto-partition.enabled"
DATALAKE_ENABLED = "table.datalake.enabled"
DATALAKE_FORMAT = "table.datalake.format"
DATALAKE_FRESHNESS = "table.datalake.freshness"
NO_KEY_ASSIGNER = "client.writer.bucket.no-key-assigner"
FIELD_AGG = "fields.{column}.agg"

DEFAULT_BUCKET_NUM = 1
MAX_BUCKET_NUM = 4096

#: Every table-level key we understand; a key under ``table.`` that is not here is rejected.
TABLE_OPTIONS: frozenset[str] = frozenset(
    {
        MERGE_ENGINE,
        VERSIONED_VER_COLUMN,
        DELETE_BEHAVIOR,
        CHANGELOG_IMAGE,
        LOG_FORMAT,
        LOG_COMPRESSION,
        LOG_ZSTD_LEVEL,
        KV_FORMAT,
        STATISTICS_COLUMNS,
        LOG_TTL,
        "table.log.local-ttl",
        "table.log.tiered.local-segments",
        DATALAKE_ENABLED,
        DATALAKE_FORMAT,
        DATALAKE_FRESHNESS,
        "table.datalake.auto-compaction",
        "table.datalake.auto-expire-snapshot",
        "table.datalake.historical-partition.enabled",
        "table.auto-partition.enabled",
        "table.auto-partition.key",
        "table.auto-partition.time-unit",
        "table.auto-partition.time-format",
        "table.auto-partition.num-precreate",
        "table.auto-partition.num-retention",
        "table.auto-partition.time-zone",
        "table.kv.format-version",
        "table.kv.standby-replica.enabled",
        "table.replication.factor",
        "table.auto-increment.cache-size",
        "table.kv.ttl",
    }
)

#: Keys Fluss lets ALTER TABLE change (``FlussConfigUtils``); everything else is fixed at creation.
ALTERABLE_OPTIONS: frozenset[str] = frozenset(
    {
        DATALAKE_ENABLED,
        "table.datalake.historical-partition.enabled",
        DATALAKE_FRESHNESS,
        "table.datalake.auto-compaction",
        LOG_TTL,
        "table.log.local-ttl",
        "table.log.tiered.local-segments",
        "table.auto-partition.enabled",
        "table.auto-partition.num-retention",
        "table.auto-partition.num-precreate",
        STATISTICS_COLUMNS,
        "table.kv.standby-replica.enabled",
    }
)

_ENUMS: dict[str, tuple[str, ...]] = {
    MERGE_ENGINE: ("first_row", "versioned", "aggregation"),
    DELETE_BEHAVIOR: ("allow", "ignore", "disable"),
    CHANGELOG_IMAGE: ("full", "wal"),
    LOG_FORMAT: ("arrow", "indexed", "compacted"),
    LOG_COMPRESSION: ("zstd", "lz4_frame", "none"),
    KV_FORMAT: ("compacted", "indexed"),
    DATALAKE_FORMAT: ("iceberg", "paimon", "lance", "hudi"),
    DATALAKE_ENABLED: ("true", "false"),
    NO_KEY_ASSIGNER: ("sticky", "round_robin"),
}
_FIELD_KEY = re.compile(r"^fields\.(?P<column>.+?)\.(?P<rest>agg|[a-z_]+\.[a-z_]+)$")
_DURATION = re.compile(r"^\s*(-?\d+)\s*(ms|s|sec|min|m|h|d|day|days|hours|minutes|seconds)?\s*$", re.I)
_DURATION_MS = {
    None: 1000,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "seconds": 1000,
    "min": 60_000,
    "m": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}


def parse_duration_ms(key: str, value: str) -> int:
    """Parse a Fluss duration (``7 d``, ``10min``, ``0ms``) to milliseconds."""
    match = _DURATION.match(str(value))
    if match is None:
        raise InvalidConfigError(f"{key}={value!r} is not a duration; write e.g. '7 d', '3min' or '500ms'")
    return int(match.group(1)) * _DURATION_MS[match.group(2).lower() if match.group(2) else None]


def enum_value(key: str, value: str) -> str:
    """Normalize an enum-valued option (case-insensitive, ``-`` for ``_``) or raise."""
    normalized = str(value).strip().lower().replace("-", "_")
    allowed = _ENUMS[key]
    if normalized not in allowed:
        if key == MERGE_ENGINE:
            raise UnsupportedMergeEngineError(
                f"{key}={value!r} is not a merge engine; choose one of {list(allowed)}, or leave {key} unset for "
                "the default engine (the last row wins, with partial updates)"
            )
        raise InvalidConfigError(f"{key}={value!r} is not allowed; choose one of {list(allowed)}")
    return normalized


def check_option_key(key: object) -> None:
    """Raise InvalidConfigError for a key in Fluss's namespaces that is not an option (with the closest one).

    Examples
    --------
    >>> try:
    ...     check_option_key("table.log.ttll")
    ... except InvalidConfigError as err:
    ...     print(err)
    unknown table option 'table.log.ttll'; did you mean 'table.log.ttl'?
    """
    if not isinstance(key, str) or not key:
        raise InvalidConfigError(f"option key {key!r} must be a non-empty string")
    if key.startswith("table.") and key not in TABLE_OPTIONS:
        hint = difflib.get_close_matches(key, sorted(TABLE_OPTIONS), n=1)
        raise InvalidConfigError(
            f"unknown table option {key!r}" + (f"; did you mean {hint[0]!r}?" if hint else "; see fluss_lake.options")
        )
    if key.startswith("fields.") and not _FIELD_KEY.match(key):
        raise InvalidConfigError(
            f"option {key!r} is not of the form 'fields.<column>.agg' or 'fields.<column>.<function>.<param>'"
        )
    if key.startswith("bucket.") and key not in (BUCKET_NUM, BUCKET_KEY):
        raise InvalidConfigError(f"unknown option {key!r}; the bucket options are {BUCKET_NUM!r} and {BUCKET_KEY!r}")


def normalize_options(options: Mapping[str, object]) -> dict[str, str]:
    """Turn user options into Fluss's string form, rejecting unknown reserved keys and bad enum values."""
    result: dict[str, str] = {}
    for key, value in options.items():
        check_option_key(key)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key in _ENUMS:
            text = enum_value(key, text)
        if key == BUCKET_NUM and not text.strip().isdigit():
            raise InvalidConfigError(f"{BUCKET_NUM}={value!r} must be a whole number from 1 to {MAX_BUCKET_NUM}")
        if key in (LOG_TTL, DATALAKE_FRESHNESS, "table.log.local-ttl", "table.kv.ttl"):
            parse_duration_ms(key, text)
        result[key] = text
    return result


def field_options(options: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Group ``fields.<col>.*`` options by column: ``{"col": {"agg": "sum", "listagg.delimiter": "|"}}``."""
    grouped: dict[str, dict[str, str]] = {}
    for key, value in options.items():
        match = _FIELD_KEY.match(key)
        if match:
            grouped.setdefault(match.group("column"), {})[match.group("rest")] = value
    return grouped
