"""Head Diversity Index (HDI) and principal angles between key subspaces.

Multi-head attention has H heads with key matrices W_K^h in R^{d_model x d_k};
head h compares tokens only through the subspace Range(W_K^h).  How different
the heads are is a statement about these subspaces.

Normalisation (docs/heads.md has the derivation)
-------------------------------------------------
The issue's formula is

    HDI_lit = 1 - 2/(H(H-1)) sum_{h<h'} ||G_hh'||_F^2,   G_hh' = (W_K^h)^T W_K^{h'} / d_k.

Read literally it is not scale free: for orthonormal columns Q_h,
||Q_h^T Q_h'||_F^2 = sum_i cos^2 theta_i (theta_i the principal angles), so two
identical heads give ||G||_F^2 = 1/d_k and HDI_lit = 1 - 1/d_k, not 0.  The
default ``normalise="orthonormal"`` therefore replaces each W_K^h by an
orthonormal basis Q_h of its range and uses

    HDI = 1 - 2/(H(H-1)) sum_{h<h'} ||Q_h^T Q_h'||_F^2 / d_k
        = 1 - mean over pairs of (1/d_k) sum_i cos^2 theta_i(h, h'),

which lies in [0, 1], is 1 iff every pair of head subspaces is orthogonal, is 0
iff all heads span the same subspace, and depends on W_K^h only through
Range(W_K^h) (so it is invariant under W_K^h -> W_K^h A for any invertible A,
in particular rotations within a head's subspace).

``normalise="none"`` computes HDI_lit itself.  It equals the default for every
configuration of subspaces iff every head satisfies (W_K^h)^T W_K^h =
sqrt(d_k) I_{d_k}, i.e. W_K^h = d_k^{1/4} Q_h R_h with R_h orthogonal.  It is
invariant under rotations W_K^h -> W_K^h R (R orthogonal), but not under
rescaling W_K^h -> c W_K^h, and lies in [0, 1] whenever every singular value of
every W_K^h is <= d_k^{1/4}.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from typing import Literal

import numpy as np

NORMALISATIONS = ("orthonormal", "none")
Normalisation = Literal["orthonormal", "none"]


#: how a 2-d or 3-d array holds the key matrices of H heads of width d_k
#:   stack    (H, d_model, d_k): head h is W[h]
#:   columns  (d_model, H d_k): W_K = [W_K^1, ..., W_K^H], columns h d_k..(h+1) d_k - 1
#:            are head h (x^T W_K, the convention of the papers and of Keras/JAX kernels)
#:   rows     (H d_k, d_model): rows h d_k..(h+1) d_k - 1 are head h; the weight of a
#:            PyTorch nn.Linear(d_model, H d_k) (out_features x in_features)
LAYOUTS = ("stack", "columns", "rows")


def as_head_stack(W: object, heads: int | None = None, *, layout: str | None = None,
                  d_k: int | None = None) -> np.ndarray:
    """Return the key matrices as a float array of shape (H, d_model, d_k).

    ``layout`` (one of :data:`LAYOUTS`) says how ``W`` holds them; it may be omitted
    only for a 3-d array (then "stack").  A 2-d array is ambiguous by its shape
    alone -- a (768, 768) matrix is a valid "columns" and a valid "rows" input with
    different heads -- so its layout must be given, with ``heads`` = H or ``d_k``
    (each checked against the other when both are given).  A 2-d shape (3 m, m) as
    "rows" or (m, 3 m) as "columns" is refused: it is that of
    ``nn.MultiheadAttention.in_proj_weight`` (or its transpose), which stacks
    W_q, W_k, W_v; pass its key block ``in_proj_weight[m:2 m]`` (docs/heads.md).
    """
    arr = np.asarray(W)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"W must be a real numeric array, got dtype {arr.dtype}")
    arr = arr.astype(float, copy=False)
    heads = _optional_count("heads", heads)
    d_k = _optional_count("d_k", d_k)
    if layout is None:
        if arr.ndim != 3:
            raise ValueError(
                f"layout is required for a {arr.ndim}-d array of shape {arr.shape}: the shape "
                "alone does not say which axis holds the heads; give layout='columns' "
                "(d_model, H d_k) or 'rows' (H d_k, d_model), e.g. a PyTorch nn.Linear "
                "weight) with heads = H or d_k")
        layout = "stack"
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "stack":
        if arr.ndim != 3:
            raise ValueError(f"layout 'stack' needs a 3-d array (H, d_model, d_k), got shape "
                             f"{arr.shape}")
        if heads is not None and heads != arr.shape[0]:
            raise ValueError(f"heads must equal W.shape[0] = {arr.shape[0]} for a stack "
                             f"(H, d_model, d_k), got {heads}")
        if d_k is not None and d_k != arr.shape[2]:
            raise ValueError(f"d_k must equal W.shape[2] = {arr.shape[2]} for a stack "
                             f"(H, d_model, d_k), got {d_k}")
        stack = arr
    else:
        if arr.ndim != 2:
            raise ValueError(f"layout {layout!r} needs a 2-d array, got shape {arr.shape}")
        cols = arr if layout == "columns" else arr.T  # (d_model, H d_k)
        d_model, total = cols.shape
        if total == 3 * d_model:
            raise ValueError(
                f"W: a {layout!r} matrix of shape {arr.shape} has H d_k = 3 d_model = {total}, "
                "the shape of nn.MultiheadAttention.in_proj_weight (W_q, W_k, W_v stacked"
                f"{'' if layout == 'rows' else ', transposed'}); pass its key block "
                f"in_proj_weight[{d_model}:{2 * d_model}] (docs/heads.md), or a 3-d stack if "
                "your key matrix really is this wide")
        if heads is None and d_k is None:
            raise ValueError(f"heads (H) or d_k is required for a {layout!r} matrix of shape "
                             f"{arr.shape}")
        if heads is None:
            heads = total // d_k if total % d_k == 0 else 0
            if heads == 0:
                raise ValueError(f"d_k must divide H d_k = {total} (the {layout} of W), "
                                 f"got d_k = {d_k}")
        if total % heads != 0:
            raise ValueError(f"heads must divide H d_k = {total} (the {layout} of W), got "
                             f"heads = {heads}")
        if d_k is not None and heads * d_k != total:
            raise ValueError(f"heads x d_k = {heads} x {d_k} must equal H d_k = {total} "
                             f"(the {layout} of W)")
        d_k = total // heads
        # column block h -> head h: (d_model, H, d_k) -> (H, d_model, d_k)
        stack = cols.reshape(d_model, heads, d_k).transpose(1, 0, 2)
    if min(stack.shape) < 1:
        raise ValueError(f"W must have H, d_model, d_k >= 1; got shape {stack.shape}")
    if not np.all(np.isfinite(stack)):
        raise ValueError("W must contain only finite numbers (found NaN or inf)")
    return np.ascontiguousarray(stack)


def one_line(exc: BaseException) -> str:
    """An exception as one line (its type when it has no message)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _npy_claim(fh) -> tuple[tuple, np.dtype, int]:
    """(shape, dtype, bytes of data) that the .npy header at the position of ``fh`` declares
    (the header is read, the data not)."""
    from numpy.lib import format as npy

    version = npy.read_magic(fh)
    read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, _, dtype = read(fh, max_header_size=10_000)
    count = 1
    for n in shape:
        count *= int(n)
    return tuple(shape), dtype, count * dtype.itemsize


