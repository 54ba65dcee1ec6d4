"""Direct ERM at finite d, linear channel (THEORY 2): the least-squares path of amp_attention.erm."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from symbasis import orthonormal_sym_basis
from scipy.optimize import minimize

from amp_attention.data import generate_dataset
from amp_attention.operators import linear_loss_and_grad, measure, preactivations, upper_triangle
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.erm import ERMResult, direct_erm, erm_statistics


def _problem(L: int = 1, kappa: float = 1.0, lam: float = 0.05, alpha: float = 1.0,
             noise: float = 0.3, param: str = "factorised") -> Problem:
    return Problem(Task("linear", L=L, noise=noise), WishartTarget(0.5),
                   Learner(kappa=kappa, lam=lam, parameterisation=param), alpha=alpha)


def _objective(data, S: np.ndarray, lam: float) -> tuple[float, np.ndarray]:
    """f(S) + lam d Tr S and grad f(S) + lam d I."""
    d = data.d
    f, g = linear_loss_and_grad(data.X, data.y, S)
    return f + lam * d * float(np.trace(S)), g + lam * d * np.eye(d)


@pytest.mark.parametrize("L,kappa", [(1, 1.0), (2, 2.0)])
def test_factorised_kkt(L: int, kappa: float) -> None:
    d, lam = 12, 0.05
    prob = _problem(L=L, kappa=kappa, lam=lam)
    data = generate_dataset(prob, d, 3)
    res = direct_erm(prob, d, 3, data=data)
    assert res.converged and res.residual < 1e-9
    S = res.S
    assert np.min(np.linalg.eigvalsh(S)) >= -1e-12
    _, Z = _objective(data, S, lam)
    # KKT of min f + lam d Tr S over PSD: Z PSD, Z S = 0
    scale = np.linalg.norm(Z - lam * d * np.eye(d), 2) + lam * d
    assert np.min(np.linalg.eigvalsh(Z)) >= -1e-6 * scale
    assert np.linalg.norm(Z @ S) <= 1e-6 * scale * np.linalg.norm(S)
    # the reported summary is consistent with S
    Q0 = np.sum(data.S0**2) / d
    assert res.matrix_mse == pytest.approx(Q0 - 2 * res.m + res.q, rel=1e-10)
    assert res.test_error == pytest.approx((2 * L + L * (L - 1) / 2) * res.matrix_mse)
    obj, _ = _objective(data, S, lam)
    assert res.loss == pytest.approx(obj / data.n, rel=1e-12)


@pytest.mark.parametrize("L", [1, 2])
def test_factorised_matches_burer_monteiro(L: int) -> None:
    d, lam = 8, 0.05
    prob = _problem(L=L, kappa=1.0, lam=lam)
    data = generate_dataset(prob, d, 7)
    res = direct_erm(prob, d, 7, data=data)
    assert res.converged
    obj, _ = _objective(data, res.S, lam)

    def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
        W = w.reshape(d, d)
        val, G = _objective(data, W.T @ W, lam)
        return val, (2.0 * W @ G).ravel()

    rng = np.random.default_rng(0)
    best = None
    for _ in range(5):
        out = minimize(fun, 0.3 * rng.standard_normal(d * d), jac=True, method="L-BFGS-B",
                       options=dict(maxiter=20000, ftol=1e-16, gtol=1e-12, maxcor=30))
        if best is None or out.fun < best.fun:
            best = out
    W = best.x.reshape(d, d)
    S_bm = W.T @ W
    assert abs(best.fun - obj) <= 1e-7 * abs(obj)
    assert np.linalg.norm(S_bm - res.S) <= 1e-4 * np.linalg.norm(res.S)


def test_rank_cap() -> None:
    d, kappa = 12, 0.25
    prob = _problem(L=1, kappa=kappa, lam=0.005, alpha=1.0)
    res = direct_erm(prob, d, 2, max_iter=5000)
    p = round(kappa * d)
    assert np.sum(np.linalg.eigvalsh(res.S) > 1e-9) <= p
    assert res.rank_fraction <= p / d
    # the cap binds here: without it the minimiser has a larger rank
    free = direct_erm(_problem(L=1, kappa=1.0, lam=0.005, alpha=1.0), d, 2)
    assert free.rank_fraction > p / d
    assert free.loss <= res.loss + 1e-12


def _dense_sensing(X: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Columns = upper_triangle(h(E_k)) over the orthonormal basis E_k of Sym(d)."""
    basis = orthonormal_sym_basis(X.shape[2])
    B = np.stack([upper_triangle(preactivations(X, E)).ravel() for E in basis], axis=1)
    return B, basis


