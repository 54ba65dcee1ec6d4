"""amp_attention.heads: head diversity, NW heads, the ensemble MSE decomposition,
weighting schemes and the allocation sweep (fast; the CLI is in test_heads_cli.py)."""

from __future__ import annotations

import math

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_attention.heads import (NWKernel, NWTask, allocation_sweep, as_head_stack,
                                 budget_heads, compare_weightings, cross_grams,
                                 decompose_ensemble_mse, divisors, fibonacci_weights,
                                 geometric_weights, head_diversity_index, head_weights,
                                 law_dk_star, nw_predict, nw_predict_heads, nw_weights,
                                 pairwise_overlaps, pairwise_principal_angles,
                                 principal_angles, random_heads, rank_heads, rotation_heads, rotation_sweep,
                                 simulate_heads, uniform_weights)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


def haar(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """n x k matrix with orthonormal columns (QR of a Gaussian matrix)."""
    q, r = np.linalg.qr(rng.standard_normal((n, k)))
    return q * np.sign(np.diag(r))


def well_conditioned(rng: np.random.Generator, k: int) -> np.ndarray:
    """A random invertible k x k matrix with singular values in [0.5, 2]."""
    return haar(rng, k, k) @ np.diag(rng.uniform(0.5, 2.0, k)) @ haar(rng, k, k).T


shapes = st.tuples(st.integers(2, 5), st.integers(1, 4), st.integers(0, 3),
                   st.integers(0, 2 ** 31 - 1))  # H, d_k, extra dimensions, seed


# --------------------------------------------------------------------------- HDI


@SETTINGS
@given(shapes)
def test_hdi_is_one_for_mutually_orthogonal_subspaces(shape) -> None:
    H, d_k, extra, seed = shape
    rng = np.random.default_rng(seed)
    frame = haar(rng, H * d_k + extra, H * d_k)
    # Any basis of each block (not only orthonormal ones) spans the same subspace.
    W = np.stack([frame[:, h * d_k:(h + 1) * d_k] @ well_conditioned(rng, d_k) for h in range(H)])
    assert head_diversity_index(W) == pytest.approx(1.0, abs=1e-10)


@SETTINGS
@given(shapes)
def test_hdi_is_zero_for_identical_subspaces(shape) -> None:
    H, d_k, extra, seed = shape
    rng = np.random.default_rng(seed)
    Q = haar(rng, d_k + extra, d_k)
    W = np.stack([Q @ well_conditioned(rng, d_k) for _ in range(H)])
    assert head_diversity_index(W) == pytest.approx(0.0, abs=1e-10)


@SETTINGS
@given(shapes)
def test_hdi_invariant_under_rotations_within_heads_and_head_permutations(shape) -> None:
    H, d_k, extra, seed = shape
    rng = np.random.default_rng(seed)
    d_model = d_k + 1 + extra
    W = rng.standard_normal((H, d_model, d_k))
    rotated = np.stack([W[h] @ haar(rng, d_k, d_k) for h in range(H)])
    permuted = W[rng.permutation(H)]
    ref = head_diversity_index(W)
    assert 0.0 <= ref <= 1.0
    assert head_diversity_index(rotated) == pytest.approx(ref, abs=1e-12)
    assert head_diversity_index(permuted) == pytest.approx(ref, abs=1e-12)
    # the literal formula is rotation invariant too (||R^T G R'||_F = ||G||_F) ...
    lit = head_diversity_index(W, normalise="none")
    assert head_diversity_index(rotated, normalise="none") == pytest.approx(lit, abs=1e-10)
    # ... but not scale invariant, unlike the default
    assert head_diversity_index(3.0 * W) == pytest.approx(ref, abs=1e-12)
    assert head_diversity_index(3.0 * W, normalise="none") != pytest.approx(lit, abs=1e-6)


@SETTINGS
@given(shapes)
def test_hdi_equals_mean_squared_cosine_of_principal_angles(shape) -> None:
    H, d_k, extra, seed = shape
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((H, d_k + 1 + extra, d_k))
    pairs = [(h, g) for h in range(H) for g in range(h + 1, H)]
    cos2 = [np.mean(np.cos(scipy.linalg.subspace_angles(W[h], W[g])) ** 2) for h, g in pairs]
    assert head_diversity_index(W) == pytest.approx(1.0 - np.mean(cos2), abs=1e-10)


def test_literal_normalisation_is_the_issue_formula_and_coincides_on_scaled_bases() -> None:
    rng = np.random.default_rng(3)
    H, d_model, d_k = 4, 11, 3
    W = rng.standard_normal((H, d_model, d_k))
    lit = 1.0 - np.mean([np.linalg.norm(W[h].T @ W[g] / d_k) ** 2
                         for h in range(H) for g in range(h + 1, H)])
    assert head_diversity_index(W, normalise="none") == pytest.approx(lit, rel=1e-12)
    # W_h = d_k^(1/4) Q_h R_h (R_h orthogonal): W_h^T W_h = sqrt(d_k) I -> both agree
    scaled = np.stack([d_k ** 0.25 * haar(rng, d_model, d_k) @ haar(rng, d_k, d_k)
                       for _ in range(H)])
    assert head_diversity_index(scaled, normalise="none") == pytest.approx(
        head_diversity_index(scaled), abs=1e-12)
    # orthonormal columns: identical heads give 1 - 1/d_k literally, 0 by default
    Q = haar(rng, d_model, d_k)
    same = np.stack([Q, Q])
    assert head_diversity_index(same, normalise="none") == pytest.approx(1 - 1 / d_k, abs=1e-12)
    assert head_diversity_index(same) == pytest.approx(0.0, abs=1e-12)


def test_stacked_key_matrix_is_split_into_column_blocks() -> None:
    rng = np.random.default_rng(0)
    W = rng.standard_normal((3, 7, 2))
    stacked = np.concatenate(list(W), axis=1)  # [W_1 W_2 W_3], shape (7, 6)
    np.testing.assert_array_equal(as_head_stack(stacked, heads=3, layout="columns"), W)
    np.testing.assert_array_equal(as_head_stack(stacked, d_k=2, layout="columns"), W)
    assert head_diversity_index(stacked, heads=3, layout="columns") == head_diversity_index(W)
    # the weight of torch.nn.Linear(d_model, H d_k) is (out, in) = (H d_k, d_model)
    np.testing.assert_array_equal(as_head_stack(stacked.T, heads=3, layout="rows"), W)


def test_a_2d_key_matrix_needs_its_layout() -> None:
    """A (H d_k, d_model) nn.Linear weight read as (d_model, H d_k) columns gave a wrong
    HDI without a word (0.967 instead of 1 in a constructed case): the layout is now
    required for 2-d input, and the in_proj_weight shape (3 m, m) is refused."""
    d_model, H, d_k = 8, 2, 2
    rows = np.zeros((H * d_k, d_model))  # heads on disjoint coordinates: HDI = 1
    rows[np.arange(H * d_k), np.arange(H * d_k)] = 1.0
    assert head_diversity_index(rows, heads=H, layout="rows") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="layout is required for a 2-d array"):
        as_head_stack(rows, heads=H)
    with pytest.raises(ValueError, match="layout must be one of stack, columns, rows"):
        as_head_stack(rows, heads=H, layout="torch")
    with pytest.raises(ValueError, match=r"heads x d_k = 2 x 3 must equal H d_k = 4"):
        as_head_stack(rows, heads=2, d_k=3, layout="rows")
    in_proj = np.random.default_rng(0).standard_normal((3 * d_model, d_model))
    with pytest.raises(ValueError, match=r"in_proj_weight.*key block in_proj_weight\[8:16\]"):
        as_head_stack(in_proj, heads=2, layout="rows")
    with pytest.raises(ValueError, match=r"in_proj_weight.*transposed"):
        as_head_stack(in_proj.T, heads=2, layout="columns")
    np.testing.assert_array_equal(
        as_head_stack(in_proj[d_model:2 * d_model], heads=2, layout="rows"),
        as_head_stack(in_proj[d_model:2 * d_model].T, heads=2, layout="columns"))


