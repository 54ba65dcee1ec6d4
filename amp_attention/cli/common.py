"""Shared machinery of the subcommands: exit codes, errors naming the flag, the parser
that remembers the flags given and the flag-refusal rule, argument checks, output helpers.

The problem flags are in :mod:`.problem`, the execution flags and size guards in
:mod:`.execution`, the Ctrl-C handling in :mod:`.interrupts`."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from ..jsonsafe import strict_dumps
from ..penalties.registry import penalty_class


PROG = "amp-attention"


EXIT_OK = 0


EXIT_USAGE = 2


EXIT_NOT_CONVERGED = 3


MODEL = """\
model (conventions: docs/theory.md)
  A sample is L tokens x_1..x_L in R^d, i.i.d. N(0, I_d); there are n = alpha d^2
  samples. Pre-activations h_ab(S) = (x_a^T S x_b - delta_ab Tr S)/sqrt(d).
  Target S0: PSD with O(1) spectrum (Wishart W0^T W0/sqrt(p0 d), kappa0 = p0/d,
  or a power law s_k ~ k^-gamma). Labels y = g(h(S0)) + noise of variance Delta.
  Learner: tied single-head attention, W in R^{p x d}, kappa = p/d,
  S = W^T W/sqrt(p d), yhat = g(h(S)); it minimises
      R(W) = sum_mu 1/2 ||y_mu - yhat_mu||^2 + lam d Tr S   (= (lam/sqrt kappa)||W||_F^2).
  The SE is the replica-symmetric d -> infinity theory of the minimiser."""


class CLIError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


RANGES = {
    "--L": "integers in [1, 4096]", "--beta": "(0, 1000]", "--noise": "[0, 1e+12]",
    "--kappa0": "[1e-06, 1e+06]", "--gamma": "(0, inf)", "--target-d": "integers in [1, 2000000]",
    "--p0": "integers in [1, target-d]", "--Q0": "[1e-12, 1e+12]", "--kappa": "[1e-06, 1e+06]",
    "--lam": "0 or [1e-12, 1e+06]", "--alpha": "[1e-09, 1e+09]", "--d": "integers >= 2",
    "--tol": "(0, inf)", "--max-iter": "integers >= 1", "--damping": "(0, 1]",
    "--lam-search": "(0, inf), LO < HI",
}


def one_line(text: str) -> str:
    return " ".join(str(text).split())


GAMP_DIVERGED_HINT = "try a smaller --damping, e.g. 0.5, or a larger --V0"


SE_HINTS = {
    "max_iter": "raise --max-iter, or lower --damping",
    "diverged": "try --damping 0.5 or --method damped",
    "invalid": "try --damping 0.5 or --method damped",
}


def se_failure(result) -> str:
    """One line on a non-converged SE result, with the CLI's hint for its status."""
    hint = SE_HINTS.get(result.status.value)
    return (f"status: {one_line(result.summary)}{'; ' + hint if hint else ''}; residual "
            f"{result.residual:.3g} after {result.iterations} iterations")


def flag_error(exc: Exception, flags: dict[str, str]) -> CLIError:
    """Rewrite a spec ValueError as 'argument --flag: <message> [(allowed range ...)]'."""
    msg = one_line(str(exc))
    flag = flags.get(msg.split(" ", 1)[0])
    if flag is None:
        return CLIError(msg)
    if flag in RANGES and "must" in msg and not any(t in msg for t in ("range", ">=", "lie in",
                                                                       "one of", "once")):
        msg += f" (allowed range {RANGES[flag]})"
    return CLIError(f"argument {flag}: {msg}")


def print_error(message: str) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


class _GivenStore(argparse._StoreAction):
    """``store`` that also records the flag as given on the command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


class _GivenStoreTrue(argparse._StoreTrueAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


def _mark_given(namespace: argparse.Namespace, dest: str) -> None:
    given = set(getattr(namespace, "_given", ()))
    given.add(dest)
    namespace._given = given


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the flag with destination ``dest`` was typed by the user (not a default)."""
    return dest in getattr(args, "_given", ())


