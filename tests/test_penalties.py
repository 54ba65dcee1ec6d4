"""The penalty contract (amp_attention.penalties): every registered penalty, its prox,
its weights, its denoiser, and the symmetric (non-PSD) nuclear norm through SE, ERM and
Adam (issue 31)."""

import math

import numpy as np
import pytest

from amp_attention.adam import AdamOptions, train, train_layer
from amp_attention.channels import channel_for
from amp_attention.data import generate_dataset
from amp_attention.erm import direct_erm, kkt_residual
from amp_attention.penalties import Penalty, make_penalty, penalty_class, penalty_names
from amp_attention.penalties.nuclear_symmetric import SymmetricNuclearNorm
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.targets import MarchenkoPasturMeasure

PENALTIES = [make_penalty("factorised", 0.07), make_penalty("factorised", 0.05, 0.4),
             make_penalty("elementwise", 0.2), make_penalty("symmetric", 0.07)]


def _sym(rng, d):
    A = rng.standard_normal((d, d))
    return (A + A.T) / math.sqrt(2 * d)


def _project(penalty, S):
    """Nearest point of the penalty's domain: PSD of rank <= cap (factorised), else S."""
    if not penalty.factorised:
        return S
    s, U = np.linalg.eigh(0.5 * (S + S.T))
    s = np.maximum(s, 0.0)
    r = penalty.rank(S.shape[0])
    if r is not None:
        s[: s.size - r] = 0.0
    return (U * s) @ U.T


def test_every_registered_penalty_meets_the_contract():
    for name in penalty_names():
        pen = Learner(1.0, 0.1, name).penalty
        assert isinstance(pen, Penalty) and type(pen) is penalty_class(name)
        assert pen.name == name


def test_unknown_parameterisation_and_symmetric_rank_cap_are_refused():
    with pytest.raises(ValueError, match="parameterisation must be one of factorised, elementwise, symmetric"):
        Learner(1.0, 0.1, "diagonal")
    with pytest.raises(ValueError, match="kappa must be >= 1 for the symmetric"):
        Learner(0.5, 0.1, "symmetric")


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_prox_minimises_its_objective(pen):
    """prox(B, t) = argmin ||S - B||^2/2 + t P(S): no point of the domain near it does
    better (random directions, projected back onto the domain independently)."""
    rng = np.random.default_rng(3)
    d, t = 20, 0.4
    B = 2.0 * _sym(rng, d)
    S, kept = pen.prox(B, t)
    assert np.allclose(np.sort(np.linalg.eigvalsh(S)), np.sort(kept), atol=1e-12)

    def obj(T):
        return 0.5 * float(np.sum((T - B) ** 2)) + t * pen.value(T)

    best = obj(S)
    s, U = np.linalg.eigh(S)
    Uk = U[:, np.abs(s) > 1e-12]  # directions in the range of S: P is smooth there
    for _ in range(40):
        for eps in (1e-2, 1e-4):
            assert obj(_project(pen, S + eps * _sym(rng, d))) >= best - 1e-10 * abs(best)
            E = Uk @ _sym(rng, Uk.shape[1]) @ Uk.T
            assert obj(_project(pen, S + eps * E)) >= best - 1e-10 * abs(best)


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_weights_gradient_is_the_derivative_and_balanced_weights_give_P(pen):
    """objective_weights' gradient against central differences, on a quadratic data term;
    and a balanced factorisation of S costs exactly P(S) in the weights."""
    rng = np.random.default_rng(5)
    d = 8
    C = _sym(rng, d)

    def data_loss(S):
        return 0.5 * float(np.sum((S - C) ** 2)), S - C

    P = pen.initial_weights(d, 0.5, rng)
    R, G = pen.objective_weights(P, data_loss)
    for _ in range(5):
        E = rng.standard_normal(P.shape)
        fd = (pen.objective_weights(P + 1e-6 * E, data_loss)[0]
              - pen.objective_weights(P - 1e-6 * E, data_loss)[0]) / 2e-6
        assert fd == pytest.approx(float(np.sum(G * E)), rel=1e-6, abs=1e-9)
    S = pen.S_from_weights(P)
    if pen.factorised or isinstance(pen, SymmetricNuclearNorm):
        # balanced weights: rows sqrt(|s_i|) c^(1/2) u_i^T for the eigenpairs of S
        s, U = np.linalg.eigh(S)
        rows = P.shape[0] // (1 if pen.factorised else 2)
        c = math.sqrt(rows * d)
        pos = np.zeros((rows, d))
        neg = np.zeros((rows, d))
        order = np.argsort(-np.abs(s))[:rows]
        for k, i in enumerate(order):
            (pos if s[i] > 0 else neg)[k] = math.sqrt(abs(s[i]) * c) * U[:, i]
        Pb = pos if pen.factorised else np.concatenate([pos, neg])
        assert np.allclose(pen.S_from_weights(Pb), S, atol=1e-10)
        assert pen.weights_penalty(Pb)[0] == pytest.approx(pen.value(S), rel=1e-10)


