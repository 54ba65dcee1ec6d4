"""Property-based test of the CLI contract over every subcommand's numeric flags.

For each subcommand a cheap base command line is extended by one numeric flag drawn
from the parser itself (so a flag added later is fuzzed without touching this file),
with a value drawn from the extremes that broke the CLI before (1e-300, 1e300, inf,
nan, -1, 0, 2**63, ...) and from hypothesis' own floats and integers.  The contract
(README, ``amp-attention --help``): the exit code is 0, 2 (bad input, one line on
stderr) or 3 (not converged, results still printed); never an uncaught exception,
never "Traceback" on stderr, never a NumPy RuntimeWarning leaking to the user.

A command line that is valid but expensive (``--draws 10**6``) may run past the
per-example budget: it is stopped by an alarm and counted as "accepted and running";
it is not a failure (nothing has gone wrong within the budget), and the test checks
that the budget is hit rarely, so that the test keeps exercising the exits.
The examples are derandomised (same draws in every CI run) and bounded in number
and time (the whole module runs in well under 60 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_attention.cli import build_parser

#: examples per subcommand
EXAMPLES = 5
#: examples per subcommand of the slow variant
SLOW_EXAMPLES = 80
#: seconds one example may run before it is counted as "accepted and running"
BUDGET = 3.0

FLOAT_EXTREMES = [0.0, -0.0, -1.0, 5e-324, 1e-300, 1e-12, 1e-9, 0.5, 1.0, 2.0, 3.0, 7.5,
                  1e6, 1e12, 1e300, math.inf, -math.inf, math.nan]
INT_EXTREMES = [-(2 ** 63), -1, 0, 1, 2, 3, 4, 7, 1000, 10 ** 9, 2 ** 63, 10 ** 30]

#: flags never fuzzed: they choose where work runs (a scheduler address, a process
#: count that would fork this test process); covered by tests/test_runner.py
NOT_FUZZED = {"--workers"}


def _bases(tmp: Path) -> dict[str, list[str]]:
    """A cheap valid command line per subcommand (each exits 0 or 3 in ~1 s)."""
    hdi = tmp / "qk.npy"
    np.save(hdi, np.random.default_rng(0).standard_normal((8, 8)))
    return {
        "se": ["se"],
        "se-softmax": ["se", "--channel", "softmax", "--L", "2", "--mc-log2n", "6",
                       "--mc-replicas", "2", "--mc-coarse-log2n", "5", "--max-iter", "20"],
        "erm": ["erm", "--d", "8", "--seeds", "0", "--max-iter", "200"],
        "amp": ["amp", "--d", "12", "--iterations", "10", "--n-test", "50",
                "--se-iterates", "3"],
        "validate": ["validate", "--alphas", "0.5", "--d", "6", "--seeds", "1",
                     "--out", str(tmp / "validate")],
        "spectrum": ["spectrum", "--out", str(tmp / "spectrum")],
        "spectrum-simulate": ["spectrum", "--simulate", "--d", "8", "--seeds", "1",
                              "--out", str(tmp / "spectrum-sim")],
        "thresholds": ["thresholds"],
        "phase-diagram": ["phase-diagram", "--alpha-range", "0.2", "1", "2",
                          "--lam-range", "0.01", "1", "2", "--workers", "0",
                          "--out", str(tmp / "pd")],
        "scaling": ["scaling", "--alpha-range", "0.5", "2", "3", "--gamma", "1.5", "--target-d", "40",
                    "--out", str(tmp / "scaling")],
        "heads-hdi": ["heads", "hdi", str(hdi), "--layout", "columns", "--heads", "2"],
        "heads-rotation": ["heads", "rotation", "--d-model", "10", "--n", "20", "--m", "20",
                           "--draws", "2", "--targets", "2", "--t-points", "3"],
        "heads-allocation": ["heads", "allocation", "--m", "20", "--draws", "2",
                             "--targets", "2", "--D", "4", "--n-values", "20", "40"],
        "heads-weighting": ["heads", "weighting", "--d-model", "4", "--n", "20", "--m", "20",
                            "--n-val", "20", "--draws", "2", "--targets", "2", "--H", "2"],
    }


def _subparser(words: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


def numeric_flags(base: list[str]) -> list[tuple[str, type, int]]:
    """(flag, int or float, number of values) of every numeric option of the subcommand."""
    words = [w for w in base[:2] if not w.startswith("-")][: 2 if base[0] == "heads" else 1]
    flags = []
    for action in _subparser(words)._actions:
        if not action.option_strings or action.type not in (int, float):
            continue
        flag = action.option_strings[0]
        if flag in NOT_FUZZED:
            continue
        nargs = action.nargs
        count = nargs if isinstance(nargs, int) else (0 if nargs == "+" else 1)
        flags.append((flag, action.type, count))
    return flags


def _number(kind: type) -> st.SearchStrategy[str]:
    if kind is int:
        return st.one_of(st.sampled_from(INT_EXTREMES), st.integers(-10 ** 6, 10 ** 6)).map(str)
    floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
    return st.one_of(st.sampled_from(FLOAT_EXTREMES), floats).map(repr)


@st.composite
def command_lines(draw, base: list[str]) -> tuple[list[str], str]:
    """(argv, fuzzed flag); one value is passed as ``--flag=value`` so that argparse
    reads "-inf" or "-1e+16" as a value, not as an unknown option."""
    flag, kind, count = draw(st.sampled_from(numeric_flags(base)))
    n = count or draw(st.integers(1, 3))
    values = [draw(_number(kind)) for _ in range(n)]
    if n == 1:
        return base + [f"{flag}={values[0]}"], flag
    return base + [flag, *values], flag


SUBCOMMANDS = ["se", "se-softmax", "erm", "amp", "validate", "spectrum", "spectrum-simulate",
               "thresholds", "phase-diagram", "scaling", "heads-hdi", "heads-rotation",
               "heads-allocation", "heads-weighting"]


class FuzzServer:
    """The helper process of tests/cli_fuzz_server.py (see there why it is needed)."""

    def __init__(self, cwd: Path) -> None:
        # PYTHONPATH: the server imports the same amp_attention as the tests in this
        # process (the checkout under `python -m pytest`), so that Numba's cache, keyed by
        # the source file's path, is shared instead of compiling an installed copy again
        root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", MPLBACKEND="Agg",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH"))
                                              if p))
        # cwd: commands without --out write to ./amp-attention-<command>
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name(
            "cli_fuzz_server.py"))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=env, cwd=cwd)

    def ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fuzz server died"
        return json.loads(line)

    def run(self, argv: list[str]) -> tuple[int | None, str]:
        """(exit code, or None if still running after BUDGET s; stderr)."""
        reply = self.ask({"argv": argv, "budget": BUDGET})
        assert not reply.get("died"), (argv, reply["stderr"])
        return reply["code"], reply["stderr"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = FuzzServer(tmp_path_factory.mktemp("fuzz-cwd"))
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def bases(server, tmp_path_factory) -> dict[str, tuple[list[str], int, str]]:
    """The base lines with their exit codes and stderr, each run once in the server (to
    load the Numba caches that the forked examples inherit)."""
    lines = _bases(tmp_path_factory.mktemp("fuzz"))
    reply = server.ask({"warm": list(lines.values())})
    return {name: (base, code, err)
            for (name, base), code, err in zip(lines.items(), reply["codes"], reply["stderr"])}


@pytest.fixture(scope="module")
def budget_hits() -> dict:
    """Examples run and those still running at the budget, over the module."""
    stats: dict = {"examples": 0, "hits": []}
    yield stats
    # valid but expensive lines are allowed, but they must not crowd out the checks
    print(f"\nfuzz: {stats['examples']} examples, {len(stats['hits'])} still running at the budget")
    assert len(stats["hits"]) <= stats["examples"] // 4, stats


def test_documented_token_range_is_the_task_s() -> None:
    from amp_attention.cli.common import RANGES
    from amp_attention.spec import BETA_MAX, L_MAX, LAM_RANGE, Q0_RANGE, WIDTH_RANGE

    assert RANGES["--L"] == f"integers in [1, {L_MAX}]"
    # the CLI keeps its range texts without importing the spec (--help speed): the
    # same bounds, spelt twice, checked here
    assert RANGES["--beta"] == f"(0, {BETA_MAX:g}]"
    assert RANGES["--kappa"] == RANGES["--kappa0"] == f"[{WIDTH_RANGE[0]:g}, {WIDTH_RANGE[1]:g}]"
    assert RANGES["--lam"] == f"0 or [{LAM_RANGE[0]:g}, {LAM_RANGE[1]:g}]"
    assert RANGES["--Q0"] == f"[{Q0_RANGE[0]:g}, {Q0_RANGE[1]:g}]"


def test_every_subcommand_has_numeric_flags_to_fuzz(bases) -> None:
    assert set(bases) == set(SUBCOMMANDS)
    for name, (base, _, _) in bases.items():
        assert numeric_flags(base), name


def test_bases_are_valid(bases) -> None:
    """Each base line alone exits 0 or 3 (else the fuzz would test nothing but errors)."""
    for name, (_, code, err) in bases.items():
        assert code in (0, 3), (name, code, err)


def test_no_progress_frames_off_a_terminal(bases) -> None:
    """Issue 16 item 8: every subcommand's progress bars stay silent when stderr is not a
    terminal (the amp bar once wrote 3 KB of frames into a log file).  Checked on the
    base lines' stderr (a StringIO, as in the forked examples, which check it too)."""
    for name, (_, _, err) in bases.items():
        assert "\r" not in err and "it/s" not in err and "%|" not in err, (name, err[:300])


