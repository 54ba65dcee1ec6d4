"""Direct finite-d ERM for any output channel (THEORY 2; issue 3, item 4).

Objective, in THEORY's exact normalisation (no 1/n, no 1/d):

    R(S) = sum_mu l(y_mu, h_mu(S)) + P(S),   l(y, h) = 1/2 ||y - g(h)||^2,
    h_mu,ab(S) = (x_mu,a^T S x_mu,b - delta_ab Tr S) / sqrt(d)   (all L x L entries),

with the learner's penalty

* factorised: S = W^T W / sqrt(p d), W in R^{p x d}, p = max(1, round(kappa d)),
      P(S) = lam d Tr S = (lam / sqrt(kappa)) ||W||_F^2;
* elementwise: S symmetric, unconstrained, P(S) = lam d ||S||_F^2 / 2.

Writing f(S) = sum_mu l(y_mu, h_mu(S)) and G_mu,ab = d l / d h_ab (all L^2 entries
treated as independent, as the channel returns them), the gradient on Sym(d) is
grad f(S) = A*(G) (:func:`~amp_attention.operators.preactivations_adjoint`) and

    dR/dS = A*(G) + lam d I (factorised),   A*(G) + lam d S (elementwise),
    dR/dW = 2 W (dR/dS) / sqrt(p d)          (chain rule through S = W^T W / sqrt(p d)).

Memory is O(n L d + d^2): S enters only through (nL x d) @ (d x d) products.

Solvers (see :func:`direct_erm_channel` for the choice and the stopping rule):

* factorised, kappa < 1: L-BFGS over W (rank cap p < d built in);
* factorised, kappa >= 1: accelerated proximal gradient over PSD S (prox =
  :func:`~amp_attention.spectral_maps.psd_soft_threshold`), or L-BFGS over W
  with p = d (``method="lbfgs"``);
* elementwise: L-BFGS over S with the (symmetric) Frobenius gradient.

The channel is any object with the duck-typed interface of :class:`Channel`
(``name, L, K, M, noise, noise_at, outputs, sample_labels,
batch_loss_and_grad_h``); nothing here depends on a particular channel.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.optimize import minimize

from .checks import check_count, check_dimension, check_seed
from .data import Dataset, n_samples, sample_target_matrix, sample_tokens
from .operators import preactivations, preactivations_adjoint, top_eigenvalue_sym
from .channels.base import DATA_MEMBERS, Channel, check_channel, optional_member
from .spec import Problem
from .spectral_maps import psd_soft_threshold
from .training import ERMResult, rank_cap, stopping_status

__all__ = [
    "ChannelERMResult",
    "channel_loss_and_grad",
    "direct_erm_channel",
    "generate_channel_dataset",
    "kkt_residual",
    "population_error",
    "objective_S",
    "objective_W",
]

#: seed tag of the fresh test set used for the population error
TEST_SEED_TAG = 0x7E57
#: minimum number of test samples
N_TEST_MIN = 20000
#: solver choices for the factorised learner with kappa >= 1
METHODS = ("auto", "apg", "lbfgs")


@dataclass(frozen=True, eq=False)
class ChannelERMResult(ERMResult):
    """:class:`~amp_attention.training.ERMResult` plus the channel-ERM extras.

    test_error         clean population error E||g(h(S0)) - g(h(Shat))||^2, Monte-Carlo
                       estimate on ``n_test`` fresh samples;
    test_error_stderr  its Monte-Carlo standard error std(e_mu)/sqrt(n_test);
    test_error_noisy   E||y - g(h(Shat))||^2 with fresh noisy labels (same test set);
    restart_losses     R/n at the end of every start (index 0: the zero-ish start);
    restart_converged  the converged flag of every start;
    restart_iterations the iteration count of every start;
    best_restart       index of the start kept (lowest objective);
    channel, n_test    the channel's name and the test-set size;
    method             solver used ("apg", "lbfgs-W" or "lbfgs-S");
    seconds            wall time of the whole call (all starts and the test set).
    """

    channel: str = ""
    n_test: int = 0
    test_error_stderr: float = math.nan
    test_error_noisy: float = math.nan
    restart_losses: tuple[float, ...] = ()
    restart_converged: tuple[bool, ...] = ()
    restart_iterations: tuple[int, ...] = ()
    best_restart: int = 0
    method: str = ""
    seconds: float = math.nan


# --------------------------------------------------------------------------- data


def generate_channel_dataset(
    problem: Problem,
    d: int,
    seed: int,
    channel: Channel,
    target_spectrum: str = "sampled",
) -> Dataset:
    """Draw S0, then X, then the labels y = channel.sample_labels(h(S0), rng).

    Same generator and draw order as :func:`~amp_attention.data.generate_dataset`
    (default_rng(seed): S0 via ``sample_target_matrix``, X via ``sample_tokens``,
    then whatever the channel draws for its noise), so S0 and X coincide with
    the linear-channel dataset of the same seed.  ``y`` has shape (n, M).
    """
    d = check_dimension(d)
    seed = check_seed(seed)
    if not isinstance(problem, Problem):
        raise ValueError("problem must be a Problem")
    channel = check_channel(channel, problem.task.L, DATA_MEMBERS)
    rng = np.random.default_rng(seed)
    n = n_samples(problem.alpha, d)
    S0 = sample_target_matrix(problem.target, d, rng, target_spectrum)
    X = sample_tokens(n, problem.task.L, d, rng)
    y = np.asarray(channel.sample_labels(preactivations(X, S0), rng), dtype=float)
    if y.shape != (n, int(channel.M)):
        raise ValueError(f"channel.sample_labels returned shape {y.shape}, expected ({n}, {channel.M})")
    return Dataset(X=X, y=y, S0=S0, d=d, n=n, seed=seed)


# ---------------------------------------------------------------------- objective


class _Evaluator:
    """f(S) = sum_mu l(y_mu, h_mu(S)) and grad f = A*(G), with evaluation counters.

    Kept separate so that the linear map h(S) can be reused (APG extrapolates
    h(y_k) from cached h(x_k), h(x_{k-1}) without a forward product).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, channel: Channel):
        self.X, self.y, self.channel = X, y, channel
        self.n_forward = 0
        self.n_adjoint = 0

    def forward(self, S: np.ndarray) -> np.ndarray:
        self.n_forward += 1
        return preactivations(self.X, S)

    def loss_from_h(self, H: np.ndarray) -> tuple[float, np.ndarray]:
        loss, G = self.channel.batch_loss_and_grad_h(self.y, H)
        return float(np.sum(loss)), G

    def adjoint(self, G: np.ndarray) -> np.ndarray:
        self.n_adjoint += 1
        return preactivations_adjoint(self.X, G)

    def f_and_grad(self, S: np.ndarray) -> tuple[float, np.ndarray]:
        f, G = self.loss_from_h(self.forward(S))
        return f, self.adjoint(G)


