"""Scaling laws and sequential recovery for power-law targets (THEORY 8, issue 7)."""

import json

import numpy as np
import pytest

from amp_attention.cli import build_parser, main
from amp_attention.spec import Learner, PowerLawTarget, Problem, Task, WishartTarget
from amp_attention.experiments import scaling
from amp_attention.experiments.scaling import ScalingPlan, run_scaling
from amp_attention.solvers.scaling import (
    fit_power_law,
    noise_limited_exponent,
    recovered_mode_exponent,
    recovery_alphas,
)

PROBLEM = Problem(Task("linear", L=1, noise=0.5), PowerLawTarget(1.0, d=60), Learner(1.0, 0.05),
                  alpha=1.0)


def test_power_law_fit_recovers_a_known_exponent():
    n = np.geomspace(1e3, 1e6, 25)
    y = 0.02 + 3.0 * n ** -0.37
    fit = fit_power_law(n, y, e0=0.02)
    assert fit.exponent == pytest.approx(0.37, abs=1e-10)
    assert fit.amplitude == pytest.approx(3.0, rel=1e-9)
    assert fit.ci_high - fit.ci_low < 1e-8
    free = fit_power_law(n, y, e0=None)
    assert free.e0_fitted and free.e0 == pytest.approx(0.02, rel=1e-4)
    assert free.exponent == pytest.approx(0.37, rel=1e-4)
    # noise widens the interval, which still covers the truth
    rng = np.random.default_rng(0)
    noisy = fit_power_law(n, (y - 0.02) * np.exp(0.05 * rng.standard_normal(n.size)), e0=0.0)
    assert noisy.ci_low < 0.37 < noisy.ci_high and noisy.ci_high - noisy.ci_low > 1e-3
    with pytest.raises(ValueError, match="exceed e0"):
        fit_power_law(n, y, e0=1.0)


def test_recovered_mode_exponent_and_noise_limited_value():
    n = np.geomspace(1e3, 1e5, 30)
    k = np.floor(0.5 * n ** 0.5)
    out = recovered_mode_exponent(n, k, gamma=1.0)
    assert out.a == pytest.approx(0.5, abs=0.01) and out.a_ci[0] < out.a < out.a_ci[1]
    assert out.exponent == pytest.approx(out.a * 1.0)
    assert noise_limited_exponent(1.0) == 0.5 and noise_limited_exponent(1.5) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="gamma > 1/2"):
        noise_limited_exponent(0.5)
    with pytest.raises(ValueError, match="k\\*"):
        recovered_mode_exponent(n[:5], np.zeros(5), 1.0)


def test_plan_validation_and_lam_schedule():
    plan = ScalingPlan(PROBLEM, (0.5, 1.0, 2.0), lam_exponent=0.5)
    assert plan.lam_at(2.0) == pytest.approx(0.05 * 4 ** -0.5)
    assert plan.problem_at(2.0).learner.lam == pytest.approx(0.025)
    with pytest.raises(ValueError, match="PowerLawTarget"):
        ScalingPlan(Problem(PROBLEM.task, WishartTarget(0.5), PROBLEM.learner, 1.0), (1, 2, 3))
    with pytest.raises(ValueError, match="increasing"):
        ScalingPlan(PROBLEM, (1.0, 0.5, 2.0))
    with pytest.raises(ValueError, match="lam_exponent"):
        ScalingPlan(PROBLEM, (0.5, 1.0, 2.0), lam_exponent=3.0)