def fuzz(name: str, bases, server, budget_hits, examples: int) -> None:
    base = bases[name][0]
    fresh = [0]

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=command_lines(base))
    def check(case: tuple[list[str], str]) -> None:
        argv, flag = case
        if "--out" in argv:  # a fresh directory: no example resumes another's points
            fresh[0] += 1
            i = argv.index("--out") + 1
            argv = [*argv[:i], f"{argv[i]}-{fresh[0]}", *argv[i + 1:]]
        code, err = server.run(argv)
        budget_hits["examples"] += 1
        assert "Traceback" not in err and "Warning" not in err, (argv, err)
        # stderr is not a terminal here: no progress bar may write frames into it
        assert "\r" not in err and "it/s" not in err, (argv, err[:300])
        if code is None:
            budget_hits["hits"].append(argv)
            return
        assert code in (0, 2, 3), (argv, code, err)
        if code == 2:
            # one error line (after argparse's usage lines, for a malformed line)
            # that names the flag given
            last = err.strip("\n").splitlines()[-1]
            assert last.startswith("amp-attention") and " error: " in last, (argv, err)
            if flag not in last:
                # a list value like "-inf" that argparse reads as an option: its usage
                # error names the value instead (argparse's behaviour, still exit 2)
                values = argv[argv.index(flag) + 1:] if flag in argv else []
                assert any(v.startswith("-") and v in last for v in values), (argv, err)
                assert "unrecognized arguments" in last or "expected" in last, (argv, err)

    check()


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_numeric_flags_exit_0_2_3_without_traceback(name: str, bases, server,
                                                     budget_hits) -> None:
    fuzz(name, bases, server, budget_hits, EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_numeric_flags_many_examples(name: str, bases, server, budget_hits) -> None:
    """The same property over SLOW_EXAMPLES examples per subcommand (10-15 minutes)."""
    fuzz(name, bases, server, budget_hits, SLOW_EXAMPLES)


@pytest.mark.parametrize("argv", [
    ["se", "--alpha", "1e-300"], ["se", "--alpha", "1e300"], ["se", "--noise", "1e300"],
    ["se", "--channel", "softmax", "--L", "1"], ["se", "--kappa", "nan"],
    ["se", "--lam", "inf"], ["amp", "--d", "2"],
    ["scaling", "--gamma", "1.5", "--target-d", "40", "--alpha-range", "0.5", "2", "3",
     "--Q0=2.4620244497880648e+154"],
    ["scaling", "--gamma", "1.5", "--target-d", "40", "--alpha-range", "5e-324", "1e-300",
     "1e+300"], ["amp", "--d", "8", "--V0", "1e9"],
    ["erm", "--d", "3000"], ["amp", "--d", "100000"],
    ["phase-diagram", "--alpha-range", "0.0", "0.0", "1e12", "--lam-range", "0.01", "1", "2",
     "--allow-large"],
    ["phase-diagram", "--alpha-range", "0.1", "1", "100000",
     "--lam-range", "0.01", "1", "100000"],
])
def test_reported_cases_exit_cleanly(argv: list[str], server) -> None:
    """The command lines of issue 16 item 6 (and 3, 4) that used to raise."""
    code, err = server.run(argv)
    assert code in (2, 3), (argv, code, err)
    assert "Traceback" not in err