def test_symmetric_functionals_match_the_independent_high_precision_reference():
    """Both tails |x| > 2 lam of rho_B against mpmath (amp_attention.reference, which
    shares no code with freeprob.py), where the negative tail carries mass."""
    from amp_attention.reference import symmetric_functionals

    kappa0, mh, qh, Vh, lam = 0.5, 1.2, 0.4, 1.3, 0.1
    ref = symmetric_functionals(kappa0, mh, qh, Vh, lam, dps=20)
    out = SymmetricNuclearNorm(lam).functionals(
        MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)), mh, qh, Vh)
    psd = make_penalty("factorised", lam).functionals(
        MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)), mh, qh, Vh)
    for k in ("m", "q", "V", "trace_per_d", "rank_fraction"):
        assert getattr(out, k) == pytest.approx(float(getattr(ref, k)), rel=1e-9), k
    assert out.rank_fraction > psd.rank_fraction + 0.1  # the negative tail is kept


def test_symmetric_equals_psd_where_the_negative_tail_is_empty():
    """Large lam: no eigenvalue of B below -2 lam, so the two nuclear norms agree."""
    target = MarchenkoPasturMeasure(2.0, math.sqrt(0.5))
    a = SymmetricNuclearNorm(1.0).functionals(target, 1.2, 0.4, 1.3)
    b = make_penalty("factorised", 1.0).functionals(target, 1.2, 0.4, 1.3)
    for k in ("m", "q", "V", "trace_per_d", "rank_fraction", "penalty_per_d2"):
        assert getattr(a, k) == pytest.approx(getattr(b, k), rel=1e-12, abs=1e-15), k


def _linear_symmetric(d=24, lam=0.03):
    p = Problem(Task("linear", L=1, noise=0.1), WishartTarget(0.5), Learner(1.0, lam, "symmetric"),
                alpha=0.5)
    return p, generate_dataset(p, d, 0)


