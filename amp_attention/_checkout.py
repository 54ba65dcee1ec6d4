"""``amp_attention.solvers`` when the package is imported from a source checkout.

The theory layer lives in the repository's top-level folder ``solvers/`` and is
installed as ``amp_attention.solvers`` (setuptools ``package-dir`` in pyproject.toml),
so no generic top-level ``solvers`` module reaches site-packages.  An installed copy
has the folder ``amp_attention/solvers/``; a checkout does not.  ``python -m pytest``
run from the repository root puts the root first on ``sys.path``, so the checkout's
``amp_attention/`` shadows the installed package and ``import amp_attention.solvers``
would fail.  In that case (and only then) a meta-path finder answers for that one
name, with the same mapping setuptools applies at install time; it is the mechanism
setuptools' own editable installs use.  It goes first on ``sys.meta_path``: an editable
install of another checkout answers for the same name, and this checkout's package must
get this checkout's solvers.  Every other import is left to the default
machinery, and nothing is registered for an installed copy.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

SUBPACKAGE = "amp_attention.solvers"


class _CheckoutSolversFinder(importlib.abc.MetaPathFinder):
    """Finds ``amp_attention.solvers`` in ``<checkout>/solvers`` and nothing else."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != SUBPACKAGE:
            return None  # submodules are found through the package's __path__
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(self.folder, "__init__.py"),
            submodule_search_locations=[self.folder])


def checkout_solvers_folder(package_dir: str) -> str | None:
    """``<root>/solvers`` if ``package_dir`` is the ``amp_attention/`` folder of a source
    checkout (a sibling ``pyproject.toml`` and ``solvers/__init__.py``, no installed
    ``solvers/`` inside the package); otherwise None."""
    if os.path.isdir(os.path.join(package_dir, "solvers")):
        return None  # an installed copy (or a build tree) carries its own solvers/
    root = os.path.dirname(package_dir)
    folder = os.path.join(root, "solvers")
    if (os.path.isfile(os.path.join(root, "pyproject.toml"))
            and os.path.isfile(os.path.join(folder, "__init__.py"))):
        return folder
    return None


def map_checkout_solvers(package_dir: str) -> bool:
    """Register the finder for a checkout's ``package_dir`` (once); True if it applies."""
    folder = checkout_solvers_folder(package_dir)
    if folder is None:
        return False
    if not any(isinstance(f, _CheckoutSolversFinder) and f.folder == folder
               for f in sys.meta_path):
        # first: an editable install of another checkout registers a finder for the same
        # name at start-up, and its solvers must not pair with this checkout's package
        sys.meta_path.insert(0, _CheckoutSolversFinder(folder))
    return True
