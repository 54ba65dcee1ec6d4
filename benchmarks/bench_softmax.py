"""Softmax state evolution at the speed users need (issue 32): every goal side by side with a
fixed calibration workload measured in the same process, idle and beside a CPU-bound
neighbour, with thread counts and load.

    python benchmarks/bench_softmax.py                  # goals 1-3 (about 5 minutes)
    python benchmarks/bench_softmax.py --big            # and the 32 x 32 diagram (~15 min)
    python benchmarks/bench_softmax.py --no-neighbour   # idle only

Calibration (C): three one-thread ``numpy.linalg.eigh`` of one 1000 x 1000 symmetric
matrix, median of three repeats, measured in this process before each goal.

1. The CLI-default softmax L = 2 point, ``amp-attention se --channel softmax --L 2`` run
   in this process through ``amp_attention.cli.main`` (after one warm-up run, so that
   Numba's caches are loaded; imports excluded; the process's memo of RQMC draws cleared
   before every run, so that each pays for its draws as a fresh process would), ``--runs``
   runs at ``--mc-seed`` 0, 1, ...: the median time, and the relative Monte-Carlo error of
   the test error as the root mean square of the runs' own estimates (each from 8 replicas
   is itself uncertain by ~25 %; the L = 2 point's seed 0 reports 9.4e-5, its rms over 4
   seeds is 1.4e-4); also printed, the seed-to-seed scatter of the runs' test errors (the
   error itself, not an estimate, but from ``--runs`` values: +-50 % at 95 % from the
   default 8; the L = 3 point's 7.6e-4 over 8 seeds found the Stein guard's false alarm,
   docs/performance.md fifteenth round).  Target: <= 3 C, relative error <= 1e-3.
2. A 4 x 4 softmax phase diagram (logit noise 0.5, alpha 0.1-0.6, lam 0.01-1 log-spaced,
   ``--workers 0``), whole, in units of goal 1's point.  Target: <= 8 points.
   ``--big``: a 32 x 32 diagram of the same ranges on 2 workers.  Target: <= 15 minutes,
   set on machines with C = 0.34-0.56 s; printed also in units of C, the figure that
   carries across machines: 15 min is 1875 C at the first round's C = 0.48 s.
3. L = 3 and L = 5 points (alpha 0.5 and 0.1, the rest at the CLI defaults) at sample sizes
   (``--args-L3``, ``--args-L5``) chosen so that their relative test-error error (rms over
   the same seeds) is at most the L = 2 point's (printed: whether it is), against goal 1's
   point.  Target: each <= 4 x the L = 2 point.  The sets, measured over 4 seeds in the
   fourteenth round (docs/performance.md): L = 3 2^12 own, 2^16 control-variate and 2^17
   test samples per replica (rms 1.33e-4; 2^11 / 2^16 / 2^17 gave 1.51e-4); L = 5 in the
   fifteenth round 2^10 own / 2^15 / 2^16 with the coarse level at 2^7, an eighth of the own
   samples as the CLI defaults' 2^8 of 2^11 (8 seeds: rms 1.33e-4 against the L = 2 point's
   1.33e-4 in the same run, seed-to-seed scatter 1.0e-4 against its 1.9e-4; the fourteenth
   round's 2^11 / 2^15 / 2^16 at coarse 2^8, 9.3e-5, cost 5.0-5.6 points; 2^14
   control-variate samples gave 3.4e-4).  Every point takes the control variate once per fine
   solve (``--mc-step-at start``, the default since the eleventh round).  3'. The same
   three points with ``--mc-step-at each`` (at every fine evaluation, the default before),
   against each other.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from machine import describe, load, neighbour

from amp_attention.solvers.channel_integrals import clear_draw_memo


def calibration(repeats: int = 3) -> float:
    """Median seconds of three one-thread eigh of a 1000 x 1000 symmetric matrix."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    A = rng.standard_normal((1000, 1000))
    A = A + A.T
    times = []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(3):
                np.linalg.eigh(A)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cli(argv: list[str]) -> tuple[float, str]:
    """(seconds, stdout) of ``amp-attention ARGV`` run in this process."""
    from amp_attention.cli import main

    buf = io.StringIO()
    # stderr kept apart: the L = 5 points' note that L = 5 is not validated, once a run
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        code = main(argv)
        dt = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"amp-attention {' '.join(argv)} exited {code}")
    return dt, buf.getvalue()


def se_point(extra: list[str], runs: int, field: str = "test_error") -> tuple[float, float, dict]:
    """(median seconds, rel_test_error of ``field`` over the runs, the first run's JSON result
    with ``scatter``: the relative seed-to-seed standard deviation of the runs' ``field``) of
    ``se --channel softmax --json EXTRA --mc-seed k``, k = 0 .. runs - 1."""
    times, errors, values, first = [], [], [], {}
    for k in range(runs):
        clear_draw_memo()
        dt, out = cli(["se", "--channel", "softmax", "--json", *extra, "--mc-seed", str(k)])
        times.append(dt)
        res = json.loads(out.splitlines()[0])
        errors.append(res["mc_stderr"][field] / res[field])
        values.append(res[field])
        first = first or res
    scatter = statistics.stdev(values) / statistics.fmean(values) if runs > 1 else math.nan
    return statistics.median(times), rel_test_error(errors), {**first, "scatter": scatter}


