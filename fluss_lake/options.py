"""Fluss option keys, their defaults, and the rules for which may be set where and altered later.

Keys are spelled exactly as in Fluss so a Fluss user recognises them. A key in one of Fluss's namespaces
(:data:`FLUSS_NAMESPACES`: ``table.``, ``bucket.``, ``fields.``, ``auto-increment.``, ``client.``, ``lookup.``,
``scan.``, ``sink.``, ``datalake.``, ``kv.``, ``log.``, ``remote.``) is an option: fluss-lake implements it, or
refuses it with a clear error when a table is created or altered (never accepting it and then doing nothing).
Every other key is a custom property, kept as given.

Examples
--------
>>> normalize_options({"owner": "team-a", "table.merge-engine": "FIRST_ROW"})
{'owner': 'team-a', 'table.merge-engine': 'first_row'}
>>> try:
...     normalize_options({"table.replication.factor": "3"})
... except InvalidConfigError as err:
...     print(str(err).split(";")[0])
'table.replication.factor' is a Fluss option that fluss-lake does not support
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
#: The auto-increment column of a primary-key table (Fluss's Flink option; one INT or BIGINT column).
AUTO_INCREMENT_FIELDS = "auto-increment.fields"
#: How many auto-increment values a bucket takes from the table's sequence at a time (Fluss's
#: ``ConfigOptions.TABLE_AUTO_INCREMENT_CACHE_SIZE``; Fluss's options page calls it ``table.auto-inc.batch-size``,
#: a key Fluss itself does not read, so fluss-lake refuses that spelling with a pointer to this one).
AUTO_INCREMENT_CACHE_SIZE = "table.auto-increment.cache-size"
#: Whether a lookup join inserts the keys it does not find (Fluss's Flink option, primary-key lookups only).
LOOKUP_INSERT_IF_NOT_EXISTS = "lookup.insert-if-not-exists"

DEFAULT_BUCKET_NUM = 1
MAX_BUCKET_NUM = 4096
DEFAULT_AUTO_INCREMENT_CACHE_SIZE = 100_000
#: The only ``table.kv.format`` fluss-lake implements: keys are encoded in Fluss's compacted key format.
DEFAULT_KV_FORMAT = "compacted"

#: Prefixes of Fluss's option namespaces: a key under one of them is an option (implemented or refused); every
#: other key is a custom property.
FLUSS_NAMESPACES: tuple[str, ...] = (
    "table.",
    "bucket.",
    "fields.",
    "auto-increment.",
    "client.",
    "lookup.",
    "scan.",
    "sink.",
    "datalake.",
    "kv.",
    "log.",
    "remote.",
)

#: Every table-level key fluss-lake implements; any other key under ``table.`` is refused.
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
        DATALAKE_ENABLED,
        DATALAKE_FORMAT,
        DATALAKE_FRESHNESS,
        "table.auto-partition.enabled",
        "table.auto-partition.key",
        "table.auto-partition.time-unit",
        "table.auto-partition.time-format",
        "table.auto-partition.num-precreate",
        "table.auto-partition.num-retention",
        "table.auto-partition.time-zone",
        AUTO_INCREMENT_CACHE_SIZE,
        KV_TTL,
    }
)

#: The keys of the other Fluss namespaces that fluss-lake implements.
NAMESPACED_OPTIONS: frozenset[str] = frozenset(
    {BUCKET_NUM, BUCKET_KEY, AUTO_INCREMENT_FIELDS, NO_KEY_ASSIGNER, LOOKUP_INSERT_IF_NOT_EXISTS}
)

#: Fluss options fluss-lake knows and does not implement: why, and what to use instead.
UNSUPPORTED_OPTIONS: Mapping[str, str] = {
    "table.log.local-ttl": "every log batch lives in the store, there is no local copy to expire; "
    "table.log.ttl trims the log",
    "table.log.tiered.local-segments": "every log batch lives in the store, there are no local segments to keep; "
    "table.log.ttl trims the log",
    "table.datalake.auto-compaction": "the tiering service compacts lake files by its own policy "
    "(tier_once(..., compaction=CompactionPolicy(...)))",
    "table.datalake.auto-expire-snapshot": "tiering never expires Iceberg snapshots; run Iceberg's snapshot "
    "expiry on the lake table",
    "table.datalake.historical-partition.enabled": "lookups read live partitions only; a dropped partition's rows "
    "stay readable from the lake (union reads, training sets)",
    "table.kv.format-version": "the state's format is fluss-lake's own and is not chosen per table",
    "table.kv.standby-replica.enabled": "there are no replicas: a process restores a bucket from its latest "
    "snapshot in the store",
    "table.replication.factor": "there are no replicas: durability is the object store's",
    "table.auto-inc.batch-size": f"Fluss's options page names it so, but Fluss reads {AUTO_INCREMENT_CACHE_SIZE!r}; "
    "use that key",
    "client.writer.dynamic-create-partition.enabled": "pass fl.connect(dynamic_partition_creation=...)",
    "lookup.cache": "pass LookupJoin(..., cache=LookupCache(...))",
    "lookup.partial-cache.max-rows": "pass LookupJoin(..., cache=LookupCache(max_rows=...))",
    "lookup.partial-cache.expire-after-write": "pass LookupJoin(..., cache=LookupCache(expire_after_write=...))",
    "lookup.partial-cache.expire-after-access": "LookupCache expires rows after write only "
    "(LookupCache(expire_after_write=...))",
    "lookup.partial-cache.cache-missing-key": "pass LookupJoin(..., cache=LookupCache(cache_missing_key=...))",
    "lookup.async": "lookups are batched calls; there is no async mode",
    "lookup.max-retries": "a lookup reads the store directly; a retriable error says so (err.retriable)",
    "datalake.format": "a cluster setting: pass fl.connect(datalake_format='iceberg'), or set "
    "table.datalake.format on the table",
    "datalake.enabled": "a cluster setting: set table.datalake.enabled on the table",
    "kv.snapshot.interval": "pass fl.connect(snapshot_every=<offsets>) or call Table.snapshot()",
    "kv.snapshot.num-retained": "every bucket keeps its two latest snapshots",
}

#: What each namespace other than ``table.`` stands for, said when one of its keys is refused.
_NAMESPACE_HINTS: Mapping[str, str] = {
    "bucket.": f"the bucket options are {BUCKET_NUM!r} and {BUCKET_KEY!r}",
    "auto-increment.": f"the auto-increment column is named by {AUTO_INCREMENT_FIELDS!r}",
    "client.": "fluss-lake has no Fluss client: writers and readers work on the store directly",
    "lookup.": f"LookupJoin takes its settings as arguments; the table option it reads is "
    f"{LOOKUP_INSERT_IF_NOT_EXISTS!r}",
    "scan.": "scans and jobs take where to start as arguments (start_offset=..., start=...)",
    "sink.": "jobs write their result tables themselves (sink=...)",
    "datalake.": "cluster settings of Fluss; tables use the table.datalake.* options",
    "kv.": "settings of Fluss's servers; fluss-lake's are the arguments of fl.connect()",
    "log.": "settings of Fluss's servers; fluss-lake's are the arguments of fl.connect()",
    "remote.": "settings of Fluss's servers; the store is the URL given to fl.connect()",
}

#: Keys Fluss lets ALTER TABLE change (``FlussConfigUtils``) that fluss-lake implements, plus
#: ``lookup.insert-if-not-exists`` (a connector option Fluss keeps as an alterable property); everything else
#: is fixed at creation.
ALTERABLE_OPTIONS: frozenset[str] = frozenset(
    {
        DATALAKE_ENABLED,
        DATALAKE_FRESHNESS,
        LOG_TTL,
        "table.auto-partition.enabled",
        "table.auto-partition.num-retention",
        "table.auto-partition.num-precreate",
        STATISTICS_COLUMNS,
        LOOKUP_INSERT_IF_NOT_EXISTS,
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
    LOOKUP_INSERT_IF_NOT_EXISTS: ("true", "false"),
}
#: Values of enum options that Fluss has and fluss-lake does not implement: why, and what to do.
_UNSUPPORTED_VALUES: Mapping[tuple[str, str], str] = {
    (KV_FORMAT, "indexed"): "fluss-lake keeps state in its own columnar segments with keys in Fluss's COMPACTED "
    "encoding; only 'COMPACTED' (the default) is implemented",
    **{
        (DATALAKE_FORMAT, name): "the tiering service writes Iceberg tables only; use 'iceberg' or leave the "
        "option unset"
        for name in ("paimon", "lance", "hudi")
    },
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


def namespace_of(key: str) -> str | None:
    """The Fluss namespace a key belongs to (``"table."``...), or None for a custom property.

    Examples
    --------
    >>> namespace_of("lookup.insert-if-not-exists"), namespace_of("owner")
    ('lookup.', None)
    """
    return next((ns for ns in FLUSS_NAMESPACES if key.startswith(ns)), None)


def is_custom_property(key: str) -> bool:
    """Whether a key lies outside Fluss's namespaces (kept as given, never interpreted)."""
    return namespace_of(key) is None


