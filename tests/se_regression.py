"""Before/after table of SE outputs at 20 points (the restructuring's yardstick, issue 15).

A regression record, not a validation: the reference numbers are what the engine
computed at the commit named in the record, before the restructuring.  What the
comparison can show is that a change of code did not change a number; it says
nothing about whether the number is right (the validations in docs/validation.md
do that).

Tolerances are set by the numerics, not by the record:

* deterministic paths (linear channel: closed-form channel, quadrature-based
  denoiser functionals): 1e-10 relative, the order of the fixed-point tolerance
  (tol = 1e-12 here) times the condition of the fixed point; the matrix MSE
  Q0 - 2m + q and the test error (linear channel: a multiple of it, plus the noise)
  relative to the larger of themselves and the overlaps m, q they are a difference
  of: where they cancel to 5e-4 (``linear_L1_noiseless_smalllam``) a rounding of the
  overlaps at 3e-13 (another CPU, another BLAS) is 1.4e-10 of the difference;
* Monte-Carlo channels (softmax, seq2lab, noise at the logit): the same RQMC
  seed and points are used, so a faithful restructuring reproduces them to
  round-off as well; a change that alters the random stream only has to agree
  within 4 of the recorded Monte-Carlo standard errors (``mc_stderr``).

Usage::

    python tests/se_regression.py record tests/data/se_regression_points.json
    python tests/se_regression.py record tests/data/se_regression_points.json NAME ...
    python tests/se_regression.py compare tests/data/se_regression_points.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from amp_attention.spec import (CustomTarget, Learner, PowerLawTarget, Problem, SpikedTarget,
                                Task, WishartTarget)

FIELDS = ("m", "q", "V", "m_hat", "q_hat", "V_hat", "train_error", "test_error", "matrix_mse",
          "loss", "rank_fraction", "trace_per_d")
DETERMINISTIC_RTOL = 1e-10
#: differences of the overlaps (module docstring): compared relative to m and q too
CANCELLING = ("matrix_mse", "test_error")
MC_SIGMAS = 4.0


def points() -> dict[str, Problem]:
    """Twenty problems: every channel, L = 1..3, rank caps, every target kind."""
    lin = Task("linear", L=1, noise=0.1)
    P = Problem
    out = {
        "linear_L1_wishart": P(lin, WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5),
        "linear_L1_wishart_cap": P(lin, WishartTarget(0.5), Learner(0.3, 0.05), alpha=0.8),
        "linear_L1_noiseless_smalllam": P(Task("linear", L=1), WishartTarget(0.25),
                                          Learner(1.0, 1e-3), alpha=0.3),
        "linear_L2_wishart": P(Task("linear", L=2, noise=0.2), WishartTarget(1.0),
                               Learner(0.5, 0.1), alpha=1.2),
        "linear_L3_wishart": P(Task("linear", L=3, noise=0.05), WishartTarget(0.5),
                               Learner(1.0, 0.02), alpha=0.6),
        "linear_L1_spiked": P(lin, SpikedTarget(0.3, spikes=(4.0, 8.0)), Learner(1.0, 0.05),
                              alpha=0.4),
        "linear_L1_powerlaw": P(lin, PowerLawTarget(1.25, d=200, p0=200), Learner(1.0, 0.02),
                                alpha=0.1),
        "linear_L1_powerlaw_cap": P(lin, PowerLawTarget(1.0, d=200, p0=100),
                                    Learner(0.1, 0.02), alpha=0.2),
        "linear_L1_custom_list": P(lin, CustomTarget(eigenvalues=(3.0, 2.0, 1.0, 0.5, 0.0, 0.0)),
                                   Learner(1.0, 0.05), alpha=0.3),
        "linear_L1_elementwise": P(lin, WishartTarget(0.5),
                                   Learner(1.0, 0.1, parameterisation="elementwise"), alpha=0.5),
        "softmax_L2": P(Task("softmax", L=2, noise=0.0), WishartTarget(0.5), Learner(1.0, 0.05),
                        alpha=0.6),
        "softmax_L2_noisy_cap": P(Task("softmax", L=2, noise=0.05), WishartTarget(1.0),
                                  Learner(0.5, 0.05), alpha=0.8),
        "softmax_L3": P(Task("softmax", L=3, beta=0.5, noise=0.01), WishartTarget(0.5),
                        Learner(1.0, 0.05), alpha=0.5),
        "softmax_L2_logit_noise": P(Task("softmax", L=2, noise=0.1, noise_at="logit"),
                                    WishartTarget(0.5), Learner(1.0, 0.05), alpha=0.6),
        "softmax_L2_beta2": P(Task("softmax", L=2, beta=2.0, noise=0.01), WishartTarget(0.5),
                              Learner(1.0, 0.1), alpha=0.7),
        "softmax_L2_powerlaw": P(Task("softmax", L=2, noise=0.01),
                                 PowerLawTarget(1.5, d=100, p0=100), Learner(1.0, 0.05),
                                 alpha=0.4),
        "seq2lab_L2": P(Task("seq2lab", L=2, noise=0.0), WishartTarget(0.5), Learner(1.0, 0.05),
                        alpha=0.6),
        "seq2lab_L3_cap": P(Task("seq2lab", L=3, noise=0.05), WishartTarget(0.5),
                            Learner(0.4, 0.05), alpha=0.7),
        "softmax_L2_elementwise": P(Task("softmax", L=2, noise=0.01), WishartTarget(0.5),
                                    Learner(1.0, 0.1, parameterisation="elementwise"), alpha=0.6),
        "linear_L2_spiked_cap": P(Task("linear", L=2, noise=0.1), SpikedTarget(0.2, spikes=(6.0,)),
                                  Learner(0.2, 0.05), alpha=0.5),
    }
    assert len(out) == 20
    return out


def is_monte_carlo(problem: Problem) -> bool:
    return problem.task.channel != "linear"


def solve(problem: Problem) -> dict:
    from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

    t0 = time.time()
    # few RQMC points: the record is about reproducing numbers, not about their accuracy
    r = solve_state_evolution(problem, tol=1e-12, mc=MonteCarloOptions(log2_n=11, replicas=4, coarse_log2_n=10),
                              finite_size_check=False)
    out = {k: getattr(r, k) for k in FIELDS}
    out.update(converged=bool(r.converged), mc_stderr=r.mc_stderr, seconds=time.time() - t0)
    return out


def record(path: Path, only: list[str] | None = None) -> None:
    """Record every point, or (``only``) re-record the named points of an existing record,
    noting the commit they were recorded at in its ``rerecorded`` map (with the reason in
    the commit message: a method change that moved a Monte-Carlo point beyond the record's
    own error, checked against a larger independent run)."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    known = points()
    if only:
        unknown = sorted(set(only) - set(known))
        if unknown:
            raise SystemExit(f"unknown points {unknown}; known: {sorted(known)}")
        out = json.loads(path.read_text())
        for name in only:
            out["points"][name] = solve(known[name])
            out.setdefault("rerecorded", {})[name] = commit
            print(name, "re-recorded at", commit, flush=True)
        path.write_text(json.dumps(out, indent=1))
        return
    rows = {}
    for name, p in known.items():
        rows[name] = solve(p)
        print(name, rows[name]["matrix_mse"], rows[name]["converged"],
              f"{rows[name]['seconds']:.1f} s", flush=True)
    path.write_text(json.dumps({"commit": commit, "points": rows}, indent=1))


