"""Allocating a fixed key budget D = H d_k between the number of heads and their width.

For each divisor H of D the ensemble of H mutually orthogonal heads of width
d_k = D/H is simulated on the same synthetic task and draws, and the
empirical argmin of the ensemble MSE over H is compared with the stated law

    d_k* ~ (log n)^(2/(4+d)),

where d is the intrinsic dimension of the target (``NWTask.intrinsic_dim``,
the number s of directions g depends on).  The law fixes only a trend in n
(its constant is unknown), so the comparison is between ratios
d_k*(n)/d_k*(n_0) of the law and of the empirical argmin, over a few n.  This
is an empirical check, not a proof: the argmin is restricted to the divisors
of D, is subject to Monte-Carlo error, and the law's trend over practical n
is weak (between n = 250 and 4000 it changes d_k* by a factor
(log 4000/log 250)^(2/(4+d)), about 1.15 for d = 2).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..checks import check_integer
from ..runner import run_tasks
from .ensemble import (MSEDecomposition, Progress, average_decompositions, ensemble_decomposition,
                       no_progress, task_realisations)
from .nadaraya_watson import NWKernel
from .tasks import NWTask


def divisors(D: int) -> list[int]:
    """All divisors H of D, increasing (the admissible head counts for budget D)."""
    D = check_integer("D", D, 1)
    small = [h for h in range(1, math.isqrt(D) + 1) if D % h == 0]
    return sorted(set(small + [D // h for h in small]))


def budget_heads(d_model: int, D: int, H: int) -> np.ndarray:
    """H orthogonal heads of width D/H partitioning the first D coordinates, (H, d_model, D/H).

    Head h is the coordinate block h d_k ... (h+1) d_k - 1.  Coordinate blocks
    lose no generality here because the task's target directions are
    Haar-random: only the relative position of heads and target matters.
    """
    D = check_integer("D", D, 1)
    H = check_integer("H", H, 1)
    d_model = check_integer("d_model", d_model, 1)
    if D % H:
        raise ValueError(f"H must divide D = {D}, got {H} (allowed: {divisors(D)})")
    if D > d_model:
        raise ValueError(f"D must lie in [1, d_model] = [1, {d_model}], got {D}")
    d_k = D // H
    W = np.zeros((H, d_model, d_k))
    for h in range(H):
        W[h, h * d_k:(h + 1) * d_k] = np.eye(d_k)
    return W


def law_dk_star(n: float, intrinsic_dim: int, constant: float = 1.0) -> float:
    """The stated law d_k* = constant (log n)^(2/(4+d)), d = intrinsic dimension (n > 1)."""
    d = check_integer("intrinsic_dim", intrinsic_dim, 1)
    if not (math.isfinite(float(n)) and n > 1):
        raise ValueError(f"n must be > 1 (allowed range (1, inf)), got {n!r}")
    return constant * math.log(n) ** (2.0 / (4.0 + d))


@dataclass(frozen=True)
class AllocationResult:
    """Ensemble MSE per head count H (d_k = D/H) at one n.

    ``rows[i]`` belongs to ``heads[i]``; ``argmin_H`` minimises the MSE;
    ``tied`` lists every H whose paired MSE difference from the argmin is
    within 2 standard errors (paired over the shared draws), i.e. the
    head counts the simulation cannot tell apart from the optimum.
    """

    n: int
    D: int
    heads: tuple[int, ...]
    rows: tuple[MSEDecomposition, ...]
    argmin_H: int
    tied: tuple[int, ...]
    #: per H: standard error of MSE(H) - MSE(argmin) over the shared draws
    paired_stderr: tuple[float, ...]

    @property
    def argmin_dk(self) -> int:
        return self.D // self.argmin_H

    def to_dict(self) -> dict:
        return {"n": self.n, "D": self.D, "argmin_H": self.argmin_H, "argmin_dk": self.argmin_dk,
                "tied_H": list(self.tied),
                "rows": [{"H": H, "d_k": self.D // H, "paired_stderr": se, **r.to_dict()}
                         for H, r, se in zip(self.heads, self.rows, self.paired_stderr)]}


def allocation_sweep(task: NWTask, D: int, *, draws: int, kernel: NWKernel = NWKernel(),
                     heads: Sequence[int] | None = None, seed: int = 0,
                     target_seeds: Sequence[int] | None = None,
                     progress: Progress = no_progress, executor: cf.Executor | None = None,
                     workers: int = 0) -> AllocationResult:
    """Uniform ensembles of H orthogonal heads of width D/H for every H (default: all divisors).

    All H share the training draws and targets (common random numbers), so
    the standard error of a difference of MSEs is taken from the per-draw
    paired differences, which is much smaller than either MSE's own error.
    The (H, target) cells are independent tasks of
    :func:`~amp_attention.runner.run_tasks` (``executor``, ``workers``).
    """
    D = check_integer("D", D, 1)
    Hs = divisors(D) if heads is None else sorted({check_integer("heads", h, 1) for h in heads})
    for H in Hs:
        if D % H:
            raise ValueError(f"heads must be divisors of D = {D} (allowed: {divisors(D)}), got {H}")
    tasks = task_realisations(task, target_seeds)
    decs = run_tasks(ensemble_decomposition,
                     [(tk, budget_heads(task.d_model, D, H), np.full(H, 1.0 / H), draws, kernel,
                       False, seed) for H in Hs for tk in tasks],
                     executor=executor, workers=workers, progress=lambda it, n: progress(it))
    K = len(tasks)
    rows = [average_decompositions(decs[i * K:(i + 1) * K]) for i in range(len(Hs))]
    mse = np.array([r.mse for r in rows])
    best = int(np.argmin(mse))
    per_draw = np.array([r.draw_mse for r in rows])  # (len(Hs), R): per draw, averaged over targets
    diff = per_draw - per_draw[best]
    R = per_draw.shape[1]
    se = diff.std(axis=1, ddof=1) / math.sqrt(R) if R > 1 else np.full(len(Hs), np.nan)
    tied = tuple(H for H, dm, s in zip(Hs, mse - mse[best], se) if dm <= 2 * s)
    return AllocationResult(task.n, D, tuple(Hs), tuple(rows), Hs[best], tied,
                            tuple(float(v) for v in se))


@dataclass(frozen=True)
class AllocationCheck:
    """:func:`allocation_check`: one :class:`AllocationResult` per n (``sweeps``), the
    comparison ``table`` (n, log n, empirical argmin (H, d_k), the d_k tied with it,
    the law's ratio (log n / log n_0)^(2/(4+d)) and the empirical ratio
    d_k*(n)/d_k*(n_0), n_0 = ns[0]), the task's ``intrinsic_dim``, ``D`` and ``law``."""

    sweeps: tuple[AllocationResult, ...]
    table: tuple[dict, ...]
    intrinsic_dim: int
    D: int
    law: str


