"""The authors' published SE tables against the engine (issue 30, items 3 and 4).

Rows of the SE-type tables of github.com/PenombraET/ExtensiveAttention (commit in
tests/data/paper_tables.json, copied by benchmarks/paper/extract_tables.py; nothing
is read from their repository here), mapped with amp_attention.paper
(docs/theory.md section 16):

* rank fractions (data/spectra/rank_*.csv, computed by the authors from their SE
  hats): the engine's denoiser at the mapped hats gives the same fraction to 1e-9 --
  an exact check of lam = lreg/2 and of the hat factors;
* the prior side: their stored (m, q, sigma) are the denoiser's image of their stored
  hats up to their iteration noise (median over a file below 0.5 % in m and q);
* the channel side: at their stored (m, q, sigma) the engine's channel expectations
  times (4, 2, 2) are their (q_hat, m_hat, sigma_hat);
* interpolation thresholds (data/cross_validation/interpolation.csv, alpha_bar =
  2 alpha_interp for T = 2): equal to 1e-5 on the whole kappa grid for the five noise
  levels;
* whole fixed points: see test_se_rows below and docs/paper.md.

Rows that cannot be compared are excluded by a stated criterion, never silently:
their diverged rows (q > 1e6, or a hat <= 0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from amp_attention.denoisers import denoiser_for
from amp_attention.paper import (PaperSetting, from_paper_hats, interpolation_alpha_bar,
                                 setting_from_filename)
from amp_attention.spec import Learner, WishartTarget
from amp_attention.targets import target_measure

DATA = json.loads((Path(__file__).parent / "data" / "paper_tables.json").read_text())
TABLES = DATA["tables"]
SE_FILES = [f"data/SE/SE_kappa_0.5_lreg_{x}_noise_0.5.csv"
            for x in ("0.01", "0.002", "0.001", "0.0005", "0.0001", "1e-05")]


def rows(path: str) -> list[dict[str, float]]:
    t = TABLES[path]
    return [dict(zip(t["columns"], r)) for r in t["rows"]]


def diverged(r: dict[str, float]) -> bool:
    """The authors' runs that blew up (kappa 0.2 rows 125-127, kappa 0.8 row 124)."""
    return r["q"] > 1e6 or min(r["q_hat"], r["m_hat"], r["sigma_hat"]) <= 0


def se_table_path(kappa: str) -> str:
    return ("data/spectra/SE_kappa_0.5_lreg_0.01_noise_0.5.csv" if kappa == "0.5"
            else f"data/SE/SE_kappa_{kappa}_lreg_0.01_noise_0.5.csv")


@pytest.mark.parametrize("kappa", ["0.2", "0.5", "0.8"])
def test_rank_fractions(kappa: str) -> None:
    """Their rank_kappa_K file is 1 - CDF of S0 + (sqrt q_hat/m_hat) Z at 2 lreg/m_hat
    for every row of their SE file: the engine's rank_fraction at the mapped hats."""
    den = denoiser_for(Learner(kappa=1.0, lam=0.01 / 2))
    tm = target_measure(WishartTarget(float(kappa)))
    se, rank = rows(se_table_path(kappa)), TABLES[f"data/spectra/rank_kappa_{kappa}_lreg_0.01_noise_0.5.csv"]["rows"]
    assert len(se) == len(rank) == 128
    compared = 0
    for r, (alpha, frac) in zip(se, rank):
        assert math.isclose(alpha, r["alpha"], rel_tol=1e-12)
        if diverged(r):
            continue
        f = den.functionals(tm, *from_paper_hats(r))
        assert abs(f.rank_fraction - frac) < 1e-9, (kappa, alpha, f.rank_fraction, frac)
        compared += 1
    assert compared >= 124


@pytest.mark.parametrize("path", [*SE_FILES, "data/spectra/SE_kappa_0.5_lreg_0.01_noise_0.5.csv",
                                  "data/SE/SE_kappa_0.2_lreg_0.01_noise_0.5.csv",
                                  "data/SE/SE_kappa_0.8_lreg_0.01_noise_0.5.csv"])
def test_prior_side_map(path: str) -> None:
    """Their overlaps are the engine's denoiser image of their hats (m, q, V = 2 sigma),
    up to their iteration noise (damping 0.8 over 1000-sample channel estimates): the
    median relative deviation over a file is below 0.5 % in m and q and 1.5 % in V
    (measured: 0.02-0.2 % and 0.07-1.5 %).  A wrong factor (hats x 2, lam = lreg) moves
    them by tens of percent."""
    p = setting_from_filename(path)
    den = denoiser_for(Learner(kappa=1.0, lam=p["lreg"] / 2))
    tm = target_measure(WishartTarget(p["kappa"]))
    dev = []
    for r in rows(path):
        if diverged(r):
            continue
        f = den.functionals(tm, *from_paper_hats(r))
        dev.append((abs(f.m / r["m"] - 1), abs(f.q / r["q"] - 1), abs(f.V / (2 * r["sigma"]) - 1)))
    med = np.median(np.array(dev), axis=0)
    assert med[0] < 0.005 and med[1] < 0.005 and med[2] < 0.015, med
    # without the hat factors (their hats read as the engine's) V is off by 2x
    r = [r for r in rows(path) if not diverged(r)][-1]
    f = den.functionals(tm, r["m_hat"], r["q_hat"], r["sigma_hat"])
    assert abs(f.V / (2 * r["sigma"]) - 1) > 0.3


