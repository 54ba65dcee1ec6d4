"""How and how big a run is: the --threads, --workers/--scheduler/--dask-local and
--allow-large flags, the size guards of finite-d runs and grids, and the executor of a
sweep (:func:`execution`)."""

from __future__ import annotations

import argparse
import contextlib
import math
from typing import TYPE_CHECKING

from .common import CLIError, check_min_int, one_line, refuse_given

if TYPE_CHECKING:
    from ..spec import Problem


#: --workers above this many per CPU need --allow-large (local processes never exceed the
#: number of tasks either: amp_attention.runner.run_tasks)
WORKERS_PER_CPU = 4


def add_allow_large(group) -> None:
    group.add_argument("--allow-large", action="store_true",
                       help="run even when the estimated size (memory of a finite-d run, "
                            "points of a grid, --workers beyond "
                            f"{WORKERS_PER_CPU} x the CPU count) exceeds the guard (default: "
                            "refuse with exit 2 and say what is needed)")


#: bytes held per point of a sweep's grid while it runs and is assembled (its fields in
#: the result arrays, its JSON record, its point file name)
BYTES_PER_GRID_POINT = 4096


def _count(points: int) -> str:
    return str(points) if points < 10**15 else f"{points:.3g}"


def grid_count(flag: str, n: float, minimum: int = 1) -> int:
    """The N of a ``LO HI N`` grid flag as an int, or exit 2 naming ``flag``."""
    if not (math.isfinite(n) and n == int(n) and n >= minimum):
        raise CLIError(f"argument {flag}: number of grid points N must be an integer >= "
                       f"{minimum}, got {n!r}")
    return int(n)


def check_grid_size(flag: str, points: int, max_points: int, seconds_per_point: float,
                    workers: int, allow_large: bool, *, what: str = "grid points",
                    fix: str = "use a coarser grid") -> None:
    """Refuse a grid before any of it is built: always when its own arrays would not fit
    in memory; beyond ``max_points`` (with the time it would take) unless --allow-large.
    ``what`` names the points in the message, ``fix`` says what to do."""
    from ..resources import memory_shortfall

    short = memory_shortfall(BYTES_PER_GRID_POINT * points)
    if short:
        raise CLIError(f"argument {flag}: {_count(points)} {what}: the sweep {short}; {fix}")
    if points <= max_points or allow_large:
        return
    hours = points * seconds_per_point / max(1, workers) / 3600
    raise CLIError(f"argument {flag}: {_count(points)} {what} (about {hours:.3g} h on "
                   f"{max(1, workers)} worker(s)) exceed {max_points}; {fix} or pass "
                   "--allow-large")


#: finite-d runs (seeds) one command trains without --allow-large
MAX_RUNS = 10_000


def check_run_count(flag: str, runs: int, seconds_per_run: float, args: argparse.Namespace
                    ) -> None:
    """Refuse a number of finite-d runs (seeds x alphas x d) before any list of them is
    built: always when their records would not fit in memory, beyond MAX_RUNS unless
    --allow-large (a billion seeds ran out of memory after 27 s)."""
    check_grid_size(flag, runs, MAX_RUNS, seconds_per_run, getattr(args, "workers", 1) or 1,
                    getattr(args, "allow_large", False), what="finite-d runs",
                    fix="use fewer seeds")


