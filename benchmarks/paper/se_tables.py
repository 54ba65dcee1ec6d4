"""The engine's SE fixed points at the rows of the authors' SE tables (issue 30, item 4).

    python benchmarks/paper/se_tables.py [--every 8] [--log2n 12] [--out runs/paper_se.json]

For every row (or every N-th) of data/SE/SE_kappa_*_lreg_*_noise_0.5.csv (kept in
tests/data/paper_tables.json) the engine solves the SE of the same setting (softmax
L = 2, logit_goe noise, lam = lreg/2; amp_attention.paper) and records its values in
the authors' units beside theirs.  Results are written atomically after every row and
a rerun resumes.  The summary (median / max relative deviation per file and column)
is printed at the end; docs/paper.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from amp_attention.files import atomic_write_json
from amp_attention.paper import PaperSetting, setting_from_filename, to_paper_columns
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

ROOT = Path(__file__).resolve().parents[2]
FILES = [f"data/SE/SE_kappa_0.5_lreg_{x}_noise_0.5.csv"
         for x in ("0.01", "0.002", "0.001", "0.0005", "0.0001", "1e-05")] + \
        [f"data/SE/SE_kappa_{k}_lreg_0.01_noise_0.5.csv" for k in ("0.2", "0.8")]
COLUMNS = ("m", "q", "sigma", "q_hat", "m_hat", "sigma_hat", "test", "train")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--log2n", type=int, default=12)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "paper_se.json")
    args = ap.parse_args()
    tables = json.loads((ROOT / "tests/data/paper_tables.json").read_text())["tables"]
    done = json.loads(args.out.read_text()) if args.out.exists() else {}
    mc = MonteCarloOptions(log2_n=args.log2n, coarse_log2_n=min(10, args.log2n))
    for path in FILES:
        t = tables[path]
        p = setting_from_filename(path)
        for i in range(0, len(t["rows"]), args.every):
            key = f"{path}#{i}"
            if key in done:
                continue
            row = dict(zip(t["columns"], t["rows"][i]))
            s = PaperSetting(alpha=row["alpha"], lreg=p["lreg"], kappa=p["kappa"], noise_in=p["noise"])
            r = solve_state_evolution(s.problem(), mc=mc)
            done[key] = {"paper": row, "engine": to_paper_columns(r, row["alpha"]),
                         "status": r.status.value, "seconds": r.seconds,
                         "mc_stderr": r.mc_stderr}
            atomic_write_json(args.out, done)
            print(key, r.status.value, round(r.seconds, 1), flush=True)
    print(f"{'file':48s} {'col':9s} {'n':>3s} {'median':>8s} {'max':>8s}")
    for path in FILES:
        for c in COLUMNS:
            dev = [abs(v["engine"][c] / v["paper"][c] - 1) for k, v in done.items()
                   if k.startswith(path + "#") and c in v["paper"]
                   and v["paper"][c] != 0 and math.isfinite(v["engine"][c])
                   and v["paper"]["q"] < 1e6]
            if dev:
                print(f"{path.split('/')[-1]:48s} {c:9s} {len(dev):3d} {np.median(dev):8.4f} {max(dev):8.4f}")


if __name__ == "__main__":
    main()