def allocation_check(task: NWTask, D: int, ns: Sequence[int], *, draws: int,
                     kernel: NWKernel = NWKernel(), seed: int = 0,
                     target_seeds: Sequence[int] | None = None,
                     progress: Progress = no_progress, executor: cf.Executor | None = None,
                     workers: int = 0) -> AllocationCheck:
    """Empirical check of d_k* ~ (log n)^(2/(4+d)) over the sample sizes ``ns``
    (:class:`AllocationCheck`).  An empirical check, not a proof.
    """
    ns = [check_integer("ns", v, 2) for v in ns]
    if not ns:
        raise ValueError("ns must contain at least one sample size >= 2")
    sweeps = [allocation_sweep(replace(task, n=n), D, draws=draws, kernel=kernel, seed=seed,
                               target_seeds=target_seeds, executor=executor, workers=workers)
              for n in progress(ns)]
    d = task.intrinsic_dim
    base_law = law_dk_star(ns[0], d)
    base_emp = sweeps[0].argmin_dk
    table = [{"n": s.n, "log_n": math.log(s.n), "argmin_H": s.argmin_H, "argmin_dk": s.argmin_dk,
              "tied_dk": [D // h for h in s.tied],
              "law_ratio": law_dk_star(s.n, d) / base_law,
              "empirical_ratio": s.argmin_dk / base_emp} for s in sweeps]
    return AllocationCheck(tuple(sweeps), tuple(table), d, D,
                           f"d_k* ~ (log n)^(2/(4+d)), d = intrinsic_dim = {d}")
