"""A registry of built-in implementations by name, imported on first use (channels by
``Task.channel``, penalties by ``Learner.parameterisation``).

Reading the names (``--help``, a spec's check) loads nothing else; the class behind a
name is imported when it is first asked for.
"""

from __future__ import annotations

import importlib


class Registry:
    """name -> (module in ``package``, class name, one-line description); ``what`` names
    the parameter in error messages ("channel", "parameterisation"), ``or_else`` says
    what else the parameter accepts (e.g. "or a channel instance")."""

    def __init__(self, package: str, what: str, builtin: dict[str, tuple[str, str, str]],
                 or_else: str = "") -> None:
        self.package, self.what, self.builtin, self.or_else = package, what, builtin, or_else

    def names(self) -> tuple[str, ...]:
        """The registered names, in registry order."""
        return tuple(self.builtin)

    def entry(self, name: str) -> tuple[str, str, str]:
        try:
            return self.builtin[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.what} must be one of {', '.join(self.builtin)}"
                             f"{' ' + self.or_else if self.or_else else ''}, got {name!r}") from None

    def summary(self, name: str) -> str:
        """The one-line description of ``name``."""
        return self.entry(name)[2]

    def cls(self, name: str) -> type:
        """The class registered under ``name``."""
        module, cls, _ = self.entry(name)
        return getattr(importlib.import_module(f"{self.package}.{module}"), cls)
