"""Pachinko allocation (PAM) partition of a two-level labelled dataset, e.g. federated CIFAR-100.

Reddi et al., "Adaptive Federated Optimization", ICLR 2021, App. F (Algorithms 7 and 8) and
App. C.1: the labels form a DAG G whose root has the coarse labels as children and each coarse
label its fine labels. For client m = 1..M, in order:

* theta_r ~ Dir(alpha, |G[r]|) over the coarse labels still in G, and for every coarse label c
  still in G, theta_c ~ Dir(beta, |G[c]|) over its fine labels still in G;
* N times: c ~ Multinomial(theta_r), y ~ Multinomial(theta_c), then an example of fine label y
  uniformly at random among those not yet assigned, removed from the pool. If that empties
  y, y leaves G and theta_c is renormalised without it (Algorithm 8); if that empties c, c leaves
  G and theta_r is renormalised without it.

Later clients draw their Dirichlets over the pruned G ("the same parameters as before, but with
one fewer category"). The paper uses M = 500 clients, N = 100 examples each, alpha = 0.1,
beta = 10 on CIFAR-100's 50,000 training images (20 coarse x 5 fine labels x 500 images), which
assigns every image; Figure 14: most clients hold 20-30 unique fine labels, some over 40, and
some (the last ones, which get what is left) very few.

Implementation. For one client the N sequential draws are made in two vectorised levels, which
gives exactly the distribution of the sequential algorithm: a coarse label c is removed exactly
when the number of draws that landed on it equals its remaining examples, whatever fine labels
those draws chose, so the coarse sequence is N draws from theta_r with prune-and-renormalise
(``sample_class_counts`` with the coarse labels' remaining counts); given k_c draws on c, the fine
draws are k_c draws from theta_c with prune-and-renormalise over c's fine labels
(``sample_class_counts`` again). Taking the next k entries of a fine label's shuffled pool is a
uniform draw without replacement. If floating-point underflow leaves all of a distribution's
mass on removed labels (possible only for tiny alpha or beta), the draw is uniform over the
labels still present, the limit of renormalising an all-but-zero vector.
"""

from __future__ import annotations

import numbers

import numpy as np

from tff_adaptive.datasets.partitioners import check_labels
from tff_adaptive.datasets.partitioners import sample_class_counts

__all__ = ['pachinko_allocation_partition']


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return int(value)


def _check_concentration(name: str, value) -> float:
  if (
    isinstance(value, bool)
    or not isinstance(value, numbers.Real)
    or not (np.isfinite(value) and value > 0)
  ):
    raise ValueError(f'{name}={value!r} is invalid; expected a finite number > 0')
  return float(value)


def pachinko_allocation_partition(
  fine_labels: np.ndarray,
  coarse_labels: np.ndarray,
  num_clients: int = 500,
  examples_per_client: int = 100,
  alpha: float = 0.1,
  beta: float = 10.0,
  seed: int = 0,
) -> list[np.ndarray]:
  """Partitions example indices over clients by Pachinko allocation (Reddi et al. Alg. 7-8).

  Args:
      fine_labels: integer fine labels y, shape [S], values >= 0.
      coarse_labels: integer coarse labels c, shape [S], values >= 0; every fine label must
          belong to exactly one coarse label (as in CIFAR-100).
      num_clients: number of clients M, >= 1.
      examples_per_client: examples per client N, >= 1, with M * N <= S.
      alpha: concentration of the symmetric Dirichlet over coarse labels at the root, > 0.
      beta: concentration of the symmetric Dirichlet over each coarse label's fine labels, > 0.
      seed: seed for ``np.random.default_rng``, >= 0.

  Returns:
      M sorted int64 index arrays into the label arrays, each of length N, pairwise disjoint.

  Raises:
      ValueError: an argument is out of range (the message names it, its value and the range),
          or a fine label appears under two coarse labels.
  """
  fine = check_labels('fine_labels', fine_labels)
  coarse = check_labels('coarse_labels', coarse_labels)
  if fine.shape != coarse.shape:
    raise ValueError(
      f'fine_labels has shape {fine.shape} and coarse_labels {coarse.shape}; expected equal shapes'
    )
  num_clients = _check_int('num_clients', num_clients, 1)
  examples_per_client = _check_int('examples_per_client', examples_per_client, 1)
  if num_clients * examples_per_client > fine.size:
    raise ValueError(
      f'num_clients * examples_per_client = {num_clients} * {examples_per_client} = '
      f'{num_clients * examples_per_client} is invalid; expected <= '
      f'len(fine_labels)={fine.size}'
    )
  alpha = _check_concentration('alpha', alpha)
  beta = _check_concentration('beta', beta)
  seed = _check_int('seed', seed, 0)
  parent, children = _label_tree(fine, coarse)
  fine_counts = np.bincount(fine, minlength=parent.size)
  rng = np.random.default_rng(seed)
  # One shuffled pool per fine label; pools[y][taken[y]:] are its unassigned examples.
  pools = [rng.permutation(np.flatnonzero(fine == y)) for y in range(parent.size)]
  taken = np.zeros(parent.size, dtype=np.int64)
  partition = []
  for _ in range(num_clients):
    counts = _client_counts(
      fine_counts - taken, parent, children, examples_per_client, alpha, beta, rng
    )
    parts = [pools[y][taken[y] : taken[y] + counts[y]] for y in np.flatnonzero(counts)]
    taken += counts
    partition.append(np.sort(np.concatenate(parts)).astype(np.int64))
  return partition


def _label_tree(fine: np.ndarray, coarse: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
  """(coarse label of each fine label, the fine labels of each coarse label).

  Raises:
    ValueError: a fine label appears under two coarse labels.
  """
  num_fine = int(fine.max()) + 1
  num_coarse = int(coarse.max()) + 1
  parent = np.full(num_fine, -1, dtype=np.int64)  # coarse label of each fine label
  parent[fine] = coarse
  inconsistent = np.flatnonzero(parent[fine] != coarse)
  if inconsistent.size:
    y = int(fine[inconsistent[0]])
    raise ValueError(
      f'fine label {y} appears with coarse labels {sorted(set(coarse[fine == y].tolist()))}; '
      'expected every fine label to belong to exactly one coarse label'
    )
  return parent, [np.flatnonzero(parent == c) for c in range(num_coarse)]


def _client_counts(fine_left, parent, children, examples_per_client, alpha, beta, rng):
  """One client's examples per fine label (Algorithm 7): theta_r over the coarse labels with
  examples left, theta_c over each one's fine labels with examples left, then N draws."""
  num_coarse = len(children)
  coarse_left = np.bincount(
    parent[fine_left > 0], weights=fine_left[fine_left > 0], minlength=num_coarse
  ).astype(np.int64)
  in_graph = np.flatnonzero(coarse_left > 0)  # G[r]
  theta_r = np.zeros(num_coarse)
  theta_r[in_graph] = rng.dirichlet(np.full(in_graph.size, alpha))
  # theta_c for every coarse label in G, in label order (Algorithm 7 draws them all).
  theta_c = {}
  for c in in_graph:
    kids = children[c][fine_left[children[c]] > 0]  # G[c]
    theta_c[c] = (kids, rng.dirichlet(np.full(kids.size, beta)))
  coarse_draws = sample_class_counts(theta_r, coarse_left, examples_per_client, rng)
  counts = np.zeros(parent.size, dtype=np.int64)
  for c in np.flatnonzero(coarse_draws):
    kids, probs = theta_c[c]
    counts[kids] = sample_class_counts(probs, fine_left[kids], int(coarse_draws[c]), rng)
  return counts