def channel_loss_and_grad(
    X: np.ndarray, y: np.ndarray, S: np.ndarray, channel: Channel
) -> tuple[float, np.ndarray]:
    """f(S) = sum_mu 1/2 ||y_mu - g(h_mu(S))||^2 and grad f(S) = A*(G) on Sym(d)."""
    return _Evaluator(X, y, channel).f_and_grad(S)


def objective_S(
    X: np.ndarray,
    y: np.ndarray,
    S: np.ndarray,
    channel: Channel,
    lam: float,
    parameterisation: str = "factorised",
) -> tuple[float, np.ndarray]:
    """R(S) and dR/dS on Sym(d) (Frobenius gradient).

    factorised: R = f(S) + lam d Tr S, dR/dS = A*(G) + lam d I;
    elementwise: R = f(S) + lam d ||S||_F^2 / 2, dR/dS = A*(G) + lam d S.
    """
    d = X.shape[2]
    f, g = channel_loss_and_grad(X, y, S, channel)
    if parameterisation == "factorised":
        return f + lam * d * float(np.trace(S)), g + lam * d * np.eye(d)
    if parameterisation == "elementwise":
        return f + 0.5 * lam * d * float(np.sum(S * S)), g + lam * d * S
    raise ValueError(f"parameterisation must be one of factorised, elementwise; got {parameterisation!r}")