def _literal(text: str) -> str:
    """``text`` when it is a number as written in the docs: Python's readers also accept
    digit-group underscores ('0_5' is 5.0, '1_0' is 10), which on a command line hide a
    typo."""
    if "_" in text:
        raise ValueError(text)
    return text


def literal_float(text: str) -> float:
    """float() of a command-line value, refusing underscores ('0_5')."""
    return float(_literal(text))


def literal_int(text: str) -> int:
    """int() of a command-line value, refusing underscores ('1_0')."""
    return int(_literal(text))


# argparse names the type in its message ("invalid float value: '0_5'")
literal_float.__name__ = "float"
literal_int.__name__ = "int"


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose store actions remember which flags the user gave.

    A flag that does not apply to the problem at hand is refused when given
    (exit 2) instead of being accepted and ignored.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--n 100` must not silently become `--n-values 100`
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "store", _GivenStore)
        self.register("action", None, _GivenStore)
        self.register("action", "store_true", _GivenStoreTrue)
        # every type=float / type=int flag of every subcommand reads numbers literally
        self.register("type", float, literal_float)
        self.register("type", int, literal_int)

    # Usage errors: one line naming the (sub)command's --help, not argparse's usage block.
    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, "_prog"):  # the innermost (sub)command parsed sets it
            namespace._prog = self.prog
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:  # gathered by the subcommand's parser, reported for that subcommand
            self._fail(getattr(namespace, "_prog", self.prog),
                       f"unrecognized arguments: {' '.join(extras)}")
        return namespace

    def error(self, message: str):
        self._fail(self.prog, message)

    def _fail(self, prog: str, message: str):
        self.exit(EXIT_USAGE, f"{PROG}: error: {one_line(message)} (see `{prog} --help`)\n")


def refuse_given(args: argparse.Namespace, dests: Sequence[str], why: str) -> None:
    """CLIError naming the first flag of ``dests`` the user gave, with ``why`` it does not apply."""
    for dest in dests:
        if given(args, dest):
            raise CLIError(f"argument --{dest.replace('_', '-')}: {why}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        import shutil

        width = min(100, shutil.get_terminal_size((92, 24)).columns - 2)
        super().__init__(prog, max_help_position=30, width=max(width, 60))


class OmittingArgumentGroup:
    """An argument group of ``parser`` whose ``add_argument`` skips the flags whose
    destinations are in ``omit``: parents shared by several subcommands leave out
    what one of them does not read."""

    def __init__(self, parser: argparse.ArgumentParser, title: str, omit: Sequence[str]) -> None:
        self._group = parser.add_argument_group(title)
        self._omit = frozenset(omit)

    def add_argument(self, flag: str, **kw: Any) -> None:
        if flag.lstrip("-").replace("-", "_") not in self._omit:
            self._group.add_argument(flag, **kw)


def check_positive_finite(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise CLIError(f"argument {flag}: must be > 0 and finite (allowed range "
                       f"{RANGES[flag]}), got {value!r}")


def check_min_int(flag: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise CLIError(f"argument {flag}: must be an integer >= {minimum}, got {value!r}")


#: strict JSON text (one serialiser for the CLI and the experiments)
dumps = strict_dumps


def fmt(v: Any) -> str:
    import numpy as np

    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.10g}"
    if v is None:
        return "-"
    return str(v)


def learner_text(params: dict) -> str:
    """The learner for a figure title: its parameterisation, and kappa where it has one."""
    name = params["parameterisation"]
    return f"{name} kappa={params['kappa']:g}" if penalty_class(name).uses_kappa else name


def target_text(t: dict) -> str:
    rest = ", ".join(f"{k}={fmt(v)}" for k, v in t.items() if k != "kind" and v is not None)
    return f"{t['kind']} ({rest})"


def print_params(params: dict, out=None) -> None:
    out = out or sys.stdout
    print("parameters", file=out)
    for k, v in params.items():
        if v == "" or v is None:  # e.g. an empty validation_note: nothing to say
            continue
        text = target_text(v) if k == "target" and isinstance(v, dict) else fmt(v)
        print(f"  {k:<18} {text}", file=out)


def prepare_path(path: Path) -> Path:
    """Create the parent of an output file and check that the file can be written there,
    before any computation (a long run must not end in 'cannot write')."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create directory {str(path.parent)!r}: {exc.strerror}") from None
    if path.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: it is a directory (give a file name)")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".amp-attention-probe-"):
            pass
    except OSError as exc:
        raise CLIError(f"cannot write to directory {str(path.parent)!r}: {exc.strerror}") from None
    from ..files import remove_stale_temporaries

    remove_stale_temporaries(path.parent)  # a killed run's partial writes
    return path


#: the arguments naming a file the run reads (attribute: how the help names it)
INPUT_FILES = {"target_file": "--target-file", "file": "FILE"}

#: what each subcommand writes into --out DIR (glob patterns relative to DIR; its
#: checkpoint folders whole, since their files are replaced or moved aside)
OUTPUT_NAMES = {
    "quickstart": ("quickstart.*",), "compare": ("compare.*", "points/*"),
    "phase-diagram": ("phase_diagram.*", "points/*"), "scaling": ("scaling.*", "points/*"),
    "spectrum": ("spectrum*", "outliers.json", "runs/*"), "thresholds": ("thresholds.*",),
    "validate": ("validate.*", "runs/*"), "heads": ("heads_*",),
}


def input_files(args: argparse.Namespace) -> dict[str, Path]:
    """{how the help names it: path} of the files this command reads."""
    return {flag: Path(getattr(args, attr)) for attr, flag in INPUT_FILES.items()
            if isinstance(getattr(args, attr, None), (str, Path))}


def check_outputs_spare_inputs(args: argparse.Namespace, inputs: dict[str, Path]) -> None:
    """CLIError, before any computation, when an output the command would write is one
    of its inputs: ``--spectrum FILE`` the same file, or an input among the files
    (:data:`OUTPUT_NAMES`) of ``--out DIR``.  The writers refuse it again at write
    time (:func:`amp_attention.files.protected_inputs`)."""
    import fnmatch
    import os

    if not inputs:
        return
    real = {what: os.path.realpath(p) for what, p in inputs.items()}
    spectrum = getattr(args, "spectrum", None)
    if isinstance(spectrum, str) and spectrum:
        for what, path in real.items():
            if os.path.realpath(spectrum) == path:
                raise CLIError(f"argument --spectrum: {spectrum!r} is the input {what}; "
                               "refusing to overwrite it: choose another output name")
    out = getattr(args, "out", None)
    if isinstance(out, str) and out:
        base = Path(os.path.realpath(out))
        for what, path in real.items():
            try:
                rel = Path(path).relative_to(base).as_posix()
            except ValueError:
                continue
            if any(fnmatch.fnmatch(rel, pat) for pat in OUTPUT_NAMES.get(args.command, ())):
                raise CLIError(f"argument --out: the input {what} ({inputs[what]}) is one of "
                               f"the files {args.command} writes or manages in {out!r}; "
                               "refusing to overwrite it: move it or choose another --out")


def plus_minus(stderr: float | None, spec: str = "<8.2g") -> str:
    """``+-<stderr>`` formatted with ``spec``, or ``+-`` and a dash when the standard error
    is not defined (one seed, a run that diverged): never ``+-nan``."""
    if stderr is None or not math.isfinite(float(stderr)):
        width = len(f"{0.0:{spec}}")
        return f"+- {'-':<{max(width - 1, 1)}}"
    return f"+-{float(stderr):{spec}}"
