"""GAMP on data for the tied-attention ERM (docs/theory.md "Why the problem is a GLM", "State
evolution", "GAMP on data").

The GLM of docs/theory.md "Why the problem is a GLM": n samples, K = L(L+1)/2 measurements each,
u_mu,k(S) = h_ab(S; x_mu) / tau_ab, of the symmetric d x d matrix S.  In the
orthonormal basis of Sym(d) the sensing vectors have entries of variance 1/d,
so the generalised AMP of the ERM (max-sum GAMP with scalar variances) reads,
with the channel's proximal operator and the denoiser's matrix map -- the
very objects whose expectations make the state evolution:

    V_mu,k    = V^t r_mu,k                                    (per-row variances)
    omega^t   = u(Shat^t) - V_mu,k g^(t-1)                    (Onsager term)
    uhat      = prox(y, omega^t, V_mu),  g^t = (uhat - omega^t) / V_mu
    Vh^t      = (2 / d^2) sum_mu tr(I - (I + D_mu H_mu)^(-1)) / V^t,  D_mu = diag(V_mu)
    B^t       = Vh^t Shat^t + (2/d) A_u*(g^t)
    Shat^(t+1), V^(t+1) = denoiser.matrix_map(B^t, Vh^t)

A_u* is the Frobenius adjoint of S -> u(S) (two GEMMs through
:mod:`amp_attention.operators`, never an n x d x d tensor).  The 2/d and
2/d^2 are the change from the orthonormal coordinates of Sym(d) to matrices:
the entries of (2/d) A_u*(g) have variance qh/d with qh = 2 alpha E||g||^2,
exactly the noise sqrt(qh) Z of the SE's B = mh S0 + sqrt(qh) Z, and V is the
normalised divergence (2/d^2)[...] of docs/theory.md "Denoiser side and free probability".

r_mu,k = ||M_mu,k||_F^2 / (N/d) (:func:`~amp_attention.operators.sensing_norms`)
is the squared norm of the sensing vector of measurement (mu, k) relative to
its mean: GAMP's output variance is sum_j A_ij^2 tau_x,j = V r_i.  For i.i.d.
Gaussian sensing r = 1 + O(1/d), but here the sensing matrices are built from
the tokens and r spreads by O(d^-1/2) (it scales with |x_a|^2 |x_b|^2).  With
one scalar V the iteration oscillates at d ~ 100 (undamped, linear L = 1) and
its iterates drift from the SE; with r it tracks the SE and converges
(docs/theory.md section 11).  The fixed point does not depend on V at all.

Fixed points are ERM stationary points: there u(Shat) = uhat, so
grad_u l(uhat) = -g and the denoiser's optimality condition becomes
A_u*(grad l) + lam d I + N_PSD(Shat) = 0, the KKT condition of
R(S) = sum_mu l(y_mu, u_mu(S)) + lam d Tr S over PSD S (docs/theory.md "Learners and the
objective").

Damping ``damping`` in (0, 1] mixes Shat, V and g with their previous values
(it does not move fixed points); by default it is halved when the iteration
oscillates (see :class:`GAMPOptions`).  Divergence -- a non-finite iterate, V or Vh
out of range, or the change growing without bound -- stops the iteration with
``status`` "diverged" (the message says at which iteration and why) and no
estimate is returned.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from .checks import Flag, Integer, Real, check_args
from .jsonsafe import json_safe
from .operators import (check_token_dtype, measure, measure_adjoint, sensing_norms,
                        tau as tau_of, token_dtype, tokens_in)
from .progress import progress_bar
from .result import Result, Status
from .threads import under_thread_policy

# V beyond this (relative to the start) or below this is reported as divergence.
V_MAX = 1e8
V_MIN = 1e-300


@dataclass(frozen=True)
class GAMPOptions:
    """Iteration controls.

    max_iter   iterations at most;
    tol        stop when ||Shat^(t+1) - Shat^t||_F / max(||Shat^(t+1)||_F, 1e-12) and
               |V^(t+1) - V^t| / V^(t+1) are both <= tol;
    damping    in (0, 1]: x <- (1 - damping) x_old + damping x_new for Shat, V, g;
    V0         the initial V (Shat^0 = S_init or 0, g^(-1) = 0);
    row_norms  use the per-row variances V r_mu,k (True) or one V for all rows;
    adaptive   halve the damping (down to 0.05) when the iteration oscillates --
               GAMP at small d can lock into a period-2 cycle -- i.e. when three
               successive steps of Shat each point against the previous one
               (cosine < -0.5); not before iteration 20 (the early, SE-tracked
               iterates stay as asked).  Slow monotone convergence is left alone:
               damping would only slow it further;
    warm_prox  from the second iteration on, restart the prox's data-side Newton
               runs from their previous end points (``prox_batch(warm_from=)``,
               ~3x cheaper for softmax).  Fixed points stay ERM stationary
               points either way.
    """

    max_iter: int = 300
    tol: float = 1e-8
    damping: float = 1.0
    V0: float = 1.0
    row_norms: bool = True
    adaptive: bool = True
    warm_prox: bool = True

    def __post_init__(self) -> None:
        positive = Real(0.0, math.inf, lo_open=True, hi_open=True)
        check_args({"max_iter": Integer(1), "tol": positive, "damping": Real(0.0, 1.0, lo_open=True),
                    "V0": positive, "row_norms": Flag(), "adaptive": Flag(), "warm_prox": Flag()},
                   max_iter=self.max_iter, tol=self.tol, damping=self.damping, V0=self.V0,
                   row_norms=self.row_norms, adaptive=self.adaptive, warm_prox=self.warm_prox)


@dataclass(frozen=True)
class GAMPIterate:
    """One row of the per-iteration record.

    t: iteration (Shat^t, V^t are the values *entering* it; t = 0 is the start);
    m = Tr(S0 Shat^t)/d, q = Tr(Shat^t^2)/d (nan without S0); V = V^t;
    V_hat: the Vh computed in this iteration; change: the relative change of
    Shat that this iteration produced; train_error: (1/n) sum ||y - g(h(Shat^t))||^2;
    test_error: clean error of Shat^t on the held-out set (nan without one);
    damping: the damping used in this iteration.
    """

    t: int
    m: float
    q: float
    V: float
    V_hat: float
    change: float
    train_error: float
    test_error: float
    damping: float = 1.0


@dataclass(frozen=True, eq=False)
class GAMPResult(Result):
    """Outcome of :func:`gamp`.

    S (the fixed point; None after divergence), V, V_hat, iterations, residual
    (the last relative change), history (GAMPIterate per iteration),
    n_failed_prox (proximal solves flagged in the last iteration), seconds; and
    success / status / message (:class:`~amp_attention.result.Result`).
    """

    S: np.ndarray | None
    V: float
    V_hat: float
    iterations: int
    residual: float
    history: tuple[GAMPIterate, ...]
    n_failed_prox: int = 0
    seconds: float = field(default=0.0, compare=False)  # wall time is not a result
    #: the output function g_out at the last iteration (n x K), for diagnostics
    g_out: np.ndarray | None = field(default=None, repr=False)

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("S", "g_out", "history")

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON summary (no matrices): scalars and the history as a list of dicts."""
        return {**super().to_dict(), "history": [json_safe(asdict(h)) for h in self.history]}