def test_load_key_array_never_unpickles(tmp_path: Path) -> None:
    import pickle

    from amp_attention.heads import load_key_array

    W = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "w.npy", W)
    np.testing.assert_array_equal(load_key_array(tmp_path / "w.npy"), W)
    np.savez(tmp_path / "one.npz", wk=W)
    np.testing.assert_array_equal(load_key_array(tmp_path / "one.npz"), W)
    np.savez(tmp_path / "two.npz", wq=W, wk=2 * W)
    np.testing.assert_array_equal(load_key_array(tmp_path / "two.npz", key="wk"), 2 * W)
    with pytest.raises(ValueError, match=r"archive of 2 arrays \(wq, wk\); choose one"):
        load_key_array(tmp_path / "two.npz")
    with open(tmp_path / "w.pkl", "wb") as fh:
        pickle.dump({"weight": W}, fh)
    np.save(tmp_path / "obj.npy", np.array([{"weight": W}], dtype=object), allow_pickle=True)
    (tmp_path / "w.txt").write_text("0 1 2")
    for name in ("w.pkl", "obj.npy", "w.txt"):
        with pytest.raises(ValueError) as info:
            load_key_array(tmp_path / name)
        assert "allow_pickle" not in str(info.value) and "trust" not in str(info.value)
        assert "numpy.save" in str(info.value)


