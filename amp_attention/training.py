"""Direct empirical risk minimisation at finite d, linear channel (THEORY 2).

With f(S) = 1/2 sum_mu sum_{a<=b} (y_mu,ab - h_ab(S; x_mu))^2 (this exact
normalisation: no 1/n, no 1/d, upper triangle only):

* factorised learner (S = W^T W / sqrt(p d), weight decay on W):
      R(S) = f(S) + lam * d * Tr S,   S PSD, rank S <= p = max(1, round(kappa d))
  (no rank cap when kappa >= 1).  Solved by accelerated proximal gradient
  (FISTA) with adaptive restart; the prox of lam d Tr + PSD (+ rank cap) is the
  eigenvalue soft threshold :func:`~amp_attention.spectral_maps.psd_soft_threshold`.
  Convex for kappa >= 1; with a rank cap the prox is the exact projection onto a
  non-convex set and the result is a stationary point.
* elementwise learner:
      R(S) = f(S) + lam * d * ||S||_F^2 / 2,   S symmetric, unconstrained,
  i.e. ridge regression (B*B + lam d I) S = B* y, solved by conjugate gradient on
  Sym(d) with the Frobenius inner product (B = upper_triangle o A).

Reported errors (:class:`ERMResult`):
  matrix_mse  = ||Shat - S0||_F^2 / d = Q0 - 2m + q,
  train_error = (1/n) sum_mu sum_{a<=b} (y_ab - h_ab(Shat))^2,
  test_error  = (2L + L(L-1)/2) ||Shat - S0||_F^2 / d  (exact population value of
                E sum_{a<=b} (h_ab(S0) - h_ab(Shat))^2: E h_aa(D)^2 = 2 Tr D^2 / d,
                E h_ab(D)^2 = Tr D^2 / d for a != b; clean targets),
  loss        = R(Shat) / n.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from .channels.base import optional_member
from .checks import check_dimension, check_seed
from .data import Dataset, generate_dataset
from .operators import measure, measure_adjoint, top_eigenvalue_sym
from .result import Result, Status, outcome
from .spec import Problem
from .spectral_maps import psd_soft_threshold

#: numeric fields of ERMResult averaged by :func:`erm_statistics`
STAT_FIELDS = (
    "matrix_mse",
    "train_error",
    "test_error",
    "loss",
    "m",
    "q",
    "rank_fraction",
    "trace_per_d",
    "iterations",
    "residual",
)


@dataclass(frozen=True, eq=False)
class ERMResult(Result):
    """Outcome of one direct-ERM run at dimension d (see module docstring); success /
    status / message as in :class:`~amp_attention.result.Result` (status converged or
    max_iter)."""

    d: int
    n: int
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

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("S",)


def stopping_status(converged: bool, residual: float, tol: float,
                    iterations: int) -> dict[str, Any]:
    """success / status / message of an iterative minimiser with a residual stopping rule."""
    return outcome(converged, Status.MAX_ITER,
                   f"residual {residual:.3e} > tol {tol:.1e} after {iterations} iterations")


def rank_cap(problem: Problem, d: int) -> int | None:
    """p = max(1, round(kappa d)) for a factorised learner with kappa < 1, else None."""
    lr = problem.learner
    if lr.parameterisation == "factorised" and lr.kappa < 1.0:
        return max(1, int(round(lr.kappa * d)))
    return None


def _inner(A: np.ndarray, B: np.ndarray) -> float:
    return float(np.vdot(A, B))


def estimate_lipschitz(X: np.ndarray, rng: np.random.Generator, iters: int = 30) -> float:
    """Top eigenvalue of B*B on Sym(d) for the upper-triangle measurements B (the
    Lipschitz constant of grad f); the caller adds a safety factor and backtracks."""
    return top_eigenvalue_sym(lambda v: measure_adjoint(X, measure(X, v)), X.shape[2], rng, iters)


def _summarise(
    data: Dataset,
    problem: Problem,
    S: np.ndarray,
    penalty: float,
    converged: bool,
    iterations: int,
    residual: float,
    keep_matrix: bool,
    tol: float,
) -> ERMResult:
    d, n, L = data.d, data.n, data.L
    D = S - data.S0
    mse = float(np.sum(D * D)) / d
    r = data.y - measure(data.X, S)
    sq = float(np.sum(r * r))
    ev = np.linalg.eigvalsh(S)
    # |eigenvalue| so that the elementwise learner (not PSD) counts negative
    # directions too; identical to "eigenvalue > threshold" for PSD S.
    big = np.abs(ev)
    rank = int(np.sum(big > 1e-9 * max(1.0, float(big.max(initial=0.0)))))
    return ERMResult(
        d=d,
        n=n,
        seed=data.seed,
        matrix_mse=mse,
        train_error=sq / n,
        test_error=(2 * L + L * (L - 1) / 2) * mse,
        loss=(0.5 * sq + penalty) / n,
        m=float(np.sum(data.S0 * S)) / d,
        q=float(np.sum(S * S)) / d,
        rank_fraction=rank / d,
        trace_per_d=float(np.trace(S)) / d,
        iterations=int(iterations),
        residual=float(residual),
        S=S if keep_matrix else None,
        **stopping_status(converged, residual, tol, iterations),
    )


def _fista_factorised(
    X: np.ndarray,
    y: np.ndarray,
    lam: float,
    rank: int | None,
    S0: np.ndarray,
    lip: float,
    tol: float,
    max_iter: int,
    progress: bool,
) -> tuple[np.ndarray, bool, int, float]:
    """min_S 1/2||B(S) - y||^2 + lam d Tr S over PSD S (rank <= ``rank``).

    FISTA with (i) gradient-based adaptive restart (O'Donoghue-Candes), (ii) a
    monotone safeguard: a momentum step that raises the objective is discarded
    and the momentum reset, and (iii) backtracking on the step if the
    sufficient-decrease inequality fails (the power-iteration Lipschitz
    estimate can be slightly low).  B is linear, so B(y_k) is extrapolated from
    the cached B(x_k), B(x_{k-1}): one forward and one adjoint per iteration.

    Stops when the fixed-point residual ||S - prox(S - step grad f(S))||_F /
    max(||S||_F, 1e-12) < tol, evaluated exactly at the current iterate (the
    cheap ||z - y||/||z|| proxy only decides when to pay for that check).
    Returns (S, converged, iterations, residual).
    """
    d = X.shape[2]
    thr = lam * d
    x = S0.copy()
    hx = measure(X, x)
    Fx = 0.5 * float(np.sum((hx - y) ** 2)) + thr * float(np.trace(x))
    x_prev, hx_prev = x, hx
    t = 1.0
    residual = math.inf
    t_start = time.time()

    def fixed_point_residual(S: np.ndarray, hS: np.ndarray, step: float) -> float:
        g = measure_adjoint(X, hS - y)
        P, _, _ = psd_soft_threshold(S - step * g, step * thr, 1.0, rank=rank)
        return float(np.linalg.norm(S - P)) / max(float(np.linalg.norm(S)), 1e-12)

    for it in range(1, max_iter + 1):
        t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        beta = (t - 1.0) / t_next
        if beta > 0.0:
            yv = x + beta * (x - x_prev)
            hy = hx + beta * (hx - hx_prev)
        else:
            yv, hy = x, hx
        ry = hy - y
        fy = 0.5 * float(np.sum(ry * ry))
        g = measure_adjoint(X, ry)
        while True:
            step = 1.0 / lip
            z, _, _ = psd_soft_threshold(yv - step * g, step * thr, 1.0, rank=rank)
            hz = measure(X, z)
            fz = 0.5 * float(np.sum((hz - y) ** 2))
            diff = z - yv
            model = fy + _inner(g, diff) + 0.5 * lip * float(np.sum(diff * diff))
            # relative slack: near convergence both sides agree to rounding only
            if fz <= model + 1e-12 * max(abs(model), 1.0):
                break
            lip *= 2.0
        Fz = fz + thr * float(np.trace(z))
        if Fz > Fx and beta > 0.0:
            # momentum overshoot: keep x, restart from a plain proximal step
            t = 1.0
            x_prev, hx_prev = x, hx
            continue
        restart = _inner(yv - z, z - x) > 0.0
        x_prev, hx_prev = x, hx
        x, hx, Fx = z, hz, Fz
        t = 1.0 if restart else t_next
        cheap = float(np.linalg.norm(diff)) / max(float(np.linalg.norm(z)), 1e-12)
        if progress and it % 200 == 0:
            print(
                f"[direct_erm] it={it} F={Fx:.10e} step-res={cheap:.2e} "
                f"L={lip:.3e} {time.time() - t_start:.1f}s",
                file=sys.stderr,
            )
        if cheap < tol:
            residual = fixed_point_residual(x, hx, 1.0 / lip)
            if residual < tol:
                return x, True, it, residual
    residual = fixed_point_residual(x, hx, 1.0 / lip)
    return x, residual < tol, max_iter, residual


def _cg_elementwise(
    X: np.ndarray, y: np.ndarray, lam: float, tol: float, max_iter: int, progress: bool
) -> tuple[np.ndarray, bool, int, float]:
    """Solve (B*B + lam d I) S = B* y on Sym(d) by conjugate gradient.

    When the recursive residual passes ``tol`` the true residual is recomputed
    and, if it has drifted above ``tol``, CG is restarted from the current
    iterate.  A non-positive curvature <p, Op> (lam = 0 and a singular B*B)
    stops the iteration as not converged.  Returns (S, converged, iterations,
    relative residual ||b - Op S||/||b||).
    """
    d = X.shape[2]
    shift = lam * d

    def op(S: np.ndarray) -> np.ndarray:
        return measure_adjoint(X, measure(X, S)) + shift * S

    b = measure_adjoint(X, y)
    bnorm = float(np.linalg.norm(b))
    S = np.zeros((d, d))
    if bnorm == 0.0:
        return S, True, 0, 0.0
    r = b.copy()
    p = r.copy()
    rs = _inner(r, r)
    it = 0
    while it < max_iter:
        it += 1
        Ap = op(p)
        curv = _inner(p, Ap)
        if not curv > 0.0:
            break
        a = rs / curv
        S += a * p
        r -= a * Ap
        rs_new = _inner(r, r)
        if progress and it % 100 == 0:
            print(f"[direct_erm/cg] it={it} res={math.sqrt(rs_new) / bnorm:.2e}", file=sys.stderr)
        if math.sqrt(rs_new) / bnorm < tol:
            r = b - op(S)
            rs_new = _inner(r, r)
            if math.sqrt(rs_new) / bnorm < tol:
                return S, True, it, math.sqrt(rs_new) / bnorm
            p = r.copy()
            rs = rs_new
            continue
        p = r + (rs_new / rs) * p
        rs = rs_new
    res = float(np.linalg.norm(b - op(S))) / bnorm
    return S, res < tol, it, res


def direct_erm(
    problem: Problem,
    d: int,
    seed: int,
    *,
    tol: float = 1e-9,
    max_iter: int = 20000,
    data: Dataset | None = None,
    progress: bool = False,
    S_init: np.ndarray | None = None,
    keep_matrix: bool = True,
    target_spectrum: str = "sampled",
) -> ERMResult:
    """Minimise the finite-d ERM objective of THEORY 2 (linear channel) on one draw.

    factorised:  R(S) = f(S) + lam d Tr S, S PSD, rank S <= max(1, round(kappa d))
                 if kappa < 1 (FISTA, start S_init or 0);
    elementwise: R(S) = f(S) + lam d ||S||_F^2 / 2, S symmetric (CG on the normal
                 equations; ``S_init`` is ignored),
    with f(S) = 1/2 sum_mu sum_{a<=b} (y_ab - h_ab(S))^2.  ``data`` (from
    :func:`~amp_attention.data.generate_dataset`) is used instead of drawing a
    new dataset; its d and seed must match the arguments.  ``target_spectrum``
    ("sampled" or "quantile") is passed to the data generator.  A run that hits
    ``max_iter`` is returned with ``converged=False`` and a warning.
    """
    d = check_dimension(d)
    seed = check_seed(seed)
    if not isinstance(problem, Problem):
        raise ValueError("problem must be a Problem")
    if not optional_member(problem.task.channel_object, "outputs_are_h"):
        raise ValueError(f"direct_erm is the least-squares path of channels whose outputs are "
                         f"h itself (linear); channel {problem.task.channel_name!r}: use "
                         "direct_erm_channel")
    tol = float(tol)
    if not (tol > 0.0 and math.isfinite(tol)):
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if data is None:
        data = generate_dataset(problem, d, seed, target_spectrum)
    elif data.d != d or data.seed != seed:
        raise ValueError(
            f"data was generated with d={data.d}, seed={data.seed}; got d={d}, seed={seed}"
        )
    if data.L != problem.task.L:
        raise ValueError(f"data has L={data.L} tokens but the problem has L={problem.task.L}")
    lam = problem.learner.lam
    X, y = data.X, data.y

    if problem.learner.parameterisation == "elementwise":
        S, ok, iters, res = _cg_elementwise(X, y, lam, tol, int(max_iter), progress)
        penalty = lam * d * 0.5 * float(np.sum(S * S))
    else:
        if S_init is None:
            start = np.zeros((d, d))
        else:
            start = np.array(S_init, dtype=float)
            if start.shape != (d, d):
                raise ValueError(f"S_init must have shape ({d}, {d}), got {start.shape}")
            start = 0.5 * (start + start.T)
        lip = 1.05 * estimate_lipschitz(X, np.random.default_rng([seed, 0x11B]))
        lip = max(lip, 1e-300)
        S, ok, iters, res = _fista_factorised(
            X, y, lam, rank_cap(problem, d), start, lip, tol, int(max_iter), progress
        )
        penalty = lam * d * float(np.trace(S))
    if not ok:
        warnings.warn(
            f"direct_erm did not converge (d={d}, seed={seed}): residual {res:.3e} "
            f">= tol {tol:.1e} after {iters} iterations",
            RuntimeWarning,
            stacklevel=2,
        )
    return _summarise(data, problem, S, penalty, ok, iters, res, keep_matrix, tol)


def erm_statistics(
    problem: Problem,
    d: int,
    seeds: Iterable[int],
    *,
    wrap: Callable[[list[int]], Iterable[int]] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """Run :func:`direct_erm` (linear channel) or
    :func:`~amp_attention.erm_nonlinear.direct_erm_channel` (other channels; its
    keyword arguments pass through ``kw``) for each seed; mean and standard error
    of each numeric field.

    stderr = std(ddof=1)/sqrt(#seeds) (0 for a single seed).  Returns
    {"d", "n", "seeds", "mean": {field: value}, "stderr": {field: value},
     "all_converged": bool, "not_converged": [seeds], "results": [ERMResult]}
    where the fields are :data:`STAT_FIELDS`.
    """
    d = check_dimension(d)
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must be a non-empty list of integers >= 0")
    seeds = [check_seed(s) for s in seeds]
    run = direct_erm
    if not optional_member(problem.task.channel_object, "outputs_are_h"):
        # Non-linear channels: the restarted non-convex solver of erm_nonlinear.
        from .erm_nonlinear import direct_erm_channel

        run = direct_erm_channel
    # ``wrap`` (e.g. a progress bar) sees the seeds as they are run.
    results = [run(problem, d, s, **kw) for s in (wrap(seeds) if wrap else seeds)]
    k = len(results)
    mean: dict[str, float] = {}
    stderr: dict[str, float] = {}
    for name in STAT_FIELDS:
        v = np.array([float(getattr(r, name)) for r in results])
        mean[name] = float(np.mean(v))
        stderr[name] = float(np.std(v, ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    bad = [r.seed for r in results if not r.converged]
    if bad:
        warnings.warn(f"erm_statistics: seeds {bad} did not converge", RuntimeWarning, stacklevel=2)
    return {
        "d": d,
        "n": results[0].n,
        "seeds": seeds,
        "mean": mean,
        "stderr": stderr,
        "all_converged": not bad,
        "not_converged": bad,
        "results": results,
    }