def check_size(args: argparse.Namespace, problem: Problem, ds, alphas=None,
               flag: str = "--d", n_test: int | None = None) -> None:
    """Refuse (exit 2) a finite-d run whose memory estimate does not fit, unless
    --allow-large (amp_attention.resources); ``alphas`` default (problem.alpha,);
    ``n_test`` the test samples asked for (--n-test; default the runs' own)."""
    from ..data import n_samples
    from ..resources import finite_d_memory, memory_shortfall

    if n_test is not None:  # test samples alone, whatever --allow-large says
        d = max(ds)
        why = memory_shortfall(8 * n_test * problem.task.L * d)
        if why:
            raise CLIError(f"argument --n-test: {_count(n_test)} test samples of "
                           f"{problem.task.L} x {d} tokens {why}; lower --n-test")
    if getattr(args, "allow_large", False):
        return
    alpha = max(alphas) if alphas else problem.alpha
    alpha_flag = "--alphas" if alphas else "--alpha"
    penalty = problem.learner.penalty
    kappa = problem.learner.kappa if penalty.uses_kappa else 0.0
    kappa0 = getattr(problem.target, "kappa0", 0.0)
    for d in sorted(ds, reverse=True):
        n = n_samples(alpha, d)
        # the rows of the trained weights (W, or U and V): p = kappa d each
        p = penalty.weights_shape(d, math.ceil(min(kappa, 1e15) * d))[0] if kappa else 0
        p0 = math.ceil(min(kappa0, 1e15) * d)
        why = memory_shortfall(finite_d_memory(n, problem.task.L, d, p, p0, n_test))
        if why:
            flags = [flag, alpha_flag] + (["--L"] if problem.task.L > 1 else []) \
                + (["--kappa"] if kappa > 1 else []) + (["--kappa0"] if kappa0 > 1 else [])
            lower = ", ".join(flags[:-1]) + " or " + flags[-1]
            raise CLIError(f"argument {flag}: d = {d} (n = {n} samples of L = "
                           f"{problem.task.L} tokens, W of {p} x {d}"
                           + (f", W0 of {p0} x {d}" if p0 else "")
                           + f") {why}; lower {lower}, or pass --allow-large")


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """--threads: the thread policy of the computation (amp_attention.threads)."""
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="BLAS and Numba threads of this process; default: one BLAS "
                             "thread (stable on a shared machine: multi-threaded BLAS can run "
                             "10-50x slower next to another job) and Numba on every core with "
                             "dynamic scheduling; N >= 1 gives both N threads (faster for "
                             "GEMM-bound runs on a dedicated machine). Sweep workers take one "
                             "BLAS thread and cores/workers Numba threads each "
                             "(docs/performance.md, Threads)")


def add_execution_flags(group, default_workers: int, what: str) -> None:
    """--workers, --scheduler, --dask-local: where the independent ``what`` of a sweep
    run (:func:`amp_attention.runner.run_tasks`)."""
    group.add_argument("--workers", type=int, default=default_workers,
                       help=f"local worker processes for the {what} (0: run in this process; "
                            f"at most {WORKERS_PER_CPU} x the CPUs unless --allow-large; never "
                            f"more processes than {what}) (default: {default_workers})")
    group.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"run the {what} on the Dask scheduler at ADDRESS "
                            "(e.g. tcp://host:8786; needs the [dask] extra)")
    group.add_argument("--dask-local", action="store_true",
                       help=f"run the {what} on a local Dask cluster of --workers processes")


#: seconds to wait for a Dask scheduler before giving up (exit 2)
SCHEDULER_TIMEOUT = 10


def workers_limit() -> int:
    """The largest --workers accepted without --allow-large: WORKERS_PER_CPU x the CPUs."""
    import os

    return WORKERS_PER_CPU * (os.cpu_count() or 1)


def check_execution(args: argparse.Namespace) -> None:
    """The execution flags' own constraints (call before any computation, and before
    any process starts: a million --workers once forked hundreds of processes)."""
    check_min_int("--workers", args.workers, 0)
    limit = workers_limit()
    if args.workers > limit and not getattr(args, "allow_large", False):
        raise CLIError(f"argument --workers: {args.workers} worker processes exceed the limit "
                       f"of {limit} ({WORKERS_PER_CPU} x {limit // WORKERS_PER_CPU} CPUs); "
                       f"use fewer, or pass --allow-large")
    if args.scheduler and args.dask_local:
        raise CLIError("argument --scheduler: not allowed with --dask-local")
    if args.scheduler:
        refuse_given(args, ("workers",), "not allowed with --scheduler (the cluster's workers "
                                          "run the tasks)")


@contextlib.contextmanager
def execution(args: argparse.Namespace):
    """(executor, workers) of the execution flags; a Dask client is closed on exit."""
    check_execution(args)
    if not (args.scheduler or args.dask_local):
        yield None, args.workers
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise CLIError("argument --scheduler/--dask-local: Dask is not installed; install the "
                       "extra: pip install 'amp-attention[dask]'") from None
    if args.scheduler:
        try:
            client = Client(args.scheduler, timeout=SCHEDULER_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise CLIError(f"argument --scheduler: no Dask scheduler answered at "
                           f"{args.scheduler!r} within {SCHEDULER_TIMEOUT} s "
                           f"({one_line(str(exc)) or type(exc).__name__})") from None
    else:
        client = Client(LocalCluster(n_workers=max(1, args.workers), threads_per_worker=1,
                                     processes=True, dashboard_address=None))
    try:
        yield client.get_executor(), args.workers
    finally:
        client.close()
