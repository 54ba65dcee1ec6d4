"""``amp-attention compare`` as an experiment: ERM at lam, ERM at the best lam and the
Bayes-optimal estimator over alpha (amp_attention.solvers.compare), one checkpoint
file per alpha through the common runner (resumable; local processes or Dask), and
the output directory (:func:`run_compare_experiment`: compare.csv, .json, the figure)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..checks import real_grid
from ..files import atomic_write_csv, atomic_write_text
from ..jsonsafe import strict_dumps
from ..progress import progress_bar
from ..runner import Checkpoints, run_checkpointed
from ..spec import Problem


@dataclass(frozen=True)
class ComparePlan:
    """The problem (its alpha is replaced by each of ``alphas``; its lam is the user's),
    the best-lam search range, the SE tolerance and the Monte-Carlo options of the ERM
    SE (``mc``) and of the Bayes-optimal channel side (``bayes_mc``)."""

    problem: Problem
    alphas: tuple[float, ...]
    lam_range: tuple[float, float] = (1e-4, 10.0)
    tol: float = 1e-9
    mc: Any = None
    bayes_mc: Any = None

    def __post_init__(self) -> None:
        lo, hi = self.lam_range
        if not (0 < lo < hi < float("inf")):
            raise ValueError(f"lam_range must satisfy 0 < LO < HI < inf, got {self.lam_range!r}")
        object.__setattr__(self, "alphas", real_grid("alphas", self.alphas))
        for a in self.alphas:
            dataclasses.replace(self.problem, alpha=float(a))  # validates every alpha

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "alphas": list(self.alphas),
                "lam_range": list(self.lam_range), "tol": self.tol,
                "mc": None if self.mc is None else dataclasses.asdict(self.mc),
                "bayes_mc": None if self.bayes_mc is None else dataclasses.asdict(self.bayes_mc)}


def compare_store(out: Path) -> Checkpoints:
    """The finished alphas: ``out/points/alpha_<alpha>.json``."""
    return Checkpoints(str(Path(out) / "points"), ("alpha", "params"))


def compare_key(alpha: float) -> str:
    return f"alpha_{alpha:.10g}"


def compare_task(plan: ComparePlan, alpha: float) -> dict[str, Any]:
    """The record of one alpha (module-level: picklable for process pools and Dask)."""
    from amp_attention.solvers.compare import compare_point

    with warnings.catch_warnings():
        # overflow in the free-convolution edge search at lam -> 0 (the search recovers)
        warnings.simplefilter("ignore", RuntimeWarning)
        row = compare_point(dataclasses.replace(plan.problem, alpha=float(alpha)),
                            plan.lam_range, tol=plan.tol, mc=plan.mc, bayes_mc=plan.bayes_mc)
    return {"alpha": alpha, "params": plan.to_dict(), "row": row}


def run_compare(plan: ComparePlan, out: Path | None, *, workers: int = 0,
                executor: cf.Executor | None = None, progress: bool = False) -> list[dict]:
    """Every alpha of ``plan`` (finished ones read back from ``out/points``), in order."""
    def bar(stream, total):
        return progress_bar(stream, total=total, desc="compare", unit="alpha") if progress else stream

    params = plan.to_dict()
    tasks = {compare_key(float(a)): (plan, float(a)) for a in plan.alphas}
    records, _ = run_checkpointed(compare_task, tasks, None if out is None else compare_store(out),
                                  accept=lambda _key, rec: rec["params"] == params,
                                  workers=workers, executor=executor, progress=bar)
    return [rec["row"] for rec in records.values()]


def compare_thresholds(problem: Problem) -> dict[str, float | None]:
    """Perfect-recovery thresholds of ERM (lam -> 0+, ``alpha_PR_erm``) and of the
    Bayes-optimal estimator (``alpha_PR_bayes``) for noiseless labels (None where the
    solver gives none); {} for noisy labels."""
    if problem.task.noise > 0:
        return {}
    from amp_attention.solvers.bayes_optimal import bayes_perfect_recovery_threshold
    from amp_attention.solvers.thresholds import perfect_recovery_threshold

    out: dict[str, float | None] = {}
    for name, fn in (("alpha_PR_erm", perfect_recovery_threshold),
                     ("alpha_PR_bayes", bayes_perfect_recovery_threshold)):
        try:
            r = fn(problem)
            out[name] = r.alpha if r.success else None
        except ValueError:
            out[name] = None
    return out


#: the legend of each threshold of :func:`compare_thresholds` in the figure
THRESHOLD_LABELS = {"alpha_PR_erm": r"$\alpha_{\rm PR}$ of ERM ($\lambda \to 0^+$)",
                    "alpha_PR_bayes": r"$\alpha_{\rm PR}$ Bayes-optimal"}


@dataclass(frozen=True)
class CompareRun:
    """The rows of :func:`run_compare` (one per alpha) and the perfect-recovery
    ``thresholds`` of :func:`compare_thresholds`."""

    rows: list
    thresholds: dict

    @property
    def not_converged(self) -> list[float]:
        """The alphas where one of the three estimators did not converge (the
        Bayes-optimal one at perfect recovery is an answer, MMSE = 0, without a
        residual <= tol)."""
        return [r["alpha"] for r in self.rows
                if not (r["erm_converged"] and r["erm_best_converged"]
                        and (r["bayes_converged"] or r.get("bayes_perfect_recovery")))]


def run_compare_experiment(plan: ComparePlan, out: Path, *, figure_format: str = "png",
                           title: str | None = None, cell: Callable[[Any], str] = str,
                           workers: int = 0, executor: cf.Executor | None = None,
                           progress: bool = False) -> CompareRun:
    """Run (or resume) :func:`run_compare` in directory ``out`` and write there
    ``compare.csv`` (a ``#`` line with the parameters, then one row per alpha; each
    cell written by ``cell``, the warnings joined by ``; ``), ``compare.json``
    (parameters and rows) and the figure ``compare.<figure_format>`` (png, pdf or svg)
    with ``title``.  The parameters are the plan's and the thresholds."""
    out = Path(out)
    rows = run_compare(plan, out, workers=workers, executor=executor, progress=progress)
    thresholds = compare_thresholds(plan.problem)
    params = plan.to_dict()
    params["thresholds"] = thresholds
    header = list(rows[0].keys())
    atomic_write_csv(out / "compare.csv", header,
                     [[cell("; ".join(r[k]) if k == "warnings" else r[k]) for k in header]
                      for r in rows],
                     preamble="# " + strict_dumps({"params": params}) + "\n")
    atomic_write_text(out / "compare.json", strict_dumps({"params": params, "rows": rows},
                                                  indent=1) + "\n")
    from .. import plotting

    plotting.plot_compare(rows, out / f"compare.{figure_format}", lam=plan.problem.learner.lam,
                          thresholds={THRESHOLD_LABELS[k]: v for k, v in thresholds.items()},
                          title=title)
    return CompareRun(rows, thresholds)