def u_of(X: np.ndarray, S: np.ndarray, tau: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """u_mu,k(S) = h_ab(S; x_mu) / tau_ab, shape (n, K)."""
    return measure(X, S, work) / tau


def u_adjoint(X: np.ndarray, g: np.ndarray, tau: np.ndarray,
              work: np.ndarray | None = None) -> np.ndarray:
    """A_u*(g) = sum_mu,k g_mu,k dh_ab/dS / tau_ab: the Frobenius adjoint of :func:`u_of`."""
    return measure_adjoint(X, g / tau, work)


class TokenSensing:
    """The measurement operator of the data, S -> u(S) and its adjoint, as GEMMs
    over the tokens (:mod:`amp_attention.operators`); memory O(n L d): the
    tokens and one (n, L, d) work buffer that every call reuses."""

    def __init__(self, X: np.ndarray):
        X = np.asarray(X)
        X = X.astype(token_dtype(X), copy=False)  # float32 tokens stay float32
        if X.ndim != 3:
            raise ValueError(f"X must have shape (n, L, d), got {X.shape}")
        self.X = np.ascontiguousarray(X)
        self.n, self.L, self.d = X.shape
        self.K = self.L * (self.L + 1) // 2
        self.tau = tau_of(self.L)
        self._work = np.empty_like(self.X)

    def forward(self, S: np.ndarray) -> np.ndarray:
        return u_of(self.X, S, self.tau, self._work)

    def adjoint(self, g: np.ndarray) -> np.ndarray:
        return u_adjoint(self.X, g, self.tau, self._work)

    def row_norms(self) -> np.ndarray:
        return sensing_norms(self.X)


class DenseSensing:
    """The same operator as an explicit (n K) x N matrix on the orthonormal
    coordinates of Sym(d) (N = d(d+1)/2), as simple reference codes build it:
    memory O(n K d^2).  For benchmarks and cross-checks only."""

    def __init__(self, X: np.ndarray):
        tok = TokenSensing(X)
        self.n, self.L, self.d, self.K = tok.n, tok.L, tok.d, tok.K
        d = self.d
        self._iu = np.triu_indices(d)
        # orthonormal coordinate s_ij = w_ij S_ij: w = 1 on the diagonal, sqrt 2 off it
        self._w = np.where(self._iu[0] == self._iu[1], 1.0, math.sqrt(2.0))
        i1, i2 = self._iu
        diag = i1 == i2
        X = tok.X
        A = np.empty((self.n, self.K, self._w.size))
        ka, kb = np.triu_indices(self.L)
        # Row (mu, k) holds the orthonormal coordinates of M_k = sym(x_a x_b^T -
        # delta_ab I)/(sqrt(d) tau_k): w_ij (M_k)_ij.
        for k, (a, b) in enumerate(zip(ka, kb)):
            P = 0.5 * (X[:, a, i1] * X[:, b, i2] + X[:, a, i2] * X[:, b, i1])
            if a == b:
                P[:, diag] -= 1.0
            A[:, k, :] = P * (self._w / (math.sqrt(d) * tok.tau[k]))
        self.A = A.reshape(self.n * self.K, -1)

    def _vec(self, S: np.ndarray) -> np.ndarray:
        return self._w * S[self._iu]

    def _mat(self, s: np.ndarray) -> np.ndarray:
        M = np.zeros((self.d, self.d))
        M[self._iu] = s / self._w
        return M + np.triu(M, 1).T

    def forward(self, S: np.ndarray) -> np.ndarray:
        return (self.A @ self._vec(S)).reshape(self.n, self.K)

    def adjoint(self, g: np.ndarray) -> np.ndarray:
        return self._mat(self.A.T @ g.ravel())

    def row_norms(self) -> np.ndarray:
        return (np.einsum("ij,ij->i", self.A, self.A) / ((self.d + 1) / 2)).reshape(self.n, self.K)


def _diverged(t: int, what: str) -> tuple[Status, str]:
    return Status.DIVERGED, f"at iteration {t}: {what}"


@under_thread_policy
def gamp(
    X,
    y: np.ndarray,
    channel,
    denoiser,
    *,
    options: GAMPOptions | None = None,
    S_init: np.ndarray | None = None,
    S0: np.ndarray | None = None,
    test: tuple[np.ndarray, np.ndarray] | None = None,
    progress: bool = False,
    callback: Callable[[GAMPIterate], None] | None = None,
) -> GAMPResult:
    """Run GAMP on tokens X (n, L, d) and labels y (n, M) (see the module docstring).

    ``X`` may also be a sensing object (:class:`TokenSensing` -- what an array
    becomes -- or :class:`DenseSensing`) with ``forward``, ``adjoint``,
    ``row_norms`` and ``n, L, d, K``.
    ``channel``: any channel object with ``prox_batch`` (linear, softmax,
    seq2lab, custom); ``denoiser``: NuclearNormPSD or Frobenius (``matrix_map``).
    ``S0`` (optional) gives the overlaps m_t; ``test = (X_test, S0)`` the
    held-out clean test error per iteration.  ``callback`` sees every
    :class:`GAMPIterate` as it is produced.
    """
    opts = options or GAMPOptions()
    t0 = time.perf_counter()
    A = X if hasattr(X, "forward") else TokenSensing(X)
    n, L, d, K = A.n, A.L, A.d, A.K
    if int(channel.K) != K:
        raise ValueError(f"channel has K = {channel.K} components but X has L = {L} tokens")
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n, int(channel.M)):
        raise ValueError(f"y must have shape ({n}, {channel.M}), got {y.shape}")
    S = np.zeros((d, d)) if S_init is None else np.array(S_init, dtype=np.float64)
    if S.shape != (d, d):
        raise ValueError(f"S_init must have shape ({d}, {d}), got {S.shape}")
    if S0 is not None and np.shape(S0) != (d, d):
        raise ValueError(f"S0 must have shape ({d}, {d}), got {np.shape(S0)}")
    u_test_star = None
    if test is not None:
        test = (TokenSensing(test[0]), test[1])
        u_test_star = test[0].forward(test[1])
    V = float(opts.V0)
    r = A.row_norms() if opts.row_norms else np.ones((n, K))
    g_prev = np.zeros((n, K))
    history: list[GAMPIterate] = []
    bar = progress_bar(total=opts.max_iter, desc="GAMP") if progress else None
    u = A.forward(S)
    converged, change, Vh, px = False, math.inf, math.nan, None
    status, message = Status.MAX_ITER, f"not converged in {opts.max_iter} iterations"
    eta, flips, step_prev, norm_prev = float(opts.damping), 0, None, 0.0
    for t in range(opts.max_iter):
        Vr = V * r
        omega = u - Vr * g_prev
        warm = px.ends if (opts.warm_prox and px is not None) else None
        px = channel.prox_batch(y, omega, Vr, warm_from=warm)
        g = px.g_out
        if eta < 1.0 and t > 0:
            g = (1.0 - eta) * g_prev + eta * g
        Vh = 2.0 * float(np.sum(px.trace_term)) / (V * d * d)
        if not (math.isfinite(Vh) and Vh > 0.0 and np.all(np.isfinite(g))):
            status, message = _diverged(t, f"channel side not finite or V_hat = {Vh!r} <= 0")
            break
        B = Vh * S + (2.0 / d) * A.adjoint(g)
        S_new, V_new = denoiser.matrix_map(B, Vh)
        if eta < 1.0:
            S_new = (1.0 - eta) * S + eta * S_new
            V_new = (1.0 - eta) * V + eta * V_new
        if not (np.all(np.isfinite(S_new)) and math.isfinite(V_new)):
            status, message = _diverged(t, "non-finite Shat or V")
            break
        if not (V_MIN < V_new < V_MAX * max(1.0, opts.V0)):
            status, message = _diverged(t, f"V = {V_new:.3e} left (0, {V_MAX:.0e})")
            break
        step = S_new - S
        norm_step = float(np.linalg.norm(step))
        change = max(norm_step / max(float(np.linalg.norm(S_new)), 1e-12), abs(V_new - V) / V_new)
        if step_prev is not None:
            # a period-2 cycle: each step points back along the previous one
            flips = flips + 1 if float(np.sum(step * step_prev)) < -0.5 * norm_step * norm_prev else 0
        step_prev, norm_prev = step, norm_step
        row = _record(t, S, S0, V, Vh, change, channel, y, u, test, u_test_star, eta)
        history.append(row)
        if callback is not None:
            callback(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"change={change:.1e}")
        S, V, g_prev = S_new, V_new, g
        u = A.forward(S)
        if change <= opts.tol:
            converged, status, message = True, Status.CONVERGED, ""
            break
        if t >= 20 and change > 1e6 * min(h.change for h in history):
            status, message = _diverged(t, f"relative change grew to {change:.2e}")
            break
        if opts.adaptive and t >= 20 and flips >= 3 and eta > 0.05:
            eta, flips = max(0.5 * eta, 0.05), 0
    if bar is not None:
        bar.close()
    ok = converged or status is Status.MAX_ITER
    if ok:
        # The state the loop ended on, so the record covers the returned S.
        history.append(_record(len(history), S, S0, V, math.nan, 0.0 if converged else change,
                               channel, y, u, test, u_test_star, eta))
    return GAMPResult(S if ok else None, V, Vh, len(history) - int(ok), change, tuple(history),
                      int(px.n_failed) if px is not None else 0, time.perf_counter() - t0,
                      g_prev if ok else None, success=converged, status=status, message=message)


