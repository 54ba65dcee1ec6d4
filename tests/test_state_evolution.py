"""State evolution for the linear channel: channel algebra, fixed point, reporting."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from amp_attention.channels import LinearChannel
from amp_attention.spec import Learner, PowerLawTarget, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import RESULT_FIELDS, StateEvolution, solve_state_evolution


@pytest.mark.parametrize("L", [1, 2, 3])
def test_linear_channel_closed_forms_match_monte_carlo_in_h_units(L):
    """Closed-form hats/errors (docs/theory.md derivation) vs a Monte-Carlo average
    written directly in h-units: y_ab = h*_ab + sqrt(Delta) xi_ab, loss
    1/2 sum_{a<=b} (y_ab - h_ab)^2 + ||u - omega||^2/(2V) minimised numerically."""
    rng = np.random.default_rng(0)
    Q0, m, q, V, Delta, alpha = 1.5, 0.9, 1.1, 0.7, 0.3, 0.8
    ch = LinearChannel(L, Delta)
    iu = np.triu_indices(L)
    tau = np.where(iu[0] == iu[1], math.sqrt(2.0), 1.0)
    K = tau.size
    n = 400_000
    omega = math.sqrt(q) * rng.standard_normal((n, K))
    ustar = (m / q) * omega + math.sqrt(Q0 - m * m / q) * rng.standard_normal((n, K))
    y_h = tau * ustar + math.sqrt(Delta) * rng.standard_normal((n, K))
    # Per component, the h-unit problem 1/2 (y - tau u)^2 + (u - omega)^2/(2V) is
    # minimised by u = (omega + V tau y)/(1 + V tau^2).
    uhat = (omega + V * tau * y_h) / (1 + V * tau**2)
    g = (uhat - omega) / V
    se = ch.se(m, q, V, Q0, alpha)
    resid = y_h - tau * uhat
    mc = {
        "q_hat": 2 * alpha * np.sum(g * g, axis=1),
        "m_hat": 2 * alpha * np.sum(g * (ustar - (m / q) * omega), axis=1) / (Q0 - m * m / q),
        "train_error": np.sum(resid**2, axis=1),
        "loss_per_sample": 0.5 * np.sum(resid**2, axis=1),
    }
    for name, samples in mc.items():
        est, err = samples.mean(), samples.std() / math.sqrt(n)
        assert abs(est - getattr(se, name)) < 5 * err, (name, est, getattr(se, name), err)
    # V_hat = -2 alpha E tr dg/domega, with dg/domega = -tau^2/(1 + V tau^2) per component.
    assert se.V_hat == pytest.approx(2 * alpha * np.sum(tau**2 / (1 + V * tau**2)), rel=1e-14)
    # Clean test error: E (h*(S0) - h(Shat))^2 summed over entries = sum tau^2 (Q0 - 2m + q).
    assert se.test_error == pytest.approx(np.sum(tau**2) * (Q0 - 2 * m + q), rel=1e-14)


def test_closed_form_prox_is_the_numerical_minimiser():
    """prox_batch (closed form) against BFGS on l(y, u) + ||u - omega||^2 / (2V), with l
    written out here from its definition 1/2 sum_k (y_k - tau_k u_k)^2; the trace term
    tr(I - d uhat / d omega) against central finite differences of the minimiser."""
    ch = LinearChannel(2, 0.5)
    rng = np.random.default_rng(3)
    y, omega, V = rng.standard_normal(3), rng.standard_normal(3), 0.6

    def argmin(om):
        obj = lambda u: 0.5 * np.sum((y - ch.tau * u) ** 2) + np.sum((u - om) ** 2) / (2 * V)  # noqa: E731
        return minimize(obj, om, method="BFGS", options={"gtol": 1e-12}).x

    u_num = argmin(omega)
    px = ch.prox_batch(y[None], omega[None], V)
    assert np.allclose(px.uhat[0], u_num, atol=1e-7)
    assert np.allclose(px.g_out[0], (u_num - omega) / V, atol=1e-6)
    eps = 1e-2  # uhat is affine in omega: no truncation error, BFGS's 1e-8 error / eps
    jac_trace = sum((argmin(omega + eps * e)[k] - argmin(omega - eps * e)[k]) / (2 * eps)
                    for k, e in enumerate(np.eye(3)))
    assert px.trace_term[0] == pytest.approx(3 - jac_trace, abs=1e-5)


PROBLEMS = [
    Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5),
    Problem(Task("linear", L=2, noise=0.1), WishartTarget(0.6), Learner(0.3, 0.05), alpha=0.4),
    Problem(Task("linear", L=1, noise=0.0), WishartTarget(1.0), Learner(1.0, 0.3, "elementwise"), alpha=1.0),
]


@pytest.mark.parametrize("problem", PROBLEMS)
def test_result_is_a_fixed_point_with_consistent_fields(problem):
    r = solve_state_evolution(problem, tol=1e-11)
    assert r.converged and r.residual <= 1e-11 and r.status == "converged"
    se = StateEvolution(problem)
    x = np.array([r.m, r.q, r.V])
    assert np.allclose(se(x), x, rtol=1e-9)
    assert r.matrix_mse == pytest.approx(se.Q0 - 2 * r.m + r.q, rel=1e-9)
    lam, alpha = problem.learner.lam, problem.alpha
    penalty = lam * r.q / (2 * alpha) if problem.learner.parameterisation == "elementwise" else lam * r.trace_per_d / alpha
    assert r.loss == pytest.approx(r.train_error / 2 + penalty, rel=1e-8)
    d = r.to_dict()
    assert all(k in d for k in RESULT_FIELDS)
    if problem.learner.rank_capped:
        assert r.rank_fraction <= problem.learner.kappa + 1e-9


def test_anderson_and_damped_agree_and_anderson_is_faster():
    p = PROBLEMS[0]
    a = solve_state_evolution(p, method="anderson", start="informative")
    b = solve_state_evolution(p, method="damped", damping=0.7, start="informative", max_iter=2000)
    assert a.converged and b.converged
    assert a.iterations < b.iterations
    for k in ("m", "q", "V", "train_error"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-8)


def test_convex_problem_has_no_metastability_and_starts_agree():
    r = solve_state_evolution(PROBLEMS[0], start="both")
    assert not r.metastable
    assert r.alternative["m"] == pytest.approx(r.m, rel=1e-7)


def test_non_convergence_is_reported_not_hidden():
    r = solve_state_evolution(PROBLEMS[0], method="damped", damping=0.1, max_iter=3, start="informative")
    assert not r.converged and r.iterations == 3 and r.status.startswith("max_iter")
    assert r.residual > 1e-6


@pytest.mark.parametrize("kw, name", [({"tol": 0}, "tol"), ({"damping": 1.5}, "damping"),
                                      ({"method": "newton"}, "method"), ({"start": "random"}, "start"),
                                      ({"max_iter": 0}, "max_iter")])
def test_bad_solver_options_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        solve_state_evolution(PROBLEMS[0], **kw)


@pytest.mark.parametrize("problem", PROBLEMS[:2])
def test_predicted_spectra_are_normalised(problem):
    r = solve_state_evolution(problem, start="informative", spectrum=True)
    s = r.spectrum
    mass = np.trapezoid(s.density_S, s.eigenvalues) + s.atom_at_zero
    assert mass == pytest.approx(1.0, abs=2e-3)
    mass_w = np.trapezoid(s.density_W, s.singular_values) + s.atom_at_zero_W
    assert mass_w == pytest.approx(1.0, abs=2e-3)
    # The nonzero eigenvalues carry the rank fraction.
    assert 1 - s.atom_at_zero == pytest.approx(r.rank_fraction, abs=1e-9)


def test_noiseless_large_alpha_small_lam_converges_to_near_recovery():
    p = Problem(Task("linear", L=1, noise=0.0), WishartTarget(0.2), Learner(2.0, 0.01), alpha=0.5)
    r = solve_state_evolution(p)
    assert r.converged and r.matrix_mse < 1e-3 and r.q_hat < 1e-3


def test_anderson_failure_falls_back_to_the_damped_iteration():
    """Below alpha_interp at small lam (V ~ 1/lam grows over ~100 iterations) Anderson
    mixing extrapolated out of the basin (m, q ~ 1e9-1e20) and the solve failed with
    "invalid"; the safeguard reruns the damped iteration, which converges, and says so."""
    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(0.5, 1e-3),
                alpha=0.2447322789559482)
    r = solve_state_evolution(p, start="informative")
    assert r.converged and r.method.startswith("damped after anderson failed")
    ref = solve_state_evolution(p, start="informative", method="damped", max_iter=2000)
    assert ref.converged and ref.method == "damped"
    for k in ("m", "q", "V", "train_error"):
        assert getattr(r, k) == pytest.approx(getattr(ref, k), rel=1e-7)
    # below the interpolation threshold the train error vanishes with lam
    assert r.train_error < 1e-3 * r.test_error


def test_tiny_alpha_fixed_point_is_found_with_v_eliminated() -> None:
    # alpha = 0.0025, lam = 0.00125 (issue 19): V ~ 1/lam sits on a cliff of the map,
    # Anderson and the damped iteration oscillate over decades of V and stop at max_iter;
    # the fallback solves the scalar V equation by a bracketed root for each (m, q)
    p = Problem(Task("linear", L=1, noise=0.1), PowerLawTarget(1.25, d=100, p0=100),
                Learner(1.0, 0.00125), alpha=0.0025)
    r = solve_state_evolution(p, max_iter=80, start="uninformative", finite_size_check=False)
    assert r.converged, r.status
    assert r.method.startswith("V eliminated")
    se = StateEvolution(p)
    x = np.array([r.m, r.q, r.V])
    assert np.max(np.abs(se(x) - x) / np.abs(x)) < 1e-9  # a fixed point of the full map
    assert 10 < r.V < 1e3 and 0 < r.q < 1  # V ~ 1/lam scale; Shat small, as direct ERM finds


def test_progress_reports_iterations_and_residual_without_changing_the_result(monkeypatch):
    """issue 16, item 8: a progress bar per start (iteration, residual, iterations to
    tol); the solve itself is unchanged, and off a terminal nothing is written."""
    from amp_attention.solvers import state_evolution as sev

    bars = []

    class Recorder:
        def __init__(self, **kw):
            self.desc, self.n, self.postfix = kw.get("desc"), 0, []
            bars.append(self)

        def update(self, k):
            self.n += k

        def set_postfix_str(self, text, refresh=True):
            self.postfix.append(text)

        def close(self):
            pass

    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.6)
    plain = sev.solve_state_evolution(p, start="both")
    monkeypatch.setattr(sev, "progress_bar", Recorder)
    shown = sev.solve_state_evolution(p, progress=True, start="both")
    assert (shown.m, shown.q, shown.V, shown.iterations) == (plain.m, plain.q, plain.V,
                                                             plain.iterations)
    assert [b.desc for b in bars] == ["SE, informative start", "SE, uninformative start"]
    assert all(b.n >= 1 and b.postfix[-1].startswith("residual") for b in bars)
    assert any("it to tol" in t for b in bars for t in b.postfix)


def test_auto_start_runs_one_start_only_for_a_convex_erm():
    lin = dict(task=Task("linear", L=1, noise=0.5), target=WishartTarget(0.5), alpha=0.6)
    convex = Problem(learner=Learner(1.0, 0.1), **lin)
    auto, both = solve_state_evolution(convex), solve_state_evolution(convex, start="both")
    assert auto.alternative is None and "one start: convex ERM" in auto.start_policy
    # the uninformative start would have found the same point
    assert not both.metastable
    for k in ("m", "q", "V", "test_error"):
        assert getattr(auto, k) == pytest.approx(getattr(both, k), rel=1e-8)
    elementwise = solve_state_evolution(Problem(learner=Learner(1.0, 0.1, parameterisation="elementwise"), **lin))
    assert elementwise.alternative is None and "element-wise" in elementwise.start_policy
    capped = solve_state_evolution(Problem(learner=Learner(0.5, 0.1), **lin))
    assert capped.alternative is not None and capped.start_policy.startswith("both starts")


def test_auto_start_runs_the_uninformative_start_when_the_informative_one_fails(monkeypatch):
    import amp_attention.solvers.state_evolution as sev

    real = sev._solve_from
    seen = []

    def fail_informative(se, x0, **kw):
        seen.append(float(x0[0]))
        if x0[0] > 0:  # the informative start m = 0.999 Q0
            return real(se, x0, **{**kw, "max_iter": 1})
        return real(se, x0, **kw)

    monkeypatch.setattr(sev, "_solve_from", fail_informative)
    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.6)
    r = sev.solve_state_evolution(p)
    assert len(seen) == 2 and r.converged and r.start == "uninformative"
    assert "the informative start failed" in r.start_policy
