"""One runner for every sweep: independent tasks in this process, in a local process
pool, or on any ``concurrent.futures`` executor (a Dask cluster's
``client.get_executor()``), and the one checkpoint protocol of resumable sweeps.

The protocol (:class:`Checkpoints`, :func:`run_checkpointed`): every task has a stable
key and one JSON file under the sweep's directory; the files are read once, the tasks
without a finished file run, and each task's record is written atomically
(:mod:`amp_attention.files`) by the process that computed it, before it returns, so an
interrupted sweep resumes from the finished tasks whichever executor ran them.  A sweep
declares its tasks (key -> arguments) and assembles the records; continuation chains
(phase diagrams, scaling), whose points depend on the previous one, read and write the
same store point by point.  Task functions must be module-level (picklable) and their
arguments plain data.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .checks import check_count
from .files import atomic_write_json, ensure_directory, read_checkpoint, remove_stale_temporaries
from .jsonsafe import with_floats


#: PR_SET_PDEATHSIG of prctl(2): the signal a Linux process gets when its parent dies
_PR_SET_PDEATHSIG = 1


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(1.0)


def die_with_parent() -> None:
    """Worker initializer: end this process when the one that started it dies (a
    SIGKILLed CLI must not leave workers computing and writing).  On Linux the
    kernel sends SIGKILL (prctl PR_SET_PDEATHSIG); elsewhere a daemon thread
    polls the parent id every second."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:   # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def init_worker(workers: int) -> None:
    """Initializer of a local worker process: it dies with its parent
    (:func:`die_with_parent`) and shares the cores with the ``workers - 1`` others
    (:func:`amp_attention.threads.apply_worker_policy`)."""
    die_with_parent()
    from .threads import apply_worker_policy

    apply_worker_policy(workers)


def _worker_context():
    """Workers are started fresh (spawn), not forked from this process: once this
    process has run Numba's parallel loops (GNU OpenMP threading layer), a forked child
    that runs them again aborts ("fork() called from a process already using GNU
    OpenMP"; e.g. a softmax phase diagram, whose thresholds run here first).  Spawned
    workers are this process's children, so :func:`die_with_parent` holds (a forkserver
    would be their parent and outlive this process)."""
    import multiprocessing as mp

    return mp.get_context("spawn")


def run_tasks(fn: Callable[..., Any], tasks: Sequence[tuple], *,
              executor: cf.Executor | None = None, workers: int = 0,
              progress: Callable[[Iterable, int], Iterable] | None = None) -> list[Any]:
    """``[fn(*task) for task in tasks]``, in task order.

    ``executor``: run there (not shut down here); otherwise ``workers`` >= 1 local
    processes (a pool owned by this call; never more processes than tasks), or
    ``workers = 0``: in this process.
    ``progress(iterable, total)`` wraps the stream of finished tasks (a progress
    bar).  The first task that raises stops the sweep: the pending ones are
    cancelled and the exception propagates (finished tasks have saved their files).
    """
    workers = check_count("workers", workers, 0)
    tasks = list(tasks)
    if not tasks:
        return []
    # a process per task at most: a pool of max_workers processes starts them all
    workers = min(workers, len(tasks))
    if executor is None and workers == 0:
        results = []
        stream: Iterable = (fn(*t) for t in tasks)
        for r in (progress(stream, len(tasks)) if progress else stream):
            results.append(r)
        return results
    own = executor is None
    ex = (cf.ProcessPoolExecutor(max_workers=workers, initializer=init_worker,
                                 initargs=(workers,), mp_context=_worker_context()) if own
          else executor)
    futures: dict[cf.Future, int] = {}
    try:
        for i, t in enumerate(tasks):
            futures[ex.submit(fn, *t)] = i
        out: list[Any] = [None] * len(tasks)
        done: Iterable = cf.as_completed(futures)
        for fut in (progress(done, len(futures)) if progress else done):
            out[futures[fut]] = fut.result()
        return out
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    finally:
        if own:
            ex.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------ checkpoints


