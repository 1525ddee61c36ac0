"""The TFF faces of the aggregations that reduce a client value larger than the model.

Both wrap TFF's own `tff.aggregators.MeanFactory` (its weighted mean, zero-weight handling and
measurements) and only change what goes in (the weight) or what comes out (a product), so they
compose like any `tff.aggregators.WeightedAggregationFactory`, e.g. in
`tff.learning.templates.compose_learning_process`.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

UPDATE_KEY = 'update'
CERTAINTY_KEY = 'certainty'
LOSS_RATIO_KEY = 'loss_ratio'
STEPS_KEY = 'a'


def certainty_weight(weight: tf.Tensor, loss_ratio: tf.Tensor, alpha: float) -> tf.Tensor:
  """p_k I_k^alpha (Ju et al. Algorithm 2); p_k itself when alpha = 0."""
  weight = tf.cast(weight, tf.float32)
  if alpha == 0:
    return weight
  return weight * tf.pow(tf.cast(loss_ratio, tf.float32), alpha)


def _member(struct_type, name, factory: str, expected: str):
  """struct_type[name], or a one-line TypeError saying what `factory` aggregates."""
  try:
    return struct_type[name]
  except (AttributeError, IndexError, KeyError, TypeError, ValueError):
    raise TypeError(
      f'{factory} aggregates a client value {expected}, not {struct_type}; a model-shaped update '
      '(what tff.learning.algorithms.build_weighted_fed_avg sends) takes tff.aggregators.MeanFactory'
    ) from None


_CERTAINTY_VALUE = "OrderedDict(update=U_k, certainty=C_k, loss_ratio=I_k) (AdaFedAdam's clients)"
_NORMALIZED_VALUE = "OrderedDict(update=d_i, a=a_i) (FedNova's clients)"


class CertaintyWeightedMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """AdaFedAdam's "certainty-weighted mean" (Ju et al., Algorithm 2), fairness exponent alpha.

  Client value OrderedDict(update=U_k, certainty=C_k, loss_ratio=I_k) with weight p_k ->
  OrderedDict(update=g, certainty=C):

      g = sum_k p_k I_k^alpha U_k / sum_k p_k I_k^alpha,
      C = sum_k p_k I_k^alpha C_k / sum_k p_k I_k^alpha.

  I_k = F_k(x_t) / F_k(x_0) is the client's loss relative to its loss at the initial model:
  alpha > 0 up-weights clients whose loss has fallen least (alpha-fairness); alpha = 0 is the
  p-weighted mean. The weighted mean is TFF's `MeanFactory` (0 when every weight is 0), whose
  measurements are passed through.
  """

  def __init__(self, alpha: float = 1.0):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha < np.inf:
      raise ValueError(f'fairness alpha must be a finite number >= 0, got {alpha!r}')
    self.alpha = float(alpha)

  def create(self, value_type, weight_type):
    update_type, certainty_type, ratio_type = (
      _member(value_type, key, 'CertaintyWeightedMeanFactory', _CERTAINTY_VALUE)
      for key in (UPDATE_KEY, CERTAINTY_KEY, LOSS_RATIO_KEY)
    )
    mean_type = tff.StructWithPythonType(
      [(UPDATE_KEY, update_type), (CERTAINTY_KEY, certainty_type)], collections.OrderedDict
    )
    inner = tff.aggregators.MeanFactory().create(mean_type, tff.TensorType(np.float32))
    alpha = self.alpha

    @tff.tensorflow.computation(value_type, weight_type)
    def split(value, weight):
      mean_value = collections.OrderedDict(
        [(UPDATE_KEY, value[UPDATE_KEY]), (CERTAINTY_KEY, value[CERTAINTY_KEY])]
      )
      return mean_value, certainty_weight(weight, value[LOSS_RATIO_KEY], alpha)

    del ratio_type

    @tff.federated_computation(
      inner.initialize.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      mean_value, mean_weight = tff.federated_map(split, (value, weight))
      return inner.next(state, mean_value, mean_weight)

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


class NormalizedMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """FedNova's normalized averaging (Wang et al. 2020, "Tackling the Objective Inconsistency").

  Client value OrderedDict(update=d_i, a=a_i) with weight w_i -> g = tau_eff sum_i p_i d_i,
  p_i = w_i / sum_j w_j, tau_eff = sum_i p_i a_i (model-shaped, for the server optimizer).
  d_i = (x_t - x_i) / a_i is the client's update per (momentum-weighted) local step.
  """

  def create(self, value_type, weight_type):
    update_type, _ = (
      _member(value_type, key, 'NormalizedMeanFactory', _NORMALIZED_VALUE)
      for key in (UPDATE_KEY, STEPS_KEY)
    )
    inner = tff.aggregators.MeanFactory().create(value_type, weight_type)

    @tff.tensorflow.computation(inner.next.type_signature.result.result.member)
    def scale(means):
      a = means[STEPS_KEY]
      return tf.nest.map_structure(lambda d: tf.cast(a, d.dtype) * d, means[UPDATE_KEY])

    del update_type

    @tff.federated_computation(
      inner.initialize.type_signature.result,
      tff.FederatedType(value_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS),
    )
    def next_fn(state, value, weight):
      out = inner.next(state, value, weight)
      return tff.templates.MeasuredProcessOutput(
        out.state, tff.federated_map(scale, out.result), out.measurements
      )

    return tff.templates.AggregationProcess(inner.initialize, next_fn)
