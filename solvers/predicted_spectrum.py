"""The predicted spectra of the learned weights (docs/theory.md "Spectra of the learned
weights"): one object, built from the denoiser.

At an SE fixed point, B ~ rho_B = (m_hat * law of S0) boxplus semicircle(q_hat)
(docs/theory.md "Denoiser side and free probability"), and an eigenvalue of Shat is f(x) for x ~
rho_B, where f is the
denoiser's spectral function, non-decreasing and affine on pieces: f(x) = (x - shift)/scale
on each piece (lo, hi) of ``penalty.spectral_pieces(V_hat, cutoff)``, 0 elsewhere
(nuclear norm: one piece above c = max(2 lam, (1 - kappa) quantile of rho_B), shift =
2 lam, scale = V_hat; element-wise: one piece, the whole line, shift = 0, scale = V_hat +
2 lam; symmetric nuclear norm: x < -2 lam and x > 2 lam, shifts -+2 lam, scale V_hat).
Hence

* densities: rho_S(s) = scale rho_B(shift + scale s) on each piece's image, plus an atom
  at 0 of mass 1 - (rank fraction) where f vanishes on a set of positive mass; the
  normalised singular values sigma = sqrt(s) of W (factorised learner) have density
  2 sigma rho_S(sigma^2) over min(p, d) values;
* CDFs, exact because f is non-decreasing: F_S(s) = 1 - M(x*(s)), x*(s) = sup{x : f(x)
  <= s}, with M(x) = int_{y > x} rho_B(y) dy, and over the r = min(p, d) singular values
  of a p x d W, F_W(sigma) = (d F_S(sigma^2) - (d - r))/r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amp_attention.denoisers import Denoiser, denoiser_for
from amp_attention.freeprob import SemicircleFreeConvolution
from amp_attention.spec import Problem
from amp_attention.targets import SpectralMeasure, target_measure

#: points of the density curves (eigenvalues of Shat, singular values of W)
CURVE_POINTS = 600


@dataclass(frozen=True, eq=False)
class PredictedSpectrum:
    """Densities and CDFs of the eigenvalues of Shat and the singular values of W.

    ``law`` is rho_B; ``cutoff`` the smallest kept eigenvalue of B;
    ``rank_fraction`` the SE's fraction of non-zero eigenvalues (its complement is
    the atom at 0).  Curves: ``eigenvalues``/``density_S`` (continuous part,
    normalised over d eigenvalues) and ``atom_at_zero``; ``singular_values``/
    ``density_W`` (over min(p, d) values) and ``atom_at_zero_W``, None for the
    element-wise learner, which has no W.  CDFs: :meth:`cdf_S`, :meth:`cdf_W`.
    """

    law: SemicircleFreeConvolution
    #: the denoiser whose eigenvalue map f gives Shat's eigenvalues
    denoiser: Denoiser
    #: the conjugate V_hat of the fixed point
    V_hat: float
    cutoff: float
    #: learner width p/d (W's shape)
    kappa: float
    rank_fraction: float
    #: points of the tabulated curves
    n_points: int = CURVE_POINTS

    @classmethod
    def from_hats(cls, target: SpectralMeasure, denoiser: Denoiser, kappa: float, m_hat: float,
                  q_hat: float, V_hat: float, rank_fraction: float,
                  cutoff: float | None = None) -> "PredictedSpectrum":
        law = SemicircleFreeConvolution(target.scaled(m_hat), q_hat)
        cut = denoiser.cutoff(law) if cutoff is None else cutoff
        return cls(law, denoiser, V_hat, cut, kappa, rank_fraction)

    @classmethod
    def from_se(cls, problem: Problem, result) -> "PredictedSpectrum":
        """From a converged SE fixed point (an :class:`~amp_attention.solvers.state_evolution.SEResult`)."""
        return cls.from_hats(target_measure(problem.target), denoiser_for(problem.learner),
                             problem.learner.kappa, result.m_hat, result.q_hat, result.V_hat,
                             result.rank_fraction)

    # ------------------------------------------------------------------ densities
    @cached_property
    def pieces(self) -> list[tuple[float, float, float, float]]:
        """(lo, hi, shift, scale): f(x) = (x - shift)/scale for lo <= x < hi, ascending."""
        return list(self.denoiser.spectral_pieces(self.V_hat, self.cutoff))

    @cached_property
    def _curves(self) -> tuple:
        x_all, rho_all = self.law.curve(self.n_points)
        fs, ds = [], []
        den = self.denoiser
        for lo, hi, shift, scale in self.pieces:
            keep = (x_all > lo) & (x_all < hi)
            x, rho = x_all[keep], rho_all[keep]
            # each piece drawn from its support's edge: the cutoff (where f = 0 and the
            # density of Shat need not vanish) is not a node of rho_B's curve, and sigma =
            # sqrt(s) stretches the first nodes above it, so the edges are added and, for W,
            # nodes uniform in sigma
            extra = []
            for ea, eb in self.law.intervals_x:
                a, b = max(float(ea), lo), min(float(eb), hi)
                if b <= a:
                    continue
                extra.extend((a, b))
                if den.factorised:
                    sa, sb = (math.sqrt(max((v - shift) / scale, 0.0)) for v in (a, b))
                    extra.extend(np.clip(shift + scale * np.linspace(sa, sb, self.n_points // 4)[1:-1] ** 2,
                                         a, b))
            if extra:
                xe = np.asarray(extra, dtype=float)
                x = np.concatenate([x, xe])
                rho = np.concatenate([rho, self.law.density(xe)])
                order = np.argsort(x, kind="stable")
                x, rho = x[order], rho[order]
            fs.append((x - shift) / scale)
            ds.append(rho * scale)
        # pieces meet at s = 0 (a two-sided map): the joining segment is the density's jump
        f, dens = np.concatenate(fs), np.concatenate(ds)
        if not den.factorised:
            return f, dens, self.atom_S, None, None, None
        atom = max(0.0, 1.0 - self.rank_fraction)
        # sigma = sqrt(s): rho_sigma = 2 sigma rho_S(sigma^2), over min(p, d) values (a
        # kappa < 1 learner has p = kappa d of them)
        ratio = min(1.0, self.kappa)
        sig = np.sqrt(np.maximum(f, 0.0))
        dens_w = 2.0 * sig * dens / ratio
        atom_w = max(0.0, (ratio - self.rank_fraction) / ratio)
        return f, dens, atom, sig, dens_w, atom_w

    @property
    def eigenvalues(self) -> np.ndarray:
        return self._curves[0]

    @property
    def density_S(self) -> np.ndarray:
        return self._curves[1]

    @property
    def atom_at_zero(self) -> float:
        return self._curves[2]

    @property
    def singular_values(self) -> np.ndarray | None:
        return self._curves[3]

    @property
    def density_W(self) -> np.ndarray | None:
        return self._curves[4]

    @property
    def atom_at_zero_W(self) -> float | None:
        return self._curves[5]

    # ----------------------------------------------------------------- components
    @cached_property
    def bulk_components(self) -> tuple[np.ndarray, np.ndarray]:
        """The continuous part of Shat's eigenvalue law, piece by piece: ``(edges, masses)``
        with ``edges`` a (k, 2) array of [lo, hi] eigenvalues of Shat (ascending) and
        ``masses`` the fraction of the d eigenvalues in each piece.  They are the support
        intervals of rho_B above the cutoff, mapped by the spectral function f (increasing,
        so pieces stay apart); the masses are rho_B's over the same intervals.  Two pieces
        or more: the bulk has split (the paper's Figure 1: the directions of S0's null
        space separate from its range, and the upper piece's mass tends to the target's
        rank fraction kappa0)."""
        edges, masses = [], []
        for plo, phi, shift, scale in self.pieces:
            for lo, hi in self.law.intervals_x:
                a, b = max(float(lo), plo), min(float(hi), phi)
                if b <= a:
                    continue
                edges.append([(a - shift) / scale, (b - shift) / scale])
                masses.append(self.law.mass_above(a) - self.law.mass_above(b))
        return np.array(edges, dtype=float).reshape(-1, 2), np.array(masses, dtype=float)

    # ----------------------------------------------------------------------- CDFs
    def _mass_above(self, x: np.ndarray) -> np.ndarray:
        return np.array([1.0 if v == -math.inf else 0.0 if v == math.inf else
                         self.law.mass_above(float(v)) for v in np.ravel(x)]).reshape(np.shape(x))

    def _x_star(self, s: float) -> float:
        """sup{x : f(x) <= s} for the non-decreasing piecewise map f (0 between pieces)."""
        for lo, hi, shift, scale in reversed(self.pieces):
            xs = shift + scale * s
            if xs >= lo:
                return min(xs, hi)
            if s >= 0.0:  # f = 0 <= s on the gap below this piece
                return lo
        return -math.inf

    def _x_zero_left(self) -> float:
        """inf{x : f(x) >= 0}: where F_S(0-) = 1 - M(.) is read."""
        prev = -math.inf
        for lo, hi, shift, scale in self.pieces:
            if lo > prev:  # a gap where f = 0
                return prev
            if hi > shift:  # the piece reaches f > 0
                return max(lo, shift)
            prev = hi
        return prev

    @property
    def atom_S(self) -> float:
        """F_S(0) - F_S(0-): the atom at 0 of the CDF, M(inf{f >= 0}) - M(sup{f <= 0}) (equal
        to ``atom_at_zero`` up to the quadrature error of the rank fraction)."""
        return max(0.0, float(self._mass_above(np.array(self._x_zero_left()))
                              - self._mass_above(np.array(self._x_star(0.0)))))

    def cdf_S(self, s, *, left: bool = False) -> np.ndarray:
        """F_S(s) = P(eigenvalue <= s); ``left=True`` gives the left limit P(eigenvalue < s)
        (the two differ at s = 0 only, by the atom)."""
        s = np.asarray(s, dtype=float)
        x = np.array([self._x_zero_left() if (left and v == 0.0) else self._x_star(float(v))
                      for v in np.ravel(s)]).reshape(s.shape)
        return 1.0 - self._mass_above(x)

    def cdf_W(self, sigma, d: int, p: int, *, left: bool = False) -> np.ndarray:
        """F_W over the r = min(p, d) normalised singular values of a p x d W."""
        if not self.denoiser.factorised:
            raise ValueError("the element-wise learner has no W")
        sigma = np.asarray(sigma, dtype=float)
        r = min(p, d)
        F = (d * self.cdf_S(np.where(sigma < 0, -1.0, sigma * sigma), left=left) - (d - r)) / r
        return np.clip(F, 0.0, 1.0)

