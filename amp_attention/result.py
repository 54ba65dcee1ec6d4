"""One result contract for every solver and algorithm (in the spirit of scipy's OptimizeResult).

Every result of an iterative computation -- an SE fixed point, a GAMP run, a
direct-ERM run, an Adam run, a threshold -- carries

* ``success``: whether the computation reached what it was asked for;
* ``status``: a :class:`Status`, one of a small enumerated set, so that callers
  branch on it without parsing text (it is a ``str`` enum: ``status ==
  "converged"`` works, and JSON holds the plain string);
* ``message``: one human-readable line saying what happened (free of command-line
  advice: the CLI adds its own hints, by status);

and ``to_dict()``, a plain-JSON summary (no arrays).  ``converged`` is kept as a
read-only alias of ``success``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from .jsonsafe import json_safe


class Status(str, Enum):
    """Why an iterative computation stopped."""

    #: the stopping rule was met
    CONVERGED = "converged"
    #: the iteration budget was spent before the stopping rule was met
    MAX_ITER = "max_iter"
    #: iterates became non-finite or grew without bound
    DIVERGED = "diverged"
    #: an iterate left the domain on which the map is defined (e.g. q_hat <= 0)
    INVALID = "invalid"
    #: the loss stopped decreasing at every step size (Adam's plateau criterion: a success)
    PLATEAU = "plateau"
    #: the numerics cannot resolve the quantity asked for at this precision
    UNRESOLVED = "unresolved"
    #: an inner solver (root finder, minimiser) reported failure
    FAILED = "failed"
    #: the iterate fell below the solver's resolution while the map still contracted
    #: towards 0: the fixed point is 0 to that resolution (the Bayes-optimal MMSE above its
    #: perfect-recovery threshold).  A success, but not a fixed point met to the tolerance:
    #: the residual there measures the contraction, not a distance to the tolerance.
    PERFECT_RECOVERY = "perfect_recovery"

    def __str__(self) -> str:
        return self.value


def outcome(success: bool, failure: Status, message: str = "") -> dict[str, Any]:
    """The ``success`` / ``status`` / ``message`` keywords of a result: converged with
    no message, or ``failure`` with ``message``."""
    if success:
        return {"success": True, "status": Status.CONVERGED, "message": ""}
    return {"success": False, "status": failure, "message": message}


@dataclass(frozen=True, kw_only=True)
class Result:
    """Base of every result type: ``success``, ``status``, ``message``, ``to_dict()``.

    The three fields are keyword-only, so subclasses list their own fields
    positionally before them."""

    success: bool
    status: Status
    message: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "success", bool(self.success))

    @property
    def converged(self) -> bool:
        """``success``, except at perfect recovery: there the iteration reached its
        answer (MMSE = 0 to the SE's resolution) without its residual meeting the
        tolerance, and "converged" means the residual met it."""
        return self.success and self.status is not Status.PERFECT_RECOVERY

    @property
    def summary(self) -> str:
        """``status`` followed by the message, when there is one."""
        return f"{self.status.value}: {self.message}" if self.message else self.status.value

    #: fields left out of :meth:`to_dict` (arrays, callables, nested objects)
    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """Every field except those in ``_NOT_IN_DICT``, as plain JSON values
        (non-finite floats as None), plus ``converged`` for readers of older outputs."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in self._NOT_IN_DICT:
                continue
            out[f.name] = json_safe(getattr(self, f.name))
        out["status"] = self.status.value
        out["converged"] = self.converged
        return out