@dataclass(frozen=True)
class Checkpoints:
    """The finished tasks of one sweep: ``<root>/<key>.json`` per task key.

    A file without the ``required`` keys (truncated, garbage, another format) is moved
    aside and its task recomputed (:func:`amp_attention.files.read_checkpoint`); the
    ``numbers`` fields are read back as floats (strict JSON stores NaN and infinities as
    null).  Plain data: a store travels to the workers with its tasks."""

    root: str
    required: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()

    def path(self, key: str) -> Path:
        return Path(self.root) / f"{key}.json"

    def read(self, key: str, accept: Callable[[dict], bool] | None = None) -> dict | None:
        """The record of task ``key``, or None when it has none (or ``accept`` refuses it:
        e.g. a record of another plan's parameters)."""
        rec = read_checkpoint(self.path(key), self.required, self.numbers)
        if rec is None or (accept is not None and not accept(rec)):
            return None
        return with_floats(rec, self.numbers) if self.numbers else rec

    def write(self, key: str, record: dict) -> None:
        """Save ``record`` atomically as task ``key``'s file."""
        ensure_directory(Path(self.root))
        atomic_write_json(self.path(key), record)


class CheckpointFile:
    """The finished points of one sequential chain in a single JSON file ``{key: record}``
    (the paper figures' curves: one process runs the chain, each write rewrites the file
    atomically).  The same ``read`` / ``write`` as :class:`Checkpoints`."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._records: dict | None = None

    def records(self) -> dict:
        """Every saved record, ``{key: record}`` (read once)."""
        if self._records is None:
            remove_stale_temporaries(self.path.parent)
            self._records = read_checkpoint(self.path) or {}
        return self._records

    def read(self, key: str, accept: Callable[[dict], bool] | None = None) -> dict | None:
        rec = self.records().get(key)
        return None if rec is None or (accept is not None and not accept(rec)) else rec

    def write(self, key: str, record: dict) -> None:
        records = self.records()
        records[key] = record
        atomic_write_json(self.path, records)


def compute_and_store(fn: Callable[..., dict], store: Checkpoints | None, key: str,
                      args: tuple) -> dict:
    """``fn(*args)``, saved as task ``key`` of ``store`` before it returns (the worker side
    of :func:`run_checkpointed`)."""
    record = fn(*args)
    if store is not None:
        store.write(key, record)
    return record


def run_checkpointed(fn: Callable[..., dict], tasks: Mapping[str, tuple],
                     store: Checkpoints | None, *,
                     accept: Callable[[str, dict], bool] | None = None,
                     executor: cf.Executor | None = None, workers: int = 0,
                     progress: Callable[[Iterable, int], Iterable] | None = None
                     ) -> tuple[dict[str, dict], int]:
    """The checkpoint protocol: ``{key: record}`` for every task (key -> arguments of
    ``fn``, which returns a JSON-ready record), in task order, and the number of tasks
    this call computed.  Finished tasks (a file in ``store`` that ``accept(key, record)``
    takes; e.g. not one of another plan's parameters) are
    read, not run; the others run through :func:`run_tasks` (``executor``, ``workers``,
    ``progress`` as there) and are saved by the process that ran them, then read back,
    so every record comes from its file.  ``store`` None: nothing is read or written."""
    keys = list(tasks)
    done = {}
    if store is not None:
        remove_stale_temporaries(store.root)  # a killed run's partial writes
        for k in keys:
            rec = store.read(k, None if accept is None else (lambda r, k=k: accept(k, r)))
            if rec is not None:
                done[k] = rec
    todo = [k for k in keys if k not in done]
    fresh = run_tasks(compute_and_store, [(fn, store, k, tuple(tasks[k])) for k in todo],
                      executor=executor, workers=workers, progress=progress)
    for k, rec in zip(todo, fresh):
        done[k] = rec if store is None else store.read(k)
    return {k: done[k] for k in keys}, len(todo)
