"""The softmax test error by rows (docs/theory.md 16.7): L times one row's expectation, an
integral over one row's 2L (3L with label noise) Gaussian coordinates instead of all 2K."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.channels.softmax import SoftmaxChannel
from amp_attention.solvers import channel_integrals as ci
from amp_attention.solvers.channel_integrals import MonteCarloChannel, sobol_normals

NOISES = [(0.0, "output"), (0.3, "output"), (0.5, "logit"), (0.5, "logit_goe")]


@pytest.mark.parametrize("noise,noise_at", NOISES)
@pytest.mark.parametrize("L", [2, 3, 5])
def test_row_terms_are_row_zero_of_the_full_outputs(L, noise, noise_at):
    """Sample by sample, the kernel's terms are L times row 0 of the outputs built by the
    channel's own h_from_u, outputs and labels_from_noise on u-vectors whose only non-zero
    coordinates are row 0's (the other rows then differ, row 0 does not)."""
    ch = SoftmaxChannel(L, beta=1.7, noise=noise, noise_at=noise_at)
    rng = np.random.default_rng(L)
    n, sq0, a, s = 200, 1.3, 0.6, 0.8
    G = rng.standard_normal((n, ch.row_draw_dimension))
    row = np.flatnonzero(ch._ka == 0)
    us, z = np.zeros((n, ch.K)), np.zeros((n, ch.K))
    us[:, row] = sq0 * G[:, :L]
    z[:, row] = G[:, L:2 * L]
    H = ch.h_from_u(us)
    A0 = ch.outputs(H).reshape(n, L, L)[:, 0]
    P0 = ch.outputs(ch.h_from_u(a * us + s * z)).reshape(n, L, L)[:, 0]
    clean = L * np.sum((A0 - P0) ** 2, axis=1)
    if noise > 0:
        E = np.zeros((n, ch.noise_dim))
        # the noise normals of row 0: u-coordinates (0, b) (logit) or outputs (0, b)
        E[:, row if noise_at != "output" else np.arange(L)] = G[:, 2 * L:]
        Y0 = ch.labels_from_noise(H, E).reshape(n, L, L)[:, 0]
        noisy = L * np.sum((Y0 - P0) ** 2, axis=1)
    else:
        noisy = clean
    got = ch.row_test_terms(G, sq0, a, s)
    np.testing.assert_allclose(got[:, 0], clean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got[:, 1], noisy, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("noise,noise_at", NOISES)
@pytest.mark.parametrize("L", [3, 5])
def test_row_means_equal_the_all_rows_means(L, noise, noise_at):
    """The exchangeability of the rows: the one-row estimator (2^13 RQMC samples in 2L or
    3L dimensions) and the all-rows one (test_terms and train_terms on labels_from_noise,
    2^13 samples in 2K + noise_dim dimensions, independent scramblings) agree within 4
    combined standard errors (8 replicas each) on the clean and the noisy test error."""
    ch = SoftmaxChannel(L, beta=1.5, noise=noise, noise_at=noise_at)
    m, q, Q0 = 0.7, 0.8, 1.5
    a, c = m / Q0, q - m * m / Q0
    R = 8
    G = sobol_normals(ch.row_draw_dimension, 13, R, 1)
    rows = ch.row_test_terms(G.reshape(-1, G.shape[-1]), math.sqrt(Q0), a, math.sqrt(c))
    by_rows = rows.reshape(R, -1, 2).mean(axis=1)
    K = ch.K
    F = sobol_normals(2 * K + ch.noise_dim, 13, R, 2).reshape(-1, 2 * K + ch.noise_dim)
    us = math.sqrt(Q0) * F[:, :K]
    om = a * us + math.sqrt(c) * F[:, K:2 * K]
    y = ch.labels_from_noise(ch.h_from_u(us), F[:, 2 * K:])
    full = np.column_stack([ch.test_terms(us, om), ch.train_terms(y, om)])
    full = full.reshape(R, -1, 2).mean(axis=1)
    for j in range(2):
        d = by_rows[:, j].mean() - full[:, j].mean()
        se = math.hypot(by_rows[:, j].std(ddof=1), full[:, j].std(ddof=1)) / math.sqrt(R)
        assert abs(d) <= 4 * se, (j, by_rows[:, j].mean(), full[:, j].mean(), se)
        # and the comparison has the resolution to see a wrong row: 1 % of the mean
        assert 4 * se < 0.01 * full[:, j].mean(), (j, se)


def test_the_row_estimator_is_the_more_precise_at_equal_samples():
    """At L = 5 the one-row integral (10 dimensions) has a smaller replica spread than the
    all-rows one (30 dimensions) at the same 2^14 samples per replica (measured ~3x)."""
    ch = SoftmaxChannel(5, beta=1.0)
    m, q, Q0 = 0.54, 0.26, 1.5
    a, c = m / Q0, q - m * m / Q0
    R, K = 8, ch.K
    G = sobol_normals(ch.row_draw_dimension, 14, R, 3).reshape(-1, ch.row_draw_dimension)
    by_rows = ch.row_test_terms(G, math.sqrt(Q0), a, math.sqrt(c))[:, 0].reshape(R, -1)
    F = sobol_normals(2 * K, 14, R, 4).reshape(-1, 2 * K)
    us = math.sqrt(Q0) * F[:, :K]
    full = ch.test_terms(us, a * us + math.sqrt(c) * F[:, K:]).reshape(R, -1)
    assert by_rows.mean(axis=1).std(ddof=1) < 0.6 * full.mean(axis=1).std(ddof=1)


def test_the_se_draws_one_row_and_checks_the_shape():
    ch = SoftmaxChannel(4, beta=1.0, noise=0.2, noise_at="logit")
    assert ch.row_draw_dimension == 12
    assert ci.test_draw_dimension(ch) == 12
    assert ci.test_draw_dimension(SoftmaxChannel(4, beta=1.0)) == 8
    with pytest.raises(ValueError, match=r"G must have shape \(n, 12\)"):
        ch.row_test_terms(np.zeros((3, 8)), 1.0, 0.5, 0.5)
    mc = MonteCarloChannel(ch, log2_n=6, replicas=4, seed=0, test_log2_n=8)
    out = mc.test_fields(0.7, 0.8, 1.5)
    assert out.shape == (4, 2) and np.all(np.isfinite(out))