def _unsupported(key: str, why: str) -> str:
    return f"{key!r} is a Fluss option that fluss-lake does not support; remove it ({why})"


def key_problem(key: str) -> str | None:
    """Why a key cannot be set on a table (misspelt, or a Fluss option fluss-lake does not implement), or None.

    Examples
    --------
    >>> key_problem("table.log.ttll")
    "unknown table option 'table.log.ttll'; did you mean 'table.log.ttl'?"
    >>> key_problem("owner") is None, key_problem("auto-increment.fields") is None
    (True, True)
    """
    namespace = namespace_of(key)
    if namespace is None or key in TABLE_OPTIONS or key in NAMESPACED_OPTIONS:
        return None
    if key in UNSUPPORTED_OPTIONS:
        return _unsupported(key, UNSUPPORTED_OPTIONS[key])
    if namespace == "table.":
        hint = difflib.get_close_matches(key, sorted(TABLE_OPTIONS), n=1)
        return f"unknown table option {key!r}" + (
            f"; did you mean {hint[0]!r}?" if hint else "; fluss_lake.options lists the table options"
        )
    if namespace == "fields.":
        if _FIELD_KEY.match(key):
            return None
        return f"option {key!r} is not of the form 'fields.<column>.agg' or 'fields.<column>.<function>.<param>'"
    if namespace == "bucket.":
        return f"unknown option {key!r}; the bucket options are {BUCKET_NUM!r} and {BUCKET_KEY!r}"
    implemented = sorted(k for k in NAMESPACED_OPTIONS if k.startswith(namespace))
    hint = difflib.get_close_matches(key, implemented, n=1, cutoff=0.85)  # a typo, not another Fluss option
    if hint:
        return f"unknown option {key!r}; did you mean {hint[0]!r}?"
    return (
        f"{key!r} is in Fluss's {namespace!r} namespace, which fluss-lake does not support; remove it "
        f"({_NAMESPACE_HINTS[namespace]}; keys outside Fluss's namespaces are kept as custom properties)"
    )


