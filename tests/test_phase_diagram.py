"""Phase diagrams: continuation sweeps, hysteresis flags, executors, resume after a kill (issue 6)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.experiments.phase_diagram import (FIELDS, PhaseDiagramPlan, assemble, grid,
                                                     load_phase_diagram, point_file,
                                                     run_phase_diagram)
from amp_attention.solvers.state_evolution import solve_state_evolution

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1))
PLAN = PhaseDiagramPlan(PROBLEM, grid(0.1, 1.2, 5, "linear"), grid(0.01, 1.0, 3, "log"))


def _arrays(out):
    return load_phase_diagram(out)[1]


def test_points_equal_independent_se_solves(tmp_path):
    meta = run_phase_diagram(PLAN, tmp_path, workers=0)
    assert meta["computed"] == 2 * 15 and meta["n_converged"] == 15 and meta["n_hysteresis"] == 0
    arr = _arrays(tmp_path)
    assert arr["test_error"].shape == (5, 3)
    for i, j in ((0, 0), (3, 1), (4, 2)):
        r = solve_state_evolution(PLAN.at(i, j), tol=1e-11)
        for f in ("test_error", "train_error", "rank_fraction"):
            assert arr[f][i, j] == pytest.approx(getattr(r, f), rel=1e-7, abs=1e-12), (i, j, f)
    assert meta["layout"].startswith("arrays of shape")
    assert set(FIELDS) <= set(meta["fields"])


def test_executors_give_identical_results(tmp_path):
    run_phase_diagram(PLAN, tmp_path / "serial", workers=0)
    with cf.ThreadPoolExecutor(2) as ex:
        run_phase_diagram(PLAN, tmp_path / "threads", executor=ex)
    run_phase_diagram(PLAN, tmp_path / "procs", workers=2)
    ref = _arrays(tmp_path / "serial")
    for name in ("threads", "procs"):
        other = _arrays(tmp_path / name)
        for f in FIELDS:
            np.testing.assert_array_equal(other[f], ref[f])


def test_dask_local_cluster_matches_the_local_executor(tmp_path):
    distributed = pytest.importorskip("distributed")
    run_phase_diagram(PLAN, tmp_path / "local", workers=0)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    try:
        with distributed.Client(cluster) as client:
            meta = run_phase_diagram(PLAN, tmp_path / "dask", executor=client.get_executor())
    finally:
        cluster.close()
    assert meta["computed"] == 30
    ref, other = _arrays(tmp_path / "local"), _arrays(tmp_path / "dask")
    for f in FIELDS:
        np.testing.assert_array_equal(other[f], ref[f])


def test_interrupted_run_resumes_without_recomputing(tmp_path):
    """Ctrl-C (SIGINT) a CLI run midway; the rerun solves only the missing points
    and the result equals an uninterrupted run."""
    out = tmp_path / "pd"
    argv = [sys.executable, "-m", "amp_attention.cli", "phase-diagram", "--noise", "0.5",
            "--alpha-range", "0.1", "1.2", "8", "--lam-range", "0.01", "1", "4", "--workers", "1",
            "--tol", "1e-9", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    # A shell without job control starts background commands with SIGINT ignored,
    # and an ignored signal stays ignored across exec (Python then installs no
    # KeyboardInterrupt handler): restore the default so Ctrl-C reaches the CLI
    # however pytest itself was launched.
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if len(list((out / "points").glob("*.json"))) >= 12:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    before = len(list((out / "points").glob("*.json")))
    assert 12 <= before < 64
    assert not list((out / "points").glob("*.amp-tmp"))  # no partial files
    plan = PhaseDiagramPlan(PROBLEM, grid(0.1, 1.2, 8, "linear"), grid(0.01, 1, 4, "log"), tol=1e-9)
    meta = run_phase_diagram(plan, out, workers=0)
    assert meta["computed"] == 64 - before and meta["n_converged"] == 32
    fresh = run_phase_diagram(plan, tmp_path / "fresh", workers=0)
    assert fresh["computed"] == 64
    a, b = _arrays(out), _arrays(tmp_path / "fresh")
    for f in FIELDS:
        np.testing.assert_allclose(a[f], b[f], rtol=1e-8, atol=1e-12)


#: a rank-capped learner (kappa < 1): the ERM is not convex, several fixed points possible
CAPPED = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(0.5, 0.1))


def _write_branches(out, down_m, *, residual=0.0, n_alpha=2):
    """Hand-written up/down records that agree except at the last alpha, where the down
    branch ends at m = down_m with a lower loss (the assembly logic is what is tested)."""
    (out / "points").mkdir()
    base = {f: 1.0 for f in FIELDS}
    for i in range(n_alpha):
        for dr in ("up", "down"):
            rec = {**base, "i": i, "j": 0, "direction": dr, "converged": True, "status": "converged",
                   "iterations": 5, "residual": residual, "start": "warm", "seconds": 0.0}
            if i == n_alpha - 1 and dr == "down":
                rec.update(m=down_m, loss=0.5, test_error=0.3)
            point_file(out, 0, dr, i).write_text(json.dumps(rec))


def test_hysteresis_is_flagged_and_the_lower_loss_branch_reported(tmp_path):
    """Two stored branches that disagree at one point, on a problem that may have
    several fixed points."""
    plan = PhaseDiagramPlan(CAPPED, (0.5, 1.0), (0.1,))
    _write_branches(tmp_path, 2.0)
    meta = assemble(plan, tmp_path)
    arr = _arrays(tmp_path)
    assert arr["hysteresis"].tolist() == [[False], [True]]
    assert arr["test_error"][1, 0] == 0.3 and arr["alt_test_error"][1, 0] == 1.0
    assert arr["branch"][1, 0] == "down"
    assert meta["n_hysteresis"] == 1 and "two fixed points" in meta["status"][1][0]
    assert meta["n_converged"] == 2


def test_branches_within_their_tolerances_are_not_two_fixed_points(tmp_path):
    """Issue 29: two fixed points only where both solves converged and differ by more than
    their tolerances allow (1e3 tol + 1e-7, as the SE's metastable); a smaller difference
    above hysteresis_rtol is 'not converged'."""
    plan = PhaseDiagramPlan(CAPPED, (0.5, 1.0), (0.1,), tol=1e-4)
    _write_branches(tmp_path, 1.05)  # 5e-2 apart: within 1e3 x 1e-4
    meta = assemble(plan, tmp_path)
    arr = _arrays(tmp_path)
    assert not arr["hysteresis"].any() and arr["converged"].tolist() == [[True], [False]]
    assert meta["n_hysteresis"] == 0 and meta["n_converged"] == 1
    assert meta["status"][1][0].startswith("not converged: ") and "lower tol" in meta["status"][1][0]
    # the residuals count too: a solve that stopped at residual 1e-3 is only that close
    out = tmp_path / "res"
    out.mkdir()
    _write_branches(out, 1.5, residual=1e-3)  # 0.5 apart: within 1e3 x 1e-3
    meta = assemble(PhaseDiagramPlan(CAPPED, (0.5, 1.0), (0.1,)), out)
    assert meta["n_hysteresis"] == 0 and meta["status"][1][0].startswith("not converged")


def test_a_convex_problem_never_has_two_fixed_points(tmp_path):
    """Issue 29: on a convex problem (linear channel, kappa >= 1) the fixed point is unique:
    branches that end apart were not solved to the diagram's resolution."""
    _write_branches(tmp_path, 2.0)
    meta = assemble(PhaseDiagramPlan(PROBLEM, (0.5, 1.0), (0.1,)), tmp_path)
    assert meta["n_hysteresis"] == 0 and meta["n_converged"] == 1
    assert "fixed point is unique" in meta["status"][1][0]
    assert meta["status"][1][0].startswith("not converged: ")


def test_loose_tolerance_on_a_convex_problem_reports_no_hysteresis(tmp_path):
    """Issue 29: `phase-diagram --tol 1e-3 --max-iter 5` flagged most points of a convex
    problem as having two fixed points; now none (they are 'not converged' where the two
    sweeps disagree), through the solver and through the CLI (exit 3, results written)."""
    plan = PhaseDiagramPlan(PROBLEM, grid(0.2, 1.2, 4, "linear"), grid(0.01, 1.0, 3, "log"),
                            tol=1e-3, max_iter=5)
    meta = run_phase_diagram(plan, tmp_path / "solver", workers=0)
    assert meta["n_hysteresis"] == 0
    assert not any("two fixed points" in s for row in meta["status"] for s in row)
    from amp_attention.cli import main

    argv = ["phase-diagram", "--tol", "1e-3", "--max-iter", "5", "--alpha-range", "0.2", "1.2",
            "4", "--lam-range", "0.01", "1", "3", "--workers", "0", "--out", str(tmp_path / "cli")]
    assert main(argv) == 3
    cli = json.loads((tmp_path / "cli" / "phase_diagram.json").read_text())
    assert cli["n_hysteresis"] == 0
    assert not any("two fixed points" in s for row in cli["status"] for s in row)
    with np.load(tmp_path / "cli" / "phase_diagram.npz") as z:
        assert not z["hysteresis"].any()


def test_other_parameters_in_the_same_directory_are_refused(tmp_path):
    run_phase_diagram(PLAN, tmp_path, workers=0)
    other = PhaseDiagramPlan(PROBLEM, grid(0.1, 1.2, 4, "linear"), PLAN.lams)
    with pytest.raises(ValueError, match="other parameters"):
        run_phase_diagram(other, tmp_path, workers=0)


@pytest.mark.parametrize("args,match", [((1.0, 0.5, 4, "linear"), "lo <= hi"),
                                        ((0.0, 1.0, 4, "log"), "lo > 0"),
                                        ((0.1, 1.0, 0, "log"), "integer >= 1"),
                                        ((0.1, 1.0, 4, "cubic"), "spacing")])
def test_bad_grids_say_what_is_allowed(args, match):
    with pytest.raises(ValueError, match=match):
        grid(*args)


def test_bad_plans_name_the_parameter():
    with pytest.raises(ValueError, match="alphas"):
        PhaseDiagramPlan(PROBLEM, (1.0, 0.5), (0.1,))
    with pytest.raises(ValueError, match="lams"):
        PhaseDiagramPlan(PROBLEM, (0.5,), (-0.1,))


def test_unreadable_points_are_moved_aside_and_recomputed(tmp_path, capsys):
    """issue 16, item 5: a truncated file, garbage and valid JSON of the wrong shape are
    named, kept beside as <name>.unreadable and computed again; the diagram equals an
    untouched run.  A file where points/ should be is a one-line error."""
    ref_dir, out = tmp_path / "ref", tmp_path / "pd"
    run_phase_diagram(PLAN, ref_dir, workers=0)
    run_phase_diagram(PLAN, out, workers=0)
    bad = {point_file(out, 0, "up", 1): "{\"i\": 1, \"te",      # truncated
           point_file(out, 1, "down", 2): "\x00garbage",
           point_file(out, 2, "up", 0): json.dumps({"i": 0, "converged": True})}
    for path, text in bad.items():
        path.write_text(text)
    capsys.readouterr()
    meta = run_phase_diagram(PLAN, out, workers=0)
    # issue 29, item 12: one plain line per file on stderr, not a RuntimeWarning
    notices = capsys.readouterr().err.splitlines()
    assert len(notices) == len(bad)
    assert all(n.startswith("amp-attention: notice: ") and "not a readable result" in n
               and "computing it again" in n for n in notices)
    named = " ".join(notices)
    for path in bad:
        assert str(path) in named
        aside = path.with_name(path.name + ".unreadable")
        assert aside.read_text() == bad[path]            # kept, not deleted
    assert meta["computed"] >= len(bad)
    ref, again = _arrays(ref_dir), _arrays(out)
    for f in FIELDS:
        np.testing.assert_array_equal(again[f], ref[f])
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "points").write_text("not a directory")
    with pytest.raises(ValueError, match="points exists and is not a directory"):
        run_phase_diagram(PLAN, blocked, workers=0)


