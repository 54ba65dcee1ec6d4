"""Thread policy: how many BLAS and Numba threads a computation uses (docs/performance.md
"Threads").

Measured on 2-core machines shared with other jobs: OpenBLAS with one thread per core
is erratic as soon as another process runs (the same ERM took 2.9 s or 50 s; the
adjoint GEMM fell from 52 to 1.1 GF/s), because its threads split every GEMM
statically and spin-wait for each other while one of them is descheduled.  With one
BLAS thread the same run is stable and within a few % of its idle time.  Numba's
parallel loops (the channels' proximal solves) take their iterations in small chunks
on demand instead, so a busy core slows them down only in proportion.

The policy (``threads=None``, the default everywhere):

* BLAS: one thread;
* Numba: every core (``NUMBA_NUM_THREADS``), dynamic scheduling (chunks of
  ``NUMBA_CHUNK`` iterations handed out on demand);
* Numba regions and BLAS calls never overlap (the code alternates them), and GNU
  OpenMP threads wait passively (``OMP_WAIT_POLICY=passive``, set on import; lower case,
  which libgomp reads in every locale).

``threads=N`` gives both pools N threads: on a dedicated machine two BLAS threads are
up to ~1.4x faster on GEMM-bound runs (ERM of the linear channel at d >= 128), at
the price of the behaviour above when the machine is shared.  Worker processes of a
sweep (:mod:`amp_attention.runner`) take ``max(1, cores // workers)`` Numba threads
and one BLAS thread each.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from typing import Callable, Iterator

#: prange iterations handed to an idle thread at a time (dynamic scheduling)
NUMBA_CHUNK = 1


def check_threads(threads: int | None) -> int | None:
    """None (the default policy) or an integer >= 1."""
    if threads is None:
        return None
    if isinstance(threads, bool) or int(threads) != threads or threads < 1:
        raise ValueError(f"threads must be an integer >= 1 (or None: one BLAS thread, Numba on "
                         f"every core), got {threads!r}")
    return int(threads)


def numba_max_threads() -> int:
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


#: the policy of the enclosing :func:`thread_policy`, if any (inner default calls keep it)
_ACTIVE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("thread_policy",
                                                                      default=None)


@contextlib.contextmanager
def thread_policy(threads: int | None = None) -> Iterator[dict]:
    """Run the body under the thread policy (module docstring); yields the counts used
    ({"blas": .., "numba": ..}).  The previous settings are restored on exit.  Inside an
    enclosing ``thread_policy(N)``, ``thread_policy()`` keeps the enclosing counts (the
    library's entry points use it that way, so a caller's choice wins)."""
    import numba
    from threadpoolctl import threadpool_limits

    threads = check_threads(threads)
    active = _ACTIVE.get()
    if threads is None and active is not None:
        yield active
        return
    blas = 1 if threads is None else threads
    n_numba = numba_max_threads() if threads is None else min(threads, numba_max_threads())
    counts = {"blas": blas, "numba": n_numba}
    old_threads = numba.get_num_threads()
    token = _ACTIVE.set(counts)
    with threadpool_limits(limits=blas, user_api="blas"):
        numba.set_num_threads(n_numba)
        old_chunk = numba.set_parallel_chunksize(NUMBA_CHUNK)
        try:
            yield counts
        finally:
            numba.set_parallel_chunksize(old_chunk)
            numba.set_num_threads(old_threads)
            _ACTIVE.reset(token)


def under_thread_policy(fn: Callable) -> Callable:
    """Decorator of the library's heavy entry points: run ``fn`` under
    :func:`thread_policy` (the enclosing one if the caller opened one)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with thread_policy():
            return fn(*args, **kwargs)

    return wrapper


def apply_worker_policy(workers: int) -> None:
    """In a worker process of a sweep of ``workers`` processes: one BLAS thread and
    max(1, cores // workers) Numba threads for the rest of the process (it is ours;
    the entry points inside then keep these counts)."""
    import numba
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    cores = os.cpu_count() or 1
    n_numba = max(1, min(numba_max_threads(), cores // max(1, workers)))
    numba.set_num_threads(n_numba)
    numba.set_parallel_chunksize(NUMBA_CHUNK)
    _ACTIVE.set({"blas": 1, "numba": n_numba})