def _record(t, S, S0, V, Vh, change, channel, y, u, test, u_test_star, eta) -> GAMPIterate:
    d = S.shape[0]
    m = float(np.sum(S0 * S)) / d if S0 is not None else math.nan
    q = float(np.sum(S * S)) / d
    train = float(np.mean(channel.train_terms(y, u)))
    test_err = math.nan
    if test is not None:
        test_err = float(np.mean(channel.test_terms(u_test_star, test[0].forward(S))))
    return GAMPIterate(t, m, q, V, Vh, change, train, test_err, eta)


class PosteriorOutput:
    """A channel seen through its posterior output function (Bayes-optimal GAMP, docs/theory.md
    "Bayes-optimal baseline"): ``prox_batch`` returns the channel's ``posterior_batch``
    (E[u* | y, omega] for u* ~ N(omega, V), g_out = (E[u*] - omega)/V), so that :func:`gamp`
    with the :class:`~amp_attention.denoisers.BayesOptimal` denoiser is BO-AMP.  The
    other members (errors on data) are the channel's."""

    def __init__(self, channel):
        from .channels.base import optional_member

        post = optional_member(channel, "posterior_batch")
        if post is None:
            raise ValueError(f"channel: the {channel.name} channel has no posterior output "
                             "function in closed form (posterior_batch); Bayes-optimal GAMP "
                             "needs one (linear; softmax without noise or with noise on the "
                             "logits)")
        self.channel = channel
        self._post = post
        self.name, self.K, self.M = channel.name, channel.K, channel.M

    def prox_batch(self, y, omega, V, warm_from=None) -> Any:
        return self._post(y, omega, V)

    def train_terms(self, y, uhat):
        return self.channel.train_terms(y, uhat)

    def test_terms(self, u_star, u_pred):
        return self.channel.test_terms(u_star, u_pred)


