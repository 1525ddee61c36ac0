"""A Keras Sequential model as a pure function of stacked per-client weights.

`FunctionalModel.from_keras(model)` reads the layers of a `tf.keras.Sequential` and returns
`apply(params, x, training, step_seeds)`: K clients' weights stacked on a leading axis
(`params[j]` is [K, *shape of the model's j-th trainable weight]), K minibatches stacked the
same way (x: [K, B, ...]) -> K clients' outputs [K, B, ...], each client's from its own weights.
The weights are the Keras model's own (`model.trainable_weights`, in that order), so the
function is the model's, not a second definition of it: `tests/engines/test_vectorised.py` holds it
equal to the Keras model on random inputs.

Layers (the ones the vectorised tasks use; anything else is refused, naming the layer):
InputLayer; Dense on [B, d] inputs; Conv2D (channels last, groups 1, dilation 1; one
convolution per client); MaxPool2D and AveragePooling2D (clients folded into the batch); Flatten; ReLU and Activation; and `tasks.layers`'
StatelessDropout, whose mask for client k is `tf.nn.experimental.stateless_dropout` keyed by
(s[0], s[1] * 64 + j) for the j-th random layer, s client k's step seed: the seed the layer
draws inside `seeds.step_seeds(s)` in the sequential engines (`seeds.next_layer_seed`).
A client's minibatch may be padded to B rows (its last, smaller minibatch): the Philox stream
fills a mask in row-major order, so its first rows are the mask of the unpadded minibatch.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf

from tff_adaptive.core import seeds

# (params of the layer, x, training, step seeds [K, 2], index of the layer's random draw) -> x
_LayerFn = Callable[[tuple, tf.Tensor, bool, tf.Tensor, int], tf.Tensor]
# How the per-client ops run, measured with benchmarks.round_time (10 clients, 2-core CPU):
# a Dense kernel of up to this many entries as one batched matmul for all clients (MLP
# 784-200-200-62: 0.83x the sequential round); a larger one, and every convolution, one
# client at a time inside `tf.map_fn`, whose iterations TF runs in parallel (EMNIST-CR's
# 9216 x 128 kernel: batched 1.47x the sequential round, map_fn 1.08x; a per-client conv2d via
# `tf.vectorized_map` ran at the sequential speed, via `tf.map_fn` 30% faster; a grouped
# convolution has no gradient for its filter on the CPU).
BATCHED_MATMUL_MAX_ENTRIES = 1 << 20


def _per_client(fn: Callable[..., tf.Tensor], dtype: tf.DType, *tensors: tf.Tensor) -> tf.Tensor:
  """fn(t_1[k], ..., t_n[k]) for every client k, stacked (TF runs the clients in parallel)."""
  return tf.map_fn(lambda args: fn(*args), tensors, fn_output_signature=dtype)


class UnsupportedModelError(ValueError):
  """A model (or a layer of it) that has no functional form here."""


@dataclasses.dataclass(frozen=True)
class _Layer:
  name: str
  num_params: int
  fn: _LayerFn
  random: bool = False


def _activation(layer) -> Callable[[tf.Tensor], tf.Tensor]:
  return tf.keras.activations.get(layer.activation)


def _dense(layer) -> _Layer:
  act = _activation(layer)
  batched = layer.kernel.shape.num_elements() <= BATCHED_MATMUL_MAX_ENTRIES

  def fn(params, x, training, step_seeds, draw):
    del training, step_seeds, draw
    if x.shape.rank != 3:
      raise UnsupportedModelError(
        f'layer {layer.name!r}: Dense on inputs of rank {x.shape.rank - 1} per example; '
        'the vectorised engine supports [batch, features]'
      )
    if batched:
      y = tf.linalg.matmul(x, params[0])
    else:
      y = _per_client(tf.linalg.matmul, x.dtype, x, params[0])
    if layer.use_bias:
      y = y + params[1][:, None, :]
    return act(y)

  return _Layer(layer.name, 2 if layer.use_bias else 1, fn)


def _conv2d(layer) -> _Layer:
  if layer.data_format != 'channels_last' or layer.groups != 1:
    raise UnsupportedModelError(
      f'layer {layer.name!r}: Conv2D with data_format={layer.data_format!r}, '
      f'groups={layer.groups}; the vectorised engine supports channels_last, groups 1'
    )
  if tuple(layer.dilation_rate) != (1, 1):
    raise UnsupportedModelError(f'layer {layer.name!r}: Conv2D with dilation; not supported')
  act = _activation(layer)
  strides, padding = tuple(layer.strides), layer.padding.upper()

  def fn(params, x, training, step_seeds, draw):
    del training, step_seeds, draw

    def one_client(x_k, kernel, *bias):
      y = tf.nn.conv2d(x_k, kernel, strides, padding)
      return tf.nn.bias_add(y, bias[0]) if bias else y

    return act(_per_client(one_client, x.dtype, x, *params))

  return _Layer(layer.name, 2 if layer.use_bias else 1, fn)


def _fold_clients(op: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[tf.Tensor], tf.Tensor]:
  """An op on [N, ...] examples applied to [K, B, ...] with the clients folded into N."""

  def apply(x):
    shape = tf.shape(x)
    y = op(tf.reshape(x, tf.concat([[shape[0] * shape[1]], shape[2:]], 0)))
    return tf.reshape(y, tf.concat([shape[:2], tf.shape(y)[1:]], 0))

  return apply


def _pool(layer, pool) -> _Layer:
  if layer.data_format != 'channels_last':
    raise UnsupportedModelError(f'layer {layer.name!r}: pooling must be channels_last')
  op = _fold_clients(lambda x: pool(x, layer.pool_size, layer.strides, layer.padding.upper()))
  return _Layer(layer.name, 0, lambda params, x, training, step_seeds, draw: op(x))


def _flatten(layer) -> _Layer:
  del layer

  def fn(params, x, training, step_seeds, draw):
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([shape[:2], [-1]], 0))

  return _Layer('flatten', 0, fn)


def _elementwise(layer) -> _Layer:
  return _Layer(layer.name, 0, lambda params, x, training, step_seeds, draw: layer(x))


def _stateless_dropout(layer) -> _Layer:
  rate, spatial = layer.rate, layer.spatial

  def fn(params, x, training, step_seeds, draw):
    del params
    if not training or rate == 0.0:
      return x
    layer_seeds = seeds.layer_seed(step_seeds, draw)

    def one_client(x_k, seed):
      shape = tf.shape(x_k)
      noise_shape = tf.stack([shape[0], 1, 1, shape[-1]]) if spatial else None
      return tf.nn.experimental.stateless_dropout(x_k, rate, seed=seed, noise_shape=noise_shape)

    return _per_client(one_client, x.dtype, x, layer_seeds)

  return _Layer(layer.name, 0, fn, random=True)


def _layer(layer) -> _Layer:
  # pylint: disable=g-import-not-at-top
  from tff_adaptive.tasks import layers as task_layers

  keras_layers = tf.keras.layers
  if isinstance(layer, keras_layers.InputLayer):
    return _Layer(layer.name, 0, lambda params, x, training, step_seeds, draw: x)
  builders = [
    (keras_layers.Dense, _dense),
    (keras_layers.Conv2D, _conv2d),
    (keras_layers.MaxPool2D, lambda l: _pool(l, tf.nn.max_pool2d)),
    (keras_layers.AveragePooling2D, lambda l: _pool(l, tf.nn.avg_pool2d)),
    (keras_layers.Flatten, _flatten),
    ((keras_layers.ReLU, keras_layers.Activation), _elementwise),
    (task_layers.StatelessDropout, _stateless_dropout),
  ]
  for kind, build in builders:
    if type(layer) is kind or (isinstance(kind, tuple) and type(layer) in kind):
      return build(layer)
  raise UnsupportedModelError(
    f'layer {layer.name!r} ({type(layer).__name__}) has no vectorised form; supported: Dense, '
    'Conv2D, MaxPool2D, AveragePooling2D, Flatten, ReLU, Activation, StatelessDropout'
  )


@dataclasses.dataclass(frozen=True)
class FunctionalModel:
  """`apply(params, x, training, step_seeds)` of a Keras Sequential model (module docstring)."""

  layers: tuple[_Layer, ...]

  @classmethod
  def from_keras(cls, model: tf.keras.Model) -> 'FunctionalModel':
    """The functional form of `model`; raises UnsupportedModelError naming what is not."""
    if not isinstance(model, tf.keras.Sequential):
      raise UnsupportedModelError(
        f'model {model.name!r} is a {type(model).__name__}; the vectorised engine supports '
        'tf.keras.Sequential models'
      )
    if model.non_trainable_weights:
      raise UnsupportedModelError(
        f'model {model.name!r} has non-trainable weights (e.g. batch normalisation); '
        'the vectorised engine supports models whose weights are all trained'
      )
    layers = tuple(_layer(layer) for layer in model.layers)
    expected = sum(layer.num_params for layer in layers)
    if expected != len(model.trainable_weights):
      raise UnsupportedModelError(
        f'model {model.name!r}: {len(model.trainable_weights)} trainable weights where its '
        f'layers account for {expected}'
      )
    return cls(layers)

  def apply(self, params: Any, x: tf.Tensor, training: bool, step_seeds: tf.Tensor | None):
    """K clients' outputs [K, B, ...] from their weights (tuple of [K, ...]) and x [K, B, ...].

    `step_seeds` ([K, 2] int64, each client's local-step seed) is needed when training through
    a random layer; None otherwise.
    """
    params = tuple(params)
    offset, draw = 0, 0
    for layer in self.layers:
      own = params[offset : offset + layer.num_params]
      offset += layer.num_params
      x = layer.fn(own, x, training, step_seeds, draw)
      draw += int(layer.random)
    return x
