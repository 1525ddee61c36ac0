"""Client sampling: uniform without replacement within a round, with replacement across rounds.

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

TFF is imported by the 'tff' sampler only, when it is built: the trainer reads
`SAMPLING_METHODS` to check --client_sampler before it imports TensorFlow and TFF.
"""

from collections.abc import Callable
from collections.abc import Sequence

import numpy as np

SAMPLING_METHODS = ('tff', 'fast')


def build_client_sampler(
  client_ids: Sequence[str], clients_per_round: int, seed: int, method: str = 'tff'
) -> Callable[[int], list[str]]:
  """Returns `sample(round_num) -> client ids`, deterministic in (seed, round_num).

  Args:
    client_ids: the population, in a fixed order (the order is part of the seed's meaning).
    clients_per_round: how many distinct clients each round trains, 1..len(client_ids).
    seed: the sampling seed (the published runs used 1).
    method: 'tff' (default; TFF's sampler, the published client order, O(population) per
      round) or 'fast' (O(clients_per_round) per round; seed must be >= 0).

  Raises:
    ValueError: clients_per_round outside 1..population, unknown method, or a negative seed
      with method='fast'.
  """
  population = len(client_ids)
  if not 1 <= clients_per_round <= population:
    raise ValueError(
      f'clients_per_round must be in [1, {population}] (the number of training '
      f'clients), got {clients_per_round}'
    )
  if method not in SAMPLING_METHODS:
    raise ValueError(f'method must be one of {", ".join(SAMPLING_METHODS)}, got {method!r}')
  if method == 'fast':
    if seed < 0:
      raise ValueError(f"seed must be >= 0 for method='fast', got {seed}")
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
