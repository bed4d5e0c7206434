"""Checks of the public API's numeric arguments, so bad values fail where they are passed, with what to pass.

Python's ``bool`` is an ``int`` (``True == 1``), so a flag passed where a count is meant would silently run with
1; a float count or a negative time would fail later and far away, or not at all. Every int or float option of the
public API goes through one of these (``tests/api/test_public_arguments.py`` enumerates them).

Examples
--------
>>> from fluss_lake._utils.arguments import check_int, check_seconds
>>> check_int("batch_rows", 500, minimum=1)
500
>>> check_int("batch_rows", True, minimum=1)
Traceback (most recent call last):
...
fluss_lake.exceptions.InvalidConfigError: batch_rows=True: pass a whole number >= 1 (True is a bool, not a number)
>>> check_seconds("poll_interval", 0)
Traceback (most recent call last):
...
fluss_lake.exceptions.InvalidConfigError: poll_interval=0: pass a number of seconds > 0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from numbers import Integral, Real
from typing import Any, overload

from fluss_lake.exceptions import InvalidConfigError

__all__ = ["check_callable", "check_int", "check_number", "check_offsets", "check_seconds"]


def _refuse(name: str, value: object, wanted: str, hint: str) -> InvalidConfigError:
    why = f" ({value!r} is a bool, not a number)" if isinstance(value, bool) else ""
    return InvalidConfigError(f"{name}={value!r}: pass {wanted}{why}{'; ' + hint if hint else ''}")


@overload
def check_int(name: str, value: int, *, minimum: int | None = ..., hint: str = ..., optional: bool = ...) -> int: ...
@overload
def check_int(name: str, value: None, *, minimum: int | None = ..., hint: str = ..., optional: bool = ...) -> None: ...
@overload
def check_int(
    name: str, value: Any, *, minimum: int | None = ..., hint: str = ..., optional: bool = ...
) -> int | None: ...
def check_int(name: str, value: Any, *, minimum: int | None = 0, hint: str = "", optional: bool = False) -> int | None:
    """`value` as a Python int of at least `minimum` (any int if None; None passes with `optional`); bools, floats,
    strings and smaller values raise :class:`~fluss_lake.InvalidConfigError` naming the argument."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or (minimum is not None and value < minimum):
        wanted = "a whole number" + (f" >= {minimum}" if minimum is not None else "") + (" or None" if optional else "")
        raise _refuse(name, value, wanted, hint)
    return int(value)


@overload
def check_seconds(name: str, value: float, *, positive: bool = ..., hint: str = ..., optional: bool = ...) -> float: ...
@overload
def check_seconds(name: str, value: None, *, positive: bool = ..., hint: str = ..., optional: bool = ...) -> None: ...
@overload
def check_seconds(
    name: str, value: Any, *, positive: bool = ..., hint: str = ..., optional: bool = ...
) -> float | None: ...
def check_seconds(
    name: str, value: Any, *, positive: bool = True, hint: str = "", optional: bool = False
) -> float | None:
    """`value` as a finite float of seconds, > 0 (or >= 0 unless `positive`); None passes with `optional`."""
    return check_number(name, value, what="a number of seconds", positive=positive, hint=hint, optional=optional)


def check_number(
    name: str, value: Any, *, what: str = "a number", positive: bool = True, hint: str = "", optional: bool = False
) -> float | None:
    """`value` as a finite float, > 0 (or >= 0 unless `positive`); None passes with `optional`; bools refused."""
    if value is None and optional:
        return None
    wanted = f"{what} {'>' if positive else '>='} 0" + (" or None" if optional else "")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _refuse(name, value, wanted, hint)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise _refuse(name, value, wanted, hint)
    return number


def check_offsets(name: str, offsets: Mapping | None, *, minimum: int | None = None) -> None:
    """Offsets keyed by bucket (or ``(partition, bucket)``): each a whole number (>= `minimum`), never a bool.
    Other offsets outside the log are :class:`~fluss_lake.OffsetOutOfRangeError` where the log is read (it says
    where the log starts and ends); unknown buckets are refused there too."""
    if offsets is None:
        return
    if not isinstance(offsets, Mapping):
        raise InvalidConfigError(
            f"{name}: pass a mapping of bucket (or (partition, bucket)) to offset, not {type(offsets).__name__}"
        )
    for key, value in offsets.items():
        check_int(f"{name}[{key!r}]", value, minimum=minimum)


def check_callable(name: str, value: Callable[..., Any] | None, *, hint: str = "") -> None:
    """`value` must be callable (or None)."""
    if value is not None and not callable(value):
        raise InvalidConfigError(f"{name}={value!r}: pass a function or None{'; ' + hint if hint else ''}")