@pytest.mark.parametrize("t", [0.0, 0.1, 0.37, 0.5, 0.8, 1.0])
def test_rotation_heads_hdi_follows_cos4(t: float) -> None:
    # cross-Gram of two rotated heads is cos^2(t pi/2) I, so the overlap is cos^4
    W = rotation_heads(12, 3, 3, t)
    np.testing.assert_allclose(np.einsum("hai,haj->hij", W, W), np.broadcast_to(np.eye(3), (3, 3, 3)),
                               atol=1e-14)
    assert head_diversity_index(W) == pytest.approx(1 - math.cos(t * math.pi / 2) ** 4, abs=1e-12)


def test_overlaps_and_cross_grams() -> None:
    rng = np.random.default_rng(1)
    W = rng.standard_normal((3, 6, 2))
    O = pairwise_overlaps(W)
    np.testing.assert_allclose(np.diag(O), 1.0, atol=1e-12)
    np.testing.assert_allclose(O, O.T, atol=1e-14)
    G = cross_grams(W, normalise="none")
    np.testing.assert_allclose(G[0, 1], W[0].T @ W[1] / 2, rtol=1e-12)


# --------------------------------------------------------------------------- principal angles


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 4), st.integers(0, 2 ** 31 - 1))
def test_principal_angles_match_scipy(k1: int, k2: int, extra: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = max(k1, k2) + extra
    A, B = rng.standard_normal((n, k1)), rng.standard_normal((n, k2))
    ours = principal_angles(A, B)
    assert ours.shape == (min(k1, k2),)
    assert np.all(np.diff(ours) >= -1e-15)  # ascending (scipy returns descending)
    ref = np.sort(scipy.linalg.subspace_angles(A, B))
    # scipy sometimes takes arccos of a cosine that rounds to 1 and returns a few
    # 1e-8 for an exactly zero angle (k1 + k2 > n forces one), so near zero the
    # comparison is on cosines; away from zero it is on the angles themselves.
    np.testing.assert_allclose(np.cos(ours), np.cos(ref), atol=1e-12)
    away = ref > 1e-6
    np.testing.assert_allclose(ours[away], ref[away], atol=1e-10)
    if k1 + k2 > n:  # the subspaces intersect: the smallest angle is exactly 0
        assert ours[0] < 1e-12


def test_small_principal_angles_are_accurate() -> None:
    # arccos alone would return 0 here (cos(1e-9) rounds to 1)
    rng = np.random.default_rng(2)
    Q = haar(rng, 6, 2)
    perturbed = Q + 1e-9 * rng.standard_normal((6, 2))
    ours = principal_angles(Q, perturbed)
    ref = np.sort(scipy.linalg.subspace_angles(Q, perturbed))
    assert ours.max() > 1e-11
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-17)


def test_pairwise_principal_angles_symmetric_and_consistent() -> None:
    rng = np.random.default_rng(4)
    W = rng.standard_normal((3, 7, 2))
    P = pairwise_principal_angles(W)
    assert P.shape == (3, 3, 2)
    np.testing.assert_allclose(P, P.transpose(1, 0, 2))
    np.testing.assert_allclose(P[0, 2], np.sort(scipy.linalg.subspace_angles(W[0], W[2])),
                               atol=1e-10)


# --------------------------------------------------------------------------- NW heads


def naive_nw(Xtr, y, Xte, W, logit):
    out = []
    for x in Xte:
        logits = np.array([logit(W.T @ x, W.T @ xi) for xi in Xtr])
        out.append(np.dot(scipy.special.softmax(logits), y))
    return np.array(out)


