"""The CLI under hostile conditions a new user met (issue 58): closed standard streams,
outputs equal to inputs, unbounded inputs, malformed files, values read into something
else.  Each test failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, *, close=(), cwd=None, env=None, timeout=300):
    """``python -m amp_attention ARGV`` with the descriptors in ``close`` closed (as the
    shell's ``2>&-`` does); returns (returncode, stdout, stderr) as text."""
    def preexec():
        for fd in close:
            os.close(fd)
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "amp_attention", *argv], cwd=cwd,
                          stdout=subprocess.PIPE if 1 not in close else None,
                          stderr=subprocess.PIPE if 2 not in close else None,
                          preexec_fn=preexec, env=full_env, timeout=timeout, text=True)
    return proc.returncode, proc.stdout or "", proc.stderr or ""


def _one_line(err: str) -> str:
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------ item 1: closed streams


def test_a_closed_stderr_still_delivers_the_results(tmp_path) -> None:
    code, out, _ = _run(["se", "--json", "--max-iter", "50"], close=(2,), cwd=tmp_path)
    assert code == 0
    assert json.loads(out)["converged"] is True


def test_a_closed_stderr_with_files_written(tmp_path) -> None:
    code, out, _ = _run(["se", "--spectrum", "s.csv"], close=(2,), cwd=tmp_path)
    assert code == 0
    assert "test_error" in out
    assert (tmp_path / "s.csv").stat().st_size > 0


@pytest.mark.parametrize("close", [(1,), (1, 2)])
def test_a_closed_stdout_is_refused_in_one_line(close, tmp_path) -> None:
    code, _, err = _run(["se", "--spectrum", "s.csv"], close=close, cwd=tmp_path)
    assert code == 2
    if 2 not in close:
        assert "standard output is closed" in _one_line(err)
    assert not (tmp_path / "s.csv").exists()  # refused before any work


