"""The engine's SE fixed points at the rows of the authors' SE tables (issue 30, item 4).

    python benchmarks/paper/se_tables.py [--every 16] [--log2n 14] [--files lreg_0.01_,lreg_0.002_]
                                         [--first 0] [--last 127] [--prox-branch teacher]
                                         [--out runs/paper_se.json]
    python benchmarks/paper/se_tables.py --summary runs/paper_se*.json

For every row (or every N-th) of data/SE/SE_kappa_*_lreg_*_noise_0.5.csv (kept in
tests/data/paper_tables.json) the engine solves the SE of the same setting (softmax
L = 2, logit_goe noise, lam = lreg/2; amp_attention.paper) and records its values in
the authors' units beside theirs, with the engine's propagated Monte-Carlo standard
error.  Results are written atomically after every row and a rerun resumes; two
processes on different ``--files`` and ``--out`` run side by side.

The summary gives, per file and column, the median and largest relative deviation
(engine / theirs - 1) and the largest |z|, z = (engine - theirs) / err with
err^2 = (engine's propagated MC error)^2 + (their fixed-point residual)^2 + (their
row scatter)^2.  Their residual is |prior(their hats) - their overlap| (the engine's
denoiser, which is deterministic, at their stored hats): how far their stored state is
from a fixed point of the prior half of the map.  Their row scatter is the standard
deviation of their column around a quadratic in alpha fitted to the 11 rows centred on
the row (their 1000-sample Monte Carlo, fresh at every row and iteration, shows there;
their `test` and `train` columns are such 1000-sample averages).
The engine's common random numbers make its error at one seed the same sign over
neighbouring rows (a seed-wide offset), so a file-wide median of one sign is not by
itself a systematic deviation.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
from pathlib import Path

import numpy as np

from amp_attention.files import atomic_write_json
from amp_attention.paper import (PaperSetting, row_deviation_z, setting_from_filename,
                                 to_paper_columns)
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

ROOT = Path(__file__).resolve().parents[2]
FILES = [f"data/SE/SE_kappa_0.5_lreg_{x}_noise_0.5.csv"
         for x in ("0.01", "0.002", "0.001", "0.0005", "0.0001", "1e-05")] + \
        [f"data/SE/SE_kappa_{k}_lreg_0.01_noise_0.5.csv" for k in ("0.2", "0.8")]
COLUMNS = ("m", "q", "sigma", "test", "train")


def solve(args) -> None:
    tables = json.loads((ROOT / "tests/data/paper_tables.json").read_text())["tables"]
    done = json.loads(args.out.read_text()) if args.out.exists() else {}
    mc = MonteCarloOptions(log2_n=args.log2n, coarse_log2_n=min(10, args.log2n),
                           prox_branch=args.prox_branch)
    files = [f for f in FILES if not args.files or any(x in f for x in args.files.split(","))]
    for path in files:
        t = tables[path]
        p = setting_from_filename(path)
        last = len(t["rows"]) if args.last is None else min(args.last + 1, len(t["rows"]))
        for i in range(args.first, last, args.every):
            key = f"{path}#{i}"
            if key in done:
                continue
            row = dict(zip(t["columns"], t["rows"][i]))
            if row["q"] > 1e6:  # their diverged rows (docs/paper.md)
                continue
            s = PaperSetting(alpha=row["alpha"], lreg=p["lreg"], kappa=p["kappa"], noise_in=p["noise"])
            r = solve_state_evolution(s.problem(), mc=mc, max_iter=args.max_iter)
            done[key] = {"paper": row, "engine": to_paper_columns(r, row["alpha"]),
                         "status": r.status.value, "seconds": r.seconds,
                         "mc_stderr": r.mc_stderr, "log2_n": args.log2n,
                         "prox_branch": r.prox_branch, "prox_branch_split": r.prox_branch_split,
                         "method": r.method}
            atomic_write_json(args.out, done)
            print(key, r.status.value, round(r.seconds, 1), flush=True)


def summary(paths: list[str], markdown: bool = False) -> None:
    tables = json.loads((ROOT / "tests/data/paper_tables.json").read_text())["tables"]
    done: dict = {}
    for p in paths:
        for f in glob.glob(p):
            done.update(json.loads(Path(f).read_text()))
    unconverged: list[str] = []
    cells: dict[str, dict[str, str]] = {}
    print(f"{'file':40s} {'col':6s} {'n':>3s} {'median dev':>10s} {'max |dev|':>9s} "
          f"{'med |z|':>7s} {'max |z|':>7s} {'|z|>3':>5s}")
    for path in FILES:
        rows = [dict(zip(tables[path]["columns"], r)) for r in tables[path]["rows"]]
        p = setting_from_filename(path)
        z_of = {k: row_deviation_z(rows, int(k.split("#")[1]), p["kappa"], p["lreg"],
                                   v["engine"], v["mc_stderr"])
                for k, v in done.items() if k.startswith(path + "#") and v["status"] == "converged"}
        for c in COLUMNS:
            dev, z = [], []
            for k, v in done.items():
                if not k.startswith(path + "#") or c not in v["paper"]:
                    continue
                if v["status"] != "converged":
                    if c == COLUMNS[0]:
                        unconverged.append(f"{path.split('/')[-1]} row {k.split('#')[1]} "
                                           f"(alpha {v['paper']['alpha']:.4f}): {v['status']}")
                    continue
                e, t = v["engine"][c], v["paper"][c]
                if not math.isfinite(e) or t == 0:
                    continue
                dev.append(e / t - 1)
                z.append(z_of[k][c])
            if dev:
                az = np.abs(z)
                cells.setdefault(path, {"n": str(len(dev))})[c] = (
                    f"{100 * np.median(dev):+.1f} % / {100 * np.max(np.abs(dev)):.1f} % "
                    f"({np.max(az):.1f})")
                print(f"{path.split('/')[-1][:40]:40s} {c:6s} {len(dev):3d} {np.median(dev):+10.4f} "
                      f"{np.max(np.abs(dev)):9.4f} {np.median(az):7.2f} {np.max(az):7.2f} "
                      f"{int(np.sum(az > 3)):5d}")
    for line in unconverged:
        print(f"not converged (left out): {line}")
    if markdown:
        print("\n| file | rows | " + " | ".join(f"`{c}`" for c in COLUMNS) + " |")
        print("| --- | --- |" + " --- |" * len(COLUMNS))
        for path, row in cells.items():
            name = path.split("/")[-1].replace("SE_", "").replace("_noise_0.5.csv", "")
            print(f"| {name} | {row['n']} | " + " | ".join(row.get(c, "") for c in COLUMNS) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=16)
    ap.add_argument("--first", type=int, default=0, help="first row index")
    ap.add_argument("--last", type=int, default=None, help="last row index (default: the end)")
    ap.add_argument("--prox-branch", choices=("teacher", "global"), default="teacher",
                    help="the SE's prox branch (docs/theory.md 16.8; default: teacher, the "
                         "authors' convention)")
    ap.add_argument("--log2n", type=int, default=14)
    ap.add_argument("--max-iter", type=int, default=500,
                    help="fixed-point iterations per level (a row that does not converge is "
                         "recorded with its status and left out of the summary)")
    ap.add_argument("--files", default="", help="comma list of substrings of the file names (default: all)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "paper_se.json")
    ap.add_argument("--summary", nargs="*", help="only summarise these result files (globs)")
    ap.add_argument("--markdown", action="store_true", help="also print the summary as a table")
    args = ap.parse_args()
    if args.summary is not None:
        summary(args.summary or [str(args.out)], args.markdown)
        return
    solve(args)
    summary([str(args.out)])


if __name__ == "__main__":
    main()
