"""`amp_attention.experiments.validate`: SE curve vs Adam runs, resumable, with table and figure (issue 5)."""

import csv
import json
import math

import pytest

from amp_attention.adam import AdamOptions
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.experiments.validate import ValidationPlan, run_file, run_validation

PLAN = ValidationPlan(
    Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5),
    alphas=(0.3, 0.6), ds=(16, 24), seeds=2, adam=AdamOptions(lr=0.03), theory_points=5)


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_validation_writes_table_figure_and_resumes(tmp_path):
    first = run_validation(PLAN, tmp_path)
    assert first["trained"] == 8 and first["all_converged"]
    for name in ("validate.csv", "validate.json", "validate.png"):
        assert (tmp_path / name).stat().st_size > 0
    with open(tmp_path / "validate.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * (2 + 2)  # per alpha: two d, d = inf, theory
    theory = [r for r in rows if r["d"] == "theory"]
    inf = [r for r in rows if r["d"] == "inf"]
    for t, e in zip(theory, inf):
        # d = 16, 24 with 2 seeds: the extrapolation is loose, but consistent with the SE
        for q in ("matrix_mse", "train_error"):
            assert abs(float(e[q]) - float(t[q])) <= 3 * float(e[q + "_stderr"]), (q, e, t)
    # Resume: a finished run is not redone; a deleted one is.
    run_file(tmp_path, 0.6, 24, 1).unlink()
    again = run_validation(PLAN, tmp_path)
    assert again["trained"] == 1
    assert json.loads((tmp_path / "validate.json").read_text())["params"]["seeds"] == 2


def test_bad_plans_name_the_parameter():
    base = PLAN.problem
    with pytest.raises(ValueError, match="alphas"):
        ValidationPlan(base, alphas=(), ds=(16,))
    with pytest.raises(ValueError, match="ds"):
        ValidationPlan(base, alphas=(0.5,), ds=(1,))
    with pytest.raises(ValueError, match="seeds"):
        ValidationPlan(base, alphas=(0.5,), ds=(16,), seeds=0)
    with pytest.raises(ValueError, match="one per alpha"):
        ValidationPlan(base, alphas=(0.5, 0.6), ds=(16,), seeds=(2, 3, 4))
    assert math.isfinite(PLAN.alphas[0])


@pytest.mark.parametrize("points", [0, 1, -3, 2.5, True, "5", math.nan])
def test_bad_theory_points_are_refused(points):
    """Issue 29: the check on theory_points sat after a return and never ran."""
    with pytest.raises(ValueError, match="theory_points"):
        ValidationPlan(PLAN.problem, alphas=(0.5,), ds=(16,), theory_points=points)
    assert ValidationPlan(PLAN.problem, alphas=(0.5,), ds=(16,), theory_points=2.0).theory_points == 2


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_per_alpha_seed_counts(tmp_path):
    plan = ValidationPlan(PLAN.problem, alphas=(0.3, 0.6), ds=(12, 16), seeds=(3, 1),
                          adam=AdamOptions(lr=0.03), theory_points=2)
    assert plan.runs() == [(0.3, 12, 0), (0.3, 12, 1), (0.3, 12, 2), (0.3, 16, 0), (0.3, 16, 1),
                           (0.3, 16, 2), (0.6, 12, 0), (0.6, 16, 0)]
    s = run_validation(plan, tmp_path)
    assert s["trained"] == 8 and s["params"]["seeds"] == [3, 1]
    n = {(r["alpha"], r["d"]): r["n_seeds"] for r in s["table"]}
    assert n[(0.3, "12")] == 3 and n[(0.6, "16")] == 1 and n[(0.3, "inf")] == 6


def test_equal_precision_seed_scaling():
    plan = ValidationPlan(PLAN.problem, alphas=(0.3, 0.6), ds=(12, 24), seeds=(2, 1),
                          seed_scaling="equal-precision")
    # (24/12)^2 = 4 times the seeds at d = 12
    assert [plan.seeds_at(0.3, d) for d in (12, 24)] == [8, 2]
    assert [plan.seeds_at(0.6, d) for d in (12, 24)] == [4, 1]
    assert len(plan.runs()) == 8 + 2 + 4 + 1
    with pytest.raises(ValueError, match="seed_scaling"):
        ValidationPlan(PLAN.problem, alphas=(0.3,), ds=(12,), seed_scaling="linear")


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_dask_local_cluster_and_process_pool_match_the_in_process_run(tmp_path):
    """The runs of a validation sweep are independent tasks (amp_attention.runner): a local
    process pool and a Dask LocalCluster give the in-process result, bit for bit."""
    distributed = pytest.importorskip("distributed")
    plan = ValidationPlan(PLAN.problem, alphas=(0.4,), ds=(12, 16), seeds=2,
                          adam=AdamOptions(lr=0.03), theory_points=2)
    ref = run_validation(plan, tmp_path / "here")
    pool = run_validation(plan, tmp_path / "pool", workers=2)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    try:
        with distributed.Client(cluster) as client:
            dask = run_validation(plan, tmp_path / "dask", executor=client.get_executor())
    finally:
        cluster.close()
    assert ref["trained"] == pool["trained"] == dask["trained"] == 4
    for other in (pool, dask):
        assert other["table"] == ref["table"] and other["fits"] == ref["fits"]


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_validation_figure_is_labelled_and_keeps_the_d_apart(tmp_path):
    """issue 16, item 9: symbol y labels, the parameters in the title, and the points of
    different d side by side at each alpha (no error bar hidden behind another)."""
    from amp_attention.experiments.validate import validation_figure

    plan = ValidationPlan(PLAN.problem, alphas=(0.3, 0.6), ds=(8, 12), seeds=2,
                          adam=AdamOptions(lr=0.03), theory_points=2)
    fig = validation_figure(run_validation(plan, tmp_path))
    assert "linear L=1" in fig._suptitle.get_text() and "lam=0.1" in fig._suptitle.get_text()
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and not ax.get_title()
    xs = [tuple(round(float(x), 12) for x in ln.get_xdata()) for ln in fig.axes[0].get_lines()
          if ln.get_marker() in ("o", "*") and len(ln.get_xdata()) == 2]
    assert len(set(xs)) == len(xs) >= 2          # every series at its own x positions


def test_cli_counts_trained_and_resumed_runs(tmp_path, capsys):
    """Issue 29: "N run(s) trained, the others resumed" was printed when nothing was
    resumed; now the resumed count, and only when there is one."""
    from amp_attention.cli import main

    argv = ["validate", "--alphas", "0.4", "--d", "8", "--seeds", "2", "--noise", "0.5",
            "--out", str(tmp_path / "v")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 run(s) trained\n" in out and "resumed" not in out
    run_file(tmp_path / "v", 0.4, 8, 1).unlink()
    assert main(argv) == 0
    assert f"1 run(s) trained, 1 resumed from {tmp_path / 'v' / 'runs'}" in capsys.readouterr().out
