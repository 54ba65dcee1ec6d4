"""Theorems the engine must never contradict (issue 17): at the points of the existing
validation plans the ERM state evolution sits above the Bayes-optimal one -- matrix
MSE >= MMSE and test error >= the Bayes predictor's -- beyond Monte-Carlo error
(3 combined standard errors).  The default run covers every closed-form point
but the threshold protocols' (their lam -> 0 solves take seconds each) and three
Monte-Carlo points at reduced settings; tests/test_bayes_bounds_slow.py runs every point at the
defaults (``python -m pytest -m slow tests/test_bayes_bounds_slow.py``)."""

from __future__ import annotations

import pytest

from validation_bayes import check, points

from amp_attention.solvers.bayes_channel_integrals import BayesMonteCarloOptions
from amp_attention.solvers.state_evolution import MonteCarloOptions

ALL = points(thresholds=False)
LINEAR = [k for k, p in ALL.items() if p.task.channel == "linear"]
#: the Monte-Carlo points of the default run: seq2lab at alpha = 1 (the smallest
#: test-error margin of its plan) and GAMP's softmax case (the closest softmax points,
#: alpha = 1 of the channel plan, are in the slow test: 45 s at reduced settings)
MONTE_CARLO = ["channels/seq2lab_L2_a1.0_lam0.01", "gamp/softmax_L2"]
ERM_MC = MonteCarloOptions(log2_n=11, replicas=4, coarse_log2_n=9)
BAYES_MC = BayesMonteCarloOptions(log2_n=10, inner_log2_n=7, replicas=4, coarse_log2_n=8)


def assert_bounds(row: dict) -> None:
    assert row["erm_converged"] and row["bayes_converged"], row
    for q in ("matrix_mse", "test_error"):
        assert row[f"{q}_margin"] >= -3 * row[f"{q}_sigma"] - 1e-9, (q, row)


def test_every_closed_form_point():
    for name in LINEAR:
        assert_bounds(check(name, ALL[name]))


@pytest.mark.parametrize("name", MONTE_CARLO)
def test_monte_carlo_points(name):
    assert_bounds(check(name, ALL[name], erm_mc=ERM_MC, bayes_mc=BAYES_MC))