def test_phase_diagram_figure_keeps_its_legend_off_the_data(tmp_path, monkeypatch):
    """issue 16, item 9: panels in a 2 x 2 grid (not a strip), labelled axes, and the
    threshold legend below the panels rather than over a heatmap."""
    from amp_attention import plotting

    figs = []
    monkeypatch.setattr(plotting.plt, "close", lambda fig=None: figs.append(fig))
    a, lam = np.linspace(0.1, 1.0, 4), np.geomspace(1e-2, 1.0, 3)
    arrays = {f: np.outer(a, lam) + 0.1 for f in ("test_error", "train_error", "rank_fraction",
                                                   "matrix_mse")}
    plotting.plot_phase_diagram(a, lam, arrays, tmp_path / "pd.png", title="t",
                                vlines={"alpha_interp": 0.4, "alpha_PR": 0.6})
    fig = figs[-1]
    w, h = fig.get_size_inches()
    assert w / h < 2.0                                       # not a 4-panel strip
    panels = [ax for ax in fig.axes if ax.get_xlabel() == r"$\alpha = n/d^2$"]
    assert len(panels) == 4 and all(ax.get_ylabel() and ax.get_legend() is None for ax in panels)
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["alpha_interp", "alpha_PR"]
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert all(legend.y1 <= ax.get_tightbbox(renderer).y0 + 1 for ax in panels)


