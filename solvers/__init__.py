"""Solvers on top of :mod:`amp_attention`: fixed-point iteration and the state evolution."""

from .state_evolution import SEResult, solve_state_evolution

__all__ = ["SEResult", "solve_state_evolution"]
