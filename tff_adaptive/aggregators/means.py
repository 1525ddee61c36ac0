"""The weighted means of client updates: FedAvg's, FedNova's and AdaFedAdam's (package docstring)."""

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.aggregators.factories import CERTAINTY_KEY
from tff_adaptive.aggregators.factories import LOSS_RATIO_KEY
from tff_adaptive.aggregators.factories import STEPS_KEY
from tff_adaptive.aggregators.factories import UPDATE_KEY
from tff_adaptive.aggregators.factories import CertaintyWeightedMeanFactory
from tff_adaptive.aggregators.factories import NormalizedMeanFactory
from tff_adaptive.aggregators.factories import certainty_weight
from tff_adaptive.aggregators.update_aggregation import UpdateAggregation
from tff_adaptive.aggregators.update_aggregation import stateless as _stateless
from tff_adaptive.core import tree


def _zeros(specs):
  return tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)


def _mean_fold():
  """zero/accumulate/report of sum_i w_i v_i / sum_i w_i over any nest v."""

  def zero(specs):
    return (_zeros(specs), tf.constant(0.0))

  def accumulate(acc, value, weight):
    total, weight_sum = acc
    weight = tf.cast(weight, tf.float32)
    return tree.add_scaled(total, value, weight), weight_sum + weight

  def report(acc):
    total, weight_sum = acc
    return tree.divide_no_nan(total, weight_sum)

  return zero, accumulate, report


def weighted_mean() -> UpdateAggregation:
  """sum_i w_i u_i / sum_i w_i; TFF face `tff.aggregators.MeanFactory()`."""
  zero, accumulate, report = _mean_fold()
  return _stateless('weighted_mean', tff.aggregators.MeanFactory, zero, accumulate, report)


def normalized_mean() -> UpdateAggregation:
  """FedNova (Wang et al. 2020, eq. 6-7): g = (sum_i w_i a_i / W) (sum_i w_i d_i / W).

  Client value: OrderedDict(update=d_i, a=a_i), d_i = u_i / a_i the update normalised by its
  number of (momentum-weighted) local steps a_i = ||a_i||_1, weight w_i (p_i = w_i / W). The
  result g = tau_eff sum_i p_i d_i is model-shaped. TFF face: `NormalizedMeanFactory()`.
  """
  zero, accumulate, mean = _mean_fold()

  def report(acc):
    means = mean(acc)
    return tree.scale(means[UPDATE_KEY], means[STEPS_KEY])

  return _stateless('normalized_mean', NormalizedMeanFactory, zero, accumulate, report)


def certainty_weighted_mean(alpha: float = 1.0) -> UpdateAggregation:
  """AdaFedAdam's aggregation (Ju et al., Algorithm 2), fairness exponent alpha >= 0.

  Client value: OrderedDict(update=U_k, certainty=C_k, loss_ratio=I_k), weight p_k. Result:
  OrderedDict(update=g, certainty=C) with
      g = sum_k p_k I_k^alpha U_k / sum_k p_k I_k^alpha,  C = the same weighted mean of C_k.
  TFF face: `CertaintyWeightedMeanFactory(alpha)`.
  """
  alpha = CertaintyWeightedMeanFactory(alpha).alpha  # validates
  zero_mean, accumulate_mean, report_mean = _mean_fold()

  def zero(specs):
    return zero_mean(_certainty_part(specs))

  def accumulate(acc, value, weight):
    w = certainty_weight(weight, value[LOSS_RATIO_KEY], alpha)
    return accumulate_mean(acc, _certainty_part(value), w)

  return _stateless(
    f'certainty_weighted_mean(alpha={alpha:g})',
    lambda: CertaintyWeightedMeanFactory(alpha),
    zero,
    accumulate,
    report_mean,
  )


def _certainty_part(value):
  return collections.OrderedDict(
    [(UPDATE_KEY, value[UPDATE_KEY]), (CERTAINTY_KEY, value[CERTAINTY_KEY])]
  )