def objective_W(
    X: np.ndarray, y: np.ndarray, W: np.ndarray, channel: Channel, lam: float
) -> tuple[float, np.ndarray]:
    """R(W) = f(W^T W / sqrt(p d)) + (lam / sqrt(kappa)) ||W||_F^2 and dR/dW = 2 W (dR/dS) / sqrt(p d)."""
    p, d = W.shape
    c = math.sqrt(p * d)
    R, Z = objective_S(X, y, (W.T @ W) / c, channel, lam, "factorised")
    return R, (2.0 / c) * (W @ Z)


def _operator_norm_sq(X: np.ndarray, rng: np.random.Generator, iters: int = 30) -> float:
    """lambda_max(A*A) on Sym(d) for the full L x L pre-activation map: the Lipschitz
    constant of grad f for the loss 1/2 ||h||_F^2, used as the curvature scale of the
    stopping rule and as APG's first step (APG backtracks)."""
    return top_eigenvalue_sym(lambda v: preactivations_adjoint(X, preactivations(X, v)),
                              X.shape[2], rng, iters)


# ---------------------------------------------------------------- stopping rule


@dataclass
class _Criterion:
    """Relative projected-gradient norm (see :func:`direct_erm_channel`).

    factorised:  res = ||S - prox_t(S - t grad f(S))||_F / (t g0),
                 prox_t = psd_soft_threshold(., t lam d, rank = p or None),
                 t = 1 / lambda_max(A*A),  g0 = ||grad f(0)||_F + lam d sqrt(d);
    elementwise: res = ||grad f(S) + lam d S||_F / g0,  g0 = ||grad f(0)||_F.
    """

    thr: float  # lam d
    rank: int | None
    t: float
    g0: float
    elementwise: bool

    def __call__(self, S: np.ndarray, gradf: np.ndarray) -> float:
        if self.elementwise:
            return float(np.linalg.norm(gradf + self.thr * S)) / self.g0
        P, _, _ = psd_soft_threshold(S - self.t * gradf, self.t * self.thr, 1.0, rank=self.rank)
        return float(np.linalg.norm(S - P)) / (self.t * self.g0)

    def support(self, S: np.ndarray, gradf: np.ndarray) -> int:
        """Number of nonzero eigenvalues of the prox-gradient point (the identified rank)."""
        _, _, fv = psd_soft_threshold(S - self.t * gradf, self.t * self.thr, 1.0, rank=self.rank)
        return int(np.sum(fv > 0))


def _criterion(ev: "_Evaluator", thr: float, cap: int | None, elementwise: bool,
               rng: np.random.Generator) -> _Criterion:
    d = ev.X.shape[2]
    lip = max(_operator_norm_sq(ev.X, rng), 1e-300)
    _, g_at_0 = ev.f_and_grad(np.zeros((d, d)))
    g0 = float(np.linalg.norm(g_at_0)) + (0.0 if elementwise else thr * math.sqrt(d))
    if not g0 > 0.0:
        g0 = 1.0  # labels equal g(h(0)) and lam = 0: S = 0 is exact, any scale works
    return _Criterion(thr=thr, rank=cap, t=1.0 / lip, g0=g0, elementwise=elementwise)


def kkt_residual(
    X: np.ndarray,
    y: np.ndarray,
    S: np.ndarray,
    channel: Channel,
    lam: float,
    parameterisation: str = "factorised",
    rank: int | None = None,
    seed: int = 0,
) -> float:
    """First-order (KKT) residual of the ERM objective of THEORY 2 at S.

    The relative projected-gradient norm that :func:`direct_erm_channel` stops
    on (see ``_Criterion``): ||S - prox_t(S - t grad f(S))||_F / (t g0) for the
    factorised learner (PSD, trace penalty lam d, optional rank cap), or
    ||grad f(S) + lam d S||_F / g0 for the element-wise one; zero exactly at
    stationary points.  ``seed`` drives the power iteration for t.
    """
    ev = _Evaluator(X, y, check_channel(channel, X.shape[1], DATA_MEMBERS))
    if parameterisation not in ("factorised", "elementwise"):
        raise ValueError(f"parameterisation must be one of factorised, elementwise; got {parameterisation!r}")
    crit = _criterion(ev, lam * X.shape[2], rank, parameterisation == "elementwise",
                      np.random.default_rng([seed, 0x11B]))
    _, gradf = ev.f_and_grad(np.asarray(S, dtype=float))
    return crit(np.asarray(S, dtype=float), gradf)