@pytest.mark.parametrize("L,lam", [(1, 0.1), (2, 0.03), (2, 0.0)])
def test_elementwise_matches_dense_ridge(L: int, lam: float) -> None:
    d = 6
    prob = _problem(L=L, lam=lam, alpha=1.5, param="elementwise")
    data = generate_dataset(prob, d, 11)
    res = direct_erm(prob, d, 11, data=data)
    assert res.converged
    B, basis = _dense_sensing(data.X)
    # (B^T B + lam d I) c = B^T y in the orthonormal basis, ||S||_F = ||c||
    c = np.linalg.solve(B.T @ B + lam * d * np.eye(B.shape[1]), B.T @ data.y.ravel())
    S_ref = sum(ck * E for ck, E in zip(c, basis))
    assert np.linalg.norm(res.S - S_ref) <= 1e-7 * np.linalg.norm(S_ref)
    pen = lam * d * 0.5 * np.sum(S_ref**2)
    r = data.y - measure(data.X, S_ref)
    assert res.loss == pytest.approx((0.5 * np.sum(r * r) + pen) / data.n, rel=1e-9)


def test_test_error_is_population_value() -> None:
    # E sum_{a<=b} (h_ab(S0) - h_ab(Shat))^2 on fresh tokens vs the closed form
    d, L = 6, 2
    prob = _problem(L=L, lam=0.1, alpha=0.5)
    res = direct_erm(prob, d, 1)
    data = generate_dataset(prob, d, 1)
    rng = np.random.default_rng(99)
    Xf = rng.standard_normal((40000, L, d))
    e = np.sum((measure(Xf, data.S0) - measure(Xf, res.S)) ** 2, axis=1)
    assert abs(e.mean() - res.test_error) < 4 * e.std() / math.sqrt(e.size)


def test_nonconverged_is_flagged() -> None:
    prob = _problem(L=1, lam=0.01)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        res = direct_erm(prob, 10, 0, max_iter=3)
    assert not res.converged and res.residual >= 1e-9 and res.iterations == 3


def test_result_dict_and_statistics() -> None:
    prob = _problem(L=1, lam=0.1, alpha=0.5)
    stats = erm_statistics(prob, 8, [0, 1, 2])
    assert stats.all_converged and stats.not_converged == ()
    res = stats.results
    assert all(isinstance(r, ERMResult) for r in res)
    # the statistics must be those of independent runs at the requested seeds
    mse = np.array([direct_erm(prob, 8, s).matrix_mse for s in (0, 1, 2)])
    assert [r.seed for r in res] == [0, 1, 2]
    assert stats.mean["matrix_mse"] == pytest.approx(mse.mean(), rel=1e-12)
    assert stats.stderr["matrix_mse"] == pytest.approx(mse.std(ddof=1) / math.sqrt(3),
                                                          rel=1e-9)
    dct = res[0].to_dict()
    assert "S" not in dct
    assert dct["status"] == "converged" and dct["message"] == ""
    text = ("status", "message", "channel", "method")
    assert all(type(dct[k]) is str for k in text)
    per_start = [k for k in dct if k.startswith("restart_")]
    assert all(type(v) is list and all(type(x) in (int, float, bool) for x in v)
               for k, v in dct.items() if k in per_start)
    assert all(type(v) in (int, float, bool) for k, v in dct.items()
               if k not in text and k not in per_start)
    assert type(dct["converged"]) is bool and type(dct["iterations"]) is int
    one = erm_statistics(prob, 8, [4], keep_matrix=False)
    # one seed has no standard error: NaN (null in JSON, "-" in the table), not 0 (issue 58)
    assert math.isnan(one.stderr["q"]) and one.results[0].S is None


def test_bad_input() -> None:
    prob = _problem()
    for bad in (1, 0, 8.0, 8.5, "8"):
        with pytest.raises(ValueError, match="d must"):
            direct_erm(prob, bad, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        direct_erm(prob, 8, 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        erm_statistics(prob, 8, [0, 1.0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="seed"):
        erm_statistics(prob, 8, [])
    data = generate_dataset(prob, 8, 0)
    with pytest.raises(ValueError, match="d=8"):
        direct_erm(prob, 9, 0, data=data)
    soft = Problem(Task("softmax", L=2), WishartTarget(0.5), Learner(), alpha=0.5)
    with pytest.raises(ValueError, match=r"data.y must have shape \(\d+, 4\)"):
        direct_erm(soft, 8, 0, data=generate_dataset(_problem(L=2), 8, 0))  # linear labels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        direct_erm(prob, 8, 0, data=data)  # a converged run emits no warning
