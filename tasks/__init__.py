"""Tasks: federated data + model + loss + metrics + the paper's defaults, in a registry.

* `base`: what a task is (`Task`); `config` (no TensorFlow): `TaskConfig`, `TaskDefaults`;
* `catalog` (no TensorFlow): `TASKS`, each task's builder, defaults, flags and data files;
* one module per task family: `fmnist`, `synthetic`, `emnist`, `shakespeare`, `stackoverflow`,
  `cifar`; their models in `models`, `reddi_models`, `layers`, metrics in `metrics`;
* `published`: Reddi et al.'s published settings behind the defaults.

The names below are loaded on first use (`registry.lazy_exports`): importing this package, its
`config` or its `catalog` imports no TensorFlow.
"""

from tff_adaptive import registry

__all__ = ['TASKS', 'TaskEntry', 'Task', 'TaskConfig', 'TaskDefaults', 'build_task', 'check_data']

__getattr__, __dir__ = registry.lazy_exports(
  __name__,
  {
    **dict.fromkeys(('TASKS', 'TaskEntry', 'build_task', 'check_data'), 'catalog'),
    'Task': 'base',
    **dict.fromkeys(('TaskConfig', 'TaskDefaults'), 'config'),
  },
)