@pytest.mark.parametrize("kind", ["softmax", "gaussian"])
@pytest.mark.parametrize("batch_size", [None, 1, 3])
def test_nw_predict_matches_a_direct_loop(kind: str, batch_size: int | None) -> None:
    rng = np.random.default_rng(5)
    Xtr, Xte = rng.standard_normal((30, 5)), rng.standard_normal((7, 5))
    y = rng.standard_normal(30)
    W = rng.standard_normal((5, 2))
    tau = 0.7
    if kind == "softmax":
        kernel = NWKernel("softmax", tau=tau)
        ref = naive_nw(Xtr, y, Xte, W, lambda q, k: q @ k / tau)
    else:
        kernel = NWKernel("gaussian", bandwidth=0.9)
        ref = naive_nw(Xtr, y, Xte, W, lambda q, k: -np.sum((q - k) ** 2) / (2 * 0.81))
    np.testing.assert_allclose(nw_predict(Xtr, y, Xte, W, kernel, batch_size=batch_size), ref,
                               rtol=1e-12, atol=1e-12)


def test_nw_is_stable_for_huge_logits() -> None:
    rng = np.random.default_rng(6)
    Xtr, Xte = 100 * rng.standard_normal((20, 3)), 100 * rng.standard_normal((4, 3))
    y = rng.standard_normal(20)
    pred = nw_predict(Xtr, y, Xte, np.eye(3), NWKernel(tau=1e-3))  # logits ~ 1e7
    assert np.all(np.isfinite(pred))
    # such a sharp kernel picks the training point with the largest <x, x_i>
    np.testing.assert_allclose(pred, y[np.argmax(Xte @ Xtr.T, axis=1)], atol=1e-12)


def test_softmax_and_gaussian_coincide_for_keys_of_equal_norm() -> None:
    task = NWTask(d_model=6, n=40, m=9, seed=1)
    rng = np.random.default_rng(0)
    X, y = task.sample(rng, task.n)
    Xte, _ = task.test_set()
    W = np.eye(6)  # projected keys = x, all of norm sqrt(6)
    a = nw_weights(X, Xte, W, NWKernel("softmax", tau=1.3))
    b = nw_weights(X, Xte, W, NWKernel("gaussian", bandwidth=math.sqrt(1.3)))
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(a.sum(axis=1), 1.0, rtol=1e-12)
    # ... but not when the projected keys have different norms
    W2 = np.eye(6)[:, :2]
    a2 = nw_weights(X, Xte, W2, NWKernel("softmax", tau=1.3))
    b2 = nw_weights(X, Xte, W2, NWKernel("gaussian", bandwidth=math.sqrt(1.3)))
    assert np.max(np.abs(a2 - b2)) > 1e-3


def test_nw_predict_heads_equals_one_head_at_a_time() -> None:
    rng = np.random.default_rng(7)
    Xtr, Xte, y = rng.standard_normal((25, 6)), rng.standard_normal((5, 6)), rng.standard_normal(25)
    heads = rng.standard_normal((3, 6, 2))
    together = nw_predict_heads(Xtr, y, Xte, heads, NWKernel())
    for h in range(3):
        np.testing.assert_allclose(together[h], nw_predict(Xtr, y, Xte, heads[h], NWKernel()),
                                   rtol=1e-12)


def test_default_temperature_is_sqrt_dk() -> None:
    assert NWKernel().scale(9) == pytest.approx(3.0)
    assert NWKernel("gaussian").scale(16) == pytest.approx(4.0)
    assert NWKernel(tau_factor=0.5).scale(4) == pytest.approx(1.0)
    assert NWKernel("gaussian", bandwidth=2.0).scale(100) == pytest.approx(4.0)


# --------------------------------------------------------------------------- task


def test_task_inputs_on_sphere_and_target_variance() -> None:
    task = NWTask(d_model=40, n=10, m=4000, intrinsic_dim=3, seed=2)
    X, g = task.test_set()
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), math.sqrt(40), rtol=1e-12)
    U = task.directions()
    np.testing.assert_allclose(U @ U.T, np.eye(3), atol=1e-12)
    # u^T x is close to N(0, 1) for large d_model, so Var g ~ 1 - exp(-2 omega^2) = 0.865
    assert abs(np.mean(g)) < 0.1 and 0.75 < np.var(g) < 0.95
    # seeded: same seed, same test set; another seed, another target
    np.testing.assert_array_equal(task.test_set()[0], NWTask(d_model=40, m=4000, intrinsic_dim=3,
                                                             seed=2).test_set()[0])
    assert not np.allclose(NWTask(d_model=40, intrinsic_dim=3, seed=3).directions(), U)