def check_npy_claim(path: str | os.PathLike, fh, available: int) -> None:
    """ValueError before any data is read when the .npy header at ``fh`` declares more
    data than the file holds (``available`` bytes after the header: a damaged or
    hostile file), or more than the memory available (amp_attention.resources)."""
    from ..resources import memory_shortfall

    start = fh.tell()
    shape, dtype, nbytes = _npy_claim(fh)
    left = available - (fh.tell() - start)
    if dtype.hasobject:
        return  # refused by np.load(allow_pickle=False) with its own message
    if nbytes > left:
        raise ValueError(f"W: {str(path)!r} declares an array of shape {shape} ({nbytes} "
                         f"bytes of {dtype}) but holds {max(left, 0)} bytes of data: a "
                         "truncated or damaged file")
    why = memory_shortfall(3 * nbytes)  # the array, its float copy and a QR's work
    if why:
        raise ValueError(f"W: {str(path)!r}: an array of shape {shape} {why}")


def load_key_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """A numeric array from a .npy file, or from a .npz archive (``key``: which array;
    may be omitted when the archive holds one).

    Never unpickles: a pickle, a .pt/.pth checkpoint or an object array is refused
    with a ValueError that says how to save the weights instead.  The file type is
    read from its first bytes, not from its name.
    """
    how = ("save the key weights as a numeric array, e.g. "
           "numpy.save('wk.npy', layer.weight.detach().cpu().numpy()) (docs/heads.md)")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError as exc:
        raise ValueError(f"W: cannot open {str(path)!r}: {exc.strerror}") from None
    try:
        if magic == b"\x93NUMPY":
            if key is not None:
                raise ValueError(f"W: {str(path)!r} is a .npy file (one array); key applies "
                                 "only to a .npz archive")
            with open(path, "rb") as fh:
                check_npy_claim(path, fh, os.fstat(fh.fileno()).st_size)
            arr = np.load(path, allow_pickle=False)
        elif magic[:4] == b"PK\x03\x04":
            with np.load(path, allow_pickle=False) as archive:
                names = list(archive.files)
                if key is None and len(names) != 1:
                    raise ValueError(f"W: {str(path)!r} is a .npz archive of {len(names)} "
                                     f"arrays ({', '.join(names)}); choose one with key")
                name = names[0] if key is None else key
                if name not in names:
                    raise ValueError(f"W: {str(path)!r} has no array {name!r}; it holds "
                                     f"{', '.join(names)}")
                member = name if name in archive.zip.namelist() else f"{name}.npy"
                with archive.zip.open(member) as fh:
                    if fh.read(6) == b"\x93NUMPY":
                        fh.seek(0)
                        check_npy_claim(path, fh, archive.zip.getinfo(member).file_size)
                arr = archive[name]
                if not isinstance(arr, np.ndarray):  # NumPy returns a non-.npy member as bytes
                    raise ValueError(f"W: {str(path)!r} is not a valid .npz archive: its member "
                                     f"{name!r} is not a .npy array; {how}")
        else:
            raise ValueError(f"W: {str(path)!r} is not a .npy or .npz file (no NumPy header); "
                             f"pickles and torch checkpoints are never loaded: {how}")
    except ValueError as exc:
        if str(exc).startswith("W: "):
            raise
        # NumPy's own message for an object array invites allow_pickle=True: not ours
        raise ValueError(f"W: {str(path)!r} holds an array that cannot be read without "
                         f"unpickling (an object array, or a damaged file); {how}") from None
    except (zipfile.BadZipFile, zlib.error) as exc:  # truncated or corrupted archive
        raise ValueError(f"W: {str(path)!r} is a damaged .npz archive (truncated or "
                         f"corrupted: {one_line(exc)}); {how}") from None
    except (OSError, EOFError) as exc:
        raise ValueError(f"W: cannot read {str(path)!r} as a NumPy array ({one_line(exc)}); "
                         f"{how}") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"W: {str(path)!r} holds an array of dtype {arr.dtype}, not real "
                         f"numbers; {how}")
    return arr


