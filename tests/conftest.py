"""Fixtures shared by the test modules.

pytest puts this directory on sys.path (default "prepend" import mode; tests/ has no
__init__.py), and Python does the same for a script run as ``python tests/NAME.py``, so
the modules here import their neighbours (recording, validation_*, docs_check,
se_regression) without touching sys.path themselves.
"""

from __future__ import annotations

import pytest

import recording


@pytest.fixture(scope="module")
def record(request):
    """The dict of a slow validation module's record: its tests store their entries in it,
    and after the module's last test it is written to the module's ``RECORD`` path by
    :func:`recording.write_record` (only with AMP_RECORD=1 and all ``RECORD_EXPECTED``
    entries present), whatever order the tests ran in.  The requesting module defines
    ``RECORD`` (a Path) and ``RECORD_EXPECTED`` (the number of entries)."""
    module = request.module
    path, expected = module.RECORD, module.RECORD_EXPECTED
    results: dict = {}
    yield results
    recording.write_record(results, expected, path)


def _finite_difference_vhat(ch, m, q, V, Q0, alpha, log2_n=11, replicas=8, seed=101,
                            g_out=None):
    """-2 alpha sum_k d E[g_out,k]/d omega_k by central differences at eps = 0.05 and
    0.1 sqrt(q), Richardson-extrapolated (the O(eps^2) bias is 4e-4 relative at the
    smooth point with eps = 0.1 alone), on independent RQMC points at fixed (u*, y); mean and
    stderr over replicas.  ``g_out(y, omega, ustar)``: the output function to differentiate
    (default: the global prox, ``ch.prox_batch``)."""
    import math

    import numpy as np

    from amp_attention.channels.base import overlap_split
    from amp_attention.solvers.channel_integrals import sobol_normals

    if g_out is None:
        def g_out(y, omega, ustar):
            return ch.prox_batch(y, omega, V).g_out
    K = ch.K
    slope, rest = overlap_split(m, q, Q0)
    g = sobol_normals(2 * K + ch.noise_dim, log2_n, replicas, seed)

    def central(y, omega, ustar, eps):
        tr = 0.0
        for k in range(K):
            e = np.zeros(K)
            e[k] = eps
            tr += np.mean(g_out(y, omega + e, ustar)[:, k]
                          - g_out(y, omega - e, ustar)[:, k]) / (2 * eps)
        return tr

    vals = []
    eps = 0.05 * math.sqrt(q)
    for r in range(replicas):
        omega = math.sqrt(q) * g[r, :, :K]
        ustar = slope * omega + math.sqrt(rest) * g[r, :, K:2 * K]
        y = ch.labels_from_noise(ch.h_from_u(ustar), g[r, :, 2 * K:])
        tr = (4 * central(y, omega, ustar, eps) - central(y, omega, ustar, 2 * eps)) / 3
        vals.append(-2 * alpha * tr)
    vals = np.array(vals)
    return vals.mean(), vals.std(ddof=1) / math.sqrt(replicas)


@pytest.fixture
def finite_difference_vhat():
    """V_hat as a finite difference of E[g_out] in omega (:func:`_finite_difference_vhat`):
    the independent check of the SE's V_hat by parts (tests/test_vhat_jumps.py,
    tests/test_prox_branches.py)."""
    return _finite_difference_vhat