def test_a_closed_stdin_changes_nothing(tmp_path) -> None:
    code, out, err = _run(["se", "--json", "--max-iter", "50"], close=(0,), cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["converged"] is True


# ------------------------------------------------ item 2: an output equal to an input

EIGENVALUES = "1\n0.5\n0.25\n"


@pytest.mark.parametrize("spectrum", ["s0.csv", "./s0.csv", "link.csv"])
def test_the_spectrum_output_never_replaces_the_target_file(spectrum, tmp_path, capsys) -> None:
    from amp_attention.cli import main

    (tmp_path / "s0.csv").write_text(EIGENVALUES)
    (tmp_path / "link.csv").symlink_to(tmp_path / "s0.csv")
    os.chdir(tmp_path)
    code = main(["se", "--target", "custom", "--target-file", "s0.csv", "--spectrum", spectrum])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert "--spectrum" in line and "--target-file" in line
    assert (tmp_path / "s0.csv").read_text() == EIGENVALUES


def test_an_input_among_a_sweeps_outputs_is_refused(tmp_path, capsys) -> None:
    from amp_attention.cli import main

    out = tmp_path / "pd"
    (out / "points").mkdir(parents=True)
    for name in ("phase_diagram.json", "points/a.json"):
        (out / name).write_text(EIGENVALUES)
        code = main(["phase-diagram", "--target", "custom", "--target-file", str(out / name),
                     "--out", str(out), "--alpha-range", "0.5", "1", "3",
                     "--lam-range", "0.1", "1", "3"])
        assert code == 2
        assert "--out" in _one_line(capsys.readouterr().err)
        assert (out / name).read_text() == EIGENVALUES


def test_writers_refuse_a_protected_input_by_any_name(tmp_path) -> None:
    from amp_attention.files import (InputFileError, atomic_write_text, protected_inputs,
                                     read_checkpoint)

    f = tmp_path / "in.json"
    f.write_text("not json")
    os.link(f, tmp_path / "hard.json")
    with protected_inputs({"--target-file": f}):
        for name in (f, tmp_path / "hard.json"):
            with pytest.raises(InputFileError, match="--target-file"):
                atomic_write_text(name, "x")
            with pytest.raises(InputFileError):
                read_checkpoint(name)  # a malformed one would be moved aside
    assert f.read_text() == "not json"
    atomic_write_text(f, "ok")  # outside the block it is an ordinary file
    assert f.read_text() == "ok"


# ------------------------------ items 4, 5: checkpoints nested too deep or of a wrong type


def _store(tmp_path):
    from amp_attention.runner import Checkpoints

    return Checkpoints(str(tmp_path / "points"), ("alpha", "test_error"), ("test_error",))


@pytest.mark.parametrize("text,why", [
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ('{"alpha": 0.5, "test_error": "abc"}', "not a number: test_error"),
    ('{"alpha": 0.5, "test_error": true}', "not a number: test_error"),
    ('{"alpha": 0.5, "test_error": [1]}', "not a number: test_error"),
])
def test_a_bad_checkpoint_is_moved_aside_and_recomputed(text, why, tmp_path, capsys) -> None:
    from amp_attention.runner import run_checkpointed

    store = _store(tmp_path)
    (tmp_path / "points").mkdir()
    store.path("a").write_text(text)
    out, fresh = run_checkpointed(lambda: {"alpha": 0.5, "test_error": 0.25}, {"a": ()}, store)
    assert fresh == 1 and out["a"]["test_error"] == 0.25
    err = capsys.readouterr().err
    assert why in _one_line(err) and "a.json.unreadable" in err
    assert (tmp_path / "points" / "a.json.unreadable").read_text() == text


def test_a_null_checkpoint_field_is_still_read_as_nan(tmp_path) -> None:
    store = _store(tmp_path)
    (tmp_path / "points").mkdir()
    store.path("a").write_text('{"alpha": 0.5, "test_error": null}')
    rec = store.read("a")
    assert rec is not None and rec["test_error"] != rec["test_error"]


# --------------------------------- items 8, 11: temporary names of the atomic writers


def test_threads_writing_one_file_do_not_collide(tmp_path) -> None:
    import concurrent.futures as cf

    from amp_attention.files import atomic_write_json

    target = tmp_path / "phase_diagram.json"

    def write(k):
        for i in range(200):
            atomic_write_json(target, {"k": k, "i": i})
    with cf.ThreadPoolExecutor(4) as pool:
        list(pool.map(write, range(4)))  # raised FileNotFoundError with <name>.tmp<pid>
    assert json.loads(target.read_text())["i"] == 199
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phase_diagram.json"]


def test_a_legal_long_name_can_be_written(tmp_path) -> None:
    from amp_attention.files import atomic_write_text

    name = "r" * 250 + ".csv"  # 254 characters: legal; its temporary was not
    atomic_write_text(tmp_path / name, "x")
    assert (tmp_path / name).read_text() == "x"


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path) -> None:
    from amp_attention.files import remove_stale_temporaries

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".a.json.{dead}.0123abcd.amp-tmp"
    live = tmp_path / f".a.json.{os.getpid()}.0123abcd.amp-tmp"
    other = tmp_path / "a.json.amp-tmp.keep"
    for p in (stale, live, other):
        p.write_text("{")
    assert remove_stale_temporaries(tmp_path) == 1
    assert not stale.exists() and live.exists() and other.exists()


def test_a_sigkilled_sweep_leaves_no_temporary_after_the_next_run(tmp_path) -> None:
    from amp_attention.runner import run_checkpointed

    store = _store(tmp_path)
    (tmp_path / "points").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / "points" / f".a.json.{dead}.deadbeef.amp-tmp").write_text('{"alpha"')
    run_checkpointed(lambda: {"alpha": 0.5, "test_error": 0.25}, {"a": ()}, store)
    assert sorted(p.name for p in (tmp_path / "points").iterdir()) == ["a.json"]


