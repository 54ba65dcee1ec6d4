"""float32 tokens (issue 18): the products over the data in float32, everything d x d and
the outputs in float64 (amp_attention.operators); ERM, GAMP and Adam accept
dtype="float32" and agree with float64 far inside the seed-to-seed error."""

import numpy as np
import pytest

from amp_attention.adam import AdamOptions, train_layer
from amp_attention.cli import main
from amp_attention.erm import FLOAT32_TOL, direct_erm
from amp_attention.gamp import GAMPOptions, gamp_on_problem
from amp_attention.operators import measure, measure_adjoint, preactivations, preactivations_adjoint
from amp_attention.spec import Learner, Problem, Task, WishartTarget

LINEAR = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)


def test_operators_in_float32_match_float64_and_return_float64():
    rng = np.random.default_rng(0)
    n, L, d = 300, 3, 40
    X = rng.standard_normal((n, L, d))
    S = rng.standard_normal((d, d))
    S = (S + S.T) / 2
    r = rng.standard_normal((n, L * (L + 1) // 2))
    R = rng.standard_normal((n, L, L))
    X32 = X.astype(np.float32)
    X = X32.astype(np.float64)  # the same tokens: only the arithmetic differs
    for f32, f64 in ((measure(X32, S), measure(X, S)),
                     (measure_adjoint(X32, r), measure_adjoint(X, r)),
                     (preactivations(X32, S), preactivations(X, S)),
                     (preactivations_adjoint(X32, R), preactivations_adjoint(X, R))):
        assert f32.dtype == np.float64
        scale = np.max(np.abs(f64))
        assert np.max(np.abs(f32 - f64)) < 1e-5 * scale
    with pytest.raises(ValueError, match="float32 array"):
        measure(X32, S, work=np.empty((n, L, d)))


def test_direct_erm_in_float32_agrees_with_float64_inside_the_seed_error():
    runs = {dt: [direct_erm(LINEAR, 32, s, dtype=dt, keep_matrix=False) for s in (0, 1)]
            for dt in ("float64", "float32")}
    assert all(r.converged for rs in runs.values() for r in rs)
    assert all(r.residual <= FLOAT32_TOL for r in runs["float32"])
    for k in ("train_error", "test_error", "matrix_mse"):
        a = np.array([getattr(r, k) for r in runs["float64"]])
        b = np.array([getattr(r, k) for r in runs["float32"]])
        seed_spread = abs(a[0] - a[1])
        assert np.max(np.abs(a - b)) < 0.02 * seed_spread + 1e-9, k  # measured: < 1e-3 of it
    with pytest.raises(ValueError, match="dtype must be one of float64, float32"):
        direct_erm(LINEAR, 16, 0, dtype="float16")


def test_gamp_and_adam_in_float32_follow_float64():
    g = {dt: gamp_on_problem(LINEAR, 32, 0, options=GAMPOptions(max_iter=15), n_test=200, dtype=dt)
         for dt in ("float64", "float32")}
    m64 = np.array([h.m for h in g["float64"].result.history])
    m32 = np.array([h.m for h in g["float32"].result.history])
    assert m64.size == m32.size and np.max(np.abs(m64 - m32)) < 1e-4 * np.max(np.abs(m64))
    opts = AdamOptions(max_iter=300, lr=0.01)
    a = {dt: train_layer(LINEAR, 16, 0, options=opts, n_test=2000, dtype=dt)
         for dt in ("float64", "float32")}
    for k in ("train_error", "test_error", "matrix_mse"):
        x, y = getattr(a["float64"], k), getattr(a["float32"], k)
        assert abs(x - y) < 1e-4 * abs(x), k


def test_cli_dtype_flag(capsys):
    assert main(["erm", "--d", "16", "--n-seeds", "1", "--dtype", "float32", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"dtype": "float32"' in out and '"tol": 0.0001' in out
    assert main(["erm", "--dtype", "float16"]) == 2
    assert main(["amp", "--d", "24", "--iterations", "5", "--n-test", "200", "--dtype", "float32",
                 "--json"]) in (0, 3)
    assert '"dtype": "float32"' in capsys.readouterr().out


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_validation_and_spectrum_runs_record_their_dtype_and_are_not_mixed(tmp_path):
    import dataclasses

    from amp_attention.experiments.spectrum_check import SpectrumPlan, run_spectrum_check
    from amp_attention.experiments.validate import ValidationPlan, run_validation

    plan = ValidationPlan(LINEAR, alphas=(0.5,), ds=(12,), seeds=1, adam=AdamOptions(lr=0.03),
                          theory_points=3, dtype="float32")
    first = run_validation(plan, tmp_path / "v")
    assert first["trained"] == 1 and first["params"]["dtype"] == "float32"
    assert run_validation(plan, tmp_path / "v")["trained"] == 0  # resumed
    # a float64 plan on the same directory redoes the float32 run instead of reusing it
    assert run_validation(dataclasses.replace(plan, dtype="float64"), tmp_path / "v")["trained"] == 1
    with pytest.raises(ValueError, match="dtype must be one of"):
        dataclasses.replace(plan, dtype="half")
    sp = SpectrumPlan(LINEAR, ds=(12,), seeds=1, dtype="float32")
    out = run_spectrum_check(sp, tmp_path / "s")
    assert out["trained"] == 1 and out["params"]["dtype"] == "float32"
    assert run_spectrum_check(dataclasses.replace(sp, dtype="float64"), tmp_path / "s")["trained"] == 1
