"""The posterior mean by averaging (issue 17): the matrix MSE of the average of R Adam runs
from independent random initialisations, on one data set, against the Bayes-optimal MMSE.

Noiseless softmax, L = 2, Wishart target kappa0 = 0.5, learner kappa = 0.5, lam = 0
(every run interpolates the labels); d = 100 by default.  Each run is one point of the
zero-loss set reached from a random start; their average is a crude sampler of the
posterior mean, so its error falls with R towards (not necessarily onto) the MMSE.

    python benchmarks/bayes_averaging.py [--d 100] [--alpha 0.12] [--runs 16]
           [--data-seeds 2] [--out docs/figures/bayes_averaging]

writes OUT.json (per data seed: the MSE of every run and of every running average;
the BO MMSE and the ERM SE at lam -> 0+ for reference) and OUT.png.  Runs are
saved as they finish (OUT_runs/*.npy, not versioned) and skipped on a rerun.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from amp_attention.adam import AdamOptions, train
from amp_attention.data import generate_dataset
from amp_attention.files import atomic_write_json
from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
from amp_attention.spec import Learner, Problem, Task, WishartTarget


def problem(alpha: float, lam: float = 0.0) -> Problem:
    return Problem(Task("softmax", L=2, beta=1.0, noise=0.0), WishartTarget(0.5),
                   Learner(0.5, lam), alpha=alpha)


def run_one(p: Problem, d: int, data_seed: int, r: int, store: Path, adam: AdamOptions) -> np.ndarray:
    path = store / f"d{d}_a{p.alpha:g}_data{data_seed}_init{r}.npy"
    if path.exists():
        return np.load(path)
    data = generate_dataset(p, d, data_seed, "quantile")
    rng = np.random.default_rng([data_seed, r, 0xB0])
    P0 = 0.3 * rng.standard_normal((max(1, round(p.learner.kappa * d)), d))
    run = train(data.X, data.y, p.task.channel_object, 0.0, P0, options=adam)
    np.save(path.with_suffix(".tmp.npy"), run.S)
    Path(path.with_suffix(".tmp.npy")).replace(path)
    return run.S


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=0.12)
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--data-seeds", type=int, default=2)
    ap.add_argument("--out", default="docs/figures/bayes_averaging")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw OUT.png from an existing OUT.json without training")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.plot_only:
        plot(json.loads(out.with_suffix(".json").read_text()), out.with_suffix(".png"))
        return
    store = out.parent / (out.name + "_runs")
    store.mkdir(parents=True, exist_ok=True)
    p = problem(args.alpha)
    adam = AdamOptions(lr=0.03, max_iter=20000, tol=1e-7)
    bo = solve_bayes_optimal(p)
    erm = solve_state_evolution(problem(args.alpha, 1e-4), mc=MonteCarloOptions(log2_n=12, coarse_log2_n=10))
    record = {"params": {"d": args.d, "alpha": args.alpha, "runs": args.runs,
                         "data_seeds": args.data_seeds, "problem": p.to_dict(),
                         "adam": {"lr": adam.lr, "max_iter": adam.max_iter, "tol": adam.tol}},
              "bayes_mmse": bo.matrix_mse, "erm_se_lam1e-4_matrix_mse": erm.matrix_mse,
              "seeds": []}
    for s in range(args.data_seeds):
        S0 = generate_dataset(p, args.d, s, "quantile").S0
        single, running, total = [], [], np.zeros_like(S0)
        t0 = time.perf_counter()
        for r in range(args.runs):
            S = run_one(p, args.d, s, r, store, adam)
            total += S
            single.append(float(np.sum((S - S0) ** 2)) / args.d)
            avg = total / (r + 1)
            running.append(float(np.sum((avg - S0) ** 2)) / args.d)
            print(f"data seed {s} run {r}: single {single[-1]:.4f} average of {r + 1}: "
                  f"{running[-1]:.4f} (BO {bo.matrix_mse:.4f}; {time.perf_counter() - t0:.0f} s)",
                  flush=True)
        a, b = infinite_average_fit(np.array(running))
        record["seeds"].append({"seed": s, "single": single, "running_average": running,
                                "fit_a_plus_b_over_R": [a, b]})
        atomic_write_json(out.with_suffix(".json"), record, indent=1)
    plot(record, out.with_suffix(".png"))
    print("wrote", out.with_suffix(".json"), out.with_suffix(".png"), file=sys.stderr)


def infinite_average_fit(running: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of mse(R) = a + b/R to one data set's running averages.

    E||mean of R runs - S0||^2/d = ||E S - S0||^2/d + tr Cov(S)/(R d): ``a`` estimates the
    error of the infinite average over initialisations, ``b`` the run-to-run spread."""
    R = np.arange(1, running.size + 1, dtype=float)
    a, b = np.linalg.lstsq(np.column_stack([np.ones_like(R), 1.0 / R]), running, rcond=None)[0]
    return float(a), float(b)


def plot(record: dict, path: Path) -> None:
    from amp_attention import plotting

    plt = plotting.plt
    fig, ax = plt.subplots(1, 1, figsize=(5.6, 3.9))
    R = np.arange(1, record["params"]["runs"] + 1)
    avg = np.array([s["running_average"] for s in record["seeds"]])
    single = np.array([s["single"] for s in record["seeds"]])
    k = avg.shape[0]
    err = avg.std(axis=0, ddof=1) / math.sqrt(k) if k > 1 else np.zeros(R.size)
    ax.errorbar(R, avg.mean(axis=0), yerr=err, fmt="o-", ms=4, capsize=2,
                label=f"average of R Adam runs ({k} data sets)")
    ax.axhline(single.mean(), color="C1", ls="-.", lw=1.2,
               label=f"one Adam run (mean of {single.size})")
    ax.axhline(record["erm_se_lam1e-4_matrix_mse"], color="C2", ls=":", lw=1.2,
               label=r"ERM SE, $\lambda = 10^{-4}$")
    fits = np.array([infinite_average_fit(a) for a in avg])
    a_inf, b_inf = fits.mean(axis=0)
    Rf = np.linspace(1, R[-1], 200)
    ax.plot(Rf, a_inf + b_inf / Rf, color="C0", lw=0.9, ls="--",
            label=rf"fit $a + b/R$, $a = {a_inf:.3f}$ ($R \to \infty$)")
    ax.axhline(record["bayes_mmse"], color="k", ls="--", lw=1.4, label="Bayes-optimal MMSE (SE)")
    ax.set_xscale("log", base=2)
    ticks = [r for r in (1, 2, 4, 8, 16, 32, 64) if r <= R[-1]]
    ax.set_xticks(ticks, [str(r) for r in ticks])
    ax.set_xlabel("runs averaged R")
    ax.set_ylabel(r"matrix MSE $\|\bar S_R - S_0\|_F^2/d$")
    ax.grid(alpha=0.3)
    prm = record["params"]
    plotting.save_figure(fig, path, f"noiseless softmax L=2, kappa=kappa0=0.5, lam=0, "
                                    f"alpha={prm['alpha']:g}, d={prm['d']}",
                         legend_from=ax, legend_columns=2)


if __name__ == "__main__":
    main()
