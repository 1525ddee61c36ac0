"""The round protocol between the training loop and an engine.

The loop (`tff_adaptive.loop.training_loop`) knows nothing of TFF metric paths or state
layouts: it gives an engine the round's clients as `RoundClient`s and gets back a `RoundResult`
whose metrics are flat float names (`train_<metric>`, `train_update_non_finite`,
`client_<stat>_<mean|min|max>`) and, for stateful algorithms, each client's new state.
"""

import abc
import collections
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import NamedTuple

import numpy as np
import tensorflow_federated as tff

from tff_adaptive.algorithms import base as algorithm_base

ClientState = list[np.ndarray]  # the flattened leaves of a client's state nest


class RoundClient(NamedTuple):
  """One sampled client.

  Attributes:
    client_id: its id (the key of its stored state).
    features: OrderedDict of its examples (leading dimension n).
    seed: int64[2], its seed for this round (`core.seeds.client_seed`).
    state: its stored state (stateful algorithms), None if it has none yet.
  """

  client_id: str
  features: collections.OrderedDict
  seed: np.ndarray
  state: ClientState | None = None


class RoundResult(NamedTuple):
  """What a round returns to the loop.

  Attributes:
    state: the engine's new server state (opaque to the loop; checkpointed as is).
    metrics: OrderedDict of floats: train_<metric> (the model's training metrics summed over
      clients and finalized), train_update_non_finite (1.0 when the aggregated update had a
      non-finite value and the server step was skipped), client_<stat>_<mean|min|max>.
    client_states: stateful algorithms: each client's new state, in the order of the clients
      given; None otherwise.
    cells: engines that run several runs at once (`grid_cells`): each run's own `RoundResult`,
      in the order of their states; None otherwise (then `metrics` is the run's).
  """

  state: Any
  metrics: collections.OrderedDict
  client_states: list[ClientState] | None = None
  cells: tuple['RoundResult', ...] | None = None


class Engine(abc.ABC):
  """Runs an `Algorithm`'s rounds. Implementations, by name in `config.ENGINES`: `tff`
  (`tff_engine.TffEngine`), `inprocess` (`inprocess.InProcessEngine`), `vectorised`
  (`vectorised.VectorisedEngine`) and `grid_cells` (`grid_cells.GridCellsEngine`, K runs at once:
  its state holds theirs, its `RoundResult.cells` their results)."""

  def __init__(self, algorithm: algorithm_base.Algorithm):
    self.algorithm = algorithm

  @abc.abstractmethod
  def initialize(self, initial_weights: tff.learning.models.ModelWeights) -> Any:
    """The server state at round 0, with the model set to `initial_weights`."""

  @abc.abstractmethod
  def next(self, state: Any, clients: Sequence[RoundClient]) -> RoundResult:
    """Runs one round on `clients`."""

  @abc.abstractmethod
  def model_weights(self, state: Any) -> tff.learning.models.ModelWeights:
    """The global model of `state`, as NumPy arrays."""


# The aggregator's measurement groups -> the prefix of their metric names (TFF's
# DifferentiallyPrivateFactory reports its query's metrics, e.g. the adaptive clip, as
# dp_query_metrics/clip: `dp_clip`; UnweightedMeanFactory those of its sums as mean_value and
# mean_count, which only `aggregators.ddp_mean`'s DP sum and secure count fill: `ddp_scale_factor`).
_MEASUREMENT_PREFIXES = {'dp_query_metrics': 'dp', 'mean_value': 'ddp', 'mean_count': 'ddp_count'}


def flat_metrics(
  train: Any, client_stats: Any, update_non_finite: Any, aggregator: Any = ()
) -> collections.OrderedDict:
  """The loop's flat metric names from the groups every engine computes.

  `aggregator`: the aggregation's measurements (a nest of scalars, TFF's structure); each leaf
  becomes `<group prefix>_<name>` (e.g. `dp_clip`), nothing for an aggregation without any.
  """
  row = collections.OrderedDict((f'train_{k}', float(v)) for k, v in train.items())
  row['train_update_non_finite'] = float(update_non_finite)
  row.update((f'client_{k}', float(v)) for k, v in client_stats.items())
  row.update(_flat_measurements(aggregator))
  return row


def _flat_measurements(measurements: Any, path: tuple[str, ...] = ()) -> list[tuple[str, float]]:
  """[(name, value)] of a nest's leaves, the name the path joined by '_' (module constants)."""
  if isinstance(measurements, Mapping):
    items = list(measurements.items())
  elif hasattr(measurements, '_asdict'):
    items = list(measurements._asdict().items())
  elif isinstance(measurements, (list, tuple)):
    items = list(enumerate(measurements))
  else:
    first, *rest = path or ('aggregator',)
    return [('_'.join([_MEASUREMENT_PREFIXES.get(first, first), *rest]), float(measurements))]
  out = []
  for key, value in items:
    out += _flat_measurements(value, (*path, str(key)))
  return out
