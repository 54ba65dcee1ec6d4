"""Predicted spectra of the learned weights against trained ones (docs/theory.md "Spectra of the
learned weights"; issue 5).

The prediction (densities and exact CDFs of the eigenvalues of Shat and of the
singular values of W) is :class:`~amp_attention.solvers.predicted_spectrum.PredictedSpectrum`.
The finite-d check (:func:`run_spectrum_check`) trains the layer with Adam at
several d, computes the Kolmogorov distance sup |F_emp - F| between each
trained spectrum and the prediction (eigenvalues within ``zero_tol`` times the
largest one are counted as exact zeros: gradient training only drives the
null directions to ~lr-sized values), and stores each run atomically so an
interrupted check resumes.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from amp_attention.solvers.predicted_spectrum import PredictedSpectrum
from amp_attention.solvers.state_evolution import MonteCarloOptions, SEResult, solve_state_evolution

from ..checks import Integer, grid_values
from ..adam import AdamOptions, train_layer
from ..files import atomic_write_json, ensure_directory
from ..operators import check_token_dtype
from ..runner import Checkpoints, run_checkpointed
from ..spec import Problem
from .validate import finished


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
    #: how the finite-d target's spectrum is drawn: "quantile" (the law's quantiles) or
    #: "sampled" (a Wishart or Haar draw)
    target_spectrum: str = "quantile"
    #: the Adam options of the training runs
    adam: AdamOptions = AdamOptions(lr=0.03)
    #: RQMC options of a Monte-Carlo channel's SE (None: the defaults)
    mc: MonteCarloOptions | None = None
    zero_tol: float = 1e-6
    bins: int = 50
    #: the precision of the products over the data in training (a run file of the other
    #: dtype is not resumed but redone)
    dtype: str = "float64"

    def __post_init__(self) -> None:
        check_token_dtype(self.dtype)
        object.__setattr__(self, "ds", tuple(Integer(2, integral_float=True).check("ds", d)
                                             for d in grid_values("ds", self.ds)))
        if int(self.seeds) != self.seeds or self.seeds < 1:
            raise ValueError(f"seeds must be an integer >= 1, got {self.seeds!r}")
        if not (math.isfinite(self.zero_tol) and 0.0 <= self.zero_tol < 1.0):
            raise ValueError(f"zero_tol must lie in [0, 1), got {self.zero_tol!r}")
        if int(self.bins) != self.bins or self.bins < 2:
            raise ValueError(f"bins must be an integer >= 2, got {self.bins!r}")


#: what a run file must hold to count as finished (else it is moved aside and redone)
SPECTRUM_RUN_KEYS = ("d", "seed", "converged", "eigenvalues_S")


def spectrum_store(out: Path | str) -> Checkpoints:
    """The check's finished runs: ``out/runs/d<d>_s<seed>.json``."""
    return Checkpoints(str(Path(out) / "runs"), SPECTRUM_RUN_KEYS)


def spectrum_run_key(d: int, seed: int) -> str:
    return f"d{d}_s{seed}"


def spectrum_run_file(out: Path, d: int, seed: int) -> Path:
    return spectrum_store(out).path(spectrum_run_key(d, seed))


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


def train_spectrum_run(problem: Problem, d: int, seed: int, adam: AdamOptions,
                       target_spectrum: str, dtype: str = "float64") -> dict:
    """The record of one Adam-trained layer of a spectrum check (a task of
    :func:`~amp_attention.runner.run_checkpointed`, which saves it); ``p`` the rows of
    the trained weights."""
    res = train_layer(problem, d, seed, options=adam, target_spectrum=target_spectrum,
                      dtype=dtype)
    return {**res.to_dict(), "p": problem.learner.penalty.weights_shape(d)[0],
            "history": [], "dtype": dtype}


def run_spectrum_check(
    plan: SpectrumPlan,
    out: Path,
    *,
    se: SEResult | None = None,
    executor: cf.Executor | None = None,
    workers: int = 0,
    progress: Callable[[Iterable, int], Iterable] | None = None,
    figure_format: str = "png",
) -> dict:
    """Solve the SE with spectrum (unless ``se``, such a solution of
    ``plan.problem``, is given), train (or resume) every (d, seed) run into
    ``out/runs``, and return the summary: parameters, predicted atoms, the
    per-run Kolmogorov distances and their per-d means with standard errors,
    ``trained`` (runs performed by this call).  Also writes ``out/spectrum.json``
    and the overlay figure ``out/spectrum.<figure_format>`` (png, pdf, svg).  The runs go through
    :func:`~amp_attention.runner.run_tasks` (``executor``, ``workers``,
    ``progress`` as there: in this process by default)."""
    out = Path(out)
    ensure_directory(out / "runs")
    if se is None:
        se = solve_state_evolution(plan.problem, spectrum=True, mc=plan.mc)
    if se.spectrum is None:
        raise ValueError("se must be solved with spectrum=True")
    if not se.success:
        raise RuntimeError(f"state evolution did not converge ({se.summary}; residual "
                           f"{se.residual:.3g}); no prediction to compare with")
    pred = PredictedSpectrum.from_se(plan.problem, se)
    tasks = {spectrum_run_key(d, s): (plan.problem, d, s, plan.adam, plan.target_spectrum,
                                      plan.dtype) for d in plan.ds for s in range(plan.seeds)}
    records, trained = run_checkpointed(train_spectrum_run, tasks, spectrum_store(out),
                                        accept=lambda _key, rec: finished(rec, plan.dtype),
                                        executor=executor, workers=workers, progress=progress)
    runs = list(records.values())
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
                   "adam": dataclasses.asdict(plan.adam), "dtype": plan.dtype},
        "se": se.to_dict(),
        "predicted": {"atom_S": pred.atom_S, "cutoff": pred.cutoff,
                      "rank_fraction": se.rank_fraction},
        "per_d": per_d, "runs": measures, "trained": trained,
        "all_converged": all(m["converged"] for m in measures),
    }
    atomic_write_json(out / "spectrum.json", summary)
    from amp_attention.plotting import plot_spectrum_overlay

    plot_spectrum_overlay(se.spectrum, runs, per_d, out / f"spectrum.{figure_format}",
                          zero_tol=plan.zero_tol, bins=plan.bins, title=_title(plan.problem))
    return summary


def _title(problem: Problem) -> str:
    t = problem.to_dict()
    target = ", ".join(f"{k}={v:g}" for k, v in t["target"].items()
                       if isinstance(v, (int, float)) and k != "d")
    return (f"{t['channel']} L={t['L']}, {target}, alpha={t['alpha']:g}, kappa={t['kappa']:g}, "
            f"lam={t['lam']:g}, Delta={t['noise']:g}, {t['parameterisation']}")