def rel_test_error(errors: list[float]) -> float:
    """The relative Monte-Carlo error of the test error over several scramblings: the root
    mean square of the runs' own estimates (each from 8 replicas, uncertain by ~25 %: one
    seed's can be 30 % below the rms, as the L = 2 point's seed 0 is)."""
    return (sum(e * e for e in errors) / len(errors)) ** 0.5


PD_ARGS = ["phase-diagram", "--channel", "softmax", "--L", "2", "--noise", "0.5",
           "--noise-at", "logit", "--alpha-range", "0.1", "0.6", "{n}", "--lam-range", "0.01",
           "1", "{n}", "--lam-spacing", "log", "--workers", "{w}", "--out", "{out}"]


def phase_diagram(n: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.format(n=n, w=workers, out=Path(tmp) / "pd") for a in PD_ARGS]
        clear_draw_memo()
        dt, _ = cli(argv)
    return dt


def run_goals(args, label: str) -> None:
    print(f"\n== {label}: {describe()}; {load()}", flush=True)
    C = calibration()
    print(f"calibration C (3 one-thread eigh, n = 1000): {C:.3f} s")
    se_point(["--L", "2"], 1)  # warm-up: Numba caches
    t2, e2, r2 = se_point(["--L", "2"], args.runs)
    print(f"1. CLI-default softmax L = 2 point: {t2:.2f} s = {t2 / C:.2f} C (target <= 3 C); "
          f"rel. MC error of the test error {e2:.1e} (target <= 1e-3); "
          f"{r2['iterations']} fine + {r2['iterations_coarse']} coarse iterations; seed-to-seed "
          f"scatter {r2['scatter']:.1e}", flush=True)
    C = calibration()
    t_pd = phase_diagram(4, 0)
    print(f"2. 4 x 4 softmax phase diagram (--workers 0): {t_pd:.1f} s = {t_pd / t2:.1f} "
          f"L = 2 points (target <= 8); C now {C:.3f} s", flush=True)
    if args.big:
        t_big = phase_diagram(32, 2)
        print(f"   32 x 32 on 2 workers: {t_big / 60:.1f} min = {t_big / C:.0f} C (target "
              f"<= 15 min, i.e. ~1875 C at C = 0.48 s); {load()}", flush=True)
    goal3(args, t2, e2, [], "3.", "L = 2 points")
    # the same with the control variate taken at every fine evaluation, against the L = 2
    # point solved the same way
    ts, es, _ = se_point(["--L", "2", "--mc-step-at", "each"], args.runs)
    print(f"3'. with --mc-step-at each: L = 2 point {ts:.2f} s = {ts / C:.2f} C, "
          f"rel. error {es:.1e}", flush=True)
    goal3(args, ts, es, ["--mc-step-at", "each"], "3'.", "such L = 2 points")


def goal3(args, t2: float, e2: float, flags: list[str], label: str, unit: str) -> None:
    """The L = 3 and L = 5 points with ``flags``, against an L = 2 point of t2 seconds and
    relative test-error error e2."""
    for L, alpha, extra in ((3, "0.5", args.args_L3), (5, "0.1", args.args_L5)):
        tL, eL, rL = se_point(["--L", str(L), "--alpha", alpha, *extra.split(), *flags],
                             args.runs)
        print(f"{label} L = {L} point (alpha {alpha}, {' '.join([extra, *flags])}): {tL:.2f} s "
              f"= {tL / t2:.2f} {unit} (target <= 4); rel. MC error of the test error "
              f"{eL:.1e} ({'<=' if eL <= e2 else '>'} that L = 2 point's {e2:.1e}); seed-to-seed "
              f"scatter {rL['scatter']:.1e}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=8,
                   help="runs of each point, at seeds 0 .. runs - 1 (median time, rms error)")
    p.add_argument("--big", action="store_true", help="also the 32 x 32 diagram (~15 min)")
    p.add_argument("--no-neighbour", action="store_true", help="idle only")
    p.add_argument("--args-L3", default="--mc-log2n 12 --mc-step-log2n 16 --mc-test-log2n 17",
                   help="sample-size flags of the L = 3 point")
    p.add_argument("--args-L5", default="--mc-log2n 10 --mc-coarse-log2n 7 "
                   "--mc-step-log2n 15 --mc-test-log2n 16",
                   help="sample-size flags of the L = 5 point")
    args = p.parse_args()
    run_goals(args, "idle")
    if not args.no_neighbour:
        with neighbour(True):
            run_goals(args, "beside a CPU-bound neighbour")


if __name__ == "__main__":
    sys.exit(main())
