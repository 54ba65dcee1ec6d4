"""V_hat where the softmax prox has competing minima: four estimators side by side
(issue 30, item 2; docs/theory.md section 16.2).

At overlaps (m, q, V) of a softmax channel the script evaluates (mean +- replica
standard error; the first three on the same RQMC points, 2^log2n per replica x 8):

  hessian     2 alpha E[tr(I - (I + V H)^-1)] / V           (the smooth part only)
  ibp         -2 alpha E[g_out . (Q0 omega - m u*)] / (Q0 q - m^2)  (integration by parts)
  fd          -2 alpha sum_k d/d omega_k E[g_out,k], central differences, eps = 0.05 sqrt q
  engine      the engine's own estimate (MonteCarloChannel: antithetic pairs with the
              centred control variate, 2^log2n pairs x 8 replicas, its own points)

The defaults are the engine's fixed point (Hessian form) of softmax L = 2, beta = 1,
kappa0 = 0.5 (Q0 = 1.5), Delta = 0.5 logit_goe, lam = 5e-5, alpha = 0.26, and the
CLI-default point (noiseless, lam = 0.1, alpha = 0.5) where the prox has no
competing minima.

    python benchmarks/vhat_estimators.py            # ~1 min on one core
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from amp_attention.channels.base import overlap_split
from amp_attention.solvers.channel_integrals import MonteCarloChannel, sobol_normals
from amp_attention.spec import Task

POINTS = {
    "competing minima (lam 5e-5, alpha 0.26, logit_goe 0.5)":
        (dict(noise=0.5, noise_at="logit_goe"), 1.779548509415747, 3.2012476518745236,
         56.55415255440204, 1.5, 0.26),
    "CLI default (noiseless, lam 0.1, alpha 0.5)":
        (dict(noise=0.0), 0.6981846961241122, 0.3604764596582668, 0.926339437884581, 1.5, 0.5),
}


def estimators(ch, m, q, V, Q0, alpha, log2n, replicas, seed):
    K, P = ch.K, ch.noise_dim
    out = {k: [] for k in ("hessian", "ibp", "fd")}
    slope, rest = overlap_split(m, q, Q0)
    det = Q0 * q - m * m
    g = sobol_normals(2 * K + P, log2n, replicas, seed)
    for r in range(replicas):
        # one-point forms: omega first, u* given omega (Section 5.1)
        omega = math.sqrt(q) * g[r, :, :K]
        ustar = slope * omega + math.sqrt(rest) * g[r, :, K:2 * K]
        y = ch.labels_from_noise(ch.h_from_u(ustar), g[r, :, 2 * K:])
        px = ch.prox_batch(y, omega, V)
        out["hessian"].append(2 * alpha * np.mean(px.trace_term) / V)
        out["ibp"].append(-2 * alpha * np.mean(np.sum(px.g_out * (Q0 * omega - m * ustar), 1)) / det)
        eps, fd = 0.05 * math.sqrt(q), 0.0
        for k in range(K):
            e = np.zeros(K)
            e[k] = eps
            fd += np.mean(ch.prox_batch(y, omega + e, V).g_out[:, k]
                          - ch.prox_batch(y, omega - e, V).g_out[:, k]) / (2 * eps)
        out["fd"].append(-2 * alpha * fd)
    res = {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))))
           for k, v in out.items()}
    mc = MonteCarloChannel(ch, log2_n=log2n + 1, replicas=replicas, seed=seed)
    res["engine"] = (mc.se(m, q, V, Q0, alpha).V_hat, mc.last_stderr["V_hat"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=13)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    for name, (noise, m, q, V, Q0, alpha) in POINTS.items():
        ch = Task("softmax", L=2, beta=1.0, **noise).channel_object
        print(f"{name}: m={m:.4f} q={q:.4f} V={V:.4g}")
        for k, (mu, se) in estimators(ch, m, q, V, Q0, alpha, args.log2n, args.replicas,
                                      args.seed).items():
            print(f"  {k:11s} {mu:.6f} +- {se:.6f}")


if __name__ == "__main__":
    main()
