"""Multi-head attention as an ensemble of Nadaraya-Watson estimators (docs/heads.md).

A softmax attention head with key/query matrix W_h in R^{d_model x d_k} is a
Nadaraya-Watson kernel smoother with exponential kernel exp(<W_h^T x, W_h^T x_i>/tau),
tau = sqrt(d_k); multi-head attention averages H of them, each looking at the
data through its key subspace Range(W_h).  This subpackage provides

* the Head Diversity Index and principal angles between head subspaces
  (:mod:`.diversity`);
* vectorised NW heads, softmax or Gaussian kernel (:mod:`.nadaraya_watson`);
* a synthetic regression task (:mod:`.tasks`);
* simulation of head ensembles and the exact decomposition
  MSE = bias^2 + sum_h w_h^2 Var_h + sum_{h != h'} w_h w_h' Cov_hh', the
  rotation sweep from identical to orthogonal heads and the comparison of
  weighting schemes (:mod:`.ensemble`, :mod:`.weights`);
* the allocation sweep of a budget D = H d_k over the divisors of D, checked
  empirically against d_k* ~ (log n)^(2/(4+d)) (:mod:`.allocation`).

The command line is ``amp-attention heads`` (:mod:`amp_attention.cli.heads`).
"""

from .allocation import (AllocationCheck, AllocationResult, allocation_check, allocation_sweep,
                         budget_heads, divisors, law_dk_star)
from .diversity import (LAYOUTS, NORMALISATIONS, as_head_stack, cross_grams,
                        head_diversity_index, load_key_array, orthonormal_heads, pairwise_overlaps, pairwise_principal_angles,
                        principal_angles)
from .ensemble import (HeadPredictions, MSEDecomposition, RotationPoint, WeightingComparison,
                       average_decompositions, compare_weightings, decompose_ensemble_mse,
                       random_heads, rotation_heads, rotation_sweep, simulate_heads)
from .nadaraya_watson import KERNELS, NWKernel, nw_predict, nw_predict_heads, nw_weights
from .tasks import NWTask
from .weights import (WEIGHTINGS, fibonacci_weights, geometric_weights, head_weights,
                      rank_heads, uniform_weights)

__all__ = [
    "AllocationCheck", "AllocationResult", "HeadPredictions", "KERNELS", "LAYOUTS",
    "MSEDecomposition", "NORMALISATIONS",
    "NWKernel", "NWTask", "RotationPoint", "WEIGHTINGS", "WeightingComparison",
    "allocation_check", "allocation_sweep", "as_head_stack", "average_decompositions",
    "budget_heads", "compare_weightings", "cross_grams", "decompose_ensemble_mse", "divisors",
    "fibonacci_weights", "geometric_weights", "head_diversity_index", "head_weights",
    "law_dk_star", "load_key_array", "nw_predict", "nw_predict_heads", "nw_weights", "orthonormal_heads",
    "pairwise_overlaps", "pairwise_principal_angles", "principal_angles", "random_heads",
    "rank_heads", "rotation_heads", "rotation_sweep", "simulate_heads", "uniform_weights",
]
