"""Client sampling: uniform without replacement within a round, with replacement across rounds.

Reddi et al. 2021 (Sec. 5) sample clients uniformly at random each round; the published runs
used TFF's sampler with seed 1. We reuse `tff.simulation.build_uniform_sampling_fn`, whose
choice is a pure function of (seed, round_num): a resumed run samples the same clients, and
seed 1 reproduces the published client order.
"""

from collections.abc import Callable, Sequence

import tensorflow_federated as tff


def build_client_sampler(
    client_ids: Sequence[str], clients_per_round: int, seed: int
) -> Callable[[int], list[str]]:
  """Returns `sample(round_num) -> client ids`, deterministic in (seed, round_num).

  Args:
    client_ids: the population, in a fixed order (the order is part of the seed's meaning).
    clients_per_round: how many distinct clients each round trains, 1..len(client_ids).
    seed: the sampling seed (the published runs used 1).

  Raises:
    ValueError: clients_per_round outside 1..population.
  """
  population = len(client_ids)
  if not 1 <= clients_per_round <= population:
    raise ValueError(
        f'clients_per_round must be in [1, {population}] (the number of training '
        f'clients), got {clients_per_round}')
  sample_fn = tff.simulation.build_uniform_sampling_fn(
      list(client_ids), replace=False, random_seed=seed)
  return lambda round_num: sample_fn(round_num, clients_per_round)
