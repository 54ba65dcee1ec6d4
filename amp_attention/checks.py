"""Argument checks shared by the Python API and the CLI: one declarative helper.

A parameter's contract is a *constraint*, a small frozen object that states the
type and the allowed set (in the manner of scikit-learn's parameter constraints):
:class:`Real` (an interval, optionally with 0 allowed), :class:`Integer`,
:class:`OneOf`, :class:`Flag` and :class:`InstanceOf`.  ``constraint.check(name,
value)`` returns the coerced value or raises

- :class:`ArgumentTypeError` when the *type* is wrong (``True`` or ``None`` where a
  number is expected, a string ``'1e-8'``, a complex number): a ``TypeError`` naming
  the argument and the type it got.  It is also a ``ValueError``, so code that treats
  every bad argument alike (the CLI: one line, exit 2) needs one ``except``;
- ``ValueError`` when the value is of the right type but outside the allowed set; the
  message names the parameter and the whole allowed range.

:func:`check_args` checks several arguments against a table of constraints.  The
``check_*`` functions below are the constraints most call sites need, by name.
bool is never a number here (``True`` is refused where a count or a real is expected).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a TypeError; also a ValueError, see the module
    docstring)."""


def _type_name(value: object) -> str:
    return type(value).__name__


def _is_bool(value: object) -> bool:
    return isinstance(value, (bool, np.bool_))


def _real(name: str, value: object) -> float:
    """``value`` as a float when it is a real number (not bool, str, complex, None)."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "fiu":
            return float(value)
        raise ArgumentTypeError(f"{name} must be a real number, got {_type_name(value)} {value!r}")
    return float(value)


@dataclass(frozen=True)
class Real:
    """A real number in [lo, hi] (ends open with ``lo_open`` / ``hi_open``; 0 also
    allowed with ``zero_ok``); ``why`` says why it is bounded.  NaN is never allowed;
    infinities only where an end is infinite and closed."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    why: str = ""
    zero_ok: bool = False

    def interval(self) -> str:
        return (f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}"
                f"{')' if self.hi_open else ']'}")

    def contains(self, x: float) -> bool:
        if x == 0.0 and self.zero_ok:
            return True
        above = self.lo < x if self.lo_open else self.lo <= x
        below = x < self.hi if self.hi_open else x <= self.hi
        return above and below and not math.isnan(x)

    def check(self, name: str, value: object) -> float:
        x = _real(name, value)
        if self.contains(x):
            return x
        why = f" ({self.why})" if self.why else ""
        if not self.why and not self.zero_ok and math.isfinite(self.lo) and self.hi == math.inf:
            # a half-line: say the bound first (finite first where NaN or inf was given)
            if not math.isfinite(x):
                raise ValueError(f"{name} must be finite, got {value!r} "
                                 f"(allowed range {self.interval()})")
            raise ValueError(f"{name} must be {'>' if self.lo_open else '>='} {self.lo:g} "
                             f"(allowed range {self.interval()}), got {value!r}")
        raise ValueError(f"{name} must {'be 0 or ' if self.zero_ok else ''}lie in "
                         f"{self.interval()}{why}, got {value!r}")


#: finite reals
FINITE = Real(-math.inf, math.inf, lo_open=True, hi_open=True)


@dataclass(frozen=True)
class Integer:
    """An integer >= minimum (and <= maximum when given).  ``integral_float``: also a
    float with an integral value (L = 2.0); off for counts and seeds, where 64.0
    usually hides a computed ratio passed by mistake."""

    minimum: int = 0
    maximum: int | None = None
    integral_float: bool = False
    why: str = ""

    def _range(self) -> str:
        if self.maximum is None:
            return f"an integer >= {self.minimum}"
        return f"an integer in [{self.minimum}, {self.maximum}]"

    def check(self, name: str, value: object) -> int:
        ok_float = (self.integral_float and isinstance(value, (float, np.floating))
                    and math.isfinite(value) and float(value).is_integer())
        if _is_bool(value) or not (isinstance(value, (int, np.integer)) or ok_float):
            if isinstance(value, (float, np.floating)) and self.integral_float:
                raise ValueError(f"{name} must be {self._range()}, got {value!r}")
            raise ArgumentTypeError(f"{name} must be {self._range()}, got {_type_name(value)} {value!r}")
        n = int(value)
        if n < self.minimum or (self.maximum is not None and n > self.maximum):
            why = f" ({self.why})" if self.why else ""
            raise ValueError(f"{name} must be {self._range()}{why}, got {value!r}")
        return n


