"""Redraw the figures of arXiv 2509.24914 with the engine's theory and the authors' points.

    python benchmarks/paper/figures.py --all --repo PATH/ExtensiveAttention [--out DIR]
    python benchmarks/paper/figures.py --figure 2 --repo PATH/ExtensiveAttention [--out DIR]
                                       [--points 12] [--mc-log2n 11] [--workers 2]
                                       [--prox-branch teacher|global|both]

PATH/ExtensiveAttention is a clone of https://github.com/PenombraET/ExtensiveAttention
(their data/ is read there; nothing is downloaded); its commit is checked against the one
the docs use (paper_figures.AUTHORS_COMMIT) and named.  Writes DIR/figureN.png and
DIR/figureN.json (parameters, the engine's curves, deviations from their points) into
./paper-figures by default, never over the checkout (docs/figures/paper is written only
when asked with --out); the engine's theory points are checkpointed in DIR/points_*.json,
so an interrupted run resumes.  --all draws all six in the order 1, 2, 3, 5, 4, 6 with the
settings docs/paper.md names (paper_figures.FIGURE_SETTINGS; --points, --mc-log2n,
--max-iter and --prox-branch apply to --figure only), prints each figure's time and writes
DIR/figures.json (times, the commit check).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from amp_attention.experiments.paper_figures import (ALL_ORDER, FIGURE_SETTINGS, FIGURES,
                                                     check_repo, commit_check, draw_figure,
                                                     missing_data)
from amp_attention.files import atomic_write_json
from amp_attention.jsonsafe import json_safe
from amp_attention.progress import progress_bar


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--figure", type=int, choices=FIGURES, help="one figure")
    which.add_argument("--all", action="store_true",
                       help="all six, with the settings docs/paper.md names")
    ap.add_argument("--repo", required=True, help="path of a clone of PenombraET/ExtensiveAttention")
    ap.add_argument("--out", type=Path, default=Path("paper-figures"),
                    help="output folder (default ./paper-figures; the committed figures are "
                         "docs/figures/paper)")
    ap.add_argument("--points", type=int, default=12, help="theory points per curve (default 12)")
    ap.add_argument("--mc-log2n", type=int, default=12,
                    help="RQMC samples 2^N per replica of the softmax SE (default 12)")
    ap.add_argument("--workers", type=int, default=0, help="local processes for the curves (0: here)")
    ap.add_argument("--saved-only", action="store_true",
                    help="solve nothing: draw from the saved theory points (others listed)")
    ap.add_argument("--max-iter", type=int, default=500,
                    help="SE iterations per level; a point beyond is left out and listed")
    ap.add_argument("--prox-branch", choices=("teacher", "global", "both"), default="teacher",
                    help="the SE's prox branch where the prox has competing minima "
                         "(docs/theory.md 16.8): teacher = descent from the teacher's logits, "
                         "the paper's SE (default); global = the global minimiser; both = "
                         "Figure 2 with the global branch dashed")
    args = ap.parse_args()
    try:
        root = check_repo(args.repo)
        check = commit_check(root)
        print(check["message"], flush=True)
        missing = missing_data(root)
        if missing:
            raise ValueError(f"repo: missing from {root}: {', '.join(missing)} (an incomplete "
                             "clone of PenombraET/ExtensiveAttention?)")
        numbers = ALL_ORDER if args.all else (args.figure,)
        times = {}
        for n in numbers:
            kw = (dict(FIGURE_SETTINGS[n]) if args.all else
                  {"points": args.points, "mc_log2n": args.mc_log2n, "max_iter": args.max_iter,
                   "prox_branch": args.prox_branch})
            t0 = time.perf_counter()
            res = draw_figure(n, root, args.out, workers=args.workers, saved_only=args.saved_only,
                              progress=lambda it, k: progress_bar(it, total=k, desc=f"figure {n}"),
                              **kw)
            times[n] = time.perf_counter() - t0
            print(f"figure {n}: {times[n]:.0f} s; wrote {res['png']} and "
                  f"{Path(res['png']).with_suffix('.json')}", flush=True)
            for miss in res["not_converged"]:
                print(f"  not converged (left out): {miss}")
            if not args.all:
                print(json.dumps(json_safe(res.get("test_vs_adam", {})), indent=1, allow_nan=False))
        if args.all:
            atomic_write_json(args.out / "figures.json", {
                "seconds": {str(k): v for k, v in times.items()},
                "total_seconds": sum(times.values()), "commit": check,
                "settings": {str(k): FIGURE_SETTINGS[k] for k in ALL_ORDER}}, indent=1)
            print(f"all six in {sum(times.values()) / 60:.1f} min; {args.out / 'figures.json'}")
    except (ValueError, OSError) as exc:
        print(f"figures.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
