"""Direct finite-d ERM for every output channel (docs/theory.md "Learners and the objective"):
one module, one driver.

Objective, in the exact normalisation of docs/theory.md (no 1/n, no 1/d):

    R(S) = sum_mu l(y_mu, h_mu(S)) + P(S),   l(y, h) = 1/2 ||y - g(h)||^2,
    h_mu,ab(S) = (x_mu,a^T S x_mu,b - delta_ab Tr S) / sqrt(d)   (all L x L entries),

with the learner's penalty P (:mod:`amp_attention.penalties`, one module each):

* factorised: S = W^T W / sqrt(p d), W in R^{p x d}, p = max(1, round(kappa d)),
      P(S) = lam d Tr S = (lam / sqrt(kappa)) ||W||_F^2;
* elementwise: S symmetric, unconstrained, P(S) = lam d ||S||_F^2 / 2;
* symmetric: S symmetric of either sign, P(S) = lam d ||S||_*.

Writing f(S) = sum_mu l(y_mu, h_mu(S)) and G_mu,ab = d l / d h_ab (all L^2 entries
treated as independent, as the channel returns them), the gradient on Sym(d) is
grad f(S) = A*(G) (:func:`~amp_attention.operators.preactivations_adjoint`) and

    dR/dS = A*(G) + dP/dS (``penalty.gradient``: lam d I, lam d S, lam d U sign(Lambda) U^T),
    dR/dW by the penalty's chain rule (``penalty.objective_weights``; e.g. 2 W (dR/dS) / sqrt(p d)).

Memory is O(n L d + d^2): S enters only through (nL x d) @ (d x d) products.
The minimisers and the stopping rule live in :mod:`amp_attention.optim`; what
is chosen depends on what the channel can do (``convex``, ``outputs_are_h``),
never on its name (see :func:`direct_erm`).
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from .channels.base import DATA_MEMBERS, Channel, check_channel, optional_member
from .checks import OneOf, Real, check_args, check_count, check_dimension, check_seed
from .data import Dataset, generate_dataset, sample_tokens
from .operators import (check_token_dtype, measure, measure_adjoint, preactivations,
                        preactivations_adjoint, tokens_in, top_eigenvalue_sym)
from .optim import (Evaluator, OptimRun, ProjectedGradientCriterion, apg,
                    conjugate_gradient, lbfgs_over, projected_gradient_criterion)
from .penalties import Penalty, make_penalty
from .result import Result, Status, outcome
from .spec import Problem, check_problem
from .threads import under_thread_policy

__all__ = [
    "ERMResult",
    "ERMStatistics",
    "channel_loss_and_grad",
    "direct_erm",
    "erm_statistics",
    "kkt_residual",
    "objective_S",
    "objective_W",
    "population_error",
    "rank_cap",
]

#: default stopping tolerance with float32 tokens: their gradients carry a relative
#: rounding error that stalls the projected-gradient residual near 3e-5 (measured at d = 64)
FLOAT32_TOL = 1e-4

#: seed tag of the fresh test set used for the population error
TEST_SEED_TAG = 0x7E57
#: minimum number of test samples
N_TEST_MIN = 20000
#: solver choices for the factorised learner
METHODS = ("auto", "apg", "lbfgs")

#: numeric fields of ERMResult averaged by :func:`erm_statistics`
STAT_FIELDS = ("matrix_mse", "train_error", "test_error", "loss", "m", "q", "rank_fraction",
               "trace_per_d", "iterations", "residual")


@dataclass(frozen=True, eq=False)
class ERMResult(Result):
    """Outcome of one direct-ERM run at dimension d (:func:`direct_erm`); success /
    status / message as in :class:`~amp_attention.result.Result` (status converged or
    max_iter).

    matrix_mse ||Shat - S0||_F^2 / d; train_error (1/n) sum_mu ||y_mu - g(h_mu(Shat))||^2;
    test_error the clean population error E||g(h(S0)) - g(h(Shat))||^2 (exact for a
    channel with ``population_error``, else a Monte-Carlo estimate on ``n_test``
    fresh samples with standard error ``test_error_stderr``); test_error_noisy
    the same with fresh noisy labels; loss R/n; m = Tr(S0 Shat)/d, q =
    Tr(Shat^2)/d; rank_fraction, trace_per_d; iterations and residual of the run
    kept; restart_losses / restart_converged / restart_iterations of every start,
    best_restart the one kept; channel (name), method ("apg", "cg", "lbfgs-W",
    "lbfgs-S"), seconds (wall time of the call); S the matrix (keep_matrix).
    """

    d: int
    n: int
    #: seed of the data set (and of the initialisations)
    seed: int
    matrix_mse: float
    train_error: float
    test_error: float
    loss: float
    m: float
    q: float
    rank_fraction: float
    trace_per_d: float
    iterations: int
    residual: float
    S: np.ndarray | None = field(default=None, repr=False)
    channel: str = ""
    n_test: int = 0
    test_error_stderr: float = math.nan
    test_error_noisy: float = math.nan
    restart_losses: tuple[float, ...] = ()
    restart_converged: tuple[bool, ...] = ()
    restart_iterations: tuple[int, ...] = ()
    best_restart: int = 0
    method: str = ""
    seconds: float = field(default=math.nan, compare=False)  # wall time is not a result

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("S",)


def stopping_status(converged: bool, residual: float, tol: float,
                    iterations: int) -> dict[str, Any]:
    """success / status / message of an iterative minimiser with a residual stopping rule."""
    return outcome(converged, Status.MAX_ITER,
                   f"residual {residual:.3e} > tol {tol:.1e} after {iterations} iterations")


def rank_cap(problem: Problem, d: int) -> int | None:
    """The learner's rank cap at d (p = max(1, round(kappa d)) for a factorised learner
    with kappa < 1), else None."""
    return problem.learner.penalty.rank(d)


def penalty_of(lam: float | Penalty, parameterisation: str = "factorised",
               rank: int | None = None, d: int | None = None) -> Penalty:
    """A :class:`~amp_attention.penalties.Penalty` given as itself, or as ``lam`` and a
    registered ``parameterisation`` (with a rank cap ``rank`` at dimension ``d``)."""
    if isinstance(lam, Penalty):
        return lam
    kappa = 1.0 if rank is None or d is None else rank / d
    return make_penalty(parameterisation, lam, kappa)


# ------------------------------------------------------------------ evaluators


class ChannelEvaluator:
    """f(S) = sum_mu l(y_mu, h_mu(S)) through the full L x L pre-activations and the
    channel's ``batch_loss_and_grad_h``; grad f = A*(G); with evaluation counters.

    h is kept separate so that APG can extrapolate h(y_k) from cached h(x_k),
    h(x_{k-1}) without a forward product.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, channel: Channel):
        self.X, self.y, self.channel = X, y, channel
        self.d = int(X.shape[2])
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

    def operator_norm_sq(self, rng: np.random.Generator, iters: int = 30) -> float:
        """lambda_max(A*A) on Sym(d) for the full L x L pre-activation map."""
        return top_eigenvalue_sym(lambda v: preactivations_adjoint(self.X, preactivations(self.X, v)),
                                  self.d, rng, iters)


