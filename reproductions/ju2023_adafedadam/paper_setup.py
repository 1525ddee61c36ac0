"""Ju et al. (AdaFedAdam) App. C.1 as trainer flags: the client training and each algorithm's server.

Shared by the Table 5 driver (`reproduce_synthetic`) and the study of the data setting
(`settings_study`), so that both run exactly the paper's configuration.
"""

import dataclasses

SGD1 = ('--server_optimizer=sgd', '--server_learning_rate=1')
# algorithm -> its trainer flags (FedProx's mu, q-FedAvg's q and AdaFedAdam's alpha are added
# per cell).
ARGS = {
  'FedAvg': ('--algorithm=fedopt', *SGD1),
  'FedAdam': (
    '--algorithm=fedopt',
    '--server_optimizer=adam',
    '--server_learning_rate=0.001',
    '--server_beta_1=0.9',
    '--server_beta_2=0.999',
    '--tau=1e-8',
  ),
  'q-FedAvg': ('--algorithm=qfedavg', *SGD1),
  'FedNova': ('--algorithm=fednova', *SGD1),
  'FedProx': ('--algorithm=fedprox', *SGD1),
  'AdaFedAdam': ('--algorithm=adafedadam', '--server_optimizer=adaadam'),
}
# Local SGD lr 0.01, batch 10, E = 1 (App. C.1).
CLIENT_ARGS = (
  '--client_optimizer=sgd',
  '--client_learning_rate=0.01',
  '--client_batch_size=10',
  '--client_epochs_per_round=1',
)
# The parameter a cell sets per algorithm: FedProx's mu, q-FedAvg's q, AdaFedAdam's alpha.
PARAM_FLAGS = {'FedProx': 'fedprox_mu', 'q-FedAvg': 'qfedavg_q', 'AdaFedAdam': 'fairness_alpha'}


def param_flags(algorithm: str, param: float | None) -> list[str]:
  """The trainer flag of `algorithm`'s parameter (none for the others, or without a value)."""
  if algorithm not in PARAM_FLAGS or param is None:
    return []
  return [f'--{PARAM_FLAGS[algorithm]}={param:g}']


# The cross-silo setup on Fashion-MNIST: the paper's Cifar10 setup (App. C.1, Table 4: 16
# clients, Dirichlet(0.1) labels, every client in every round, local SGD lr 0.02, batch 32,
# E = 1, 200 rounds) with the fmnist task's CNN in place of VGG11. All 60,000 training images
# are dealt out, 3,750 per client, and each client splits its share 80/20 into local train/test.
FMNIST_SILO_TASK_ARGS = (
  '--task=fmnist',
  '--num_clients=16',
  '--examples_per_client=3750',
  '--dirichlet_alpha=0.1',
)
FMNIST_SILO_CLIENT_ARGS = (
  '--client_optimizer=sgd',
  '--client_learning_rate=0.02',
  '--client_batch_size=32',
  '--client_epochs_per_round=1',
)


@dataclasses.dataclass(frozen=True)
class Setup:
  """One of Table 5's setups as the driver runs it.

  Attributes:
    label: how the tables and figures name it.
    task_args: the trainer's task flags.
    client_args: the trainer's client-training flags (App. C.1).
    num_clients: the population (every client is evaluated on its local test split).
    rounds: the paper's rounds for the setup.
    stem: the file names of its table (`<stem>.md`, `<stem>.csv`).
    published_label: which published Table 5 row the table sets beside ours.
  """

  label: str
  task_args: tuple[str, ...]
  client_args: tuple[str, ...]
  num_clients: int
  rounds: int
  stem: str
  published_label: str


def synthetic_setup(label: str, task_args: tuple[str, ...]) -> Setup:
  return Setup(label, task_args, CLIENT_ARGS, 100, 1000, 'table5_synthetic', 'Synthetic')


FMNIST_SILO = Setup(
  'Fashion-MNIST cross-silo (16 clients, Dir(0.1))',
  FMNIST_SILO_TASK_ARGS,
  FMNIST_SILO_CLIENT_ARGS,
  16,
  200,
  'table5_fmnist_silo',
  'Cifar10',
)
