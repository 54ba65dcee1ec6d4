"""Slow: predicted spectra of Shat and W against Adam-trained weights (issue 5).

Linear channel L = 1, kappa0 = 0.5 (quantile target), Delta = 0.1, lam = 0.05,
alpha = 0.25; learner width kappa in {0.5, 1, 2}; Adam (lr 0.03, plateau floor
lr 1e-5) at d in {100, 150, 200}, one seed each.  Exactly what

    amp-attention spectrum --kappa K --kappa0 0.5 --noise 0.1 --lam 0.05 --alpha 0.25 \
        --simulate --d 100 150 200 --seeds 1 --lr-min 1e-5 --out DIR/kK

runs, so with AMP_VALIDATION_CACHE=DIR the CLI's runs are resumed (about 25 min
on one core for the three kappa).  AMP_RECORD=1 rewrites
tests/data/adam_spectra.json.

The Kolmogorov distance between the empirical spectral distribution of a d x d
matrix and its limit is O(1/d) up to logarithms (eigenvalue rigidity), so the
test asks for <= 3/d at every d, a smaller distance at d = 200 than at d = 100,
and the zero fraction within 1.5/sqrt(d) of the predicted atom.  A wrong law
(an atom off by 0.05, a bulk scaled by 10 %) gives distances >= 0.05 = 10/d at d = 200.
"""

import os
from pathlib import Path

import pytest
from recording import write_record

from amp_attention.adam import AdamOptions
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from solvers.spectra import SpectrumPlan, run_spectrum_check

pytestmark = pytest.mark.slow

RECORD = Path(__file__).parent / "data" / "adam_spectra.json"
KAPPAS = (0.5, 1.0, 2.0)
_results: dict = {}


def plan(kappa: float) -> SpectrumPlan:
    problem = Problem(Task("linear", L=1, noise=0.1), WishartTarget(0.5), Learner(kappa, 0.05),
                      alpha=0.25)
    return SpectrumPlan(problem, (100, 150, 200), 1, "quantile", AdamOptions(lr=0.03, lr_min=1e-5))


@pytest.mark.parametrize("kappa", KAPPAS)
def test_trained_spectra_match_the_prediction(kappa, tmp_path):
    cache = os.environ.get("AMP_VALIDATION_CACHE")
    out = Path(cache) / f"k{kappa:g}" if cache else tmp_path
    s = run_spectrum_check(plan(kappa), out)
    _results[f"kappa{kappa:g}"] = {k: s[k] for k in ("params", "predicted", "per_d", "runs",
                                                    "all_converged")}
    assert s["all_converged"]
    ks = {r["d"]: r for r in s["per_d"]}
    for d, r in ks.items():
        assert r["ks_S"] <= 3.0 / d, (kappa, r)
        assert abs(r["zero_fraction_S"] - s["predicted"]["atom_S"]) <= 1.5 / d**0.5, (kappa, r)
    assert ks[200]["ks_S"] < ks[100]["ks_S"], ks


def test_write_record():
    write_record(_results, len(KAPPAS), RECORD)
