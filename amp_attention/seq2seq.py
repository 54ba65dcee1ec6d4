"""The paper's seq2seq loss at finite d (docs/theory.md 16.4).

arXiv 2509.24914's "seq2seq" task outputs Y = A X, A = softmax_rows(beta h) (L x L)
and X the L x d tokens, and trains on ||Y - Yhat||_F^2 / d.  With the engine's
labels y = A* (the softmax channel's outputs at the noisy teacher logits, so the
paper's logit noise is the channel's ``logit_goe`` noise), per sample

    l(h) = 1/2 ||(A(h) - A*) X||_F^2 / d = 1/2 tr(D Gm D^T),  D = A - A*,  Gm = X X^T / d,

i.e. the label task's loss 1/2 ||A - A*||_F^2 with the metric Gm instead of I_L
(Gm = I_L + O(d^-1/2), which is why the two tasks share the SE).  With E = D Gm,
dl/dA = E and, per row, dl/dh_ac = beta A_ac (E_ac - sum_b E_ab A_ab) (the row
softmax's Jacobian, as in :class:`~amp_attention.channels.softmax.SoftmaxChannel`).

This is a finite-d loss only (it depends on X beyond h, so it is not a GLM
channel); the SE of the task is the softmax channel's.
"""

from __future__ import annotations

import numpy as np

from .channels.base import is_logit_noise
from .channels.newton import softmax_rows
from .erm import ChannelEvaluator, objective_S, population_error
from .operators import preactivations

#: the tasks the engine's Adam trains: the L x L label output, or Y = A X
TASKS = ("label", "seq2seq")


def check_seq2seq_channel(channel) -> None:
    """The seq2seq loss needs the softmax channel with no noise or logit noise (the
    paper's Y = softmax(beta (h* + E)) X); output noise has no seq2seq counterpart."""
    if getattr(channel, "name", None) != "softmax":
        raise ValueError(f"task: seq2seq needs the softmax channel, got {getattr(channel, 'name', channel)!r}")
    if channel.noise > 0 and not is_logit_noise(channel.noise_at):
        raise ValueError("task: seq2seq takes logit noise (noise_at logit_goe or logit) or none; "
                         f"got noise_at={channel.noise_at!r}")


def token_gram(X: np.ndarray) -> np.ndarray:
    """Gm_mu = X_mu X_mu^T / d, shape (n, L, L)."""
    X = np.asarray(X)
    return np.einsum("nad,nbd->nab", X, X, dtype=np.float64) / X.shape[2]


def seq2seq_loss_and_grad_h(a_star: np.ndarray, H: np.ndarray, gram: np.ndarray,
                            beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample l = 1/2 tr(D Gm D^T) (n,) and dl/dh (n, L, L), D = softmax_rows(beta H) - A*
    (module docstring)."""
    A = softmax_rows(H, beta)
    D = A - a_star
    E = D @ gram
    loss = 0.5 * np.einsum("nab,nab->n", D, E)
    rbar = np.einsum("nab,nab->na", E, A)
    return loss, beta * A * (E - rbar[:, :, None])


class Seq2SeqEvaluator(ChannelEvaluator):
    """f(S) = sum_mu 1/2 ||(A(h_mu(S)) - A*_mu) X_mu||_F^2 / d through the full L x L
    pre-activations; y holds A*_mu flattened row-major (the softmax channel's labels)."""

    def __init__(self, X: np.ndarray, y: np.ndarray, channel):
        check_seq2seq_channel(channel)
        super().__init__(X, y, channel)
        n, L = X.shape[0], X.shape[1]
        self.a_star = np.asarray(y, dtype=np.float64).reshape(n, L, L)
        self.gram = token_gram(X)

    def loss_from_h(self, H: np.ndarray) -> tuple[float, np.ndarray]:
        loss, G = seq2seq_loss_and_grad_h(self.a_star, H, self.gram, self.channel.beta)
        return float(np.sum(loss)), G


def seq2seq_objective(X, y, S, channel, lam: float, parameterisation: str = "factorised"
                      ) -> tuple[float, np.ndarray]:
    """R(S) and dR/dS on Sym(d) for the seq2seq loss, with the penalty of
    :func:`~amp_attention.erm.objective_S`."""
    return objective_S(X, y, S, channel, lam, parameterisation, Seq2SeqEvaluator)


def seq2seq_train_error(X: np.ndarray, y: np.ndarray, S: np.ndarray, channel) -> float:
    """(1/n) sum_mu ||(A_mu(S) - A*_mu) X_mu||_F^2 / d (the paper's data loss per sample)."""
    ev = Seq2SeqEvaluator(X, y, channel)
    f, _ = ev.loss_from_h(preactivations(X, S))
    return 2.0 * f / X.shape[0]


def seq2seq_error_per_input(X: np.ndarray, y: np.ndarray, g_hat: np.ndarray) -> np.ndarray:
    """||(A_hat - A*) X||_F^2 / d per input, from the softmax channel's flattened outputs."""
    n, L = X.shape[0], X.shape[1]
    D = (g_hat - y).reshape(n, L, L)
    return np.einsum("nab,nab->n", D, D @ token_gram(X))


def seq2seq_population_error(channel, S0: np.ndarray, S: np.ndarray, n_test: int, L: int,
                             seed: int) -> tuple[float, float, float]:
    """(clean error, its MC standard error, noisy error) per test input,
    E ||(A(S) - A*) X||_F^2 / d, on the test draws of
    :func:`~amp_attention.erm.population_error`; noisy: A* at freshly noised teacher
    logits (the authors' seq2seq ``test_err``)."""
    check_seq2seq_channel(channel)
    return population_error(channel, S0, S, n_test, L, seed, per_input=seq2seq_error_per_input)
