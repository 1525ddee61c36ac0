"""Label-skew partitions of a centralised dataset into federated clients.

``dirichlet_label_partition`` is the latent Dirichlet allocation (LDA) label partition of Hsu, Qi
and Brown 2019 ("Measuring the Effects of Non-Identical Data Distribution for Federated Visual
Classification", arXiv:1909.06335) as used by Kim et al. 2024 (Delta-SGD, Sec. 4 and App. B.9):
every client draws class proportions q ~ Dir(alpha * p) and then draws its examples from the
categorical distribution q. Kim et al. use 100 clients x 500 examples with alpha in {1, 0.1, 0.01}
for MNIST/FMNIST/CIFAR; the same function serves e.g. 500 clients x 100 examples, alpha = 0.1.

Prior scale. Kim et al.'s public code passes ``alpha * [1, ..., 1]`` to the Dirichlet, i.e. every
class has concentration ``alpha`` (not ``alpha / num_classes``). This module does the same: the
prior vector p has mean 1 (``prior="uniform"``: p = 1; ``prior="empirical"``: p_c = num_classes *
frequency of class c, which equals 1 for a balanced dataset). With this scale alpha = 0.01 gives
about one class per client, alpha = 1 several, alpha = 100 nearly IID.

Sampling. Unlike Kim et al.'s code (which samples each class with replacement, independently per
client, so examples repeat), examples here are drawn WITHOUT replacement from one shared pool:
clients are filled in order; each draws its examples from q restricted to classes that still have
unassigned examples, renormalised. A class that runs out gets probability 0 for this and all later
clients. No index is assigned twice. ``sample_class_counts`` is that prune-and-renormalise step,
reusable by hierarchical (Pachinko allocation) partitioners.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ['dirichlet_label_partition', 'label_histogram', 'sample_class_counts']

_PRIORS = ('uniform', 'empirical')


def _check_int(name: str, value, low: int) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
    raise ValueError(f'{name}={value!r} is invalid; expected an integer >= {low}')
  return int(value)


def check_labels(name: str, labels) -> np.ndarray:
  """``labels`` as int64 after checking it is a non-empty 1-D array of integers >= 0."""
  labels = np.asarray(labels)
  if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(
      f'{name} has shape {labels.shape} and dtype {labels.dtype}; expected a '
      'non-empty 1-D integer array'
    )
  if labels.min() < 0:
    raise ValueError(f'{name} contains {labels.min()}; expected values >= 0')
  return labels.astype(np.int64)


def sample_class_counts(
  probs: np.ndarray,
  available: np.ndarray,
  n: int,
  rng: np.random.Generator,
  fallback: np.ndarray | None = None,
) -> np.ndarray:
  """Draws how many of ``n`` examples come from each class, without exceeding availability.

  Equivalent to ``n`` sequential categorical draws from ``probs`` where a class whose remaining
  availability reaches 0 gets probability 0 and the others are renormalised: the draws are made
  as a multinomial, the excess of every exhausted class is re-drawn among the classes that still
  have examples, and this repeats until all ``n`` are placed.

  Args:
      probs: non-negative class weights, shape [C] (need not sum to 1).
      available: non-negative integer counts of examples left per class, shape [C];
          ``available.sum()`` must be >= ``n``.
      n: number of examples to draw, >= 0.
      rng: the random generator to use.
      fallback: weights used when all of ``probs``'s mass lies on exhausted classes (e.g. a
          one-hot q whose class ran out); defaults to uniform over the available classes.

  Returns:
      int64 counts, shape [C], summing to ``n``, with ``counts <= available``.
  """
  probs = np.asarray(probs, dtype=np.float64)
  left = np.asarray(available, dtype=np.int64).copy()
  if probs.shape != left.shape or probs.ndim != 1:
    raise ValueError(
      f'probs shape {probs.shape} and available shape {left.shape} must be equal and 1-D'
    )
  if np.any(probs < 0) or not np.all(np.isfinite(probs)):
    raise ValueError(f'probs={probs!r} is invalid; expected finite non-negative weights')
  if n < 0 or n > left.sum():
    raise ValueError(f'n={n} is invalid; expected 0 <= n <= available.sum()={left.sum()}')
  counts = np.zeros_like(left)
  remaining = n
  while remaining > 0:
    open_ = left > 0
    weights = np.where(open_, probs, 0.0)
    if weights.sum() <= 0.0:
      base = np.ones_like(probs) if fallback is None else np.asarray(fallback, np.float64)
      weights = np.where(open_, base, 0.0)
      if weights.sum() <= 0.0:
        weights = open_.astype(np.float64)
    draw = rng.multinomial(remaining, weights / weights.sum())
    take = np.minimum(draw, left)
    counts += take
    left -= take
    remaining -= int(take.sum())
  return counts


def _client_sizes(num_examples: int, num_clients, examples_per_client) -> list[int]:
  """Each client's number of examples (`dirichlet_label_partition`'s sizes), checked."""
  num_clients = _check_int('num_clients', num_clients, 1)
  if examples_per_client is None:
    if num_clients > num_examples:
      raise ValueError(
        f'num_clients={num_clients} is invalid with '
        f'examples_per_client=None; expected <= len(labels)={num_examples}'
      )
    return [
      num_examples // num_clients + (k < num_examples % num_clients) for k in range(num_clients)
    ]
  examples_per_client = _check_int('examples_per_client', examples_per_client, 1)
  if num_clients * examples_per_client > num_examples:
    raise ValueError(
      f'num_clients * examples_per_client = {num_clients} * {examples_per_client} = '
      f'{num_clients * examples_per_client} is invalid; expected <= '
      f'len(labels)={num_examples}'
    )
  return [examples_per_client] * num_clients


def dirichlet_label_partition(
  labels: np.ndarray,
  num_clients: int,
  examples_per_client: int | None,
  alpha: float,
  seed: int,
  *,
  prior: str = 'uniform',
) -> list[np.ndarray]:
  """Partitions example indices over clients with Dirichlet(alpha * prior) label proportions.

  Args:
      labels: integer class labels, shape [N], values in [0, C) where C = labels.max() + 1.
      num_clients: number of clients K, >= 1.
      examples_per_client: examples per client, >= 1 with K * examples_per_client <= N; None
          splits all N examples, client k getting N // K + (k < N % K) examples.
      alpha: Dirichlet concentration per class, finite and > 0 (see module docstring for the
          prior scale).
      seed: seed for ``np.random.default_rng``, >= 0.
      prior: "uniform" (p_c = 1, as in Kim et al.'s code) or "empirical"
          (p_c = C * frequency of class c).

  Returns:
      K sorted int64 index arrays into ``labels``, pairwise disjoint, of the requested sizes.

  Raises:
      ValueError: an argument is out of range (the message names it, its value and the range).
  """
  labels = check_labels('labels', labels)
  num_examples = labels.size
  sizes = _client_sizes(num_examples, num_clients, examples_per_client)
  if (
    isinstance(alpha, bool)
    or not isinstance(alpha, numbers.Real)
    or not (np.isfinite(alpha) and alpha > 0)
  ):
    raise ValueError(f'alpha={alpha!r} is invalid; expected a finite number > 0')
  seed = _check_int('seed', seed, 0)
  if prior not in _PRIORS:
    raise ValueError(f'prior={prior!r} is invalid; expected one of {_PRIORS}')

  num_classes = int(labels.max()) + 1
  class_counts = np.bincount(labels, minlength=num_classes)
  if prior == 'uniform':
    prior_vec = np.ones(num_classes)
  else:
    prior_vec = num_classes * class_counts / num_examples
  rng = np.random.default_rng(seed)
  # One shuffled pool per class; pools[c][taken[c]:] are the unassigned indices of class c.
  pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
  taken = np.zeros(num_classes, dtype=np.int64)
  concentration = alpha * prior_vec
  # Classes absent from the data have prior 0 under "empirical"; Dirichlet needs > 0 entries.
  present = concentration > 0
  partition = []
  for size in sizes:
    q = np.zeros(num_classes)
    q[present] = rng.dirichlet(concentration[present])
    counts = sample_class_counts(q, class_counts - taken, size, rng, fallback=prior_vec)
    parts = [pools[c][taken[c] : taken[c] + counts[c]] for c in np.flatnonzero(counts)]
    taken += counts
    partition.append(
      np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    )
  return partition


def label_histogram(
  labels: np.ndarray, partition: list[np.ndarray], num_classes: int | None = None
) -> np.ndarray:
  """Per-client label counts, shape [num_clients, num_classes] (int64)."""
  labels = np.asarray(labels)
  num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
  return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in partition])