class LeastSquaresEvaluator(ChannelEvaluator):
    """The fast path of a channel whose outputs are h itself (``outputs_are_h``):
    f(S) = 1/2 ||y - B(S)||^2 with B the K upper-triangle pre-activations
    (:func:`~amp_attention.operators.measure`), so only K of the L^2 entries of h
    are formed.  Same f and grad f as :class:`ChannelEvaluator` with the linear
    channel, to rounding."""

    def forward(self, S: np.ndarray) -> np.ndarray:
        self.n_forward += 1
        return measure(self.X, S)

    def loss_from_h(self, H: np.ndarray) -> tuple[float, np.ndarray]:
        R = H - self.y
        return 0.5 * float(np.sum(R * R)), R

    def adjoint(self, G: np.ndarray) -> np.ndarray:
        self.n_adjoint += 1
        return measure_adjoint(self.X, G)

    def operator_norm_sq(self, rng: np.random.Generator, iters: int = 30) -> float:
        """lambda_max(B*B) on Sym(d) for the upper-triangle measurements."""
        return top_eigenvalue_sym(lambda v: measure_adjoint(self.X, measure(self.X, v)), self.d,
                                  rng, iters)


def evaluator_for(X: np.ndarray, y: np.ndarray, channel: Channel) -> ChannelEvaluator:
    """The least-squares evaluator for ``outputs_are_h`` channels, else the generic one."""
    if optional_member(channel, "outputs_are_h"):
        return LeastSquaresEvaluator(X, y, channel)
    return ChannelEvaluator(X, y, channel)


