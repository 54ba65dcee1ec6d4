"""High-dimensional theory engine for tied single-head attention (state evolution, AMP, ERM)."""

__version__ = "0.1.0"
