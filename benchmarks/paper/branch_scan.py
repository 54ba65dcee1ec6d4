"""Which prox branch does training follow?  The engine's Adam at growing d at the band points
of the paper's small-lambda peak (docs/theory.md 16.8, docs/validation.md "Which branch").

    python benchmarks/paper/branch_scan.py [--points beta2 lreg1e-4] [--ds 32 64 128 192]
        [--seeds 4 4 4 2] [--out benchmarks/data/branch_scan]

Points (softmax L = 2, kappa0 0.5, logit_goe Delta 0.5, lam = lreg / 2):
  beta2     beta 2, lreg 0.01, alpha 0.45 (Figure 5's gap);
  lreg1e-4  beta 1, lreg 1e-4, alpha 0.25 (Figure 2's peak);
  T3        L = 3, beta 1, lreg 0.001, alpha 0.135 (Figure 6's gap, x = alpha (K - 1)/2 = 0.27).
Every run: a new teacher and data set per seed, the authors' initialisation W0 ~ N(0, 1)
(``train_layer(..., init_scale=1.0)``), the engine's Adam defaults; recorded: the clean and
noisy test errors, the matrix error, the training error and objective R/n, (m, q), status.
Each finished run is saved atomically in OUT/<point>.json before the next starts (resume:
rerun the same command).  The runs go in order of d, alternating the points, so that an
interrupted scan has every point at the smaller d.  The SE of both branches at each point
is added by ``--se`` (the fits and the answer: docs/validation.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from amp_attention.paper import PaperSetting
from amp_attention.runner import CheckpointFile

ROOT = Path(__file__).resolve().parents[2]
POINTS = {
    "beta2": PaperSetting(alpha=0.45, lreg=0.01, beta=2.0),
    "lreg1e-4": PaperSetting(alpha=0.25, lreg=1e-4),
    "T3": PaperSetting(alpha=0.135, lreg=0.001, T=3),
}


def run_record(layer) -> dict:
    return {"status": layer.status.value, "iterations": layer.iterations,
            "seconds": layer.seconds, "test_error": layer.test_error,
            "test_error_noisy": layer.test_error_noisy, "matrix_mse": layer.matrix_mse,
            "train_error": layer.train_error, "loss": layer.loss, "m": layer.m, "q": layer.q}


def se_record(problem, branch: str, log2_n: int) -> dict:
    from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

    r = solve_state_evolution(problem, mc=MonteCarloOptions(log2_n=log2_n, prox_branch=branch))
    return {"status": r.status.value, "message": r.message, "seconds": r.seconds,
            **{k: getattr(r, k) for k in ("m", "q", "V", "test_error", "test_error_noisy",
                                          "matrix_mse", "train_error", "loss",
                                          "prox_branch_split", "vhat_jump_share")},
            "stderr": dict(r.mc_stderr or {})}


FIELDS = ("test_error", "test_error_noisy", "matrix_mse", "loss")


def fit(ds, means, sems, power: float) -> tuple[float, float, float]:
    """Weighted least squares of mean(d) = a + b d^-power: (a, its standard error, chi^2 per
    degree of freedom; NaN with two points)."""
    import numpy as np

    x = np.asarray(ds, float) ** -power
    w = 1.0 / np.maximum(np.asarray(sems, float), 1e-12) ** 2
    A = np.column_stack([np.ones_like(x), x])
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    coef = cov @ (A.T @ (w * np.asarray(means, float)))
    resid = np.asarray(means, float) - A @ coef
    dof = len(x) - 2
    chi2 = float(np.sum(w * resid ** 2) / dof) if dof > 0 else float("nan")
    return float(coef[0]), float(np.sqrt(cov[0, 0])), chi2


def report(store: CheckpointFile, se_store: CheckpointFile, name: str) -> dict:
    """Per field: the mean and standard error of the runs at each d, the 1/d and 1/sqrt(d)
    extrapolations to d -> infinity, and both branches' SE (with their Monte-Carlo errors),
    with the distance of each extrapolation from each branch in combined errors."""
    import math
    import statistics

    recs = {**store.records(), **se_store.records()}
    by_d: dict[int, list[dict]] = {}
    for key, rec in recs.items():
        if key.startswith("d="):
            d = int(key.split(",")[0][2:])
            by_d.setdefault(d, []).append(rec)
    ds = sorted(d for d, v in by_d.items() if len(v) >= 2)
    se = {b: next((v for k, v in recs.items() if k.startswith(f"se,{b},")), None)
          for b in ("teacher", "global")}
    out: dict = {"point": name, "ds": ds, "runs": {d: len(by_d[d]) for d in ds}, "fields": {}}
    for f in FIELDS:
        means = [statistics.fmean(r[f] for r in by_d[d]) for d in ds]
        sems = [statistics.stdev(r[f] for r in by_d[d]) / math.sqrt(len(by_d[d])) for d in ds]
        row = {"mean": dict(zip(map(str, ds), means)), "sem": dict(zip(map(str, ds), sems))}
        if len(ds) >= 2:
            for label, power in (("1/d", 1.0), ("1/sqrt(d)", 0.5)):
                a, ea, chi2 = fit(ds, means, sems, power)
                row[label] = {"limit": a, "err": ea, "chi2_dof": chi2}
                for b, rec in se.items():
                    if rec is None or rec.get("status") != "converged":
                        continue
                    eb = float((rec.get("stderr") or {}).get(f, 0.0) or 0.0)
                    row[label][f"z_{b}"] = (a - rec[f]) / math.hypot(ea, eb)
        for b, rec in se.items():
            if rec is not None:
                row[f"se_{b}"] = rec[f]
                row[f"se_{b}_err"] = (rec.get("stderr") or {}).get(f)
        out["fields"][f] = row
    return out


def main() -> int:
    from amp_attention.adam import train_layer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", default=["beta2", "lreg1e-4"], choices=sorted(POINTS))
    ap.add_argument("--ds", type=int, nargs="+", default=[32, 64, 128, 192])
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 4, 4, 2],
                    help="seeds per d (one number per --ds entry)")
    ap.add_argument("--se", action="store_true", help="also solve both branches' SE")
    ap.add_argument("--se-log2n", type=int, default=13)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "branch_scan",
                    help="checkpoint folder (default: the committed record, so that a new "
                         "checkout resumes the scan)")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: fit what is saved (1/d and 1/sqrt(d)) against both "
                         "branches, print it and write OUT/summary.json")
    args = ap.parse_args()
    if len(args.seeds) != len(args.ds):
        ap.error("--seeds needs one count per --ds entry")
    args.out.mkdir(parents=True, exist_ok=True)
    stores = {k: CheckpointFile(args.out / f"{k}.json") for k in args.points}
    # the SE records in files of their own: one writer per checkpoint file (an SE run beside
    # the Adam runs would otherwise rewrite the file the Adam process keeps in memory)
    se_stores = {k: CheckpointFile(args.out / f"{k}_se.json") for k in args.points}
    if args.report:
        from amp_attention.files import atomic_write_json

        summary = {k: report(stores[k], se_stores[k], k) for k in args.points}
        for k, rep in summary.items():
            print(f"== {k}: d {rep['ds']} runs {rep['runs']}")
            for f, row in rep["fields"].items():
                line = " ".join(f"{row['mean'][str(d)]:.4f}+-{row['sem'][str(d)]:.4f}"
                                for d in rep["ds"])
                print(f"{f:17s} {line}")
                for label in ("1/d", "1/sqrt(d)"):
                    if label in row:
                        r = row[label]
                        zs = " ".join(f"z_{b} {r[f'z_{b}']:+.1f}" for b in ("teacher", "global")
                                      if f"z_{b}" in r)
                        print(f"   {label:9s} -> {r['limit']:.4f}+-{r['err']:.4f} "
                              f"(chi2/dof {r['chi2_dof']:.2f}) {zs}")
                print("   SE: " + " ".join(f"{b} {row.get(f'se_{b}', float('nan')):.4f}"
                                           for b in ("teacher", "global")))
        atomic_write_json(args.out / "summary.json", summary, indent=1)
        return 0
    if args.se:
        for k in args.points:
            for branch in ("global", "teacher"):
                key = f"se,{branch},2^{args.se_log2n}"
                if se_stores[k].read(key) is None:
                    se_stores[k].write(key, se_record(POINTS[k].problem(), branch,
                                                      args.se_log2n))
                    print(k, key, se_stores[k].read(key), flush=True)
    for d, n_seeds in zip(args.ds, args.seeds):
        for seed in range(n_seeds):
            for k in args.points:
                key = f"d={d},seed={seed}"
                if stores[k].read(key) is not None:
                    continue
                t0 = time.perf_counter()
                rec = run_record(train_layer(POINTS[k].problem(), d, seed, init_scale=1.0))
                stores[k].write(key, rec)
                print(f"{k} {key} {time.perf_counter() - t0:.0f} s: test {rec['test_error']:.4f} "
                      f"noisy {rec['test_error_noisy']:.4f} mse {rec['matrix_mse']:.4f} "
                      f"loss {rec['loss']:.5f} {rec['status']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