# ----------------------------------------- items 3, 9: target files bounded and literal


@pytest.mark.parametrize("text,expected", [
    ('{"eigenvalues": "12"}', "eigenvalues must be a JSON list of numbers"),
    ('[1, "2", true]', "numbers only"),
    ('[1, true]', "numbers only"),
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    ("1\n" + "x" * 50_000 + "\n", "line 2: not a number"),
    ("1\n0_5\n", "line 2: not a number: '0_5'"),  # float('0_5') is 5.0
])
def test_bad_target_files_are_one_short_line(text, expected, tmp_path, capsys) -> None:
    from amp_attention.cli import main

    f = tmp_path / "s0.json"
    f.write_text(text)
    assert main(["se", "--target", "custom", "--target-file", str(f)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert expected in line and "--target-file" in line
    assert len(line) < 400 + len(str(f))  # the file is never echoed


def test_a_target_file_above_the_limit_is_refused_unread(tmp_path, capsys, monkeypatch) -> None:
    import amp_attention.cli.problem as problem
    from amp_attention.cli import main

    monkeypatch.setattr(problem, "MAX_TARGET_FILE_BYTES", 1000)
    f = tmp_path / "s0.csv"
    f.write_text("0.5\n" * 1000)
    assert main(["se", "--target", "custom", "--target-file", str(f)]) == 2
    assert "larger than" in _one_line(capsys.readouterr().err)
    monkeypatch.setattr(problem, "MAX_TARGET_FILE_BYTES", 10_000)
    monkeypatch.setattr(problem, "MAX_TARGET_VALUES", 999)
    assert main(["se", "--target", "custom", "--target-file", str(f)]) == 2
    assert "more than 999 values" in _one_line(capsys.readouterr().err)


def test_a_long_eigenvalue_list_skips_the_cubic_diagnostic(monkeypatch) -> None:
    """A list longer than RESIDUAL_KURTOSIS_MAX_D is solved without building d x d
    matrices (a 30,000-entry list ran out of memory there): the limit moved to 4 here."""
    import amp_attention.solvers.state_evolution as st
    from amp_attention.spec import CustomTarget, Learner, Problem, Task

    monkeypatch.setattr(st, "RESIDUAL_KURTOSIS_MAX_D", 4)
    calls = []
    real = st.residual_kurtosis
    monkeypatch.setattr(st, "residual_kurtosis", lambda *a, **k: calls.append(1) or real(*a, **k))
    for ev, computed in (((1.0, 0.7, 0.4, 0.2), True), ((1.0, 0.7, 0.4, 0.2, 0.1), False)):
        prob = Problem(Task(), CustomTarget(eigenvalues=ev), Learner(lam=0.1), alpha=0.5)
        res = st.solve_state_evolution(prob)
        assert res.converged
        assert (res.residual_kurtosis is not None) is computed
    assert len(calls) == 1


# ------------------------------------- item 4: inputs that declare or ask for the impossible


def _npy_claiming(path: Path, shape) -> None:
    from numpy.lib import format as npy

    with open(path, "wb") as fh:
        npy.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": shape})
        fh.write(b"\0" * 800)


def test_a_npy_header_claiming_more_than_the_file_is_refused_unread(tmp_path, capsys) -> None:
    import zipfile

    from amp_attention.cli import main

    _npy_claiming(tmp_path / "huge.npy", (100_000, 100_000, 2))
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        z.write(tmp_path / "huge.npy", "w.npy")
    for name in ("huge.npy", "huge.npz"):
        assert main(["heads", "hdi", str(tmp_path / name)]) == 2  # was a MemoryError
        line = _one_line(capsys.readouterr().err)
        assert "(100000, 100000, 2)" in line and "truncated or damaged" in line


def test_a_npy_within_its_file_but_beyond_memory_is_refused(tmp_path, capsys,
                                                              monkeypatch) -> None:
    import numpy as np

    from amp_attention import resources
    from amp_attention.cli import main

    np.save(tmp_path / "w.npy", np.ones((2, 16, 4)))
    monkeypatch.setattr(resources, "available_memory", lambda: 1000)
    assert main(["heads", "hdi", str(tmp_path / "w.npy")]) == 2
    assert "memory" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv,flag", [
    (["se", "--target", "powerlaw", "--target-d", "1000000000"], "--target-d"),
    (["amp", "--n-test", "1000000000000"], "--n-test"),
    (["validate", "--seeds", "1000000000"], "--seeds"),
    (["erm", "--n-seeds", "1000000000"], "--n-seeds"),
    (["erm", "--n-seeds", "20000"], "--n-seeds"),  # beyond MAX_RUNS without --allow-large
])
def test_sizes_beyond_the_limits_are_refused_at_once(argv, flag, tmp_path, capsys) -> None:
    import time

    from amp_attention.cli import main

    os.chdir(tmp_path)
    t0 = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - t0 < 10  # was: memory errors after up to 27 s
    assert _one_line(capsys.readouterr().err).startswith(f"amp-attention: error: argument {flag}")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_and_the_spec_share_the_list_limit() -> None:
    from amp_attention.cli.problem import MAX_TARGET_VALUES
    from amp_attention.spec import TARGET_LIST_MAX, CustomTarget, PowerLawTarget

    assert MAX_TARGET_VALUES == TARGET_LIST_MAX
    with pytest.raises(ValueError, match="at most"):
        CustomTarget(eigenvalues=(1.0,) * (TARGET_LIST_MAX + 1))
    with pytest.raises(ValueError, match="d must be an integer in"):
        PowerLawTarget(d=TARGET_LIST_MAX + 1)


