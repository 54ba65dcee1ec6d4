"""`amp_attention.experiments.spectrum_check`: predicted CDFs of Shat/W, Kolmogorov distance, Adam overlay (issue 5)."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from amp_attention.adam import AdamOptions
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.predicted_spectrum import PredictedSpectrum
from amp_attention.experiments.spectrum_check import (SpectrumPlan, kolmogorov_distance,
                                                      run_spectrum_check, spectrum_run_file)
from amp_attention.solvers.state_evolution import solve_state_evolution


def _problem(kappa=1.0, lam=0.05, parameterisation="factorised", alpha=0.5):
    return Problem(Task("linear", L=1, noise=0.1), WishartTarget(0.5),
                   Learner(kappa, lam, parameterisation), alpha=alpha)


@pytest.fixture(scope="module", params=[(1.0, "factorised"), (0.5, "factorised"),
                                        (2.0, "factorised"), (1.0, "elementwise")])
def solved(request):
    kappa, par = request.param
    p = _problem(kappa, parameterisation=par)
    se = solve_state_evolution(p, spectrum=True)
    assert se.converged
    return p, se, PredictedSpectrum.from_se(p, se)


def test_kolmogorov_distance_equals_scipy_kstest_for_a_continuous_law():
    x = np.random.default_rng(3).standard_normal(500) * 1.3 + 0.2
    law = stats.norm(0.0, 1.0)
    ours = kolmogorov_distance(x, lambda s, left=False: law.cdf(s))
    assert ours == pytest.approx(stats.kstest(x, law.cdf).statistic, rel=1e-12)


def test_kolmogorov_distance_with_an_atom_is_exact():
    # law: mass 1/2 at 0, uniform(0, 1) for the rest; sample: 0 (x4), 0.5 (x2), 0.9 (x4)
    def cdf(s, left=False):
        s = np.asarray(s, float)
        F = np.where(s < 0, 0.0, 0.5 + 0.5 * np.clip(s, 0, 1))
        return np.where((s == 0) & left, 0.0, F)

    sample = np.array([0.0] * 3 + [1e-9] + [0.5] * 2 + [0.9] * 4)
    # empirical CDF: 0.4 on [0, 0.5), 0.6 on [0.5, 0.9), 1 on [0.9, inf); the law
    # is 0.5 at 0+, 0.75 at 0.5, 0.95 at 0.9-: the largest gap is 0.95 - 0.6 = 0.35
    assert kolmogorov_distance(sample, cdf, zero_tol=1e-6) == pytest.approx(0.35, abs=1e-15)
    # without the zero tolerance the 1e-9 eigenvalue is not in the atom: gap at 0
    assert kolmogorov_distance(sample, cdf) == pytest.approx(0.35, abs=1e-15)
    assert kolmogorov_distance(np.full(4, 1e-9), cdf) == pytest.approx(0.5, abs=1e-8)


def test_cdf_integrates_the_predicted_density(solved):
    """F_S (from the mass of rho_B above a point) against the trapezoidal integral of
    the plotted density curve (an independent path through the same law)."""
    _, se, pred = solved
    spec = se.spectrum
    x, rho = np.asarray(spec.eigenvalues), np.asarray(spec.density_S)
    assert pred.atom_S == pytest.approx(spec.atom_at_zero, abs=1e-9)
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (rho[1:] + rho[:-1]) * np.diff(x))])
    # the curve starts at its support's edge (s = 0 where the spectral map's cutoff is):
    # F_S there includes the atom at 0, which the density curve does not carry
    base = pred.cdf_S(x[0])
    for k in np.linspace(0, x.size - 1, 9).astype(int)[1:]:
        assert pred.cdf_S(x[k]) - base == pytest.approx(cum[k], abs=2e-3)
    assert pred.cdf_S(x[-1] * 1.01) == pytest.approx(1.0, abs=1e-9)
    assert pred.cdf_S(-1e3) == pytest.approx(0.0, abs=1e-9)


def test_cdf_of_w_counts_structural_zeros():
    p = _problem(kappa=0.5)
    se = solve_state_evolution(p, spectrum=True)
    pred = PredictedSpectrum.from_se(p, se)
    # rank cap kappa d: the d - p structural zeros of S are not singular values of W
    assert pred.atom_S == pytest.approx(0.5, abs=1e-6)
    assert float(pred.cdf_W(0.0, 200, 100)) == pytest.approx(0.0, abs=1e-5)
    sig = np.sqrt(np.asarray(se.spectrum.eigenvalues[se.spectrum.eigenvalues > 0]))[::50]
    for s in sig:
        assert pred.cdf_W(s, 200, 100) == pytest.approx(2 * pred.cdf_S(s * s) - 1, abs=1e-12)


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_adam_spectra_match_the_prediction_and_resume(tmp_path):
    """Small d (fast): Adam-trained spectra at d = 24, 40 lie within a few 1/d of the
    SE law, their distance shrinks with d, and a rerun trains nothing."""
    plan = SpectrumPlan(_problem(kappa=1.0), ds=(24, 40), seeds=2, adam=AdamOptions(lr=0.03))
    s = run_spectrum_check(plan, tmp_path)
    assert s["trained"] == 4 and s["all_converged"]
    ks = {r["d"]: r["ks_S"] for r in s["per_d"]}
    # the ESD of a d x d matrix is within O(1/d) of its limit (rigidity); a wrong law
    # (e.g. the atom off by 0.1) would give >= 0.1
    assert ks[24] < 2.5 / 24 and ks[40] < 2.5 / 40
    assert ks[40] < ks[24]
    for r in s["per_d"]:
        assert r["zero_fraction_S"] == pytest.approx(s["predicted"]["atom_S"], abs=2.5 / math.sqrt(r["d"]))
    for f in ("spectrum.json", "spectrum.png"):
        assert (tmp_path / f).stat().st_size > 0
    spectrum_run_file(tmp_path, 40, 1).unlink()
    again = run_spectrum_check(plan, tmp_path)
    assert again["trained"] == 1
    assert json.loads((tmp_path / "spectrum.json").read_text())["params"]["ds"] == [24, 40]


def test_bad_spectrum_plans_name_the_parameter():
    p = _problem()
    for kw, name in (({"ds": ()}, "ds"), ({"ds": (10,), "seeds": 0}, "seeds"),
                     ({"ds": (10,), "zero_tol": 1.5}, "zero_tol"), ({"ds": (10,), "bins": 1}, "bins")):
        with pytest.raises(ValueError, match=name):
            SpectrumPlan(p, **kw)
    with pytest.raises(ValueError, match="samples"):
        kolmogorov_distance([], lambda s, left=False: s)


def test_spectrum_figure_ticks_and_legends_are_readable(tmp_path, monkeypatch):
    """issue 16, item 9: the Kolmogorov-vs-d panel labels the dimensions themselves (no
    overlapping 3 x 10^1 ticks), both series stay visible when they coincide, and the
    density legends sit above the data."""
    from types import SimpleNamespace

    from amp_attention import plotting

    figs = []
    monkeypatch.setattr(plotting.plt, "close", lambda fig=None: figs.append(fig))
    x = np.linspace(0.0, 2.0, 50)
    spec = SimpleNamespace(eigenvalues=x, density_S=np.exp(-x), atom_at_zero=0.5,
                           singular_values=x, density_W=np.exp(-x), atom_at_zero_W=0.5)
    rng = np.random.default_rng(0)
    runs = [{"d": 40, "p": 40, "eigenvalues_S": rng.exponential(size=40),
             "singular_values_W": rng.exponential(size=40)}]
    per_d = [{"d": d, "ks_S": 0.1 / d, "ks_W": 0.1 / d} for d in (30, 40, 60)]
    plotting.plot_spectrum_overlay(spec, runs, per_d, tmp_path / "s.png", title="t")
    fig = figs[-1]
    ks = fig.axes[-1]
    fig.canvas.draw()
    assert [t.get_text() for t in ks.get_xticklabels()] == ["30", "40", "60"]
    assert not ks.xaxis.get_minor_ticks() or not ks.xaxis.get_minorticklocs().size
    labels = [t.get_text() for t in ks.get_legend().get_texts()]
    assert any("equal" in t for t in labels)
    for ax in fig.axes[:2]:
        assert ax.get_ylim()[1] >= 1.4 * max(p.get_height() for p in ax.patches)


def test_bulk_components_match_a_sampled_matrix():
    """The pieces of Shat's continuous spectrum against one sampled B = mh S0 + sqrt(qh) Z
    at d = 1500, soft-thresholded as the nuclear-norm denoiser does: each piece's mass and
    edges.  Hats: the authors' stored fixed point at alpha 40 (kappa0 0.5, lreg 0.01,
    Delta 0.5; their data/spectra/theory_spectra.csv, m_hat 50.77102913796269, q_hat
    6.802897218140043, sigma_hat 57.88127088265144 -> the engine's m_hat / 2, q_hat / 4,
    sigma_hat / 2), where the bulk has split; the upper piece holds the target's rank
    fraction 0.5.  Tolerances: a piece's mass counts eigenvalues, O(1/d) plus the
    sampling of S0's spectrum (O(d^-1/2) in a count near the gap; 3 / sqrt(d) allowed);
    edges are approached like a square root, so the sampled extremes sit inside them."""
    from amp_attention.denoisers import denoiser_for
    from amp_attention.targets import target_measure

    mh, qh, vh = 50.77102913796269 / 2, 6.802897218140043 / 4, 57.88127088265144 / 2
    den = denoiser_for(Learner(1.0, 0.005))
    sp = PredictedSpectrum.from_hats(target_measure(WishartTarget(0.5)), den, 1.0, mh, qh, vh,
                                     math.nan)
    edges, masses = sp.bulk_components
    assert edges.shape == (2, 2) and np.all(np.diff(edges.ravel()) > 0)
    assert masses[1] == pytest.approx(0.5, abs=1e-6)
    assert masses.sum() == pytest.approx(sp.law.mass_above(sp.cutoff), abs=1e-12)
    d = 1500
    rng = np.random.default_rng(7)
    X = rng.standard_normal((d, d // 2))
    S0 = X @ X.T / math.sqrt(d * (d // 2))  # Wishart target of ratio 1/2, Tr(S0^2)/d -> 1.5
    G = rng.standard_normal((d, d))
    Z = (G + G.T) / math.sqrt(2 * d)
    nu = np.linalg.eigvalsh(mh * S0 + math.sqrt(qh) * Z)
    s = den.spectral_function(nu[nu > sp.cutoff], vh, sp.cutoff)
    gap = 0.5 * (edges[0, 1] + edges[1, 0])
    assert np.mean(s > gap) * len(s) / d == pytest.approx(masses[1], abs=3 / math.sqrt(d))
    assert np.mean(s <= gap) * len(s) / d == pytest.approx(masses[0], abs=3 / math.sqrt(d))
    # the gap is empty (its inner 80 %: edges fluctuate), nothing beyond the top edge, and
    # the counts along both pieces follow the predicted CDF
    width = edges[1, 0] - edges[0, 1]
    assert not np.any((s > edges[0, 1] + 0.1 * width) & (s < edges[1, 0] - 0.1 * width))
    assert s.max() <= edges[1, 1] * 1.01
    xs = np.concatenate([np.linspace(*edges[0], 5), np.linspace(*edges[1], 7)])
    counted = 1.0 - np.array([np.sum(s > x) for x in xs]) / d
    assert np.max(np.abs(counted - sp.cdf_S(xs))) <= 3 / math.sqrt(d)


def test_density_curves_start_at_their_supports_edges(solved):
    """Each piece of the continuous part is drawn from its edge (issue 57: Figure 1's W
    curves started in mid-air, at sigma ~ 0.08 with density 0.25): every edge of
    ``bulk_components`` is a node of the eigenvalue curve, and the singular-value curve
    of a factorised learner has no gap wider than 2 % of its range."""
    _, _, pred = solved
    x = np.asarray(pred.eigenvalues)
    edges, _ = pred.bulk_components
    for lo, hi in edges:
        assert np.min(np.abs(x - lo)) <= 1e-12 * max(1.0, abs(lo))
        assert np.min(np.abs(x - hi)) <= 1e-12 * max(1.0, abs(hi))
    if pred.denoiser.factorised:
        sig, dens = np.asarray(pred.singular_values), np.asarray(pred.density_W)
        assert np.max(np.diff(sig)) <= 0.02 * (sig[-1] - sig[0])
        if edges[0, 0] <= 1e-12:  # the curve leaves sigma = 0 from density 0
            assert sig[0] == 0.0 and dens[0] == 0.0
