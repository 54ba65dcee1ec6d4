"""Solvers on top of :mod:`amp_attention`: fixed-point iteration and the state evolution."""

from .bayes_optimal import solve_bayes_optimal
from .state_evolution import SEResult, solve_state_evolution

__all__ = ["SEResult", "solve_bayes_optimal", "solve_state_evolution"]