# ------------------------------------------------ item 9: values read as something else


@pytest.mark.parametrize("argv,flag", [
    (["se", "--alpha", "0_5"], "--alpha"),  # float('0_5') is 5.0
    (["se", "--L", "1_0"], "--L"),  # int('1_0') is 10
    (["phase-diagram", "--alpha-range", "0.1", "1", "1_0"], "--alpha-range"),
])
def test_underscored_numbers_are_refused(argv, flag, capsys) -> None:
    from amp_attention.cli import main

    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"argument {flag}" in line and "_" in line


@pytest.mark.parametrize("value", ["inf", "nan", "1e10", "0"])
def test_alpha_out_of_range_names_the_real_range(value, capsys) -> None:
    from amp_attention.cli import main

    assert main(["se", "--alpha", value]) == 2
    assert "[1e-09, 1e+09]" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("text", ["0\n0\n", "1e308\n1\n", "0 0\n1 0\n"])
def test_degenerate_targets_are_bad_input_not_non_convergence(text, tmp_path, capsys) -> None:
    from amp_attention.cli import main

    f = tmp_path / "s0.csv"
    f.write_text(text)
    assert main(["se", "--target", "custom", "--target-file", str(f)]) == 2  # was exit 3
    assert "--target-file" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv,flag", [
    (["validate", "--alphas", "0.5", "0.5"], "--alphas"),
    (["validate", "--d", "12", "12"], "--d"),
    (["thresholds", "--kappa-grid", "0.5", "1", "0.5"], "--kappa-grid"),
])
def test_repeated_grid_values_are_refused(argv, flag, tmp_path, capsys) -> None:
    from amp_attention.cli import main

    os.chdir(tmp_path)
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"argument {flag}" in line and "once" in line
    assert list(tmp_path.iterdir()) == []


# ---------------------------------- item 6: read-only install, HOME without a cache


