"""The Bayes-optimal channel side by nested randomised quasi-Monte Carlo (docs/theory.md
"Bayes-optimal baseline"): any channel with Gaussian label noise on its outputs.

At posterior variance V (the MMSE) and q = Q0 - V the channel of docs/theory.md
"Channel side" is omega ~ N(0, q I_K), u* = omega + sqrt(V) z,
y = g(h(u*)) + sqrt(Delta) xi, and the posterior output function is

    g_out = grad_omega log Z_out = E[u - omega | y, omega] / V,
    Z_out(y, omega, V) = E_{u ~ N(omega, V I)} N(y; g(h(u)), Delta I_M).

The inner expectation is a self-normalised importance-sampling average over
N_in points per outer sample, drawn from a defensive mixture (Hesterberg 1995):
a fraction ``PRIOR_FRACTION`` from the prior N(omega, V I) and the rest from the
Laplace approximation of the posterior, N(uhat, Sigma) with uhat the posterior
mode -- the channel's prox at variance V/Delta, since
-log posterior = (1/Delta) [l(y, u) + Delta ||u - omega||^2 / (2V)] -- and
Sigma^-1 = J^T J / Delta + I/V (Gauss-Newton, J = dg/du at uhat: always positive
definite).  Weights w_j ~ p(u_j) / q(u_j) with q the mixture density, so the
estimate is consistent whatever the posterior's shape and the prior part
bounds the weights; the Laplace part makes it efficient when the label noise
is small against the spread of g over the prior cloud (there prior sampling
alone leaves an effective sample size of 1-10 out of 1024).  The inner points
are one scrambled Sobol set per replica shared by every outer sample (common
random numbers: qhat(V) is a smooth function of V).

qhat is estimated in the Nishimori form qhat = 2 alpha E[g_out . (u* - omega)] / V,
whose bias from the finite inner sum is of the order of the ratio estimator's
bias only (the form 2 alpha E||g_out||^2 would add the inner variance).  The
outer average runs over ``2**log2_n`` points in each of ``replicas``
scramblings; their spread is the Monte-Carlo error.  ``min_ess`` reports the
smallest effective inner sample size 1 / sum_j w_j^2 seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .channel_integrals import sobol_normals

@dataclass(frozen=True)
class BayesMonteCarloOptions:
    """Nested RQMC settings of the Bayes-optimal channel side (module docstring).

    2**log2_n outer points per replica, 2**inner_log2_n importance-sampling points per
    outer point, ``replicas`` independent scramblings (their spread, propagated through
    the fixed point, is the reported Monte-Carlo error), ``seed``.  Two levels: the
    fixed point is first found on the first 2**coarse_log2_n outer points (a few
    hundred milliseconds per evaluation), then refined on all of them (off when
    coarse_log2_n >= log2_n)."""

    log2_n: int = 12
    inner_log2_n: int = 7
    replicas: int = 8
    seed: int = 0
    coarse_log2_n: int = 9

    def __post_init__(self) -> None:
        for name, lo, hi in (("log2_n", 4, 20), ("inner_log2_n", 4, 14), ("coarse_log2_n", 4, 20)):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
        if isinstance(self.replicas, bool) or int(self.replicas) != self.replicas or self.replicas < 2:
            raise ValueError(f"replicas must be an integer >= 2, got {self.replicas!r}")
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


#: outer samples per vectorised block (memory: block x N_in x (K + M + L^2) doubles).
#: Small enough that the block's temporaries (~256 KiB each at N_in = 128) are recycled
#: by the allocator instead of being returned to the system and faulted in again: 512
#: spent 3 of 17 s of a noisy-softmax point in the kernel (page faults), 128 spends 0.2
BLOCK = 128
#: evaluations remembered by :meth:`MonteCarloBayesChannel.replica_q_hats`
CACHE = 8
#: fraction of the inner points drawn from the prior (the defensive part of the mixture)
PRIOR_FRACTION = 0.125


def output_jacobian(channel, U: np.ndarray) -> np.ndarray:
    """dg(h(u))/du, (n, M, K): the channel's ``output_jacobian`` when it has one, else
    central differences of ``outputs`` in u (step 6e-6 max(1, |u_k|): the Laplace
    proposal needs a few digits only)."""
    from amp_attention.channels.base import optional_member

    jac = optional_member(channel, "output_jacobian")
    if jac is not None:
        return jac(U)
    n, K = U.shape
    J = np.empty((n, channel.M, K))
    for k in range(K):
        h = 6e-6 * np.maximum(1.0, np.abs(U[:, k]))
        Up, Um = U.copy(), U.copy()
        Up[:, k] += h
        Um[:, k] -= h
        J[:, :, k] = (channel.outputs(channel.h_from_u(Up))
                      - channel.outputs(channel.h_from_u(Um))) / (2.0 * h[:, None])
    return J


class MonteCarloBayesChannel:
    """The ``bayes_q_hat`` capability of ``channel`` by nested RQMC (module docstring);
    uses its ``prox_batch`` and ``output_jacobian`` (central differences of ``outputs``
    when it has none)."""

    def __init__(self, channel, *, log2_n: int = 12, inner_log2_n: int = 7, replicas: int = 8,
                 seed: int = 0):
        if not (channel.noise > 0 and channel.noise_at == "output"):
            raise ValueError(
                f"noise: the Bayes-optimal output function of the {channel.name} channel needs "
                "either a closed form (bayes_q_hat) or Gaussian label noise on the outputs "
                f"(noise > 0, noise_at = 'output') for its Z_out integrals; got noise = "
                f"{channel.noise!r} at the {channel.noise_at}s")
        if int(inner_log2_n) < 4:
            raise ValueError(f"inner_log2_n must be an integer >= 4, got {inner_log2_n!r}")
        self.channel = channel
        self.log2_n, self.inner_log2_n = int(log2_n), int(inner_log2_n)
        self.replicas, self.seed = int(replicas), int(seed)
        K, M = channel.K, channel.M
        outer = sobol_normals(2 * K + M, self.log2_n, self.replicas, seed)
        self._w, self._z, self._xi = outer[..., :K], outer[..., K:2 * K], outer[..., 2 * K:]
        self._zeta = sobol_normals(K, self.inner_log2_n, self.replicas, seed + 7919)
        self.n_prior = max(1, int(round(PRIOR_FRACTION * self._zeta.shape[1])))
        self.name = channel.name
        self.last_replicas: np.ndarray | None = None
        self.min_ess = math.inf

    @classmethod
    def from_options(cls, channel, options: BayesMonteCarloOptions) -> "MonteCarloBayesChannel":
        return cls(channel, log2_n=options.log2_n, inner_log2_n=options.inner_log2_n,
                   replicas=options.replicas, seed=options.seed)

    def prefix(self, log2_n: int) -> "MonteCarloBayesChannel":
        """The same channel on the first 2**log2_n outer points of every replica (shared
        draws: the coarse level of the two-level solve)."""
        new = object.__new__(MonteCarloBayesChannel)
        new.__dict__.update(self.__dict__)
        m = 2 ** int(log2_n)
        new.log2_n = int(log2_n)
        new._w, new._z, new._xi = self._w[:, :m], self._z[:, :m], self._xi[:, :m]
        new.last_replicas, new.min_ess, new._cache = None, math.inf, {}
        return new

    def _posterior_shift(self, y, omega, V: float, zeta: np.ndarray) -> np.ndarray:
        """E[u - omega | y, omega] for each row (nb, K) by the mixture importance sampler."""
        ch = self.channel
        nb, K = omega.shape
        n_in = zeta.shape[0]
        D = ch.noise
        uhat = ch.prox_batch(y, omega, V / D).uhat
        J = output_jacobian(ch, uhat)
        prec = np.einsum("nmk,nml->nkl", J, J) / D + np.eye(K) / V
        R = np.linalg.cholesky(prec)  # prec = R R^T, R lower
        npr = self.n_prior
        U = np.empty((nb, n_in, K))
        U[:, :npr] = omega[:, None, :] + math.sqrt(V) * zeta[None, :npr]
        # Laplace part: u = uhat + R^{-T} zeta has covariance prec^{-1}
        RT = np.swapaxes(R, 1, 2)
        U[:, npr:] = uhat[:, None, :] + np.linalg.solve(
            RT, np.broadcast_to(zeta[npr:].T, (nb, K, n_in - npr))).transpose(0, 2, 1)
        dev = U - omega[:, None, :]
        log_prior = -0.5 * np.sum(dev * dev, axis=2) / V - 0.5 * K * math.log(V)
        r = np.einsum("nlk,nl...->nk...", R, (U - uhat[:, None, :]).transpose(0, 2, 1))
        log_laplace = (-0.5 * np.sum(r * r, axis=1)
                       + np.sum(np.log(np.diagonal(R, axis1=1, axis2=2)), axis=1)[:, None])
        lam = npr / n_in
        log_q = np.logaddexp(math.log(lam) + log_prior, math.log1p(-lam) + log_laplace)
        G = ch.outputs(ch.h_from_u(U.reshape(nb * n_in, K))).reshape(nb, n_in, -1)
        logw = -np.sum((G - y[:, None, :]) ** 2, axis=2) / (2.0 * D) + log_prior - log_q
        logw -= logw.max(axis=1, keepdims=True)
        w = np.exp(logw)
        w /= w.sum(axis=1, keepdims=True)
        self.min_ess = min(self.min_ess, float(np.min(1.0 / np.sum(w * w, axis=1))))
        return np.einsum("nj,njk->nk", w, dev)

    def replica_q_hats(self, V: float, Q0: float, alpha: float) -> np.ndarray:
        """qhat of every replica at posterior variance V (q = Q0 - V); the last
        ``CACHE`` evaluations are kept (the solver revisits its best point)."""
        key = (float(V), float(Q0), float(alpha))
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            if len(cache) >= CACHE:
                cache.pop(next(iter(cache)))
            cache[key] = self._replica_q_hats(*key)
        return cache[key].copy()

    def _replica_q_hats(self, V: float, Q0: float, alpha: float) -> np.ndarray:
        ch = self.channel
        sq, sv, sd = math.sqrt(max(Q0 - V, 0.0)), math.sqrt(V), math.sqrt(ch.noise)
        n = self._w.shape[1]
        out = np.empty(self.replicas)
        for r in range(self.replicas):
            total = 0.0
            for b in range(0, n, BLOCK):
                omega = sq * self._w[r, b:b + BLOCK]
                z = self._z[r, b:b + BLOCK]
                y = ch.outputs(ch.h_from_u(omega + sv * z)) + sd * self._xi[r, b:b + BLOCK]
                shift = self._posterior_shift(y, omega, V, self._zeta[r])
                # g_out . (u* - omega) = (shift / V) . (sqrt(V) z)
                total += float(np.sum(shift * z)) * sv / V
            out[r] = 2.0 * alpha * total / (n * V)
        return out

    def bayes_q_hat(self, V: float, Q0: float, alpha: float) -> float:
        reps = self.replica_q_hats(V, Q0, alpha)
        self.last_replicas = reps
        return float(reps.mean())