@dataclass(frozen=True)
class OneOf:
    """One of the given strings."""

    options: tuple[str, ...]

    def check(self, name: str, value: object) -> str:
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name} must be one of {', '.join(self.options)}; "
                                    f"got {_type_name(value)} {value!r}")
        if value not in self.options:
            raise ValueError(f"{name} must be one of {', '.join(self.options)}; got {value!r}")
        return value


@dataclass(frozen=True)
class Flag:
    """True or False (a NumPy bool too); not 0/1, not 'yes'."""

    def check(self, name: str, value: object) -> bool:
        if not _is_bool(value):
            raise ArgumentTypeError(f"{name} must be True or False, got {_type_name(value)} {value!r}")
        return bool(value)


@dataclass(frozen=True)
class InstanceOf:
    """An instance of one of ``types`` (``what`` names them for the message); None
    also with ``none_ok``."""

    types: tuple[type, ...]
    what: str
    none_ok: bool = False

    def check(self, name: str, value: object) -> Any:
        if (value is None and self.none_ok) or isinstance(value, self.types):
            return value
        raise ArgumentTypeError(f"{name} must be {self.what}{' or None' if self.none_ok else ''}, "
                                f"got {_type_name(value)} {value!r}")


Constraint = Real | Integer | OneOf | Flag | InstanceOf


def check_args(constraints: Mapping[str, Constraint], **values: object) -> dict[str, Any]:
    """Check every ``values[name]`` against ``constraints[name]``; the coerced values."""
    return {name: constraints[name].check(name, value) for name, value in values.items()}


# ------------------------------------------------------ the common constraints by name


def check_real(name: str, value: object) -> float:
    """A finite real number."""
    return FINITE.check(name, value)


def check_positive(name: str, value: object) -> float:
    """A finite real > 0."""
    return Real(0.0, math.inf, lo_open=True, hi_open=True).check(name, value)


def check_nonnegative(name: str, value: object) -> float:
    """A finite real >= 0."""
    return Real(0.0, math.inf, hi_open=True).check(name, value)


def check_bounded(name: str, value: object, lo: float, hi: float, why: str, *,
                  lo_open: bool = False, zero_ok: bool = False) -> float:
    """A real in [lo, hi] ((lo, hi] with ``lo_open``; also 0 with ``zero_ok``); a NaN
    and an out-of-range value get one message stating the whole range and ``why``."""
    return Real(lo, hi, lo_open=lo_open, why=why, zero_ok=zero_ok).check(name, value)


def check_integer(name: str, value: object, minimum: int) -> int:
    """An integer >= ``minimum`` (an integral float accepted)."""
    return Integer(minimum, integral_float=True).check(name, value)


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    return OneOf(tuple(allowed)).check(name, value)


def check_count(name: str, value: object, minimum: int) -> int:
    """A Python/NumPy integer >= ``minimum``; floats are refused even when integral."""
    return Integer(minimum).check(name, value)


def check_dimension(d: object, minimum: int = 2) -> int:
    """The dimension d: an integer >= ``minimum``."""
    return check_count("d", d, minimum)


def check_seed(seed: object) -> int:
    """A seed: an integer >= 0 (what numpy's default_rng accepts)."""
    return check_count("seed", seed, 0)


def grid_values(name: str, values: object) -> tuple:
    """The values of a grid argument as a tuple, whatever sequence holds them: a tuple,
    a list, a 1-d NumPy array (``np.linspace(...)``: its truth value is ambiguous, so
    ``if not values`` fails on it), a range or any other iterable of scalars.  A string,
    a mapping, a scalar or an array of more than one dimension raises ArgumentTypeError
    naming ``name``; an empty grid a ValueError.  The elements are checked by the
    caller."""
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a sequence of numbers (a list, tuple or "
                                f"1-d array), got {_type_name(values)} {values!r}"[:300])
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ArgumentTypeError(f"{name} must be a 1-d sequence, got an array of shape "
                                f"{values.shape}")
    out = tuple(v.item() if isinstance(v, np.generic) else v for v in values)
    if not out:
        raise ValueError(f"{name} must be a non-empty grid")
    return out


def real_grid(name: str, values: object) -> tuple[float, ...]:
    """:func:`grid_values` as floats (each a real number: no bools, strings or None)."""
    return tuple(_real(name, v) for v in grid_values(name, values))