def test_scaling_curve_resumes_and_its_decomposition_adds_up(tmp_path, monkeypatch):
    plan = ScalingPlan(PROBLEM, tuple(np.geomspace(0.5, 8.0, 5)))
    rows = run_scaling(plan, tmp_path)
    assert all(r["converged"] for r in rows)
    ks = [r["k_star"] for r in rows]
    assert ks == sorted(ks) and ks[-1] > ks[0]            # modes are recovered one after another
    for r in rows:
        dec = r["decomposition"]
        assert abs(dec["total"] - r["matrix_mse"]) <= 1e-10 * r["matrix_mse"]
    errs = [r["test_error"] for r in rows]
    assert errs == sorted(errs, reverse=True)
    rec = recovery_alphas(rows)
    assert rec[1] == rows[0]["alpha"] and all(rec[k] <= rec[k + 1] for k in range(1, max(rec)))

    def boom(*a, **k):
        raise AssertionError("a finished point was recomputed")

    monkeypatch.setattr(scaling, "solve_point", boom)
    again = run_scaling(plan, tmp_path)
    assert [r["test_error"] for r in again] == errs


def test_scaling_cli_writes_outputs_and_leaves_other_defaults_alone(tmp_path, capsys):
    out = tmp_path / "sc"
    rc = main(["scaling", "--gamma", "1.5", "--target-d", "50", "--noise", "0.5", "--lam", "0.05",
               "--alpha-range", "0.5", "8", "5", "--out", str(out)])
    assert rc == 0
    rec = json.loads((out / "scaling.json").read_text())
    assert rec["params"]["target"]["gamma"] == 1.5 and len(rec["rows"]) == 5
    assert rec["fits"]["noise_limited_exponent"] == pytest.approx(2 / 3)
    assert (out / "scaling.png").stat().st_size > 0 and (out / "scaling.csv").exists()
    printed = capsys.readouterr().out
    assert "fitted exponent" in printed and "window: n = 0.5 d^2 to 8 d^2" in printed
    # E_under is fitted on its own, and its fit reproduces the curve it was fitted on
    fu = rec["fits"]["E_under"]
    under = np.array([r["decomposition"]["under"] for r in rec["rows"]])
    n = np.array([r["n"] for r in rec["rows"]])
    pred = fu["amplitude"] * n ** (-fu["exponent"])
    assert np.max(np.abs(np.log(pred / under))) < 10 * fu["rms_log_residual"] + 1e-9
    # the scaling command must not change the problem flags of the other commands
    args = build_parser().parse_args(["phase-diagram"])
    assert args.target == "wishart"
    assert main(["scaling", "--lam-exponent", "5", "--out", str(out)]) == 2
    assert "--lam-exponent: lam_exponent must lie in [0, 2]" in capsys.readouterr().err


def test_scaling_figure_draws_signed_terms_not_a_stack(tmp_path, monkeypatch):
    """A negative E_over must be visible: the decomposition panel has one line per term
    (no stacked areas), a zero line, and labelled axes (issue 16, item 2)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PolyCollection

    from amp_attention import plotting

    captured = {}
    real_save = plotting.save_figure

    def keep(fig, path, title=None, **kw):
        captured["fig"] = fig
        return real_save(fig, path, title, **kw)

    n = [1e4, 1e5, 1e6]
    rows = [{"converged": True, "n": v, "test_error": 0.1 / (1 + i), "matrix_mse": 0.05 / (1 + i),
             "k_star": 3 + i,
             "decomposition": {"under": 0.06 / (1 + i), "over": 0.01 - 0.01 * i,
                               "approx": 0.001, "mismatch": 0.001 * (1 - i)}}
            for i, v in enumerate(n)]
    monkeypatch.setattr(plotting, "save_figure", keep)
    plotting.plot_scaling(rows, {"e_test": None, "k_star": None}, tmp_path / "s.png")
    ax = captured["fig"].axes[1]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    over = [ln for ln in ax.get_lines() if "over" in ln.get_label()]
    assert len(over) == 1 and min(over[0].get_ydata()) < 0
    assert any(list(ln.get_ydata()) == [0.0, 0.0] for ln in ax.get_lines())   # the zero line
    assert ax.get_ylabel() and captured["fig"].axes[2].get_xlabel()
    assert (tmp_path / "s.png").stat().st_size > 0
