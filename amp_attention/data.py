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

from dataclasses import dataclass

import numpy as np

from .channels.base import DATA_MEMBERS, Channel, check_channel
from .checks import InstanceOf, check_dimension, check_seed
from .operators import preactivations
from .spec import Problem, Target, check_problem
from .targets import haar_orthogonal, quantile_eigenvalues

__all__ = ["Dataset", "TARGET_SPECTRA", "generate_dataset", "haar_orthogonal", "n_samples",
           "quantile_eigenvalues", "sample_target_matrix", "sample_tokens", "target_eigenvalues"]


def n_samples(alpha: float, d: int) -> int:
    """n = max(1, round(alpha d^2))."""
    return max(1, int(round(alpha * d * d)))


TARGET_SPECTRA = ("sampled", "quantile")


def target_eigenvalues(target: Target, d: int) -> np.ndarray:
    """The d eigenvalues of the deterministic finite-d target, in the order
    :func:`sample_target_matrix` rotates them: the quantiles of a Wishart law
    (with its atom), the spiked target's bulk quantiles with the top ones replaced
    by the spikes, the power law re-evaluated at dimension d with p0 scaled
    proportionally (decreasing), or a custom list's quantiles.  For the power law
    and custom lists these are the target's eigenvalues whatever ``spectrum``."""
    d = check_dimension(d, minimum=1)
    return target.eigenvalues_at(d)


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
    InstanceOf((Target,), "a Target").check("target", target)
    return target.sample(d, rng, spectrum)


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