def value_problem(key: str, value: str) -> str | None:
    """Why fluss-lake refuses a valid Fluss value of an option it implements (``table.kv.format='INDEXED'``,
    ``table.datalake.format='lance'``), or None. `value` is normalized (:func:`enum_value`)."""
    why = _UNSUPPORTED_VALUES.get((key, value))
    return None if why is None else f"{key}={value.upper()!r} is not supported by fluss-lake; remove it ({why})"


def check_option_key(key: object) -> None:
    """Raise InvalidConfigError for a key in Fluss's namespaces that is not an option fluss-lake implements.

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
    problem = key_problem(key)
    if problem is not None:
        raise InvalidConfigError(problem)


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def normalize_value(key: str, value: object) -> str:
    """One option's value in Fluss's string form (enums lower-cased), checked; the key must be known."""
    text = _text(value)
    if key in _ENUMS:
        text = enum_value(key, text)
        problem = value_problem(key, text)
        if problem is not None:
            raise InvalidConfigError(problem)
    if key == BUCKET_NUM and not text.strip().isdigit():
        raise InvalidConfigError(f"{BUCKET_NUM}={value!r} must be a whole number from 1 to {MAX_BUCKET_NUM}")
    if key == AUTO_INCREMENT_CACHE_SIZE and not (text.strip().isdigit() and 0 < int(text) < 2**63):
        raise InvalidConfigError(f"{AUTO_INCREMENT_CACHE_SIZE}={value!r} must be a positive whole number")
    if key in (LOG_TTL, DATALAKE_FRESHNESS, KV_TTL):
        parse_duration_ms(key, text)
    return text


def normalize_options(options: Mapping[str, object]) -> dict[str, str]:
    """Turn user options into Fluss's string form, refusing unknown and unsupported Fluss keys and values."""
    result: dict[str, str] = {}
    for key, value in options.items():
        check_option_key(key)
        result[key] = normalize_value(key, value)
    return result


def option_problem(key: str, value: str) -> str | None:
    """Why a stored option would be refused today (key or value), or None: tables created by an earlier version
    may hold such options; they still open, and the option is ignored (see ``TableInfo.ignored_options``)."""
    problem = key_problem(key)
    if problem is not None:
        return problem
    if key in _ENUMS:
        try:
            return value_problem(key, enum_value(key, value))
        except InvalidConfigError as err:
            return str(err)
    return None


def field_options(options: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Group ``fields.<col>.*`` options by column: ``{"col": {"agg": "sum", "listagg.delimiter": "|"}}``."""
    grouped: dict[str, dict[str, str]] = {}
    for key, value in options.items():
        match = _FIELD_KEY.match(key)
        if match:
            grouped.setdefault(match.group("column"), {})[match.group("rest")] = value
    return grouped


def auto_increment_columns(options: Mapping[str, str]) -> tuple[str, ...]:
    """The columns ``auto-increment.fields`` names (comma-separated, trimmed), in order."""
    raw = options.get(AUTO_INCREMENT_FIELDS)
    return () if raw is None else tuple(c.strip() for c in raw.split(","))
