"""Shared definitions of the GAMP-vs-SE trajectory validation (issue 4).

Two cases: linear L = 1 (kappa0 = 0.5, kappa = 1, lam = 0.1, Delta = 0.5,
alpha = 0.5) and softmax seq2seq L = 2 (beta = 1, kappa0 = 0.5, kappa = 1,
lam = 0.2, output noise Delta = 0.1, alpha = 0.5).  GAMP starts at Shat^0 = 0,
V^0 = 1 (undamped) on data with the target at the Marchenko-Pastur quantiles;
the SE iterates start at (m, q, V) = (0, 0, 1) (softmax: RQMC 2^14 x 8).  For
t = 1..T the seed-averaged m_t and q_t of GAMP at d in {64, 96, 128, 192} are
compared with the SE iterates: per d, the relative deviation of the seed mean
at every t (and its standard error), and its average over t (m and q
together); the decay of that average with d is fitted as c / d.

The record (tests/data/gamp_trajectories.json) feeds the fast test's
allowance at d = 64.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from amp_attention.channels import channel_for
from amp_attention.denoisers import denoiser_for
from amp_attention.data import generate_dataset
from amp_attention.gamp import GAMPOptions, gamp
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import MonteCarloOptions, se_iterates

RECORD = Path(__file__).parent / "data" / "gamp_trajectories.json"
T = 8
SEEDS = {64: 8, 96: 8, 128: 8, 192: 6}
MC = MonteCarloOptions(log2_n=14, replicas=8, seed=0, coarse_log2_n=10)
CASES = {
    "linear_L1": Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1),
                         alpha=0.5),
    "softmax_L2": Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5),
                          Learner(1.0, 0.2), alpha=0.5),
}


def se_trajectory(name: str) -> np.ndarray:
    return se_iterates(CASES[name], (0.0, 0.0, 1.0), T, mc=MC)


def gamp_trajectory(name: str, d: int, seed: int) -> np.ndarray:
    """(T + 1, 3): m_t, q_t, V_t of undamped GAMP from Shat = 0, V = 1."""
    problem = CASES[name]
    ch = channel_for(problem.task)
    data = generate_dataset(problem, d, seed, "quantile", channel=ch)
    res = gamp(data.X, data.y, ch, denoiser_for(problem.learner),
               options=GAMPOptions(max_iter=T, tol=1e-300, adaptive=False), S0=data.S0)
    return np.array([[h.m, h.q, h.V] for h in res.history[:T + 1]])


def deviations(gamp_runs: np.ndarray, se: np.ndarray) -> dict:
    """Relative deviation of the seed mean from the SE per t (m and q), with standard errors."""
    mean = gamp_runs.mean(axis=0)
    k = gamp_runs.shape[0]
    se_mean = gamp_runs.std(axis=0, ddof=1) / math.sqrt(k) if k > 1 else np.zeros_like(mean)
    rel = (mean[1:, :2] - se[1:, :2]) / np.abs(se[1:, :2])
    rel_se = se_mean[1:, :2] / np.abs(se[1:, :2])
    return {"rel_m": rel[:, 0].tolist(), "rel_q": rel[:, 1].tolist(),
            "rel_m_se": rel_se[:, 0].tolist(), "rel_q_se": rel_se[:, 1].tolist(),
            "max_abs": float(np.max(np.abs(rel))), "mean_abs": float(np.mean(np.abs(rel)))}


def run_case(name: str, seeds: dict[int, int] = SEEDS) -> dict:
    se = se_trajectory(name)
    by_d = {}
    for d, k in seeds.items():
        runs = np.array([gamp_trajectory(name, d, s) for s in range(k)])
        by_d[d] = {"seeds": k, "m": runs[:, :, 0].tolist(), "q": runs[:, :, 1].tolist(),
                   "V": runs[:, :, 2].tolist(), **deviations(runs, se)}
    ds = np.array(list(seeds), dtype=float)
    dev = np.array([by_d[d]["mean_abs"] for d in seeds])
    c = float(np.sum(dev / ds) / np.sum(1.0 / ds**2))  # least squares of dev = c / d
    return {"name": name, "se": se.tolist(), "by_d": by_d, "c_over_d": c}


def load_record() -> dict:
    return json.loads(RECORD.read_text())
