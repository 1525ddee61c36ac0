"""Engines: how an `Algorithm`'s rounds are run.

* `tff` (`TffEngine`, `build_learning_process`): a `tff.learning.templates.LearningProcess` on
  TFF's runtime (the default; usable in any TFF pipeline);
* `inprocess` (`InProcessEngine`): one compiled TF function per round in this process, CPU or
  GPU, optionally with XLA-compiled local steps.
"""

from collections.abc import Callable
import dataclasses

from tff_adaptive import registry
from tff_adaptive.engines.base import Engine
from tff_adaptive.engines.base import RoundClient
from tff_adaptive.engines.base import RoundResult
from tff_adaptive.engines.inprocess import InProcessEngine
from tff_adaptive.engines.tff_engine import BATCHED
from tff_adaptive.engines.tff_engine import SINGLE_ELEMENT
from tff_adaptive.engines.tff_engine import TffEngine
from tff_adaptive.engines.tff_engine import batched_client_seed
from tff_adaptive.engines.tff_engine import build_client_work
from tff_adaptive.engines.tff_engine import build_learning_process


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


ENGINES: registry.Registry[Callable[..., Engine]] = registry.Registry(
  'engine',
  {
    'tff': lambda algorithm, options: TffEngine(algorithm, options.clients_per_round),
    'inprocess': lambda algorithm, options: InProcessEngine(
      algorithm, device=options.device, jit_compile=options.jit_compile
    ),
  },
)


def build_engine(name: str, algorithm, options: EngineOptions = EngineOptions()) -> Engine:
  """The engine `name` running `algorithm`; unknown names list the valid ones."""
  return ENGINES[name](algorithm, options)


__all__ = [
  'ENGINES',
  'Engine',
  'EngineOptions',
  'InProcessEngine',
  'RoundClient',
  'RoundResult',
  'TffEngine',
  'BATCHED',
  'SINGLE_ELEMENT',
  'batched_client_seed',
  'build_client_work',
  'build_engine',
  'build_learning_process',
]
