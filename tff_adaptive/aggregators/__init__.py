"""How client updates are combined, with one face per engine.

An `UpdateAggregation` is the same arithmetic twice: a `tff.aggregators` factory (what the TFF
engine composes into a LearningProcess, and what a user puts into their own TFF pipeline) and a
decomposable fold `zero / accumulate / report` over the round's clients, which the in-process
engine runs inside its compiled round. Parity tests hold the two faces to the same numbers.

* `weighted_mean()`: g = sum_i w_i u_i / sum_i w_i (0 when every weight is 0), TFF's
  `tff.aggregators.MeanFactory` (FedAvg's example-weighted average when w_i = n_i).
"""

from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_adaptive.core import tree


@dataclasses.dataclass(frozen=True)
class UpdateAggregation:
  """A weighted aggregation of client updates (see the module docstring).

  Attributes:
    name: short name, for logs.
    factory: no-arg callable returning a `tff.aggregators.WeightedAggregationFactory`.
    zero: trainable specs -> the empty accumulator.
    accumulate: (accumulator, update, weight) -> accumulator.
    report: accumulator -> the aggregated update.
  """

  name: str
  factory: Callable[[], tff.aggregators.WeightedAggregationFactory]
  zero: Callable[[Any], Any]
  accumulate: Callable[[Any, Any, tf.Tensor], Any]
  report: Callable[[Any], Any]


def weighted_mean() -> UpdateAggregation:
  """sum_i w_i u_i / sum_i w_i; TFF face `tff.aggregators.MeanFactory()`."""

  def zero(specs):
    return (tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs), tf.constant(0.0))

  def accumulate(acc, update, weight):
    total, weight_sum = acc
    weight = tf.cast(weight, tf.float32)
    return tree.add_scaled(total, update, weight), weight_sum + weight

  def report(acc):
    total, weight_sum = acc
    return tree.divide_no_nan(total, weight_sum)

  return UpdateAggregation('weighted_mean', tff.aggregators.MeanFactory, zero, accumulate, report)
