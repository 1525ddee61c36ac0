"""The engines' names and options: the registry `ENGINES`, without TensorFlow.

Its builders are `registry.Lazy` references to `tff_engine.TffEngine` and
`inprocess.InProcessEngine`, imported on first build, so the trainer can check --engine before
it imports TensorFlow and TFF.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

from tff_adaptive import registry


@dataclasses.dataclass(frozen=True)
class EngineOptions:
  """How to run rounds.

  Attributes:
    clients_per_round: k, for engines that gather per-client state at a fixed size.
    device: in-process and vectorised engines: TF device name, None = TF's placement.
    jit_compile: in-process engine: compile each local step with XLA.
    chunk_size: vectorised engine: clients trained at a time (None: all of the round's).
  """

  clients_per_round: int | None = None
  device: str | None = None
  jit_compile: bool = False
  chunk_size: int | None = None


# What engine "vectorised" runs (`engines.vectorised`): the algorithms whose client work is
# `Algorithm.client_update`'s parts (full passes, transformed gradients, epoch means, client
# result): every registered one; and the client optimizers with a stacked form
# (`engines.stacked_steps`).
VECTORISED_ALGORITHMS = (
  'fedopt',
  'fedprox',
  'fednova',
  'qfedavg',
  'adafedadam',
  'scaffold',
  'fedpa',
)
VECTORISED_CLIENT_OPTIMIZERS = ('sgd', 'sgdm', 'adam', 'adagrad', 'sps', 'delta_sgd')


def vectorised_refusal(algorithm: str, client_optimizer: str) -> str | None:
  """Why engine "vectorised" cannot run this algorithm / client optimizer; None if it can."""
  if algorithm not in VECTORISED_ALGORITHMS:
    return (
      f'algorithm {algorithm!r} is not batched yet (supported: '
      f'{", ".join(VECTORISED_ALGORITHMS)}); use --engine=inprocess'
    )
  if client_optimizer not in VECTORISED_CLIENT_OPTIMIZERS:
    return (
      f'client optimizer {client_optimizer!r} is not batched yet (supported: '
      f'{", ".join(VECTORISED_CLIENT_OPTIMIZERS)}); use --engine=inprocess'
    )
  return None


_TFF_ENGINE = registry.Lazy('tff_adaptive.engines.tff_engine:TffEngine')
_INPROCESS_ENGINE = registry.Lazy('tff_adaptive.engines.inprocess:InProcessEngine')
_VECTORISED_ENGINE = registry.Lazy('tff_adaptive.engines.vectorised:VectorisedEngine')
_GRID_CELLS_ENGINE = registry.Lazy('tff_adaptive.engines.grid_cells:GridCellsEngine')
# name -> (algorithm, EngineOptions) -> `engines.Engine`.
ENGINES: registry.Registry[Callable[..., Any]] = registry.Registry(
  'engine',
  {
    'tff': lambda algorithm, options: _TFF_ENGINE(algorithm, options.clients_per_round),
    'inprocess': lambda algorithm, options: _INPROCESS_ENGINE(
      algorithm, device=options.device, jit_compile=options.jit_compile
    ),
    'vectorised': lambda algorithm, options: _VECTORISED_ENGINE(
      algorithm, device=options.device, chunk_size=options.chunk_size
    ),
    # `algorithm`: the cells' algorithms (a sequence), run side by side.
    'grid_cells': lambda algorithms, options: _GRID_CELLS_ENGINE(algorithms, device=options.device),
  },
)


_VECTORISED_CHECK = registry.Lazy('tff_adaptive.engines.vectorised:check_supported')


def check_engine(name: str, algorithm) -> None:
  """Raises ValueError (one line) if engine `name` cannot run `algorithm` (its algorithm,
  client optimizer or model), before anything is built or written."""
  if name == 'vectorised':
    _VECTORISED_CHECK(algorithm)


def build_engine(name: str, algorithm, options: EngineOptions = EngineOptions()):
  """The engine `name` (an `engines.Engine`) running `algorithm`; unknown names list the valid
  ones."""
  return ENGINES[name](algorithm, options)
