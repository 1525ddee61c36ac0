"""Uniformly quantised client updates: the weighted mean of b-bit uploads (Suresh et al. 2017).

Suresh, Yu, Kumar, McMahan. "Distributed Mean Estimation with Limited Communication." ICML 2017
(stochastic uniform quantisation). Client i uploads its weighted update v_i = w_i u_i, each
tensor t of it as b-bit integers on the grid of 2^b - 1 steps between its own min and max::

    q(t) = floor(s) + Bernoulli(s - floor(s)),   s = (t - min t) / (max t - min t) (2^b - 1)
    t^ = q(t) / (2^b - 1) (max t - min t) + min t           (E[t^] = t: unbiased)
    g = sum_i v^_i / sum_i w_i

so a tensor of n values costs 32 ceil(n b / 28) + 64 bits instead of 32 n (the integers
bit-packed 28 to an int32, then min and max as float32), plus 32 for w_i. One value tensors are
sent exactly (min = max).

This is TFF's own composition, `tff.aggregators.MeanFactory` over
`tff.aggregators.EncodedSumFactory` with TensorFlow Model Optimization's
`uniform_quantization` encoder (what `tff.learning.compression_aggregator` quantises with, there
above 20,000 values only: here every tensor, --compression_threshold), and the in-process
engine's fold runs the same encoder. One change: the encoder's stochastic rounding draws from an
unseeded generator, so two runs (or the two engines) would round differently. Here the uniforms
are `tf.random.stateless_uniform`, seeded by a hash of the tensor being encoded: the same update
is rounded the same way on either engine and in a rerun, different updates independently.
"""

import collections
import logging
import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_model_optimization.python.core.internal import tensor_encoding as te
from tensorflow_model_optimization.python.core.internal.tensor_encoding.core import encoding_stage
from tensorflow_model_optimization.python.core.internal.tensor_encoding.stages import stages_impl

from tff_adaptive.aggregators.update_aggregation import UpdateAggregation
from tff_adaptive.core import validation


class _BitpackingNotice(logging.Filter):
  """Drops TF Model Optimization's note, logged at every trace of its bit packing, that it may
  allocate extra memory (b/161433177): nothing a user can act on, and it would reach stderr."""

  def filter(self, record: logging.LogRecord) -> bool:
    return 'b/161433177' not in record.getMessage()


logging.getLogger().addFilter(_BitpackingNotice())

_PACKED_BITS = 28  # BitpackingEncodingStage: 28 value bits in each int32 it sends
_BITS_KEY = 'compression_bits_per_client'


# The stage as written, under the `tf_style_encoding_stage` decorator (which subclasses it).
_UniformQuantizationStage = stages_impl.UniformQuantizationEncodingStage.__bases__[0]


@encoding_stage.tf_style_encoding_stage
class _SeededUniformQuantizationStage(_UniformQuantizationStage):
  """TF Model Optimization's uniform quantisation, its random rounding seeded by the input."""

  def encode(self, x, encode_params):
    min_x, max_x = tf.reduce_min(x), tf.reduce_max(x)
    max_value = tf.cast(encode_params[self.MAX_INT_VALUE_PARAMS_KEY], x.dtype)
    seed = tf.stack(
      [tf.strings.to_hash_bucket_fast(tf.io.serialize_tensor(x), 2**62), tf.constant(22, tf.int64)]
    )
    scaled = tf.compat.v1.div_no_nan(x - min_x, max_x - min_x) * max_value
    floored = tf.floor(scaled)
    uniform = tf.random.stateless_uniform(tf.shape(scaled), seed=seed, dtype=x.dtype)
    quantized = floored + tf.cast(uniform < scaled - floored, x.dtype)
    return collections.OrderedDict(
      [
        (self.ENCODED_VALUES_KEY, quantized),
        (self.MIN_MAX_VALUES_KEY, tf.stack([min_x, max_x])),
      ]
    )


