"""What a task builder is given and what a task defaults to: `TaskConfig`, `TaskDefaults`.

No TensorFlow: the trainer builds these from its flags before it imports TensorFlow and TFF.
`tasks.base` re-exports both.
"""

from collections.abc import Mapping
import dataclasses


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
  data_dir: str | None = None
  seed: int = 0
  dirichlet_alpha: float = 0.1
  synthetic_alpha: float = 1.0
  synthetic_beta: float = 1.0
  synthetic_iid: bool = False
  synthetic_generator: str = 'fedprox'
  num_clients: int | None = None
  examples_per_client: int | None = None
