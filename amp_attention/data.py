"""Finite-d synthetic data of the attention-indexed model (docs/theory.md "Data model").

* :func:`sample_target_matrix` draws the d x d PSD target S0 of a target spec;
* :func:`sample_tokens` draws the (n, L, d) tensor of i.i.d. N(0, 1) tokens;
* :func:`generate_dataset` draws S0, the tokens and the labels of a
  :class:`~amp_attention.spec.Problem` at dimension d with n = round(alpha d^2).

Only the linear channel is implemented here: y_mu = upper_triangle(h_mu(S0)) +
sqrt(Delta) xi_mu, xi_mu ~ N(0, I_K), in the row-major a <= b order of
:mod:`amp_attention.operators`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .channels.base import DATA_MEMBERS, Channel, check_channel
from .checks import check_dimension, check_seed
from .operators import preactivations
from .spec import (CustomTarget, PowerLawTarget, Problem, SpikedTarget, Target, WishartTarget,
                   check_problem)


def n_samples(alpha: float, d: int) -> int:
    """n = max(1, round(alpha d^2))."""
    return max(1, int(round(alpha * d * d)))


def haar_orthogonal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-distributed d x d orthogonal matrix.

    QR of a Gaussian matrix is Haar only after fixing the signs of R's
    diagonal (LAPACK's convention would otherwise bias the distribution).
    """
    Q, R = np.linalg.qr(rng.standard_normal((d, d)))
    sign = np.sign(np.diag(R))
    sign[sign == 0] = 1.0
    return Q * sign


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


