"""Fuzz tests over the input classes of a new user's third walk (issue 58): numbers
written as text, nested and huge JSON (target files, checkpoints), closed standard
streams.

The contract (README, docs/cli.md): exit 0, 2 (bad input: one line naming the flag or
the file) or 3 (not converged); never a traceback; an input file never written; a value
never read as another number than the one written.  Examples are derandomised and few,
so the module runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amp_attention.cli import main

ROOT = Path(__file__).resolve().parents[1]

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

#: a number as the docs write one: optional sign, digits with an optional point and
#: exponent, or inf / nan (what Python's float() accepts beyond this -- underscores,
#: surrounding blanks -- must not pass silently as another number)
DOCUMENTED_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)",
                              re.IGNORECASE)

TEXT_PIECES = ["0", "5", "1", "_", ".", "e", "-", "+", " ", "\t", "x", ",", "inf", "nan",
               "0x1", "1e309", "\u00a0", "\u0661", "１", "½", "\x00"]


def _contract(code: int, err: str) -> None:
    assert code in (0, 2, 3), (code, err)
    assert "Traceback" not in err, err
    if code == 2:
        lines = err.strip("\n").splitlines()
        assert len(lines) == 1 and lines[0].startswith("amp-attention: error: "), err


@FUZZ
@given(text=st.lists(st.sampled_from(TEXT_PIECES), min_size=1, max_size=5).map("".join)
       | st.from_regex(r"[1-9]_[0-9](\.[0-9]_?[0-9])?", fullmatch=True),
       flag=st.sampled_from(["--alpha", "--kappa", "--lam", "--L", "--noise"]))
@example(text="0_5", flag="--alpha")
@example(text="1_0", flag="--L")
def test_numbers_in_text(text, flag, capsys) -> None:
    """A value is accepted only as the number it spells: '0_5' is not 5.0."""
    if "\x00" in text:
        return  # not representable in argv
    code = main(["se", flag, text, "--json"])
    out, err = capsys.readouterr()
    _contract(code, err)
    if code in (0, 3):
        strict = DOCUMENTED_FLOAT.fullmatch(text)
        got = json.loads(out)["params"][flag.lstrip("-")]
        if strict is None:  # Unicode digits read as digits are the same number
            assert "_" not in text, (text, got)
        else:
            assert got == float(text) or (math.isnan(float(text)) and got is None)
    if "_" in text and code != 2:
        raise AssertionError(f"{text!r} accepted")


def _nested(depth: int, leaf) -> object:
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers(-10**30, 10**30)
    | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["eigenvalues", "grid", "density", "x"]), children,
                      max_size=3),
    max_leaves=20)


@FUZZ
@given(value=JSON_VALUES, depth=st.sampled_from([0, 1, 2, 50, 5000, 100_000]))
def test_json_target_files(value, depth, tmp_path_factory, capsys) -> None:
    """Any JSON as --target-file: exit 0/2/3 in one line, the file untouched."""
    f = tmp_path_factory.mktemp("t") / "s0.json"
    text = json.dumps(_nested(depth, value)) if depth < 900 else (
        "[" * depth + json.dumps(value) + "]" * depth)
    f.write_text(text)
    code = main(["se", "--target", "custom", "--target-file", str(f), "--max-iter", "50"])
    _, err = capsys.readouterr()
    _contract(code, err)
    if code == 2:
        assert "--target-file" in err
    assert f.read_text() == text


@FUZZ
@given(value=JSON_VALUES, depth=st.sampled_from([0, 1, 3000, 100_000]),
       size=st.sampled_from([0, 1]))
def test_checkpoints_of_any_content(value, depth, size, tmp_path_factory, monkeypatch,
                                    capsys) -> None:
    """Whatever a checkpoint holds (nested, wrong types, too large), a sweep resumes: the
    file is either a valid record or moved aside and the point recomputed."""
    import amp_attention.files as files
    from amp_attention.runner import Checkpoints, run_checkpointed

    root = tmp_path_factory.mktemp("c")
    store = Checkpoints(str(root / "points"), ("alpha", "test_error"), ("test_error",))
    (root / "points").mkdir()
    text = ("[" * depth + json.dumps(value) + "]" * depth) if depth else json.dumps(value)
    if size:  # larger than the limit (trailing blanks: still valid JSON); the record is not
        text += " " * 2000
        monkeypatch.setattr(files, "MAX_CHECKPOINT_BYTES", 1000)
    store.path("a").write_text(text)
    out, fresh = run_checkpointed(lambda: {"alpha": 0.5, "test_error": 0.25}, {"a": ()},
                                  store)
    rec = out["a"]
    assert isinstance(rec, dict) and "alpha" in rec
    assert rec["test_error"] is None or isinstance(rec["test_error"], float)
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    if fresh:
        assert (root / "points" / "a.json.unreadable").read_text() == text


BASES = {
    "se": ["se", "--json"],
    "erm": ["erm", "--d", "8", "--seeds", "0", "--max-iter", "200"],
    "thresholds": ["thresholds"],
    "heads": ["heads", "hdi", "W.npy"],
    "quickstart": ["quickstart", "--no-erm", "--out", "qs"],
}


@pytest.mark.parametrize("name", list(BASES))
@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2)])
def test_closed_streams(name, closed, tmp_path) -> None:
    """Every subcommand with stdout, stderr or both closed: a closed stdout is refused
    (exit 2, before any work, one line when stderr is open); a closed stderr changes
    nothing but the messages."""
    import numpy as np

    np.save(tmp_path / "W.npy", np.random.default_rng(0).standard_normal((2, 8, 3)))

    def preexec():
        for fd in closed:
            os.close(fd)
    proc = subprocess.run([sys.executable, "-m", "amp_attention", *BASES[name]], cwd=tmp_path,
                          stdout=None if 1 in closed else subprocess.PIPE,
                          stderr=None if 2 in closed else subprocess.PIPE, text=True,
                          preexec_fn=preexec, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          timeout=600)
    if 1 in closed:
        assert proc.returncode == 2
        if 2 not in closed:
            assert "standard output is closed" in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "qs").exists()
    else:
        assert proc.returncode in (0, 3) and proc.stdout.strip()
