"""Predicted spectra of the learned weights against trained ones (THEORY 5, issue 5).

The SE fixes the law of the eigenvalues of Shat: with B ~ rho_B = (m_hat * law of
S0) boxplus semicircle(q_hat) (THEORY 4.2), an eigenvalue of Shat is f(x) for
x ~ rho_B, where f is the denoiser's spectral function.  f is non-decreasing,
so the cumulative distribution function is exact from the mass of rho_B above
a point:

* factorised (nuclear norm, rank cap kappa d): f(x) = (x - 2 lam)/V_hat above
  the cutoff c = max(2 lam, (1 - kappa) quantile of rho_B), 0 below, hence

      F_S(s) = 0 (s < 0),     F_S(s) = 1 - M(max(c, 2 lam + V_hat s))  (s >= 0),

  with M(x) = int_{y > x} rho_B(y) dy; the atom at 0 is F_S(0) = 1 - M(c).
* element-wise (Frobenius): f(x) = x / (V_hat + 2 lam), F_S(s) = 1 - M((V_hat + 2 lam) s).

The normalised singular values sigma/(p d)^(1/4) of W (p x d) are the square
roots of the eigenvalues of S_W = W^T W / sqrt(p d); d - r of those eigenvalues
are structural zeros (r = min(p, d)), so over the r singular values

      F_W(sigma) = (d F_S(sigma^2) - (d - r)) / r      (sigma >= 0).

The finite-d check (:func:`run_spectrum_check`) trains the layer with Adam at
several d, computes the Kolmogorov distance sup |F_emp - F| between each
trained spectrum and the prediction (eigenvalues within ``zero_tol`` times the
largest one are counted as exact zeros: gradient training only drives the
null directions to ~lr-sized values), and stores each run atomically so an
interrupted check resumes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from amp_attention.adam import AdamOptions, train_layer
from amp_attention.denoisers import Frobenius, denoiser_for
from amp_attention.freeprob import SemicircleFreeConvolution
from amp_attention.spec import Problem
from amp_attention.targets import target_measure

from amp_attention.files import atomic_write_json
from .state_evolution import MonteCarloOptions, SEResult, solve_state_evolution


@dataclass(frozen=True, eq=False)
class PredictedSpectrum:
    """The cumulative distribution functions of the SE's spectra of Shat and W.

    Built from a converged SE fixed point by :meth:`from_se`; ``elementwise``
    learners have no W (``cdf_W`` raises).
    """

    law: SemicircleFreeConvolution
    lam: float
    V_hat: float
    cutoff: float
    elementwise: bool
    kappa: float

    @classmethod
    def from_se(cls, problem: Problem, result: SEResult) -> "PredictedSpectrum":
        den = denoiser_for(problem.learner)
        law = SemicircleFreeConvolution(target_measure(problem.target).scaled(result.m_hat),
                                        result.q_hat)
        elementwise = isinstance(den, Frobenius)
        cutoff = -math.inf if elementwise else den.cutoff(law)
        return cls(law, problem.learner.lam, result.V_hat, cutoff, elementwise,
                   problem.learner.kappa)

    def _mass_above(self, x: np.ndarray) -> np.ndarray:
        return np.array([self.law.mass_above(float(v)) for v in np.ravel(x)]).reshape(np.shape(x))

    @property
    def atom_S(self) -> float:
        """Mass of the eigenvalue 0 of Shat (0 for the element-wise learner)."""
        return 0.0 if self.elementwise else 1.0 - float(self.law.mass_above(self.cutoff))

    def cdf_S(self, s, *, left: bool = False) -> np.ndarray:
        """F_S(s) = P(eigenvalue <= s); ``left=True`` gives the left limit P(eigenvalue < s)."""
        s = np.asarray(s, dtype=float)
        if self.elementwise:
            return 1.0 - self._mass_above((self.V_hat + 2.0 * self.lam) * s)
        x = np.maximum(self.cutoff, 2.0 * self.lam + self.V_hat * np.maximum(s, 0.0))
        F = 1.0 - self._mass_above(x)
        return np.where(s < 0, 0.0, np.where((s == 0) & left, 0.0, F))

    def cdf_W(self, sigma, d: int, p: int, *, left: bool = False) -> np.ndarray:
        """F_W over the r = min(p, d) normalised singular values of a p x d W."""
        if self.elementwise:
            raise ValueError("the element-wise learner has no W")
        sigma = np.asarray(sigma, dtype=float)
        r = min(p, d)
        F = (d * self.cdf_S(np.where(sigma < 0, -1.0, sigma * sigma), left=left) - (d - r)) / r
        return np.clip(F, 0.0, 1.0)


def kolmogorov_distance(samples, cdf: Callable[..., np.ndarray], zero_tol: float = 0.0) -> float:
    """sup_x |F_n(x) - F(x)| between the empirical law of ``samples`` and ``cdf``.

    ``cdf(x, left=...)`` must give F(x) and its left limit F(x-) (atoms);
    samples with |x| <= zero_tol are set to exactly 0.  For sorted x_(1..n)
    the supremum is max_i max(i/n - F(x_i), F(x_i-) - (i-1)/n).
    """
    x = np.sort(np.asarray(samples, dtype=float))
    if x.size == 0:
        raise ValueError("samples must not be empty")
    x = np.where(np.abs(x) <= zero_tol, 0.0, x)
    n = x.size
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf(x)), np.max(cdf(x, left=True) - (i - 1) / n), 0.0))


@dataclass(frozen=True)
class SpectrumPlan:
    """A spectrum check: ``problem`` at its alpha, Adam-trained at each d of
    ``ds`` over ``seeds`` seeds; eigenvalues below ``zero_tol`` x the largest
    count as zeros; ``bins`` histogram bins in the figure."""

    problem: Problem
    ds: tuple[int, ...]
    seeds: int = 1
    target_spectrum: str = "quantile"
    adam: AdamOptions = AdamOptions(lr=0.03)
    mc: MonteCarloOptions | None = None
    zero_tol: float = 1e-6
    bins: int = 50

    def __post_init__(self) -> None:
        if not self.ds or any(int(d) != d or d < 2 for d in self.ds):
            raise ValueError(f"ds must be a non-empty list of integers >= 2, got {self.ds!r}")
        if int(self.seeds) != self.seeds or self.seeds < 1:
            raise ValueError(f"seeds must be an integer >= 1, got {self.seeds!r}")
        if not (math.isfinite(self.zero_tol) and 0.0 <= self.zero_tol < 1.0):
            raise ValueError(f"zero_tol must lie in [0, 1), got {self.zero_tol!r}")
        if int(self.bins) != self.bins or self.bins < 2:
            raise ValueError(f"bins must be an integer >= 2, got {self.bins!r}")


def spectrum_run_file(out: Path, d: int, seed: int) -> Path:
    return Path(out) / "runs" / f"d{d}_s{seed}.json"


def run_measures(pred: PredictedSpectrum, run: dict, zero_tol: float) -> dict:
    """Kolmogorov distances and zero fractions of one stored run."""
    d = int(run["d"])
    ev = np.asarray(run["eigenvalues_S"], dtype=float)
    tol = zero_tol * max(float(np.max(np.abs(ev))), 1e-300)
    out = {"d": d, "seed": run["seed"],
           "ks_S": kolmogorov_distance(ev, pred.cdf_S, tol),
           "zero_fraction_S": float(np.mean(np.abs(ev) <= tol)),
           "converged": bool(run["converged"])}
    if run.get("singular_values_W") is not None:
        p = int(run["p"])
        sv = np.asarray(run["singular_values_W"], dtype=float) / (p * d) ** 0.25
        out["ks_W"] = kolmogorov_distance(
            sv, lambda s, left=False: pred.cdf_W(s, d, p, left=left), math.sqrt(tol))
        out["zero_fraction_W"] = float(np.mean(sv <= math.sqrt(tol)))
    return out


def run_spectrum_check(
    plan: SpectrumPlan,
    out: Path,
    *,
    se: SEResult | None = None,
    wrap: Callable[[list], Iterable] | None = None,
) -> dict:
    """Solve the SE with spectrum (unless ``se``, such a solution of
    ``plan.problem``, is given), train (or resume) every (d, seed) run into
    ``out/runs``, and return the summary: parameters, predicted atoms, the
    per-run Kolmogorov distances and their per-d means with standard errors,
    ``trained`` (runs performed by this call).  Also writes ``out/spectrum.json``
    and the overlay figure ``out/spectrum.png``."""
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    if se is None:
        se = solve_state_evolution(plan.problem, spectrum=True, mc=plan.mc)
    if se.spectrum is None:
        raise ValueError("se must be solved with spectrum=True")
    if not se.converged:
        raise RuntimeError(f"state evolution did not converge ({se.summary}; residual "
                           f"{se.residual:.3g}); no prediction to compare with")
    pred = PredictedSpectrum.from_se(plan.problem, se)
    todo = [(d, s) for d in plan.ds for s in range(plan.seeds)
            if not spectrum_run_file(out, d, s).exists()]
    kappa = plan.problem.learner.kappa
    for d, s in (wrap(todo) if wrap else todo):
        res = train_layer(plan.problem, d, s, options=plan.adam,
                          target_spectrum=plan.target_spectrum)
        atomic_write_json(spectrum_run_file(out, d, s),
                          {**res.to_dict(), "p": max(1, int(round(kappa * d))),
                           "history": []})
    runs = [json.loads(spectrum_run_file(out, d, s).read_text())
            for d in plan.ds for s in range(plan.seeds)]
    measures = [run_measures(pred, r, plan.zero_tol) for r in runs]
    per_d = []
    for d in plan.ds:
        ms = [m for m in measures if m["d"] == d]
        row = {"d": d, "n_seeds": len(ms)}
        for key in ("ks_S", "ks_W", "zero_fraction_S", "zero_fraction_W"):
            if key in ms[0]:
                v = np.array([m[key] for m in ms])
                row[key] = float(v.mean())
                row[key + "_stderr"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
        per_d.append(row)
    summary = {
        "params": {**plan.problem.to_dict(), "ds": list(plan.ds), "seeds": plan.seeds,
                   "target_spectrum": plan.target_spectrum, "zero_tol": plan.zero_tol,
                   "adam": dataclasses.asdict(plan.adam)},
        "se": se.to_dict(),
        "predicted": {"atom_S": pred.atom_S, "cutoff": pred.cutoff,
                      "rank_fraction": se.rank_fraction},
        "per_d": per_d, "runs": measures, "trained": len(todo),
        "all_converged": all(m["converged"] for m in measures),
    }
    atomic_write_json(out / "spectrum.json", summary)
    from amp_attention.plotting import plot_spectrum_overlay

    plot_spectrum_overlay(se.spectrum, runs, per_d, out / "spectrum.png",
                          zero_tol=plan.zero_tol, bins=plan.bins, title=_title(plan.problem))
    return summary


def _title(problem: Problem) -> str:
    t = problem.to_dict()
    target = ", ".join(f"{k}={v:g}" for k, v in t["target"].items()
                       if isinstance(v, (int, float)) and k != "d")
    return (f"{t['channel']} L={t['L']}, {target}, alpha={t['alpha']:g}, kappa={t['kappa']:g}, "
            f"lam={t['lam']:g}, Delta={t['noise']:g}, {t['parameterisation']}")
