"""The engines as entries that describe themselves: the registry `ENGINES`, without TensorFlow.

One `EngineEntry` per engine: its builder (a `registry.Lazy` reference, imported on first
build), the options it reads (`EngineOptions`, whose fields declare their trainer flags), its
capabilities (TFF workers, secure aggregation, grid cells) and its check of an algorithm. The
trainer checks --engine and refuses an option another engine reads from these entries, before it
imports TensorFlow and TFF.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

from tff_adaptive import registry
from tff_adaptive import settings
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.optimizers import config as optimizer_config

_SECTION = 'Engine and workers'  # the --help section of the engines' flags
FUSED_LOOP_MODES = ('auto', 'on', 'off')  # --fused_loop (`fused_choice`)


@dataclasses.dataclass(frozen=True)
class EngineOptions:
  """How to run rounds.

  Attributes:
    clients_per_round: k, for engines that gather per-client state at a fixed size.
    device: in-process and vectorised engines: TF device name, None = TF's placement.
    jit_compile: in-process engine: compile each local step with XLA.
    chunk_size: vectorised engine: clients trained at a time (None: all of the round's).
    fused_loop: inprocess and vectorised engines: 'on' runs a round's local steps, every
      client's one after another, as one XLA computation (`fused_loop`), 'off' does not,
      'auto' where it was measured faster (`fused_choice`).
  """

  clients_per_round: int | None = None
  device: str | None = settings.setting(
    None,
    'device',
    "inprocess and vectorised engines: TF device, e.g. 'CPU:0' or 'GPU:0' (default: TF's choice).",
    section=_SECTION,
  )
  jit_compile: bool = settings.setting(
    False, 'xla', 'inprocess engine: compile every local step with XLA.', section=_SECTION
  )
  chunk_size: int | None = settings.setting(
    None,
    'clients_per_chunk',
    "vectorised engine: train the round's clients this many at a time, grouped by their number "
    'of local steps (for clients of very unequal sizes; default: all at once).',
    section=_SECTION,
    check=settings.at_least(1),
  )
  fused_loop: str = settings.setting(
    'auto',
    'fused_loop',
    "inprocess and vectorised engines: run a round's local steps (every client's, one after "
    "another) as one XLA computation: 'on', 'off', or 'auto' (on where measured faster: models "
    'without convolutions on the CPU; docs/engines_and_workers.md). Valid: {choices}.',
    section=_SECTION,
    choices=FUSED_LOOP_MODES,
  )


@dataclasses.dataclass(frozen=True)
class EngineEntry:
  """A registered engine: how it is built and what it runs.

  Attributes:
    build: (algorithm, EngineOptions) -> `engines.Engine` (for 'grid_cells', the cells'
      algorithms).
    summary: what it is, for --engine's help; '' for an engine the trainer reaches otherwise.
    reads: the `EngineOptions` fields it reads besides clients_per_round; the trainer refuses
      their flags with another engine.
    runs_workers: it runs on TFF workers (--workers, --local_workers).
    secure_aggregation: it computes TFF's secure-sum intrinsics (distributed DP).
    check: (algorithm) -> None, raising a one-line ValueError if it cannot run the algorithm
      (its client optimizer or model), before anything is built; None: it runs every one.
    refusal: (algorithm name, client optimizer name) -> why it cannot run them, from names alone
      (no TensorFlow: the trainer's flag check); None: it runs every one.
    cells: the engine that trains grid cells side by side with this one's (--cells), if any.
  """

  build: Callable[..., Any]
  summary: str = ''
  reads: tuple[str, ...] = ()
  runs_workers: bool = False
  secure_aggregation: bool = False
  check: Callable[[Any], None] | None = None
  refusal: Callable[[str, str], str | None] | None = None
  cells: str | None = None


DEFAULT_ENGINE = 'tff'  # --engine's default; experiment names name every other engine


def vectorised_refusal(algorithm: str, client_optimizer: str) -> str | None:
  """Why the vectorised engine cannot run this algorithm / client optimizer; None if it can:
  every registered algorithm runs (one that writes its own `client_update` is refused by the
  engine's check), and every client optimizer with a stacked form (`ClientOptimizerEntry`)."""
  if algorithm not in algorithm_config.ALGORITHMS:
    return (
      f'algorithm {algorithm!r} is not batched yet (supported: '
      f'{", ".join(algorithm_config.ALGORITHMS)}); use --engine=inprocess'
    )
  entries = optimizer_config.CLIENT_OPTIMIZERS
  if client_optimizer not in entries or entries[client_optimizer].stacked is None:
    supported = ', '.join(n for n, e in entries.items() if e.stacked is not None)
    return (
      f'client optimizer {client_optimizer!r} is not batched yet (supported: {supported}); '
      'use --engine=inprocess'
    )
  return None


def _lazy(target: str) -> registry.Lazy:
  return registry.Lazy(f'tff_adaptive.engines.{target}')


_TFF_ENGINE = _lazy('tff_engine:TffEngine')
_INPROCESS_ENGINE = _lazy('fused_choice:inprocess_engine')
_VECTORISED_ENGINE = _lazy('fused_choice:vectorised_engine')
_GRID_CELLS_ENGINE = _lazy('grid_cells:GridCellsEngine')
# name -> its entry.
ENGINES: registry.Registry[EngineEntry] = registry.Registry(
  'engine',
  {
    'tff': EngineEntry(
      lambda algorithm, options: _TFF_ENGINE(algorithm, options.clients_per_round),
      "a TFF LearningProcess on TFF's runtime",
      runs_workers=True,
      secure_aggregation=True,
    ),
    'inprocess': EngineEntry(
      lambda algorithm, options: _INPROCESS_ENGINE(algorithm, options),
      'one compiled TF function per round in this process; CPU or GPU',
      reads=('device', 'jit_compile', 'fused_loop'),
    ),
    'vectorised': EngineEntry(
      lambda algorithm, options: _VECTORISED_ENGINE(algorithm, options),
      "as inprocess, with the round's clients trained side by side as one batched computation; "
      'every algorithm',
      reads=('device', 'chunk_size', 'fused_loop'),
      check=_lazy('vectorised:check_supported'),
      refusal=vectorised_refusal,
      cells='grid_cells',
    ),
    # `algorithm`: the cells' algorithms (a sequence), run side by side (--cells).
    'grid_cells': EngineEntry(
      lambda algorithms, options: _GRID_CELLS_ENGINE(algorithms, device=options.device),
      reads=('device',),
      check=_lazy('grid_cells:check_cells'),
    ),
  },
)


def refusal(name: str, algorithm: str, client_optimizer: str) -> str | None:
  """Why engine `name` cannot run this algorithm and client optimizer (no TensorFlow); None if
  it can, as far as their names tell (`check_engine` checks the built algorithm)."""
  entry = ENGINES[name]
  return None if entry.refusal is None else entry.refusal(algorithm, client_optimizer)


def check_engine(name: str, algorithm) -> None:
  """Raises ValueError (one line) if engine `name` cannot run `algorithm` (its algorithm,
  client optimizer or model), before anything is built or written."""
  entry = ENGINES[name]
  if entry.check is not None:
    entry.check(algorithm)


def build_engine(name: str, algorithm, options: EngineOptions = EngineOptions()):
  """The engine `name` (an `engines.Engine`) running `algorithm`; unknown names list the valid
  ones."""
  return ENGINES[name].build(algorithm, options)
