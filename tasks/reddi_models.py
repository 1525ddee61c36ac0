"""Keras models of the Reddi et al. 2021 benchmark tasks (App. C, Tables 3-6, and C.1's ResNet).

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Where the paper is silent or differs from the authors' public code
(google-research/federated, `utils/models/`), the models follow that code, which produced the
published tables, and say so:

* ``build_emnist_autoencoder``: Table 3 (784-1000-500-250-30-250-500-1000-784, sigmoid). The
  authors' code makes the 30-unit code layer linear (as in Hinton & Salakhutdinov's MNIST
  autoencoder the paper cites); ``code_activation='sigmoid'`` gives Table 3's caption literally.
* ``build_shakespeare_lstm`` (Table 5) and ``build_so_nwp_lstm`` (Table 6): embeddings with
  ``mask_zero`` as in the authors' code (padding sits at the end, so masking only freezes the
  LSTM state over the padded tail). No Keras mask leaves the model: the authors' losses
  (TF 2.2 Keras) ignored it, so the cross-entropy covers every position; TF 2.14's losses would
  silently apply it.
* ``build_so_lr``: one-vs-rest logistic regression as LOGITS (the authors' model ends in a
  sigmoid; use ``BinaryCrossentropy(from_logits=True)``).
* ``build_resnet18_gn``: the authors' ResNet-18 (v2, pre-activation, basic blocks [2, 2, 2, 2],
  7x7/2 stem + 3x3/2 max-pool, He-normal convolutions without bias, L2 weight decay 1e-4),
  GroupNorm with 2 groups as the paper states (their code used the library default, 32).
  Their stages all have stride 1 (a 24x24 crop is 6x6 after the stem); ``stage_strides`` can
  give He et al.'s (1, 2, 2, 2), which does not change the parameter count.
* C.1's CIFAR preprocessing (random 24x24 crop + horizontal flip when training, central crop at
  inference, per-image standardisation) is ``tasks.layers.CifarPreprocessing``, in front of the
  ResNet.

Every model outputs LOGITS except the autoencoder (sigmoid reconstructions, for an MSE loss).
Initialisers are the authors' (seeded per layer with ``seed + offset`` when ``seed`` is given).
"""

from __future__ import annotations

from collections.abc import Sequence
import functools

import tensorflow as tf

from tff_adaptive.core.validation import check_int
from tff_adaptive.tasks.layers import CifarPreprocessing

__all__ = [
  'DropMask',
  'build_emnist_autoencoder',
  'build_resnet18_gn',
  'build_shakespeare_lstm',
  'build_so_lr',
  'build_so_nwp_lstm',
]

layers = tf.keras.layers


def _init(cls, seed: int | None, offset: int, **kwargs):
  """A fresh initializer of class `cls`, seeded with seed + offset (unseeded if seed is None)."""
  return cls(seed=None if seed is None else seed + offset, **kwargs)