@pytest.mark.parametrize("kwargs, needle", [
    ({"d_model": 0}, "d_model must be an integer >= 1"),
    ({"n": 0}, "n must be an integer >= 1"),
    ({"sigma": -0.1}, "sigma must be >= 0"),
    ({"sigma": float("nan")}, "sigma must be finite"),
    ({"intrinsic_dim": 5, "d_model": 4}, "intrinsic_dim must lie in [1, d_model] = [1, 4]"),
    ({"omega": 0}, "omega must be > 0"),
    ({"n_val": -1}, "n_val must be an integer >= 0"),
    ({"seed": -3}, "seed must be an integer >= 0"),
    ({"m": 2.5}, "m must be an integer >= 1"),
])
def test_task_validation(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError) as exc:
        NWTask(**kwargs)
    assert needle in str(exc.value)


# --------------------------------------------------------------------------- decomposition


@pytest.mark.parametrize("weights", [None, [0.5, 0.3, 0.2], [1.4, -0.1, -0.3]])
def test_decomposition_sums_to_measured_mse_on_arbitrary_predictions(weights) -> None:
    rng = np.random.default_rng(8)
    F = rng.standard_normal((13, 3, 21)) + rng.standard_normal((1, 3, 21))
    g = rng.standard_normal(21)
    dec = decompose_ensemble_mse(F, g, weights)
    w = np.full(3, 1 / 3) if weights is None else np.array(weights)
    measured = np.mean((np.einsum("h,rht->rt", w, F) - g) ** 2)
    assert dec.mse == pytest.approx(measured, rel=1e-13)
    assert dec.bias2 + dec.variance + dec.covariance == pytest.approx(measured, rel=1e-12)
    # per-head quantities against their definitions (population moments over draws)
    np.testing.assert_allclose(dec.head_mse, np.mean((F - g) ** 2, axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(dec.head_variance, np.mean(F.var(axis=0), axis=1), rtol=1e-12)
    # ambiguity: weighted heads' bias^2 minus the ensemble's = spread of the mean predictions
    m = F.mean(axis=0)
    spread = np.mean(w @ (m - w @ m) ** 2)
    assert dec.ambiguity == pytest.approx(spread, rel=1e-10, abs=1e-14)


def test_decomposition_sums_to_measured_mse_on_simulated_heads() -> None:
    task = NWTask(d_model=10, n=80, m=40, sigma=0.7, n_val=0, seed=4)
    sim = simulate_heads(task, rotation_heads(10, 4, 2, 0.4), draws=12, seed=1)
    dec = decompose_ensemble_mse(sim.predictions, sim.target)
    assert dec.total == pytest.approx(dec.mse, rel=1e-12)
    assert dec.variance > 0 and dec.covariance > 0 and dec.bias2 > 0


def batch_covariance_terms(F: np.ndarray, g: np.ndarray, batches: int) -> np.ndarray:
    """The cross-head covariance term on disjoint blocks of draws (independent estimates)."""
    return np.array([decompose_ensemble_mse(block, g).covariance
                     for block in np.array_split(F, batches, axis=0)])


def test_covariance_term_vanishes_for_independent_heads_and_not_for_shared_data() -> None:
    # With independent training samples per head, f_h and f_h' are independent, so
    # the ddof=0 sample covariance over a block of draws has expectation exactly 0;
    # the standard error comes from the spread of 20 independent blocks.
    task = NWTask(d_model=8, n=60, m=30, sigma=1.0, n_val=0, seed=5)
    heads = rotation_heads(8, 3, 2, 0.3)  # heavily overlapping heads (HDI ~ 0.1)
    ind = simulate_heads(task, heads, draws=200, independent_heads=True, seed=2)
    c = batch_covariance_terms(ind.predictions, ind.target, 20)
    se = c.std(ddof=1) / math.sqrt(len(c))
    assert abs(c.mean()) < 4 * se, (c.mean(), se)
    # Shared data: same points and label noise for every head -> clearly positive.
    shared = simulate_heads(task, heads, draws=200, seed=2)
    c_sh = batch_covariance_terms(shared.predictions, shared.target, 20)
    se_sh = c_sh.std(ddof=1) / math.sqrt(len(c_sh))
    assert c_sh.mean() > 6 * se_sh, (c_sh.mean(), se_sh)
    assert c_sh.mean() > 5 * max(abs(c.mean()), se)


def test_decomposition_validation() -> None:
    with pytest.raises(ValueError, match="weights must sum to 1"):
        decompose_ensemble_mse(np.zeros((3, 2, 4)), np.zeros(4), [0.5, 0.6])
    with pytest.raises(ValueError, match="R >= 2"):
        decompose_ensemble_mse(np.zeros((1, 2, 4)), np.zeros(4))
    with pytest.raises(ValueError, match=r"target must have shape \(m,\) = \(4,\)"):
        decompose_ensemble_mse(np.zeros((3, 2, 4)), np.zeros(5))


def test_simulation_is_seeded() -> None:
    task = NWTask(d_model=6, n=30, m=10, n_val=5, seed=1)
    heads = rotation_heads(6, 2, 2, 0.5)
    a = simulate_heads(task, heads, draws=3, seed=7)
    b = simulate_heads(task, heads, draws=3, seed=7)
    c = simulate_heads(task, heads, draws=3, seed=8)
    np.testing.assert_array_equal(a.predictions, b.predictions)
    np.testing.assert_array_equal(a.validation_mse, b.validation_mse)
    assert not np.allclose(a.predictions, c.predictions)


def test_rotation_sweep_rows() -> None:
    task = NWTask(d_model=9, n=50, m=20, n_val=0, seed=0)
    pts = rotation_sweep(task, 2, 3, [0.0, 0.5, 1.0], draws=4, target_seeds=[0, 1])
    assert [p.hdi for p in pts] == pytest.approx([0.0, 0.75, 1.0], abs=1e-12)
    for p in pts:
        assert p.decomposition.total == pytest.approx(p.decomposition.mse, rel=1e-12)
        assert p.decomposition.targets == 2
    # identical heads: the ensemble is a single head, covariance = variance (H = 2, w = 1/2)
    d0 = pts[0].decomposition
    assert d0.covariance == pytest.approx(d0.variance, rel=1e-10)
    assert d0.mse == pytest.approx(d0.head_mse[0], rel=1e-10)
    with pytest.raises(ValueError, match=r"d_model must be >= \(H \+ 1\) d_k = 12"):
        rotation_heads(11, 3, 3, 0.5)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 1\]"):
        rotation_heads(12, 3, 3, 1.5)


# --------------------------------------------------------------------------- weights


@pytest.mark.parametrize("H", [1, 2, 3, 7, 12])
def test_weights_sum_to_one_and_are_ordered(H: int) -> None:
    for w in (uniform_weights(H), geometric_weights(H, 0.6), fibonacci_weights(H)):
        assert w.shape == (H,)
        assert w.sum() == pytest.approx(1.0, abs=1e-14)
        assert np.all(w > 0) and np.all(np.diff(w) <= 1e-15)
    np.testing.assert_allclose(uniform_weights(H), 1 / H)
    g = geometric_weights(H, 0.6)
    np.testing.assert_allclose(g[1:] / g[:-1], 0.6, rtol=1e-12)
    f = fibonacci_weights(H)
    if H >= 3:  # w_k = w_{k+1} + w_{k+2} (the recurrence, read from the best head down)
        np.testing.assert_allclose(f[:-2], f[1:-1] + f[2:], rtol=1e-12)
        assert f[-1] == pytest.approx(f[-2]) and f[0] > f[1]


def test_fibonacci_weights_small_case() -> None:
    # F_5..F_1 = 5, 3, 2, 1, 1 over a total of 12
    np.testing.assert_allclose(fibonacci_weights(5), np.array([5, 3, 2, 1, 1]) / 12)


def test_weight_validation() -> None:
    for r in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(ValueError, match=r"ratio must lie in \(0, 1\)"):
            geometric_weights(4, r)
    with pytest.raises(ValueError, match="scheme must be one of uniform, geometric, fibonacci"):
        head_weights("harmonic", 3)
    with pytest.raises(ValueError, match="H must be an integer >= 1"):
        uniform_weights(0)


def test_rank_heads_is_a_stable_argsort() -> None:
    v = np.array([[0.3, 0.1, 0.2], [1.0, 1.0, 0.5]])
    np.testing.assert_array_equal(rank_heads(v), [[1, 2, 0], [2, 0, 1]])


def test_weighting_ranks_the_informative_head_first() -> None:
    # Head 0 contains the target direction u; heads 1-3 are orthogonal to it and
    # can only predict the mean.  Ranking on validation data must find head 0.
    task = NWTask(d_model=10, n=150, m=40, sigma=0.3, intrinsic_dim=1, omega=1.5,
                  n_val=100, seed=3)
    u = task.directions()[0]
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(np.column_stack([u, rng.standard_normal((10, 7))]))[0]
    heads = np.stack([basis[:, 2 * h:2 * h + 2] for h in range(4)])
    res = compare_weightings(task, heads, draws=10, seed=0)
    assert res.rank_counts[0][0] == 10
    assert sum(res.rank_counts[h][0] for h in range(4)) == 10
    assert res.head_test_mse[0] < min(res.head_test_mse[1:])
    # putting more weight on the best head helps here
    s = res.schemes
    assert s["geometric"].mse < s["uniform"].mse and s["fibonacci"].mse < s["uniform"].mse
    for d in s.values():
        assert d.total == pytest.approx(d.mse, rel=1e-12)
    with pytest.raises(ValueError, match="n_val must be >= 1"):
        compare_weightings(NWTask(d_model=10, n_val=0), heads, draws=3)


# --------------------------------------------------------------------------- allocation


def test_divisors() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]
    assert divisors(13) == [1, 13]
    assert divisors(36) == [d for d in range(1, 37) if 36 % d == 0]