def test_symmetric_erm_apg_and_lbfgs_over_u_v_reach_the_same_convex_optimum():
    p, data = _linear_symmetric()
    a = direct_erm(p, 24, 0, data=data, tol=1e-10, max_iter=50000)
    b = direct_erm(p, 24, 0, data=data, method="lbfgs", tol=1e-8, max_iter=50000)
    assert a.converged and b.converged and a.method == "apg" and b.method == "lbfgs-W"
    assert kkt_residual(data.X, data.y, a.S, channel_for(p.task), 0.03, "symmetric") <= 1e-9
    assert b.loss == pytest.approx(a.loss, rel=1e-7)
    assert np.linalg.norm(a.S - b.S) <= 1e-3 * np.linalg.norm(a.S)
    assert np.min(np.linalg.eigvalsh(a.S)) < -1e-3  # genuinely non-PSD


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_symmetric_adam_on_u_v_reaches_the_erm_optimum():
    p, data = _linear_symmetric()
    erm = direct_erm(p, 24, 0, data=data, tol=1e-11, max_iter=50000)
    pen = p.learner.penalty
    P0 = pen.initial_weights(24, 0.3, np.random.default_rng(1))
    run = train(data.X, data.y, channel_for(p.task), pen, P0, options=AdamOptions(lr=0.02))
    assert run.converged, run.status
    assert run.objective == pytest.approx(erm.loss * data.n, rel=1e-5)
    layer = train_layer(p, 24, 0, options=AdamOptions(lr=0.02), n_test=2000)
    assert layer.loss == pytest.approx(erm.loss, rel=1e-4)
    assert layer.singular_values_W is None


def test_symmetric_predicted_spectrum_matches_a_sampled_matrix():
    """The two-sided spectrum of Shat (negative eigenvalues, an atom at 0, the positive
    bulk) against one sampled B = mh S0 + sqrt(qh) Z at d = 1500 mapped by the same
    penalty's matrix map: the CDF at negative, zero and positive s and the atom, within
    3 / sqrt(d) (eigenvalue counts: O(1/d) plus the sampling of Z)."""
    from amp_attention.solvers.predicted_spectrum import PredictedSpectrum
    from amp_attention.targets import target_measure

    mh, qh, vh, lam = 1.2, 0.5, 1.4, 0.05
    pen = SymmetricNuclearNorm(lam)
    target = WishartTarget(0.5)
    sp = PredictedSpectrum.from_hats(target_measure(target), pen, 1.0, mh, qh, vh, math.nan)
    d = 1500
    rng = np.random.default_rng(11)
    s0 = target.eigenvalues_at(d)
    G = rng.standard_normal((d, d))
    _, _, f = pen.matrix_map(np.diag(mh * s0) + math.sqrt(qh) * (G + G.T) / math.sqrt(2 * d), vh,
                             with_spectrum=True)
    assert np.mean(f < 0) > 0.05  # a genuinely two-sided spectrum
    assert sp.atom_S == pytest.approx(np.mean(f == 0), abs=3 / math.sqrt(d))
    xs = np.concatenate([np.linspace(f.min(), -1e-9, 6), [0.0], np.linspace(1e-9, f.max(), 8)])
    counted = np.array([np.mean(f <= x) for x in xs])
    assert np.max(np.abs(counted - sp.cdf_S(xs))) <= 3 / math.sqrt(d)
    assert sp.cdf_S(np.array(0.0), left=True) == pytest.approx(np.mean(f < 0), abs=3 / math.sqrt(d))
    # the density curve integrates to the continuous mass 1 - atom
    x, rho = sp.eigenvalues, sp.density_S
    assert float(np.sum(0.5 * (rho[1:] + rho[:-1]) * np.diff(x))) == pytest.approx(1.0 - sp.atom_S, abs=2e-3)


def test_symmetric_gamp_fixed_point_is_the_erm_minimiser():
    """GAMP with the symmetric penalty's matrix map (damped) reaches the convex ERM
    objective's stationary point: KKT residual of its Shat, and the same matrix as APG."""
    from amp_attention.gamp import GAMPOptions, gamp_on_problem

    p, data = _linear_symmetric(d=24)
    run = gamp_on_problem(p, 24, 0, options=GAMPOptions(damping=0.5, max_iter=3000, tol=1e-10))
    res = run.result
    assert res.converged, res.status
    assert kkt_residual(data.X, data.y, res.S, channel_for(p.task), 0.03, "symmetric") <= 1e-6
    erm = direct_erm(p, 24, 0, data=data, tol=1e-11, max_iter=50000)
    assert np.linalg.norm(res.S - erm.S) <= 1e-5 * np.linalg.norm(erm.S)
