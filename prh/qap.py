"""The permutation of k-means centres that maximises their linear CKA, a quadratic assignment
problem solved by MPOpt (Hutschenreiter, Haller, Feineis, Rother, Kainmüller & Savchynskyy,
ICCV 2021) through the `pylibmgm` bindings.

Which QAP: for centres A, B [C, d] and centred linear kernels K_A = H A A^T H, K_B = H B B^T H
(H = I - 11^T / C), linear CKA(A, P B) = tr(K_A P K_B P^T) / (||K_A||_F ||K_B||_F), and the
denominator does not depend on the permutation P, so the best P maximises the
Koopmans-Beckmann objective tr(K_A P K_B P^T) (Schnaus, Dagès, Cremers, Wang & Isola 2026,
arXiv 2610.09411, Lemma 1; their `unpaired_rosetta/geometric_initialization.py`). MPOpt
minimises sum_{i,k} F[i, k] G[pi(i), pi(k)], here with F = -K_A and G = K_B.

The solver settings are the benchmark's (`unpaired_rosetta/qap.py`, commit caa1816): batches
of 100 dual iterations with 10 greedy generations, stopping when the relative improvement over
the last 100 batches is below .1, at most 1,000 batches. MPOpt needs negative costs: every
q[i, j, k, l] = F[i, k] G[j, l] is shifted by max q + 1, and a unary cost (there is no linear
term) by a further -1, as the benchmark does; every permutation has n assignments and
n (n - 1) / 2 pairs, so the shift adds one constant to every permutation's objective.
The solver's own seed and the C library's `rand()` (which QPBO inside MPOpt draws from and
libmpopt never seeds) are both set from `seed`, so a solve does not depend on earlier solves
in the process.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

BATCH_SIZE = 100  # dual iterations per batch
GREEDY_GENERATIONS = 10  # primal solutions generated per batch
STOP_P = 0.1  # relative improvement below which...
STOP_K = 100  # ...over this many batches, the solver stops
MAX_BATCHES = 1000


def centred_kernel(x: np.ndarray) -> np.ndarray:
    """H X X^T H for H = I - 11^T / n: the linear kernel of the rows, centred."""
    g = x @ x.T
    return g - g.mean(axis=0, keepdims=True) - g.mean(axis=1, keepdims=True) + g.mean()


def objective(f: np.ndarray, g: np.ndarray, perm: np.ndarray) -> float:
    """sum_{i,k} F[i, k] G[perm[i], perm[k]]: what `solve` minimises."""
    return float((f * g[np.ix_(perm, perm)]).sum())


def _graphical_model(f: np.ndarray, g: np.ndarray):  # -> pylibmgm.GmModel
    """The QAP as pylibmgm's graph-matching model: assignment i -> j costs q[i, j, i, j], the
    pair (i -> j, k -> l) with i < k, j != l costs q[i, j, k, l] + q[k, l, i, j], where
    q[i, j, k, l] = F[i, k] G[j, l], shifted (module docstring)."""
    import pylibmgm

    n = f.shape[0]
    q = f[:, None, :, None] * g[None, :, None, :]
    q = q - (q.max() + 1.0)
    diag = np.arange(n)
    unary = q[diag[:, None], diag[None, :], diag[:, None], diag[None, :]] - 1.0  # no linear term
    pair = q + q.transpose(2, 3, 0, 1)
    model = pylibmgm.GmModel(pylibmgm.Graph(0, n), pylibmgm.Graph(1, n), n * n, n ** 4 - n * n)
    for i, j in itertools.product(range(n), repeat=2):
        model.add_assignment(i, j, float(unary[i, j]))
    for i, j in itertools.product(range(n), repeat=2):
        row = pair[i, j]
        for k in range(i + 1, n):
            for m in range(n):
                if m != j:
                    model.add_edge(i, j, k, m, float(row[k, m]))
    return model


def solve(f: np.ndarray, g: np.ndarray, seed: int) -> np.ndarray:
    """The permutation perm (perm[i] is the partner of row i) that MPOpt finds minimising
    `objective(f, g, perm)`. RuntimeError if MPOpt leaves a node unassigned."""
    import pylibmgm

    f, g = np.asarray(f, np.float64), np.asarray(g, np.float64)
    model = _graphical_model(f, g)
    pylibmgm.QAPSolver.libmpopt_seed = int(seed) % 2 ** 31  # read when a solver is built
    ctypes.CDLL(None).srand(ctypes.c_uint(int(seed) % 2 ** 32))
    solver = pylibmgm.QAPSolver(model)
    solver.run_settings.batch_size = BATCH_SIZE
    solver.run_settings.greedy_generations = GREEDY_GENERATIONS
    solver.stopping_criteria.p = STOP_P
    solver.stopping_criteria.k = STOP_K
    solver.stopping_criteria.max_batches = MAX_BATCHES
    perm = np.asarray(solver.run().labeling(), dtype=np.int64)
    if not np.array_equal(np.sort(perm), np.arange(f.shape[0])):
        raise RuntimeError(f"MPOpt returned an incomplete assignment: {perm.tolist()}")
    return perm


def cka_matching(a: np.ndarray, b: np.ndarray, seed: int) -> np.ndarray:
    """The permutation perm of B's rows that maximises linear CKA(A, B[perm]) (MPOpt; module
    docstring): F = -K_A, G = K_B."""
    return solve(-centred_kernel(np.asarray(a, np.float64)),
                 centred_kernel(np.asarray(b, np.float64)), seed)