# ------------------------------------------------------------------------ solvers


@dataclass
class _Run:
    S: np.ndarray
    objective: float
    converged: bool
    iterations: int
    residual: float
    gradf: np.ndarray


class _Converged(Exception):
    """Raised from the L-BFGS callback to stop as soon as the criterion holds."""


def _lbfgs(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    state: dict,
    check: Callable[[np.ndarray], float],
    tol: float,
    max_iter: int,
    progress: bool,
    label: str,
) -> tuple[np.ndarray, bool, int, float]:
    """scipy L-BFGS-B driven by our own stopping rule.

    scipy's own tests (ftol, gtol) are switched off; the callback evaluates the
    criterion after every iteration and stops through an exception.  If L-BFGS
    ends early (line-search failure, usually rounding near the minimum) it is
    restarted with a fresh memory from the current point, as long as the
    objective still decreases.
    """
    x = x0.copy()
    its = 0
    res = math.inf
    t_start = time.time()
    last_obj = math.inf
    for _attempt in range(12):
        if its >= max_iter:
            break
        found: dict[str, Any] = {}

        def callback(xk: np.ndarray) -> None:
            nonlocal its
            its += 1
            r = check(xk)
            found["x"], found["res"] = xk.copy(), r
            if progress and its % 100 == 0:
                print(f"[erm_nonlinear/{label}] it={its} R={state['f']:.12e} res={r:.2e} "
                      f"{time.time() - t_start:.1f}s", file=sys.stderr)
            if r <= tol:
                raise _Converged

        try:
            out = minimize(
                fun, x, jac=True, method="L-BFGS-B", callback=callback,
                options=dict(maxiter=max_iter - its, maxfun=10 * (max_iter - its) + 100,
                             ftol=0.0, gtol=0.0, maxcor=20, maxls=50),
            )
            x = np.asarray(out.x, dtype=float)
        except _Converged:
            return found["x"], True, its, found["res"]
        res = check(x)
        if res <= tol:
            return x, True, its, res
        obj = fun(x)[0]
        # stop retrying once a fresh-memory restart no longer lowers R
        if not obj < last_obj - 1e-15 * abs(obj):
            break
        last_obj = obj
    return x, False, its, res


def _lbfgs_over(
    ev: _Evaluator,
    x0: np.ndarray,
    to_S: Callable[[np.ndarray], np.ndarray],
    penalty: Callable[[np.ndarray], float],
    grad_x: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    crit: _Criterion,
    tol: float,
    max_iter: int,
    progress: bool,
    label: str,
) -> _Run:
    """L-BFGS over a parameter x with S = to_S(x), R = f(S) + penalty(S) and
    dR/dx = grad_x(x, S, grad f(S)); one evaluation per distinct x (L-BFGS, the
    stopping rule and the result share it)."""
    cache: dict[str, Any] = {"x": None}
    state: dict[str, Any] = {"f": math.nan}

    def evaluate(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        if cache["x"] is not None and np.array_equal(x, cache["x"]):
            return cache["R"], cache["S"], cache["gf"]
        S = to_S(x)
        f, gf = ev.f_and_grad(S)
        R = f + penalty(S)
        cache.update(x=x.copy(), R=R, S=S, gf=gf)
        state["f"] = R
        return R, S, gf

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        R, S, gf = evaluate(x)
        return R, grad_x(x, S, gf).ravel()

    def check(x: np.ndarray) -> float:
        _, S, gf = evaluate(x)
        return crit(S, gf)

    x, ok, its, res = _lbfgs(fun, x0.ravel(), state, check, tol, max_iter, progress, label)
    R, S, gf = evaluate(x)
    return _Run(S=S.copy(), objective=R, converged=ok, iterations=its, residual=res, gradf=gf)


def _sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + M.T)