def test_numba_cache_falls_back_to_a_private_temporary_folder(tmp_path, monkeypatch) -> None:
    from amp_attention import _environment as envmod

    pkg, home = tmp_path / "pkg", tmp_path / "home"
    pkg.mkdir()
    home.mkdir()
    env = {"HOME": str(home)}
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    # a writable package: Numba's own place, nothing set
    assert envmod.numba_cache_fallback(str(pkg), env) is None and "NUMBA_CACHE_DIR" not in env
    # nothing writable (as a read-only install with a read-only HOME) but the temporary folder
    monkeypatch.setattr(envmod, "_could_write", lambda p: False)
    monkeypatch.setattr(envmod, "_writable_directory",
                        lambda p, real=envmod._writable_directory:
                        str(p).startswith(str(tmp_path / "tmp")) and real(p))
    monkeypatch.setattr(envmod.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    chosen = envmod.numba_cache_fallback(str(pkg), env)
    assert chosen == env["NUMBA_CACHE_DIR"] and chosen.startswith(str(tmp_path / "tmp"))
    assert os.stat(chosen).st_mode & 0o077 == 0  # private: Numba's cache files are pickles
    # a user's own setting is kept
    env2 = {"NUMBA_CACHE_DIR": "/somewhere"}
    assert envmod.numba_cache_fallback(str(pkg), env2) is None
    assert env2["NUMBA_CACHE_DIR"] == "/somewhere"


def test_a_shared_temporary_cache_folder_is_not_trusted(tmp_path, monkeypatch) -> None:
    from amp_attention import _environment as envmod

    monkeypatch.setattr(envmod.tempfile, "gettempdir", lambda: str(tmp_path))
    planted = tmp_path / f"amp-attention-numba-cache-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)  # writable by anyone: someone could plant pickles
    chosen = envmod._private_temporary_folder()
    assert chosen is not None and chosen != planted
    assert os.stat(chosen).st_mode & 0o077 == 0


def _read_only_mounts_possible() -> bool:
    import shutil

    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mounts_possible(), reason="needs unshare --mount")
