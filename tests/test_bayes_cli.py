"""The Bayes-optimal estimator on the command line: ``se --estimator bayes`` and
``compare`` (run in-process through ``main(argv)``)."""

from __future__ import annotations

import csv
import json
import os

import pytest

from amp_attention.cli import main
from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.spec import Learner, Problem, Task, WishartTarget


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_se_bayes_json_has_the_erm_fields(capsys):
    """ERM's JSON fields (the Bayes result extends the shared SEResult) plus its own two,
    values from the API."""
    code, out, _ = run(capsys, "se", "--json", "--alpha", "0.3")
    erm = json.loads(out)
    code, out, _ = run(capsys, "se", "--estimator", "bayes", "--json", "--alpha", "0.3")
    assert code == 0
    bo = json.loads(out)
    assert set(bo) - set(erm) == {"plugin_test_error", "perfect_recovery"}
    assert set(erm) <= set(bo)
    assert bo["estimator"] == "bayes" and erm["estimator"] == "erm"
    assert bo["params"]["estimator"] == "bayes" and "lam" not in bo["params"]
    api = solve_bayes_optimal(Problem(Task("linear", L=1), WishartTarget(0.5), Learner(), 0.3))
    assert bo["matrix_mse"] == pytest.approx(api.matrix_mse, rel=1e-12)
    assert bo["train_error"] is None and bo["loss"] is None
    # the Bayes-optimal estimator beats ERM at lam = 0.1
    assert bo["matrix_mse"] < erm["matrix_mse"] and bo["test_error"] < erm["test_error"]


def test_se_bayes_perfect_recovery_is_not_reported_as_converged_to_tol(capsys):
    """Issue 29: --noise 0 --alpha 1 (above alpha_PR = 0.375) said status converged with a
    residual of 0.56, far above --tol.  Status perfect_recovery: a success (exit 0)."""
    code, out, _ = run(capsys, "se", "--estimator", "bayes", "--noise", "0", "--alpha", "1",
                       "--json")
    r = json.loads(out)
    assert code == 0 and r["success"] and r["perfect_recovery"] and r["converged"] is False
    assert r["status"] == "perfect_recovery" and r["residual"] > r["params"]["tol"]
    assert "not a distance to tol" in r["message"]
    code, out, _ = run(capsys, "se", "--estimator", "bayes", "--noise", "0", "--alpha", "0.3",
                       "--json")
    r = json.loads(out)
    assert code == 0 and r["status"] == "converged" and r["residual"] <= r["params"]["tol"]


def test_se_bayes_table(capsys):
    code, out, _ = run(capsys, "se", "--estimator", "bayes", "--channel", "softmax", "--L", "2",
                       "--alpha", "0.2")
    assert code == 0
    assert "Bayes-optimal state evolution" in out and "perfect_recovery   true" in out
    assert "train_error" not in out


@pytest.mark.parametrize("flag", [["--lam", "0.2"], ["--kappa", "0.5"], ["--finite-d", "50"],
                                  ["--method", "damped"], ["--spectrum", "x.csv"]])
def test_se_bayes_refuses_learner_and_solver_flags(capsys, flag):
    code, _, err = run(capsys, "se", "--estimator", "bayes", *flag)
    assert code == 2
    assert "does not apply with --estimator bayes" in err and flag[0] in err


def test_se_bayes_unavailable_channel_is_a_usage_error(capsys):
    code, _, err = run(capsys, "se", "--estimator", "bayes", "--channel", "seq2lab", "--L", "2")
    assert code == 2 and "noise" in err and "Traceback" not in err


def test_compare_linear_thresholds_table_and_resume(capsys, tmp_path):
    """Linear L = 1, noiseless, kappa0 = 0.5 (the defaults): the table shows the BO
    perfect-recovery threshold 0.375 and ERM's 0.4222; ERM >= ERM(best lam) >= BO; a
    rerun resumes from the saved point."""
    out_dir = tmp_path / "cmp"
    argv = ("compare", "--alpha-range", "0.4", "0.4", "1", "--out", str(out_dir))
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "perfect recovery, Bayes-optimal: alpha = 0.375" in out
    assert "perfect recovery, ERM (lam -> 0+): alpha = 0.422" in out
    data = json.loads((out_dir / "compare.json").read_text())
    assert data["params"]["thresholds"]["alpha_PR_bayes"] == pytest.approx(0.375, rel=1e-7)
    for r in data["rows"]:
        assert r["erm_test_error"] >= r["erm_best_test_error"] >= r["bayes_test_error"] >= 0
        assert r["estimator_gap_test_error"] >= 0 and not r["warnings"]
    # alpha = 0.4 lies between the two thresholds: BO recovers S0, ERM does not
    top = data["rows"][-1]
    assert top["bayes_perfect_recovery"] and top["erm_best_matrix_mse"] > 1e-3
    with open(out_dir / "compare.csv") as fh:
        rows = [r for r in csv.reader(fh) if not r[0].startswith("#")]
    assert len(rows) == 2 and "estimator_gap_test_error" in rows[0]
    assert (out_dir / "compare.png").stat().st_size > 10_000
    points = sorted((out_dir / "points").iterdir())
    stamps = [os.stat(p).st_mtime_ns for p in points]
    code, out2, _ = run(capsys, *argv)
    assert code == 0 and [os.stat(p).st_mtime_ns for p in points] == stamps
    assert out2 == out


def test_compare_bad_input(capsys, tmp_path):
    code, _, err = run(capsys, "compare", "--lam-search", "0", "1", "--out", str(tmp_path))
    assert code == 2 and "--lam-search" in err
    code, _, err = run(capsys, "compare", "--alpha-range", "0.1", "0.5", "0", "--out",
                       str(tmp_path))
    assert code == 2 and "--alpha-range" in err