def _solve_W(
    ev: _Evaluator,
    W0: np.ndarray,
    thr: float,
    crit: _Criterion,
    tol: float,
    max_iter: int,
    progress: bool,
) -> _Run:
    """L-BFGS over W in R^{p x d}: R(W) = f(W^T W/sqrt(pd)) + lam d Tr(W^T W)/sqrt(pd)."""
    p, d = W0.shape
    c = math.sqrt(p * d)
    eye = np.eye(d)

    def to_S(w: np.ndarray) -> np.ndarray:
        W = w.reshape(p, d)
        return _sym((W.T @ W) / c)

    return _lbfgs_over(ev, W0, to_S, lambda S: thr * float(np.trace(S)),
                       lambda w, S, gf: (2.0 / c) * (w.reshape(p, d) @ (gf + thr * eye)),
                       crit, tol, max_iter, progress, "W")


def _solve_S_elementwise(
    ev: _Evaluator,
    S_init: np.ndarray,
    thr: float,
    crit: _Criterion,
    tol: float,
    max_iter: int,
    progress: bool,
) -> _Run:
    """L-BFGS over the d x d matrix with S = sym(v): R = f(S) + lam d ||S||_F^2 / 2.

    Optimising over all d^2 entries with the symmetric gradient is the Frobenius
    metric of Sym(d) (off-diagonal pairs counted twice), better conditioned than
    the d(d+1)/2 upper-triangle coordinates; the gradient is symmetric, so the
    iterates stay symmetric up to rounding and the antisymmetric part is flat.
    """
    d = S_init.shape[0]
    return _lbfgs_over(ev, S_init, lambda v: _sym(v.reshape(d, d)),
                       lambda S: 0.5 * thr * float(np.sum(S * S)),
                       lambda v, S, gf: gf + thr * S, crit, tol, max_iter, progress, "S")


def _solve_apg(
    ev: _Evaluator,
    S_init: np.ndarray,
    thr: float,
    rank: int | None,
    crit: _Criterion,
    tol: float,
    max_iter: int,
    progress: bool,
) -> _Run:
    """Accelerated proximal gradient over PSD S for f(S) + lam d Tr S (f need not be convex).

    FISTA with (i) backtracking on the sufficient-decrease inequality
    f(z) <= f(y) + <grad f(y), z - y> + ||z - y||^2 / (2t), (ii) a monotone
    safeguard (a momentum step that raises R is discarded and the momentum
    reset; the plain prox-gradient step that follows cannot raise R), (iii)
    O'Donoghue-Candes adaptive restart, and (iv) a slow step growth (x1.05 per
    accepted iteration) so that the step tracks the local curvature, which for
    a saturating channel (softmax) is well below the linear-channel bound.
    h is linear in S, so h(y_k) is extrapolated from the cached h(x_k),
    h(x_{k-1}): one forward and one adjoint product per iteration.
    """
    t = crit.t
    x = S_init.copy()
    hx = ev.forward(x)
    fx, Gx = ev.loss_from_h(hx)
    Fx = fx + thr * float(np.trace(x))
    gx: np.ndarray | None = None
    x_prev, hx_prev = x, hx
    tk = 1.0
    res = math.inf
    t_start = time.time()
    it = 0
    while it < max_iter:
        it += 1
        tn = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
        b = (tk - 1.0) / tn
        if b > 0.0:
            yv = x + b * (x - x_prev)
            hy = hx + b * (hx - hx_prev)
            fy, Gy = ev.loss_from_h(hy)
            gy = ev.adjoint(Gy)
        else:
            yv, hy, fy = x, hx, fx
            if gx is None:
                gx = ev.adjoint(Gx)
            gy = gx
        backtracked = False
        while True:
            z, _, _ = psd_soft_threshold(yv - t * gy, t * thr, 1.0, rank=rank)
            hz = ev.forward(z)
            fz, Gz = ev.loss_from_h(hz)
            diff = z - yv
            model = fy + float(np.vdot(gy, diff)) + float(np.sum(diff * diff)) / (2.0 * t)
            # relative slack: near convergence both sides agree to rounding only
            if fz <= model + 1e-12 * max(abs(model), 1.0):
                break
            t *= 0.5
            backtracked = True
        Fz = fz + thr * float(np.trace(z))
        if Fz > Fx and b > 0.0:
            tk = 1.0
            x_prev, hx_prev = x, hx
            continue
        restart = float(np.vdot(yv - z, z - x)) > 0.0
        x_prev, hx_prev = x, hx
        x, hx, fx, Gx, Fx, gx = z, hz, fz, Gz, Fz, None
        tk = 1.0 if restart else tn
        cheap = float(np.linalg.norm(diff)) / (t * crit.g0)
        if not backtracked:
            t *= 1.05
        if progress and it % 200 == 0:
            print(f"[erm_nonlinear/apg] it={it} R={Fx:.12e} step-res={cheap:.2e} t={t:.3e} "
                  f"{time.time() - t_start:.1f}s", file=sys.stderr)
        if cheap < tol:
            gx = ev.adjoint(Gx)
            res = crit(x, gx)
            if res <= tol:
                return _Run(S=x, objective=Fx, converged=True, iterations=it, residual=res, gradf=gx)
    if gx is None:
        gx = ev.adjoint(Gx)
    res = crit(x, gx)
    return _Run(S=x, objective=Fx, converged=res <= tol, iterations=it, residual=res, gradf=gx)


