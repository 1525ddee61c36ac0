"""TF's stateless uniform numbers in NumPy (`core.philox`), and a round's shuffles from them
(`seeds.epoch_rows`), bit-equal to TF's kernels."""

import numpy as np
import tensorflow as tf

from tff_adaptive.core import philox
from tff_adaptive.core import seeds


def _seeds(rng, count):
  """Seeds as runs make them (small, large, negative second words: `client_epochs`'s)."""
  s = rng.integers(-(2**62), 2**62, size=(count, 2))
  s[:3] = [[0, 0], [1, 7], [-3, -1]]
  return s.astype(np.int64)


def test_the_numbers_are_tfs_bit_for_bit():
  rng = np.random.default_rng(0)
  for seed, n in zip(_seeds(rng, 12), [1, 2, 3, 4, 5, 7, 8, 9, 100, 1023, 1025, 3001]):
    want = tf.random.stateless_uniform([n], seed=tf.constant(seed), dtype=tf.float32).numpy()
    np.testing.assert_array_equal(philox.uniform(seed, n), want)


def test_a_rounds_rows_are_each_clients_epoch_permutations():
  """Clients of 0, 1, 2, 4, 5, 37 and 500 examples (and 60 random sizes), 3 epochs: rows[e]
  holds each client's `epoch_permutations` shifted to its block, and is a permutation."""
  rng = np.random.default_rng(1)
  sizes = np.concatenate([[0, 1, 2, 4, 5, 37, 500], rng.integers(0, 300, 60)])
  client_seeds = _seeds(rng, len(sizes))
  rows = seeds.epoch_rows(sizes, 3, client_seeds)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  assert rows.shape == (3, sizes.sum()) and rows.dtype == np.int32
  for i, (n, start) in enumerate(zip(sizes, starts)):
    want = seeds.epoch_permutations(tf.constant(int(n)), 3, tf.constant(client_seeds[i])).numpy()
    np.testing.assert_array_equal(rows[:, start : start + n], want + start)
  for e in range(3):
    np.testing.assert_array_equal(np.sort(rows[e]), np.arange(sizes.sum()))
