"""Auto-partitioning (``table.auto-partition.*``): which time partitions to pre-create and which are past retention.

Follows Fluss's ``AutoPartitionStrategy`` / ``PartitionUtils.generateAutoPartitionTime``: the partition of period
``now + k units`` is ``now`` shifted by ``k`` units and formatted with the unit's pattern in the table's time zone;
partitions whose value compares lexicographically below ``format(now - num_retention units)`` are expired.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from fluss_lake.exceptions import InvalidConfigError

__all__ = ["AutoPartitionStrategy", "AUTO_PARTITION_PREFIX"]

AUTO_PARTITION_PREFIX = "table.auto-partition."
ENABLED = "table.auto-partition.enabled"
KEY = "table.auto-partition.key"
TIME_UNIT = "table.auto-partition.time-unit"
TIME_FORMAT = "table.auto-partition.time-format"
NUM_PRECREATE = "table.auto-partition.num-precreate"
NUM_RETENTION = "table.auto-partition.num-retention"
TIME_ZONE = "table.auto-partition.time-zone"

_UNIT_FORMATS = {"HOUR": "yyyyMMddHH", "DAY": "yyyyMMdd", "MONTH": "yyyyMM", "QUARTER": "yyyyQ", "YEAR": "yyyy"}
_UNIT_FIELDS = {
    "YEAR": ("yyyy",),
    "QUARTER": ("yyyy", "Q"),
    "MONTH": ("yyyy", "MM"),
    "DAY": ("yyyy", "MM", "dd"),
    "HOUR": ("yyyy", "MM", "dd", "HH"),
}
_TOKEN = re.compile(r"yyyy|MM|dd|HH|Q|[-_]")


def _parse_format(pattern: str, unit: str) -> tuple[str, ...]:
    """Tokens of a time format; its fields must be exactly the unit's, largest first, each fixed width."""
    tokens, pos = [], 0
    while pos < len(pattern):
        match = _TOKEN.match(pattern, pos)
        if match is None:
            raise InvalidConfigError(
                f"{TIME_FORMAT}={pattern!r}: only the fixed-width fields yyyy, Q, MM, dd, HH "
                "and the separators '-' and '_' are allowed (partition values allow no other "
                "characters)"
            )
        tokens.append(match.group(0))
        pos = match.end()
    fields = tuple(t for t in tokens if t not in "-_")
    if fields != _UNIT_FIELDS[unit]:
        raise InvalidConfigError(
            f"{TIME_FORMAT}={pattern!r} must hold the fields {' '.join(_UNIT_FIELDS[unit])} of "
            f"time unit {unit}, in that order (largest first)"
        )
    return tuple(tokens)


def _add_months(moment: dt.datetime, months: int) -> dt.datetime:
    """``moment`` plus whole months, clamping the day to the month's length (Java's ``plusMonths``)."""
    total = moment.year * 12 + moment.month - 1 + months
    year, month = divmod(total, 12)
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