def _optional_count(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _orthonormal_basis(A: np.ndarray, what: str) -> np.ndarray:
    """Orthonormal basis of Range(A) for a full-column-rank A (ValueError otherwise).

    The thin SVD is used instead of QR because its singular values give a
    reliable rank decision; the tolerance is numpy.linalg.matrix_rank's.
    """
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    tol = (s[0] if s.size else 0.0) * max(A.shape) * np.finfo(float).eps
    rank = int(np.sum(s > tol))
    if rank < A.shape[1]:
        raise ValueError(f"{what} has rank {rank} < {A.shape[1]} columns; its columns must be "
                         f"linearly independent (allowed: full column rank, d_k <= d_model)")
    return U


def orthonormal_heads(W: object, heads: int | None = None, *,
                      layout: str | None = None) -> np.ndarray:
    """Orthonormal bases Q_h of Range(W_K^h), shape (H, d_model, d_k).

    Raises ValueError naming the first rank-deficient head.
    """
    stack = as_head_stack(W, heads, layout=layout)
    H, d_model, d_k = stack.shape
    if d_k > d_model:
        raise ValueError(f"W: d_k = {d_k} exceeds d_model = {d_model}; a head's key matrix "
                         f"must have full column rank (allowed: d_k <= d_model)")
    return np.stack([_orthonormal_basis(stack[h], f"W head {h}") for h in range(H)])


def cross_grams(W: object, heads: int | None = None, *,
                normalise: Normalisation = "orthonormal",
                layout: str | None = None) -> np.ndarray:
    """All cross-Grams G_hh', shape (H, H, d_k, d_k).

    ``normalise="none"``: G_hh' = (W_K^h)^T W_K^{h'} / d_k (the issue's formula);
    ``normalise="orthonormal"``: G_hh' = Q_h^T Q_h' / sqrt(d_k), scaled so that
    ||G_hh'||_F^2 = (1/d_k) sum_i cos^2 theta_i is the mean squared cosine.
    """
    if normalise not in NORMALISATIONS:
        raise ValueError(f"normalise must be one of {', '.join(NORMALISATIONS)}; "
                         f"got {normalise!r}")
    if normalise == "orthonormal":
        B = orthonormal_heads(W, heads, layout=layout)
        scale = np.sqrt(B.shape[2])
    else:
        B = as_head_stack(W, heads, layout=layout)
        scale = float(B.shape[2])
    return np.einsum("hai,gaj->hgij", B, B) / scale


def pairwise_overlaps(W: object, heads: int | None = None, *,
                      normalise: Normalisation = "orthonormal",
                      layout: str | None = None) -> np.ndarray:
    """The (H, H) matrix O_hh' = ||G_hh'||_F^2 (diagonal included).

    With the default normalisation O_hh' = (1/d_k) sum_i cos^2 theta_i(h, h')
    in [0, 1], and O_hh = 1.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        G = cross_grams(W, heads, normalise=normalise, layout=layout)
        O = np.einsum("hgij,hgij->hg", G, G)
    if not np.all(np.isfinite(O)):
        # only the literal form can overflow: it scales as the fourth power of W
        big = float(np.max(np.abs(as_head_stack(W, heads, layout=layout))))
        raise ValueError(f"W: with normalise='none' the literal overlaps ||W_h^T W_h'/d_k||_F^2 "
                         f"overflow double precision (largest |entry| {big:.3g}; they scale as "
                         "its fourth power): rescale the keys, or use normalise='orthonormal', "
                         "which does not depend on their scale")
    return O


def head_diversity_index(W: object, heads: int | None = None, *,
                         normalise: Normalisation = "orthonormal",
                         layout: str | None = None) -> float:
    """HDI = 1 - 2/(H(H-1)) sum_{h<h'} ||G_hh'||_F^2 (see the module docstring).

    ``W``: (H, d_model, d_k), or a 2-d matrix with its ``layout`` ("columns",
    "rows") and ``heads = H`` (:func:`as_head_stack`); H >= 2.
    Default ``normalise="orthonormal"`` (G_hh' = Q_h^T Q_h'/sqrt(d_k)) gives a
    value in [0, 1]: 1 for mutually orthogonal head subspaces, 0 for identical
    ones.  ``normalise="none"`` uses G_hh' = (W_K^h)^T W_K^{h'} / d_k literally.
    """
    stack = as_head_stack(W, heads, layout=layout)
    if stack.shape[0] < 2:
        raise ValueError(f"W: the HDI needs H >= 2 heads (it averages over pairs), "
                         f"got H = {stack.shape[0]}")
    O = pairwise_overlaps(stack, normalise=normalise)
    iu = np.triu_indices(stack.shape[0], k=1)
    return float(1.0 - np.mean(O[iu]))


def principal_angles(A: object, B: object) -> np.ndarray:
    """Principal angles between Range(A) and Range(B), ascending, in [0, pi/2].

    cos theta_i are the singular values of Q_A^T Q_B (Q_A, Q_B orthonormal
    bases, both matrices need full column rank).  arccos loses accuracy for
    small angles (cos theta = 1 - theta^2/2 rounds to 1 below theta ~ 1e-8), so
    angles with cos^2 theta >= 1/2 are taken as arcsin of the singular values
    of the residual Q_B - Q_A Q_A^T Q_B instead (Knyazev & Argentati 2002; the
    same split as scipy.linalg.subspace_angles, which returns the angles in
    descending order).  Returns min(k_A, k_B) angles.
    """
    a = np.asarray(A, dtype=float)
    b = np.asarray(B, dtype=float)
    for name, m in (("A", a), ("B", b)):
        if m.ndim != 2 or min(m.shape) < 1:
            raise ValueError(f"{name} must be a 2-d array (d_model, k) with k >= 1, "
                             f"got shape {m.shape}")
        if not np.all(np.isfinite(m)):
            raise ValueError(f"{name} must contain only finite numbers")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"A and B must have the same number of rows (d_model); "
                         f"got {a.shape[0]} and {b.shape[0]}")
    Qa = _orthonormal_basis(a, "A")
    Qb = _orthonormal_basis(b, "B")
    if Qa.shape[1] < Qb.shape[1]:  # project the larger basis onto the smaller one
        Qa, Qb = Qb, Qa
    cosines = np.linalg.svd(Qa.T @ Qb, compute_uv=False)  # descending -> angles ascending
    theta = np.arccos(np.clip(cosines, -1.0, 1.0))
    small = cosines ** 2 >= 0.5
    if np.any(small):
        # The k_B singular values of the residual are the sines, descending;
        # reversed they are ascending like theta.
        sines = np.linalg.svd(Qb - Qa @ (Qa.T @ Qb), compute_uv=False)[::-1]
        theta = np.where(small, np.arcsin(np.clip(sines, 0.0, 1.0)), theta)
    return theta


def pairwise_principal_angles(W: object, heads: int | None = None, *,
                              layout: str | None = None) -> np.ndarray:
    """Principal angles for every pair of heads, shape (H, H, d_k), ascending in the last axis."""
    stack = orthonormal_heads(W, heads, layout=layout)  # validates rank with the head's index in the message
    H = stack.shape[0]
    out = np.zeros((H, H, stack.shape[2]))
    for h in range(H):
        for g in range(h + 1, H):
            out[h, g] = out[g, h] = principal_angles(stack[h], stack[g])
    return out
