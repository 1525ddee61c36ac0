"""Dropout whose masks are a pure function of (client seed, local step, layer).

Keras dropout inside a TFF computation runs in graph mode, where Keras falls back to legacy
stateful random ops. Their kernel state lives in the worker's cached function, is shared by
clients trained concurrently, and restarts with every new worker: the masks then depend on
thread scheduling, and a resumed run diverges from an uninterrupted one.

`StatelessDropout` instead draws its mask with `tf.nn.experimental.stateless_dropout` from a
seed that the client-training loop provides through `step_seeds(seed)`: the k-th dropout call
traced inside that context uses seed (seed[0], seed[1] * 64 + k). Outside such a context (e.g.
`model.fit`) it behaves like `tf.keras.layers.Dropout` with an ordinary stateful mask.
"""

import contextlib
import threading

import tensorflow as tf

_MAX_DROPOUT_LAYERS = 64
_local = threading.local()


@contextlib.contextmanager
def step_seeds(seed: tf.Tensor):
  """Within the block, StatelessDropout layers draw masks from `seed` (int64[2])."""
  previous = getattr(_local, 'state', None)
  _local.state = [tf.cast(seed, tf.int64), 0]
  try:
    yield
  finally:
    _local.state = previous


def _next_seed() -> tf.Tensor | None:
  state = getattr(_local, 'state', None)
  if state is None:
    return None
  seed, k = state
  if k >= _MAX_DROPOUT_LAYERS:
    raise ValueError(f'more than {_MAX_DROPOUT_LAYERS} dropout calls in one step')
  state[1] += 1
  return tf.stack([seed[0], seed[1] * _MAX_DROPOUT_LAYERS + k])


class StatelessDropout(tf.keras.layers.Layer):
  """Inverted dropout with rate `rate`; `spatial=True` drops whole channels (NHWC).

  Same arithmetic as tf.keras.layers.Dropout / SpatialDropout2D: kept units are scaled by
  1 / (1 - rate); identity when not training.
  """

  def __init__(self, rate: float, spatial: bool = False, **kwargs):
    super().__init__(**kwargs)
    if not 0.0 <= rate < 1.0:
      raise ValueError(f'rate must be in [0, 1), got {rate}')
    self.rate = rate
    self.spatial = spatial

  def call(self, inputs, training=None):
    if not training or self.rate == 0.0:
      return inputs
    shape = tf.shape(inputs)
    noise_shape = tf.stack([shape[0], 1, 1, shape[-1]]) if self.spatial else None
    seed = _next_seed()
    if seed is None:
      return tf.nn.dropout(inputs, self.rate, noise_shape=noise_shape)
    return tf.nn.experimental.stateless_dropout(
      inputs, self.rate, seed=seed, noise_shape=noise_shape
    )

  def get_config(self):
    return {**super().get_config(), 'rate': self.rate, 'spatial': self.spatial}
