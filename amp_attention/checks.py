"""Argument checks shared by the Python API and the CLI.

Each returns the coerced value or raises a ValueError whose message names the
parameter and its allowed range (the CLI maps it to the flag of that name).
"""

from __future__ import annotations

import math

import numpy as np


def check_real(name: str, value: object) -> float:
    """Coerce ``value`` to a finite float or raise a ValueError naming ``name``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return x


def check_positive(name: str, value: object) -> float:
    x = check_real(name, value)
    if x <= 0.0:
        raise ValueError(f"{name} must be > 0 (allowed range (0, inf)), got {value!r}")
    return x


def check_nonnegative(name: str, value: object) -> float:
    x = check_real(name, value)
    if x < 0.0:
        raise ValueError(f"{name} must be >= 0 (allowed range [0, inf)), got {value!r}")
    return x


def check_bounded(name: str, value: object, lo: float, hi: float, why: str, *,
                  lo_open: bool = False, zero_ok: bool = False) -> float:
    """A finite real in [lo, hi] ((lo, hi] with ``lo_open``; also 0 with ``zero_ok``),
    else one ValueError stating the whole allowed range and ``why`` it is bounded
    (a non-number, a NaN and an out-of-range value get the same message)."""
    try:
        x = check_real(name, value)
    except ValueError:
        x = math.nan
    if (x == 0.0 and zero_ok) or ((lo < x) if lo_open else (lo <= x)) and x <= hi:
        return x
    interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
    raise ValueError(f"{name} must {'be 0 or ' if zero_ok else ''}lie in {interval} ({why}), "
                     f"got {value!r}")


def check_integer(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    n = int(value)
    if n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return n


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def check_count(name: str, value: object, minimum: int) -> int:
    """A Python/NumPy integer >= ``minimum``; floats are refused even when integral (an
    array size or a seed given as 64.0 usually hides a computed ratio passed by mistake)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_dimension(d: object, minimum: int = 2) -> int:
    """The dimension d: an integer >= ``minimum``."""
    return check_count("d", d, minimum)


def check_seed(seed: object) -> int:
    """A seed: an integer >= 0 (what numpy's default_rng accepts)."""
    return check_count("seed", seed, 0)