def test_budget_heads_are_orthogonal_with_the_right_width() -> None:
    for H in divisors(12):
        W = budget_heads(16, 12, H)
        assert W.shape == (H, 16, 12 // H)
        if H > 1:
            assert head_diversity_index(W) == pytest.approx(1.0, abs=1e-14)
    with pytest.raises(ValueError, match="H must divide D = 12"):
        budget_heads(16, 12, 5)
    with pytest.raises(ValueError, match=r"D must lie in \[1, d_model\] = \[1, 8\]"):
        budget_heads(8, 12, 2)


def test_law_trend() -> None:
    # with d = 2 the exponent is 1/3: the ratio between n = e^8 and n = e is 2
    assert law_dk_star(math.exp(8), 2) / law_dk_star(math.e, 2) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="n must be > 1"):
        law_dk_star(1.0, 2)


def test_allocation_sweep_reports_the_argmin() -> None:
    task = NWTask(d_model=6, n=60, m=20, n_val=0, seed=0)
    res = allocation_sweep(task, 6, draws=4, target_seeds=[0, 1])
    assert res.heads == (1, 2, 3, 6)
    mses = [r.mse for r in res.rows]
    assert res.argmin_H == res.heads[int(np.argmin(mses))]
    assert res.argmin_H in res.tied
    assert res.paired_stderr[res.heads.index(res.argmin_H)] == 0.0
    for r in res.rows:
        assert r.total == pytest.approx(r.mse, rel=1e-12)
    with pytest.raises(ValueError, match="heads must be divisors of D = 6"):
        allocation_sweep(task, 6, draws=2, heads=[4])


