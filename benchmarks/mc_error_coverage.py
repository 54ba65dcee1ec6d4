"""How far to trust the SE's Monte-Carlo error bars: their coverage over RQMC seeds.

    python benchmarks/mc_error_coverage.py [--seeds 64] [--replicas 8] [--out DIR]

At each of the POINTS below the softmax SE is solved with RQMC seeds 0..S-1 (everything
else fixed: the CLI's default Monte-Carlo options, ``--replicas`` replicas of
2^(11 + log2(8/replicas)) points, i.e. the same number of samples), and every field's
``mc_stderr`` is compared with the spread it claims to measure: for seed s,
z_s = (x_s - mean of the other seeds) / (mc_stderr_s sqrt(1 + 1/(S-1))).  Printed per
point and field: the share of |z| <= 2 (what a user's "+- 2 errors" covers), of
|z| <= t (t the 97.5 % quantile of Student's law with the result's mc_dof degrees of
freedom), of |z| <= 3, and the ratio of the seeds' standard deviation to the median
mc_stderr (1 when the error bars are calibrated).  Each solve is saved in DIR (resumable);
DIR/coverage.json holds the table.  Issue 58, item 12.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from amp_attention.files import atomic_write_json
from amp_attention.progress import progress_bar
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
from amp_attention.spec import Learner, Problem, Task, WishartTarget

#: (name, problem): softmax points of three kinds (L = 2 at beta 2, the issue's; a
#: smaller lam; L = 3)
POINTS = {
    "softmax_L2_beta2_a0.5_lam0.1": Problem(Task("softmax", L=2, beta=2.0),
                                            WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5),
    "softmax_L2_beta1_a1_lam0.01": Problem(Task("softmax", L=2, beta=1.0),
                                           WishartTarget(0.5), Learner(1.0, 0.01), alpha=1.0),
    "softmax_L3_beta1_a0.3_lam0.1": Problem(Task("softmax", L=3, beta=1.0),
                                            WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.3),
}
FIELDS = ("test_error", "train_error", "loss", "m", "q", "V")


def solve(problem: Problem, seed: int, replicas: int) -> dict:
    log2_n = 11 + int(round(math.log2(8 / replicas)))
    mc = MonteCarloOptions(log2_n=log2_n, replicas=replicas, seed=seed,
                           coarse_log2_n=min(8, log2_n))
    r = solve_state_evolution(problem, mc=mc)
    return {"seed": seed, "converged": bool(r.converged),
            "mc_dof": getattr(r, "mc_dof", replicas - 1),
            **{f: float(getattr(r, f)) for f in FIELDS},
            "mc_stderr": {f: (r.mc_stderr or {}).get(f) for f in FIELDS},
            "seconds": r.seconds}


def coverage(rows: list[dict]) -> dict:
    """Coverage table of one point's rows (one per seed)."""
    out = {}
    S = len(rows)
    for f in FIELDS:
        x = np.array([r[f] for r in rows])
        se = np.array([np.nan if r["mc_stderr"][f] is None else r["mc_stderr"][f]
                       for r in rows])
        dof = np.array([r["mc_dof"] for r in rows], dtype=float)
        loo = (x.sum() - x) / (S - 1)
        z = (x - loo) / (se * math.sqrt(1 + 1 / (S - 1)))
        t = stats.t.ppf(0.975, dof)
        ok = np.isfinite(z)
        out[f] = {"seeds": int(ok.sum()),
                  "within_2": float(np.mean(np.abs(z[ok]) <= 2)),
                  "within_t95": float(np.mean(np.abs(z[ok]) <= t[ok])),
                  "within_3": float(np.mean(np.abs(z[ok]) <= 3)),
                  "t95": float(np.median(t)),
                  "sd_over_median_stderr": float(np.std(x, ddof=1) / np.median(se[ok])),
                  "expected_within_2_t": float(np.median(2 * stats.t.cdf(2, dof) - 1))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("mc-error-coverage"))
    args = ap.parse_args()
    out = args.out / f"replicas{args.replicas}"
    out.mkdir(parents=True, exist_ok=True)
    table = {}
    for name, problem in POINTS.items():
        rows = []
        for s in progress_bar(range(args.seeds), desc=name):
            f = out / f"{name}_s{s}.json"
            if f.exists():
                rows.append(json.loads(f.read_text()))
                continue
            row = solve(problem, s, args.replicas)
            atomic_write_json(f, row)
            rows.append(row)
        good = [r for r in rows if r["converged"]]
        table[name] = {"converged": len(good), "seeds": len(rows),
                       "seconds_median": float(np.median([r["seconds"] for r in rows])),
                       "fields": coverage(good)}
        print(f"{name}: {len(good)}/{len(rows)} converged, "
              f"median {table[name]['seconds_median']:.2f} s per solve", flush=True)
        print(f"  {'field':<12} {'|z|<=2':>7} {'|z|<=t95':>9} {'|z|<=3':>7} {'t95':>6} "
              f"{'sd/stderr':>9}  (t law: |z|<=2 expected {table[name]['fields']['m']['expected_within_2_t']:.3f})")
        for fld, c in table[name]["fields"].items():
            print(f"  {fld:<12} {c['within_2']:>7.3f} {c['within_t95']:>9.3f} "
                  f"{c['within_3']:>7.3f} {c['t95']:>6.3f} {c['sd_over_median_stderr']:>9.3f}")
    atomic_write_json(out / "coverage.json", {"replicas": args.replicas, "seeds": args.seeds,
                                               "points": {k: p.to_dict() for k, p in POINTS.items()},
                                               "table": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
