"""The two prox branches of the SE (docs/theory.md 16.8): the global minimiser and the
descent from the teacher's logits (the paper's convention).

Checked: the same numbers to the last digit where the prox has one minimiser (at a point
whose V is above the convexity certificate, so that the multi-start really runs); the
teacher branch is, row by row, the Newton descent from u* (or the global point, bit for bit,
where the two coincide); its V_hat by parts equals a finite difference of E[g_out] in omega
of the same branch where the minimisers jump; options and flags name the parameter."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from amp_attention.channels.branches import (PROX_BRANCHES, check_prox_branch, same_minimiser,
                                             teacher_branch, teacher_descent)
from amp_attention.solvers.channel_integrals import SE_FIELDS, MonteCarloChannel, paired_samples
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
from amp_attention.spec import Learner, Problem, Task, WishartTarget

LOGIT_GOE = Task("softmax", L=2, beta=1.0, noise=0.5, noise_at="logit_goe")
#: the paper's Figure-2 band: their SE state at lreg 1e-4 (lam 5e-5), alpha 0.2484
#: (data/SE/SE_kappa_0.5_lreg_0.0001_noise_0.5.csv: q 4.8252, m 2.0702, sigma 53.8826)
BAND = (2.0702, 4.8252, 2 * 53.8826, 1.5, 0.2484)
SMALL_MC = dict(log2_n=9, coarse_log2_n=7, test_log2_n=10, step_log2_n=10)


def test_branches_identical_where_the_prox_has_one_minimiser() -> None:
    # lam 0.01 (their lreg 0.02), alpha 0.3: V = 4.7, above the certificate 2.08 below which
    # one Newton run replaces the multi-start, and no sample has competing minima
    p = Problem(LOGIT_GOE, WishartTarget(0.5), Learner(1.0, 0.02), alpha=0.3)
    glob = solve_state_evolution(p, mc=MonteCarloOptions(**SMALL_MC))
    teach = solve_state_evolution(p, mc=MonteCarloOptions(**SMALL_MC, prox_branch="teacher"))
    assert glob.converged and teach.converged
    assert glob.V > p.task.channel_object.convex_below_every_label
    assert (glob.prox_branch, teach.prox_branch) == ("global", "teacher")
    assert glob.prox_branch_split == 0.0 and teach.prox_branch_split == 0.0
    skip = ("seconds", "prox_branch", "prox_branch_split")
    a = {k: v for k, v in glob.to_dict().items() if k not in skip}
    b = {k: v for k, v in teach.to_dict().items() if k not in skip}
    assert a == b  # every field, bit for bit


def _band_samples(log2_n: int = 10, seed: int = 5):
    ch = LOGIT_GOE.channel_object
    mc = MonteCarloChannel(ch, log2_n=log2_n, replicas=2, seed=seed)
    m, q, V, Q0, _ = BAND
    smp = paired_samples(mc.draws, m, q, Q0, mc.THETA)
    y, _ = mc._own_labels(Q0)
    return ch, y, smp.omega, V, smp.ustar


def test_teacher_branch_is_the_descent_from_the_teacher() -> None:
    ch, y, omega, V, ustar = _band_samples()
    glob = ch.prox_batch(y, omega, V)
    teach, split = teacher_branch(ch, y, omega, V, ustar, glob)
    assert 0.001 < split.mean() < 0.2  # the band: some samples' minimisers differ
    U, F, conv = ch.newton_from(y, omega, V, ustar)
    rows, same = np.flatnonzero(split), np.flatnonzero(~split)
    # where they differ: exactly the descent's end point, at or above the global objective
    assert np.array_equal(teach.uhat[rows], U[rows])
    assert np.all(teach.objective[rows] >= glob.objective[rows] - 1e-12)
    assert np.array_equal(teach.failed[rows], ~conv[rows])
    np.testing.assert_allclose(teach.g_out[rows], (U[rows] - omega[rows]) / V, rtol=0, atol=0)
    # where they coincide: the global point itself, bit for bit
    for name in ("uhat", "g_out", "trace_term", "objective", "failed"):
        assert np.array_equal(getattr(teach, name)[same], getattr(glob, name)[same]), name
    assert same_minimiser(U[same], glob.uhat[same]).all()


def test_teacher_descent_alone_is_the_teacher_branch_to_its_tolerance() -> None:
    # the fresh draws' cheap form (no global prox): the same minimiser on every row, equal
    # to the compared form to the descent's tolerance where it is the global one, and
    # identical where it is not
    ch, y, omega, V, ustar = _band_samples()
    teach, split = teacher_branch(ch, y, omega, V, ustar, ch.prox_batch(y, omega, V))
    alone = teacher_descent(ch, y, omega, V, ustar)
    assert same_minimiser(alone.uhat, teach.uhat).all()
    np.testing.assert_allclose(alone.g_out, teach.g_out, rtol=0, atol=1e-8)
    np.testing.assert_allclose(alone.trace_term, teach.trace_term, rtol=1e-6, atol=1e-9)
    assert np.array_equal(alone.uhat[split], teach.uhat[split])
    assert np.array_equal(alone.failed, teach.failed)


def test_teacher_branch_needs_a_local_descent() -> None:
    class NoDescent:
        name = "nodescent"

    with pytest.raises(ValueError, match="newton_from"):
        teacher_branch(NoDescent(), np.zeros((1, 4)), np.zeros((1, 3)), 1.0, np.zeros((1, 3)),
                       None)


@pytest.mark.parametrize("log2_n", [pytest.param(10), pytest.param(12, marks=pytest.mark.slow)])
def test_teacher_vhat_by_parts_equals_a_finite_difference(log2_n: int,
                                                         finite_difference_vhat) -> None:
    m, q, V, Q0, alpha = BAND
    ch = LOGIT_GOE.channel_object
    mc = MonteCarloChannel(ch, log2_n=log2_n, replicas=8, seed=3, prox_branch="teacher")
    est = mc.se(m, q, V, Q0, alpha)
    assert mc.last_branch_split > 0
    err = mc.last_stderr["V_hat"]
    def teacher_gout(y, omega, ustar):
        return teacher_branch(ch, y, omega, V, ustar, ch.prox_batch(y, omega, V))[0].g_out

    fd, fd_err = finite_difference_vhat(ch, m, q, V, Q0, alpha, log2_n=log2_n,
                                        g_out=teacher_gout)
    assert abs(est.V_hat - fd) <= 4 * math.hypot(err, fd_err), (est.V_hat, fd, err, fd_err)
    # and the two branches' V_hat differ there by more than their (paired: the same samples)
    # errors: a test that could not tell them apart would prove nothing
    k = SE_FIELDS.index("V_hat")
    teach_reps = mc.last_replicas[:, k].copy()
    glob = MonteCarloChannel(ch, log2_n=log2_n, replicas=8, seed=3)
    glob.se(m, q, V, Q0, alpha)
    diff = teach_reps - glob.last_replicas[:, k]
    assert abs(diff.mean()) > 4 * diff.std(ddof=1) / math.sqrt(diff.size), diff


def test_prox_branch_is_checked_and_named() -> None:
    assert PROX_BRANCHES == ("global", "teacher")
    assert check_prox_branch("teacher") == "teacher"
    with pytest.raises(ValueError, match="prox_branch"):
        MonteCarloOptions(prox_branch="local")
    with pytest.raises(ValueError, match="prox_branch"):
        MonteCarloChannel(LOGIT_GOE.channel_object, log2_n=6, replicas=2, prox_branch="x")


def test_cli_prox_branch_in_the_record(capsys) -> None:
    from amp_attention.cli import main

    rc = main(["se", "--channel", "softmax", "--L", "2", "--noise", "0.5", "--noise-at",
               "logit_goe", "--lam", "0.02", "--alpha", "0.3", "--mc-log2n", "9",
               "--mc-coarse-log2n", "7", "--mc-test-log2n", "10", "--mc-step-log2n", "10",
               "--prox-branch", "teacher", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["params"]["prox_branch"] == "teacher"
    assert out["prox_branch"] == "teacher" and out["prox_branch_split"] == 0.0
    assert main(["se", "--channel", "softmax", "--prox-branch", "nearest"]) == 2
    assert "argument --prox-branch: invalid choice" in capsys.readouterr().err


def test_branch_warning_names_the_branch_and_the_other() -> None:
    from types import SimpleNamespace

    from amp_attention.solvers.state_evolution import BRANCH_SPLIT_WARN, prox_branch_warning

    assert prox_branch_warning(SimpleNamespace(prox_branch_split=None, prox_branch="global")) == ""
    assert prox_branch_warning(SimpleNamespace(prox_branch_split=BRANCH_SPLIT_WARN / 2,
                                               prox_branch="global")) == ""
    w = prox_branch_warning(SimpleNamespace(prox_branch_split=0.008, prox_branch="global"))
    assert "0.8 %" in w and "global branch" in w and "--prox-branch teacher" in w
    w = prox_branch_warning(SimpleNamespace(prox_branch_split=0.008, prox_branch="teacher"))
    assert "teacher branch" in w and "--prox-branch global" in w


def test_global_branch_reports_the_split_at_the_band_state() -> None:
    """The global branch's result also says how many samples' minimisers differ (one more
    prox evaluation at the reported point): at the band state 0.1-5 %, as the teacher
    branch's own count there."""
    m, q, V, Q0, alpha = BAND
    ch = LOGIT_GOE.channel_object
    glob = MonteCarloChannel(ch, log2_n=10, replicas=2, seed=5)
    split = glob.branch_split(m, q, V, Q0)
    teach = MonteCarloChannel(ch, log2_n=10, replicas=2, seed=5, prox_branch="teacher")
    teach.se(m, q, V, Q0, alpha)
    assert 0.001 < split < 0.05
    assert split == teach.last_branch_split


def test_phase_diagram_records_the_branch(tmp_path) -> None:
    """A 2 x 1 softmax diagram in the teacher branch (well away from the band: the same
    numbers as the global one) records the branch in its plan."""
    from amp_attention.cli import main

    out = tmp_path / "pd"
    rc = main(["phase-diagram", "--channel", "softmax", "--L", "2", "--noise", "0.5",
               "--noise-at", "logit_goe", "--alpha-range", "0.3", "0.5", "2", "--lam-range",
               "0.05", "0.05", "1", "--mc-log2n", "8", "--mc-coarse-log2n", "6",
               "--mc-test-log2n", "8", "--mc-step-log2n", "8", "--workers", "0",
               "--prox-branch", "teacher", "--out", str(out)])
    assert rc == 0
    meta = json.loads((out / "phase_diagram.json").read_text())
    assert json.dumps(meta).count('"prox_branch": "teacher"') >= 1
