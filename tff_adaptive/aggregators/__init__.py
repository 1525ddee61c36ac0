"""How client updates are combined, with one face per engine.

An `UpdateAggregation` is the same arithmetic twice: a `tff.aggregators` factory (what the TFF
engine composes into a LearningProcess, and what a user puts into their own TFF pipeline) and a
decomposable fold `zero / accumulate / report` over the round's clients, which the in-process
engine runs inside its compiled round. Parity tests hold the two faces to the same numbers.
A client's value is its `ClientOutput.update`: the model-shaped u_i for most algorithms, or a
larger nest (FedNova's (d_i, a_i), AdaFedAdam's (U_k, C_k, I_k)) that the aggregation reduces to
what the server step reads.

* `weighted_mean()`: g = sum_i w_i u_i / sum_i w_i (0 when every weight is 0), TFF's
  `tff.aggregators.MeanFactory` (FedAvg's example-weighted average when w_i = n_i);
* `normalized_mean()`: FedNova's g = tau_eff sum_i p_i d_i, tau_eff = sum_i p_i a_i
  (`NormalizedMeanFactory`);
* `certainty_weighted_mean(alpha)`: AdaFedAdam's (g, C) with weights p_k I_k^alpha
  (`CertaintyWeightedMeanFactory`);
* `dp_mean(...)` (module `dp`): user-level differential privacy, each client's update clipped
  to L2 norm C, summed, N(0, (z C)^2) added, divided by the clients per round m: TFF's
  `tff.aggregators.DifferentiallyPrivateFactory` over a TensorFlow Privacy query whose noise is
  a function of (seed, round). The weights are not read (every client counts once).

The fold may keep state across rounds (the DP query's clip and noise counter): `initialize(specs)`
is the state before round 0, `zero(specs, state)` the round's empty accumulator, and
`report(acc, state)` returns (result, new state, measurements), the measurements structured as
the TFF face's. The in-process engine carries the state in its server state, as TFF's
LearningProcess carries the factory's process state.
"""

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


__all__ = [
  'CERTAINTY_KEY',
  'CertaintyWeightedMeanFactory',
  'LOSS_RATIO_KEY',
  'NormalizedMeanFactory',
  'STEPS_KEY',
  'UPDATE_KEY',
  'UpdateAggregation',
  'certainty_weight',
  'certainty_weighted_mean',
  'dp_mean',
  'normalized_mean',
  'weighted_mean',
]


def __getattr__(name):
  # `dp_mean` lives in `dp`, which builds on UpdateAggregation above; loaded on first use.
  if name == 'dp_mean':
    from tff_adaptive.aggregators.dp import dp_mean  # pylint: disable=g-import-not-at-top

    return dp_mean
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
