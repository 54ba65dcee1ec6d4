"""Power-law targets at small alpha: finite-d ERM against the SE (issue 19).

Task: linear channel L = 1, Delta = 0.1, power law gamma = 1.25, alpha = 0.05,
lam = 0.05 sqrt(alpha) (the issue's point: lam = 0.025 sqrt(n)/d at d = 400 is
the same number), learner kappa = 1 (convex) or kappa = 0.035 (rank cap).

Two ways of letting d grow:

* ``per_d``: the target the CLI draws at dimension d, s_k = c k^-gamma for
  k <= p0 = d, normalised to Tr(S0^2)/d = 1: its top eigenvalue grows like
  sqrt(d) and carries 1/zeta(2 gamma) of Tr(S0^2) at every d (75 % for
  gamma = 1.25).  Compared with the SE of the deterministic equivalent with
  target-d = d, which changes with d.
* ``fixed_law``: one law, the D = 100 atoms of the power law with target-d =
  100, each repeated d/D times at dimension d (a custom eigenvalue list).  The
  SE with target-d = D is the d -> infinity limit of exactly this sequence.

Solvers: kappa = 1 is convex; its minimiser is found by GAMP (whose fixed
points are the ERM's stationary points; the KKT residual of the ERM objective
is recorded and must be < 1e-6) and, at d <= 400, cross-checked by FISTA
(``direct_erm``).  kappa < 1 is non-convex: FISTA with the rank-capped prox
and L-BFGS over W (``direct_erm``) are both run.

Per run: matrix MSE, m, q, train error, GAMP's V and V_hat, and the excess
kurtosis 12 sum e^4 / (sum e^2)^2 of h(Shat - S0) over fresh tokens (e the
eigenvalues of Shat - S0; 0 for a Gaussian h): the non-Gaussianity of the
residual that the SE's Gaussian channel ignores.

Run (resumable, results cached as JSON under the cache directory):

    python tests/validation_powerlaw.py CACHE_DIR [case-name-substring ...]
    python tests/validation_powerlaw.py CACHE_DIR --summary
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from amp_attention.spec import CustomTarget, Learner, PowerLawTarget, Problem, Task

GAMMA = 1.25
NOISE = 0.1
ALPHA = 0.05
D_LAW = 100
KAPPA_CAP = 0.035
# further sample ratios (kappa = 1, per_d family): where the finite-size gap closes
ALPHA_SCAN = (0.1, 0.3)
# the rank-1 point: kappa d = 1 at d = 400, tiny alpha, lam = 0.025 sqrt(alpha)
RANK1_ALPHA = 0.0048375
RANK1_KAPPA = 0.0025
RANK1_D_LAW = 400


def lam_of(alpha: float) -> float:
    return 0.05 * math.sqrt(alpha)


def law_atoms() -> np.ndarray:
    return PowerLawTarget(GAMMA, d=D_LAW, p0=D_LAW).eigenvalues()


def problem(family: str, d: int, kappa: float = 1.0, alpha: float = ALPHA) -> Problem:
    if family == "per_d":
        target = PowerLawTarget(GAMMA, d=d, p0=d)
    elif family == "fixed_law":
        target = CustomTarget(eigenvalues=tuple(float(s) for s in law_atoms()))
    else:
        raise ValueError(family)
    return Problem(Task("linear", L=1, noise=NOISE), target, Learner(kappa, lam_of(alpha)),
                   alpha=alpha)


def rank1_problem(family: str, d: int) -> Problem:
    """The rank-1 point of the issue at dimension d (p = kappa d = d/400 columns).

    ``per_d``: the CLI's target at d; ``fixed_law``: the 400 atoms of the
    target-d = 400 law, each repeated d/400 times, whose d -> infinity limit is
    the SE with target-d = 400 (the issue's 9.49)."""
    if family == "per_d":
        target = PowerLawTarget(GAMMA, d=d, p0=d)
    elif family == "fixed_law":
        atoms = PowerLawTarget(GAMMA, d=RANK1_D_LAW, p0=RANK1_D_LAW).eigenvalues()
        target = CustomTarget(eigenvalues=tuple(float(s) for s in atoms))
    else:
        raise ValueError(family)
    return Problem(Task("linear", L=1, noise=NOISE), target,
                   Learner(RANK1_KAPPA, 0.025 * math.sqrt(RANK1_ALPHA)), alpha=RANK1_ALPHA)


def run_rank1(family: str, d: int, seed: int) -> dict:
    """L-BFGS over W (p = d/400 columns), 1 + 3 starts, the lowest objective kept."""
    return lbfgs_on_W(rank1_problem(family, d), d, seed, restarts=3)


def se_problem(family: str, d: int, kappa: float = 1.0, alpha: float = ALPHA) -> Problem:
    """The deterministic equivalent the runs are compared with."""
    dd = d if family == "per_d" else D_LAW
    return Problem(Task("linear", L=1, noise=NOISE), PowerLawTarget(GAMMA, d=dd, p0=dd),
                   Learner(kappa, lam_of(alpha)), alpha=alpha)


def excess_kurtosis(E: np.ndarray) -> float:
    e = np.linalg.eigvalsh(0.5 * (E + E.T))
    return float(12.0 * np.sum(e**4) / np.sum(e**2) ** 2)


def _stats(S: np.ndarray, S0: np.ndarray) -> dict:
    d = S.shape[0]
    return {"matrix_mse": float(np.sum((S - S0) ** 2)) / d, "m": float(np.sum(S * S0)) / d,
            "q": float(np.sum(S * S)) / d, "kurtosis_error": excess_kurtosis(S - S0),
            "rank": int(np.sum(np.linalg.eigvalsh(S) > 1e-9 * max(np.abs(S).max(), 1e-300)))}


def run_gamp(family: str, d: int, seed: int, alpha: float = ALPHA) -> dict:
    from amp_attention.channels import channel_for
    from amp_attention.denoisers import denoiser_for
    from amp_attention.data import generate_dataset
    from amp_attention.erm import kkt_residual
    from amp_attention.gamp import GAMPOptions, gamp

    p = problem(family, d, 1.0, alpha)
    ch, den = channel_for(p.task), denoiser_for(p.learner)
    data = generate_dataset(p, d, seed, "quantile", channel=ch)
    t0 = time.time()
    res = gamp(data.X, data.y, ch, den, options=GAMPOptions(max_iter=1000, tol=1e-9))
    kkt = math.inf if res.S is None else kkt_residual(data.X, data.y, res.S, ch, p.learner.lam,
                                                       "factorised", None)
    if not (res.converged and kkt < 1e-6):  # convex problem: FISTA finds the same minimiser
        return {**run_fista(family, d, seed, 1.0, alpha), "solver": "fista (gamp: "
                f"{res.summary}, kkt {kkt:.1e})"}
    h = res.S
    train = float(np.mean(np.sum((data.y - _forward(data.X, h)) ** 2, axis=1)))
    return {"solver": "gamp", "converged": True,
            "status": res.summary, "kkt_residual": float(kkt), "iterations": res.iterations,
            "seconds": time.time() - t0, "V": res.V, "V_hat": res.V_hat, "n": data.n,
            "train_error": train, **_stats(res.S, data.S0)}


def _forward(X: np.ndarray, S: np.ndarray) -> np.ndarray:
    from amp_attention.operators import measure

    return measure(X, S).reshape(X.shape[0], -1)


def run_fista(family: str, d: int, seed: int, kappa: float = 1.0, alpha: float = ALPHA) -> dict:
    from amp_attention.data import generate_dataset
    from amp_attention.erm import direct_erm

    p = problem(family, d, kappa, alpha)
    data = generate_dataset(p, d, seed, "quantile")
    t0 = time.time()
    r = direct_erm(p, d, seed, data=data, tol=1e-9, max_iter=40000)
    return {"solver": "fista", "converged": bool(r.converged), "iterations": r.iterations,
            "residual": r.residual, "seconds": time.time() - t0, "n": data.n,
            "train_error": r.train_error, "loss": r.loss, **_stats(r.S, data.S0)}


def run_lbfgs(family: str, d: int, seed: int, kappa: float, alpha: float = ALPHA) -> dict:
    return lbfgs_on_W(problem(family, d, kappa, alpha), d, seed, restarts=2)


def lbfgs_on_W(p: Problem, d: int, seed: int, restarts: int) -> dict:
    """Direct ERM over W (L-BFGS, 1 + ``restarts`` starts) on the run's own data set."""
    from amp_attention.channels import channel_for
    from amp_attention.data import generate_dataset
    from amp_attention.erm import direct_erm

    ch = channel_for(p.task)
    data = generate_dataset(p, d, seed, "quantile", channel=ch)  # the run's own data and S0
    t0 = time.time()
    r = direct_erm(p, d, seed, channel=ch, restarts=restarts, tol=1e-7, max_iter=20000,
                           data=data, n_test=2)
    return {"solver": "lbfgs-W", "converged": bool(r.converged), "iterations": r.iterations,
            "residual": r.residual, "seconds": time.time() - t0, "n": r.n,
            "restart_losses": list(map(float, r.restart_losses)),
            "train_error": r.train_error, "loss": r.loss, **_stats(r.S, data.S0)}


def run_gaussian_sensing(family: str, d: int, seed: int, alpha: float = ALPHA) -> dict:
    """Control: the same target, labels and GAMP, but the quadratic sensing rows
    (x x^T - I)/sqrt(2d) replaced by i.i.d. Gaussian rows of the same variance 1/d on
    the orthonormal coordinates of Sym(d) -- the sensing the SE's Gaussian channel
    assumes.  Dense (n x d(d+1)/2): d <= 200 only."""
    from amp_attention.channels import channel_for
    from amp_attention.data import target_eigenvalues
    from amp_attention.denoisers import denoiser_for
    from amp_attention.gamp import DenseSensing, GAMPOptions, gamp

    p = problem(family, d, 1.0, alpha)
    ch, den = channel_for(p.task), denoiser_for(p.learner)
    n = int(round(alpha * d * d))
    rng = np.random.default_rng([seed, 0x6A55])
    sensing = DenseSensing(rng.standard_normal((2, 1, d)))  # index maps; rows replaced below
    sensing.A = rng.standard_normal((n, sensing.A.shape[1])) / math.sqrt(d)
    sensing.n = n
    O = np.linalg.qr(rng.standard_normal((d, d)))[0]
    S0 = (O * np.sort(target_eigenvalues(p.target, d))) @ O.T
    y = math.sqrt(2.0) * sensing.forward(S0) + math.sqrt(NOISE) * rng.standard_normal((n, 1))
    t0 = time.time()
    res = gamp(sensing, y, ch, den, options=GAMPOptions(max_iter=2000, tol=1e-9, row_norms=False))
    out = {"solver": "gamp, gaussian sensing", "converged": bool(res.converged),
           "status": res.summary, "iterations": res.iterations, "seconds": time.time() - t0}
    if res.S is not None:
        out.update(_stats(res.S, S0))
    return out


def cases() -> list[tuple[str, callable]]:
    """(name, thunk) in the order they are run: cheap first."""
    out = []
    for d, seeds in ((200, 4), (400, 3), (800, 2)):
        for s in range(seeds):
            out.append((f"per_d_k1_gamp_d{d}_s{s}", lambda d=d, s=s: run_gamp("per_d", d, s)))
    for d, seeds in ((100, 8), (200, 4), (400, 3), (800, 3)):
        for s in range(seeds):
            out.append((f"fixed_law_k1_gamp_d{d}_s{s}", lambda d=d, s=s: run_gamp("fixed_law", d, s)))
    for a in ALPHA_SCAN:
        for d, seeds in ((200, 3), (400, 2)):
            for s in range(seeds):
                out.append((f"per_d_k1_gamp_a{a:g}_d{d}_s{s}",
                            lambda d=d, s=s, a=a: run_gamp("per_d", d, s, a)))
    for s in range(4):
        out.append((f"per_d_k1_gaussian_sensing_d200_s{s}",
                    lambda s=s: run_gaussian_sensing("per_d", 200, s)))
    for d in (200, 400):
        out.append((f"per_d_k1_fista_d{d}_s0", lambda d=d: run_fista("per_d", d, 0)))
    for d, seeds in ((200, 3), (400, 2)):
        for s in range(seeds):
            out.append((f"per_d_cap_fista_d{d}_s{s}",
                        lambda d=d, s=s: run_fista("per_d", d, s, KAPPA_CAP)))
            out.append((f"per_d_cap_lbfgs_d{d}_s{s}",
                        lambda d=d, s=s: run_lbfgs("per_d", d, s, KAPPA_CAP)))
    for d, seeds in ((400, 3), (800, 3), (1600, 2)):
        for s in range(seeds):
            for fam in ("fixed_law", "per_d"):
                if fam == "per_d" and d == RANK1_D_LAW:
                    continue  # the same target as fixed_law at d = 400
                out.append((f"rank1_{fam}_d{d}_s{s}", lambda f=fam, d=d, s=s: run_rank1(f, d, s)))
    return out


def se_reference(family: str, d: int, alpha: float = ALPHA, finite_d_draws: int = 0) -> dict:
    """The deterministic-equivalent SE (and, with draws, the GOE finite-d mode at d) of a case."""
    from amp_attention.finite_size import FiniteSizeOptions
    from amp_attention.solvers.state_evolution import solve_state_evolution

    r = solve_state_evolution(se_problem(family, d, 1.0, alpha))
    out = {"matrix_mse": r.matrix_mse, "converged": r.converged, "V": r.V, "V_hat": r.V_hat}
    from amp_attention.data import target_eigenvalues
    from amp_attention.denoisers import denoiser_for
    from amp_attention.finite_size import residual_kurtosis

    p = problem(family, d, 1.0, alpha)
    out["kurtosis_pred"], out["kurtosis_pred_stderr"] = residual_kurtosis(
        denoiser_for(p.learner), target_eigenvalues(p.target, d), r.m_hat, r.q_hat, r.V_hat,
        draws=4)
    if finite_d_draws:
        # the finite-d target itself (fixed_law: the D atoms repeated d/D times)
        f = solve_state_evolution(problem(family, d, 1.0, alpha), start="informative",
                                  finite_d=FiniteSizeOptions(d, finite_d_draws),
                                  finite_size_check=False)
        out["finite_d_mse"] = f.matrix_mse
        out["finite_d_mse_stderr"] = (f.sampling_stderr or {}).get("matrix_mse")
    return out


def summarise(cache: Path) -> list[dict]:
    """One row per (family, alpha, d) with kappa = 1 runs in the cache: ERM mean and
    standard error of the matrix MSE and of the residual kurtosis, the SE references
    and the relative gap (ERM - SE)/SE."""
    groups: dict[tuple, list[dict]] = {}
    for path in sorted(Path(cache).glob("*_k1_gamp_*.json")):
        name = path.stem
        family = "per_d" if name.startswith("per_d") else "fixed_law"
        alpha = float(name.split("_a")[1].split("_")[0]) if "_a" in name.split("gamp")[1] else ALPHA
        d = int(name.split("_d")[-1].split("_")[0])
        groups.setdefault((family, alpha, d), []).append(json.loads(path.read_text()))
    rows = []
    for (family, alpha, d), runs in sorted(groups.items()):
        mse = np.array([r["matrix_mse"] for r in runs])
        kur = np.array([r["kurtosis_error"] for r in runs])
        ref = cached(Path(cache), f"se_{family}_a{alpha:g}_d{d}",
                     lambda: se_reference(family, d, alpha, 4 if d <= 400 else 0))
        k = mse.size
        rows.append({"family": family, "alpha": alpha, "d": d, "seeds": k,
                     "erm_mse": float(mse.mean()),
                     "erm_mse_stderr": float(mse.std(ddof=1) / math.sqrt(k)) if k > 1 else None,
                     "kurtosis_measured": float(kur.mean()), **{f"se_{key}": v for key, v in ref.items()},
                     "gap": float(mse.mean() / ref["matrix_mse"] - 1.0)})
    return rows


def summarise_nonconvex(cache: Path) -> list[dict]:
    """One row per (case family, solver, d) of the rank-capped runs (``per_d_cap_*``,
    ``rank1_*``): ERM mean and standard error of the matrix MSE, with the SE it is
    compared with (the deterministic equivalent at the case's target-d)."""
    groups: dict[tuple, list[float]] = {}
    for path in sorted(Path(cache).glob("*.json")):
        name = path.stem
        if not (name.startswith("per_d_cap_") or name.startswith("rank1_")):
            continue
        head, d_part = name.rsplit("_d", 1)
        d = int(d_part.split("_")[0])
        groups.setdefault((head, d), []).append(json.loads(path.read_text())["matrix_mse"])
    rows = []
    for (head, d), mses in sorted(groups.items()):
        mse = np.array(mses)
        if head.startswith("rank1"):
            family = head.split("_", 1)[1]
            se_p = rank1_problem("per_d", d if family == "per_d" else RANK1_D_LAW)
        else:
            se_p = se_problem("per_d", d, KAPPA_CAP)
        from amp_attention.solvers.state_evolution import solve_state_evolution

        se = cached(Path(cache), f"se_{head}_d{d}".replace("_fista", "").replace("_lbfgs", ""),
                    lambda p=se_p: {"matrix_mse": solve_state_evolution(p).matrix_mse})
        k = mse.size
        rows.append({"case": head, "d": d, "seeds": k, "erm_mse": float(mse.mean()),
                     "erm_mse_stderr": float(mse.std(ddof=1) / math.sqrt(k)) if k > 1 else None,
                     "se_matrix_mse": se["matrix_mse"],
                     "ratio": float(mse.mean() / se["matrix_mse"])})
    return rows


def cached(cache: Path, name: str, thunk) -> dict:
    path = cache / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    out = thunk()
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, path)
    return out


def main(argv: list[str]) -> None:
    cache = Path(argv[0])
    if argv[1:2] == ["--summary"]:
        for r in summarise(cache) + summarise_nonconvex(cache):
            print(json.dumps(r))
        return
    select = argv[1:]
    for name, thunk in cases():
        if select and not any(s in name for s in select):
            continue
        t0 = time.time()
        r = cached(cache, name, thunk)
        print(f"{name}: mse {r.get('matrix_mse', float('nan')):.5f} conv {r['converged']} "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
