"""The task registry `TASKS`: each task's builder, defaults, flags and data files, no TensorFlow.

An entry's builder is a `registry.Lazy` reference to the task module's `build_*_task`, imported
on first build; everything else is known before any data or TensorFlow is loaded, so the trainer
checks --task, fills in the task's defaults and checks its data files (`check_data`) before it
imports TensorFlow and TFF. The task modules read their defaults and default data directories
from here (`tasks.fmnist.DEFAULTS is TASKS['fmnist'].defaults`).
"""

from collections.abc import Callable
import dataclasses
import os
from typing import Any

from tff_adaptive import datasets
from tff_adaptive import registry
from tff_adaptive.datasets import tff_sqlite
from tff_adaptive.tasks import published
from tff_adaptive.tasks.config import TaskConfig
from tff_adaptive.tasks.config import TaskDefaults

# Where `tff-adaptive fetch` puts TFF's SQLite files, and where TensorFlow
# Datasets keeps its builds, unless TaskConfig.data_dir says otherwise.
TFF_DATA_DIR = os.path.join(os.path.expanduser('~'), '.tff')
TFDS_DATA_DIR = os.path.join(os.path.expanduser('~'), 'tensorflow_datasets')


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """A registered task: its builder and the defaults known before any data is loaded.

  Attributes:
    build: TaskConfig -> `tasks.Task`.
    defaults: the paper's settings, known before any data is loaded.
    reads: the `TaskConfig` fields besides name and seed that the builder reads; the trainer
      warns about a task flag outside them and does not record it.
    data: the files the task reads from its data directory (`check_data`).
    default_data_dir: where they are when TaskConfig.data_dir is None.
  """

  build: Callable[[TaskConfig], Any]
  defaults: TaskDefaults
  reads: tuple[str, ...] = ('data_dir',)
  data: tuple[datasets.DataFile, ...] = ()
  default_data_dir: str | None = None


def _builder(module: str, task: str) -> registry.Lazy:
  """`build_<task>_task` of `tasks.<module>`, imported on first build."""
  return registry.Lazy(f'tff_adaptive.tasks.{module}:build_{task}_task')


_FETCH = '{fetch} --data_dir={data_dir} --dataset=%s'  # {fetch}: `commands.command('fetch')`


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
    # Kim et al. 2024 Sec. 4 (`tasks.fmnist`): batch 64, 10% of the 100 clients per round.
    'fmnist': TaskEntry(
      _builder('fmnist', 'fmnist'),
      TaskDefaults(
        clients_per_round=10, client_batch_size=64, total_rounds=1000, client_learning_rate=0.05
      ),
      ('data_dir', 'dirichlet_alpha', 'num_clients', 'examples_per_client'),
      _FASHION_MNIST,
      datasets.DEFAULT_FASHION_MNIST_DIR,
    ),
    # Ju et al. App. C.1 (`tasks.synthetic`): local SGD lr 0.01, batch 10, 1000 rounds.
    'synthetic': TaskEntry(
      _builder('synthetic', 'synthetic'),
      TaskDefaults(
        clients_per_round=10, client_batch_size=10, total_rounds=1000, client_learning_rate=0.01
      ),
      ('synthetic_alpha', 'synthetic_beta', 'synthetic_iid', 'synthetic_generator', 'num_clients'),
    ),
    # The seven tasks of Reddi et al. 2021 (App. C-D), their defaults `tasks.published`.
    'emnist_cr': TaskEntry(
      _builder('emnist', 'emnist_cr'),
      published.task_defaults('emnist_cr'),
      data=(_tff_file('emnist'),),
      default_data_dir=TFF_DATA_DIR,
    ),
    'emnist_ae': TaskEntry(
      _builder('emnist', 'emnist_ae'),
      published.task_defaults('emnist_ae'),
      data=(_tff_file('emnist'),),
      default_data_dir=TFF_DATA_DIR,
    ),
    'shakespeare': TaskEntry(
      _builder('shakespeare', 'shakespeare'),
      published.task_defaults('shakespeare'),
      data=(_tff_file('shakespeare'),),
      default_data_dir=TFF_DATA_DIR,
    ),
    'so_nwp': TaskEntry(
      _builder('stackoverflow', 'so_nwp'),
      published.task_defaults('so_nwp'),
      data=(_tff_file('stackoverflow'), _SO_WORD_COUNTS),
      default_data_dir=TFF_DATA_DIR,
    ),
    'so_lr': TaskEntry(
      _builder('stackoverflow', 'so_lr'),
      published.task_defaults('so_lr'),
      data=(_tff_file('stackoverflow'), _SO_WORD_COUNTS, _SO_TAG_COUNTS),
      default_data_dir=TFF_DATA_DIR,
    ),
    'cifar10': TaskEntry(
      _builder('cifar', 'cifar10'),
      published.task_defaults('cifar10'),
      ('data_dir', 'dirichlet_alpha', 'num_clients'),
      (
        datasets.DataFile(
          f'cifar10/{datasets.CIFAR10_TFDS_VERSION}/dataset_info.json',
          'tfds build cifar10 --data_dir={data_dir} (on a connected machine; copy the folder here)',
        ),
      ),
      TFDS_DATA_DIR,
    ),
    'cifar100': TaskEntry(
      _builder('cifar', 'cifar100'),
      published.task_defaults('cifar100'),
      data=(_tff_file('cifar100'),),
      default_data_dir=TFF_DATA_DIR,
    ),
  },
)


def check_data(config: TaskConfig) -> None:
  """Raises datasets.DataNotFoundError naming every file the task lacks, and how to get each."""
  entry = TASKS[config.name]
  if entry.data:
    data_dir = config.data_dir or entry.default_data_dir
    datasets.check_data_files(config.name, data_dir, entry.data)


def build_task(config: TaskConfig):
  """The `tasks.Task` of `config`: looks config.name up in TASKS (ValueError lists the valid
  names) and runs its builder."""
  return TASKS[config.name].build(config)
