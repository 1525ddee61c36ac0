"""Small Keras models for the FMNIST, Synthetic and EMNIST-CR setups; all output LOGITS.

``build_fmnist_cnn`` is the shallow CNN of Kim et al. 2024 (Delta-SGD, Sec. 4: "two convolutional
and two fully-connected layers, followed by dropout and ReLU activations" for MNIST and FMNIST).
The paper gives no sizes; they are those of ``CNNMnist`` in the authors' public code (the
PyTorch MNIST example shape shared by many FL code bases). ``build_softmax_regression`` is the
multinomial logistic regression y = argmax(softmax(W x + b)) of the Synthetic task of Ju et al.
2023 (AdaFedAdam, App. C.1) and Li et al. 2020 (FedProx). ``build_emnist_cr_cnn`` is the
EMNIST character-recognition CNN of Reddi et al. 2021 (Adaptive Federated Optimization, Table 4).

Models are not compiled; use a loss with ``from_logits=True``. Inputs are declared so models are
built (and their weights exist) without data.
"""

from __future__ import annotations

import tensorflow as tf

from tff_adaptive.core.validation import check_int
from tff_adaptive.tasks.layers import StatelessDropout

__all__ = ['build_emnist_cr_cnn', 'build_fmnist_cnn', 'build_softmax_regression']


def _seeded(seed: int | None, offset: int) -> dict:
  """Initializer kwargs: Keras defaults, with per-layer seeds when ``seed`` is given."""
  if seed is None:
    return {}
  return {'kernel_initializer': tf.keras.initializers.GlorotUniform(seed=seed + offset)}


def build_fmnist_cnn(num_classes: int = 10, seed: int | None = None) -> tf.keras.Model:
  """The CNNMnist shallow CNN of Kim et al. 2024 for 28x28x1 images.

  Layers (sizes from ``CNNMnist`` in Kim et al.'s code, github.com/jlylekim/auto-tuned-FL):
  conv 10@5x5 -> maxpool 2 -> ReLU -> conv 20@5x5 -> channel dropout 0.5 (PyTorch
  ``Dropout2d``, channel-wise) -> maxpool 2 -> ReLU -> flatten (4*4*20 = 320)
  -> dense 50 + ReLU -> dropout 0.5 -> dense ``num_classes`` logits. Valid padding:
  28 -> 24 -> 12 -> 8 -> 4. Parameters for 10 classes: 260 + 5,020 + 16,050 + 510 = 21,840.
  The authors' model ends in log_softmax with an NLL loss, equivalent to these logits with
  cross-entropy from logits. Initialisers are Keras defaults (Glorot-uniform kernels, zero
  biases), not PyTorch's.

  Args:
      num_classes: number of output logits, >= 2.
      seed: optional seed for the kernel initialisers; None = unseeded. Dropout masks come from
          the training loop's seeds (``tasks.layers``), so a federated run is
          a pure function of its seed.

  Returns:
      An uncompiled ``tf.keras.Sequential`` mapping float32 [B, 28, 28, 1] to logits
      [B, num_classes].
  """
  num_classes = check_int('num_classes', num_classes, 2)
  layers = tf.keras.layers
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(28, 28, 1), dtype=tf.float32),
      layers.Conv2D(10, 5, name='conv1', **_seeded(seed, 0)),
      layers.MaxPool2D(2, name='pool1'),
      layers.ReLU(name='relu1'),
      layers.Conv2D(20, 5, name='conv2', **_seeded(seed, 1)),
      StatelessDropout(0.5, spatial=True, name='conv2_drop'),
      layers.MaxPool2D(2, name='pool2'),
      layers.ReLU(name='relu2'),
      layers.Flatten(name='flatten'),
      layers.Dense(50, activation='relu', name='fc1', **_seeded(seed, 2)),
      StatelessDropout(0.5, name='fc1_drop'),
      layers.Dense(num_classes, name='logits', **_seeded(seed, 3)),
    ],
    name='fmnist_cnn',
  )


def build_emnist_cr_cnn(seed: int | None = None) -> tf.keras.Model:
  """The EMNIST-CR CNN of Reddi et al. 2021 (ICLR, "Adaptive Federated Optimization"), Table 4.

  Layers, for 28x28x1 inputs and the 62 EMNIST classes: conv 32@3x3 + ReLU (28 -> 26) ->
  conv 64@3x3 + ReLU (26 -> 24) -> maxpool 2 (24 -> 12) -> dropout 0.25 -> flatten
  (12*12*64 = 9,216) -> dense 128 + ReLU -> dropout 0.5 -> dense 62 logits (Table 4 ends in a
  softmax; use cross-entropy from logits). Valid padding. Parameters:
  320 + 18,496 + 1,179,776 + 7,998 = 1,206,590. Initialisers are Keras defaults
  (Glorot-uniform kernels, zero biases). Dropout is `StatelessDropout` (masks from the
  training loop's seeds).

  Args:
      seed: optional seed for the kernel initialisers; None = unseeded.

  Returns:
      An uncompiled ``tf.keras.Sequential`` mapping float32 [B, 28, 28, 1] to logits [B, 62].
  """
  layers = tf.keras.layers
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(28, 28, 1), dtype=tf.float32),
      layers.Conv2D(32, 3, activation='relu', name='conv1', **_seeded(seed, 0)),
      layers.Conv2D(64, 3, activation='relu', name='conv2', **_seeded(seed, 1)),
      layers.MaxPool2D(2, name='pool'),
      StatelessDropout(0.25, name='pool_drop'),
      layers.Flatten(name='flatten'),
      layers.Dense(128, activation='relu', name='fc1', **_seeded(seed, 2)),
      StatelessDropout(0.5, name='fc1_drop'),
      layers.Dense(62, name='logits', **_seeded(seed, 3)),
    ],
    name='emnist_cr_cnn',
  )


def build_softmax_regression(
  num_features: int = 60, num_classes: int = 10, seed: int | None = None
) -> tf.keras.Model:
  """Multinomial logistic regression: one Dense layer producing logits W^T x + b.

  Parameters: num_features * num_classes + num_classes (610 for 60 features, 10 classes).

  Args:
      num_features: input dimension, >= 1.
      num_classes: number of output logits, >= 2.
      seed: optional seed for the kernel initialiser; None = unseeded.

  Returns:
      An uncompiled ``tf.keras.Sequential`` mapping float32 [B, num_features] to logits
      [B, num_classes].
  """
  num_features = check_int('num_features', num_features, 1)
  num_classes = check_int('num_classes', num_classes, 2)
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(num_features,), dtype=tf.float32),
      tf.keras.layers.Dense(num_classes, name='logits', **_seeded(seed, 0)),
    ],
    name='softmax_regression',
  )