@dataclass(frozen=True, slots=True)
class AutoPartitionStrategy:
    """The parsed ``table.auto-partition.*`` options of one table.

    Examples
    --------
    >>> s = AutoPartitionStrategy.from_options({"table.auto-partition.enabled": "true",
    ...     "table.auto-partition.num-retention": "3", "table.auto-partition.time-zone": "UTC"}, ("day",),
    ...     {"day": pl.String()})
    >>> now = 1731283200000  # 2024-11-11 00:00 UTC
    >>> s.cutoff(now), s.precreate_values(now)
    ('20241108', ['20241111', '20241112'])
    """

    enabled: bool
    key: str
    time_unit: str
    tokens: tuple[str, ...]
    num_precreate: int
    num_retention: int
    time_zone: str

    @classmethod
    def from_options(
        cls, options: Mapping[str, str], partition_keys: Sequence[str], dtypes: Mapping[str, pl.DataType]
    ) -> AutoPartitionStrategy | None:
        """Validate the options against the partition keys; None when the table has no auto-partitioning."""
        given = {k: v for k, v in options.items() if k.startswith(AUTO_PARTITION_PREFIX)}
        if not given:
            return None
        if not partition_keys:
            raise InvalidConfigError(
                f"{sorted(given)} need a partitioned table; declare partition_keys or drop the auto-partition options"
            )
        enabled = given.get(ENABLED, "false").strip().lower()
        if enabled not in ("true", "false"):
            raise InvalidConfigError(f"{ENABLED}={given[ENABLED]!r} must be true or false")
        key = given.get(KEY)
        if key is None:
            if len(partition_keys) > 1:
                raise InvalidConfigError(
                    f"{KEY} is required when a table has several partition keys "
                    f"{list(partition_keys)}; name the time column"
                )
            key = partition_keys[0]
        elif key not in partition_keys:
            raise InvalidConfigError(f"{KEY}={key!r} must be one of the partition keys {list(partition_keys)}")
        unit = given.get(TIME_UNIT, "DAY").strip().upper()
        if unit not in _UNIT_FORMATS:
            raise InvalidConfigError(
                f"{TIME_UNIT}={given[TIME_UNIT]!r} is unknown; choose one of {list(_UNIT_FORMATS)}"
            )
        pattern = given.get(TIME_FORMAT, _UNIT_FORMATS[unit])
        if isinstance(dtypes.get(key), pl.Date):
            if unit != "DAY":
                raise InvalidConfigError(f"a DATE auto-partition key ({key!r}) needs {TIME_UNIT}='DAY'")
            pattern = "yyyy-MM-dd"
        tokens = _parse_format(pattern, unit)
        precreate = cls._count(given, NUM_PRECREATE, 2 if len(partition_keys) == 1 else 0)
        if len(partition_keys) > 1 and precreate:
            raise InvalidConfigError(
                f"{NUM_PRECREATE} must be 0 for a table with several partition keys (the other "
                "keys' values are unknown in advance)"
            )
        retention = cls._count(given, NUM_RETENTION, 7)
        zone = given.get(TIME_ZONE) or _local_zone()
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidConfigError(
                f"{TIME_ZONE}={zone!r} is not a known time zone (e.g. 'UTC', 'Europe/Berlin')"
            ) from exc
        return cls(enabled == "true", key, unit, tokens, precreate, retention, zone)

    @staticmethod
    def _count(given: Mapping[str, str], key: str, default: int) -> int:
        text = given.get(key, str(default)).strip()
        if not text.isdigit():
            raise InvalidConfigError(f"{key}={given[key]!r} must be a whole number >= 0")
        return int(text)

    def _shift(self, moment: dt.datetime, periods: int) -> dt.datetime:
        if self.time_unit == "HOUR":
            return moment + dt.timedelta(hours=periods)
        if self.time_unit == "DAY":
            return moment + dt.timedelta(days=periods)
        months = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[self.time_unit]
        return _add_months(moment, months * periods)

    def _format(self, moment: dt.datetime) -> str:
        parts = {
            "yyyy": f"{moment.year:04d}",
            "MM": f"{moment.month:02d}",
            "dd": f"{moment.day:02d}",
            "HH": f"{moment.hour:02d}",
            "Q": str((moment.month - 1) // 3 + 1),
        }
        return "".join(parts.get(t, t) for t in self.tokens)

    def value_at(self, now_ms: int, periods: int = 0) -> str:
        """The partition value of the period `periods` units after the one holding `now_ms`."""
        now = dt.datetime.fromtimestamp(now_ms / 1000, tz=ZoneInfo(self.time_zone))
        return self._format(self._shift(now, periods))

    def cutoff(self, now_ms: int) -> str:
        """Partitions whose auto-partition value sorts below this string are past retention."""
        return self.value_at(now_ms, -self.num_retention)

    def is_expired(self, value: str, now_ms: int) -> bool:
        """Whether a partition value is past retention (Fluss's lexicographic rule)."""
        return value < self.cutoff(now_ms)

    def precreate_values(self, now_ms: int) -> list[str]:
        """Values of the partitions to create ahead: the current period and the next ``num_precreate - 1``."""
        return [self.value_at(now_ms, k) for k in range(self.num_precreate)]


def _local_zone() -> str:
    """This process's time zone name (Fluss defaults to the JVM's zone), UTC if it has no IANA name."""
    zone = dt.datetime.now().astimezone().tzinfo
    key = getattr(zone, "key", None)
    if key:
        return key
    name = dt.datetime.now().astimezone().tzname()
    try:
        ZoneInfo(name or "UTC")
        return name or "UTC"
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"