def test_log_spaced_lam_rows_get_cells_of_equal_height(tmp_path, monkeypatch):
    """With shading "nearest" matplotlib put the cell edges at linear midpoints, so on the
    log lam axis the smallest lam's row was a sliver (0.025-0.028 for lam 0.01, 0.046, ...).
    Edges are now geometric midpoints: every row as tall as the others in log lam, each lam at
    its cell's centre; an unsorted lam grid is drawn sorted."""
    from amp_attention import plotting

    figs = []
    monkeypatch.setattr(plotting.plt, "close", lambda fig=None: figs.append(fig))
    a, lam = np.array([0.1, 0.3, 0.6]), np.geomspace(1e-2, 1.0, 4)
    shuffled = np.array([2, 0, 3, 1])
    arrays = {f: np.outer(a, lam[shuffled]) + 0.1
              for f in ("test_error", "train_error", "rank_fraction", "matrix_mse")}
    plotting.plot_phase_diagram(a, lam[shuffled], arrays, tmp_path / "pd.png")
    mesh = figs[-1].axes[0].collections[0]
    ys = np.unique(np.round(mesh.get_coordinates()[:, 0, 1], 12))
    heights = np.diff(np.log(ys))
    assert ys.size == lam.size + 1 and np.allclose(heights, heights[0])
    assert np.allclose(np.sqrt(ys[:-1] * ys[1:]), lam)
    # the colours follow the sorted rows: row k of the mesh is lam[k]'s
    Z = np.asarray(mesh.get_array()).reshape(lam.size, a.size)
    assert np.allclose(Z, np.outer(lam, a) + 0.1)
    assert np.allclose(plotting.cell_edges([0.1, 0.3, 0.6], log=False), [0.0, 0.2, 0.45, 0.75])


def test_cli_counts_solved_and_resumed_points(tmp_path, capsys):
    """Issue 29: "N point(s) solved, the others resumed" was printed when nothing was
    resumed; now the resumed count, and only when there is one."""
    from amp_attention.cli import main

    argv = ["phase-diagram", "--alpha-range", "0.2", "1", "2", "--lam-range", "0.1", "1", "2",
            "--workers", "0", "--out", str(tmp_path / "pd")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "8 point(s) solved\n" in out and "resumed" not in out
    point_file(tmp_path / "pd", 1, "up", 1).unlink()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"1 point(s) solved, 7 resumed from {tmp_path / 'pd' / 'points'}" in out
