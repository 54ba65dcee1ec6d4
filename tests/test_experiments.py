"""The experiments layer gives, from Python, the numbers the CLI prints (issue 15)."""

import dataclasses
import json

import pytest

from amp_attention.cli import main
from amp_attention.experiments.gamp_vs_se import compare_gamp_with_se
from amp_attention.experiments.quickstart import QuickstartConfig, run_quickstart
from amp_attention.gamp import GAMPOptions
from amp_attention.spec import Learner, PowerLawTarget, Problem, Task, WishartTarget


def _cli_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_gamp_comparison_is_what_amp_prints(capsys):
    cli = _cli_json(capsys, "amp", "--d", "20", "--L", "2", "--noise", "0.5", "--se-iterates",
                    "4", "--n-test", "500", "--json")
    problem = Problem(Task("linear", L=2, noise=0.5), WishartTarget(0.5), Learner(), alpha=0.5)
    cmp = compare_gamp_with_se(problem, 20, 0, options=GAMPOptions(), se_iterates_max=4,
                               n_test=500)
    assert cmp.gamp.iterations == cli["gamp"]["iterations"] and cmp.n == cli["params"]["n"]
    assert dataclasses.asdict(cmp.end) == pytest.approx(cli["gamp"]["final"], rel=1e-12)
    assert [list(x) for x in cmp.se_trajectory] == [[r["m"], r["q"], r["V"]]
                                                     for r in cli["se_iterates"]]
    assert cmp.se.matrix_mse == cli["se"]["matrix_mse"]


def test_quickstart_from_python_is_what_the_cli_writes(capsys, tmp_path):
    assert main(["quickstart", "--no-erm", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    rows = json.loads((tmp_path / "quickstart.json").read_text())["se"]
    res = run_quickstart(QuickstartConfig(), erm=False, progress=False)
    assert res.erm == () and res.not_converged == ([], [])
    assert [r["alpha"] for r in rows] == list(res.config.alphas)
    assert [r["test_error"] for r in rows] == [r.test_error for r in res.se]


def test_threshold_grid_is_what_thresholds_prints(capsys):
    from amp_attention.experiments.thresholds import threshold_grid, vary

    # a kappa0 grid: distinct thresholds at every point, none rank-capped (a rank-capped
    # alpha_PR minimises a quadrature over tau: ~25 s a point, tests/validation_thresholds.py)
    cli = _cli_json(capsys, "thresholds", "--noise", "0.5", "--kappa0-grid", "0.3", "0.7", "--json")
    problem = Problem(Task("linear", noise=0.5), WishartTarget(0.5), Learner(), alpha=0.5)
    grid = threshold_grid(problem, "kappa0", [0.3, 0.7], progress=False)
    assert [v for v, _ in grid] == [r["kappa0"] for r in cli["rows"]]
    assert grid[0][1].perfect_recovery.alpha < grid[1][1].perfect_recovery.alpha
    for (_, point), row in zip(grid, cli["rows"]):
        assert point.interpolation.alpha == row["alpha_interp"]
        assert point.perfect_recovery.alpha == row["alpha_PR"]
    with pytest.raises(ValueError, match="kappa0"):
        vary(Problem(Task(), PowerLawTarget(gamma=1.5, d=50), Learner(), alpha=0.5), "kappa0", 0.3)


def test_threshold_grid_and_scaling_chains_in_processes_match_in_process(tmp_path):
    """The runner's process pool gives the in-process results: threshold points bit for bit;
    scaling points split into two warm-started chains within the SE tolerance."""
    from amp_attention.experiments.thresholds import threshold_grid
    from amp_attention.experiments.scaling import ScalingPlan, run_scaling

    problem = Problem(Task("linear", noise=0.5), WishartTarget(0.5), Learner(), alpha=0.5)
    here = threshold_grid(problem, "kappa0", [0.3, 0.7], progress=False)
    pool = threshold_grid(problem, "kappa0", [0.3, 0.7], workers=2, progress=False)
    assert [(v, p.interpolation.alpha, p.perfect_recovery.alpha) for v, p in here] == \
        [(v, p.interpolation.alpha, p.perfect_recovery.alpha) for v, p in pool]
    plan = ScalingPlan(Problem(Task("linear", noise=0.1), PowerLawTarget(gamma=1.5, d=60),
                               Learner(1.0, 0.01), alpha=0.05), (0.05, 0.1, 0.2, 0.4))
    one = run_scaling(plan, tmp_path / "one")
    two = run_scaling(plan, tmp_path / "two", workers=2)
    assert len(list((tmp_path / "two" / "points").iterdir())) == 4
    for a, b in zip(one, two):
        assert a["converged"] and b["converged"] and a["alpha"] == b["alpha"]
        assert b["matrix_mse"] == pytest.approx(a["matrix_mse"], rel=1e-8)