def bayes_gamp_on_problem(problem, d: int, seed: int, *, options: GAMPOptions | None = None,
                          target_spectrum: str = "sampled", n_test: int = 2000,
                          progress: bool = False) -> GAMPRun:
    """Bayes-optimal GAMP (BO-AMP) on the data set of ``problem`` at dimension d: the
    posterior output function of the channel (:class:`PosteriorOutput`) and the
    rotation-invariant Bayes-optimal denoiser of the target's law, started from the
    prior mean S = (Tr S0/d) I with V = Q0 - (Tr S0/d)^2 (its posterior variance);
    ``options.V0`` is replaced by that V.  Its SE is
    :func:`amp_attention.solvers.bayes_optimal.bayes_se_iterates`."""
    import dataclasses

    from .checks import check_count, check_dimension, check_seed
    from .data import generate_dataset, sample_tokens
    from .denoisers import BayesOptimal
    from .erm import TEST_SEED_TAG
    from .targets import target_measure

    d, seed = check_dimension(d), check_seed(seed)
    n_test = check_count("n_test", n_test, 1)
    channel = problem.task.channel_object
    output = PosteriorOutput(channel)
    law = target_measure(problem.target)
    m1, Q0 = law.moment(1), law.moment(2)
    opts = dataclasses.replace(options or GAMPOptions(), V0=Q0 - m1 * m1)
    data = generate_dataset(problem, d, seed, target_spectrum, channel=channel)
    X_test = sample_tokens(n_test, problem.task.L, d, np.random.default_rng([seed, TEST_SEED_TAG]))
    res = gamp(data.X, data.y, output, BayesOptimal(law), options=opts, S_init=m1 * np.eye(d),
               S0=data.S0, test=(X_test, data.S0), progress=progress)
    return GAMPRun(res, data, n_test)


