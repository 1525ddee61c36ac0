"""Task-side Keras layers whose randomness is a pure function of the local step's seed.

The local loop (`tff_adaptive.core.local_loop`) enters `tff_adaptive.core.seeds.step_seeds(seed)`
around every local step's forward pass; these layers draw their randomness from
`seeds.next_layer_seed()` while traced inside it, so a federated round is a pure function of
its seeds in either engine, and a resumed run repeats an uninterrupted one exactly. Outside such
a context (e.g. `model.fit`) they behave like their Keras counterparts with stateful random ops.

* `StatelessDropout`: inverted dropout (optionally channel-wise, as PyTorch's Dropout2d);
* `CifarPreprocessing`: Reddi et al. 2021 App. C.1's CIFAR crop/flip/standardization.
"""

import tensorflow as tf

from tff_adaptive.core import seeds
from tff_adaptive.core.validation import check_int

__all__ = ['CifarPreprocessing', 'StatelessDropout']


class StatelessDropout(tf.keras.layers.Layer):
  """Inverted dropout with rate `rate`; `spatial=True` drops whole channels (NHWC).

  Same arithmetic as tf.keras.layers.Dropout / SpatialDropout2D: kept units are scaled by
  1 / (1 - rate); identity when not training. Inside `seeds.step_seeds(seed)` the mask comes
  from `tf.nn.experimental.stateless_dropout` keyed by `seeds.next_layer_seed()`.
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
    seed = seeds.next_layer_seed()
    if seed is None:
      return tf.nn.dropout(inputs, self.rate, noise_shape=noise_shape)
    return tf.nn.experimental.stateless_dropout(
      inputs, self.rate, seed=seed, noise_shape=noise_shape
    )

  def get_config(self):
    return {**super().get_config(), 'rate': self.rate, 'spatial': self.spatial}


class CifarPreprocessing(tf.keras.layers.Layer):
  """Reddi et al. C.1's CIFAR preprocessing, deterministic given the training-step seed.

  Training: a uniformly random crop_size x crop_size window (offsets 0..32-crop_size, as
  ``tf.image.random_crop``) and a horizontal flip with probability 1/2 (as
  ``tf.image.random_flip_left_right``), drawn per image. Inference: the central window
  (offset (32 - crop_size) // 2, as ``tf.image.resize_with_crop_or_pad``). Then, for both,
  ``tf.image.per_image_standardization``: (x - mean) / max(std, 1/sqrt(pixels)) per image.

  Inside ``seeds.step_seeds(seed)`` (every local step of client training) the crops and flips
  come from stateless ops keyed by that step's seed, like ``StatelessDropout``'s masks, so a
  round is a pure function of the client seeds and each local step (and epoch) sees fresh
  augmentations. Outside such a context it uses ordinary stateful random ops.
  """

  def __init__(self, crop_size: int = 24, **kwargs):
    super().__init__(**kwargs)
    self.crop_size = check_int('crop_size', crop_size, 1)

  def call(self, images, training=None):
    images = tf.cast(images, tf.float32)
    height, width = images.shape[1], images.shape[2]
    if self.crop_size > min(height, width):
      raise ValueError(f'crop_size={self.crop_size} exceeds the image size {height}x{width}')
    batch = tf.shape(images)[0]
    span = tf.range(self.crop_size)
    if training:
      seed = seeds.next_layer_seed()
      max_y, max_x = height - self.crop_size + 1, width - self.crop_size + 1
      if seed is None:
        off_y = tf.random.uniform([batch], 0, max_y, tf.int32)
        off_x = tf.random.uniform([batch], 0, max_x, tf.int32)
        flip = tf.random.uniform([batch], 0, 2, tf.int32)
      else:
        draws = [
          tf.random.stateless_uniform([batch], tf.stack([seed[0], seed[1] * 3 + k]), 0, m, tf.int32)
          for k, m in enumerate((max_y, max_x, 2))
        ]
        off_y, off_x, flip = draws
      rows = off_y[:, None] + span[None, :]
      cols = tf.where(
        flip[:, None] > 0,
        off_x[:, None] + self.crop_size - 1 - span[None, :],
        off_x[:, None] + span[None, :],
      )
    else:
      rows = tf.broadcast_to((height - self.crop_size) // 2 + span, [batch, self.crop_size])
      cols = tf.broadcast_to((width - self.crop_size) // 2 + span, [batch, self.crop_size])
    images = tf.gather(images, rows, axis=1, batch_dims=1)
    images = tf.gather(images, cols, axis=2, batch_dims=1)
    return tf.image.per_image_standardization(images)

  def get_config(self):
    return {**super().get_config(), 'crop_size': self.crop_size}
