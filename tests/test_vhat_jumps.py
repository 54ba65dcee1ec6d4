"""V_hat where the softmax prox minimiser jumps (issue 30, item 2; docs/theory.md 16.2).

The SE's V_hat = -2 alpha E[tr d g_out/d omega] must count the jumps of the global
minimiser.  Checked against an independent estimate: central differences of
E[g_out,k] in omega_k on independent RQMC points (Richardson-extrapolated from
eps = 0.05 and 0.1 sqrt q), at points with competing prox minima
and at points without.  The Hessian trace (the smooth part only) must fail where
the minimiser jumps, or the check could not tell the two apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.solvers.channel_integrals import MonteCarloChannel
from amp_attention.solvers.state_evolution import JUMP_WARN_ERRORS, prox_jumps, vhat_jump_share
from amp_attention.spec import Task

# (task, m, q, V, Q0, alpha, prox has competing minima)
POINTS = {
    # the engine's (Hessian-form) fixed point of softmax L = 2, kappa0 = 0.5, Delta = 0.5
    # logit_goe, lam = 5e-5, alpha = 0.26: the case the defect was found at
    "softmax-jumps": (Task("softmax", L=2, beta=1.0, noise=0.5, noise_at="logit_goe"),
                      1.779548509415747, 3.2012476518745236, 56.55415255440204, 1.5, 0.26,
                      True),
    # beta = 2 with a large V: competing minima again
    "softmax-beta2": (Task("softmax", L=2, beta=2.0, noise=0.5, noise_at="logit_goe"),
                      1.2, 2.0, 20.0, 1.5, 0.3, True),
    # the CLI-default softmax point (noiseless, lam 0.1, alpha 0.5): a unique minimiser
    "softmax-smooth": (Task("softmax", L=2, beta=1.0, noise=0.0),
                       0.6981846961241122, 0.3604764596582668, 0.926339437884581, 1.5, 0.5,
                       False),
    # seq2lab with logit noise and a large V
    "seq2lab": (Task("seq2lab", L=2, beta=2.0, noise=0.2, noise_at="logit"),
                1.0, 1.5, 30.0, 1.5, 0.3, None),
}


# default run: one point with jumps and one without; all four in the slow run
DEFAULT = ("softmax-jumps", "softmax-smooth")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else pytest.mark.slow)
                                  for n in POINTS])
def test_vhat_equals_a_finite_difference_of_g_out(name: str, finite_difference_vhat) -> None:
    task, m, q, V, Q0, alpha, jumps = POINTS[name]
    ch = task.channel_object
    mc = MonteCarloChannel(ch, log2_n=11, replicas=8, seed=3)
    est = mc.se(m, q, V, Q0, alpha)
    err = mc.last_stderr["V_hat"]
    fd, fd_err = finite_difference_vhat(ch, m, q, V, Q0, alpha)
    tol = 4 * math.hypot(err, fd_err)
    assert abs(est.V_hat - fd) <= tol, (est.V_hat, fd, tol)
    hessian = mc.last_vhat_forms[:, 1]
    h_mean, h_err = hessian.mean(), hessian.std(ddof=1) / math.sqrt(hessian.size)
    gap = abs(h_mean - fd) / math.hypot(h_err, fd_err)
    # the SE's jump diagnostic (docs/theory.md 16.3) against the finite difference's
    # jump share (fd - Hessian) / fd
    share, share_err = vhat_jump_share(mc.last_vhat_forms)
    expected = (fd - h_mean) / fd
    expected_err = math.hypot(h_err, fd_err * h_mean / fd) / fd
    assert abs(share - expected) <= 4 * math.hypot(share_err, expected_err), (share, expected)
    if jumps:
        assert gap > 5, f"the Hessian form agrees here ({gap:.1f} sigma): no jumps to test"
        if -expected > 2 * JUMP_WARN_ERRORS * share_err:  # large enough to be detected
            assert share < -JUMP_WARN_ERRORS * share_err, (share, share_err)
    elif jumps is False:
        assert gap < 4, f"the Hessian form should be right without jumps ({gap:.1f} sigma)"
        assert abs(share) < JUMP_WARN_ERRORS * share_err + 1e-4, (share, share_err)


def test_vhat_jump_share_of_replica_forms() -> None:
    """(by parts - Hessian) / by parts over replicas, with its replica standard error;
    undefined (None) without replicas or with a zero V_hat."""
    forms = np.array([[1.0, 1.1], [1.2, 1.3], [0.8, 0.9]])
    share, err = vhat_jump_share(forms)
    assert share == pytest.approx(-0.1) and err == pytest.approx(0.0, abs=1e-15)
    forms = np.array([[1.0, 1.0], [1.0, 1.2]])
    share, err = vhat_jump_share(forms)
    assert share == pytest.approx(-0.1) and err == pytest.approx(0.1)
    assert vhat_jump_share(np.empty((0, 2))) == (None, None)
    assert vhat_jump_share(np.zeros((3, 2))) == (None, None)


def test_rounding_level_differences_are_no_jumps() -> None:
    """The warning needs the share beyond 3 standard errors AND beyond 1e-6: at a trivial
    fixed point the two forms differ by rounding alone (seq2lab L = 3 at the CLI defaults
    gave 2.6e-9 +- 0.8e-9 before the fused centre control variate, 1.2e-9 +- 1.9e-9 after),
    which a 3-error test alone flagged at random."""
    assert not prox_jumps(2.6e-9, 7.7e-10)
    assert not prox_jumps(None, None) and not prox_jumps(-0.05, 0.02)
    assert prox_jumps(-0.046, 0.004) and prox_jumps(2e-6, 1e-7)
