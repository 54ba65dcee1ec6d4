"""Importing amp_attention makes idle OpenMP threads wait passively (unless the user
chose otherwise): with GNU OpenMP spinning beside OpenBLAS on a 2-core machine a
softmax ERM ran 8x slower (docs/performance.md, benchmarks/bench_thread_pools.py)."""

import os
import subprocess
import sys

import pytest

PROBE = "import os, amp_attention; print(os.environ.get('OMP_WAIT_POLICY'))"


@pytest.mark.parametrize("preset, expected", [(None, "passive"), ("ACTIVE", "active"),
                                              ("passive", "passive")])
def test_omp_wait_policy_is_passive_unless_the_user_set_it(preset, expected) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset is not None:
        env["OMP_WAIT_POLICY"] = preset
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == expected


def test_the_policy_reaches_the_openmp_runtime_of_numba() -> None:
    """The variable is read when libgomp loads, at the first parallel kernel: it must be
    set before, i.e. importing the CLI or a solver must not run one."""
    code = ("import os, sys; import amp_attention.cli, amp_attention.erm, amp_attention.gamp; "
            "print(any('libgomp' in line for line in open('/proc/self/maps')))")
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc on this platform")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def _turkish_locale(tmp_path) -> dict | None:
    """Environment of a Turkish UTF-8 locale compiled into tmp_path (None if this
    machine cannot build it)."""
    import shutil

    if shutil.which("localedef") is None or not os.path.isdir("/usr/share/i18n/locales"):
        return None
    proc = subprocess.run(["localedef", "-i", "tr_TR", "-f", "UTF-8",
                           str(tmp_path / "tr_TR.UTF-8")], capture_output=True)
    if not (tmp_path / "tr_TR.UTF-8").exists():
        return None
    del proc
    return {"LOCPATH": str(tmp_path), "LC_ALL": "tr_TR.UTF-8"}


def test_the_policy_is_accepted_under_a_turkish_locale(tmp_path) -> None:
    """libgomp matched 'PASSIVE' case-insensitively with the locale's rules, and
    Turkish lower-cases 'I' to a dotless i: every process printed "libgomp: Invalid
    value for environment variable OMP_WAIT_POLICY" and lost the setting."""
    loc = _turkish_locale(tmp_path)
    if loc is None:
        pytest.skip("no localedef / locale sources to build tr_TR.UTF-8")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update(loc)
    code = ("import locale, amp_attention; from amp_attention.cli import main; "
            "assert locale.setlocale(locale.LC_CTYPE).startswith('tr_TR'); "
            "main(['se', '--channel', 'softmax', '--L', '2', '--json', '--max-iter', '2'])")
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True).stderr
    assert "Traceback" not in err, err
    assert "OMP_WAIT_POLICY" not in err, err
