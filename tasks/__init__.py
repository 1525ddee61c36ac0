"""Tasks: federated data + model + loss + metrics + the paper's defaults, in a registry."""

from collections.abc import Callable
import dataclasses

from tff_adaptive import registry
from tff_adaptive.tasks import cifar
from tff_adaptive.tasks import emnist
from tff_adaptive.tasks import fmnist
from tff_adaptive.tasks import shakespeare
from tff_adaptive.tasks import stackoverflow
from tff_adaptive.tasks import synthetic
from tff_adaptive.tasks.base import Task
from tff_adaptive.tasks.base import TaskConfig
from tff_adaptive.tasks.base import TaskDefaults


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """A registered task: its builder and the defaults known before any data is loaded.

  Attributes:
    build: TaskConfig -> Task.
    defaults: the paper's settings, known before any data is loaded.
    reads: the `TaskConfig` fields besides name and seed that the builder reads; the trainer
      warns about a task flag outside them and does not record it.
  """

  build: Callable[[TaskConfig], Task]
  defaults: TaskDefaults
  reads: tuple[str, ...] = ('data_dir',)


TASKS: registry.Registry[TaskEntry] = registry.Registry(
  'task',
  {
    'fmnist': TaskEntry(
      fmnist.build_fmnist_task, fmnist.DEFAULTS, ('data_dir', 'dirichlet_alpha', 'num_clients')
    ),
    'synthetic': TaskEntry(
      synthetic.build_synthetic_task,
      synthetic.DEFAULTS,
      ('synthetic_alpha', 'synthetic_beta', 'num_clients'),
    ),
    # The seven tasks of Reddi et al. 2021 (App. C-D).
    'emnist_cr': TaskEntry(emnist.build_emnist_cr_task, emnist.CR_DEFAULTS),
    'emnist_ae': TaskEntry(emnist.build_emnist_ae_task, emnist.AE_DEFAULTS),
    'shakespeare': TaskEntry(shakespeare.build_shakespeare_task, shakespeare.DEFAULTS),
    'so_nwp': TaskEntry(stackoverflow.build_so_nwp_task, stackoverflow.NWP_DEFAULTS),
    'so_lr': TaskEntry(stackoverflow.build_so_lr_task, stackoverflow.LR_DEFAULTS),
    'cifar10': TaskEntry(
      cifar.build_cifar10_task,
      cifar.CIFAR10_DEFAULTS,
      ('data_dir', 'dirichlet_alpha', 'num_clients'),
    ),
    'cifar100': TaskEntry(cifar.build_cifar100_task, cifar.CIFAR100_DEFAULTS),
  },
)


def build_task(config: TaskConfig) -> Task:
  """Looks config.name up in TASKS; ValueError lists the valid names."""
  return TASKS[config.name].build(config)


__all__ = ['TASKS', 'TaskEntry', 'Task', 'TaskConfig', 'TaskDefaults', 'build_task']
