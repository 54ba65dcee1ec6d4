"""Penalties: the prior side of ERM, Adam, GAMP and the state evolution, one module per
penalty behind a registry (see :mod:`.base` for the contract)."""

from .base import DenoiserFunctionals, Penalty, check_hats
from .registry import make_penalty, penalty_class, penalty_for, penalty_names, penalty_summary

__all__ = ["DenoiserFunctionals", "Penalty", "check_hats", "make_penalty", "penalty_class",
           "penalty_for", "penalty_names", "penalty_summary"]