# ------------------------------------------------------------------- objective


def channel_loss_and_grad(
    X: np.ndarray, y: np.ndarray, S: np.ndarray, channel: Channel
) -> tuple[float, np.ndarray]:
    """f(S) = sum_mu 1/2 ||y_mu - g(h_mu(S))||^2 and grad f(S) = A*(G) on Sym(d)."""
    return ChannelEvaluator(X, y, channel).f_and_grad(S)


def objective_S(
    X: np.ndarray,
    y: np.ndarray,
    S: np.ndarray,
    channel: Channel,
    lam: float | Penalty,
    parameterisation: str = "factorised",
    evaluator: type[ChannelEvaluator] = ChannelEvaluator,
) -> tuple[float, np.ndarray]:
    """R(S) = f(S) + P(S) and dR/dS = A*(G) + dP/dS on Sym(d) (Frobenius gradient), P the
    penalty ``lam`` (a :class:`~amp_attention.penalties.Penalty`, or the weight decay of
    the registered ``parameterisation``): factorised lam d Tr S (gradient lam d I),
    elementwise lam d ||S||_F^2 / 2 (lam d S), symmetric lam d ||S||_* (a subgradient);
    f and A*(G) from ``evaluator(X, y, channel)`` (default: the channel's loss; e.g.
    :class:`~amp_attention.seq2seq.Seq2SeqEvaluator` for the seq2seq loss).
    """
    pen = penalty_of(lam, parameterisation)
    f, g = evaluator(X, y, channel).f_and_grad(S)
    return f + pen.value(S), g + pen.gradient(S)


def objective_W(
    X: np.ndarray, y: np.ndarray, W: np.ndarray, channel: Channel, lam: float | Penalty,
    evaluator: type[ChannelEvaluator] = ChannelEvaluator,
    parameterisation: str = "factorised",
) -> tuple[float, np.ndarray]:
    """R and dR/dW in the penalty's trainable weights (factorised: R(W) = f(W^T W /
    sqrt(p d)) + (lam / sqrt(kappa)) ||W||_F^2, dR/dW = 2 W (dR/dS) / sqrt(p d);
    ``lam``, ``parameterisation`` and ``evaluator`` as in :func:`objective_S`)."""
    pen = penalty_of(lam, parameterisation)
    return pen.objective_weights(W, evaluator(X, y, channel).f_and_grad)


def kkt_residual(
    X: np.ndarray,
    y: np.ndarray,
    S: np.ndarray,
    channel: Channel,
    lam: float,
    parameterisation: str = "factorised",
    rank: int | None = None,
    seed: int = 0,
    *,
    penalty: Penalty | None = None,
) -> float:
    """First-order (KKT) residual of the ERM objective of docs/theory.md "Learners and the
    objective" at S.

    The relative projected-gradient norm that :func:`direct_erm` stops on
    (:class:`~amp_attention.optim.ProjectedGradientCriterion`): ||S - prox_t(S - t grad f(S))||_F / (t g0) for a
    penalty with a prox (PSD trace penalty lam d with an optional rank cap ``rank``, or
    the symmetric nuclear norm), or ||grad f(S) + dP/dS||_F / g0 for a smooth one
    (element-wise); zero exactly at stationary points.  ``penalty`` (a
    :class:`~amp_attention.penalties.Penalty`) replaces lam / parameterisation / rank.
    ``seed`` drives the power iteration for t.
    """
    ev = evaluator_for(X, y, check_channel(channel, X.shape[1], DATA_MEMBERS))
    pen = penalty if penalty is not None else penalty_of(lam, parameterisation, rank, X.shape[2])
    crit = projected_gradient_criterion(ev, pen, np.random.default_rng([seed, 0x11B]))
    _, gradf = ev.f_and_grad(np.asarray(S, dtype=float))
    return crit(np.asarray(S, dtype=float), gradf)


