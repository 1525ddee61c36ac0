"""Engines: how an `Algorithm`'s rounds are run.

* `tff` (`TffEngine`, `build_learning_process`): a `tff.learning.templates.LearningProcess` on
  TFF's runtime (the default; usable in any TFF pipeline);
* `inprocess` (`InProcessEngine`): one compiled TF function per round in this process, CPU or
  GPU, optionally with XLA-compiled local steps;
* `vectorised` (`vectorised.VectorisedEngine`): a round's clients side by side, one batched
  computation; `GridCellsEngine` (`grid_cells`): K runs that differ only in their learning
  rates and server optimizer side by side (`loop.training_loop.run_cells` keeps their runs);
* `config` (no TensorFlow): the registry `ENGINES`, `EngineOptions`, `build_engine`.

The names below are loaded on first use (`registry.lazy_exports`): importing this package, or its
`config`, imports no TensorFlow.
"""

from tff_adaptive import registry

__all__ = [
  'ENGINES',
  'Engine',
  'EngineOptions',
  'GridCellsEngine',
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

__getattr__, __dir__ = registry.lazy_exports(
  __name__,
  {
    **dict.fromkeys(('ENGINES', 'EngineOptions', 'build_engine'), 'config'),
    **dict.fromkeys(('Engine', 'RoundClient', 'RoundResult'), 'base'),
    'InProcessEngine': 'inprocess',
    'GridCellsEngine': 'grid_cells',
    **dict.fromkeys(
      (
        'BATCHED',
        'SINGLE_ELEMENT',
        'TffEngine',
        'batched_client_seed',
        'build_client_work',
        'build_learning_process',
      ),
      'tff_engine',
    ),
  },
)