# ------------------------------------------------------------------- evaluation


def population_error(
    channel: Channel, S0: np.ndarray, S: np.ndarray, n_test: int, L: int, seed: int,
    chunk: int = 4096,
) -> tuple[float, float, float]:
    """(clean error, its MC standard error, noisy error) on a fresh test set.

    Tokens (n_test, L, d) are drawn at once from default_rng([seed, 0x7E57]), then
    the test labels chunk by chunk; h is formed per chunk to bound memory.
    A channel with an exact ``population_error(S0, S)`` (linear) is not sampled:
    its clean error is exact (standard error 0) and the noisy one adds K Delta.
    """
    exact = optional_member(channel, "population_error")
    if exact is not None:
        clean = exact(S0, S)
        return clean, 0.0, clean + channel.K * channel.noise
    d = S0.shape[0]
    rng = np.random.default_rng([seed, TEST_SEED_TAG])
    X = sample_tokens(n_test, L, d, rng)
    clean = np.empty(n_test)
    noisy = np.empty(n_test)
    for a in range(0, n_test, chunk):
        Xc = X[a:a + chunk]
        H0 = preactivations(Xc, S0)
        g_hat = channel.outputs(preactivations(Xc, S))
        clean[a:a + chunk] = np.sum((channel.outputs(H0) - g_hat) ** 2, axis=1)
        y = channel.sample_labels(H0, rng)
        noisy[a:a + chunk] = np.sum((y - g_hat) ** 2, axis=1)
    return float(clean.mean()), float(clean.std(ddof=1) / math.sqrt(n_test)), float(noisy.mean())


# ------------------------------------------------------------------------ driver


