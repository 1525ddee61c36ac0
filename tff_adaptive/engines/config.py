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
    device: in-process engine: TF device name, None = TF's placement.
    jit_compile: in-process engine: compile each local step with XLA.
  """

  clients_per_round: int | None = None
  device: str | None = None
  jit_compile: bool = False


_TFF_ENGINE = registry.Lazy('tff_adaptive.engines.tff_engine:TffEngine')
_INPROCESS_ENGINE = registry.Lazy('tff_adaptive.engines.inprocess:InProcessEngine')
# name -> (algorithm, EngineOptions) -> `engines.Engine`.
ENGINES: registry.Registry[Callable[..., Any]] = registry.Registry(
  'engine',
  {
    'tff': lambda algorithm, options: _TFF_ENGINE(algorithm, options.clients_per_round),
    'inprocess': lambda algorithm, options: _INPROCESS_ENGINE(
      algorithm, device=options.device, jit_compile=options.jit_compile
    ),
  },
)


def build_engine(name: str, algorithm, options: EngineOptions = EngineOptions()):
  """The engine `name` (an `engines.Engine`) running `algorithm`; unknown names list the valid
  ones."""
  return ENGINES[name](algorithm, options)
