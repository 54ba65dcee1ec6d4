"""The finite-size allowance for the authors' Adam points, measured with the engine's Adam.

    python benchmarks/paper/adam_allowance.py --repo PATH/ExtensiveAttention
        [--points beta2_noise0.50:0.45 ...] [--ds 32 64 ...] [--seeds 4] [--workers 2]
        [--out runs/paper_allowance]

At each point (a key of amp_attention.experiments.paper_figures.ADAM_FILES and
x = alpha (K - 1)/2) the engine's SE and its own Adam at two or more d (their initialisation,
``seeds`` data sets each) give the finite-d deviation and the allowance at d = 100
(paper_figures.adam_allowance); the authors' d = 100 mean there is checked against
SE +- (3 sem + allowance).  Every finished run is checkpointed in OUT/<key>_<x>.json; a
rerun resumes.  Prints one line per point and field, and OUT/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from amp_attention.experiments.paper_figures import (ADAM_FILES, adam_allowance, adam_file_check,
                                                     check_repo)
from amp_attention.files import atomic_write_json
from amp_attention.progress import progress_bar
from amp_attention.runner import run_tasks

ROOT = Path(__file__).resolve().parents[2]
#: two points per label-task setting, x = 0.25 and 0.05, and beta 2, Delta 0.5 where the prox jumps
DEFAULT_POINTS = ([f"{k}:{x}" for x in ("0.25", "0.05") for k, f in ADAM_FILES.items()
                   if f.task == "label" and not k.startswith("label")]
                  + ["beta2_noise0.50:0.45"])


def _point(repo: str, spec: str, ds: tuple[int, ...], seeds: int, out: str) -> dict:
    key, x = spec.split(":")
    return adam_allowance(Path(repo), key, float(x), ds=ds, seeds=seeds,
                          checkpoint=Path(out) / f"{key}_{x}.json")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, help="path of a clone of PenombraET/ExtensiveAttention")
    ap.add_argument("--points", nargs="+", default=DEFAULT_POINTS,
                    help="KEY:X pairs, KEY in paper_figures.ADAM_FILES, X = alpha (K - 1)/2")
    ap.add_argument("--ds", type=int, nargs="+", default=(32, 64),
                    help="two or more dimensions, ascending (the allowance is carried from the last)")
    ap.add_argument("--seeds", type=int, default=4, help="data sets per dimension")
    ap.add_argument("--workers", type=int, default=0, help="local processes (0: here)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "paper_allowance")
    ap.add_argument("--theory", type=Path, default=ROOT / "docs" / "figures" / "paper",
                    help="folder of the figures' saved SE curves (points_<setting>.json) for "
                         "the check of every point of every file")
    args = ap.parse_args()
    try:
        check_repo(args.repo)
        for spec in args.points:
            key, _, x = spec.partition(":")
            if key not in ADAM_FILES or not x:
                raise ValueError(f"points: {spec!r} is not KEY:X with KEY one of {', '.join(ADAM_FILES)}")
            float(x)
        if len(args.ds) < 2 or sorted(set(args.ds)) != list(args.ds) or args.ds[0] < 2:
            raise ValueError(f"ds: two or more distinct ascending dimensions >= 2, got {args.ds}")
    except ValueError as exc:
        print(f"adam_allowance.py: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = [(args.repo, spec, tuple(args.ds), args.seeds, str(args.out)) for spec in args.points]
    res = run_tasks(_point, tasks, workers=args.workers,
                    progress=lambda it, n: progress_bar(it, total=n, desc="points"))
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, load {os.getloadavg()[0]:.2f}")
    print(f"{'point':24s} {'field':17s} {'SE':>8s} " + " ".join(f"{'d=' + str(d):>16s}" for d in args.ds)
          + f" {'sqrt(d)*delta':>15s} {'allow':>7s} {'theirs':>16s} {'dev':>8s} {'bound':>7s}")
    for r in res:
        for field, v in r["fields"].items():
            eng = [v["engine"][str(d)] for d in args.ds]
            print(f"{r['key'] + ':' + str(r['x']):24s} {field:17s} {v['se']:8.4f} "
                  + " ".join(f"{e['mean']:8.4f}+-{e['sem']:6.4f}" for e in eng)
                  + " " + "/".join(f"{e['sqrt_d_times_delta']:.3f}" for e in eng)
                  + f" {v['allowance_d100']:7.4f} {v['theirs']:8.4f}+-{v['their_sem']:6.4f}"
                  + f" {v['theirs_minus_se']:+8.4f} {v['bound']:7.4f} {'ok' if v['passes'] else 'OUTSIDE'}")
            if "seq2seq_minus_label" in v:
                print(f"{'':24s} {'  seq2seq - label':17s} (same data) "
                      + " ".join(f"d={d}: {w['mean']:+.5f}+-{w['sem']:.5f} (sqrt(d)x {w['sqrt_d_times_mean']:+.4f})"
                                 for d, w in v["seq2seq_minus_label"].items()))
    # every file: all its points against the SE curve of its setting, with the allowance
    # measured at that setting, linear in alpha between the measured points (files
    # sharing a setting share it)
    allow: dict[str, dict[str, tuple[list, list]]] = {}
    for r in res:
        setting = ADAM_FILES[r["key"]].curve
        for field, v in r["fields"].items():
            xs, vs = allow.setdefault(setting, {}).setdefault(field, ([], []))
            xs.append(r["alpha"])
            vs.append(v["allowance_d100"])
    checks = []
    print(f"\n{'file':20s} {'field':17s} {'allowance':>13s} {'points':>6s} {'outside':>7s}  worst/bound  alphas outside")
    for key, f in ADAM_FILES.items():
        curve = args.theory / f"points_{f.curve}.json"
        if f.curve not in allow or not curve.exists():
            continue
        rows = list(json.loads(curve.read_text()).values())
        c = adam_file_check(Path(args.repo), key, rows, allow[f.curve])
        c["key"] = key
        checks.append(c)
        for field, v in c["fields"].items():
            print(f"{key:20s} {field:17s} {v['allowance'][0]:6.4f}-{v['allowance'][1]:6.4f}"
                  f" {v['points']:6d} {v['outside']:7d}"
                  f"  {v['max_dev_over_bound']:11.2f}  {v['alphas_outside'][:8]}")
    atomic_write_json(args.out / "summary.json", {"points": res, "files": checks}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
