"""The measurement operator of docs/theory.md "Why the problem is a GLM", written as a few large
matrix products.

For a data tensor X of shape (n, L, d) (row a of X[mu] is the token x_a of
sample mu) and a symmetric d x d matrix S,

    A(S)_mu,ab = h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d)          (docs/theory.md
    "Data model")

and its Frobenius adjoint, for R of shape (n, L, L),

    A*(R) = ( sum_mu X_mu^T R_mu X_mu - (sum_mu tr R_mu) I ) / sqrt(d).

Labels and residuals live on the upper triangle a <= b, in the row-major order
(0,0), (0,1), ..., (0,L-1), (1,1), ..., (L-1,L-1) (K = L(L+1)/2 entries); the
GLM components are u_ab = h_ab / tau_ab with tau_aa = sqrt(2), tau_ab = 1.

Nothing here ever forms an n x d x d array: the cost of A and A* is one
(nL x d) @ (d x d) GEMM plus O(n L^2 d) work for the small per-sample products,
and the memory is O(n L d + d^2).

Tokens X in float32 (``--dtype float32``) run the GEMMs and the (n, L, d) buffers
in float32 -- half the memory traffic and twice the SIMD width -- while everything
of size d x d or (n, K) (S, the gradients, the measurements) stays float64: the
per-sample dot products accumulate in float64.
"""

from __future__ import annotations

import math

import numpy as np

from ._operator_kernels import upper_products, weighted_tokens


def _check_X(X: np.ndarray) -> tuple[int, int, int]:
    if X.ndim != 3:
        raise ValueError(f"X must have shape (n, L, d), got shape {X.shape}")
    return X.shape  # type: ignore[return-value]


