"""Redraw a figure of arXiv 2509.24914 with the engine's theory and the authors' points.

    python benchmarks/paper/figures.py --figure 2 --repo PATH/ExtensiveAttention [--out docs/figures/paper]
                                       [--points 12] [--mc-log2n 12] [--workers 2]
                                       [--prox-branch teacher|global|both]

PATH/ExtensiveAttention is a clone of https://github.com/PenombraET/ExtensiveAttention
(their data/ is read there; nothing is downloaded).  Writes OUT/figureN.png and
OUT/figureN.json (parameters, the engine's curves, deviations from their points); the
engine's theory points are checkpointed in OUT/points_*.json, so an interrupted run
resumes.  Figures available: amp_attention.experiments.paper_figures.FIGURES.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from amp_attention.experiments.paper_figures import FIGURES, draw_figure
from amp_attention.jsonsafe import json_safe
from amp_attention.progress import progress_bar

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figure", type=int, required=True, choices=FIGURES)
    ap.add_argument("--repo", required=True, help="path of a clone of PenombraET/ExtensiveAttention")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "paper")
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
        res = draw_figure(args.figure, args.repo, args.out, points=args.points,
                          mc_log2n=args.mc_log2n, workers=args.workers, max_iter=args.max_iter,
                          saved_only=args.saved_only, prox_branch=args.prox_branch,
                          progress=lambda it, n: progress_bar(it, total=n, desc="curves"))
    except ValueError as exc:
        print(f"figures.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {res['png']} and {Path(res['png']).with_suffix('.json')}")
    print(json.dumps(json_safe(res.get("test_vs_adam", {})), indent=1, allow_nan=False))
    for miss in res["not_converged"]:
        print(f"not converged (left out): {miss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
