"""What a task builder is given and what a task defaults to: `TaskConfig`, `TaskDefaults`.

No TensorFlow: the trainer builds these from its flags before it imports TensorFlow and TFF.
`tasks.base` re-exports both.
"""

from collections.abc import Mapping
import dataclasses

from tff_adaptive import settings

_SECTION = 'Task and data'  # the --help section of the task's flags
# Options added after runs were recorded: hparams.json holds them only when set off their
# default, so that the records of runs from before them stand.
RECORDED_IF_SET = ('examples_per_client', 'synthetic_iid', 'synthetic_generator')


@dataclasses.dataclass(frozen=True)
class TaskDefaults:
  """The paper's per-task settings, used when the matching flag is not given.

  server_learning_rate optionally maps a server optimizer name to this task's default eta;
  optimizers absent use their registry default (`SERVER_OPTIMIZERS[name].default_learning_rate`).
  client_learning_rates optionally maps a server optimizer name to the client learning rate
  published with it (Reddi et al. Table 8); optimizers absent use client_learning_rate.
  tau optionally maps an adaptive server optimizer name to its published tau (Table 9);
  optimizers absent use the --tau flag's default.
  """

  clients_per_round: int = 10
  client_batch_size: int = 20
  total_rounds: int = 100
  client_learning_rate: float = 0.1
  server_learning_rate: Mapping[str, float] = dataclasses.field(default_factory=dict)
  client_learning_rates: Mapping[str, float] = dataclasses.field(default_factory=dict)
  tau: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Options every task builder receives.

  Attributes:
    name: registry key.
    data_dir: where the task's files are; None for the task's default location.
    seed: seed of any partitioning or generation.
    dirichlet_alpha: label-skew concentration for Dirichlet-partitioned tasks.
    synthetic_alpha, synthetic_beta: LEAF Synthetic(alpha, beta).
    synthetic_iid: Synthetic IID instead (one labelling model for every client).
    synthetic_generator: 'fedprox' (Li et al.'s Synthetic(alpha, beta) or IID), 'leaf' (LEAF's
      own generator as its paper states it) or 'leaf_code' (as LEAF's code runs it).
    num_clients: population size for generated/partitioned tasks (None: task default).
    examples_per_client: examples per client for partitioned tasks (None: task default).
  """

  name: str
  data_dir: str | None = settings.setting(
    None,
    'data_dir',
    "Directory with the task's data files (default: the task's own location, e.g. the Debian "
    'package for fmnist).',
    section=_SECTION,
  )
  seed: int = 0
  dirichlet_alpha: float = settings.setting(
    0.1,
    'dirichlet_alpha',
    'Dirichlet label-skew concentration (fmnist).',
    section=_SECTION,
    check=settings.positive,
    always=True,
  )
  synthetic_alpha: float = settings.setting(
    1.0,
    'synthetic_alpha',
    'LEAF Synthetic alpha (synthetic).',
    section=_SECTION,
    check=settings.nonnegative,
    always=True,
  )
  synthetic_beta: float = settings.setting(
    1.0,
    'synthetic_beta',
    'LEAF Synthetic beta (synthetic).',
    section=_SECTION,
    check=settings.nonnegative,
    always=True,
  )
  synthetic_iid: bool = settings.setting(
    False,
    'synthetic_iid',
    'Synthetic IID (synthetic): one labelling model W, b for every client, features '
    'N(B_k, Sigma) with B_k ~ N(0, --synthetic_beta); --synthetic_alpha is not used.',
    section=_SECTION,
  )
  synthetic_generator: str = settings.setting(
    'fedprox',
    'synthetic_generator',
    "Synthetic data's generator (synthetic): fedprox (Li et al.'s Synthetic(alpha, beta), or IID "
    "with --synthetic_iid), leaf (LEAF's own: one labelling direction scaled per client; as its "
    "paper states the model) or leaf_code (as LEAF's code labels: softmax over each class's "
    'examples). The leaf generators read none of --synthetic_alpha/beta/iid.',
    section=_SECTION,
    choices=('fedprox', 'leaf', 'leaf_code'),
    kind='enum',
  )
  num_clients: int | None = settings.setting(
    None,
    'num_clients',
    "Population size of generated/partitioned tasks (default: task's).",
    section=_SECTION,
    check=settings.positive,
    always=True,
  )
  examples_per_client: int | None = settings.setting(
    None,
    'examples_per_client',
    "Examples per client of a partitioned task (fmnist; default: task's), 80% of them for "
    'training; num_clients x examples_per_client must fit the dataset (60,000 for fmnist).',
    section=_SECTION,
    check=settings.positive,
    always=True,
  )
