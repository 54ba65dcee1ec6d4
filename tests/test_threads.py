"""The thread policy (amp_attention.threads, docs/performance.md "Threads"): one BLAS
thread and Numba on every core by default, N of each with threads=N, the caller's
choice kept by the library's entry points, one BLAS thread per sweep worker."""

import numba
import pytest
from threadpoolctl import threadpool_info

from amp_attention.cli import main
from amp_attention.runner import run_tasks
from amp_attention.threads import numba_max_threads, thread_policy, under_thread_policy


def blas_threads() -> set[int]:
    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def counts() -> tuple[set[int], int]:
    return blas_threads(), numba.get_num_threads()


def test_default_policy_one_blas_thread_numba_everywhere_and_restored():
    before = counts()
    with thread_policy() as used:
        assert used == {"blas": 1, "numba": numba_max_threads()}
        assert counts() == ({1}, numba_max_threads())
    assert counts() == before


def test_explicit_threads_and_the_entry_points_keep_the_callers_choice():
    seen = []

    @under_thread_policy
    def entry_point():
        seen.append(counts())

    with thread_policy(1):
        entry_point()  # the library's default does not override the caller's 1
    entry_point()
    assert seen == [({1}, 1), ({1}, numba_max_threads())]
    if numba_max_threads() >= 2:
        with thread_policy(2):
            assert counts() == ({2}, 2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        with thread_policy(bad):
            pass


def test_cli_threads_flag(capsys):
    assert main(["se", "--threads", "0"]) == 2
    assert "argument --threads: must be an integer >= 1" in capsys.readouterr().err
    assert main(["se", "--threads", "1", "--json"]) == 0


def _worker_counts(_):
    return sorted(blas_threads()), numba.get_num_threads()


def test_sweep_workers_take_one_blas_thread_and_their_share_of_the_cores():
    import os

    out = run_tasks(_worker_counts, [(0,), (1,)], workers=2)
    share = max(1, min(numba_max_threads(), (os.cpu_count() or 1) // 2))
    assert out == [([1], share), ([1], share)]