def _quantization_encoder(bits: int) -> te.core.Encoder:
  """TF Model Optimization's `uniform_quantization(bits)` with the seeded rounding stage."""
  return (
    te.core.EncoderComposer(stages_impl.BitpackingEncodingStage(bits))
    .add_parent(
      _SeededUniformQuantizationStage(bits),
      stages_impl.UniformQuantizationEncodingStage.ENCODED_VALUES_KEY,
    )
    .add_parent(
      stages_impl.FlattenEncodingStage(), stages_impl.FlattenEncodingStage.ENCODED_VALUES_KEY
    )
    .make()
  )


def _quantized(spec: tf.TensorSpec, bits: int, threshold: int) -> bool:
  return spec.shape.num_elements() > max(threshold, 1)


def bits_per_client(specs, bits: int, threshold: int = 0) -> int:
  """Bits one client uploads: its quantised tensors, the others as float32, and its weight."""
  total = 32  # w_i
  for spec in tf.nest.flatten(specs):
    n = spec.shape.num_elements()
    total += (
      32 * math.ceil(n * bits / _PACKED_BITS) + 64 if _quantized(spec, bits, threshold) else 32 * n
    )
  return total


def quantized_mean(bits: int = 8, threshold: int = 0) -> UpdateAggregation:
  """The weighted mean of b-bit quantised updates as an `UpdateAggregation` (module docstring).

  Args:
    bits: b, 1..16.
    threshold: tensors of at most this many values (and one-value tensors) are sent as float32.

  Returns:
    An `UpdateAggregation`: its TFF face is `tff.aggregators.MeanFactory` over
    `tff.aggregators.EncodedSumFactory` (the seeded encoder), with the measurement
    `compression_bits_per_client` (`bits_per_client` of the update) added by
    `tff.aggregators.add_measurements`; its fold encodes and decodes each client's w_i u_i with
    the same encoder. Pass it to an algorithm builder: `build_fedopt(..., aggregation=...)`.
  """
  if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 16:
    raise ValueError(f'bits={bits!r} is invalid; expected an integer in [1, 16]')
  validation.check_int('threshold', threshold, 0)

  def encoder_fn(spec):
    if _quantized(spec, bits, threshold):
      return te.encoders.as_gather_encoder(_quantization_encoder(bits), spec)
    return te.encoders.as_gather_encoder(te.encoders.identity(), spec)

  def factory():
    def server_measurements(result):
      specs = tff.types.type_to_tf_tensor_specs(result.type_signature.member)
      count = np.int64(bits_per_client(specs, bits, threshold))
      return collections.OrderedDict([(_BITS_KEY, tff.federated_value(count, tff.SERVER))])

    return tff.aggregators.add_measurements(
      tff.aggregators.MeanFactory(tff.aggregators.EncodedSumFactory(encoder_fn)),
      server_measurement_fn=server_measurements,
    )

  def zero(specs, state):
    del state
    zeros = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
    return (zeros, tf.constant(0.0))

  def accumulate(acc, value, weight):
    total, weight_sum = acc
    weight = tf.cast(weight, tf.float32)

    def roundtrip(t):
      spec = tf.TensorSpec(t.shape, t.dtype)
      if not _quantized(spec, bits, threshold):
        return t
      encoder = te.encoders.as_simple_encoder(_quantization_encoder(bits), spec)
      encoded, _ = encoder.encode(t, encoder.initial_state())
      return encoder.decode(encoded)

    sent = tf.nest.map_structure(lambda t: roundtrip(t * weight), value)
    return tf.nest.map_structure(tf.add, total, sent), weight_sum + weight

  def report(acc, state):
    total, weight_sum = acc
    specs = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), total)
    mean = tf.nest.map_structure(lambda t: tf.math.divide_no_nan(t, weight_sum), total)
    measurements = collections.OrderedDict(
      [(_BITS_KEY, tf.constant(bits_per_client(specs, bits, threshold), tf.int64))]
    )
    return mean, state, measurements

  return UpdateAggregation(
    f'quantized_mean(bits={bits})', factory, zero, accumulate, report, compressed=True
  )
