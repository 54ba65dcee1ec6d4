"""Measurement operator (THEORY 3) and finite-d data (THEORY 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.data import (
    generate_dataset,
    quantile_eigenvalues,
    sample_target_matrix,
    sample_tokens,
)
from amp_attention.operators import (
    from_upper_triangle,
    linear_loss_and_grad,
    measure,
    measure_adjoint,
    preactivations,
    preactivations_adjoint,
    tau,
    upper_triangle,
)
from amp_attention.spec import (
    CustomTarget,
    Learner,
    PowerLawTarget,
    Problem,
    Task,
    WishartTarget,
)


def _sym(rng: np.random.Generator, d: int) -> np.ndarray:
    G = rng.standard_normal((d, d))
    return G + G.T


@pytest.mark.parametrize("L", [1, 2, 3])
def test_preactivations_match_naive_loop(L: int) -> None:
    rng = np.random.default_rng(1)
    n, d = 7, 5
    X = rng.standard_normal((n, L, d))
    S = _sym(rng, d)
    H = preactivations(X, S)
    ref = np.empty((n, L, L))
    for mu in range(n):
        for a in range(L):
            for b in range(L):
                v = X[mu, a] @ S @ X[mu, b]
                if a == b:
                    v -= np.trace(S)
                ref[mu, a, b] = v / math.sqrt(d)
    np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_adjoint_identity(L: int) -> None:
    rng = np.random.default_rng(2 + L)
    n, d = 11, 6
    X = rng.standard_normal((n, L, d))
    S = _sym(rng, d)
    R = rng.standard_normal((n, L, L))
    R = R + R.transpose(0, 2, 1)
    lhs = float(np.sum(R * preactivations(X, S)))
    G = preactivations_adjoint(X, R)
    assert np.allclose(G, G.T)
    rhs = float(np.sum(G * S))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))
    # the upper-triangle restriction B = upper o A and its adjoint B*
    r = rng.standard_normal((n, L * (L + 1) // 2))
    lhs = float(np.sum(r * measure(X, S)))
    rhs = float(np.sum(measure_adjoint(X, r) * S))
    assert abs(lhs - rhs) <= 1e-12 * max(1.0, abs(lhs))


def test_upper_triangle_order_and_round_trip() -> None:
    L = 3
    H = np.arange(9.0).reshape(1, 3, 3)
    H = H + H.transpose(0, 2, 1)
    # row-major a <= b: (0,0),(0,1),(0,2),(1,1),(1,2),(2,2)
    np.testing.assert_array_equal(upper_triangle(H)[0], [H[0, 0, 0], H[0, 0, 1], H[0, 0, 2],
                                                          H[0, 1, 1], H[0, 1, 2], H[0, 2, 2]])
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((4, 6))
    back = from_upper_triangle(Y, L)
    np.testing.assert_array_equal(back, back.transpose(0, 2, 1))
    np.testing.assert_array_equal(upper_triangle(back), Y)
    np.testing.assert_allclose(tau(3), [math.sqrt(2), 1, 1, math.sqrt(2), 1, math.sqrt(2)])
    assert tau(1).shape == (1,)


@pytest.mark.parametrize("L", [1, 2, 3])
def test_linear_grad_finite_differences(L: int) -> None:
    rng = np.random.default_rng(10 + L)
    n, d = 9, 5
    X = rng.standard_normal((n, L, d))
    y = rng.standard_normal((n, L * (L + 1) // 2))
    S = _sym(rng, d)
    f, g = linear_loss_and_grad(X, y, S)
    r = measure(X, S) - y
    assert f == pytest.approx(0.5 * np.sum(r * r), rel=1e-14)
    for _ in range(3):
        E = _sym(rng, d)
        eps = 1e-4
        fp, _ = linear_loss_and_grad(X, y, S + eps * E)
        fm, _ = linear_loss_and_grad(X, y, S - eps * E)
        fd = (fp - fm) / (2 * eps)
        an = float(np.sum(g * E))
        assert abs(fd - an) <= 1e-6 * max(abs(an), 1.0)


def test_wishart_target_moments() -> None:
    d, kappa0 = 200, 0.5
    S0 = sample_target_matrix(WishartTarget(kappa0), d, np.random.default_rng(0))
    assert S0.shape == (d, d)
    np.testing.assert_array_equal(S0, S0.T)
    ev = np.linalg.eigvalsh(S0)
    assert ev.min() > -1e-10
    # rank p0 = kappa0 d.  E Tr S0/d = sqrt(kappa0), std sqrt(2)/d (chi-square);
    # E Tr S0^2/d = 1 + kappa0 + 1/d, std ~ 2 sqrt(2) (1 + kappa0)/(sqrt(kappa0) d)
    # (leading order of Var ||W0 W0^T||_F^2 = 8 p0 d (p0 + d)^2; about 6/d here).
    # Allow 4 standard deviations.
    assert np.sum(ev > 1e-8) == 100
    assert abs(np.trace(S0) / d - math.sqrt(kappa0)) < 4 * math.sqrt(2) / d
    sd_q = 2 * math.sqrt(2) * (1 + kappa0) / (math.sqrt(kappa0) * d)
    assert abs(np.sum(S0 * S0) / d - (1 + kappa0 + 1.0 / d)) < 4 * sd_q


def test_powerlaw_and_custom_targets() -> None:
    rng = np.random.default_rng(4)
    t = PowerLawTarget(gamma=1.5, d=100, p0=50, Q0=2.0)
    d = 40
    S0 = sample_target_matrix(t, d, rng)
    ev = np.sort(np.linalg.eigvalsh(S0))[::-1]
    np.testing.assert_allclose(np.sum(ev**2) / d, 2.0, rtol=1e-10)
    assert np.sum(ev > 1e-8) == 20  # p0 scaled with d
    np.testing.assert_allclose(ev[:20] / ev[0], np.arange(1, 21.0) ** -1.5, rtol=1e-8)

    eig = tuple(float(v) for v in rng.uniform(0, 3, size=d))
    S0 = sample_target_matrix(CustomTarget(eigenvalues=eig), d, rng)
    np.testing.assert_allclose(np.linalg.eigvalsh(S0), np.sort(eig), atol=1e-12)

    # a 2-atom list at a larger d: quantiles split the mass evenly
    vals = quantile_eigenvalues(np.array([2.0, 1.0]), np.array([0.5, 0.5]), 6)
    np.testing.assert_array_equal(vals, [1, 1, 1, 2, 2, 2])
    dens = CustomTarget(grid=(0.0, 1.0, 2.0), density=(1.0, 1.0, 1.0))
    S0 = sample_target_matrix(dens, 8, rng)
    assert np.all(np.linalg.eigvalsh(S0) >= -1e-12)


def test_dataset_labels_and_noise() -> None:
    delta = 0.7
    prob = Problem(Task("linear", L=2, noise=delta), WishartTarget(0.5), Learner(), alpha=0.5)
    data = generate_dataset(prob, 40, seed=5)
    assert data.n == 800 and data.X.shape == (800, 2, 40) and data.y.shape == (800, 3)
    assert data.X.dtype == np.float64
    xi = data.y - measure(data.X, data.S0)
    N = xi.size
    assert abs(np.var(xi) - delta) < 5 * delta * math.sqrt(2.0 / N)
    # same seed -> same draw; noise does not change S0 or X
    again = generate_dataset(
        Problem(Task("linear", L=2, noise=0.0), WishartTarget(0.5), Learner(), alpha=0.5), 40, 5
    )
    np.testing.assert_array_equal(again.S0, data.S0)
    np.testing.assert_array_equal(again.X, data.X)
    np.testing.assert_allclose(data.y - again.y, xi, atol=1e-12)
    assert sample_tokens(3, 2, 4, np.random.default_rng(0)).shape == (3, 2, 4)


def test_dataset_bad_input() -> None:
    prob = Problem(Task("linear", L=1), WishartTarget(0.5), Learner(), alpha=0.5)
    for bad in (1, 0, 4.0, 4.5, "8", True):
        with pytest.raises(ValueError, match="d must"):
            generate_dataset(prob, bad, 0)  # type: ignore[arg-type]
    for bad in (1.5, -1, "0", None):
        with pytest.raises(ValueError, match="seed"):
            generate_dataset(prob, 8, bad)  # type: ignore[arg-type]
    soft = Problem(Task("softmax", L=2), WishartTarget(0.5), Learner(), alpha=0.5)
    assert generate_dataset(soft, 8, 0).y.shape == (32, 4)   # every channel: M = L^2 outputs