def test_theory_spectra_rows() -> None:
    """data/spectra/theory_spectra.csv: five fixed points (kappa 0.5, lreg 0.01) with their
    MSE = Q0 + q - 2m; the engine's denoiser at their hats gives their (m, q) within 0.5 %."""
    den = denoiser_for(Learner(kappa=1.0, lam=0.005))
    tm = target_measure(WishartTarget(0.5))
    for r in rows("data/spectra/theory_spectra.csv"):
        assert r["MSE"] == pytest.approx(1.5 + r["q"] - 2 * r["m"], abs=1e-12)
        f = den.functionals(tm, *from_paper_hats(r))
        assert f.m == pytest.approx(r["m"], rel=5e-3) and f.q == pytest.approx(r["q"], rel=5e-3)


@pytest.mark.parametrize("index", [127, pytest.param(0, marks=pytest.mark.slow),
                                   pytest.param(80, marks=pytest.mark.slow)])
def test_channel_side_map(index: int) -> None:
    """At their stored (m, q, sigma) of SE_kappa_0.5_lreg_0.01 the engine's channel
    expectations (logit_goe noise) times (4, 2, 2) are their hats.  Tolerance: their
    hats average 1000-sample estimates over the last iterations of a damped iteration;
    one such estimate has a relative error of 1-3 % (the per-sample spread of the
    integrands over sqrt(1000)), so 3 % (measured: 0.1-0.8 %)."""
    from amp_attention.solvers.channel_integrals import MonteCarloChannel

    r = rows(SE_FILES[0])[index]
    ch = PaperSetting(alpha=r["alpha"], lreg=0.01).problem().task.channel_object
    mc = MonteCarloChannel(ch, log2_n=11, replicas=8, seed=0)
    c = mc.se(r["m"], r["q"], 2 * r["sigma"], 1.5, r["alpha"])
    assert 4 * c.q_hat == pytest.approx(r["q_hat"], rel=0.03)
    assert 2 * c.m_hat == pytest.approx(r["m_hat"], rel=0.03)
    assert 2 * c.V_hat == pytest.approx(r["sigma_hat"], rel=0.03)
    assert c.test_error_noisy == pytest.approx(r["test"], rel=0.03)


KAPPA_GRID = np.geomspace(0.01, 100, 200)


def _interpolation_alpha_bar(noise: float, kappa: float) -> tuple[float, float]:
    """(engine's alpha_bar, tolerance).  Delta = 0: their row is the Delta -> 0+ limit (at
    Delta = 0 exactly, noiseless labels are interpolated at every alpha); the threshold
    approaches it like Delta^(1/3), so it is Richardson-extrapolated from Delta = 1e-9 and
    8e-9 (measured: within 1e-6 of their row except next to kappa0 = 1, 4.4e-5 at 1.02,
    where the approach is slower), tolerance 1e-4; otherwise 1e-5, their root finder's
    tolerance (measured: within it at 799 of the 800 points; 1.7e-5 at Delta 0.01, kappa0
    index 65, where their value is off their own curve: :func:`_their_curve_at`).  NaN (a
    failed solve) fails every comparison."""
    return interpolation_alpha_bar(kappa, noise), (1e-4 if noise == 0 else 1e-5)


@pytest.mark.parametrize("noise_index", range(5))
def test_interpolation_thresholds(noise_index: int) -> None:
    """Their factorised interpolation thresholds alpha_bar(kappa) at Delta in
    {0, 0.01, 0.1, 0.5, 1}: every 40th kappa of their grid (all 200 in the slow variant),
    tolerances in _interpolation_alpha_bar."""
    t = TABLES["data/cross_validation/interpolation.csv"]
    noise = t["noise"][noise_index]
    for j in range(0, 200, 40):
        got, tol = _interpolation_alpha_bar(noise, KAPPA_GRID[j])
        assert abs(got - t["rows"][noise_index][j]) < tol, (noise, j, got)


def _their_curve_at(row, j: int) -> float:
    """Their alpha_bar at kappa index j from their own four neighbours (j -+ 1, j -+ 2): the
    cubic through them in log kappa0.  Their curve is smooth, so this predicts their row to
    ~1e-7 (measured at Delta > 0: below 1e-6 at all but 8 of 784 interior points, 3e-6 at most
    away from index 65); at Delta 0.01, index 65 their value is 1.7e-5 above it (second
    differences 10.9, 6.0, 11.2 e-5 around it against a smooth 9.2-9.5 e-5): a miss of their
    root finder, whose tolerance is 1e-5."""
    idx = [j - 2, j - 1, j + 1, j + 2]
    x = np.log(KAPPA_GRID)
    return float(np.polyval(np.polyfit(x[idx], np.asarray(row, float)[idx], 3), x[j]))


