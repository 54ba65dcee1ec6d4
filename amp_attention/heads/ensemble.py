"""Ensembles of NW heads: simulation and the exact MSE decomposition.

The ensemble of H heads with weights w (sum_h w_h = 1) predicts
f_ens(x) = sum_h w_h f_h(x).  Over R independent training draws r and m fixed
test points t, the measured MSE is

    MSE = (1/(R m)) sum_{r,t} (f_ens^{(r)}(x_t) - g(x_t))^2.

With population (ddof = 0) moments over the draws at each test point,
mean_h(t) = (1/R) sum_r f_h^{(r)}(x_t) and
C_hh'(t) = (1/R) sum_r (f_h^{(r)} - mean_h)(f_h'^{(r)} - mean_h'),
the identity E_r[(Z - g)^2] = (E_r Z - g)^2 + Var_r Z applied to
Z = sum_h w_h f_h gives, averaged over t,

    MSE = bias^2 + sum_h w_h^2 Var_h + sum_{h != h'} w_h w_h' Cov_hh'

with bias^2 = mean_t (sum_h w_h mean_h(t) - g(x_t))^2, Var_h = mean_t C_hh(t),
Cov_hh' = mean_t C_hh'(t).  It holds exactly (to rounding) for any R, which is
why the moments are population moments.
"""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from ..checks import check_integer
from ..runner import run_tasks
from .diversity import head_diversity_index
from .nadaraya_watson import NWKernel, nw_predict_heads
from .tasks import NWTask, check_seed
from .weights import head_weights, rank_heads

Progress = Callable[[Iterable], Iterable]


def no_progress(items: Iterable) -> Iterable:
    return items


@dataclass(frozen=True)
class HeadPredictions:
    """Simulated predictions of H heads over R training draws.

    ``predictions`` (R, H, m): f_h^{(r)}(x_t); ``target`` (m,): g(x_t);
    ``validation_mse`` (R, H): each head's MSE against the noisy labels of the
    draw's n_val held-out points (None when n_val = 0).
    """

    predictions: np.ndarray
    target: np.ndarray
    validation_mse: np.ndarray | None