@dataclass(frozen=True)
class GAMPRun:
    """GAMP on one data set drawn for a problem: the result and the data it ran on."""

    #: the GAMP result
    result: GAMPResult
    #: the data set it ran on (amp_attention.data.Dataset)
    data: Any  # amp_attention.data.Dataset
    #: fresh samples of the clean test error tracked per iteration
    n_test: int


def gamp_on_problem(problem, d: int, seed: int, *, options: GAMPOptions | None = None,
                    target_spectrum: str = "sampled", n_test: int = 2000,
                    progress: bool = False, dtype: str = "float64") -> GAMPRun:
    """Draw the data set of ``problem`` at dimension d (``data.generate_dataset``,
    seed ``seed``), run :func:`gamp` with the problem's channel and denoiser, and
    track m_t and the clean test error on ``n_test`` fresh samples (tokens from
    default_rng([seed, TEST_SEED_TAG])).  ``dtype="float32"``: the sensing products over
    the data in float32 (:mod:`amp_attention.operators`), everything d x d float64."""
    from .checks import check_count, check_dimension, check_seed
    from .data import sample_tokens
    from .denoisers import denoiser_for
    from .data import generate_dataset
    from .erm import TEST_SEED_TAG

    d, seed = check_dimension(d), check_seed(seed)
    n_test = check_count("n_test", n_test, 1)
    channel = problem.task.channel_object
    check_token_dtype(dtype)
    data = generate_dataset(problem, d, seed, target_spectrum, channel=channel)
    X_test = sample_tokens(n_test, problem.task.L, d, np.random.default_rng([seed, TEST_SEED_TAG]))
    res = gamp(tokens_in(data.X, dtype), data.y, channel, denoiser_for(problem.learner),
               options=options, S0=data.S0, test=(X_test, data.S0), progress=progress)
    return GAMPRun(res, data, n_test)
