"""Which prox branch does training follow?  The engine's Adam at growing d at the band points
of the paper's small-lambda peak (docs/theory.md 16.8, docs/validation.md "Which branch").

    python benchmarks/paper/branch_scan.py [--points beta2 lreg1e-4] [--ds 32 64 128 192]
        [--seeds 4 4 4 2] [--out runs/branch_scan]

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


def main() -> int:
    from amp_attention.adam import train_layer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", nargs="+", default=["beta2", "lreg1e-4"], choices=sorted(POINTS))
    ap.add_argument("--ds", type=int, nargs="+", default=[32, 64, 128, 192])
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 4, 4, 2],
                    help="seeds per d (one number per --ds entry)")
    ap.add_argument("--se", action="store_true", help="also solve both branches' SE")
    ap.add_argument("--se-log2n", type=int, default=13)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "branch_scan")
    args = ap.parse_args()
    if len(args.seeds) != len(args.ds):
        ap.error("--seeds needs one count per --ds entry")
    args.out.mkdir(parents=True, exist_ok=True)
    stores = {k: CheckpointFile(args.out / f"{k}.json") for k in args.points}
    if args.se:
        for k in args.points:
            for branch in ("global", "teacher"):
                key = f"se,{branch},2^{args.se_log2n}"
                if stores[k].read(key) is None:
                    stores[k].write(key, se_record(POINTS[k].problem(), branch, args.se_log2n))
                    print(k, key, stores[k].read(key), flush=True)
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