@pytest.mark.slow
@pytest.mark.parametrize("noise_index", range(5))
def test_interpolation_thresholds_every_kappa(noise_index: int) -> None:
    """Every kappa0 of their grid within the tolerance of their row, except where their value
    is off their own curve by more than that tolerance (:func:`_their_curve_at`): there the
    engine's value must agree with their curve within a tenth of it instead."""
    t = TABLES["data/cross_validation/interpolation.csv"]
    noise = t["noise"][noise_index]
    row = t["rows"][noise_index]
    bad = []
    for j in range(200):
        got, tol = _interpolation_alpha_bar(noise, KAPPA_GRID[j])
        if abs(got - row[j]) < tol:
            continue
        if 2 <= j < 198:  # their value may be the outlier: compare with their curve
            curve = _their_curve_at(row, j)
            if abs(row[j] - curve) >= tol and abs(got - curve) < 0.1 * tol:
                continue
        bad.append((j, got, row[j]))  # a NaN (failed solve) lands here
    assert not bad, bad


ALL_SE_FILES = SE_FILES + [f"data/SE/SE_kappa_{k}_lreg_0.01_noise_0.5.csv" for k in ("0.2", "0.8")]
#: slow variant: every 32nd row of every SE file (default run: one row at fewer samples), in
#: the paper's prox branch (the descent from the teacher's logits, docs/theory.md 16.8).  The
#: jump band (row 64, alpha 0.28, of the lreg <= 0.001 tables), expected to fail before the
#: branch and the Monte-Carlo convergence rule (16.9) existed, is an ordinary row now.
SE_ROWS = [(path, i) for path in ALL_SE_FILES for i in range(0, 128, 32)]


def _se_row_z(path: str, index: int, log2n: int, start: str = "auto",
              branch: str = "teacher") -> dict[str, float]:
    from amp_attention.paper import row_deviation_z, to_paper_columns
    from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

    rs = rows(path)
    row = rs[index]
    p = setting_from_filename(path)
    setting = PaperSetting(alpha=row["alpha"], lreg=p["lreg"], kappa=p["kappa"], noise_in=p["noise"])
    r = solve_state_evolution(setting.problem(), start=start,
                              mc=MonteCarloOptions(log2_n=log2n, coarse_log2_n=min(10, log2n),
                                                   prox_branch=branch))
    assert r.success, r.message
    return row_deviation_z(rs, index, p["kappa"], p["lreg"], to_paper_columns(r, row["alpha"]),
                           r.mc_stderr)


def test_se_row() -> None:
    """A whole fixed point of theirs (lreg 0.01, alpha 0.22) equals the engine's SE within
    4 combined errors in m, q, sigma, test and train (engine's propagated Monte-Carlo
    error, their prior-side residual and their row scatter: amp_attention.paper.deviation_z).
    The engine's former logit noise model is 20-30 % off (tens of errors)."""
    z = _se_row_z(SE_FILES[0], 48, 10, start="informative")
    assert max(abs(v) for v in z.values()) < 4, z


@pytest.mark.xfail(strict=True, reason=(
    "sigma 5 % below their row (z -5.2; q -1.6, test -2.7) since the averaged solve's error "
    "counts the iterates' persistence (var1_stderr): their descent from zstar (BFGS, 0.01 "
    "jitter) ends in another minimiser than the engine's Newton descent on 0.4 % of the "
    "band's samples, which moves the m_hat term 3.8 % and the q_hat term 0.7 % "
    "(docs/paper.md, the small-lambda peak)"))
def test_se_row_in_the_band() -> None:
    """Their lreg 1e-4 row at alpha 0.2484, inside the band where the prox minimiser jumps
    and the test error peaks: the engine's SE in their prox branch (teacher) at the CLI's
    2^11 samples, solved by the Monte-Carlo rule (fresh-draw averaged iterates), within 4
    combined errors in every column.  Strictly expected to fail (above): it fails loudly
    once it passes."""
    path = "data/SE/SE_kappa_0.5_lreg_0.0001_noise_0.5.csv"
    assert abs(rows(path)[56]["alpha"] - 0.2484) < 1e-3
    z = _se_row_z(path, 56, 11, start="informative")
    assert max(abs(v) for v in z.values()) < 4, z


@pytest.mark.slow
@pytest.mark.parametrize("path,index", SE_ROWS)
def test_se_rows(path: str, index: int) -> None:
    """Every 32nd row of the eight SE tables at 2^14 samples per replica (the engine's
    default), within 4 combined errors (docs/paper.md quotes the every-16th-row run of
    benchmarks/paper/se_tables.py)."""
    if diverged(rows(path)[index]):
        pytest.skip("their diverged row")
    z = _se_row_z(path, index, 14)
    assert max(abs(v) for v in z.values()) < 4, z
