"""`UpdateAggregation`: an aggregation of client updates as a TFF factory and as a fold.

See the package docstring (`tff_adaptive.aggregators`) for the protocol of the fold.
"""

import collections
from collections.abc import Callable
import dataclasses
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff


@dataclasses.dataclass(frozen=True)
class UpdateAggregation:
  """An aggregation of client updates with a TFF face and a fold (see the module docstring).

  Attributes:
    name: short name, for logs.
    factory: no-arg callable returning a `tff.aggregators.WeightedAggregationFactory` (an
      unweighted one wrapped by `tff.aggregators.as_weighted_aggregator`, as TFF's own
      `build_unweighted_fed_avg` does).
    zero: (client update specs, state) -> the round's empty accumulator.
    accumulate: (accumulator, update, weight) -> accumulator.
    report: (accumulator, state) -> (aggregated update, new state, measurements).
    initialize: the model's trainable specs -> the fold's state before round 0 (() when
      stateless).
    privacy: the noise of a DP release of the clients' updates (`core.dp_noise.DeliveredNoise`:
      what the queries add, and what the accountant reads); None when not DP.
    compressed: whether the clients' updates are compressed (the algorithms whose aggregation
      is their own, or that upload more than the update, refuse such an aggregation).
    tff_only: why the aggregation has no fold ('' when it has one): it runs on engine 'tff'
      only, and the in-process engines refuse it with this reason.
  """

  name: str
  factory: Callable[[], tff.aggregators.WeightedAggregationFactory]
  zero: Callable[[Any, Any], Any]
  accumulate: Callable[[Any, Any, tf.Tensor], Any]
  report: Callable[[Any, Any], tuple[Any, Any, Any]]
  initialize: Callable[[Any], Any] = lambda specs: ()
  privacy: Any = None
  compressed: bool = False
  tff_only: str = ''

  @property
  def differentially_private(self) -> bool:
    """Whether the result is a DP release of the clients' updates (the algorithms that cannot be
    privatised refuse such an aggregation)."""
    return self.privacy is not None


def stateless(name, factory, zero, accumulate, report) -> UpdateAggregation:
  """An UpdateAggregation from a fold without state or measurements."""
  return UpdateAggregation(
    name,
    factory,
    lambda specs, state: zero(specs),
    accumulate,
    lambda acc, state: (report(acc), state, collections.OrderedDict()),
  )
