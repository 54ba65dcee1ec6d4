"""Importing amp_attention makes idle OpenMP threads wait passively (unless the user
chose otherwise): with GNU OpenMP spinning beside OpenBLAS on a 2-core machine a
softmax ERM ran 8x slower (docs/performance.md, benchmarks/bench_thread_pools.py)."""

import os
import subprocess
import sys

import pytest

PROBE = "import os, amp_attention; print(os.environ.get('OMP_WAIT_POLICY'))"


@pytest.mark.parametrize("preset, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
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
