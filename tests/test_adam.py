"""Adam / GD training of the tied-attention layer (issue 5, first increment)."""


import numpy as np
import pytest

from amp_attention.adam import AdamOptions, train
from amp_attention.channels import channel_for
from amp_attention.data import generate_dataset
from amp_attention.erm import direct_erm
from amp_attention.spec import Learner, Problem, Task, WishartTarget

D = 24


def _linear(learner):
    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), learner, alpha=0.5)
    data = generate_dataset(p, D, 0)
    erm = direct_erm(p, D, 0, data=data, tol=1e-12, max_iter=100000)
    assert erm.converged
    return p, data, erm.loss * data.n


def test_adam_reaches_the_convex_erm_optimum():
    p, data, R_star = _linear(Learner(1.0, 0.1))
    W0 = 0.3 * np.random.default_rng(1).standard_normal((D, D))
    run = train(data.X, data.y, channel_for(p.task), 0.1, W0, options=AdamOptions(lr=0.03))
    assert run.converged, run.status
    assert abs(run.objective - R_star) <= 1e-6 * R_star


def test_elementwise_adam_reaches_the_ridge_optimum():
    p, data, R_star = _linear(Learner(1.0, 0.3, "elementwise"))
    run = train(data.X, data.y, channel_for(p.task), 0.3, np.zeros((D, D)), parameterisation="elementwise",
                options=AdamOptions(lr=0.03))
    assert run.converged, run.status
    assert abs(run.objective - R_star) <= 1e-6 * R_star


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_minibatch_adam_gets_close_and_gd_descends():
    p, data, R_star = _linear(Learner(1.0, 0.1))
    W0 = 0.3 * np.random.default_rng(2).standard_normal((D, D))
    mb = train(data.X, data.y, channel_for(p.task), 0.1, W0,
               options=AdamOptions(lr=0.01, batch_size=data.n // 4, patience=200, max_iter=20000))
    assert mb.objective <= R_star * (1 + 1e-3)
    gd = train(data.X, data.y, channel_for(p.task), 0.1, W0,
               options=AdamOptions(optimiser="gd", lr=1e-3, max_iter=300))
    losses = [h[1] for h in gd.history]
    assert losses[-1] < losses[0]


def test_softmax_adam_is_within_the_spread_of_erm_restarts():
    p = Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.2),
                alpha=0.5)
    ch = channel_for(p.task)
    data = generate_dataset(p, D, 0, "quantile", channel=ch)
    erm = direct_erm(p, D, 0, channel=ch, data=data, restarts=3, tol=1e-9)
    W0 = 0.3 * np.random.default_rng(3).standard_normal((D, D))
    run = train(data.X, data.y, ch, 0.2, W0, options=AdamOptions(lr=0.03))
    assert run.converged, run.status
    best, worst = min(erm.restart_losses), max(erm.restart_losses)
    assert run.objective / data.n <= worst + 1e-6 * abs(best) + 1e-12


def test_divergence_is_reported():
    p, data, _ = _linear(Learner(1.0, 0.1))
    W0 = np.random.default_rng(4).standard_normal((D, D))
    run = train(data.X, data.y, channel_for(p.task), 0.1, W0,
                options=AdamOptions(optimiser="gd", lr=10.0, max_iter=200))
    assert not run.converged and run.status == "diverged" and run.message.startswith("at iteration")


@pytest.mark.parametrize("kw, name", [({"lr": 0.0}, "lr"), ({"beta1": 1.0}, "beta1"),
                                      ({"optimiser": "sgd"}, "optimiser"),
                                      ({"batch_size": 0}, "batch_size"), ({"patience": 0}, "patience")])
def test_bad_options_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        AdamOptions(**kw)


def test_train_layer_measures_the_trained_layer():
    import json

    from amp_attention.adam import train_layer

    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)
    res = train_layer(p, D, 0, options=AdamOptions(lr=0.03), target_spectrum="quantile")
    erm = direct_erm(p, D, 0, target_spectrum="quantile", tol=1e-12, max_iter=100000)
    assert res.converged and res.n == erm.n
    assert res.loss == pytest.approx(erm.loss, rel=1e-6)
    for k in ("train_error", "matrix_mse", "m", "q"):
        assert getattr(res, k) == pytest.approx(getattr(erm, k), rel=2e-3), k
    # L = 1 linear: the clean population error is exactly 2 ||S - S0||^2 / d.
    assert abs(res.test_error - 2 * res.matrix_mse) <= 4 * res.test_error_stderr
    assert res.eigenvalues_S.shape == (D,) and res.singular_values_W.shape == (D,)
    assert np.allclose(np.sort(res.singular_values_W**2 / D), np.sort(res.eigenvalues_S), atol=1e-10)
    json.dumps(res.to_dict())
    with pytest.raises(ValueError, match="init"):
        train_layer(p, D, 0, init="zeros")
