"""Tests of tff_adaptive.loop.sampling: TFF's published sampler (default), the O(k) 'fast' one
and 'epoch' (each client at most once per epoch, for DP-FTRL's tree)."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_adaptive.loop import sampling

IDS = [f'c{k:03d}' for k in range(20)]


def test_default_is_tffs_uniform_sampler():
  tff_fn = tff.simulation.build_uniform_sampling_fn(IDS, replace=False, random_seed=1)
  sample = sampling.build_client_sampler(IDS, 5, seed=1)
  for round_num in (1, 2, 17, 500):
    assert sample(round_num) == tff_fn(round_num, 5)
  assert sampling.build_client_sampler(IDS, 5, 1, method='tff')(3) == sample(3)


def test_fast_is_deterministic_distinct_and_round_dependent():
  sample = sampling.build_client_sampler(IDS, 5, seed=7, method='fast')
  again = sampling.build_client_sampler(list(IDS), 5, seed=7, method='fast')
  rounds = [sample(r) for r in range(1, 101)]
  assert rounds == [again(r) for r in range(1, 101)]
  assert all(len(set(s)) == 5 and set(s) <= set(IDS) for s in rounds)
  assert len({tuple(s) for s in rounds}) > 95  # 15,504 possible 5-subsets
  assert sampling.build_client_sampler(IDS, 5, seed=8, method='fast')(1) != rounds[0]
  first = np.random.default_rng([7, 1]).choice(20, 5, replace=False)
  assert rounds[0] == [IDS[i] for i in first]


def test_fast_is_uniform():
  # Each client is in a round's sample with probability k / N = 0.25; over 20,000 rounds the
  # frequency's standard deviation is sqrt(0.25 * 0.75 / 20000) = 0.0031: tolerance 5 sigma.
  sample = sampling.build_client_sampler(IDS, 5, seed=3, method='fast')
  counts = np.zeros(20)
  for r in range(20000):
    for cid in sample(r):
      counts[int(cid[1:])] += 1
  np.testing.assert_allclose(counts / 20000, 0.25, atol=0.0155)


def test_invalid_arguments():
  with pytest.raises(ValueError, match=r'clients_per_round must be in \[1, 20\] .* got 21'):
    sampling.build_client_sampler(IDS, 21, seed=1)
  with pytest.raises(ValueError, match="method must be one of tff, fast, epoch, got 'numpy'"):
    sampling.build_client_sampler(IDS, 2, seed=1, method='numpy')
  with pytest.raises(ValueError, match="seed must be >= 0 for method='fast', got -1"):
    sampling.build_client_sampler(IDS, 2, seed=-1, method='fast')
  with pytest.raises(ValueError, match="seed must be >= 0 for method='epoch', got -2"):
    sampling.build_client_sampler(IDS, 2, seed=-2, method='epoch')
  with pytest.raises(ValueError, match="round_num must be >= 1 for method='epoch', got 0"):
    sampling.build_client_sampler(IDS, 2, seed=1, method='epoch')(0)


def test_epoch_takes_each_client_at_most_once_per_epoch_in_a_new_order_each_epoch():
  # N = 20, m = 6: epochs of R = 3 rounds (18 clients), 2 left over, other ones each epoch.
  assert sampling.rounds_per_epoch(20, 6) == 3
  sample = sampling.build_client_sampler(IDS, 6, seed=4, method='epoch')
  epochs = [[sample(3 * e + r) for r in (1, 2, 3)] for e in range(40)]
  left_over = set()
  for rounds in epochs:
    members = [cid for ids in rounds for cid in ids]
    assert all(len(ids) == 6 for ids in rounds)
    assert len(set(members)) == 18 and set(members) <= set(IDS)  # nobody twice in an epoch
    left_over |= set(IDS) - set(members)
  assert left_over == set(IDS)  # every client sits an epoch out sometime
  assert len({tuple(map(tuple, rounds)) for rounds in epochs}) == 40  # a new order each epoch
  # The order of epoch e is the permutation of default_rng([seed, e]), in blocks of m.
  order = np.random.default_rng([4, 1]).permutation(20)
  assert epochs[1] == [[IDS[i] for i in order[6 * b : 6 * b + 6]] for b in range(3)]
  again = sampling.build_client_sampler(list(IDS), 6, seed=4, method='epoch')
  assert [again(r) for r in (120, 5, 1)] == [epochs[39][2], epochs[1][1], epochs[0][0]]
  assert sampling.build_client_sampler(IDS, 6, seed=5, method='epoch')(1) != epochs[0][0]
