"""Target spectral laws (docs/theory.md "Data model"): Marchenko-Pastur (Wishart), discrete lists.

A :class:`SpectralMeasure` is a probability measure on [0, inf) given by its
Stieltjes transform G(w) = int dnu(s) / (w - s) and the derivatives G', G''
(for Im w >= 0), and by its *singular components*: the sorted closed intervals
(atoms are degenerate intervals) on which the measure lives.  Between them
phi0(u) = int dnu(s)/(u - s)^2 = -G'(u) is finite and convex, and it diverges
at their ends: this is what the free-convolution code needs to locate the
support of nu boxplus semicircle (see :mod:`amp_attention.freeprob`).

* :class:`MarchenkoPasturMeasure` -- eigenvalues ``scale * mu`` with mu
  Marchenko-Pastur of ratio ``c`` (mean 1, atom 1 - 1/c at 0 when c > 1).
  The Wishart target S0 = W0^T W0 / sqrt(p0 d) is c = 1/kappa0,
  scale = sqrt(kappa0).
* :class:`DiscreteMeasure` -- finitely many atoms (power-law targets at finite
  d, user eigenvalue lists, tabulated densities after quadrature).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from functools import cached_property

import numpy as np



class SpectralMeasure(ABC):
    """A compactly supported probability measure on [0, inf) (a target spectrum)."""

    def stieltjes(self, w: np.ndarray) -> np.ndarray:
        """G(w) = int dnu(s) / (w - s) for Im w >= 0 (w off the support)."""
        return self._stieltjes(w, False)[0]

    def stieltjes_derivatives(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(G, G', G'') at w (infinite at a square-root edge of the support)."""
        return self._stieltjes(w, True)

    def _stieltjes(self, w, derivatives: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        from ._subordination_kernels import stieltjes_array

        w = np.asarray(w, dtype=complex)
        kind, c, scale, points, weights = self.kernel_args()[:5]
        out = stieltjes_array(kind, np.ascontiguousarray(w.ravel()), c, scale, points, weights,
                              derivatives)
        return tuple(o.reshape(w.shape) for o in out)

    @abstractmethod
    def singular_components(self) -> np.ndarray:
        """Sorted (k, 2) array of closed intervals carrying the measure (atoms: lo == hi)."""

    @abstractmethod
    def moment(self, k: int) -> float:
        """int s^k dnu(s) for k = 1, 2."""

    def smallest_positive(self) -> float | None:
        """The infimum of the positive part of the support, where known in closed form
        (None otherwise); with :meth:`positive_mass` it decides whether a limit that
        needs sigma << every non-zero eigenvalue is resolved."""
        return None

    def positive_mass(self) -> float | None:
        """The mass of the positive eigenvalues (the rank fraction of S0), or None."""
        return None

    @abstractmethod
    def scaled(self, a: float) -> "SpectralMeasure":
        """The law of a*s for s ~ nu (a > 0)."""

    @abstractmethod
    def kernel_args(self) -> tuple:
        """The measure as the compiled kernels of :mod:`._subordination_kernels` take it:
        (kind, c, scale, points, weights), then its singular components as
        (lo, hi, mass) arrays (mass 0 marks a continuous component)."""


class MarchenkoPasturMeasure(SpectralMeasure):
    """Law of ``scale * mu``, mu Marchenko-Pastur with ratio ``c`` and mean 1.

    G_mu solves c z G^2 - (z - 1 + c) G + 1 = 0; the root with G ~ 1/z is
    G_mu = 2 / ((z - 1 + c) + sqrt(z - l_-) sqrt(z - l_+)), l_pm = (1 pm sqrt c)^2,
    a form that is stable at z = 0 and carries the atom 1 - 1/c when c > 1
    (evaluated in :func:`._subordination_kernels.g_derivs`).
    """

    def __init__(self, c: float, scale: float = 1.0):
        if not (c > 0 and math.isfinite(c)):
            raise ValueError(f"Marchenko-Pastur ratio c must be in (0, inf), got {c!r}")
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be in (0, inf), got {scale!r}")
        self.c = float(c)
        self.scale = float(scale)
        self.lo = (1.0 - math.sqrt(self.c)) ** 2
        self.hi = (1.0 + math.sqrt(self.c)) ** 2

    def __repr__(self) -> str:
        return f"MarchenkoPasturMeasure(c={self.c!r}, scale={self.scale!r})"

    def singular_components(self) -> np.ndarray:
        a = self.scale
        comps = []
        if self.c > 1.0:
            comps.append((0.0, 0.0))
        comps.append((a * self.lo, a * self.hi))
        return np.array(comps, dtype=float)

    def moment(self, k: int) -> float:
        if k == 1:
            return self.scale
        if k == 2:
            return self.scale**2 * (1.0 + self.c)
        raise ValueError("only moments k = 1, 2 are available")

    def kernel_args(self) -> tuple:
        return self._kernel_args

    @cached_property
    def _kernel_args(self) -> tuple:
        from ._subordination_kernels import MP

        comps = self.singular_components()
        mass = np.zeros(comps.shape[0])
        if self.c > 1.0:
            mass[0] = self.atom_at_zero
        empty = np.zeros(0)
        return (MP, self.c, self.scale, empty, empty,
                np.ascontiguousarray(comps[:, 0]), np.ascontiguousarray(comps[:, 1]), mass)

    def scaled(self, a: float) -> "MarchenkoPasturMeasure":
        return MarchenkoPasturMeasure(self.c, self.scale * a)

    def density(self, s: np.ndarray) -> np.ndarray:
        """Absolutely continuous part of the density (the atom is not included)."""
        s = np.asarray(s, dtype=float) / self.scale
        inside = (s > self.lo) & (s < self.hi)
        val = np.sqrt(np.clip((self.hi - s) * (s - self.lo), 0.0, None))
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(inside, val / (2.0 * math.pi * self.c * s), 0.0)
        return rho / self.scale

    @property
    def atom_at_zero(self) -> float:
        return max(0.0, 1.0 - 1.0 / self.c)

    def positive_mass(self) -> float:
        """min(kappa0, 1): the rank fraction of the Wishart target."""
        return 1.0 - self.atom_at_zero

    def quantiles(self, d: int) -> np.ndarray:
        """The d quantiles at levels (i + 1/2)/d, ascending (a deterministic spectrum
        with exactly this limiting law; zeros for the atom).

        The CDF of the continuous part is integrated in the angle phi with
        s = mid - half cos(phi), where the density times ds is smooth
        (half^2 sin^2 phi / (2 pi c s) dphi).
        """
        levels = (np.arange(d) + 0.5) / d
        mid, half = 0.5 * (self.lo + self.hi), 0.5 * (self.hi - self.lo)
        phi = np.linspace(0.0, math.pi, 40001)
        s = mid - half * np.cos(phi)
        with np.errstate(divide="ignore", invalid="ignore"):
            dens = np.where(s > 0, half**2 * np.sin(phi) ** 2 / (2.0 * math.pi * self.c * s), 0.0)
        cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(phi))])
        atom = self.atom_at_zero
        cdf = atom + (1.0 - atom) * cdf / cdf[-1]
        out = np.interp(levels, cdf, s)
        out[levels <= atom] = 0.0
        return self.scale * out


