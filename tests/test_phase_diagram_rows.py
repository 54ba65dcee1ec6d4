"""Phase diagrams of a non-linear channel (issue 32): each lam row is one task, both sweeps on
the RQMC coarse level first, the up branch refined at every alpha, the down branch only where
its coarse fixed point differs from the up branch's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amp_attention.experiments import phase_diagram as pd
from amp_attention.experiments.phase_diagram import (FIELDS, PhaseDiagramPlan, grid,
                                                     load_phase_diagram, point_file,
                                                     run_phase_diagram, solved_by_rows)
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import (COARSE_QN_ITER, COARSE_TOL, MC_FIELDS,
                                                   MonteCarloOptions, StateEvolution,
                                                   coarse_level_jacobian,
                                                   same_fixed_point, solve_coarse_level,
                                                   solve_state_evolution)

#: small RQMC settings: the logic is tested, not the Monte-Carlo accuracy
MC = MonteCarloOptions(log2_n=10, coarse_log2_n=7, replicas=4, test_log2_n=10, step_log2_n=10)
PROBLEM = Problem(Task("softmax", L=2, noise=0.5, noise_at="logit"), WishartTarget(0.5),
                  Learner(1.0, 0.1))
PLAN = PhaseDiagramPlan(PROBLEM, grid(0.2, 0.5, 3, "linear"), grid(0.05, 0.3, 2, "log"),
                        tol=1e-8, mc=MC)


def _records(out, plan=PLAN):
    return {(j, dr, i): json.loads(point_file(out, j, dr, i).read_text())
            for j in range(len(plan.lams)) for dr in ("up", "down")
            for i in range(len(plan.alphas))}


def _copy_of(out, copy):
    """A copy of the diagram directory ``out`` (points and metadata) at ``copy``."""
    (copy / "points").mkdir(parents=True)
    for f in (out / "points").glob("*.json"):
        (copy / "points" / f.name).write_text(f.read_text())
    (copy / "phase_diagram.json").write_text((out / "phase_diagram.json").read_text())
    return copy


@pytest.fixture(scope="module")
def diagram(tmp_path_factory):
    out = tmp_path_factory.mktemp("rows") / "pd"
    meta = run_phase_diagram(PLAN, out, workers=0)
    return out, meta


def test_rows_are_the_tasks_of_an_rqmc_diagram_only():
    assert solved_by_rows(PLAN)
    linear = PhaseDiagramPlan(Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5),
                                      Learner(1.0, 0.1)), (0.5,), (0.1,))
    assert not solved_by_rows(linear)
    # no coarse level: coarse_log2_n >= log2_n
    flat = PhaseDiagramPlan(PROBLEM, (0.5,), (0.1,), mc=MonteCarloOptions(log2_n=8,
                                                                          coarse_log2_n=8))
    assert not solved_by_rows(flat)


def test_down_branch_reuses_the_up_branch_where_their_coarse_points_agree(diagram):
    out, meta = diagram
    assert meta["computed"] == 12 and meta["n_converged"] == 6 and meta["n_hysteresis"] == 0
    recs = _records(out)
    for (j, dr, i), rec in recs.items():
        if dr == "up":
            assert rec["level"] == "fine" and rec["converged"], rec["status"]
        else:  # a single fixed point here: the down sweep lands on the up branch's
            assert rec["level"] == "coarse" and rec["iterations"] == 0
            assert rec["iterations_coarse"] >= 1
            up = recs[(j, "up", i)]
            assert all(rec[f] == up[f] for f in FIELDS)


def test_refined_points_are_the_se_of_the_point_within_its_errors(diagram):
    """Each up point against an independent solve of the same point from the informative
    start: the same fixed point of the same map, reached from another start, so they agree
    within the fine level's tolerance (5 % of the Monte-Carlo error, at most 1e-5
    relative) -- far inside the Monte-Carlo error itself."""
    out, _ = diagram
    arr = load_phase_diagram(out)[1]
    for i, j in ((0, 0), (2, 1)):
        r = solve_state_evolution(PLAN.at(i, j), tol=1e-8, mc=MC, start="informative",
                                  finite_size_check=False)
        for f in ("m", "q", "V", "test_error", "train_error"):
            err = r.mc_stderr[f]
            assert abs(arr[f][i, j] - getattr(r, f)) <= 0.5 * err + 1e-12, (i, j, f)


def test_a_resumed_row_recomputes_only_the_missing_points_identically(diagram, tmp_path):
    out, _ = diagram
    copy = _copy_of(out, tmp_path / "pd")
    point_file(copy, 1, "up", 2).unlink()   # an up point (the down copy stays)
    point_file(copy, 0, "down", 0).unlink()
    meta = run_phase_diagram(PLAN, copy, workers=0)
    assert meta["computed"] == 2
    a, b = _records(out), _records(copy)
    for key in ((1, "up", 2), (0, "down", 0)):
        for f in FIELDS:
            assert a[key][f] == b[key][f], (key, f)


def test_down_branch_is_refined_where_the_coarse_points_differ(tmp_path, monkeypatch):
    """Where the coarse branches differ (forced here), the down branch gets a fine solve of
    its own; on this single-fixed-point problem it reaches the up branch's values within
    the two solves' tolerances.  Its fine level solves the up branch's map (the control
    variate taken at the up branch's coarse fixed point, step_at "start"), so the two are
    compared at their residuals and the point is converged, not "unresolved"."""
    monkeypatch.setattr(pd, "same_fixed_point", lambda a, b, tol: False)
    calls = []
    real = pd.solve_state_evolution

    def recorded(problem, **kw):
        calls.append((problem.alpha, kw))
        return real(problem, **kw)

    monkeypatch.setattr(pd, "solve_state_evolution", recorded)
    plan = PhaseDiagramPlan(PROBLEM, (0.3, 0.5), (0.1,), tol=1e-8, mc=MC)
    assert MC.step_at == "start"
    meta = run_phase_diagram(plan, tmp_path / "pd", workers=0)
    assert meta["computed"] == 4 and meta["n_converged"] == 2
    assert meta["status"] == [["converged"], ["converged"]]
    recs = _records(tmp_path / "pd", plan)
    for i in range(2):
        up, down = recs[(0, "up", i)], recs[(0, "down", i)]
        assert down["level"] == "fine" and down["converged"] and down["iterations"] >= 1
        for f in ("m", "q", "V"):
            assert down[f] == pytest.approx(up[f], rel=1e-3)
    assert len(calls) == 4
    for alpha in plan.alphas:
        up_kw, down_kw = (kw for a, kw in calls if a == alpha)
        assert "cv_reference" not in up_kw  # its own coarse fixed point
        np.testing.assert_array_equal(down_kw["cv_reference"], up_kw["coarse_x"])


def test_coarse_x_needs_x0_and_a_coarse_level():
    with pytest.raises(ValueError, match="coarse_x needs x0"):
        solve_state_evolution(PLAN.at(0, 0), mc=MC, coarse_x=(0.1, 0.2, 0.3))
    linear = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1))
    with pytest.raises(ValueError, match="no coarse level"):
        solve_state_evolution(linear, x0=(0.1, 0.2, 0.3), coarse_x=(0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="coarse_x must be a valid"):
        solve_state_evolution(PLAN.at(0, 0), mc=MC, x0=(0.1, 0.2, 0.3), coarse_x=(0.1, -1, 0.3))


def test_a_wrong_coarse_x_is_not_trusted():
    """coarse_x far from the coarse fixed point: the solve does not take it as one (its
    residual is checked) and still converges from x0 on the fine level."""
    p = PLAN.at(1, 0)
    ref = solve_state_evolution(p, mc=MC, tol=1e-8, start="informative", finite_size_check=False)
    x = np.array([ref.m, ref.q, ref.V])
    r = solve_state_evolution(p, mc=MC, tol=1e-8, x0=x, coarse_x=x * 0.7, finite_size_check=False)
    assert r.converged
    for f in ("m", "q", "V"):
        assert getattr(r, f) == pytest.approx(getattr(ref, f), rel=1e-4)


def test_a_failed_up_refinement_is_not_repeated_on_the_down_branch(diagram, tmp_path):
    """Where the coarse branches agree and the up branch's refinement failed, the down
    record is that failure (a point the fine level cannot resolve costs its iterations once):
    not converged, saying why."""
    out, _ = diagram
    copy = _copy_of(out, tmp_path / "pd")
    up = json.loads(point_file(copy, 0, "up", 1).read_text())
    up.update(converged=False, status="max_iter: not converged in 300 iterations")
    point_file(copy, 0, "up", 1).write_text(json.dumps(up))
    point_file(copy, 0, "down", 1).unlink()
    meta = run_phase_diagram(PLAN, copy, workers=0)
    assert meta["computed"] == 1
    down = json.loads(point_file(copy, 0, "down", 1).read_text())
    assert not down["converged"] and down["level"] == "coarse"
    assert "whose refinement failed: max_iter" in down["status"]
    assert meta["n_converged"] == 5 and meta["status"][1][0].startswith("not converged")


def test_a_continued_coarse_solve_reaches_the_same_fixed_point():
    """solve_coarse_level with a neighbour's coarse Jacobian (quasi-Newton steps, the
    sweep's continuation) ends at the fixed point Anderson mixing finds, within the coarse
    tolerance, in fewer evaluations; a useless matrix still ends there (the fallback)."""
    se_a, se_b = (StateEvolution(PLAN.at(i, 0), MC) for i in (0, 1))
    start = se_a.starts()["informative"]
    a = solve_coarse_level(se_a, start, tol=1e-8)
    grad = coarse_level_jacobian(se_a, a.x)
    assert grad.shape == (len(MC_FIELDS), 3) and np.all(np.isfinite(grad))
    ref = solve_coarse_level(StateEvolution(PLAN.at(1, 0), MC), a.x, tol=1e-8)
    qn = solve_coarse_level(se_b, a.x, tol=1e-8, jacobian=grad)
    assert ref.converged and qn.converged
    assert same_fixed_point(ref.x, qn.x, 1e-3 * COARSE_TOL)
    assert qn.iterations < ref.iterations
    bad = solve_coarse_level(StateEvolution(PLAN.at(1, 0), MC), a.x, tol=1e-8,
                             jacobian=np.full((3, 3), 50.0))
    assert bad.iterations > COARSE_QN_ITER  # the quasi-Newton steps failed: Anderson's point
    assert bad.converged and same_fixed_point(ref.x, bad.x, 1e-3 * COARSE_TOL)


def test_a_given_coarse_jacobian_is_the_one_the_solve_would_compute():
    """coarse_jacobian= (the sweep's coarse_level_jacobian at coarse_x) gives the refinement
    that computing it inside gives: the same fixed point to far below the fine tolerance."""
    p = PLAN.at(1, 0)
    se = StateEvolution(p, MC)
    c = solve_coarse_level(se, se.starts()["informative"], tol=1e-8)
    grad = coarse_level_jacobian(se, c.x)
    kw = dict(mc=MC, tol=1e-8, x0=c.x, coarse_x=c.x, finite_size_check=False)
    inside, given = (solve_state_evolution(p, coarse_jacobian=g, **kw) for g in (None, grad))
    assert inside.converged and given.converged
    for f in ("m", "q", "V", "test_error", "train_error"):
        assert getattr(given, f) == pytest.approx(getattr(inside, f), rel=1e-6)
    with pytest.raises(ValueError, match="coarse_jacobian needs coarse_x"):
        solve_state_evolution(p, mc=MC, x0=c.x, coarse_jacobian=grad)
    with pytest.raises(ValueError, match="coarse_jacobian must be a finite"):
        solve_state_evolution(p, coarse_jacobian=grad[:3], **kw)
