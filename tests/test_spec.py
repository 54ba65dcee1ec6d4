"""Bad input raises ValueError naming the parameter and its range (issue 2, item 2)."""

import math

import pytest

from amp_attention.spec import (
    CustomTarget, Learner, PowerLawTarget, Problem, Task, WishartTarget,
)


@pytest.mark.parametrize("alpha", [0, -0.5, math.nan, math.inf, "x"])
def test_alpha_must_be_positive_finite(alpha):
    with pytest.raises(ValueError, match="alpha"):
        Problem(alpha=alpha)


@pytest.mark.parametrize("kappa", [0, -1, math.nan, math.inf, 1e-300, 1e12])
def test_kappa_must_be_positive_finite(kappa):
    with pytest.raises(ValueError, match="kappa"):
        Learner(kappa=kappa)


@pytest.mark.parametrize("kappa0", [0, -0.1, math.inf, math.nan, 1e-300, 1e12])
def test_kappa0_must_be_in_its_range(kappa0):
    with pytest.raises(ValueError, match=r"kappa0 must lie in \[1e-06, 1e\+06\]"):
        WishartTarget(kappa0=kappa0)


@pytest.mark.parametrize("noise", [-1e-3, math.nan, math.inf])
def test_noise_must_be_nonnegative_finite(noise):
    with pytest.raises(ValueError, match="noise"):
        Task(noise=noise)


@pytest.mark.parametrize("lam", [-0.1, math.nan, -math.inf])
def test_lam_must_be_nonnegative_finite(lam):
    with pytest.raises(ValueError, match="lam"):
        Learner(lam=lam)


@pytest.mark.parametrize("L", [0, -2, 1.5, math.nan, "two", True])
def test_L_must_be_integer_at_least_one(L):
    with pytest.raises(ValueError, match="L must be an integer >= 1"):
        Task(L=L)


@pytest.mark.parametrize("beta", [0, -1, math.nan, math.inf])
def test_beta_must_be_positive_finite(beta):
    with pytest.raises(ValueError, match="beta"):
        Task(beta=beta)


def test_unknown_channel_is_rejected_with_the_allowed_list():
    with pytest.raises(ValueError, match="channel must be one of linear, softmax, seq2lab"):
        Task(channel="relu")


def test_unknown_noise_location_and_parameterisation():
    with pytest.raises(ValueError, match="noise_at"):
        Task(noise_at="input")
    with pytest.raises(ValueError, match="parameterisation"):
        Learner(parameterisation="lora")


def test_power_law_target_validation():
    with pytest.raises(ValueError, match="gamma"):
        PowerLawTarget(gamma=0)
    with pytest.raises(ValueError, match="p0 must lie in"):
        PowerLawTarget(d=10, p0=11)
    with pytest.raises(ValueError, match="Q0"):
        PowerLawTarget(Q0=-1)
    s = PowerLawTarget(gamma=1.0, d=50, p0=20, Q0=2.0).eigenvalues()
    assert abs((s**2).mean() - 2.0) < 1e-12 and (s[20:] == 0).all()


def test_custom_target_validation():
    with pytest.raises(ValueError, match="eigenvalues must be >= 0"):
        CustomTarget(eigenvalues=(1.0, -0.5))
    with pytest.raises(ValueError, match="finite"):
        CustomTarget(eigenvalues=(1.0, math.nan))
    with pytest.raises(ValueError, match="exactly one"):
        CustomTarget()
    with pytest.raises(ValueError, match="grid must be increasing"):
        CustomTarget(grid=(0.0, 2.0, 1.0), density=(1.0, 1.0, 1.0))
    t = CustomTarget(grid=(0.0, 1.0, 2.0), density=(0.0, 1.0, 0.0))
    pts, w = t.atoms()
    assert abs(w.sum() - 1) < 1e-15 and abs(t.Q0 - 1.0) < 1e-12


def test_valid_problem_round_trips_to_json_dict():
    p = Problem(Task("linear", L=2, noise=0.5), WishartTarget(0.3), Learner(0.5, 0.1), alpha=0.7)
    d = p.to_dict()
    assert d["L"] == 2 and d["target"]["kappa0"] == 0.3 and d["kappa"] == 0.5 and d["alpha"] == 0.7
    assert p.task.K == 3 and p.learner.rank_capped


@pytest.mark.parametrize("lam", [5e-324, 1e-20, 1e300, math.inf])
def test_lam_must_be_zero_or_in_its_range(lam):
    """A denormal or astronomical weight decay made the conjugates overflow (NumPy
    warnings, then a traceback in the spectra): refused, naming the range."""
    with pytest.raises(ValueError, match=r"lam must be 0 or lie in \[1e-12, 1e\+06\]|lam must be finite"):
        Learner(lam=lam)


@pytest.mark.parametrize("beta", [1e4, 1e300])
def test_beta_has_an_upper_bound(beta):
    with pytest.raises(ValueError, match=r"beta must lie in \(0, 1000\]"):
        Task("softmax", L=2, beta=beta)


def test_bounded_parameters_state_their_whole_range_below_it_too():
    """beta <= 0 and lam < 0 once said '(0, inf)' and '[0, inf)' while the bounds are
    (0, 1000] and 0 or [1e-12, 1e6]: the one check gives the whole range either side."""
    with pytest.raises(ValueError, match=r"beta must lie in \(0, 1000\]"):
        Task("softmax", L=2, beta=0.0)
    with pytest.raises(ValueError, match=r"lam must be 0 or lie in \[1e-12, 1e\+06\]"):
        Learner(lam=-1.0)


@pytest.mark.parametrize("Q0", [0.0, -1.0, 1e-300, 2.4620244497880648e+154, math.inf, math.nan])
def test_powerlaw_Q0_must_be_in_its_range(Q0):
    """Q0 = 2.46e154 (the slow CLI fuzz) overflowed the fourth moment of the spectrum in
    the residual kurtosis: a traceback from `scaling`. Refused, naming the range."""
    with pytest.raises(ValueError, match=r"Q0 must lie in \[1e-12, 1e\+12\]"):
        PowerLawTarget(gamma=1.5, d=40, Q0=Q0)
