"""Spiked targets and the SE's outliers of Shat (issue 6, THEORY 5)."""

import math

import numpy as np
import pytest

from amp_attention.data import sample_target_matrix
from amp_attention.spec import Learner, PowerLawTarget, Problem, SpikedTarget, Task, WishartTarget
from amp_attention.solvers.outliers import measured_outliers, predict_outliers
from amp_attention.solvers.state_evolution import solve_state_evolution

PROBLEM = Problem(Task("linear", L=1, noise=1.0), SpikedTarget(0.5, (4.8, 6.0, 9.0)),
                  Learner(1.0, 0.1), alpha=0.3)


def test_spiked_target_matrix_carries_the_spikes_on_top_of_the_bulk():
    S0 = sample_target_matrix(PROBLEM.target, 200, np.random.default_rng(0), "quantile")
    ev = np.linalg.eigvalsh(S0)
    np.testing.assert_allclose(ev[-3:], [4.8, 6.0, 9.0], rtol=1e-12)
    assert ev[-4] < 4.2  # the Marchenko-Pastur bulk edge (1 + sqrt 2)^2 / sqrt 2 = 4.12
    with pytest.raises(ValueError, match="spikes"):
        SpikedTarget(0.5, (1.0, -2.0))
    assert PROBLEM.to_dict()["target"] == {"kind": "spiked", "kappa0": 0.5, "spikes": [9.0, 6.0, 4.8]}


def test_outlier_formula_against_a_sampled_B():
    """B = mh S0 + sqrt(qh) Z at d = 1200 sampled directly: its top eigenvalues and the
    overlaps of their eigenvectors with the spikes' are the predicted z and cos^2."""
    se = solve_state_evolution(PROBLEM)
    pred = predict_outliers(PROBLEM, se)
    assert all(o.visible for o in pred)
    d = 1200
    rng = np.random.default_rng(1)
    S0 = sample_target_matrix(PROBLEM.target, d, rng, "quantile")
    A = rng.standard_normal((d, d))
    Z = (A + A.T) / math.sqrt(2 * d)
    B = se.m_hat * S0 + math.sqrt(se.q_hat) * Z
    meas = measured_outliers(B, S0, 3)
    # an outlier fluctuates by O(sqrt(qh) d^-1/2): the Gaussian noise along the spike
    # direction has variance 2 qh / d; four of those as allowance
    allowance = 4.0 * math.sqrt(2.0 * se.q_hat / d)
    for o, m in zip(pred, meas):
        assert m["target_eigenvalue"] == pytest.approx(o.target_eigenvalue)
        assert abs(m["eigenvalue"] - o.eigenvalue_B) <= allowance, (m, o, allowance)
        assert m["cos2"] == pytest.approx(o.cos2, abs=0.04)


def test_weak_spikes_are_not_visible_and_learned_eigenvalues_follow_f():
    p = Problem(PROBLEM.task, SpikedTarget(0.5, (3.5, 20.0)), PROBLEM.learner, alpha=0.3)
    se = solve_state_evolution(p)
    strong, weak = predict_outliers(p, se)
    assert strong.visible and not weak.visible and weak.eigenvalue is None
    lam = p.learner.lam
    assert strong.eigenvalue == pytest.approx((strong.eigenvalue_B - 2 * lam) / se.V_hat)
    assert 0.9 < strong.cos2 < 1


def test_power_law_top_modes_are_outliers_and_other_targets_are_refused():
    p = Problem(Task("linear", L=1, noise=0.1), PowerLawTarget(1.5, 200), Learner(1.0, 0.05), alpha=0.5)
    se = solve_state_evolution(p)
    outs = predict_outliers(p, se, max_modes=10)
    cos2 = [o.cos2 for o in outs if o.visible and o.cos2 is not None]
    assert len(cos2) >= 3 and all(a >= b for a, b in zip(cos2, cos2[1:]))  # weaker modes, lower overlap
    with pytest.raises(ValueError, match="spiked or power law"):
        predict_outliers(Problem(target=WishartTarget(0.5)), se)