def _rotate(s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    O = haar_orthogonal(s.size, rng)
    S0 = (O * s) @ O.T
    return 0.5 * (S0 + S0.T)


TARGET_SPECTRA = ("sampled", "quantile")


def target_eigenvalues(target: Target, d: int) -> np.ndarray:
    """The d eigenvalues of the deterministic finite-d target, in the order
    :func:`sample_target_matrix` rotates them: the quantiles of a Wishart law
    (with its atom), the spiked target's bulk quantiles with the top ones replaced
    by the spikes, the power law re-evaluated at dimension d with p0 scaled
    proportionally (decreasing), or a custom list's quantiles.  For the power law
    and custom lists these are the target's eigenvalues whatever ``spectrum``."""
    from .targets import target_measure

    d = check_dimension(d, minimum=1)
    if isinstance(target, WishartTarget):
        return target_measure(target).quantiles(d)
    if isinstance(target, SpikedTarget):
        return _with_spikes(target_measure(target).quantiles(d), target.spikes)
    if isinstance(target, PowerLawTarget):
        p0 = max(1, int(round(target.p0 * d / target.d)))
        return dataclasses.replace(target, d=d, p0=min(p0, d)).eigenvalues()
    if isinstance(target, CustomTarget):
        positions, weights = target.atoms()
        return quantile_eigenvalues(positions, weights, d)
    raise ValueError(f"target must be a WishartTarget, PowerLawTarget, CustomTarget or SpikedTarget, "
                     f"got {type(target).__name__}")


def _with_spikes(bulk: np.ndarray, spikes) -> np.ndarray:
    """The bulk eigenvalues, sorted, with the top len(spikes) replaced by the sorted spikes."""
    d = bulk.size
    if d <= len(spikes):
        raise ValueError(f"d must exceed the number of spikes ({len(spikes)}), got {d}")
    s = np.sort(bulk)
    s[d - len(spikes):] = np.sort(np.asarray(spikes))
    return s


def sample_target_matrix(
    target: Target, d: int, rng: np.random.Generator, spectrum: str = "sampled"
) -> np.ndarray:
    """Draw the symmetric PSD target S0 (d x d) of docs/theory.md "Data model".

    * Wishart: S0 = W0^T W0 / sqrt(p0 d), W0 in R^{p0 x d} i.i.d. N(0,1),
      p0 = max(1, round(kappa0 d)).
    * Power law: S0 = O diag(s) O^T, O Haar, s the spec's eigenvalues
      re-evaluated at dimension d with p0 scaled proportionally.
    * Spiked: the Wishart bulk's d eigenvalues (sampled, or quantiles) with the
      top len(spikes) replaced by the spikes, rotated by a Haar O.
    * Custom: S0 = O diag(s) O^T, s the (i + 1/2)/d quantiles of the target's
      discrete measure (an eigenvalue list of length d is reproduced exactly).

    ``spectrum="quantile"`` replaces the random Wishart spectrum by the d
    quantiles of its limiting law (Marchenko-Pastur, with the atom), rotated by
    a Haar matrix: the same large-d limit without the O(1/d) seed-to-seed
    fluctuation of Tr(S0^2)/d, which dominates the variance of the matrix MSE in
    theory-vs-simulation comparisons.  For the other targets it changes nothing.
    """
    d = check_dimension(d, minimum=1)
    if spectrum not in TARGET_SPECTRA:
        raise ValueError(f"target_spectrum must be one of {', '.join(TARGET_SPECTRA)}; got {spectrum!r}")
    if isinstance(target, WishartTarget) and spectrum == "sampled":
        p0 = max(1, int(round(target.kappa0 * d)))
        W0 = rng.standard_normal((p0, d))
        S0 = (W0.T @ W0) / math.sqrt(p0 * d)
        return 0.5 * (S0 + S0.T)
    if isinstance(target, SpikedTarget) and spectrum == "sampled":
        p0 = max(1, int(round(target.kappa0 * d)))
        W0 = rng.standard_normal((p0, d))
        bulk = np.linalg.eigvalsh((W0.T @ W0) / math.sqrt(p0 * d))
        return _rotate(_with_spikes(bulk, target.spikes), rng)
    if isinstance(target, (WishartTarget, SpikedTarget, PowerLawTarget, CustomTarget)):
        return _rotate(target_eigenvalues(target, d), rng)
    raise ValueError(f"target must be a WishartTarget, PowerLawTarget, CustomTarget or SpikedTarget, "
                     f"got {target!r}")


def sample_tokens(n: int, L: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """Tokens of shape (n, L, d), i.i.d. N(0, 1), float64."""
    return rng.standard_normal((n, L, d), dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Dataset:
    """One finite-d draw: tokens X (n, L, d), labels y (n, M), target S0 (d, d)."""

    X: np.ndarray
    y: np.ndarray
    S0: np.ndarray
    d: int
    n: int
    seed: int

    @property
    def L(self) -> int:
        return int(self.X.shape[1])


def generate_dataset(problem: Problem, d: int, seed: int, target_spectrum: str = "sampled", *,
                     channel: "Channel | None" = None) -> Dataset:
    """Draw S0, then X, then the labels y = channel.sample_labels(h(S0), rng), all from
    default_rng(seed); ``y`` has shape (n, M).

    The channel is ``problem.task``'s (``channel`` overrides it with an object that
    has the data members of the contract).  S0 and X do not depend on the channel,
    and the label noise is drawn even when Delta = 0, so that one seed gives the
    same S0, X and noise for every Delta (linear channel: y_mu,ab = h_ab(S0; x_mu)
    + sqrt(Delta) xi_mu,ab for a <= b, xi i.i.d. N(0, 1)).
    """
    check_problem(problem)
    d = check_dimension(d)
    seed = check_seed(seed)
    task = problem.task
    channel = (task.channel_object if channel is None
               else check_channel(channel, task.L, DATA_MEMBERS))
    rng = np.random.default_rng(seed)
    n = n_samples(problem.alpha, d)
    S0 = sample_target_matrix(problem.target, d, rng, target_spectrum)
    X = sample_tokens(n, task.L, d, rng)
    y = np.asarray(channel.sample_labels(preactivations(X, S0), rng), dtype=float)
    if y.shape != (n, int(channel.M)):
        raise ValueError(f"channel.sample_labels returned shape {y.shape}, expected ({n}, {channel.M})")
    return Dataset(X=X, y=y, S0=S0, d=d, n=n, seed=seed)
