"""The Monte-Carlo convergence rule for a noisy, discontinuous map (solvers/noisy_fixed_point.py,
docs/theory.md 16.9), on a synthetic map with the band's two pathologies: a fixed point that
repels the plain iteration (an eigenvalue of dT/dx above 1) and jumps of size O(1/N) at
O(N) places per unit length, so that small finite differences measure the jumps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.solvers.fixed_point import solve_fixed_point
from amp_attention.solvers.noisy_fixed_point import (ACCEPT, central_jacobian,
                                                     solve_noisy_fixed_point, var1_stderr)

X_STAR = np.array([2.0, 4.5, 100.0])
#: dT/dx of the smooth part, relative units: eigenvalues 1.15 (repels Picard), 0.9, 0.3
_Q = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
J_REL = _Q @ np.diag([1.15, 0.9, 0.3]) @ _Q.T
N = 4096  # "samples": jumps of relative size ~1/N
SIGMA = 3e-3 * X_STAR  # the fixed point's standard error


def noisy_map(x: np.ndarray) -> np.ndarray:
    r = (np.asarray(x, float) - X_STAR) / X_STAR
    smooth = J_REL @ r
    # a deterministic, discontinuous term: steps of height 1/N at spacing ~1/N in each
    # coordinate, with a zero-mean sawtooth profile (its slope averages out over many steps)
    saw = (np.floor(N * r) - N * r + 0.5) / N
    return X_STAR * (1.0 + smooth + 0.5 * saw[::-1])


def test_small_differences_measure_the_jumps_wide_ones_the_slope() -> None:
    x = X_STAR * (1 + 0.01)
    J_true = J_REL * X_STAR[:, None] / X_STAR[None, :]
    wide = central_jacobian(noisy_map, x, 3e-2)
    narrow = central_jacobian(noisy_map, x, 1e-5)
    assert np.max(np.abs(wide - J_true) / np.abs(J_true).max()) < 0.05
    assert np.max(np.abs(narrow - J_true) / np.abs(J_true).max()) > 0.5


@pytest.mark.parametrize("damping", [1.0, 0.5])
def test_damped_iteration_is_repelled(damping: float) -> None:
    rep = solve_fixed_point(noisy_map, X_STAR * 1.01, method="damped", damping=damping,
                            tol=1e-7, max_iter=300, stall_after=40)
    assert not rep.converged


@pytest.mark.parametrize("offset", [0.1, -0.3])
def test_noisy_rule_converges_within_the_error(offset: float) -> None:
    calls = []

    def stderr(x, J):
        calls.append(J.copy())
        return SIGMA

    rep = solve_noisy_fixed_point(noisy_map, X_STAR * (1 + offset), stderr)
    assert rep.converged, rep.message
    assert rep.mc_distance <= ACCEPT
    # the true distance: within the accepted quarter error plus the jumps' effect
    assert np.all(np.abs(rep.x - X_STAR) <= SIGMA), (rep.x - X_STAR) / SIGMA
    assert rep.evaluations < 60
    assert "within the Monte-Carlo error" in rep.message


def test_noisy_rule_reports_failure_without_errors() -> None:
    rep = solve_noisy_fixed_point(noisy_map, X_STAR * 1.1, lambda x, J: None)
    assert not rep.converged and rep.status.value == "failed"
    assert math.isinf(rep.mc_distance)


def test_noisy_rule_checks_its_options() -> None:
    with pytest.raises(ValueError, match="rel_step"):
        solve_noisy_fixed_point(noisy_map, X_STAR, lambda x, J: SIGMA, rel_step=0.0)
    with pytest.raises(ValueError, match="accept"):
        solve_noisy_fixed_point(noisy_map, X_STAR, lambda x, J: SIGMA, accept=-1.0)


def _fresh(noise: float, J_true_rel: np.ndarray = J_REL):
    """maps(k): the smooth map plus independent noise of relative size ``noise`` per draw."""
    def maps(k):
        rng = np.random.default_rng(1000 + k)

        def T(x):
            r = (np.asarray(x, float) - X_STAR) / X_STAR
            return X_STAR * (1.0 + J_true_rel @ r + noise * rng.standard_normal(3))
        return T
    return maps


def test_averaged_fresh_draws_find_the_mean_maps_fixed_point() -> None:
    from amp_attention.solvers.noisy_fixed_point import solve_averaged_fresh

    J = J_REL * X_STAR[:, None] / X_STAR[None, :]
    # a slope known to a few percent, as a 3 % central difference of a Monte-Carlo map gives
    J_rough = J * (1 + 0.03 * np.random.default_rng(3).standard_normal((3, 3)))
    rep = solve_averaged_fresh(_fresh(1e-3), X_STAR * 1.05, J_rough)
    assert rep.converged, rep.message
    # the reported error covers the truth; it is about one evaluation's noise (1e-3)
    # amplified by (I - J)^-1 (gains up to 10 with the eigenvalues 1.15 and 0.9) over sqrt(16)
    assert np.all(np.abs(rep.x - X_STAR) <= 4 * rep.stderr), (rep.x - X_STAR) / rep.stderr
    assert np.all(rep.stderr / X_STAR < 2e-2), rep.stderr / X_STAR


def test_averaged_fresh_draws_report_a_drift() -> None:
    """A Jacobian far off (the true map's slope 1.15 taken as 0.2) makes the Newton steps
    contract so slowly (or not at all) that the iterates drift: reported, not accepted."""
    from amp_attention.solvers.noisy_fixed_point import solve_averaged_fresh

    wrong = 0.2 * np.eye(3)
    rep = solve_averaged_fresh(_fresh(1e-4), X_STAR * 1.3, wrong, rounds=2)
    assert not rep.converged
    assert "not stationary" in rep.message or rep.status.value == "invalid"


def test_var1_error_sees_the_iterates_persistence() -> None:
    # a VAR(1) with lag-1 correlations 0.95 / 0.6 / 0.3 (the band's Picard iterates have
    # 0.90-0.98): the error of the mean over K iterates is sigma sqrt((1 + r) / ((1 - r) K))
    # per component; over 200 independent sequences the estimate's median is within 25 % of
    # that, and the spread of the 200 means agrees with it within its own sampling error
    rng = np.random.default_rng(3)
    r = np.array([0.95, 0.6, 0.3])
    K, runs = 512, 200
    truth = np.sqrt((1 + r) / ((1 - r) * K)) / np.sqrt(1 - r * r)  # unit innovations
    est, means = [], []
    for _ in range(runs):
        x = rng.standard_normal(3) / np.sqrt(1 - r * r)
        X = np.empty((K, 3))
        for k in range(K):
            x = r * x + rng.standard_normal(3)
            X[k] = x
        est.append(var1_stderr(X))
        means.append(X.mean(axis=0))
    np.testing.assert_allclose(np.median(est, axis=0), truth, rtol=0.25)
    np.testing.assert_allclose(np.std(means, axis=0, ddof=1), truth, rtol=0.2)
    # too few iterates for the fit: no error claimed
    assert np.all(np.isinf(var1_stderr(X[:5])))


def test_an_imprecise_common_draws_point_is_refined(monkeypatch) -> None:
    # the refinement trigger of a converged common-draws fixed point (state_evolution
    # IMPRECISE_REL): a propagated relative error above 5 % in m or q, or none to propagate
    # because a replica's hats leave the denoiser's domain; not below the convexity
    # certificate, where the prox has one minimiser and the map no jumps
    import amp_attention.solvers.state_evolution as S
    from amp_attention.paper import PaperSetting

    se = S.StateEvolution(PaperSetting(0.3, 0.01, 0.5, 0.0, beta=2.0).problem(),
                          S.MonteCarloOptions(log2_n=6, coarse_log2_n=4))
    x, J = np.array([1.0, 0.8, 10.0]), np.zeros((3, 3))
    errors = {"small": np.array([0.01, 0.03, 1.0]), "large": np.array([0.01, 0.05, 1.0])}
    for name, err in errors.items():
        monkeypatch.setattr(S, "fixed_point_stderr", lambda se, x, J, err=err: err)
        assert S._imprecise(se, x, J) == (name == "large")

    def raises(se, x, J):
        raise ValueError("q_hat must be finite and > 0, got -1e-06")

    monkeypatch.setattr(S, "fixed_point_stderr", raises)
    assert S._imprecise(se, x, J)
    V_certified = 0.5 * se.model_channel.convex_below_every_label
    assert not S._imprecise(se, np.array([1.0, 0.8, V_certified]), J)