class DiscreteMeasure(SpectralMeasure):
    """sum_k w_k delta(s - s_k): finitely many atoms (weights normalised to 1)."""

    def __init__(self, points: np.ndarray, weights: np.ndarray | None = None):
        pts = np.asarray(points, dtype=float).ravel()
        if pts.size == 0 or not np.all(np.isfinite(pts)):
            raise ValueError("points must be a non-empty finite array")
        w = np.full(pts.size, 1.0 / pts.size) if weights is None else np.asarray(weights, float).ravel()
        if w.shape != pts.shape or np.any(w < 0) or not np.all(np.isfinite(w)) or w.sum() <= 0:
            raise ValueError("weights must be finite, >= 0, with the shape of points")
        # Merge coincident atoms: the support code needs strictly separated atoms.
        order = np.argsort(pts, kind="stable")
        pts, w = pts[order], w[order]
        uniq, start = np.unique(pts, return_index=True)
        w = np.add.reduceat(w, start)
        keep = w > 0
        self.points = uniq[keep]
        self.weights = w[keep] / np.sum(w[keep])

    def __repr__(self) -> str:
        return f"DiscreteMeasure({self.points.size} atoms)"

    def singular_components(self) -> np.ndarray:
        return np.stack([self.points, self.points], axis=1)

    def moment(self, k: int) -> float:
        return float(np.sum(self.weights * self.points**k))

    def quantiles(self, d: int) -> np.ndarray:
        """The d quantiles at levels (i + 1/2)/d, ascending (d equal atoms come back exactly)."""
        cdf = np.cumsum(self.weights)
        levels = (np.arange(d) + 0.5) / d
        idx = np.minimum(np.searchsorted(cdf / cdf[-1], levels, side="left"), self.points.size - 1)
        return self.points[idx]

    def kernel_args(self) -> tuple:
        from ._subordination_kernels import DISCRETE

        return (DISCRETE, 0.0, 1.0, self.points, self.weights, self.points, self.points,
                self.weights)

    def smallest_positive(self) -> float | None:
        pos = self.points[self.points > 0]
        return float(pos[0]) if pos.size else None

    def positive_mass(self) -> float:
        return float(np.sum(self.weights[self.points > 0]))

    def scaled(self, a: float) -> "DiscreteMeasure":
        return DiscreteMeasure(self.points * a, self.weights)


