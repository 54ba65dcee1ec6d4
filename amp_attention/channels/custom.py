"""User-defined output channel: any Numba-compiled g(h) with M outputs.

The user passes ``g(h: float64[:, :]) -> float64[:]`` (M outputs of the L x L
pre-activation matrix; it must accept any real L x L matrix, since finite
differences perturb single entries) and optionally its Jacobian
``jac(h) -> float64[M, L, L]``, jac[m, a, b] = dg_m/dh_ab with the L^2
entries treated as independent variables.  Loss and noise model are those of
every channel (l = 1/2 ||y - g(h)||^2; see :mod:`.newton`).

Derivatives and their accuracy (double precision, eps ~ 2.2e-16):

* without ``jac``, dg/dh_ab is a central difference with step
  eps^(1/3) max(1, |h_ab|) ~ 6e-6: error ~ 1e-10 relative for O(1) derivatives;
* the Hessian of l in u is always a central difference of the u-gradient,
  step ~ 6e-6 (error ~ 1e-10) with an exact Jacobian and 3e-4 (error ~ 1e-7)
  on top of a finite-difference one;
* so the prox tolerance on ||grad F|| is 1e-12 (scaled as for the built-in
  channels) with ``jac`` and 1e-9 without: a finite-difference gradient is
  not more accurate than that.

Starts of the prox: omega, a data-consistent point and their midpoint.  The
data-consistent point comes from ``start(y, omega) -> float64[:]`` (K
u-coordinates) when given; otherwise it is the point reached by Newton from
omega on the weakly regularised problem l + ||u - omega||^2 / (2 * 100 V).

The kernels are compiled for each channel object, on first use (about 9 s for the prox
chain), serial and without the GIL; the batch drivers split their rows over as many
threads as Numba may use.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import _channel_kernels as ck
from ..checks import check_integer
from .base import as_2d
from .newton import GTOL, MAXIT, NewtonChannel

GTOL_FD = 1e-9


def _is_numba_function(f: object) -> bool:
    return hasattr(f, "py_func") and hasattr(f, "compile")


class CustomChannel(NewtonChannel):
    """A channel with a user-supplied Numba output function g (M outputs).

    Parameters: L >= 1 integer; M >= 1 integer; g, jac (optional) and start
    (optional, keyword only) Numba functions as in the module docstring;
    noise >= 0 (variance Delta); noise_at in {"output", "logit", "logit_goe"}; name (str).
    """

    def __init__(
        self,
        L: int,
        M: int,
        g: Callable[[np.ndarray], np.ndarray],
        jac: Callable[[np.ndarray], np.ndarray] | None = None,
        noise: float = 0.0,
        noise_at: str = "output",
        name: str = "custom",
        *,
        start: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    ):
        super().__init__(L, noise, noise_at)
        self.M = check_integer("M", M, 1)  # type: ignore[misc]
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        for label, f in (("g", g), ("jac", jac), ("start", start)):
            if f is not None and not _is_numba_function(f):
                raise ValueError(f"{label} must be a Numba-compiled function (numba.njit), got {f!r}")
        if g is None:
            raise ValueError("g must be a Numba-compiled function (numba.njit), got None")
        self._check_shapes(g, jac, start)
        self.gtol = GTOL if jac is not None else GTOL_FD
        self._k = ck.make_custom_kernels(g, jac, start, self.L, self.M)
        self._par = np.zeros(2)
        self._wsize = 1

    def _check_shapes(self, g, jac, start) -> None:
        h = np.eye(self.L) * 0.1
        out = np.asarray(g(h))
        if out.shape != (self.M,):
            raise ValueError(f"g must return M = {self.M} outputs, got shape {out.shape}")
        if jac is not None:
            J = np.asarray(jac(h))
            if J.shape != (self.M, self.L, self.L):
                raise ValueError(
                    f"jac must return shape (M, L, L) = ({self.M}, {self.L}, {self.L}), "
                    f"got {J.shape}")
        if start is not None:
            s = np.asarray(start(np.zeros(self.M), np.zeros(self.K)))
            if s.shape != (self.K,):
                raise ValueError(f"start must return K = {self.K} coordinates, got {s.shape}")

    def outputs(self, H: np.ndarray) -> np.ndarray:
        """g applied to every sample, shape (n, M)."""
        return self._k["outputs"](self._check_H(H))

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """l per sample (n,) and G_ab = dl/dh_ab = sum_m (g_m - y_m) jac[m, a, b] (n, L, L)."""
        H = self._check_H(H)
        Y = as_2d("y", y, self.M)
        return self._k["loss_grad_h"](Y, H)

    def jacobian(self, h: np.ndarray) -> np.ndarray:
        """dg/dh (M, L, L) at one h (the user's jac, or the finite-difference one)."""
        h = np.ascontiguousarray(h, dtype=np.float64)
        return self._k["jac"](h)

    def _prox_raw(self, Y, Omega, V, Uprev, warm):
        return self._k["prox_batch"](Y, Omega, V, self._par, self._ka, self._kb, self._tau,
                                     self.gtol, MAXIT, self._wsize, Uprev, warm)

    def _newton_raw(self, Y, Omega, U0, V):
        return self._k["newton_batch"](Y, Omega, U0, V, self._par, self._ka, self._kb, self._tau,
                                       self.gtol, MAXIT, self._wsize)

    def _starts_raw(self, Y, Omega, V):
        return self._k["starts_batch"](Y, Omega, V, self._par, self._ka, self._kb, self._tau,
                                       self._wsize)

    def _lgh_raw(self, y, u):
        # The evaluator itself: already compiled for these types by the prox.
        K = self.K
        grad = np.empty(K)
        hess = np.empty((K, K))
        l = self._k["evalf"](u, y, self._par, self._ka, self._kb, self._tau, 2,
                             np.empty(self._wsize), grad, hess)
        return l, grad, hess

    def __repr__(self) -> str:
        return (f"CustomChannel(L={self.L}, M={self.M}, name={self.name!r}, noise={self.noise}, "
                f"noise_at={self.noise_at!r})")
