"""The built-in penalties by ``Learner.parameterisation`` (docs/theory.md "Learners and the
objective"): what ``Learner``, the CLI's ``--learner`` choices and every algorithm read.

Adding a penalty = one module implementing :class:`.base.Penalty` (with a
``from_learner(learner)`` class method) + one line in ``_BUILTIN``.  The classes are
imported on first use, so that reading the names (``Learner``'s check, ``--help``)
loads nothing else.
"""

from __future__ import annotations

from ..registry import Registry

#: parameterisation -> (module in this package, class, one-line description for --help)
_BUILTIN: dict[str, tuple[str, str, str]] = {
    "factorised": ("nuclear_psd", "NuclearNormPSD",
                   "S = W^T W / sqrt(p d), weight decay = lam d Tr S (PSD, rank <= kappa d)"),
    "elementwise": ("frobenius", "Frobenius",
                    "S symmetric, penalty lam d ||S||_F^2 / 2"),
    "symmetric": ("nuclear_symmetric", "SymmetricNuclearNorm",
                  "S symmetric of either sign, penalty lam d ||S||_* (kappa >= 1)"),
}

PENALTIES = Registry(__package__, "parameterisation", _BUILTIN)


def penalty_names() -> tuple[str, ...]:
    """The registered parameterisations, in registry order."""
    return PENALTIES.names()


def penalty_summary(name: str) -> str:
    """The registered penalty's one-line description."""
    return PENALTIES.summary(name)


def penalty_class(name: str) -> type:
    """The class registered under ``name``."""
    return PENALTIES.cls(name)


def penalty_for(learner):
    """The penalty object of a :class:`~amp_attention.spec.Learner`."""
    return penalty_class(learner.parameterisation).from_learner(learner)


def make_penalty(parameterisation: str, lam: float, kappa: float = 1.0):
    """The registered penalty ``parameterisation`` at weight decay ``lam`` and width ``kappa``."""
    return penalty_class(parameterisation)(lam, kappa)
