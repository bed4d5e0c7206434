"""Request counters and latency histograms per (verb, table), and the server's one-line progress report."""

from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["LATENCY_BUCKETS_MS", "Metrics"]

#: Upper bounds (ms) of the latency histogram buckets; the last bucket is everything slower.
LATENCY_BUCKETS_MS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)


@dataclass(slots=True)
class _Series:
    requests: int = 0
    errors: int = 0
    rows_in: int = 0
    rows_out: int = 0
    seconds: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "seconds": round(self.seconds, 6),
            "latency_ms_buckets": [*LATENCY_BUCKETS_MS, "inf"],
            "latency_ms_counts": list(self.histogram),
        }


def _quantile(histogram: list[int], q: float) -> float | None:
    total = sum(histogram)
    if not total:
        return None
    rank, seen = q * total, 0
    for i, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return LATENCY_BUCKETS_MS[i] if i < len(LATENCY_BUCKETS_MS) else float("inf")
    return float("inf")


class Metrics:
    """Thread-safe counters: every request records its verb, table, rows, outcome and latency.

    Examples
    --------
    >>> m = Metrics()
    >>> m.record("lookup", "shop.c", seconds=0.003, rows_in=10, rows_out=10)
    >>> m.snapshot()["tables"]["shop.c"]["lookup"]["requests"]
    1
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}
        self._window = _Series()
        self.started = time.time()
        self.in_flight = 0

    def begin(self) -> None:
        """A request started."""
        with self._lock:
            self.in_flight += 1

    def end(self) -> None:
        """A request ended (recorded separately)."""
        with self._lock:
            self.in_flight -= 1

    def record(
        self, verb: str, table: str | None, *, seconds: float, rows_in: int = 0, rows_out: int = 0, error: bool = False
    ) -> None:
        """Count one finished request."""
        bucket = bisect.bisect_left(LATENCY_BUCKETS_MS, seconds * 1000.0)
        key = (table or "-", verb)
        with self._lock:
            own = self._series.get(key)
            if own is None:  # not setdefault: that would build a series (and its histogram) every call
                own = self._series[key] = _Series()
            for series in (own, self._window):
                series.requests += 1
                series.errors += int(error)
                series.rows_in += rows_in
                series.rows_out += rows_out
                series.seconds += seconds
                series.histogram[bucket] += 1

    def snapshot(self) -> dict[str, Any]:
        """Everything counted since the start, as JSON-ready data: ``tables -> verb -> counters``."""
        with self._lock:
            tables: dict[str, dict[str, Any]] = {}
            for (table, verb), series in sorted(self._series.items()):
                tables.setdefault(table, {})[verb] = series.to_json()
            return {"uptime_s": round(time.time() - self.started, 3), "in_flight": self.in_flight, "tables": tables}

    def progress_line(self, interval_s: float) -> str:
        """One line about the requests since the previous call (then the window starts again)."""
        with self._lock:
            window, self._window = self._window, _Series()
            busiest = max(self._series.items(), key=lambda kv: kv[1].requests, default=None)
        p50, p99 = _quantile(window.histogram, 0.5), _quantile(window.histogram, 0.99)
        latency = f", p50 <= {p50:g} ms, p99 <= {p99:g} ms" if p50 is not None and p99 is not None else ""
        top = f"; busiest {busiest[0][0]} {busiest[0][1]} ({busiest[1].requests} in all)" if busiest else ""
        return (
            f"served {window.requests} request(s) in the last {interval_s:g} s "
            f"({window.requests / max(interval_s, 1e-9):.1f}/s), {window.errors} error(s), "
            f"{window.rows_out} row(s) out{latency}{top}"
        )