# --------------------------------------------------------------------------- input validation


def test_hdi_input_validation() -> None:
    rng = np.random.default_rng(9)
    with pytest.raises(ValueError, match="H >= 2"):
        head_diversity_index(rng.standard_normal((1, 5, 2)))
    with pytest.raises(ValueError, match=r"heads \(H\) or d_k is required"):
        head_diversity_index(rng.standard_normal((5, 4)), layout="columns")
    with pytest.raises(ValueError, match=r"heads must divide H d_k = 6 \(the columns of W\)"):
        head_diversity_index(rng.standard_normal((5, 6)), heads=4, layout="columns")
    W = rng.standard_normal((3, 5, 2))
    W[1, :, 1] = 2 * W[1, :, 0]
    with pytest.raises(ValueError, match="W head 1 has rank 1 < 2 columns"):
        head_diversity_index(W)
    head_diversity_index(W, normalise="none")  # the literal formula does not need full rank
    with pytest.raises(ValueError, match="d_k = 6 exceeds d_model = 5"):
        head_diversity_index(rng.standard_normal((2, 5, 6)))
    with pytest.raises(ValueError, match="W must contain only finite numbers"):
        head_diversity_index(np.full((2, 3, 1), np.nan))
    with pytest.raises(ValueError, match="normalise must be one of orthonormal, none"):
        head_diversity_index(rng.standard_normal((2, 5, 2)), normalise="frobenius")
    with pytest.raises(ValueError, match="heads must equal W.shape"):
        head_diversity_index(rng.standard_normal((2, 5, 2)), heads=3)