def direct_erm_channel(
    problem: Problem,
    d: int,
    seed: int,
    *,
    channel: Channel | None = None,
    restarts: int = 3,
    tol: float = 1e-7,
    max_iter: int = 5000,
    data: Dataset | None = None,
    keep_matrix: bool = True,
    target_spectrum: str = "sampled",
    method: str = "auto",
    init_scale: float = 0.3,
    n_test: int | None = None,
    progress: bool = False,
) -> ChannelERMResult:
    """Minimise R(S) = sum_mu 1/2 ||y_mu - g(h_mu(S))||^2 + P(S) on one finite-d draw.

    Learner (``problem.learner``): factorised, P = lam d Tr S over S = W^T W /
    sqrt(p d), p = max(1, round(kappa d)); or elementwise, P = lam d ||S||_F^2 / 2.

    Solvers.  kappa < 1: L-BFGS over W (p x d).  kappa >= 1 (``method="auto"`` =
    ``"apg"``): accelerated proximal gradient over PSD S -- the nuclear-norm prox
    sets the discarded eigenvalues exactly to zero, so the low-rank minimisers
    that lam > 0 produces are reached at a linear rate, whereas over W the
    vanishing directions of W decay only at the rate of the smallest dual
    eigenvalue; ``method="lbfgs"`` uses L-BFGS over W with p = d (same problem:
    no rank cap).  Elementwise: L-BFGS over S.

    Starts.  The objective is non-convex for non-linear channels (and over W),
    so ``1 + restarts`` runs are made: start 0 is the zero-ish start (S = 0 for
    APG and the elementwise learner, W = 1e-4 N(0,1) over W -- W = 0 itself is a
    stationary point), starts 1..restarts are small random starts W =
    init_scale N(0, 1) (S = W^T W / sqrt(p d); elementwise: S symmetric with
    N(0, init_scale^2 / d) entries) from default_rng([seed, 0x5EED, r]).  The run
    with the lowest R is kept; every run's R/n, flag and iteration count are
    reported (``restart_losses``, ``restart_converged``, ``restart_iterations``).

    Stopping rule (relative projected-gradient norm, evaluated after every
    iteration): with Lambda = lambda_max(A*A) (power iteration) and t = 1/Lambda,
        factorised:  res = ||S - prox_t(S - t grad f(S))||_F / (t g0),
                     prox_t(B) = psd_soft_threshold(B, t lam d, rank = p if kappa < 1),
                     g0 = ||grad f(0)||_F + lam d sqrt(d);
        elementwise: res = ||grad f(S) + lam d S||_F / g0,  g0 = ||grad f(0)||_F,
    and converged means res <= tol.  (S - prox_t(...))/t is the gradient mapping of
    the PSD (rank-capped) problem: it vanishes exactly at its stationary points
    and, unlike the W-gradient, also certifies S = 0 and the zero eigenvalues.
    A run that ends above tol (``max_iter`` per start, or stagnation) is flagged
    ``converged=False`` and, if it is the one kept, a RuntimeWarning is issued.

    Reported: matrix_mse = ||Shat - S0||_F^2 / d; train_error = (1/n) sum_mu
    ||y_mu - g(h_mu(Shat))||^2; test_error = E||g(h(S0)) - g(h(Shat))||^2 (clean),
    estimated on n_test = max(n, 20000) fresh samples from default_rng([seed,
    0x7E57]) with standard error ``test_error_stderr`` = std/sqrt(n_test)
    (``test_error_noisy``: same with fresh noisy labels); loss = R/n; m, q,
    trace_per_d; rank_fraction = (number of nonzero eigenvalues of
    prox_t(S - t grad f(S)))/d for the factorised learner (the rank identified
    at the solution; over W tiny residual eigenvalues would otherwise count),
    #(|eigenvalue| > 1e-9 max) / d for the elementwise one.
    """
    d = check_dimension(d)
    seed = check_seed(seed)
    if not isinstance(problem, Problem):
        raise ValueError("problem must be a Problem")
    task = problem.task
    channel = task.channel_object if channel is None else check_channel(channel, task.L, DATA_MEMBERS)
    if isinstance(task.channel, str) and channel.name != task.channel:
        raise ValueError(f"channel is {channel.name!r} but problem.task.channel is {task.channel!r}")
    if not math.isclose(float(channel.noise), task.noise, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(f"channel has noise={channel.noise} but problem.task.noise={task.noise}")
    # beta and noise_at are optional on the channel; when present they must match the task
    if getattr(channel, "noise_at", task.noise_at) != task.noise_at:
        raise ValueError(f"channel has noise_at={channel.noise_at!r} but problem.task.noise_at={task.noise_at!r}")
    beta = getattr(channel, "beta", None)
    if beta is not None and not math.isclose(float(beta), task.beta, rel_tol=1e-12, abs_tol=0.0):
        raise ValueError(f"channel has beta={beta} but problem.task.beta={task.beta}")
    restarts = check_count("restarts", restarts, 0)
    max_iter = check_count("max_iter", max_iter, 1)
    try:
        tol = float(tol)
    except (TypeError, ValueError):
        raise ValueError(f"tol must be a number > 0, got {tol!r}") from None
    if not (tol > 0.0 and math.isfinite(tol)):
        raise ValueError(f"tol must be a number > 0, got {tol!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if method == "apg" and problem.learner.parameterisation == "elementwise":
        raise ValueError("method='apg' applies to the factorised learner only (elementwise uses L-BFGS)")
    init_scale = float(init_scale)
    if not (init_scale > 0.0 and math.isfinite(init_scale)):
        raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
    if data is None:
        data = generate_channel_dataset(problem, d, seed, channel, target_spectrum)
    elif not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset")
    elif data.d != d or data.seed != seed:
        raise ValueError(f"data was generated with d={data.d}, seed={data.seed}; got d={d}, seed={seed}")
    if data.L != task.L:
        raise ValueError(f"data has L={data.L} tokens but the problem has L={task.L}")
    M = int(channel.M)
    if data.y.ndim != 2 or data.y.shape != (data.n, M):
        raise ValueError(f"data.y must have shape ({data.n}, {M}) for this channel, got {data.y.shape}")
    n_test = max(data.n, N_TEST_MIN) if n_test is None else check_count("n_test", n_test, 2)

    t_start = time.time()
    lr = problem.learner
    lam = lr.lam
    thr = lam * d
    X, y = data.X, data.y
    ev = _Evaluator(X, y, channel)
    elementwise = lr.parameterisation == "elementwise"
    cap = rank_cap(problem, d)
    crit = _criterion(ev, thr, cap, elementwise, np.random.default_rng([seed, 0x11B]))

    if elementwise:
        solver = "lbfgs-S"
    elif method == "apg" or (method == "auto" and cap is None):
        solver = "apg"
    else:
        solver = "lbfgs-W"
    p = cap if cap is not None else d

    runs: list[_Run] = []
    for r in range(restarts + 1):
        rng = np.random.default_rng([seed, 0x5EED, r])
        if solver == "lbfgs-W":
            W0 = (1e-4 if r == 0 else init_scale) * rng.standard_normal((p, d))
            run = _solve_W(ev, W0, thr, crit, tol, max_iter, progress)
        elif solver == "apg":
            if r == 0:
                S_init = np.zeros((d, d))
            else:
                W0 = init_scale * rng.standard_normal((d, d))
                S_init = (W0.T @ W0) / d
            run = _solve_apg(ev, S_init, thr, cap, crit, tol, max_iter, progress)
        else:
            if r == 0:
                S_init = np.zeros((d, d))
            else:
                A = rng.standard_normal((d, d)) * (init_scale / math.sqrt(d))
                S_init = (A + A.T) / math.sqrt(2.0)
            run = _solve_S_elementwise(ev, S_init, thr, crit, tol, max_iter, progress)
        if progress:
            print(f"[erm_nonlinear] start {r}: R/n={run.objective / data.n:.12e} "
                  f"converged={run.converged} its={run.iterations} res={run.residual:.2e}",
                  file=sys.stderr)
        runs.append(run)
    best_i = int(np.argmin([run.objective for run in runs]))
    best = runs[best_i]
    if not best.converged:
        warnings.warn(
            f"direct_erm_channel did not converge (d={d}, seed={seed}, start {best_i}): "
            f"residual {best.residual:.3e} > tol {tol:.1e} after {best.iterations} iterations",
            RuntimeWarning,
            stacklevel=2,
        )

    S = best.S
    D = S - data.S0
    H = preactivations(X, S)
    train = float(np.sum((y - channel.outputs(H)) ** 2)) / data.n
    if elementwise:
        ev_abs = np.abs(np.linalg.eigvalsh(S))
        rank = int(np.sum(ev_abs > 1e-9 * max(1.0, float(ev_abs.max(initial=0.0)))))
    else:
        rank = crit.support(S, best.gradf)
    test, test_se, test_noisy = population_error(channel, data.S0, S, n_test, task.L, seed)
    return ChannelERMResult(
        d=d,
        n=data.n,
        seed=seed,
        matrix_mse=float(np.sum(D * D)) / d,
        train_error=train,
        test_error=test,
        loss=best.objective / data.n,
        m=float(np.sum(data.S0 * S)) / d,
        q=float(np.sum(S * S)) / d,
        rank_fraction=rank / d,
        trace_per_d=float(np.trace(S)) / d,
        iterations=int(best.iterations),
        residual=float(best.residual),
        S=S if keep_matrix else None,
        **stopping_status(best.converged, best.residual, tol, best.iterations),
        channel=str(channel.name),
        n_test=int(n_test),
        test_error_stderr=test_se,
        test_error_noisy=test_noisy,
        restart_losses=tuple(run.objective / data.n for run in runs),
        restart_converged=tuple(bool(run.converged) for run in runs),
        restart_iterations=tuple(int(run.iterations) for run in runs),
        best_restart=best_i,
        method=solver,
        seconds=time.time() - t_start,
    )
