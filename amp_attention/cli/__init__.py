"""Command-line interface ``amp-attention`` (console script; also ``python -m amp_attention.cli``).

One module per subcommand (``se``, ``erm``, ``amp``, ``validate``, ``spectrum``,
``thresholds``, ``phase_diagram``, ``scaling``, ``compare``, ``quickstart``, ``heads``), each
with ``add_parser(sub, ...)`` and ``run(args) -> exit code``: parse, call the
API, print (``heads``: its parser is in :mod:`.heads_parser`).  Shared errors, parser
and output helpers are in :mod:`.common`, the problem flags in :mod:`.problem`, the
execution flags and size guards in :mod:`.execution`, the Ctrl-C handling in
:mod:`.interrupts`.

Exit codes: 0 success; 2 bad input (argparse errors, any ValueError raised by
the problem specification, a file that cannot be written); 3 the computation
ran but did not converge (the results are still printed); 130 interrupted.  The CLI is the top
floor of the package: with the experiments it drives, it is the only part of
``amp_attention`` that imports ``amp_attention.solvers``, and only inside
functions, so that ``--help`` answers without loading the scientific stack.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import (amp, compare, erm, heads_parser, phase_diagram, quickstart, scaling, se, spectrum,
               thresholds, validate)
from .common import (EXIT_USAGE, MODEL, PROG, CLIError, HelpFormatter, Parser, check_min_int,
                     check_outputs_spare_inputs, input_files, print_error)
from .execution import add_threads_flag
from .interrupts import InterruptGuard, check_environment, holds_interrupt
from .problem import problem_from_args, problem_parent

__all__ = ["build_parser", "main", "problem_from_args"]

#: the subcommands that save every finished run or point (spectrum: with --simulate)
RESUMABLE = ("validate", "spectrum", "phase-diagram", "scaling", "compare")


TOP_DESCRIPTION = f"""\
High-dimensional theory engine for tied single-head attention: state evolution
(d -> infinity predictions) and finite-d direct ERM to compare it with.

{MODEL}

subcommands
  se          state-evolution fixed point of one problem (errors, overlaps, spectra)
  erm         direct ERM at finite d over several seeds (mean +- standard error)
  amp         GAMP on a synthetic data set, side by side with the SE
  validate    SE curve vs Adam-trained layers over alpha, d and seeds (resumable)
  spectrum    predicted spectra of Shat and W (outliers), optionally vs trained layers
  thresholds  interpolation and perfect-recovery thresholds (lam -> 0+)
  phase-diagram
              SE over an alpha x lam grid (resumable; local processes or Dask)
  scaling     power-law target: e_test over decades of n, k*, decomposition, exponents
  compare     ERM at lam, ERM at the best lam and the Bayes-optimal estimator over alpha
              (the price of the estimator and of the data; resumable)
  heads       multi-head ensembles of Nadaraya-Watson heads: HDI, MSE decomposition,
              allocation under a budget, weighting schemes
  quickstart  SE curve over alpha with ERM overlay, written to CSV/JSON/PNG

exit codes: 0 ok, 2 bad input, 3 not converged (results still printed), 130 interrupted
(finished runs and points are saved; rerun to resume).
Run `amp-attention <subcommand> --help` for the flags."""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``amp-attention`` (exposed for documentation and tests)."""
    parser = Parser(prog=PROG, description=TOP_DESCRIPTION, formatter_class=HelpFormatter)
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{se,erm,amp,validate,spectrum,thresholds,phase-diagram,scaling,compare,quickstart}", required=True)
    problem = problem_parent()
    # subcommands that set alpha (and lam) themselves do not offer those flags
    no_alpha = problem_parent(omit=("alpha",))
    no_alpha_lam = problem_parent(omit=("alpha", "lam"))

    se.add_parser(sub, problem)
    erm.add_parser(sub, problem)
    amp.add_parser(sub, problem)
    validate.add_parser(sub, no_alpha)
    spectrum.add_parser(sub, problem)
    thresholds.add_parser(sub, no_alpha_lam)
    phase_diagram.add_parser(sub, no_alpha_lam)
    scaling.add_parser(sub, problem_parent(omit=("alpha", "target", "target_file", "kappa0", "spikes")))
    compare.add_parser(sub, no_alpha)
    quickstart.add_parser(sub)
    heads_parser.add_parser(sub)
    for subparser in sub.choices.values():
        add_threads_flag(subparser)
    return parser


