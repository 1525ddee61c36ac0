"""Seeds of a federated run: per-client, per-round and per-local-step, all pure functions.

Every random choice of a round is a function of (run seed, round, client): client sampling
(`tff_adaptive.loop.sampling`), each client's shuffling (`client_seed` -> `epoch_permutations`),
and each local step's randomness (dropout masks, CIFAR crops): the local loop enters
`step_seeds(step_seed)` around each step's forward pass, and task layers
(`tasks.layers.StatelessDropout`, `tasks.layers.CifarPreprocessing`) draw their k-th stateless
seed of that step from `next_layer_seed()`. A resumed run therefore repeats exactly the choices
of an uninterrupted one, whichever engine runs it.

Why not Keras' own random layers: inside a TFF computation Keras runs in graph mode with legacy
stateful random ops, whose state lives in the worker's cached function and is shared by
concurrently trained clients: masks then depend on thread scheduling.
"""

import contextlib
import threading

import numpy as np
import tensorflow as tf

from tff_adaptive.core import philox

SEED_KEY = 'seed'
MAX_LAYER_SEEDS_PER_STEP = 64
_local = threading.local()


def client_seed(seed: int, round_num: int, client_index: int, population: int) -> np.ndarray:
  """int64[2] seed of one client's local training in one round: (seed, round * N + index).

  client_index is the client's position in the training population (N clients), so the seed
  identifies (round, client) uniquely and does not depend on which other clients were sampled.
  """
  return np.array([seed, round_num * population + client_index], np.int64)


def local_step_seed(seed: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
  """int64[2] seed of local step `step` of a client whose round seed is `seed`.

  `seed` may carry leading (client) axes, [..., 2]: each client's step seed, [..., 2].
  """
  seed = tf.cast(seed, tf.int64)
  return tf.stack([seed[..., 0], seed[..., 1] * 1_000_003 + tf.cast(step, tf.int64)], axis=-1)


def epoch_permutations(n: tf.Tensor, epochs: int, seed: tf.Tensor) -> tf.Tensor:
  """[epochs, n] int32: a stateless random permutation of range(n) per epoch."""
  seed = tf.cast(seed, tf.int64)
  perms = []
  for e in range(epochs):
    keys = tf.random.stateless_uniform(
      [n], seed=tf.stack([seed[0], seed[1] * 1009 + e]), dtype=tf.float32
    )
    perms.append(tf.argsort(keys, stable=True))
  return tf.stack(perms)


def epoch_rows(sizes: np.ndarray, epochs: int, seeds: np.ndarray) -> np.ndarray:
  """Every client's `epoch_permutations`, as rows of the round's concatenated examples.

  For clients of n_i examples, concatenated in order (client i's from row start_i), and their
  round seeds [C, 2]: rows[e, start_i + k] = start_i + epoch_permutations(n_i, E, seed_i)[e, k],
  int32 [E, sum n_i]. Computed in NumPy for all clients at once (`philox`: TF's keys, bit for
  bit): a permutation is the stable argsort of its keys u = mantissa / 2^23, so one stable
  argsort of client * 2^23 + mantissa orders every client's block as its own argsort does.
  """
  sizes = np.asarray(sizes, np.int64)
  seeds = np.asarray(seeds, np.int64).reshape(-1, 2)
  client = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
  total = len(client)
  if len(sizes) * total >= 1 << 40:  # the keys below must fit in int64
    raise ValueError(f'{len(sizes)} clients of {total} examples: too many for one round')
  rows = np.empty((epochs, total), np.int32)
  for e in range(epochs):
    with np.errstate(over='ignore'):
      epoch_seeds = np.stack([seeds[:, 0], seeds[:, 1] * 1009 + e], axis=1)
    keys = (client << 23) + philox.mantissas(epoch_seeds, sizes).astype(np.int64)
    # Ties (equal mantissas) broken by position, as a stable sort breaks them: the keys are
    # then distinct, and the faster unstable sort gives the same order.
    rows[e] = np.argsort(keys * total + np.arange(total))
  return rows


def client_epochs(seed: tf.Tensor, low: int, high: int) -> tf.Tensor:
  """int32 E_i ~ U{low, ..., high} from a client's round seed (resource heterogeneity).

  Its stateless seed (seed[0], -1 - seed[1]) is used by no other draw (theirs have
  second components >= 0).
  """
  seed = tf.cast(seed, tf.int64)
  return tf.random.stateless_uniform(
    [], seed=tf.stack([seed[0], -1 - seed[1]]), minval=low, maxval=high + 1, dtype=tf.int32
  )


@contextlib.contextmanager
def step_seeds(seed: tf.Tensor):
  """Within the block, `next_layer_seed()` returns seeds derived from `seed` (int64[2])."""
  previous = getattr(_local, 'state', None)
  _local.state = [tf.cast(seed, tf.int64), 0]
  try:
    yield
  finally:
    _local.state = previous


def next_layer_seed() -> tf.Tensor | None:
  """The k-th call inside `step_seeds(seed)` returns (seed[0], seed[1] * 64 + k); else None.

  Layers call this while they are traced; None means "no step seed: use ordinary random ops".

  Raises:
    ValueError: more than MAX_LAYER_SEEDS_PER_STEP calls in one step.
  """
  state = getattr(_local, 'state', None)
  if state is None:
    return None
  seed, k = state
  if k >= MAX_LAYER_SEEDS_PER_STEP:
    raise ValueError(f'more than {MAX_LAYER_SEEDS_PER_STEP} random layer calls in one step')
  state[1] += 1
  return layer_seed(seed, k)


def layer_seed(step_seed: tf.Tensor, k: int) -> tf.Tensor:
  """The k-th random layer's seed in a step: (s[0], s[1] * 64 + k); s may be [..., 2]."""
  step_seed = tf.cast(step_seed, tf.int64)
  return tf.stack([step_seed[..., 0], step_seed[..., 1] * MAX_LAYER_SEEDS_PER_STEP + k], axis=-1)