class DropMask(layers.Layer):
  """Identity that removes the Keras mask, so losses and metrics see every position."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.supports_masking = True

  def call(self, inputs):
    # A new tensor: returning `inputs` itself would keep the mask Keras attached to it.
    return tf.identity(inputs)

  def compute_mask(self, inputs, mask=None):
    return None


def build_emnist_autoencoder(
  seed: int | None = None, code_activation: str = 'linear'
) -> tf.keras.Model:
  """The EMNIST autoencoder of Reddi et al. 2021, Table 3 (Zaheer et al. 2018's "MNIST" AE).

  Dense layers 1000, 500, 250, 30, 250, 500, 1000, 784, each sigmoid except the 30-unit code
  layer (``code_activation``; linear in the authors' code). Glorot-normal kernels, zero biases.
  Parameters: 785,000 + 500,500 + 125,250 + 7,530 + 7,750 + 125,500 + 501,000 + 784,784
  = 2,837,314.

  Args:
      seed: optional initialiser seed.
      code_activation: activation of the 30-unit layer, 'linear' or 'sigmoid'.

  Returns:
      An uncompiled model mapping float32 [B, 784] to reconstructions in (0, 1), [B, 784].
  """
  if code_activation not in ('linear', 'sigmoid'):
    raise ValueError(
      f"code_activation={code_activation!r} is invalid; expected 'linear' or 'sigmoid'"
    )
  widths = (1000, 500, 250, 30, 250, 500, 1000, 784)
  model_layers = [tf.keras.Input(shape=(784,), dtype=tf.float32)]
  for k, width in enumerate(widths):
    model_layers.append(
      layers.Dense(
        width,
        activation=code_activation if width == 30 else 'sigmoid',
        kernel_initializer=_init(tf.keras.initializers.GlorotNormal, seed, k),
        name=f'dense{k + 1}',
      )
    )
  return tf.keras.Sequential(model_layers, name='emnist_autoencoder')


def _lstm(units: int, seed: int | None, offset: int, name: str) -> layers.LSTM:
  return layers.LSTM(
    units,
    return_sequences=True,
    name=name,
    kernel_initializer=_init(tf.keras.initializers.HeNormal, seed, offset),
    recurrent_initializer=_init(tf.keras.initializers.Orthogonal, seed, offset + 1),
  )


def build_shakespeare_lstm(
  seed: int | None = None, vocab_size: int = 90, sequence_length: int = 80
) -> tf.keras.Model:
  """The Shakespeare character model of Reddi et al. 2021, Table 5 (McMahan et al. 2017).

  Embedding (vocab_size x 8) -> LSTM 256 -> LSTM 256 -> Dense vocab_size logits, per position.
  Parameters for vocab 90 (86 characters + pad, OOV, BOS, EOS): 720 + 271,360 + 525,312
  + 23,130 = 820,522 (an LSTM of n units on d inputs has 4n(d + n + 1)).

  Args:
      seed: optional initialiser seed.
      vocab_size: characters including the 4 special tokens (pad = 0), >= 2.
      sequence_length: input length, >= 1.

  Returns:
      An uncompiled model mapping int32 [B, sequence_length] token ids to logits
      [B, sequence_length, vocab_size].
  """
  vocab_size = check_int('vocab_size', vocab_size, 2)
  sequence_length = check_int('sequence_length', sequence_length, 1)
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(sequence_length,), dtype=tf.int32),
      layers.Embedding(
        vocab_size,
        8,
        mask_zero=True,
        name='embedding',
        embeddings_initializer=_init(tf.keras.initializers.RandomUniform, seed, 0),
      ),
      _lstm(256, seed, 1, 'lstm1'),
      _lstm(256, seed, 3, 'lstm2'),
      layers.Dense(
        vocab_size,
        name='logits',
        kernel_initializer=_init(tf.keras.initializers.GlorotNormal, seed, 5),
      ),
      DropMask(name='drop_mask'),
    ],
    name='shakespeare_lstm',
  )


def build_so_nwp_lstm(
  seed: int | None = None, vocab_size: int = 10004, sequence_length: int = 20
) -> tf.keras.Model:
  """The Stack Overflow next-word model of Reddi et al. 2021, Table 6.

  Embedding (vocab_size x 96) -> LSTM 670 -> Dense 96 (linear projection) -> Dense
  vocab_size logits, per position. Parameters for 10,000 words + pad, OOV, BOS, EOS:
  960,384 + 2,055,560 + 64,416 + 970,388 = 4,050,748.

  Args:
      seed: optional initialiser seed.
      vocab_size: words including the 4 special tokens (pad = 0), >= 2.
      sequence_length: input length, >= 1.

  Returns:
      An uncompiled model mapping int32 [B, sequence_length] to logits
      [B, sequence_length, vocab_size].
  """
  vocab_size = check_int('vocab_size', vocab_size, 2)
  sequence_length = check_int('sequence_length', sequence_length, 1)
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(sequence_length,), dtype=tf.int32),
      layers.Embedding(
        vocab_size,
        96,
        mask_zero=True,
        name='embedding',
        embeddings_initializer=_init(tf.keras.initializers.RandomUniform, seed, 0),
      ),
      _lstm(670, seed, 1, 'lstm'),
      layers.Dense(
        96, name='projection', kernel_initializer=_init(tf.keras.initializers.GlorotNormal, seed, 3)
      ),
      layers.Dense(
        vocab_size,
        name='logits',
        kernel_initializer=_init(tf.keras.initializers.GlorotNormal, seed, 4),
      ),
      DropMask(name='drop_mask'),
    ],
    name='so_nwp_lstm',
  )


def build_so_lr(
  seed: int | None = None, num_words: int = 10000, num_tags: int = 500
) -> tf.keras.Model:
  """Stack Overflow tag prediction: one-vs-rest logistic regression (Reddi et al. 2021, C.4).

  One Dense layer: tag logits W^T x + b, x the normalised bag of words. Parameters:
  10,000 x 500 + 500 = 5,000,500. Glorot-normal kernel, zero bias.

  Args:
      seed: optional initialiser seed.
      num_words: bag-of-words dimension, >= 1.
      num_tags: number of tags (independent binary outputs), >= 1.

  Returns:
      An uncompiled model mapping float32 [B, num_words] to logits [B, num_tags].
  """
  num_words = check_int('num_words', num_words, 1)
  num_tags = check_int('num_tags', num_tags, 1)
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(num_words,), dtype=tf.float32),
      layers.Dense(
        num_tags,
        name='logits',
        kernel_initializer=_init(tf.keras.initializers.GlorotNormal, seed, 0),
      ),
    ],
    name='so_lr',
  )


def _conv(
  filters: int,
  kernel: int,
  strides: int,
  seed: int | None,
  offset: int,
  weight_decay: float,
  name: str,
  padding: str = 'same',
) -> layers.Conv2D:
  return layers.Conv2D(
    filters,
    kernel,
    strides=strides,
    padding=padding,
    use_bias=False,
    name=name,
    kernel_initializer=_init(tf.keras.initializers.HeNormal, seed, offset),
    kernel_regularizer=tf.keras.regularizers.l2(weight_decay) if weight_decay else None,
  )


def _norm_relu(groups: int, x, name: str):
  x = layers.GroupNormalization(groups=groups, name=f'{name}_gn')(x)
  return layers.ReLU(name=f'{name}_relu')(x)


def _basic_block(x, conv, counter, stride: int, first: bool, groups: int, name: str):
  """A pre-activation basic block: GN-ReLU-conv3x3, GN-ReLU-conv3x3, plus the input (through
  conv1x1 + GN when the shape changes); the very first block starts with its conv.
  `conv(kernel, stride, index, name, ...)` builds a convolution of the block's filters."""
  shortcut = x
  y = x if first else _norm_relu(groups, x, f'{name}_a')
  y = conv(3, stride, offset=next(counter), name=f'{name}_conv_a')(y)
  y = _norm_relu(groups, y, f'{name}_b')
  y = conv(3, 1, offset=next(counter), name=f'{name}_conv_b')(y)
  if stride > 1 or shortcut.shape[-1] != y.shape[-1]:
    shortcut = conv(1, stride, offset=next(counter), name=f'{name}_shortcut', padding='valid')(
      shortcut
    )
    shortcut = layers.GroupNormalization(groups=groups, name=f'{name}_shortcut_gn')(shortcut)
  return layers.Add(name=f'{name}_add')([shortcut, y])


def build_resnet18_gn(
  num_classes: int,
  seed: int | None = None,
  groups: int = 2,
  image_shape: Sequence[int] = (32, 32, 3),
  crop_size: int = 24,
  stage_strides: Sequence[int] = (1, 1, 1, 1),
  weight_decay: float = 1e-4,
) -> tf.keras.Model:
  """ResNet-18 with GroupNorm of Reddi et al. 2021 (C.1), with ``CifarPreprocessing`` in front.

  Pre-activation (ResNet v2) as in the authors' code: conv 7x7/2 (64) -> GN -> ReLU ->
  max-pool 3x3/2 -> 4 stages of 2 basic blocks (64, 128, 256, 512 filters; block =
  GN-ReLU-conv3x3, GN-ReLU-conv3x3, plus the input, through conv1x1 + GN when the shape
  changes; the very first block starts with its conv) -> GN -> ReLU -> global average pool ->
  dense logits. Parameters: 11,181,642 for 10 classes, 11,227,812 for 100 (convolutions
  11,166,912; GroupNorm scales and offsets 9,600; dense 513 x num_classes); independent of
  ``groups`` and ``stage_strides``.

  Args:
      num_classes: number of logits, >= 2.
      seed: optional initialiser seed.
      groups: GroupNorm groups per layer (paper: 2); must divide 64.
      image_shape: raw image shape (uint8 pixels 0..255).
      crop_size: side of the training/central crop.
      stage_strides: stride of each stage's first block (authors' code: all 1).
      weight_decay: L2 coefficient on kernels and the dense bias (authors' code: 1e-4); the
          penalty is added to the training loss through ``model.losses``; 0 disables it.

  Returns:
      An uncompiled model mapping uint8 [B, *image_shape] images to logits [B, num_classes].
  """
  num_classes = check_int('num_classes', num_classes, 2)
  groups = check_int('groups', groups, 1)
  if 64 % groups:
    raise ValueError(f'groups={groups} is invalid; it must divide 64')
  if len(stage_strides) != 4 or any(s not in (1, 2) for s in stage_strides):
    raise ValueError(
      f'stage_strides={tuple(stage_strides)!r} is invalid; expected 4 values in {{1, 2}}'
    )
  if not weight_decay >= 0:
    raise ValueError(f'weight_decay={weight_decay!r} is invalid; expected >= 0')
  counter = iter(range(10_000))
  norm_relu = functools.partial(_norm_relu, groups)
  inputs = tf.keras.Input(shape=tuple(image_shape), dtype=tf.uint8)
  x = CifarPreprocessing(crop_size, name='preprocess')(inputs)
  x = _conv(64, 7, 2, seed, next(counter), weight_decay, 'stem_conv')(x)
  x = norm_relu(x, 'stem')
  x = layers.MaxPool2D(3, strides=2, padding='same', name='stem_pool')(x)
  filters = 64
  for stage, stride in enumerate(stage_strides):
    for block in range(2):
      name = f'stage{stage + 1}_block{block + 1}'
      first = stage == 0 and block == 0
      conv = functools.partial(_conv, filters, seed=seed, weight_decay=weight_decay)
      x = _basic_block(x, conv, counter, stride if block == 0 else 1, first, groups, name)
    filters *= 2
  x = norm_relu(x, 'final')
  x = layers.GlobalAveragePooling2D(name='pool')(x)
  regularizer = tf.keras.regularizers.l2(weight_decay) if weight_decay else None
  logits = layers.Dense(
    num_classes,
    name='logits',
    kernel_regularizer=regularizer,
    bias_regularizer=regularizer,
    kernel_initializer=_init(tf.keras.initializers.RandomNormal, seed, next(counter), stddev=0.01),
  )(x)
  return tf.keras.Model(inputs, logits, name=f'resnet18_gn{groups}')
