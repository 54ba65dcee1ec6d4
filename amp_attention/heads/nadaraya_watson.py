"""A softmax attention head as a Nadaraya-Watson (NW) kernel smoother.

Head h with (tied) query/key matrix W_h in R^{d_model x d_k} maps a query x and
keys x_1..x_n with values y_1..y_n to

    f_h(x) = sum_i a_i(x) y_i,   a_i(x) = exp(l_i(x)) / sum_j exp(l_j(x)),

with logits

    softmax kernel   l_i(x) = <W_h^T x, W_h^T x_i> / tau,          tau = sqrt(d_k) by default,
    gaussian kernel  l_i(x) = -||W_h^T (x - x_i)||^2 / (2 b^2),   b^2 = sqrt(d_k) by default.

The first is the attention head ("exponential kernel, bandwidth 1/sqrt(d_k)");
the second is the classical NW smoother in the projected space.  Expanding the
square, l_i^gauss = (<q, k_i> - ||k_i||^2/2)/b^2 - ||q||^2/(2 b^2), and the last
term cancels in the normalisation: with tau = b^2 the two kernels give the same
weights exactly when the projected keys k_i = W_h^T x_i all have the same norm.

Everything is computed through BLAS on blocks of test points with a stable
log-sum-exp (subtract the row maximum before exponentiating), so memory stays
O(batch * n); no (m, n, H) tensor is ever built.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

KERNELS = ("softmax", "gaussian")

#: logits per block of test points: rows * n stays below this (about 2 MB of float64)
BLOCK_ELEMENTS = 1 << 18


#: allowed range of tau, tau_factor and bandwidth^2: the logits divided by the scale stay
#: finite (logits are O(d_model); a scale of 5e-324 turns them into inf - inf = nan)
SCALE_RANGE = (1e-100, 1e100)


def _opt_positive(name: str, value: object, squared: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number > 0 or None, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number > 0 or None, got {value!r}") from None
    lo, hi = (math.sqrt(b) for b in SCALE_RANGE) if squared else SCALE_RANGE
    if not (math.isfinite(x) and lo <= x <= hi):
        raise ValueError(f"{name} must lie in [{lo:g}, {hi:g}], got {value!r}")
    return x


@dataclass(frozen=True)
class NWKernel:
    """Kernel of an NW head: ``kind`` in {"softmax", "gaussian"}.

    ``tau`` is the softmax temperature (None: c sqrt(d_k)); ``bandwidth`` is the
    Gaussian b (None: b^2 = c sqrt(d_k), matching the default tau).  Giving the
    parameter of the other kind is an error (it would be ignored).  ``tau_factor`` = c (default 1)
    sharpens (c < 1) or flattens (c > 1) the default while keeping its
    sqrt(d_k) dependence, which is what an allocation sweep over d_k needs;
    it cannot be combined with an explicit tau or bandwidth.
    """

    kind: str = "softmax"
    tau: float | None = None
    bandwidth: float | None = None
    tau_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KERNELS:
            raise ValueError(f"kind must be one of {', '.join(KERNELS)}; got {self.kind!r}")
        object.__setattr__(self, "tau", _opt_positive("tau", self.tau))
        object.__setattr__(self, "bandwidth", _opt_positive("bandwidth", self.bandwidth,
                                                            squared=True))
        factor = _opt_positive("tau_factor", self.tau_factor)
        if factor is None:
            raise ValueError(f"tau_factor must lie in [{SCALE_RANGE[0]:g}, {SCALE_RANGE[1]:g}], "
                             "got None")
        object.__setattr__(self, "tau_factor", factor)
        if self.kind == "softmax" and self.bandwidth is not None:
            raise ValueError("bandwidth applies only to kind 'gaussian' (the softmax kernel "
                             "uses tau)")
        if self.kind == "gaussian" and self.tau is not None:
            raise ValueError("tau applies only to kind 'softmax' (the gaussian kernel uses "
                             "bandwidth)")
        explicit = self.tau if self.kind == "softmax" else self.bandwidth
        if explicit is not None and factor != 1.0:
            raise ValueError("tau_factor must be 1 when an explicit tau (softmax) or bandwidth "
                             "(gaussian) is given; give one or the other")

    def scale(self, d_k: int) -> float:
        """The logit divisor: tau for softmax, b^2 for gaussian (default c sqrt(d_k) for both)."""
        explicit = self.tau if self.kind == "softmax" else self.bandwidth
        if explicit is None:
            return self.tau_factor * math.sqrt(d_k)
        return explicit if self.kind == "softmax" else explicit ** 2

    def to_dict(self) -> dict:
        return asdict(self)


def _block_rows(n: int, batch_size: int | None) -> int:
    if batch_size is not None:
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1 or None, got {batch_size!r}")
        return int(batch_size)
    return max(1, BLOCK_ELEMENTS // max(n, 1))


def _smooth(Q: np.ndarray, K: np.ndarray, Y: np.ndarray, kind: str, scale: float,
            rows: int) -> np.ndarray:
    """NW predictions for projected queries Q (m, k), keys K (n, k), values Y (n, c).

    The Gaussian kernel's -||q||^2/(2 b^2) is dropped: it is constant along a
    row and cancels in the softmax.
    """
    m = Q.shape[0]
    out = np.empty((m, Y.shape[1]))
    shift = -0.5 * np.einsum("ij,ij->i", K, K) if kind == "gaussian" else None
    for start in range(0, m, rows):
        L = Q[start:start + rows] @ K.T  # (rows, n), one GEMM
        if shift is not None:
            L += shift
        L /= scale
        L -= L.max(axis=1, keepdims=True)  # log-sum-exp: the largest weight becomes exp(0)
        np.exp(L, out=L)
        out[start:start + rows] = (L @ Y) / L.sum(axis=1, keepdims=True)
    return out


def _check_inputs(X_train: object, y_train: object, X_test: object) -> tuple[np.ndarray, ...]:
    Xtr = np.asarray(X_train, dtype=float)
    Xte = np.asarray(X_test, dtype=float)
    y = np.asarray(y_train, dtype=float)
    if Xtr.ndim != 2 or Xtr.shape[0] < 1:
        raise ValueError(f"X_train must be a 2-d array (n, d_model) with n >= 1, got shape {Xtr.shape}")
    if Xte.ndim != 2 or Xte.shape[1] != Xtr.shape[1]:
        raise ValueError(f"X_test must be a 2-d array (m, d_model) with d_model = {Xtr.shape[1]}, "
                         f"got shape {Xte.shape}")
    if y.ndim != 1 or y.shape[0] != Xtr.shape[0]:
        raise ValueError(f"y_train must be a 1-d array of length n = {Xtr.shape[0]}, got shape {y.shape}")
    for name, a in (("X_train", Xtr), ("y_train", y), ("X_test", Xte)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} must contain only finite numbers")
    return Xtr, y, Xte


def nw_weights(X_train: object, X_test: object, W_h: object,
               kernel: NWKernel = NWKernel()) -> np.ndarray:
    """The full (m, n) weight matrix a_i(x_t) of one head (small problems, tests, plots)."""
    Xtr, _, Xte = _check_inputs(X_train, np.zeros(np.shape(X_train)[0]), X_test)
    W = _check_head(W_h, Xtr.shape[1])
    n = Xtr.shape[0]
    # Smoothing the identity matrix returns the weights themselves.
    return _smooth(Xte @ W, Xtr @ W, np.eye(n), kernel.kind, kernel.scale(W.shape[1]),
                   _block_rows(n, None))


def _check_head(W_h: object, d_model: int) -> np.ndarray:
    W = np.asarray(W_h, dtype=float)
    if W.ndim != 2 or W.shape[0] != d_model or W.shape[1] < 1:
        raise ValueError(f"W_h must be a 2-d array (d_model, d_k) with d_model = {d_model} and "
                         f"d_k >= 1, got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("W_h must contain only finite numbers")
    return W


def nw_predict(X_train: object, y_train: object, X_test: object, W_h: object,
               kernel: NWKernel = NWKernel(), *, batch_size: int | None = None) -> np.ndarray:
    """f_h(x_t) = sum_i softmax_i(l_i(x_t)) y_i for every test point, shape (m,).

    ``X_train`` (n, d_model), ``y_train`` (n,), ``X_test`` (m, d_model),
    ``W_h`` (d_model, d_k); logits as in the module docstring.  ``batch_size``
    test points are processed at a time (default: about 2^18 / n).
    """
    Xtr, y, Xte = _check_inputs(X_train, y_train, X_test)
    W = _check_head(W_h, Xtr.shape[1])
    rows = _block_rows(Xtr.shape[0], batch_size)
    return _smooth(Xte @ W, Xtr @ W, y[:, None], kernel.kind, kernel.scale(W.shape[1]), rows)[:, 0]


def nw_predict_heads(X_train: object, y_train: object, X_test: object, heads: np.ndarray,
                     kernel: NWKernel = NWKernel(), *, batch_size: int | None = None,
                     test_projection: np.ndarray | None = None) -> np.ndarray:
    """Predictions of every head on shared data, shape (H, m).

    ``heads`` is (H, d_model, d_k).  The projections of all heads are one GEMM
    with the concatenated matrix [W_1 ... W_H]; ``test_projection`` (m, H d_k)
    may be passed to reuse X_test @ [W_1 ... W_H] across training draws.
    """
    Xtr, y, Xte = _check_inputs(X_train, y_train, X_test)
    Ws = np.asarray(heads, dtype=float)
    if Ws.ndim != 3 or Ws.shape[1] != Xtr.shape[1]:
        raise ValueError(f"heads must be a 3-d array (H, d_model, d_k) with d_model = "
                         f"{Xtr.shape[1]}, got shape {Ws.shape}")
    H, d_model, d_k = Ws.shape
    Wcat = Ws.transpose(1, 0, 2).reshape(d_model, H * d_k)
    K = Xtr @ Wcat
    Q = Xte @ Wcat if test_projection is None else test_projection
    rows = _block_rows(Xtr.shape[0], batch_size)
    scale = kernel.scale(d_k)
    out = np.empty((H, Xte.shape[0]))
    for h in range(H):
        sl = slice(h * d_k, (h + 1) * d_k)
        out[h] = _smooth(np.ascontiguousarray(Q[:, sl]), np.ascontiguousarray(K[:, sl]),
                         y[:, None], kernel.kind, scale, rows)[:, 0]
    return out
