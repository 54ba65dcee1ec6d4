"""Slow: SE outliers of Shat against finite-d ERM eigen-decompositions (issue 6).

Target: Wishart bulk kappa0 = 0.5 with three planted spikes (4.8, 6, 9) (quantile
bulk, Haar eigenvectors); linear channel L = 1, Delta = 1, lam = 0.1, kappa = 1,
alpha = 0.3 -- chosen so that the overlaps are far from 1 (SE: cos^2 = 0.967,
0.907, 0.796).  Direct ERM (convex; equal to Adam's optimum, tests/test_adam.py)
at d in {150, 300}, 3 seeds; the top three eigenpairs of Shat against the
spikes' eigenvectors of S0.

Tolerances: an outlier of B fluctuates by sqrt(2 qh / d) (the Gaussian noise
along the spike), i.e. sigma_d = sqrt(2 qh / d) / Vh for the eigenvalue of Shat;
the seed mean must lie within 3 sigma_d / sqrt(seeds) + 2/d of the prediction
(the 2/d: finite-size allowance).  cos^2 within 3 standard errors of the
seed spread + 0.02.  Runs are cached in $AMP_VALIDATION_CACHE; AMP_RECORD=1
rewrites tests/data/outliers_finite_size.json.

    AMP_RECORD=1 AMP_VALIDATION_CACHE=/tmp/outcache python -m pytest -m slow tests/test_validation_outliers_slow.py
"""

import math
from pathlib import Path

import numpy as np
import pytest
from recording import cached_json

from amp_attention.data import generate_dataset
from amp_attention.spec import Learner, Problem, SpikedTarget, Task
from amp_attention.erm import direct_erm
from amp_attention.solvers.outliers import measured_outliers, predict_outliers
from amp_attention.solvers.state_evolution import solve_state_evolution

pytestmark = pytest.mark.slow

RECORD = Path(__file__).parent / "data" / "outliers_finite_size.json"
PROBLEM = Problem(Task("linear", L=1, noise=1.0), SpikedTarget(0.5, (4.8, 6.0, 9.0)),
                  Learner(1.0, 0.1), alpha=0.3)
DS = (150, 300)
SEEDS = 3
RECORD_EXPECTED = len(DS)  # entries of RECORD (see conftest.record)


def _run(d: int, seed: int) -> list[dict]:
    data = generate_dataset(PROBLEM, d, seed, target_spectrum="quantile")
    res = direct_erm(PROBLEM, d, seed, data=data, tol=1e-9)
    assert res.converged
    return measured_outliers(res.S, data.S0, 3)


@pytest.mark.parametrize("d", DS)
def test_outliers_match_trained_eigenpairs(d, record):
    se = solve_state_evolution(PROBLEM)
    pred = predict_outliers(PROBLEM, se)
    runs = [cached_json(f"outliers_d{d}_s{s}", lambda s=s: _run(d, s)) for s in range(SEEDS)]
    sigma_d = math.sqrt(2 * se.q_hat / d) / se.V_hat
    rows = []
    for k, o in enumerate(pred):
        ev = np.array([r[k]["eigenvalue"] for r in runs])
        c2 = np.array([r[k]["cos2"] for r in runs])
        row = {"spike": o.target_eigenvalue, "se_eigenvalue": o.eigenvalue, "se_cos2": o.cos2,
               "erm_eigenvalue": float(ev.mean()), "erm_eigenvalue_std": float(ev.std(ddof=1)),
               "erm_cos2": float(c2.mean()), "erm_cos2_std": float(c2.std(ddof=1)),
               "sigma_d": sigma_d}
        rows.append(row)
        assert abs(ev.mean() - o.eigenvalue) <= 3 * sigma_d / math.sqrt(SEEDS) + 2.0 / d, row
        assert abs(c2.mean() - o.cos2) <= 3 * c2.std(ddof=1) / math.sqrt(SEEDS) + 0.02, row
    record[str(d)] = rows