# ------------------------------------------------------------------ solvers


def _solve_ridge(ev: Evaluator, penalty: Penalty, tol: float, max_iter: int,
                 progress: bool) -> OptimRun:
    """A quadratic penalty P = c ||S||_F^2 / 2 (element-wise, c = lam d) with a
    least-squares f: (B*B + c I) S = B* y by conjugate gradient (c read off the penalty's
    gradient at I); its relative residual is the stopping rule's."""
    d = ev.d
    c = float(penalty.gradient(np.eye(d))[0, 0])
    S, ok, its, res = conjugate_gradient(lambda V: ev.adjoint(ev.forward(V)) + c * V,
                                         ev.adjoint(ev.y), tol, max_iter, progress)
    f, gf = ev.f_and_grad(S)
    return OptimRun(S=S, objective=f + penalty.value(S), converged=ok,
                    iterations=its, residual=res, gradf=gf)


def _solve_weights(
    ev: Evaluator,
    P0: np.ndarray,
    penalty: Penalty,
    crit: ProjectedGradientCriterion,
    tol: float,
    max_iter: int,
    progress: bool,
) -> OptimRun:
    """L-BFGS over the penalty's trainable weights P (W in R^{p x d}, [U; V], or S
    itself): R(P) = f(S(P)) + P written in the weights.

    For S itself, optimising over all d^2 entries with the symmetric gradient is the
    Frobenius metric of Sym(d) (off-diagonal pairs counted twice), better conditioned
    than the d(d+1)/2 upper-triangle coordinates; the gradient is symmetric, so the
    iterates stay symmetric up to rounding and the antisymmetric part is flat.
    """
    shape = P0.shape

    def weights(x: np.ndarray) -> np.ndarray:
        return x.reshape(shape)

    return lbfgs_over(ev, P0, lambda x: penalty.S_from_weights(weights(x)),
                      lambda x, S: penalty.weights_penalty(weights(x))[0],
                      lambda x, S, gf: penalty.objective_weights(weights(x), lambda _S: (0.0, gf))[1],
                      crit, tol, max_iter, progress, "W" if penalty.factorised else "S")


# ---------------------------------------------------------------- evaluation


