"""Client sampling: uniform without replacement within a round; across rounds, independent
draws ('tff', 'fast') or epochs in which every client takes part at most once ('epoch').

Reddi et al. 2021 (Sec. 5) sample clients uniformly at random each round; the published runs
used TFF's sampler with seed 1. We reuse `tff.simulation.build_uniform_sampling_fn`, whose
choice is a pure function of (seed, round_num): a resumed run samples the same clients, and
seed 1 reproduces the published client order.

TFF's sampler costs O(population) per round: `RandomState.choice(client_ids, k, replace=False)`
permutes the whole population (benchmarks/data_scale.py measures it; we pass it positions, not
the id list, which saves converting the list every round). `method='fast'` draws the same
distribution (k distinct clients, uniformly) in O(k): NumPy's `Generator.choice(N, k,
replace=False)` uses Floyd's algorithm when k <= N / 50 or N <= 10,000, seeded by
`np.random.default_rng([seed, round_num])`, so it is also a pure function of (seed, round_num),
but a different sequence from the published one.

`method='epoch'` shuffles the population once per epoch, with
`np.random.default_rng([seed, epoch])`, and gives round r of the epoch the r-th block of m
clients of that order: an epoch is R = floor(N / m) rounds, each client takes part at most
once in it (the N - R m clients left over sit that epoch out, others the next). What DP-FTRL's
tree aggregation needs (`aggregators.dp_mean('tree', ...)`: Kairouz et al., "Practical and
Private (Deep) Learning without Sampling or Shuffling", ICML 2021, restart the tree every
epoch); a pure function of (seed, round_num) too.

TFF is imported by the 'tff' sampler only, when it is built: the trainer reads
`SAMPLING_METHODS` to check --client_sampler before it imports TensorFlow and TFF.
"""

from collections.abc import Callable
from collections.abc import Sequence

import numpy as np

SAMPLING_METHODS = ('tff', 'fast', 'epoch')
DEFAULT_METHOD = SAMPLING_METHODS[0]  # TFF's: the published runs' client order


def rounds_per_epoch(population: int, clients_per_round: int) -> int:
  """R = floor(N / m): the rounds of one epoch of method='epoch' (each client at most once)."""
  return population // clients_per_round


def build_client_sampler(
  client_ids: Sequence[str], clients_per_round: int, seed: int, method: str = DEFAULT_METHOD
) -> Callable[[int], list[str]]:
  """Returns `sample(round_num) -> client ids`, deterministic in (seed, round_num).

  Args:
    client_ids: the population, in a fixed order (the order is part of the seed's meaning).
    clients_per_round: how many distinct clients each round trains, 1..len(client_ids).
    seed: the sampling seed (the published runs used 1).
    method: 'tff' (default; TFF's sampler, the published client order, O(population) per
      round), 'fast' (O(clients_per_round) per round; seed must be >= 0) or 'epoch' (each
      client at most once per epoch of `rounds_per_epoch` rounds; seed must be >= 0).

  Raises:
    ValueError: clients_per_round outside 1..population, unknown method, or a negative seed
      with method='fast' or 'epoch'.
  """
  population = len(client_ids)
  if not 1 <= clients_per_round <= population:
    raise ValueError(
      f'clients_per_round must be in [1, {population}] (the number of training '
      f'clients), got {clients_per_round}'
    )
  if method not in SAMPLING_METHODS:
    raise ValueError(f'method must be one of {", ".join(SAMPLING_METHODS)}, got {method!r}')
  if method in ('fast', 'epoch') and seed < 0:
    raise ValueError(f'seed must be >= 0 for method={method!r}, got {seed}')
  if method == 'epoch':
    ids = list(client_ids)
    per_epoch = rounds_per_epoch(population, clients_per_round)

    def sample_epoch(round_num: int) -> list[str]:
      if round_num < 1:
        raise ValueError(f"round_num must be >= 1 for method='epoch', got {round_num}")
      epoch, block = divmod(round_num - 1, per_epoch)
      order = np.random.default_rng([seed, epoch]).permutation(population)
      return [ids[i] for i in order[block * clients_per_round : (block + 1) * clients_per_round]]

    return sample_epoch
  if method == 'fast':
    ids = list(client_ids)

    def sample_fast(round_num: int) -> list[str]:
      rng = np.random.default_rng([seed, round_num])
      return [ids[i] for i in rng.choice(population, clients_per_round, replace=False)]

    return sample_fast
  # TFF's sampler draws RandomState.choice(a, k, replace=False) = a[permutation(len(a))[:k]]:
  # the drawn positions depend only on len(a). Sampling positions from an int array and
  # mapping them to ids gives the same clients without converting the id list every round.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top  (see the docstring)

  ids = list(client_ids)
  sample_fn = tff.simulation.build_uniform_sampling_fn(
    np.arange(population), replace=False, random_seed=seed
  )
  return lambda round_num: [ids[i] for i in sample_fn(round_num, clients_per_round)]
