"""Weighting schemes for an ensemble of heads ordered by quality (best first).

Rank k = 0 is the best head (lowest validation MSE), k = H - 1 the worst.

    uniform     w_k = 1/H
    geometric   w_k = r^k (1 - r) / (1 - r^H),            0 < r < 1 (default r = 1/2)
    fibonacci   w_k = F_{H-k} / (F_{H+2} - 1),            F_1 = F_2 = 1, F_{j+1} = F_j + F_{j-1}

(sum_{j=1}^H F_j = F_{H+2} - 1).  All three sum to 1 and are non-increasing in
k; geometric and Fibonacci put the largest weight on the best head (the two
worst heads tie under Fibonacci since F_1 = F_2).
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_integer, check_real

WEIGHTINGS = ("uniform", "geometric", "fibonacci")
DEFAULT_RATIO = 0.5


def uniform_weights(H: int) -> np.ndarray:
    """w_k = 1/H."""
    H = check_integer("H", H, 1)
    return np.full(H, 1.0 / H)


def geometric_weights(H: int, ratio: float = DEFAULT_RATIO) -> np.ndarray:
    """w_k proportional to r^k, normalised; r = ``ratio`` in (0, 1)."""
    H = check_integer("H", H, 1)
    r = check_real("ratio", ratio)
    if not (0.0 < r < 1.0):
        raise ValueError(f"ratio must lie in (0, 1) (allowed range (0, 1)), got {ratio!r}")
    w = r ** np.arange(H, dtype=float)
    return w / w.sum()


def fibonacci_weights(H: int) -> np.ndarray:
    """w_k proportional to F_{H-k} (F_1 = F_2 = 1), normalised: best head gets F_H."""
    H = check_integer("H", H, 1)
    fib = [1.0, 1.0]
    while len(fib) < H:
        fib.append(fib[-1] + fib[-2])
    w = np.array(fib[:H][::-1])  # rank 0 -> F_H, rank H-1 -> F_1
    if not math.isfinite(w.sum()):
        raise ValueError(f"H must be an integer <= 1400 for Fibonacci weights, got {H}")
    return w / w.sum()


def head_weights(scheme: str, H: int, ratio: float = DEFAULT_RATIO) -> np.ndarray:
    """Weights of ``scheme`` (one of WEIGHTINGS) for H heads in rank order."""
    if scheme == "uniform":
        return uniform_weights(H)
    if scheme == "geometric":
        return geometric_weights(H, ratio)
    if scheme == "fibonacci":
        return fibonacci_weights(H)
    raise ValueError(f"scheme must be one of {', '.join(WEIGHTINGS)}; got {scheme!r}")


def rank_heads(validation_mse: object) -> np.ndarray:
    """Per-draw head order, best first: argsort of the validation MSE, shape (R, H).

    A stable sort breaks ties by head index, so the order is deterministic.
    """
    v = np.asarray(validation_mse, dtype=float)
    if v.ndim != 2 or not np.all(np.isfinite(v)):
        raise ValueError(f"validation_mse must be a finite 2-d array (R, H), got shape {v.shape}")
    return np.argsort(v, axis=1, kind="stable")