def population_error(
    channel: Channel, S0: np.ndarray, S: np.ndarray, n_test: int, L: int, seed: int,
    chunk: int = 4096,
    per_input: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> tuple[float, float, float]:
    """(clean error, its MC standard error, noisy error) on a fresh test set.

    Tokens (n_test, L, d) are drawn at once from default_rng([seed, 0x7E57]), then
    the test labels chunk by chunk; h is formed per chunk to bound memory.
    ``per_input(X, y, g_hat)`` gives each input's error from its tokens, label and
    prediction (default: ||y - g_hat||^2).
    A channel with an exact ``population_error(S0, S)`` (linear) is not sampled
    (unless ``per_input`` is given): its clean error is exact (standard error 0) and
    the noisy one adds K Delta.
    """
    exact = optional_member(channel, "population_error")
    if exact is not None and per_input is None:
        clean = exact(S0, S)
        return clean, 0.0, clean + channel.K * channel.noise
    if per_input is None:
        def per_input(_X, y, g):
            return np.sum((y - g) ** 2, axis=1)
    d = S0.shape[0]
    rng = np.random.default_rng([seed, TEST_SEED_TAG])
    X = sample_tokens(n_test, L, d, rng)
    clean = np.empty(n_test)
    noisy = np.empty(n_test)
    for a in range(0, n_test, chunk):
        Xc = X[a:a + chunk]
        H0 = preactivations(Xc, S0)
        g_hat = channel.outputs(preactivations(Xc, S))
        clean[a:a + chunk] = per_input(Xc, channel.outputs(H0), g_hat)
        noisy[a:a + chunk] = per_input(Xc, channel.sample_labels(H0, rng), g_hat)
    return float(clean.mean()), float(clean.std(ddof=1) / math.sqrt(n_test)), float(noisy.mean())


# ------------------------------------------------------------------------ driver


def _check_channel_matches(channel: Channel, task) -> None:
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


def _choose_solver(channel: Channel, penalty: Penalty, method: str, cap: int | None) -> str:
    convex = bool(optional_member(channel, "convex"))
    if penalty.smooth:
        return "cg" if convex and optional_member(channel, "outputs_are_h") else "lbfgs-S"
    if method == "apg" or (method == "auto" and (convex or cap is None)):
        return "apg"
    return "lbfgs-W"


def _start(solver: str, r: int, penalty: Penalty, p: int, d: int, init_scale: float, seed: int,
           S_init: np.ndarray | None) -> np.ndarray:
    """Start r of a solver: the zero-ish start (r = 0) or a small random one."""
    rng = np.random.default_rng([seed, 0x5EED, r])
    if solver == "lbfgs-W":
        return penalty.initial_weights(d, 1e-4 if r == 0 else init_scale, rng, p)
    if r == 0:
        return np.zeros((d, d)) if S_init is None else S_init
    if solver == "apg":
        # a small PSD matrix: inside the domain of every penalty with a prox
        W0 = init_scale * rng.standard_normal((d, d))
        return (W0.T @ W0) / d
    A = rng.standard_normal((d, d)) * (init_scale / math.sqrt(d))
    return (A + A.T) / math.sqrt(2.0)


def default_tol(convex: bool, dtype: str = "float64") -> float:
    """The ERM stopping tolerance unless one is given: 1e-9 for a convex channel, 1e-7
    otherwise, at least FLOAT32_TOL with float32 tokens."""
    tol = 1e-9 if convex else 1e-7
    return max(tol, FLOAT32_TOL) if dtype == "float32" else tol


@under_thread_policy
def direct_erm(
    problem: Problem,
    d: int,
    seed: int,
    *,
    channel: Channel | None = None,
    restarts: int | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    data: Dataset | None = None,
    keep_matrix: bool = True,
    target_spectrum: str = "sampled",
    method: str = "auto",
    init_scale: float = 0.3,
    n_test: int | None = None,
    S_init: np.ndarray | None = None,
    progress: bool = False,
    dtype: str = "float64",
) -> ERMResult:
    """Minimise R(S) = sum_mu 1/2 ||y_mu - g(h_mu(S))||^2 + P(S) on one finite-d draw.

    The channel is ``problem.task``'s (``channel`` overrides it with an object
    that has the data members of the contract, e.g. an independent reference).

    Learner (``problem.learner``, its :mod:`~amp_attention.penalties` object): factorised,
    P = lam d Tr S over S = W^T W / sqrt(p d), p = max(1, round(kappa d)); elementwise,
    P = lam d ||S||_F^2 / 2; symmetric, P = lam d ||S||_* (accelerated proximal gradient
    with the two-sided prox, or ``method="lbfgs"`` over S = (U^T U - V^T V)/sqrt(p d)).
    A smooth penalty (elementwise) is solved as described for the element-wise learner
    below, one with a prox as for the factorised one.

    Solvers (``method="auto"``).  A convex channel (``convex``: the linear one)
    takes accelerated proximal gradient over PSD S with the (rank-capped) prox
    for every kappa, and for the element-wise learner conjugate gradient on the
    ridge normal equations when its outputs are h itself (``outputs_are_h``:
    the evaluator then forms only the K upper-triangle entries of h).
    Otherwise, kappa < 1: L-BFGS over W (p x d).  kappa >= 1 (``"apg"``):
    accelerated proximal gradient over PSD S -- the nuclear-norm prox
    sets the discarded eigenvalues exactly to zero, so the low-rank minimisers
    that lam > 0 produces are reached at a linear rate, whereas over W the
    vanishing directions of W decay only at the rate of the smallest dual
    eigenvalue; ``method="lbfgs"`` uses L-BFGS over W with p = d (same problem:
    no rank cap).  Elementwise: L-BFGS over S.

    Starts.  The objective is non-convex for non-linear channels (and over W),
    so ``1 + restarts`` runs are made (``restarts`` defaults to 0 for a convex
    channel, 3 otherwise; ``tol`` and ``max_iter`` default to 1e-9 and 20000
    for a convex channel, 1e-7 and 5000 otherwise): start 0 is the zero-ish start (S = 0 for
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
    #(|eigenvalue| > 1e-9 max) / d for the elementwise one.  A channel with an
    exact ``population_error`` (linear) reports it instead of a test set
    (standard error 0).  ``S_init`` replaces start 0 of APG (a warm start).

    ``dtype="float32"`` runs the data-size products (the GEMMs over the n L tokens) in
    float32 (:mod:`amp_attention.operators`); S, the gradients and the optimiser stay
    float64.  Its rounding stalls the projected-gradient residual near 3e-5, so ``tol``
    defaults to FLOAT32_TOL = 1e-4 there; the errors agree with float64 within seed
    error (tests/test_erm_linear.py; docs/performance.md).
    """
    check_problem(problem)
    d = check_dimension(d)
    seed = check_seed(seed)
    task = problem.task
    channel = task.channel_object if channel is None else check_channel(channel, task.L, DATA_MEMBERS)
    _check_channel_matches(channel, task)
    convex = bool(optional_member(channel, "convex"))
    restarts = check_count("restarts", 0 if restarts is None and convex else
                           3 if restarts is None else restarts, 0)
    max_iter = check_count("max_iter", (20000 if convex else 5000) if max_iter is None
                           else max_iter, 1)
    check_token_dtype(dtype)
    positive = Real(0.0, math.inf, lo_open=True, hi_open=True)
    tol, method, init_scale = check_args(
        {"tol": positive, "method": OneOf(METHODS), "init_scale": positive},
        tol=default_tol(convex, dtype) if tol is None else tol, method=method,
        init_scale=init_scale).values()
    penalty = problem.learner.penalty
    if method == "apg" and penalty.smooth:
        raise ValueError(f"method='apg' applies to a penalty with a proximal step (the "
                         f"{penalty.name} learner's is smooth and uses L-BFGS)")
    if data is None:
        data = generate_dataset(problem, d, seed, target_spectrum, channel=channel)
    elif not isinstance(data, Dataset):
        raise ValueError("data must be a Dataset")
    elif data.d != d or data.seed != seed:
        raise ValueError(f"data was generated with d={data.d}, seed={data.seed}; got d={d}, seed={seed}")
    if data.L != task.L:
        raise ValueError(f"data has L={data.L} tokens but the problem has L={task.L}")
    M = int(channel.M)
    if data.y.ndim != 2 or data.y.shape != (data.n, M):
        raise ValueError(f"data.y must have shape ({data.n}, {M}) for this channel, got {data.y.shape}")
    if S_init is not None:
        S_init = np.array(S_init, dtype=float)
        if S_init.shape != (d, d):
            raise ValueError(f"S_init must have shape ({d}, {d}), got {S_init.shape}")
        S_init = 0.5 * (S_init + S_init.T)
    n_test = max(data.n, N_TEST_MIN) if n_test is None else check_count("n_test", n_test, 2)

    t_start = time.time()
    X, y = tokens_in(data.X, dtype), data.y
    ev = evaluator_for(X, y, channel)
    cap = penalty.rank(d)
    crit = projected_gradient_criterion(ev, penalty, np.random.default_rng([seed, 0x11B]))
    solver = _choose_solver(channel, penalty, method, cap)
    p = cap if cap is not None else d

    runs: list[OptimRun] = []
    for r in range(restarts + 1):
        x0 = _start(solver, r, penalty, p, d, init_scale, seed, S_init)
        if solver == "apg":
            # the curvature bound 1/t is tight for a quadratic f: growing the step
            # there only buys rejected steps and stalls the momentum (measured: 354
            # iterations to 1e-9 without growth, no convergence in 20000 with it)
            run = apg(ev, x0, penalty, crit, tol, max_iter, progress,
                      step_growth=1.0 if convex else 1.05)
        elif solver == "cg":
            run = _solve_ridge(ev, penalty, tol, max_iter, progress)
        else:
            run = _solve_weights(ev, x0, penalty, crit, tol, max_iter, progress)
        if progress:
            print(f"[erm] start {r}: R/n={run.objective / data.n:.12e} "
                  f"converged={run.converged} its={run.iterations} res={run.residual:.2e}",
                  file=sys.stderr)
        runs.append(run)
    best_i = int(np.argmin([run.objective for run in runs]))
    best = runs[best_i]
    if not best.converged:
        warnings.warn(
            f"direct_erm did not converge (d={d}, seed={seed}, start {best_i}): "
            f"residual {best.residual:.3e} > tol {tol:.1e} after {best.iterations} iterations",
            RuntimeWarning,
            stacklevel=2,
        )

    S = best.S
    D = S - data.S0
    train = float(np.sum((y - channel.outputs(preactivations(X, S))) ** 2)) / data.n
    rank = crit.support(S, best.gradf)
    test, test_se, test_noisy = population_error(channel, data.S0, S, n_test, task.L, seed)
    return ERMResult(
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


# ------------------------------------------------------------------ statistics


@dataclass(frozen=True)
class ERMStatistics:
    """:func:`direct_erm` over seeds: per-field mean and standard error.

    ``mean`` / ``stderr``: {field: value} over :data:`STAT_FIELDS`, stderr =
    std(ddof=1)/sqrt(#seeds) (NaN for a single seed: not defined); ``not_converged``: the seeds
    whose run did not converge; ``results``: every :class:`ERMResult`.
    """

    #: dimension
    d: int
    #: training samples per seed
    n: int
    seeds: tuple[int, ...]
    mean: dict[str, float]
    stderr: dict[str, float]
    not_converged: tuple[int, ...]
    results: tuple[ERMResult, ...] = field(repr=False)

    @property
    def all_converged(self) -> bool:
        return not self.not_converged


@under_thread_policy
def erm_statistics(
    problem: Problem,
    d: int,
    seeds: Iterable[int],
    *,
    wrap: Callable[[list[int]], Iterable[int]] | None = None,
    **kw: Any,
) -> ERMStatistics:
    """Run :func:`direct_erm` (keyword arguments ``kw``) for each seed; mean and
    standard error of each numeric field.  ``wrap`` (e.g. a progress bar) sees the
    seeds as they are run; a RuntimeWarning names the seeds that did not converge."""
    d = check_dimension(d)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must be a non-empty list of integers >= 0")
    seeds = [check_seed(s) for s in seeds]
    results = [direct_erm(problem, d, s, **kw) for s in (wrap(seeds) if wrap else seeds)]
    k = len(results)
    mean: dict[str, float] = {}
    stderr: dict[str, float] = {}
    for name in STAT_FIELDS:
        v = np.array([float(getattr(r, name)) for r in results])
        mean[name] = float(np.mean(v))
        # one seed: no standard error (NaN, null in JSON), not a claim of zero
        stderr[name] = float(np.std(v, ddof=1) / math.sqrt(k)) if k > 1 else math.nan
    bad = tuple(r.seed for r in results if not r.converged)
    if bad:
        warnings.warn(f"erm_statistics: seeds {list(bad)} did not converge", RuntimeWarning,
                      stacklevel=2)
    return ERMStatistics(d=d, n=results[0].n, seeds=tuple(seeds), mean=mean, stderr=stderr,
                         not_converged=bad, results=tuple(results))