def test_kernel_and_prediction_validation() -> None:
    with pytest.raises(ValueError, match="kind must be one of softmax, gaussian"):
        NWKernel("laplace")
    with pytest.raises(ValueError, match=r"tau must lie in \[1e-100, 1e\+100\], got 0.0"):
        NWKernel(tau=0.0)
    # a denormal temperature made the logits inf - inf = nan
    with pytest.raises(ValueError, match=r"tau must lie in \[1e-100, 1e\+100\]"):
        NWKernel(tau=5e-324)
    with pytest.raises(ValueError, match=r"bandwidth must lie in \[1e-50, 1e\+50\]"):
        NWKernel("gaussian", bandwidth=1e-60)
    with pytest.raises(ValueError, match="tau_factor must be 1 when an explicit tau"):
        NWKernel(tau=1.0, tau_factor=0.5)
    with pytest.raises(ValueError, match="y_train must be a 1-d array of length n = 4"):
        nw_predict(np.zeros((4, 2)), np.zeros(3), np.zeros((1, 2)), np.eye(2))
    with pytest.raises(ValueError, match="W_h must be a 2-d array"):
        nw_predict(np.zeros((4, 2)), np.zeros(4), np.zeros((1, 2)), np.eye(3))
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        nw_predict(np.zeros((4, 2)), np.zeros(4), np.zeros((1, 2)), np.eye(2), batch_size=0)
    with pytest.raises(ValueError, match="heads must be a 3-d array"):
        simulate_heads(NWTask(d_model=4), np.zeros((2, 5, 1)), draws=2)
    with pytest.raises(ValueError, match="draws must be an integer >= 1"):
        simulate_heads(NWTask(d_model=4), np.zeros((2, 4, 1)), draws=0)


def test_sweeps_in_a_process_pool_match_the_in_process_run() -> None:
    """The (t, target) / (H, target) / target cells are independent tasks of the runner:
    a process pool gives the in-process decompositions bit for bit."""
    task = NWTask(d_model=9, n=40, m=15, n_val=10, seed=0)
    kw = dict(draws=3, target_seeds=[0, 1])
    here = rotation_sweep(task, 2, 3, [0.0, 1.0], **kw)
    pool = rotation_sweep(task, 2, 3, [0.0, 1.0], workers=2, **kw)
    assert [p.to_dict() for p in pool] == [p.to_dict() for p in here]
    heads = random_heads(9, 3, 2, seed=1)
    w_here = compare_weightings(task, heads, **kw)
    w_pool = compare_weightings(task, heads, workers=2, **kw)
    assert w_pool.to_dict() == w_here.to_dict()


def test_literal_hdi_of_gaussian_heads_has_expectation_one_minus_d_model() -> None:
    """docs/heads.md: for independent N(0, 1) heads E||W_h^T W_h'||_F^2 = d_k^2 d_model,
    so E HDI_lit = 1 - d_model (the docs once said "about -2" for (8, 2) heads: -7)."""
    rng = np.random.default_rng(11)
    d_model, d_k = 8, 2
    v = np.array([head_diversity_index(rng.standard_normal((2, d_model, d_k)), normalise="none")
                  for _ in range(4000)])
    se = v.std(ddof=1) / np.sqrt(v.size)
    assert abs(v.mean() - (1 - d_model)) < 4 * se, (v.mean(), se)


def test_rotation_sweep_reports_paired_errors() -> None:
    """The MSE-vs-HDI error bars are paired over the shared draws: zero at the first t,
    and below the unpaired error of the difference (common random numbers)."""
    task = NWTask(d_model=6, n=60, m=40, sigma=1.0, intrinsic_dim=2, n_val=0, seed=0)
    pts = rotation_sweep(task, 2, 2, [0.0, 0.5, 1.0], draws=12, seed=0)
    assert pts[0].paired_stderr == 0.0
    for p in pts[1:]:
        unpaired = np.hypot(p.decomposition.mse_stderr, pts[0].decomposition.mse_stderr)
        assert 0.0 < p.paired_stderr < unpaired
