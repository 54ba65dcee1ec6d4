"""Helper process of tests/test_cli_fuzz.py: runs ``amp_attention.cli.main(argv)`` in
forked children, each stopped from outside after a time budget.

Why a separate process: a test process that has run a Numba ``parallel=True`` kernel
under the GNU OpenMP threading layer cannot fork (libgomp aborts the child), and an
alarm raised inside Numba or LLVM corrupts the interpreter.  This process is started
with ``NUMBA_THREADING_LAYER=workqueue`` (fork-safe), warms up the Numba dispatchers
once by running the base command lines in-process, and then forks one child per
example; the children inherit the warmed-up state and start in milliseconds.

Protocol: one JSON object per line on stdin, one per line on stdout.
  {"warm": [argv, ...]}                ->  {"codes": [code, ...], "stderr": [str, ...]}
  {"argv": [...], "budget": seconds}   ->  {"code": int | null, "stderr": str}
``code`` is null when the example was still running after ``budget`` seconds.
An exception escaping ``main`` is reported as its traceback in ``stderr``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import sys
import traceback
import warnings


def run_in_child(argv: list[str], write_fd: int) -> None:
    err = io.StringIO()
    code = 99
    try:
        with warnings.catch_warnings():
            # warnings reach stderr as a user would see them (the test fails on any
            # "Warning" there: a NumPy overflow means a NaN or inf slipped through)
            warnings.simplefilter("default")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                from amp_attention.cli import main

                code = main(argv)
    except BaseException:  # noqa: BLE001 - reported to the test, which fails
        err.write(traceback.format_exc())
    finally:
        with os.fdopen(write_fd, "w") as fh:
            json.dump({"code": code, "stderr": err.getvalue()}, fh)
        os._exit(0)


def run_bounded(argv: list[str], budget: float) -> dict:
    read_fd, write_fd = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        run_in_child(argv, write_fd)
    os.close(write_fd)
    with os.fdopen(read_fd) as fh:
        ready, _, _ = select.select([fh], [], [], budget)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"code": None, "stderr": ""}
        text = fh.read()
    _, status = os.waitpid(pid, 0)
    if not text:
        return {"code": None, "stderr": f"child died without a report (wait status {status})",
                "died": True}
    return json.loads(text)


def warm(argvs: list[list[str]]) -> dict:
    from amp_attention.cli import main

    codes, errs = [], []
    for argv in argvs:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            codes.append(main(list(argv)))
        errs.append(err.getvalue())
    return {"codes": codes, "stderr": errs}


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "warm" in request:
            reply = warm(request["warm"])
        else:
            reply = run_bounded(request["argv"], float(request["budget"]))
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
