"""A user target (tests/user_target.py: one module, one registry line) through the state
evolution, direct ERM and Adam, and a user spectrum through every CLI subcommand that
takes a target (issue 31)."""

import json
import math

import numpy as np
import pytest

from amp_attention.adam import AdamOptions, train_layer
from amp_attention.cli import main
from amp_attention.erm import direct_erm
from amp_attention.solvers.state_evolution import solve_state_evolution
from amp_attention.spec import CustomTarget, Learner, Problem, Task, target_from_dict
from user_target import UniformTarget


def _problem(learner=None):
    return Problem(Task("linear", L=1, noise=0.1), UniformTarget(0.0, 2.0),
                   learner or Learner(1.0, 0.05), alpha=0.5)


def test_user_target_round_trips_through_its_json_form():
    t = UniformTarget(0.5, 1.5)
    assert target_from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert _problem().to_dict()["target"] == {"kind": "uniform", "a": 0.0, "b": 2.0}


@pytest.mark.parametrize("parameterisation", ["factorised",
                                              pytest.param("symmetric", marks=pytest.mark.slow)])
def test_user_target_se_agrees_with_erm_and_adam(parameterisation):
    """SE against ERM over 4 seeds at d = 48 and Adam on one: the matrix MSE within the
    seed spread plus a finite-size allowance of 3 x (the d = 48 to 64 change seen for the
    Wishart points of tests/data/linear_finite_size.json, |slope|/d <= 0.9/48 relative)."""
    p = _problem(Learner(1.0, 0.05, parameterisation))
    se = solve_state_evolution(p)
    assert se.converged
    runs = [direct_erm(p, 48, s, target_spectrum="quantile", keep_matrix=False) for s in range(4)]
    assert all(r.converged for r in runs)
    mse = np.array([r.matrix_mse for r in runs])
    allowance = 3 * mse.std(ddof=1) / 2 + 3 * 0.9 / 48 * se.matrix_mse
    assert abs(mse.mean() - se.matrix_mse) <= allowance, (mse.mean(), se.matrix_mse, allowance)
    layer = train_layer(p, 48, 0, options=AdamOptions(lr=0.02), target_spectrum="quantile",
                        n_test=2000)
    assert layer.matrix_mse == pytest.approx(runs[0].matrix_mse, rel=1e-3)


def test_custom_density_from_a_callable():
    t = CustomTarget.from_density(lambda x: math.sqrt(max(x * (2.0 - x), 0.0)), 0.0, 2.0)
    assert t.Q0 == pytest.approx(1.25, rel=1e-3)  # semicircle on [0, 2]: mean 1, variance 1/4
    with pytest.raises(TypeError, match="density must be a callable"):
        CustomTarget.from_density([1, 2], 0.0, 1.0)


@pytest.mark.parametrize("argv", [
    ["se", "--alpha", "0.4", "--lam", "0.05"],
    ["erm", "--alpha", "0.4", "--lam", "0.05", "--d", "12", "--seeds", "2"],
    ["amp", "--alpha", "0.4", "--lam", "0.05", "--d", "12", "--damping", "0.5",
     "--iterations", "2000"],
    ["spectrum", "--alpha", "0.4", "--lam", "0.05", "--out", "{tmp}/sp"],
    ["thresholds"],
    ["phase-diagram", "--alpha-range", "0.3", "0.5", "2", "--lam-range", "0.05", "0.1", "2",
     "--out", "{tmp}/pd"],
    ["compare", "--alpha-range", "0.2", "0.5", "2", "--out", "{tmp}/cmp"],
    ["validate", "--alphas", "0.4", "--d", "12", "--seeds", "1", "--lam", "0.05",
     "--out", "{tmp}/val"],
], ids=lambda a: a[0])
def test_every_subcommand_takes_a_custom_target_file(argv, tmp_path, capsys):
    spectrum = tmp_path / "spectrum.txt"
    spectrum.write_text("# eigenvalues of S0\n0\n0\n0.5\n1, 1.5\n2\n".replace(", ", "\n"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = main(argv + ["--target", "custom", "--target-file", str(spectrum)])
    out = capsys.readouterr()
    assert code in (0, 3), out.err  # 3: a solver's honest "not converged"
    recorded = out.out + "".join(p.read_text() for p in tmp_path.rglob("*")
                                 if p.suffix in (".json", ".csv"))
    assert "custom" in recorded and "0.5" in recorded  # the parameters record the user spectrum


def test_custom_target_file_errors_name_the_flag(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 3\n")
    assert main(["se", "--target", "custom", "--target-file", str(bad)]) == 2
    assert "--target-file" in capsys.readouterr().err
    assert main(["se", "--target", "custom"]) == 2
    assert "required with --target custom" in capsys.readouterr().err
    assert main(["se", "--target-file", str(bad)]) == 2
    assert "applies only to --target custom" in capsys.readouterr().err
    neg = tmp_path / "neg.txt"
    neg.write_text("-1\n1\n")
    assert main(["se", "--target", "custom", "--target-file", str(neg)]) == 2
    assert ">= 0" in capsys.readouterr().err