@pytest.mark.parametrize("tmp_writable", [True, False])
def test_a_read_only_checkout_and_home_solve_without_a_cache_error(tmp_writable,
                                                                  tmp_path) -> None:
    """The package and HOME mounted read-only (no NUMBA_CACHE_DIR): the first solve
    printed a 46-line RuntimeError "cannot cache function ... no locator available".
    With a writable temporary folder the cache goes there, silently; without one the
    kernels are compiled in memory after one notice line."""
    import shutil

    src = tmp_path / "src"
    shutil.copytree(ROOT / "amp_attention", src / "amp_attention",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    shutil.copytree(ROOT / "solvers", src / "solvers",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    shutil.copy(ROOT / "pyproject.toml", src)  # marks a source checkout (_checkout.py)
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    # without a writable TMPDIR Python's gettempdir() falls back on /tmp and /var/tmp:
    # those are made read-only too (in this private mount namespace only)
    read_only = [src, home] + ([] if tmp_writable else [tmp, "/tmp", "/var/tmp"])
    script = " && ".join(f"mount --bind {p} {p} && mount -o remount,bind,ro {p}"
                         for p in read_only)
    script += f" && cd {home} && exec {sys.executable} -m amp_attention se --json --max-iter 50"
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH", "MPLCONFIGDIR")}
    env.update(HOME=str(home), PYTHONPATH=str(src), TMPDIR=str(tmp))
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "locator" not in proc.stderr
    assert json.loads(proc.stdout)["converged"] is True
    if tmp_writable:
        assert proc.stderr == ""
        assert list(tmp.glob("amp-attention-numba-cache-*/**/*.nbi"))
    else:
        assert _one_line(proc.stderr).startswith("amp-attention: notice: no folder can hold")


# ------------------------------------------------------------- item 10: the Python API


def test_plans_take_numpy_grids() -> None:
    import numpy as np

    from amp_attention.experiments.compare import ComparePlan
    from amp_attention.experiments.phase_diagram import PhaseDiagramPlan
    from amp_attention.experiments.validate import ValidationPlan
    from amp_attention.spec import Problem

    plan = PhaseDiagramPlan(Problem(), alphas=np.linspace(0.1, 1, 5),
                            lams=np.geomspace(1e-3, 1, 4))  # 'truth value ... ambiguous'
    assert plan.alphas == tuple(np.linspace(0.1, 1, 5)) and len(plan.lams) == 4
    assert all(type(a) is float for a in plan.alphas)
    v = ValidationPlan(Problem(), np.array([0.5, 1.0]), np.array([16, 32]))
    assert v.ds == (16, 32) and all(type(d) is int for d in v.ds)
    assert ComparePlan(Problem(), alphas=np.array([0.5])).alphas == (0.5,)
    for bad, kind in (("0.5", TypeError), (0.5, TypeError), (np.ones((2, 2)), TypeError),
                      ([], ValueError), ([0.5, None], TypeError)):
        with pytest.raises(kind, match="alphas"):
            PhaseDiagramPlan(Problem(), alphas=bad, lams=(0.1,))


def test_identical_solves_compare_equal() -> None:
    from amp_attention.solvers.state_evolution import solve_state_evolution
    from amp_attention.spec import Problem

    a, b = solve_state_evolution(Problem()), solve_state_evolution(Problem())
    assert a == b  # their wall times differ
    assert a != solve_state_evolution(Problem(alpha=0.6))


def test_literal_hdi_overflow_is_an_error_not_nan(tmp_path, capsys) -> None:
    import numpy as np

    from amp_attention.cli import main
    from amp_attention.heads.diversity import head_diversity_index

    W = np.random.default_rng(0).normal(size=(2, 16, 4)) * 1e300
    with pytest.raises(ValueError, match="overflow"):
        head_diversity_index(W, normalise="none")
    assert 0 <= head_diversity_index(W) <= 1  # the default does not depend on the scale
    np.save(tmp_path / "w.npy", W)
    assert main(["heads", "hdi", str(tmp_path / "w.npy"), "--normalise", "none", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "overflow" in _one_line(err)


# -------------------------------------------------------------------- item 11: small


def test_quickstart_help_states_the_defaults_it_runs() -> None:
    import re

    from amp_attention.cli.quickstart import QUICKSTART_DESCRIPTION as text
    from amp_attention.experiments.quickstart import QuickstartConfig

    c = QuickstartConfig()
    text = " ".join(text.split())
    m = re.search(r"alpha on (\d+) points from ([0-9.]*[0-9]) to ([0-9.]*[0-9])", text)
    assert m and (float(m[2]), float(m[3]), int(m[1])) == c.alpha_grid  # said 12, ran 57
    m = re.search(r"d = (\d+) with (\d+) seeds at (\d+) of", text)
    assert m and (int(m[1]), int(m[2]), int(m[3])) == (c.erm_d, len(c.erm_seeds),
                                                       len(c.erm_alpha_values))
    for name, value in (("kappa0", c.kappa0), ("kappa", c.kappa), ("lam", c.lam),
                        ("Delta", c.noise), ("L", c.L)):
        assert re.search(rf"\b{name} = {value:g}\b", text), name


def test_a_single_seed_has_no_standard_error(capsys) -> None:
    from amp_attention.cli import main
    from amp_attention.cli.common import plus_minus

    assert main(["erm", "--n-seeds", "1", "--d", "12", "--json"]) == 0
    assert all(v is None for v in json.loads(capsys.readouterr().out)["stderr"].values())
    assert main(["erm", "--n-seeds", "1", "--d", "12"]) == 0
    table = capsys.readouterr().out.split("stderr\n", 1)[1].splitlines()
    rows = [line.split() for line in table if line.strip() and "all_converged" not in line]
    assert len(rows) >= 5 and all(r[-1] == "-" for r in rows)  # was 0
    assert "nan" not in plus_minus(float("nan")) and plus_minus(None).startswith("+- -")
    assert plus_minus(0.012) == "+-0.012   "


def test_no_warnings_with_the_jit_disabled(tmp_path) -> None:
    code, out, err = _run(["se", "--json", "--max-iter", "30"], cwd=tmp_path,
                          env={"NUMBA_DISABLE_JIT": "1"})
    assert code == 0 and json.loads(out)["params"]["L"] == 1
    assert err == "", err  # was RuntimeWarnings of the kernels run as Python


def test_matplotlib_config_falls_back_when_home_is_read_only(tmp_path, monkeypatch) -> None:
    from amp_attention import _environment as envmod

    monkeypatch.setattr(envmod.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    ok = tmp_path / "home"
    ok.mkdir()
    env = {"XDG_CONFIG_HOME": str(ok / ".config"), "XDG_CACHE_HOME": str(ok / ".cache")}
    assert envmod.matplotlib_config_fallback(env) is None and "MPLCONFIGDIR" not in env
    assert not (ok / ".config").exists()  # nothing created by the check
    monkeypatch.setattr(envmod, "_could_write", lambda p: False)
    chosen = envmod.matplotlib_config_fallback(env)
    assert chosen == env["MPLCONFIGDIR"] and os.stat(chosen).st_mode & 0o077 == 0
    env2 = {"MPLCONFIGDIR": "/mine"}
    assert envmod.matplotlib_config_fallback(env2) is None and env2["MPLCONFIGDIR"] == "/mine"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, /proc")
@pytest.mark.parametrize("sig,code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_terminated_sweep_ends_in_one_line_and_stops_its_workers(sig, code, tmp_path) -> None:
    """kill -TERM (or a closed terminal) on a sweep with local workers: one line, exit
    128 + signal, the workers gone, no 'leaked semaphore' report; the rerun resumes."""
    import signal
    import time

    out = tmp_path / "pd"
    argv = [sys.executable, "-m", "amp_attention", "phase-diagram", "--channel", "softmax",
            "--L", "2", "--alpha-range", "0.1", "1", "6", "--lam-range", "0.01", "1", "3",
            "--workers", "2", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.time() + 240
    while time.time() < deadline:
        if (out / "points").is_dir() and any((out / "points").glob("*.json")):
            break
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    assert proc.poll() is None, "finished before the signal: make the sweep longer"
    children = [int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()]
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code
    assert _one_line(err) == (f"amp-attention: terminated by {sig}; finished runs/points are "
                              "saved, rerun the same command to resume")
    time.sleep(1)
    def running(pid: int) -> bool:  # a zombie (exited, not yet reaped) has stopped
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    alive = {c: open(f"/proc/{c}/cmdline").read().replace("\0", " ")[:200] for c in children
             if running(c)}
    assert not {c: a for c, a in alive.items() if "resource_tracker" not in a}, alive


# ------------------------------------- item 12: error bars that say how far to trust them


@pytest.mark.parametrize("replicas,t975", [(8, 2.3646), (4, 3.1824)])
def test_monte_carlo_errors_carry_their_degrees_of_freedom(replicas, t975) -> None:
    """Each mc_stderr is estimated from R replicas (Student's law, R - 1 dof); the 95 %
    half-widths use that quantile (t(0.975, 7) = 2.3646, t(0.975, 3) = 3.1824, from
    tables), not 2."""
    from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
    from amp_attention.spec import Problem, Task

    r = solve_state_evolution(Problem(Task("softmax", L=2)),
                              mc=MonteCarloOptions(replicas=replicas, log2_n=9,
                                                   coarse_log2_n=7))
    assert r.mc_dof == replicas - 1
    for k, se in r.mc_stderr.items():
        assert r.mc_halfwidth95[k] == pytest.approx(t975 * se, rel=1e-4), k
    d = r.to_dict()
    assert d["mc_dof"] == replicas - 1 and set(d["mc_halfwidth95"]) == set(r.mc_stderr)
    closed = solve_state_evolution(Problem())  # closed form: no Monte Carlo, no dof
    assert closed.mc_dof is None and closed.mc_halfwidth95 is None
