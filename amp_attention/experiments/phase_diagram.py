"""Phase diagrams of the SE over an alpha x lam grid, with continuation and hysteresis (issue 6).

Work unit: one *sweep* -- a row of fixed lam traversed in alpha, either upwards
(from the smallest alpha, first point from the informative start) or downwards
(from the largest alpha, first point from the uninformative start); every
later point starts from its neighbour's fixed point (continuation).  Each
point of each sweep is written atomically to ``OUT/points/`` as it finishes,
so an interrupted diagram resumes where every sweep stopped (a resumed sweep
warm-starts from its last stored point) and nothing finished is recomputed.

The two sweeps give each grid point two fixed points.  When both converged and
differ (relative distance of (m, q, V) above ``hysteresis_rtol``) by more than
their tolerances allow (the criterion of the SE's ``metastable``: 1e3 times the
larger of ``tol`` and their residuals, plus 1e-7), on a problem that may have
several fixed points, the point has multiple fixed points (hysteresis):
``hysteresis`` is set, the reported values are those of the lower training loss
(the ERM minimiser), the other branch's values are kept as ``alt_*``.  Branches
that differ by more than ``hysteresis_rtol`` but not that much, or at all on a
convex problem (whose fixed point is unique), leave the point not converged.

Sweeps run through any :class:`concurrent.futures.Executor`: local processes
by default, or a Dask cluster's ``client.get_executor()``; the progress bar
counts finished sweeps.  The assembled diagram is one ``.npz`` (arrays, grid
index order ``[i_alpha, j_lam]``) and a ``.json`` with the parameters, field
descriptions, per-point status and the thresholds; :func:`run_phase_diagram_experiment`
adds the thresholds, the Bayes-optimal baseline and the figure (``amp-attention
phase-diagram``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from amp_attention.solvers.state_evolution import (COARSE_TOL, MonteCarloOptions,
                                                   StateEvolution, relative_distance,
                                                   same_fixed_point, shared_cv_reference,
                                                   coarse_level_jacobian, solve_coarse_level,
                                                   solve_state_evolution,
                                                   unique_fixed_point)

from ..checks import real_grid
from ..files import atomic_write_json, atomic_write_npz, ensure_directory, read_checkpoint
from ..jsonsafe import json_safe, nonfinite_notes
from ..progress import progress_bar
from ..runner import Checkpoints, run_checkpointed, run_tasks
from ..spec import Problem
from .thresholds import KEYS as THRESHOLD_KEYS, threshold_row

#: fields stored per point and in the npz (SE result names)
FIELDS = ("test_error", "train_error", "matrix_mse", "rank_fraction", "trace_per_d", "loss",
          "m", "q", "V")
#: what a point file must hold to count as finished (else it is moved aside and recomputed)
POINT_KEYS = FIELDS + ("converged", "status", "iterations")
FIELD_HELP = {
    "test_error": "clean test error e_test = E||g(h(S0)) - g(h(Shat))||^2",
    "train_error": "train error (1/n) sum ||y - yhat||^2",
    "matrix_mse": "||Shat - S0||_F^2 / d",
    "rank_fraction": "rank(Shat) / d",
    "trace_per_d": "Tr(Shat) / d",
    "loss": "training loss R/n at the fixed point",
    "m": "Tr(S0 Shat)/d", "q": "Tr(Shat^2)/d", "V": "SE variance parameter",
}
DIRECTIONS = ("up", "down")


def grid(lo: float, hi: float, n: int, spacing: str) -> tuple[float, ...]:
    """n points from lo to hi, ``linear`` or ``log`` spaced (the CLI's grids)."""
    if spacing not in ("linear", "log"):
        raise ValueError(f"spacing must be 'linear' or 'log', got {spacing!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"number of grid points must be an integer >= 1, got {n!r}")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"grid bounds must be finite with lo <= hi, got {lo!r}, {hi!r}")
    if spacing == "log":
        if lo <= 0:
            raise ValueError(f"a log grid needs lo > 0, got {lo!r}")
        return tuple(float(v) for v in np.geomspace(lo, hi, int(n)))
    return tuple(float(v) for v in np.linspace(lo, hi, int(n)))


@dataclass(frozen=True)
class PhaseDiagramPlan:
    """The problem (its alpha and lam are replaced by the grid values), the grids,
    SE options (``tol``, ``max_iter``, RQMC ``mc`` for non-linear channels) and the
    relative distance above which two branches count as different fixed points."""

    problem: Problem
    alphas: tuple[float, ...]
    lams: tuple[float, ...]
    tol: float = 1e-9
    max_iter: int = 300
    mc: MonteCarloOptions | None = None
    hysteresis_rtol: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("alphas", "lams"):
            object.__setattr__(self, name, real_grid(name, getattr(self, name)))
        if any(not (math.isfinite(a) and a > 0) for a in self.alphas):
            raise ValueError(f"alphas must be numbers > 0, got {self.alphas!r}")
        if any(not (math.isfinite(x) and x >= 0) for x in self.lams):
            raise ValueError(f"lams must be numbers >= 0, got {self.lams!r}")
        if list(self.alphas) != sorted(set(self.alphas)):
            raise ValueError("alphas must be strictly increasing")
        if not (math.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be in (0, inf), got {self.tol!r}")
        if int(self.max_iter) != self.max_iter or self.max_iter < 1:
            raise ValueError(f"max_iter must be an integer >= 1, got {self.max_iter!r}")

    def at(self, i: int, j: int) -> Problem:
        learner = dataclasses.replace(self.problem.learner, lam=self.lams[j])
        return dataclasses.replace(self.problem, alpha=self.alphas[i], learner=learner)

    def to_dict(self) -> dict:
        return {"problem": _grid_free(self.problem.to_dict()), "alphas": list(self.alphas),
                "lams": list(self.lams), "tol": self.tol, "max_iter": self.max_iter,
                "mc": None if self.mc is None else dataclasses.asdict(self.mc),
                "hysteresis_rtol": self.hysteresis_rtol}


def _grid_free(problem: dict) -> dict:
    """The problem's parameters without alpha and lam, which the grid sets per point."""
    return {k: v for k, v in problem.items() if k not in ("alpha", "lam")}


def _same_plan(old: dict | None, new: dict) -> bool:
    # directories written before the grid-free record kept the placeholder alpha and lam
    if not isinstance(old, dict) or not isinstance(old.get("problem"), dict):
        return False
    # compared as written: strict JSON (a non-finite value is null there)
    return {**old, "problem": _grid_free(old["problem"])} == json.loads(json.dumps(json_safe(new)))


def point_store(out: Path | str) -> Checkpoints:
    """The diagram's finished points, ``out/points/<key>.json``, their FIELDS and residual
    read back as floats (strict JSON stores NaN and infinities, e.g. of a point that
    diverged, as null: NaN here)."""
    return Checkpoints(str(Path(out) / "points"), POINT_KEYS, FIELDS + ("residual",))


def point_key(j: int, direction: str, i: int) -> str:
    return f"lam{j:04d}_{direction}_a{i:04d}"


def point_file(out: Path, j: int, direction: str, i: int) -> Path:
    return point_store(out).path(point_key(j, direction, i))


def _order(plan: PhaseDiagramPlan, direction: str) -> list[int]:
    idx = list(range(len(plan.alphas)))
    return idx if direction == "up" else idx[::-1]


def run_sweep(plan: PhaseDiagramPlan, out: str, j: int, direction: str) -> int:
    """One sweep (module-level, so process pools and Dask can pickle it); returns
    the number of points it computed (finished ones on disk are skipped)."""
    store = point_store(out)
    computed = 0
    done: list[tuple[float, np.ndarray]] = []  # (alpha, fixed point) of the converged points
    for i in _order(plan, direction):
        key = point_key(j, direction, i)
        rec = store.read(key)
        if rec is not None:
            if rec["converged"]:
                done = [*done[-1:], (plan.alphas[i], np.array([rec["m"], rec["q"], rec["V"]]))]
            continue
        problem = plan.at(i, j)
        if done:  # same target along the grid: a fixed point is a valid start
            r = _continued(problem, plan, done, plan.alphas[i])
        else:
            r = solve_state_evolution(problem, tol=plan.tol, max_iter=plan.max_iter, mc=plan.mc,
                                      start="informative" if direction == "up" else "uninformative",
                                      finite_size_check=False)
        rec = _record(plan, i, j, direction, r)
        store.write(key, rec)
        computed += 1
        if r.success:  # a failed point leaves the sweep on its last converged ones
            done = [*done[-1:], (plan.alphas[i], np.array([r.m, r.q, r.V]))]
    return computed


def solved_by_rows(plan: PhaseDiagramPlan) -> bool:
    """True where the plan's SE has a coarse RQMC level (a non-linear channel with
    mc.coarse_log2_n < mc.log2_n): a lam row is then one task (:func:`run_row`), both
    sweeps on the coarse level first; else each sweep is one (:func:`run_sweep`)."""
    return StateEvolution(plan.at(0, 0), plan.mc).coarse() is not None


def run_row(plan: PhaseDiagramPlan, out: str, j: int) -> int:
    """Both sweeps of lam row ``j`` on two RQMC levels (module-level, picklable); returns
    the number of points it computed (finished ones on disk are skipped).

    1. Both sweeps on the coarse level (its first 2^coarse_log2_n points per replica:
       cheap), continued from point to point as :func:`run_sweep` does.
    2. The up branch refined on all points at every alpha: one fine solve from the coarse
       fixed point with the coarse Jacobian there (``solve_state_evolution(coarse_x=)``),
       started at the coarse point shifted by the previous point's (fine - coarse): under
       common random numbers the coarse level's error varies smoothly along the row.
    3. The down branch: where its coarse fixed point is the up branch's (relative distance
       ~1e-3 at most, against O(0.1-1) between distinct fixed points, as for the two starts
       of one SE point) and the up branch converged, its record is the up branch's
       (``level`` "coarse"; a failed refinement is not repeated either); elsewhere it is
       refined like the up branch.
    A point whose coarse solve failed is solved as :func:`run_sweep` solves it; one whose
    refinement from a coarse fixed point failed keeps that failure (status, residual).  The coarse
    level is deterministic, so a resumed row recomputes it and continues identically.
    """
    store = point_store(out)
    order = {dr: _order(plan, dr) for dr in DIRECTIONS}
    if all(store.read(point_key(j, dr, i)) is not None for dr in DIRECTIONS for i in order[dr]):
        return 0
    ses = [StateEvolution(plan.at(i, j), plan.mc) for i in range(len(plan.alphas))]
    grads: dict = {}  # (direction, i) -> coarse Jacobian at that coarse fixed point
    coarse = {}
    for dr in DIRECTIONS:
        coarse[dr] = _coarse_sweep(plan, ses, dr, grads, coarse.get("up"))
    computed = 0
    for dr in DIRECTIONS:
        done: list[tuple[float, np.ndarray]] = []  # fine fixed points, as in run_sweep
        shift = None  # fine - coarse at the last refined point of this branch
        for i in order[dr]:
            key = point_key(j, dr, i)
            rc = coarse[dr][i]
            rec = store.read(key)
            if rec is None:
                rec = _row_point(plan, store, j, dr, i, rc, coarse["up"][i], shift, done,
                                 grads.get((dr, i)))
                store.write(key, rec)
                computed += 1
            if rec["converged"]:
                x = np.array([rec["m"], rec["q"], rec["V"]])
                done = [*done[-1:], (plan.alphas[i], x)]
                shift = x - rc.x if rc.converged else None
    return computed


def _coarse_sweep(plan: PhaseDiagramPlan, ses: list, direction: str, grads: dict,
                  up: dict | None = None) -> dict:
    """{i: coarse-level fixed-point report} of one sweep over the row's SE maps ``ses``.

    Continued: each point starts on the line through the last two fixed points and solves
    by quasi-Newton steps with a neighbour's coarse Jacobian (:func:`solve_coarse_level`;
    Anderson where they fail): the previous point's, or on the down sweep the up sweep's
    at the same alpha (the same map; where the branches coincide, the same fixed point).
    ``grads[(direction, i)]``: the coarse Jacobian at each fixed point of the up sweep, and
    of the down sweep where it is not the up sweep's (the points that are refined); the
    point's refinement takes it (``solve_state_evolution(coarse_jacobian=)``)."""
    out = {}
    done: list[tuple[float, np.ndarray]] = []
    last_grad = None
    for i in _order(plan, direction):
        se = ses[i]
        starts = [se.starts()["informative" if direction == "up" else "uninformative"]]
        if done:
            starts = [done[-1][1]]
            line = _line_start(done, plan.alphas[i])
            if line is not None and se.valid(line):
                starts.insert(0, line)
        jac = None
        if done:  # a continued start (the first point's is far: Anderson's domain)
            jac = grads.get(("up", i)) if direction == "down" else None
            jac = jac if jac is not None else last_grad
        for x0 in starts:
            rep = solve_coarse_level(se, x0, tol=plan.tol, max_iter=plan.max_iter, jacobian=jac)
            if rep.converged:
                break
        out[i] = rep
        if rep.converged:
            done = [*done[-1:], (plan.alphas[i], rep.x)]
            if up is None or not (up[i].converged and same_fixed_point(
                    up[i].x, rep.x, 0.1 * COARSE_TOL)):
                grads[(direction, i)] = coarse_level_jacobian(se, rep.x)
            last_grad = grads.get((direction, i), grads.get(("up", i)))
    return out


def _row_point(plan: PhaseDiagramPlan, store: Checkpoints, j: int, direction: str, i: int,
               rc, rc_up, shift, done: list, grad: np.ndarray | None = None) -> dict:
    """The record of one point of :func:`run_row`'s branch ``direction`` (``grad``: the
    coarse Jacobian at rc's fixed point, when the sweep computed it)."""
    if direction == "down" and rc.converged and rc_up.converged and same_fixed_point(
            rc_up.x, rc.x, 0.1 * COARSE_TOL):
        up = store.read(point_key(j, "up", i))
        if up is not None:
            # the same coarse fixed point: the same fine solve, which would end as the up
            # branch's did (a failure included: a point the fine level cannot resolve costs
            # its max_iter evaluations once, not twice)
            status = ("converged (the down sweep's coarse fixed point is the up sweep's: the "
                      "up branch's refined values)" if up["converged"] else
                      "not converged (the down sweep's coarse fixed point is the up sweep's, "
                      f"whose refinement failed: {up['status']})")
            return {**up, "direction": "down", "level": "coarse", "iterations": 0,
                    "iterations_coarse": rc.iterations, "seconds": 0.0, "status": status}
    problem = plan.at(i, j)
    kw = dict(tol=plan.tol, max_iter=plan.max_iter, mc=plan.mc, finite_size_check=False)
    if direction == "down" and plan.mc is not None and plan.mc.step_at == "start":
        # the two branches' fixed points are compared at their residuals: near the up
        # branch's, the down branch's fine level solves the up branch's map
        kw["cv_reference"] = shared_cv_reference(rc_up, rc)
    r = None
    if rc.converged:
        start = rc.x if shift is None else rc.x + shift
        for x0 in ((start, rc.x) if shift is not None else (rc.x,)):
            try:
                r = solve_state_evolution(problem, x0=x0, coarse_x=rc.x,
                                          coarse_jacobian=grad, **kw)
            except ValueError:  # the shifted start left the domain
                continue
            break
    if r is None:  # no coarse fixed point to refine: solved as run_sweep solves it
        if done:
            r = _continued(problem, plan, done, plan.alphas[i])
        else:
            r = solve_state_evolution(problem, start="informative" if direction == "up"
                                      else "uninformative", **kw)
    return {**_record(plan, i, j, direction, r), "level": "fine",
            "iterations_coarse": rc.iterations + r.iterations_coarse}


def _record(plan: PhaseDiagramPlan, i: int, j: int, direction: str, r) -> dict:
    """A point file's content from the SE result r."""
    return {"i": i, "j": j, "direction": direction, "alpha": plan.alphas[i],
            "lam": plan.lams[j], **{f: getattr(r, f) for f in FIELDS}, "converged": r.converged,
            "status": r.summary, "iterations": r.iterations, "residual": r.residual,
            "start": r.start, "seconds": r.seconds}


def _continued(problem: Problem, plan: PhaseDiagramPlan, done: list, alpha: float):
    """The SE at ``alpha`` from its neighbours' fixed points: the line through the last
    two (first-order continuation: the start is O(h^2) off instead of O(h), which saves
    about a third of the iterations), or the last one alone (also when the line's point
    is not a valid start, or the solve from it fails)."""
    kw = dict(tol=plan.tol, max_iter=plan.max_iter, mc=plan.mc, finite_size_check=False)
    guess = _line_start(done, alpha)
    if guess is not None:
        try:
            r = solve_state_evolution(problem, x0=guess, **kw)
        except ValueError:  # the line left the domain (q < 0, V < 0 or m^2 > q Q0)
            r = None
        if r is not None and r.success:
            return r
    return solve_state_evolution(problem, x0=done[-1][1], **kw)


def _line_start(done: list, alpha: float) -> np.ndarray | None:
    """The continuation start at ``alpha`` on the line through the last two fixed points
    ``done`` = [(alpha, x), (alpha, x)] (None with fewer than two; it may leave the domain)."""
    if len(done) < 2:
        return None
    (a2, x2), (a1, x1) = done[-2:]
    return x1 + (x1 - x2) * (alpha - a1) / (a1 - a2)


class OutputDirectoryError(ValueError):
    """The output directory cannot hold the diagram: a file stands where a directory
    must, or it holds a diagram of other parameters (:func:`run_phase_diagram`)."""


def run_phase_diagram(
    plan: PhaseDiagramPlan,
    out: Path,
    *,
    executor: cf.Executor | None = None,
    workers: int = 2,
    progress: Callable[[Iterable, int], Iterable] | None = None,
    thresholds: dict | None = None,
) -> dict:
    """Run (or resume) every sweep of ``plan`` into ``out`` and assemble the diagram.

    ``executor``: any concurrent.futures executor (e.g. a Dask client's
    ``get_executor()``); default a local process pool of ``workers`` (``workers
    = 0``: in this process, no pool).  ``progress(iterable, total)`` wraps the
    stream of finished sweeps (a progress bar).  ``thresholds`` (JSON-ready) is
    stored in the metadata.  Returns the metadata dict, with ``computed``: the
    number of points this call solved.  :class:`OutputDirectoryError` (a ValueError)
    when ``out`` cannot hold the diagram.
    """
    out = Path(out)
    try:
        ensure_directory(out / "points")
    except ValueError as exc:  # a file where a directory must be
        raise OutputDirectoryError(str(exc)) from None
    meta_path = out / "phase_diagram.json"
    plan_dict = plan.to_dict()
    old = read_checkpoint(meta_path, ("plan",))
    if old is not None:
        if not _same_plan(old.get("plan"), plan_dict):
            raise OutputDirectoryError(f"{out} holds a phase diagram of other parameters; use "
                                       "another output directory")
    atomic_write_json(meta_path, {"plan": plan_dict, "complete": False})
    store = point_store(out)
    missing = {(j, dr) for j in range(len(plan.lams)) for dr in DIRECTIONS
               if not all([store.read(point_key(j, dr, i)) is not None
                           for i in range(len(plan.alphas))])}
    if solved_by_rows(plan):
        fn, tasks = run_row, [(plan, str(out), j) for j in range(len(plan.lams))
                              if any((j, dr) in missing for dr in DIRECTIONS)]
    else:
        fn, tasks = run_sweep, [(plan, str(out), j, dr) for j in range(len(plan.lams))
                                for dr in DIRECTIONS if (j, dr) in missing]
    computed = sum(run_tasks(fn, tasks, executor=executor, workers=workers, progress=progress))
    meta = assemble(plan, out, thresholds)
    meta["computed"] = computed
    return meta


def assemble(plan: PhaseDiagramPlan, out: Path, thresholds: dict | None = None) -> dict:
    """Combine the two branches per point; write ``phase_diagram.npz`` and ``.json``."""
    out = Path(out)
    na, nl = len(plan.alphas), len(plan.lams)
    arrays = {f: np.full((na, nl), np.nan) for f in FIELDS}
    alt = {f"alt_{f}": np.full((na, nl), np.nan) for f in ("test_error", "train_error", "loss")}
    converged = np.zeros((na, nl), dtype=bool)
    hysteresis = np.zeros((na, nl), dtype=bool)
    iterations = np.zeros((na, nl), dtype=np.int64)
    branch = np.full((na, nl), "", dtype=object)
    status = np.full((na, nl), "", dtype=object)
    unique = unique_fixed_point(plan.problem)  # convexity does not depend on alpha or lam
    store = point_store(out)
    for i in range(na):
        for j in range(nl):
            recs = {dr: store.read(point_key(j, dr, i)) for dr in DIRECTIONS}
            ok = [r for r in recs.values() if r["converged"]]
            iterations[i, j] = sum(r["iterations"] for r in recs.values())
            if not ok:
                status[i, j] = "not converged: " + "; ".join(
                    f"{dr}: {r['status']}" for dr, r in recs.items())
                best = recs["up"]
            else:
                best = min(ok, key=lambda r: r["loss"])
                converged[i, j] = True
                status[i, j] = "converged"
                if len(ok) == 2:
                    a, b = (np.array([r[k] for k in ("m", "q", "V")]) for r in ok)
                    dist = relative_distance(a, b)
                    verdict = _branches(plan, ok, dist, unique)
                    if verdict == "two":
                        hysteresis[i, j] = True
                        other = ok[1] if best is ok[0] else ok[0]
                        for f in ("test_error", "train_error", "loss"):
                            alt[f"alt_{f}"][i, j] = other[f]
                        status[i, j] = (f"two fixed points (relative distance {dist:.2e}); "
                                        f"reported: the {best['direction']} branch, lower loss")
                    elif verdict:  # the branches disagree, but not as two fixed points
                        converged[i, j] = False
                        status[i, j] = f"not converged: {verdict}"
                elif len(ok) == 1:
                    status[i, j] = f"converged on the {best['direction']} branch only"
            branch[i, j] = best["direction"]
            for f in FIELDS:
                arrays[f][i, j] = best[f]
    atomic_write_npz(out / "phase_diagram.npz", alpha=np.array(plan.alphas),
                     lam=np.array(plan.lams), converged=converged, hysteresis=hysteresis,
                     iterations=iterations, branch=branch.astype(str), **arrays, **alt)
    meta = {"plan": plan.to_dict(), "complete": True, "fields": FIELD_HELP,
            "layout": "arrays of shape (len(alpha), len(lam)), index [i_alpha, j_lam]",
            "n_points": na * nl, "n_converged": int(converged.sum()),
            "n_hysteresis": int(hysteresis.sum()),
            "status": [[status[i, j] for j in range(nl)] for i in range(na)],
            "thresholds": thresholds or {}}
    atomic_write_json(out / "phase_diagram.json", meta)
    return meta


def _branches(plan: PhaseDiagramPlan, recs: list[dict], dist: float, unique: str) -> str:
    """How two converged branches at one point relate, given their relative distance
    ``dist``: '' (one fixed point: within ``hysteresis_rtol``), 'two' (two fixed points:
    the problem may have several and the distance exceeds what the solves' tolerances
    allow, as in :func:`solve_state_evolution`'s ``metastable``), else why the point is
    not converged (the branches disagree, but no more than their residuals allow, or on
    a problem whose fixed point is unique: neither reached it to the diagram's
    resolution)."""
    if dist <= plan.hysteresis_rtol:
        return ""
    # each solve is only as close to its fixed point as its residual allows
    reached = max([plan.tol] + [float(r.get("residual", plan.tol)) for r in recs])
    if unique:
        return (f"the up and down branches end {dist:.2e} apart (relative) although the "
                f"fixed point is unique, a {unique}: lower tol or raise max_iter")
    if same_fixed_point(*(np.array([r[k] for k in ("m", "q", "V")]) for r in recs), reached):
        return (f"the up and down branches end {dist:.2e} apart (relative), within what "
                f"their residuals (up to {reached:.1e}) allow: one or two fixed points is "
                "not resolved; lower tol")
    return "two"


def load_phase_diagram(out: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(metadata, arrays) of an assembled diagram in ``out``."""
    out = Path(out)
    meta = json.loads((out / "phase_diagram.json").read_text())
    with np.load(out / "phase_diagram.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return meta, arrays


#: arrays added by :func:`bayes_baseline` (per alpha, or [i_alpha, j_lam] for the ratios)
BAYES_FIELD_HELP = {
    "bayes_test_error": "Bayes-optimal test error of the posterior-mean predictor, per alpha "
                        "(lam-free; docs/theory.md section 15)",
    "bayes_matrix_mse": "Bayes-optimal MMSE ||E[S0|data] - S0||_F^2 / d, per alpha",
    "test_error_over_bayes": "ERM test error / Bayes-optimal test error (>= 1; NaN where the "
                             "Bayes-optimal estimator recovers S0 perfectly)",
    "matrix_mse_over_bayes": "ERM matrix MSE / Bayes-optimal MMSE (>= 1; NaN where the "
                             "Bayes-optimal estimator recovers S0 perfectly)",
}


#: what a Bayes-optimal point file holds
BAYES_KEYS = ("test_error", "matrix_mse", "converged", "perfect_recovery", "status")


def bayes_point_file(out: Path, i: int) -> Path:
    return Path(out) / "points" / f"bayes_a{i:04d}.json"


def bayes_task(plan: PhaseDiagramPlan, i: int, mc) -> dict:
    """The record of the Bayes-optimal SE at alpha_i (a task of
    :func:`~amp_attention.runner.run_checkpointed`)."""
    from amp_attention.solvers.bayes_optimal import solve_bayes_optimal

    r = solve_bayes_optimal(plan.at(i, 0), tol=min(plan.tol, 1e-10), mc=mc)
    return {"alpha": plan.alphas[i], "test_error": r.test_error, "matrix_mse": r.matrix_mse,
            "converged": bool(r.converged), "perfect_recovery": bool(r.perfect_recovery),
            "status": r.status.value, "iterations": r.iterations,
            "mc_stderr": dict(r.mc_stderr or {}),
            "mc": None if mc is None else dataclasses.asdict(mc)}


def bayes_baseline(plan: PhaseDiagramPlan, out: Path, *, mc=None,
                   progress: Callable[[Iterable, int], Iterable] | None = None) -> dict:
    """The Bayes-optimal SE at every alpha of an assembled diagram in ``out`` and the
    ERM/BO ratios (:data:`BAYES_FIELD_HELP`), added to ``phase_diagram.npz`` and
    ``.json``.  The BO estimator does not depend on lam or on the learner: one solve
    per alpha, each saved as ``points/bayes_aXXXX.json`` and resumed.  ``mc``: the
    BayesMonteCarloOptions of channels without a closed form.  Returns the metadata."""
    out = Path(out)
    meta, arrays = load_phase_diagram(out)
    keys = BAYES_KEYS
    mc_dict = None if mc is None else dataclasses.asdict(mc)
    store = Checkpoints(str(out / "points"), BAYES_KEYS + ("mc",), ("test_error", "matrix_mse"))
    alpha_of = {f"bayes_a{i:04d}": a for i, a in enumerate(plan.alphas)}
    tasks = {key: (plan, i, mc) for i, key in enumerate(alpha_of)}
    records, _ = run_checkpointed(
        bayes_task, tasks, store, progress=progress,
        accept=lambda key, rec: rec["mc"] == mc_dict and rec.get("alpha") == alpha_of[key])
    recs = list(records.values())
    solved = np.array([r["converged"] and not r["perfect_recovery"] for r in recs])
    new = {}
    for qty in ("test_error", "matrix_mse"):
        bo = np.array([r[qty] for r in recs], dtype=float)
        new[f"bayes_{qty}"] = bo
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = arrays[qty] / bo[:, None]
        new[f"{qty}_over_bayes"] = np.where(solved[:, None] & (bo[:, None] > 0), ratio, np.nan)
    arrays.update(new)
    atomic_write_npz(out / "phase_diagram.npz", **arrays)
    meta["fields"] = {**meta.get("fields", {}), **BAYES_FIELD_HELP}
    meta["bayes"] = {"alpha": list(plan.alphas),
                     **{k: [r[k] for r in recs] for k in keys + ("mc_stderr",)}}
    atomic_write_json(out / "phase_diagram.json", meta)
    return meta


@dataclass(frozen=True)
class PhaseDiagramRun:
    """What :func:`run_phase_diagram_experiment` wrote, for a summary."""

    #: the metadata of :func:`run_phase_diagram` (``computed``: points solved by this call)
    meta: dict
    #: the thresholds of the problem (:func:`~amp_attention.experiments.thresholds.threshold_row`;
    #: alpha_interp is inf for noiseless labels, null with a note in the JSON)
    thresholds: dict
    #: the Bayes-optimal block of the metadata (per alpha), None without the baseline
    bayes: dict | None = None

    @property
    def converged(self) -> bool:
        """Every grid point converged, and every Bayes-optimal solve (perfect recovery,
        MMSE = 0 below the resolution, is an answer, not a failure)."""
        bayes = self.bayes or {"converged": [], "perfect_recovery": []}
        return self.meta["n_converged"] == self.meta["n_points"] and all(
            c or pr for c, pr in zip(bayes["converged"], bayes["perfect_recovery"]))


def run_phase_diagram_experiment(plan: PhaseDiagramPlan, out: Path, *, bayes: bool = False,
                                 bayes_mc=None, figure_format: str = "png",
                                 title: str | None = None, executor: cf.Executor | None = None,
                                 workers: int = 2, progress: bool = True) -> PhaseDiagramRun:
    """The diagram of ``plan`` in ``out`` (:func:`run_phase_diagram`, with the thresholds
    of the problem in its metadata), with ``bayes`` its Bayes-optimal baseline
    (:func:`bayes_baseline`, ``bayes_mc`` its Monte-Carlo options), and the figure
    ``phase_diagram.<figure_format>`` (png, pdf or svg; heatmaps with the thresholds
    drawn, and the ERM / Bayes-optimal ratios with ``bayes``) with ``title``.
    ``progress``: bars of the finished sweeps (lam rows where :func:`solved_by_rows`) and
    Bayes-optimal solves."""
    from .. import plotting

    out = Path(out)
    thresholds = threshold_row(plan.problem)
    unit = "lam rows" if solved_by_rows(plan) else "sweeps"
    meta = run_phase_diagram(plan, out, executor=executor, workers=workers,
                             progress=lambda it, n: progress_bar(it, total=n, desc=unit,
                                                                 show=progress),
                             # JSON: alpha_interp = inf (noiseless) is null + a note
                             thresholds=nonfinite_notes(thresholds, THRESHOLD_KEYS))
    fields = ("test_error", "train_error", "rank_fraction", "matrix_mse")
    vlines = {"alpha_interp (lam -> 0+)": thresholds["alpha_interp"],
              "alpha_PR (Delta = 0, lam -> 0+)": thresholds["alpha_PR"]}
    baseline = None
    if bayes:
        baseline = bayes_baseline(plan, out, mc=bayes_mc,
                                  progress=lambda it, n: progress_bar(
                                      it, total=n, desc="Bayes-optimal", show=progress))["bayes"]
        fields += ("test_error_over_bayes", "matrix_mse_over_bayes")
        vlines["alpha_PR Bayes-optimal"] = thresholds.get("alpha_PR_bayes")
    _, arrays = load_phase_diagram(out)
    plotting.plot_phase_diagram(plan.alphas, plan.lams, arrays,
                                out / f"phase_diagram.{figure_format}", vlines=vlines,
                                fields=fields,
                                log_fields=tuple(f for f in fields if f != "rank_fraction"),
                                note=("grey in the ratio panels: the Bayes-optimal estimator "
                                      "recovers S0 (ratio undefined)") if bayes else None,
                                title=title)
    return PhaseDiagramRun(meta, thresholds, baseline)
