"""Four-way error decomposition (THEORY 7, issue 7)."""

import math

import numpy as np
import pytest

from amp_attention.data import sample_target_matrix
from amp_attention.denoisers import denoiser_for
from amp_attention.spec import Learner, PowerLawTarget, Problem, Task, WishartTarget
from amp_attention.solvers.decomposition import (
    count_outliers,
    measured_decomposition,
    outlier_structure,
    predicted_decomposition,
)
from amp_attention.solvers.predicted_spectrum import PredictedSpectrum
from amp_attention.solvers.state_evolution import solve_state_evolution


def _random_psd(d, rng, rank):
    W = rng.standard_normal((rank, d))
    return W.T @ W / math.sqrt(rank * d)


def test_measured_terms_are_the_definitions_and_sum_to_the_mse():
    rng = np.random.default_rng(0)
    d, k = 40, 3
    S0 = _random_psd(d, rng, 20) + 3.0 * np.outer(*(2 * [rng.standard_normal(d) / math.sqrt(d)]))
    S = _random_psd(d, rng, 25) + 0.5 * S0
    dec = measured_decomposition(S, S0, k)
    # literal THEORY 7 with explicit projectors
    ev, U = np.linalg.eigh(S)
    P = U[:, -k:] @ U[:, -k:].T
    Pp = np.eye(d) - P
    c = np.sum(S * S0) / np.sum(S * S)
    Sp = c * S
    fro2 = lambda A: float(np.sum(A * A)) / d  # noqa: E731
    want = {
        "mismatch": fro2(S - S0) - fro2(Sp - S0),
        "approx": fro2(P @ (Sp - S0) @ P),
        "under": fro2(S0) - fro2(P @ S0 @ P),
        "over": fro2(Pp @ Sp @ Pp) - 2.0 * float(np.sum((Pp @ Sp @ Pp) * S0)) / d,
    }
    for name, value in want.items():
        assert getattr(dec, name) == pytest.approx(value, rel=1e-10, abs=1e-13), name
    assert dec.total == pytest.approx(fro2(S - S0), rel=1e-13)
    assert dec.matrix_mse == pytest.approx(fro2(S - S0), rel=1e-13)
    assert dec.c_star == pytest.approx(c, rel=1e-13)
    with pytest.raises(ValueError, match="n_outliers"):
        measured_decomposition(S, S0, d + 1)


@pytest.fixture(scope="module")
def powerlaw_se():
    p = Problem(Task("linear", L=1, noise=0.5), PowerLawTarget(1.5, d=200), Learner(1.0, 0.05),
                alpha=0.3)
    return p, solve_state_evolution(p)


def test_predicted_terms_are_positive_with_the_outliers_counted(powerlaw_se):
    """(That the four terms sum to Q0 - 2m + q = matrix_mse holds by construction and
    is not tested here; the terms themselves are checked against sampled B below.)
    At this point (alpha 0.3, Delta 0.5) no term is negative -- E_over can be, at
    small alpha -- and at least three modes are outliers."""
    p, r = powerlaw_se
    dec = predicted_decomposition(p, r)
    assert dec.n_outliers >= 3
    assert all(getattr(dec, t) > 0 for t in ("over", "under", "approx", "mismatch"))


def test_predicted_decomposition_matches_sampled_B(powerlaw_se):
    """B = mh S0 + sqrt(qh) Z sampled at the target's own d, Shat = f(B): the four
    measured terms (8 seeds) against the SE's; tolerance 3 standard errors plus a
    finite-size allowance of 1 % of the matrix MSE; the outlier count is k* in
    the median seed."""
    p, r = powerlaw_se
    struct = outlier_structure(p, r)
    dec = predicted_decomposition(p, r, structure=struct)
    cut = PredictedSpectrum.from_se(p, r).cutoff
    den = denoiser_for(p.learner)
    d = p.target.d
    rows, counts = [], []
    for seed in range(8):
        rng = np.random.default_rng(seed)
        S0 = sample_target_matrix(p.target, d, rng, "quantile")
        A = rng.standard_normal((d, d))
        B = r.m_hat * S0 + math.sqrt(r.q_hat) * (A + A.T) / math.sqrt(2 * d)
        ev, U = np.linalg.eigh(B)
        f = den.spectral_function(ev, r.V_hat, cut)
        S = (U * f) @ U.T
        m = measured_decomposition(S, S0, dec.n_outliers)
        rows.append([m.over, m.under, m.approx, m.mismatch])
        counts.append(count_outliers(f, struct.threshold))
    rows = np.array(rows)
    mean, se = rows.mean(0), rows.std(0, ddof=1) / math.sqrt(len(rows))
    for j, name in enumerate(("over", "under", "approx", "mismatch")):
        assert abs(mean[j] - getattr(dec, name)) <= 3 * se[j] + 0.01 * dec.matrix_mse, name
    assert int(np.median(counts)) == struct.count == dec.n_outliers


def test_a_target_without_separated_modes_has_nothing_recovered():
    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.05), alpha=0.5)
    r = solve_state_evolution(p)
    dec = predicted_decomposition(p, r)
    assert dec.n_outliers == 0 and dec.approx == 0.0
    assert dec.under == pytest.approx(1.0 + 0.5, rel=1e-12)   # Q0 = 1 + kappa0
    assert dec.total == pytest.approx(r.matrix_mse, rel=1e-10)


def test_softmax_reports_the_test_error_mismatch():
    from amp_attention.solvers.state_evolution import MonteCarloOptions, StateEvolution

    # one level (coarse_log2_n = log2_n): the fixed point to tol 1e-10 on these very draws
    mc = MonteCarloOptions(10, 2, coarse_log2_n=10)
    p = Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.3),
                alpha=0.5)
    r = solve_state_evolution(p, mc=mc, start="informative")
    dec = predicted_decomposition(p, r, mc=mc)
    ch = StateEvolution(p, mc).channel
    # the overlap-only test error is the SE's own at the fixed point (same draws)
    assert ch.test_error_at(r.m, r.q, 1.5) == pytest.approx(r.test_error, rel=1e-10)
    # and the mismatch is e_test(1) minus the best rescaling, checked on a grid
    grid = [ch.test_error_at(c * r.m, c * c * r.q, 1.5) for c in np.linspace(0.5, 2.0, 61)]
    assert 0.0 <= dec.test_mismatch <= r.test_error
    assert r.test_error - dec.test_mismatch <= min(grid) + 1e-9
    assert dec.c_star > 1.0          # lam = 0.3 shrinks Shat: the best rescaling enlarges it


def test_decomposition_when_nothing_is_learnt() -> None:
    """A weight decay that kills every mode gives Shat = 0 (q = 0): the decomposition
    was a ZeroDivisionError in c* = m/q (found by the CLI fuzz via `scaling --lam 7.5`);
    all of the error Q0 is underfitting."""
    p = Problem(Task("linear", L=1, noise=0.0), PowerLawTarget(1.5, d=40), Learner(1.0, 7.5),
                alpha=0.5)
    r = solve_state_evolution(p)
    assert r.converged and r.q == 0.0 and r.m == 0.0
    dec = predicted_decomposition(p, r)
    assert (dec.over, dec.approx, dec.mismatch, dec.n_outliers) == (0.0, 0.0, 0.0, 0)
    assert dec.under == dec.matrix_mse == pytest.approx(1.0)  # Q0 = 1
    assert dec.test_mismatch is None  # the linear channel: the matrix terms say it all
