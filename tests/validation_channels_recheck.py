"""The slow channel validation's criterion with today's SE against the recorded ERM fits.

When only the SE side changes (its estimators, not ERM), the 18 points of
tests/test_validation_channels_slow.py need not rerun ERM (~40 min): this solves the SE at each
point with the validation's own settings (validation_channels.MC) and checks
|intercept - SE| <= tolerance(SE, fit, SE mc_stderr) against the fits recorded in
tests/data/channels_finite_size.json (~3 min on 2 cores).  Run:

    python tests/validation_channels_recheck.py      # exit status = number of failures
"""

import json
import sys
import time
from pathlib import Path

from validation_channels import MC, POINTS, QUANTITIES, problem_of, tolerance

from amp_attention.solvers.state_evolution import solve_state_evolution

rec = json.loads((Path(__file__).parent / "data" / "channels_finite_size.json").read_text())
bad = 0
for name in POINTS:
    t = time.perf_counter()
    se = solve_state_evolution(problem_of(POINTS[name]), start="informative", mc=MC, tol=1e-8)
    out = [name, f"{time.perf_counter()-t:.1f}s", se.status]
    for q in QUANTITIES:
        fit, old, new = rec[name]["fits"][q], rec[name]["se"][q], getattr(se, q)
        tol = tolerance(new, fit, se.mc_stderr[q])
        ok = abs(fit["intercept"] - new) <= tol
        bad += not ok
        out.append(f"{q}: new {new:.6g} (old {old:.6g}, +-{se.mc_stderr[q]:.1e}, was +-{rec[name]['se_mc_stderr'][q]:.1e}) ERM {fit['intercept']:.6g} tol {tol:.1e} {'ok' if ok else 'FAIL'}")
    print(" | ".join(out), flush=True)
print("failures", bad)
sys.exit(bad)