def triu_indices(L: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major (a, b) index arrays of the upper triangle a <= b of an L x L matrix."""
    return np.triu_indices(L)


def tau(L: int) -> np.ndarray:
    """The K-vector tau with tau_aa = sqrt(2), tau_ab = 1 for a < b (docs/theory.md "Why the
    problem is a GLM")."""
    a, b = triu_indices(L)
    return np.where(a == b, math.sqrt(2.0), 1.0)


def _kernel_indices(L: int) -> tuple[np.ndarray, np.ndarray]:
    a, b = triu_indices(L)
    return a.astype(np.int64), b.astype(np.int64)


#: the token dtypes the operators run in (anything else is converted to float64)
TOKEN_DTYPES = ("float64", "float32")


def token_dtype(X: np.ndarray) -> np.dtype:
    """float32 for float32 tokens, float64 otherwise."""
    return np.dtype(np.float32) if X.dtype == np.float32 else np.dtype(np.float64)


def check_token_dtype(dtype: str) -> str:
    """``dtype``, one of TOKEN_DTYPES (else ValueError naming them)."""
    if dtype not in TOKEN_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(TOKEN_DTYPES)}; got {dtype!r}")
    return dtype


def tokens_in(X: np.ndarray, dtype: str) -> np.ndarray:
    """The tokens X as a C-contiguous array of ``dtype`` ('float64' or 'float32')."""
    return np.ascontiguousarray(X, dtype=check_token_dtype(dtype))


def _contiguous(X: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=token_dtype(X))


def _workspace(work: np.ndarray | None, shape: tuple[int, ...],
               dtype: np.dtype = np.dtype(np.float64)) -> np.ndarray:
    if work is None:
        return np.empty(shape, dtype=dtype)
    if work.shape != shape or work.dtype != dtype or not work.flags.c_contiguous:
        raise ValueError(f"work must be a C-contiguous {dtype.name} array of shape {shape}")
    return work


def measure(X: np.ndarray, S: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """B(S) = upper_triangle(h(S)), shape (n, K): the linear-channel measurements.

    One GEMM (X S) plus the K per-sample dot products (Numba).  ``work``, an
    (n, L, d) buffer of the tokens' dtype, receives X S: iterative callers pass the same
    buffer every time and so avoid faulting in a fresh n L d array per call."""
    n, L, d = _check_X(X)
    if S.shape != (d, d):
        raise ValueError(f"S must have shape ({d}, {d}), got {S.shape}")
    X = _contiguous(X)
    XS = _workspace(work, (n, L, d), X.dtype)
    np.matmul(X.reshape(n * L, d), np.asarray(S, dtype=X.dtype), out=XS.reshape(n * L, d))
    ka, kb = _kernel_indices(L)
    out = np.empty((n, ka.size))
    upper_products(XS, X, ka, kb, out)
    out[:, ka == kb] -= np.trace(S)
    out /= math.sqrt(d)
    return out


def preactivations(X: np.ndarray, S: np.ndarray) -> np.ndarray:
    """h(S) of shape (n, L, L): h_ab = (x_a^T S x_b - delta_ab Tr S)/sqrt(d)."""
    return from_upper_triangle(measure(X, S), X.shape[1])


def _adjoint_from_upper(X: np.ndarray, r: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """A*(Rt) for the symmetric Rt with upper triangle r (Rt_aa = r_aa, Rt_ab = r_ab/2):
    (sum_mu X_mu^T Rt_mu X_mu - (sum_mu tr Rt_mu) I)/sqrt(d), one GEMM; ``work``
    as in :func:`measure`."""
    n, L, d = X.shape
    ka, kb = _kernel_indices(L)
    X = _contiguous(X)
    M = _workspace(work, (n, L, d), X.dtype)
    weighted_tokens(np.ascontiguousarray(r, dtype=np.float64), X, ka, kb, M)
    G = np.asarray(X.reshape(n * L, d).T @ M.reshape(n * L, d), dtype=np.float64)
    G = 0.5 * (G + G.T)
    G[np.diag_indices(d)] -= float(np.sum(r[:, ka == kb]))
    G /= math.sqrt(d)
    return G


def preactivations_adjoint(X: np.ndarray, R: np.ndarray) -> np.ndarray:
    """A*(R) = (sum_mu X_mu^T R_mu X_mu - (sum_mu tr R_mu) I)/sqrt(d), symmetrised.

    This is the adjoint of :func:`preactivations` for the Frobenius inner
    products on (n, L, L) arrays and on d x d matrices: <R, A(S)> = <A*(R), S>
    for every symmetric S (the symmetrisation makes it the adjoint on Sym(d)
    also when R is not symmetric: only sym(R) matters).
    """
    n, L, d = _check_X(X)
    if R.shape != (n, L, L):
        raise ValueError(f"R must have shape ({n}, {L}, {L}), got {R.shape}")
    a, b = triu_indices(L)
    # Upper-triangle weights of sym(R): Rt_ab = (R_ab + R_ba)/2 = r_ab/2 off the diagonal.
    r = np.where(a == b, R[:, a, b], R[:, a, b] + R[:, b, a])
    return _adjoint_from_upper(X, r)


def upper_triangle(H: np.ndarray) -> np.ndarray:
    """(n, L, L) -> (n, K): the entries a <= b in row-major order."""
    if H.ndim != 3 or H.shape[1] != H.shape[2]:
        raise ValueError(f"H must have shape (n, L, L), got {H.shape}")
    a, b = triu_indices(H.shape[1])
    return H[:, a, b]


def from_upper_triangle(Y: np.ndarray, L: int) -> np.ndarray:
    """(n, K) -> (n, L, L) symmetric, inverse of :func:`upper_triangle`."""
    a, b = triu_indices(L)
    if Y.ndim != 2 or Y.shape[1] != a.size:
        raise ValueError(f"Y must have shape (n, {a.size}) for L = {L}, got {Y.shape}")
    H = np.zeros((Y.shape[0], L, L), dtype=Y.dtype)
    H[:, a, b] = Y
    H[:, b, a] = Y
    return H


def measure_adjoint(X: np.ndarray, r: np.ndarray, work: np.ndarray | None = None) -> np.ndarray:
    """B*(r) = A*(Rtilde(r)) for r of shape (n, K): adjoint of :func:`measure` on Sym(d)
    (``work`` as in :func:`measure`).

    Rtilde is the symmetric L x L matrix with Rtilde_aa = r_aa and
    Rtilde_ab = Rtilde_ba = r_ab / 2 (a < b): <Rtilde, H>_F = sum_{a<=b} r_ab H_ab
    for symmetric H, so A*(Rtilde) is the adjoint of S -> upper_triangle(A(S))."""
    n, L, d = _check_X(X)
    if r.shape != (n, L * (L + 1) // 2):
        raise ValueError(f"r must have shape ({n}, {L * (L + 1) // 2}), got {r.shape}")
    return _adjoint_from_upper(X, r, work)


def sensing_norms(X: np.ndarray) -> np.ndarray:
    """||M_mu,k||_F^2 / ((d + 1)/2), shape (n, K): squared norms of the sensing
    matrices of u_k = h_ab / tau_ab = <S, M_k>_F relative to their mean.

    M_k = sym(x_a x_b^T - delta_ab I) / (sqrt(d) tau_ab), so
    ||M_aa||^2 = (|x_a|^4 - 2 |x_a|^2 + d) / (2d) and
    ||M_ab||^2 = (|x_a|^2 |x_b|^2 + (x_a . x_b)^2) / (2d), both of mean (d + 1)/2
    = N/d (N = d(d+1)/2 coordinates, entries of variance 1/d).  Their relative
    spread is O(d^-1/2), not O(1/d) as for i.i.d. Gaussian sensing, which is why
    GAMP needs them at finite d (:mod:`amp_attention.gamp`).
    """
    n, L, d = _check_X(X)
    G = np.matmul(X, X.transpose(0, 2, 1)).astype(np.float64)  # (n, L, L) token Grams
    a, b = triu_indices(L)
    sq = G[:, np.arange(L), np.arange(L)]
    out = np.where(a == b, sq[:, a] ** 2 - 2.0 * sq[:, a] + d,
                   sq[:, a] * sq[:, b] + G[:, a, b] ** 2)
    return out / (d * (d + 1.0))


def linear_loss_and_grad(
    X: np.ndarray, y: np.ndarray, S: np.ndarray
) -> tuple[float, np.ndarray]:
    """f(S) = 1/2 sum_mu sum_{a<=b} (h_ab(S) - y_ab)^2 and its gradient on Sym(d).

    grad f(S) = B*(r) with r = upper_triangle(h(S)) - y (:func:`measure_adjoint`).
    """
    r = measure(X, S) - y
    return 0.5 * float(np.sum(r * r)), measure_adjoint(X, r)


def top_eigenvalue_sym(apply, d: int, rng: np.random.Generator, iters: int = 30) -> float:
    """Largest eigenvalue of a PSD linear map ``apply`` on Sym(d) by power iteration.

    With ``apply = A* A`` for a measurement operator A this is the Lipschitz
    constant of the gradient of 1/2 ||A(S) - y||^2.  Power iteration approaches
    it from below: callers add a safety factor or backtrack.
    """
    v = rng.standard_normal((d, d))
    v = 0.5 * (v + v.T)
    v /= np.linalg.norm(v)
    lam_max = 0.0
    for _ in range(iters):
        w = apply(v)
        lam_max = float(np.linalg.norm(w))
        if lam_max == 0.0:
            return 0.0
        v = w / lam_max
    return lam_max