def check_heads(heads: object, d_model: int) -> np.ndarray:
    """Validate a head stack (H, d_model, d_k) against the task's input dimension."""
    W = np.asarray(heads, dtype=float)
    if W.ndim != 3 or W.shape[1] != d_model or min(W.shape) < 1:
        raise ValueError(f"heads must be a 3-d array (H, d_model, d_k) with d_model = {d_model} "
                         f"and H, d_k >= 1; got shape {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("heads must contain only finite numbers")
    return W


def simulate_heads(task: NWTask, heads: object, *, draws: int, kernel: NWKernel = NWKernel(),
                   independent_heads: bool = False, seed: int = 0,
                   batch_size: int | None = None,
                   progress: Progress = no_progress) -> HeadPredictions:
    """Fit every head on R = ``draws`` training draws and predict the test points.

    Shared data (default): in each draw all heads see the same n labelled
    points, as the heads of one attention layer do.  ``independent_heads=True``:
    each head gets its own independent sample of n points in each draw, so that
    f_h and f_h' are independent given the test point and Cov_hh' has
    expectation 0.  Memory: O(R H m) for the predictions plus O(batch n).
    """
    R = check_integer("draws", draws, 1)
    seed = check_seed("seed", seed)
    W = check_heads(heads, task.d_model)
    H, d_model, d_k = W.shape
    X_test, g = task.test_set()
    Wcat = W.transpose(1, 0, 2).reshape(d_model, H * d_k)
    preds = np.empty((R, H, task.m))
    val = np.empty((R, H)) if task.n_val > 0 else None
    for r in progress(range(R)):
        samples = ([task.training_rng(seed, r)] if not independent_heads
                   else [task.training_rng(seed, r, h) for h in range(H)])
        for j, rng in enumerate(samples):
            X, y = task.sample(rng, task.n)
            X_eval = X_test
            if val is not None:
                X_val, y_val = task.sample(rng, task.n_val)
                X_eval = np.vstack([X_test, X_val])
            if independent_heads:
                out = nw_predict_heads(X, y, X_eval, W[j:j + 1], kernel, batch_size=batch_size)
                rows = slice(j, j + 1)
            else:
                out = nw_predict_heads(X, y, X_eval, W, kernel, batch_size=batch_size,
                                       test_projection=X_eval @ Wcat)
                rows = slice(0, H)
            preds[r, rows] = out[:, :task.m]
            if val is not None:
                val[r, rows] = np.mean((out[:, task.m:] - y_val) ** 2, axis=1)
    return HeadPredictions(preds, g, val)


@dataclass(frozen=True)
class MSEDecomposition:
    """MSE = bias2 + variance + covariance of a weighted ensemble (module docstring).

    ``variance`` = sum_h w_h^2 Var_h; ``covariance`` = sum_{h != h'} w_h w_h'
    Cov_hh'; ``mse_stderr``: standard error of ``mse`` from the spread of the
    per-draw MSEs (draws are independent); ``head_*``: each head's own MSE,
    squared bias and variance; ``covariance_matrix`` (H, H): Cov_hh' (diagonal
    Var_h), averaged over the test points; ``draw_mse`` (R,): the MSE of each
    draw (averaged over targets after :func:`average_decompositions`), used
    for paired standard errors; ``targets``: number of target realisations
    averaged (1 for a single decomposition).
    """

    mse: float
    bias2: float
    variance: float
    covariance: float
    mse_stderr: float
    #: the ensemble weights w_h
    weights: tuple[float, ...]
    #: each head's own MSE
    head_mse: tuple[float, ...]
    #: each head's squared bias
    head_bias2: tuple[float, ...]
    #: each head's variance
    head_variance: tuple[float, ...]
    covariance_matrix: tuple[tuple[float, ...], ...]
    draws: int
    #: test points m the MSE averages over
    test_points: int
    draw_mse: np.ndarray = field(repr=False, compare=False)
    targets: int = 1

    @property
    def total(self) -> float:
        """bias2 + variance + covariance (equals ``mse`` to rounding)."""
        return self.bias2 + self.variance + self.covariance

    @property
    def ambiguity(self) -> float:
        """sum_h w_h bias2_h - bias2 = mean_t sum_h w_h (mean_h - sum_h' w_h' mean_h')^2.

        The Krogh-Vedelsby ambiguity of the heads' mean predictions: how much
        the ensemble's squared bias is below the weighted heads' (for weights
        summing to 1).
        """
        return float(np.dot(self.weights, self.head_bias2) - self.bias2)

    def to_dict(self) -> dict:
        """Plain dict for JSON (without the per-draw MSEs)."""
        return {"mse": self.mse, "bias2": self.bias2, "variance": self.variance,
                "covariance": self.covariance, "mse_stderr": self.mse_stderr,
                "ambiguity": self.ambiguity,
                "weights": list(self.weights), "head_mse": list(self.head_mse),
                "head_bias2": list(self.head_bias2), "head_variance": list(self.head_variance),
                "covariance_matrix": [list(r) for r in self.covariance_matrix],
                "draws": self.draws, "test_points": self.test_points, "targets": self.targets}


def check_weights(weights: object, H: int) -> np.ndarray:
    """Weights: H finite numbers summing to 1 (negative weights are allowed)."""
    w = np.asarray(weights, dtype=float)
    if w.shape != (H,) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be {H} finite numbers (one per head), got shape {w.shape}")
    if abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(f"weights must sum to 1 (allowed: |sum - 1| <= 1e-9), got sum {w.sum()!r}")
    return w


def decompose_ensemble_mse(predictions: object, target: object,
                           weights: object | None = None) -> MSEDecomposition:
    """Measured ensemble MSE and its exact bias^2 / variance / covariance split.

    ``predictions`` (R, H, m) with R >= 2, ``target`` (m,), ``weights`` (H,)
    summing to 1 (None: uniform 1/H).  Implements the identity of the module
    docstring with population (ddof = 0) moments over the R draws.
    """
    F = np.asarray(predictions, dtype=float)
    g = np.asarray(target, dtype=float)
    if F.ndim != 3 or F.shape[0] < 2:
        raise ValueError(f"predictions must be a 3-d array (R, H, m) with R >= 2 draws, "
                         f"got shape {F.shape}")
    R, H, m = F.shape
    if g.shape != (m,):
        raise ValueError(f"target must have shape (m,) = ({m},), got {g.shape}")
    w = np.full(H, 1.0 / H) if weights is None else check_weights(weights, H)
    ens = np.einsum("h,rht->rt", w, F)
    draw_mse = np.mean((ens - g) ** 2, axis=1)
    mse = float(np.mean(draw_mse))
    mean = F.mean(axis=0)  # (H, m)
    dev = F - mean
    C = np.einsum("rht,rgt->hg", dev, dev) / (R * m)  # test-averaged covariances
    bias2 = float(np.mean((w @ mean - g) ** 2))
    WW = np.outer(w, w) * C
    variance = float(np.trace(WW))
    covariance = float(WW.sum() - variance)
    head_bias2 = np.mean((mean - g) ** 2, axis=1)
    head_var = np.diag(C).copy()
    return MSEDecomposition(
        mse=mse, bias2=bias2, variance=variance, covariance=covariance,
        mse_stderr=float(np.std(draw_mse, ddof=1) / np.sqrt(R)),
        weights=tuple(float(v) for v in w),
        head_mse=tuple(float(v) for v in head_bias2 + head_var),
        head_bias2=tuple(float(v) for v in head_bias2),
        head_variance=tuple(float(v) for v in head_var),
        covariance_matrix=tuple(tuple(float(v) for v in row) for row in C),
        draws=R, test_points=m, draw_mse=draw_mse)


def average_decompositions(decs: Sequence[MSEDecomposition]) -> MSEDecomposition:
    """Average of decompositions of the same ensemble on K target realisations.

    Every field is the plain mean over the K entries, so the identity
    mse = bias2 + variance + covariance still holds exactly.  ``mse_stderr`` =
    sqrt(sum_k se_k^2)/K is the standard error conditional on the K targets
    (the draws are independent across targets); it does not include the
    target-to-target spread, which is a fixed effect of the chosen seeds.
    """
    decs = list(decs)
    if not decs:
        raise ValueError("decs must contain at least one decomposition")
    K = len(decs)
    if len({d.weights for d in decs}) != 1 or len({len(d.head_mse) for d in decs}) != 1:
        raise ValueError("decs must share the same weights and number of heads")

    def mean(name: str) -> float:
        return float(np.mean([getattr(d, name) for d in decs]))

    def mean_vec(name: str) -> tuple[float, ...]:
        return tuple(float(v) for v in np.mean([getattr(d, name) for d in decs], axis=0))

    C = np.mean([d.covariance_matrix for d in decs], axis=0)
    return MSEDecomposition(
        mse=mean("mse"), bias2=mean("bias2"), variance=mean("variance"),
        covariance=mean("covariance"),
        mse_stderr=float(np.sqrt(np.sum([d.mse_stderr ** 2 for d in decs])) / K),
        weights=decs[0].weights, head_mse=mean_vec("head_mse"),
        head_bias2=mean_vec("head_bias2"), head_variance=mean_vec("head_variance"),
        covariance_matrix=tuple(tuple(float(v) for v in row) for row in C),
        draws=decs[0].draws, test_points=decs[0].test_points,
        draw_mse=np.mean([d.draw_mse for d in decs], axis=0) if len({d.draws for d in decs}) == 1
        else np.concatenate([d.draw_mse for d in decs]),
        targets=sum(d.targets for d in decs))


def task_realisations(task: NWTask, target_seeds: Sequence[int] | None) -> list[NWTask]:
    """Copies of ``task`` with each seed of ``target_seeds`` (None: just ``task``)."""
    if target_seeds is None:
        return [task]
    seeds = [check_seed("target_seeds", s) for s in target_seeds]
    if not seeds:
        raise ValueError("target_seeds must contain at least one integer >= 0 (or be None)")
    return [replace(task, seed=s) for s in seeds]


# --------------------------------------------------------------------------- rotation sweep


def rotation_heads(d_model: int, H: int, d_k: int, t: float) -> np.ndarray:
    """Heads rotated from identical (t = 0) to mutually orthogonal (t = 1).

    W_h(t) = cos(t pi/2) E_0 + sin(t pi/2) E_{h+1}, where E_j is the j-th block
    of d_k coordinate vectors (columns j d_k ... (j+1) d_k - 1 of I_{d_model}).
    Every W_h(t) has orthonormal columns; Q_h^T Q_h' = cos^2(t pi/2) I for h != h',
    so HDI(t) = 1 - cos^4(t pi/2), increasing from 0 to 1.  Needs
    d_model >= (H + 1) d_k.
    """
    H = check_integer("H", H, 2)
    d_k = check_integer("d_k", d_k, 1)
    d_model = check_integer("d_model", d_model, 1)
    if d_model < (H + 1) * d_k:
        raise ValueError(f"d_model must be >= (H + 1) d_k = {(H + 1) * d_k} for the rotation "
                         f"sweep (a common block plus one block per head), got {d_model}")
    t = float(t)
    if not (0.0 <= t <= 1.0):
        raise ValueError(f"t must lie in [0, 1], got {t!r}")
    c, s = np.cos(t * np.pi / 2), np.sin(t * np.pi / 2)
    W = np.zeros((H, d_model, d_k))
    eye = np.eye(d_k)
    for h in range(H):
        W[h, :d_k] = c * eye
        W[h, (h + 1) * d_k:(h + 2) * d_k] = s * eye
    return W


@dataclass(frozen=True)
class RotationPoint:
    """One point of the rotation sweep: ``t``, the ``hdi`` of the heads, the
    ``decomposition`` of the ensemble's MSE, and ``paired_stderr``: the standard error
    of MSE(t) - MSE(t_0) over the shared draws (t_0 the first t of the sweep; 0 there),
    the error that decides whether the curve moves."""

    t: float
    hdi: float
    decomposition: MSEDecomposition
    paired_stderr: float = 0.0

    def to_dict(self) -> dict:
        return {"t": self.t, "hdi": self.hdi, "paired_stderr": self.paired_stderr,
                **self.decomposition.to_dict()}


def rotation_sweep(task: NWTask, H: int, d_k: int, ts: Sequence[float], *, draws: int,
                   kernel: NWKernel = NWKernel(), independent_heads: bool = False,
                   weights: object | None = None, seed: int = 0,
                   target_seeds: Sequence[int] | None = None,
                   progress: Progress = no_progress, executor: cf.Executor | None = None,
                   workers: int = 0) -> list[RotationPoint]:
    """(HDI, ensemble MSE, decomposition) along heads rotated from identical to orthogonal.

    For each t in ``ts`` the heads are :func:`rotation_heads` (d_model = task.d_model)
    and the ensemble uses ``weights`` (default uniform).  All t share the same
    training draws (common random numbers), so the curve's shape is not
    blurred by draw-to-draw noise.  ``target_seeds``: average the decomposition
    over these target realisations (task seeds).  Averaging matters: for one
    realisation the target directions sit unevenly between the common block
    and the head blocks, so each head's own bias moves with t for reasons of
    that draw only; averaged over Haar-random targets every head is
    statistically equivalent at every t, and the t-dependence that remains is
    the ensemble's.  The (t, target) cells are independent tasks of
    :func:`~amp_attention.runner.run_tasks` (``executor``, ``workers``: in this
    process by default; ``progress`` wraps the finished cells).
    """
    ts = [float(t) for t in ts]
    if not ts:
        raise ValueError("ts must contain at least one value in [0, 1]")
    tasks = task_realisations(task, target_seeds)
    w = head_weights("uniform", check_integer("H", H, 2)) if weights is None else weights
    Ws = [rotation_heads(task.d_model, H, d_k, t) for t in ts]
    decs = run_tasks(ensemble_decomposition,
                     [(tk, W, w, draws, kernel, independent_heads, seed) for W in Ws for tk in tasks],
                     executor=executor, workers=workers, progress=lambda it, n: progress(it))
    K = len(tasks)
    avg = [average_decompositions(decs[i * K:(i + 1) * K]) for i in range(len(ts))]
    base = np.asarray(avg[0].draw_mse)
    return [RotationPoint(t, head_diversity_index(W), a,
                          float(np.std(np.asarray(a.draw_mse) - base, ddof=1)
                                / np.sqrt(base.size)) if base.size > 1 else 0.0)
            for t, W, a in zip(ts, Ws, avg)]


def ensemble_decomposition(task: NWTask, heads: np.ndarray, weights: object, draws: int,
                           kernel: NWKernel, independent_heads: bool, seed: int) -> "MSEDecomposition":
    """One cell of a sweep: simulate the heads on one target realisation and decompose
    the weighted ensemble's MSE (a task of :func:`~amp_attention.runner.run_tasks`)."""
    sim = simulate_heads(task, heads, draws=draws, kernel=kernel,
                         independent_heads=independent_heads, seed=seed)
    return decompose_ensemble_mse(sim.predictions, sim.target, weights)


# --------------------------------------------------------------------------- weighting schemes


@dataclass(frozen=True)
class WeightingComparison:
    """Simulated MSE of several weighting schemes on the same heads and draws.

    ``schemes[name]`` is the decomposition over *rank slots*: in each draw the
    heads are sorted by their validation MSE (best first) and slot k holds the
    head ranked k, so fixed weights w_k per slot make the decomposition exact
    even though the head in a slot changes from draw to draw.
    ``rank_counts[h][k]``: in how many draws head h was ranked k;
    ``head_test_mse``: each head's own test MSE (ordered by head index);
    ``difference_stderr[name]``: standard error of MSE(name) - MSE(first
    scheme) from the per-draw paired differences (all schemes share the draws,
    so this is much smaller than either MSE's own standard error).
    """

    schemes: dict[str, MSEDecomposition]
    rank_counts: tuple[tuple[int, ...], ...]
    head_test_mse: tuple[float, ...]
    #: the geometric weights' ratio r
    ratio: float
    difference_stderr: dict[str, float]

    def to_dict(self) -> dict:
        return {"schemes": {k: v.to_dict() for k, v in self.schemes.items()},
                "rank_counts": [list(r) for r in self.rank_counts],
                "head_test_mse": list(self.head_test_mse), "ratio": self.ratio,
                "difference_stderr": dict(self.difference_stderr)}


def random_heads(d_model: int, H: int, d_k: int, seed: int = 0) -> np.ndarray:
    """H independent Haar-random d_k-dimensional subspaces (orthonormal bases), (H, d_model, d_k)."""
    H = check_integer("H", H, 1)
    d_k = check_integer("d_k", d_k, 1)
    d_model = check_integer("d_model", d_model, 1)
    if d_k > d_model:
        raise ValueError(f"d_k must lie in [1, d_model] = [1, {d_model}], got {d_k}")
    rng = np.random.default_rng([check_seed("seed", seed), 7])
    out = np.empty((H, d_model, d_k))
    for h in range(H):
        Q, Rm = np.linalg.qr(rng.standard_normal((d_model, d_k)))
        out[h] = Q * np.sign(np.diag(Rm))
    return out


def ranked_decompositions(task: NWTask, heads: np.ndarray, weights: dict[str, np.ndarray],
                          draws: int, kernel: NWKernel, independent_heads: bool,
                          seed: int) -> tuple[dict[str, "MSEDecomposition"], np.ndarray, np.ndarray]:
    """One target realisation of :func:`compare_weightings`: the decomposition of every
    scheme over rank slots, the rank counts (H, H) and each head's test MSE (H,)."""
    sim = simulate_heads(task, heads, draws=draws, kernel=kernel,
                         independent_heads=independent_heads, seed=seed)
    order = rank_heads(sim.validation_mse)  # (R, H), best first
    ranked = np.take_along_axis(sim.predictions, order[:, :, None], axis=1)
    H = heads.shape[0]
    counts = np.zeros((H, H), dtype=int)
    for k in range(H):
        counts[:, k] += np.bincount(order[:, k], minlength=H)
    return ({s: decompose_ensemble_mse(ranked, sim.target, w) for s, w in weights.items()},
            counts, np.mean((sim.predictions - sim.target) ** 2, axis=(0, 2)))


def compare_weightings(task: NWTask, heads: object, *, draws: int,
                       kernel: NWKernel = NWKernel(),
                       schemes: Sequence[str] = ("uniform", "geometric", "fibonacci"),
                       ratio: float = 0.5, independent_heads: bool = False, seed: int = 0,
                       target_seeds: Sequence[int] | None = None,
                       progress: Progress = no_progress, executor: cf.Executor | None = None,
                       workers: int = 0) -> WeightingComparison:
    """Uniform / geometric / Fibonacci weights over heads ranked by validation MSE.

    The ranking uses each draw's n_val held-out points (noisy labels), never
    the test points, so the comparison is not tuned on the data it is scored
    on.  Needs task.n_val >= 1.  ``target_seeds``: average over these target
    realisations (rank counts are summed, head test MSEs averaged); the
    realisations are independent tasks of :func:`~amp_attention.runner.run_tasks`.
    """
    if task.n_val < 1:
        raise ValueError(f"n_val must be >= 1 to rank heads by validation MSE, got {task.n_val}")
    schemes = list(schemes)
    if not schemes:
        raise ValueError("schemes must name at least one of uniform, geometric, fibonacci")
    W = check_heads(heads, task.d_model)
    H = W.shape[0]
    weights = {s: head_weights(s, H, ratio) for s in schemes}  # validates names and ratio
    tasks = task_realisations(task, target_seeds)
    cells = run_tasks(ranked_decompositions,
                      [(tk, W, weights, draws, kernel, independent_heads, seed) for tk in tasks],
                      executor=executor, workers=workers, progress=lambda it, n: progress(it))
    decs = {s: [c[0][s] for c in cells] for s in schemes}
    counts = np.zeros((H, H), dtype=int)
    head_mse = np.zeros(H)
    for _, c, m in cells:
        counts += c
        head_mse += m / len(tasks)
    avg = {s: average_decompositions(decs[s]) for s in schemes}
    ref = avg[schemes[0]].draw_mse
    diff_se = {s: float(np.std(avg[s].draw_mse - ref, ddof=1) / np.sqrt(ref.size)) for s in schemes}
    return WeightingComparison(avg, tuple(tuple(int(c) for c in row) for row in counts),
                               tuple(float(v) for v in head_mse), float(ratio), diff_se)
