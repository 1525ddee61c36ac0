"""Tasks: federated data + model + loss + metrics + the paper's defaults, in a registry."""

from collections.abc import Callable
import dataclasses

from tff_adaptive import datasets
from tff_adaptive import registry
from tff_adaptive.datasets import tff_sqlite
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
    data: the files the task reads from its data directory (`check_data`).
    default_data_dir: where they are when TaskConfig.data_dir is None.
  """

  build: Callable[[TaskConfig], Task]
  defaults: TaskDefaults
  reads: tuple[str, ...] = ('data_dir',)
  data: tuple[datasets.DataFile, ...] = ()
  default_data_dir: str | None = None


_FETCH = 'python -m tff_adaptive.datasets.fetch --data_dir={data_dir} --dataset=%s'


def _tff_file(dataset: str) -> datasets.DataFile:
  """TFF's SQLite file of `dataset`, fetched by tff_adaptive.datasets.fetch."""
  return datasets.DataFile(
    tff_sqlite.SQLITE_FILES[dataset],
    _FETCH % dataset,
    has_samples=True,
  )


_SO_WORD_COUNTS = datasets.DataFile(
  'stackoverflow.word_count.tar.bz2', _FETCH % 'stackoverflow_counts', has_samples=True
)
_SO_TAG_COUNTS = datasets.DataFile(
  'stackoverflow.tag_count.tar.bz2', _FETCH % 'stackoverflow_counts', has_samples=True
)
_FASHION_MNIST = tuple(
  datasets.DataFile(
    name,
    f'apt-get install dataset-fashion-mnist (Debian; into {datasets.DEFAULT_FASHION_MNIST_DIR})',
    alternatives=(name[: -len('.gz')],),
  )
  for name in (
    'train-images-idx3-ubyte.gz',
    'train-labels-idx1-ubyte.gz',
    't10k-images-idx3-ubyte.gz',
    't10k-labels-idx1-ubyte.gz',
  )
)

TASKS: registry.Registry[TaskEntry] = registry.Registry(
  'task',
  {
    'fmnist': TaskEntry(
      fmnist.build_fmnist_task,
      fmnist.DEFAULTS,
      ('data_dir', 'dirichlet_alpha', 'num_clients'),
      _FASHION_MNIST,
      datasets.DEFAULT_FASHION_MNIST_DIR,
    ),
    'synthetic': TaskEntry(
      synthetic.build_synthetic_task,
      synthetic.DEFAULTS,
      ('synthetic_alpha', 'synthetic_beta', 'num_clients'),
    ),
    # The seven tasks of Reddi et al. 2021 (App. C-D).
    'emnist_cr': TaskEntry(
      emnist.build_emnist_cr_task,
      emnist.CR_DEFAULTS,
      data=(_tff_file('emnist'),),
      default_data_dir=emnist.DEFAULT_DATA_DIR,
    ),
    'emnist_ae': TaskEntry(
      emnist.build_emnist_ae_task,
      emnist.AE_DEFAULTS,
      data=(_tff_file('emnist'),),
      default_data_dir=emnist.DEFAULT_DATA_DIR,
    ),
    'shakespeare': TaskEntry(
      shakespeare.build_shakespeare_task,
      shakespeare.DEFAULTS,
      data=(_tff_file('shakespeare'),),
      default_data_dir=shakespeare.DEFAULT_DATA_DIR,
    ),
    'so_nwp': TaskEntry(
      stackoverflow.build_so_nwp_task,
      stackoverflow.NWP_DEFAULTS,
      data=(_tff_file('stackoverflow'), _SO_WORD_COUNTS),
      default_data_dir=stackoverflow.DEFAULT_DATA_DIR,
    ),
    'so_lr': TaskEntry(
      stackoverflow.build_so_lr_task,
      stackoverflow.LR_DEFAULTS,
      data=(_tff_file('stackoverflow'), _SO_WORD_COUNTS, _SO_TAG_COUNTS),
      default_data_dir=stackoverflow.DEFAULT_DATA_DIR,
    ),
    'cifar10': TaskEntry(
      cifar.build_cifar10_task,
      cifar.CIFAR10_DEFAULTS,
      ('data_dir', 'dirichlet_alpha', 'num_clients'),
      (
        datasets.DataFile(
          f'cifar10/{datasets.CIFAR10_TFDS_VERSION}/dataset_info.json',
          'tfds build cifar10 --data_dir={data_dir} (on a connected machine; copy the folder here)',
        ),
      ),
      cifar.DEFAULT_TFDS_DATA_DIR,
    ),
    'cifar100': TaskEntry(
      cifar.build_cifar100_task,
      cifar.CIFAR100_DEFAULTS,
      data=(_tff_file('cifar100'),),
      default_data_dir=cifar.DEFAULT_TFF_DATA_DIR,
    ),
  },
)


def check_data(config: TaskConfig) -> None:
  """Raises datasets.DataNotFoundError naming every file the task lacks, and how to get each."""
  entry = TASKS[config.name]
  if entry.data:
    data_dir = config.data_dir or entry.default_data_dir
    datasets.check_data_files(config.name, data_dir, entry.data)


def build_task(config: TaskConfig) -> Task:
  """Looks config.name up in TASKS; ValueError lists the valid names."""
  return TASKS[config.name].build(config)


__all__ = ['TASKS', 'TaskEntry', 'Task', 'TaskConfig', 'TaskDefaults', 'build_task', 'check_data']