def compare(path: Path) -> int:
    ref = json.loads(path.read_text())
    bad = 0
    print(f"reference commit {ref['commit']}"
          + "".join(f"; {n} re-recorded at {c[:10]}" for n, c in ref.get("rerecorded", {}).items()))
    print(f"{'point':34s} {'field':12s} {'before':>22s} {'after':>22s} {'rel diff':>9s}  verdict")
    for name, p in points().items():
        before, after = ref["points"][name], solve(p)
        worst = (0.0, "")
        ok = after["converged"] == before["converged"]
        for k in FIELDS:
            b, a = before[k], after[k]
            scale = abs(b)
            if k in CANCELLING:
                scale = max(scale, abs(before["m"]), abs(before["q"]))
            rel = abs(a - b) / max(scale, 1e-300) if b != a else 0.0
            if is_monte_carlo(p):
                err = (before.get("mc_stderr") or {}).get(k)
                good = rel <= DETERMINISTIC_RTOL or (err is not None and abs(a - b) <= MC_SIGMAS * err)
            else:
                good = rel <= DETERMINISTIC_RTOL
            ok &= good
            if rel > worst[0]:
                worst = (rel, k)
        k = worst[1] or "matrix_mse"
        verdict = "ok" if ok else "DIFFERS"
        bad += not ok
        print(f"{name:34s} {k:12s} {before[k]:22.15g} {after[k]:22.15g} {worst[0]:9.1e}  {verdict}")
    return bad


if __name__ == "__main__":
    cmd, file = sys.argv[1], Path(sys.argv[2])
    if cmd == "record":
        record(file, sys.argv[3:])
    elif cmd == "compare":
        sys.exit(1 if compare(file) else 0)
    else:
        raise SystemExit("usage: se_regression.py record|compare FILE")