def _standard_streams() -> str | None:
    """Give every closed standard stream a null device, so that no file the run opens
    takes descriptor 0, 1 or 2 (a worker would then write its output into it) and no
    print fails on ``None``; return the name of a closed output stream the results
    need ("standard output"), else None.  A closed stderr only loses the messages and
    progress bars: the run goes on (its exit code still tells)."""
    closed_out = None
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            got = os.open(os.devnull, os.O_RDWR)
            if got != fd:  # a lower descriptor was free too; it is reopened by its own turn
                os.dup2(got, fd)
                os.close(got)
            if name == "stdout":
                closed_out = "standard output"
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))
            if name == "stdout":
                closed_out = "standard output"
    return closed_out


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    closed = _standard_streams()
    if closed is not None:
        return print_error(f"{closed} is closed: the results would be lost; redirect it "
                           "(> FILE, or > /dev/null to keep only the files a subcommand writes)")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argparse usage errors
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    except BaseException as exc:
        if not holds_interrupt(exc):
            raise
        print(f"{PROG}: interrupted; nothing was saved", file=sys.stderr)
        return 130
    guard = InterruptGuard().install()  # Ctrl-C wherever it lands: exit 130, one line
    try:
        check_environment()  # before anything imports Numba, which reads it then
        if os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0"):
            # the kernels run as Python on NumPy scalars: their divisions by zero and
            # NaNs, silent when compiled (error_model="numpy") and handled by the code
            # that follows them, would each print a RuntimeWarning
            import warnings

            warnings.filterwarnings("ignore", category=RuntimeWarning,
                                    module=r"amp_attention\._\w+_kernels")
        from ..threads import thread_policy

        if args.threads is not None:
            check_min_int("--threads", args.threads, 1)
        for name in ("out", "spectrum"):  # '' would mean the current directory, or nothing
            value = getattr(args, name, None)
            if isinstance(value, str) and not value.strip():
                raise CLIError(f"argument --{name}: empty path")
        inputs = input_files(args)
        check_outputs_spare_inputs(args, inputs)
        from ..files import protected_inputs

        # a Ctrl-C in compiled code arrives as a SystemError caused by the interrupt
        with guard.raising(), thread_policy(args.threads), protected_inputs(inputs):
            code = int(args.func(args))
        sys.stdout.flush()  # a full stdout fails here, inside the try, not in Python's exit
        return code
    except KeyboardInterrupt:
        guard.stop()
        import signal

        number = guard.signal_number
        if number in (None, signal.SIGINT):
            what, code = "interrupted", 130
        else:  # terminated: the shell's convention 128 + the signal's number
            what, code = f"terminated by {signal.Signals(number).name}", 128 + int(number)
        if args.command in RESUMABLE and (args.command != "spectrum" or args.simulate):
            print(f"{PROG}: {what}; finished runs/points are saved, rerun the same "
                  "command to resume", file=sys.stderr)
        else:
            print(f"{PROG}: {what}; nothing was saved", file=sys.stderr)
        return code
    except BrokenPipeError:  # e.g. `amp-attention se --json | head -c 100`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:  # a file or stdout that cannot be written: disk full, ulimit -f, ...
        return _write_error(exc)
    except CLIError as exc:
        return print_error(str(exc))
    except ValueError as exc:  # any other validation error of the core
        return print_error(str(exc))
    finally:
        guard.uninstall()


def _write_error(exc: OSError) -> int:
    """One line and exit 2 for an OSError that reached :func:`main`: ``cannot write
    <what>: <strerror>``, <what> the file it names (the atomic writers name the path
    asked for), the Numba cache file being saved (Numba's own writes name none), or
    standard output (a subcommand's print failed: a full device, ``ulimit -f``)."""
    name = exc.filename
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    if name is None:
        for frame in reversed(frames):
            if "numba" in frame.f_code.co_filename and "caching" in frame.f_code.co_filename:
                path = frame.f_locals.get("filepath")
                name = (f"the Numba cache file {path}" if path else "the Numba cache "
                        "(NUMBA_CACHE_DIR)")
                break
    try:
        sys.stdout.flush()
        stdout_ok = True
    except OSError:  # drop the rest of stdout, else Python's flush at exit fails again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        stdout_ok = False
    if name is None and (not stdout_ok or (
            frames and str(frames[-1].f_globals.get("__name__", "")).startswith(__name__ + "."))):
        name = "standard output"  # the innermost frame is a subcommand's print
    why = exc.strerror or str(exc)
    return print_error(f"cannot write {name}: {why}" if name is not None else why)
