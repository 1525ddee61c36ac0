"""Tasks: federated data + model + loss + metrics + the paper's defaults, in a registry."""

from collections.abc import Callable
import dataclasses

from tasks import fmnist
from tasks import synthetic
from tasks.base import ClientArrays, Task, TaskConfig, TaskDefaults


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """A registered task: its builder and the defaults known before any data is loaded."""
  build: Callable[[TaskConfig], Task]
  defaults: TaskDefaults


TASKS: dict[str, TaskEntry] = {
    'fmnist': TaskEntry(fmnist.build_fmnist_task, fmnist.DEFAULTS),
    'synthetic': TaskEntry(synthetic.build_synthetic_task, synthetic.DEFAULTS),
}


def build_task(config: TaskConfig) -> Task:
  """Looks config.name up in TASKS; ValueError lists the valid names."""
  if config.name not in TASKS:
    raise ValueError(f'unknown task {config.name!r}; valid choices: {", ".join(TASKS)}')
  return TASKS[config.name].build(config)


__all__ = ['TASKS', 'TaskEntry', 'ClientArrays', 'Task', 'TaskConfig', 'TaskDefaults', 'build_task']