def target_measure(target) -> SpectralMeasure:
    """Limiting (or deterministic-equivalent) eigenvalue law of the target S0
    (:meth:`amp_attention.spec.Target.measure`)."""
    return target.measure()


def haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-distributed d x d orthogonal matrix.

    QR of a Gaussian matrix is Haar only after fixing the signs of R's
    diagonal (LAPACK's convention would otherwise bias the distribution).
    """
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    sign = np.sign(np.diag(R))
    sign[sign == 0] = 1.0
    return Q * sign


def rotate(s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """O diag(s) O^T with O Haar (symmetrised)."""
    O = haar_orthogonal(s.size, rng)
    S0 = (O * s) @ O.T
    return 0.5 * (S0 + S0.T)


def quantile_eigenvalues(positions: np.ndarray, weights: np.ndarray, d: int) -> np.ndarray:
    """The d quantiles at levels (i + 1/2)/d of the discrete measure sum_j w_j delta_{x_j}.

    For d equal atoms of weight 1/d this returns the atoms themselves (sorted):
    the level (i + 1/2)/d sits strictly inside the i-th step of the CDF, which
    keeps the result exact despite rounding in the cumulative sum.
    """
    order = np.argsort(positions, kind="stable")
    x = np.asarray(positions, dtype=float)[order]
    cdf = np.cumsum(np.asarray(weights, dtype=float)[order])
    cdf /= cdf[-1]
    levels = (np.arange(d) + 0.5) / d
    idx = np.minimum(np.searchsorted(cdf, levels, side="left"), x.size - 1)
    return x[idx]


def with_spikes(bulk: np.ndarray, spikes) -> np.ndarray:
    """The bulk eigenvalues, sorted, with the top len(spikes) replaced by the sorted spikes."""
    d = bulk.size
    if d <= len(spikes):
        raise ValueError(f"d must exceed the number of spikes ({len(spikes)}), got {d}")
    s = np.sort(bulk)
    s[d - len(spikes):] = np.sort(np.asarray(spikes))
    return s
