"""The published settings of Reddi et al. 2021 that give the tasks their defaults.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021: Table 7 (batch sizes), App. D (clients per round, rounds), Tables 8-9
(best client/server learning rates and tau, base-10 logs; the PDF's Table 8 is garbled, the
values are those of the authors' hyperparameter docs, google-research/federated
optimization/docs/hyperparameters.md, which match the legible cells). The published results
(Tables 1 and 10) and the preset flag files built from both live with the reproduction,
`reproductions/reddi2021_fedopt/published.py`.

CIFAR-10's learning rates are not legible in the paper and not in the authors' docs: cifar10
has Table 1 numbers and Table 9's tau but no tuned learning rates, hence no presets; its task
defaults borrow CIFAR-100's (same model and grids), a starting point to tune, not a published
setting.

Optimizer keys are the trainer's: sgd (FedAvg), sgdm (FedAvgM), adagrad, adam, yogi.
"""

from collections.abc import Mapping

from tff_adaptive.tasks import config

OPTIMIZERS = ('adagrad', 'adam', 'yogi', 'sgdm', 'sgd')
ADAPTIVE = ('adagrad', 'adam', 'yogi')

# task -> (clients per round, client batch size, total rounds); Table 7 and the authors' docs
# (Shakespeare: 1200 rounds in the docs, Sec. 4 says 1500).
LOOP = {
  'cifar10': (10, 20, 4000),
  'cifar100': (10, 20, 4000),
  'emnist_ae': (10, 20, 3000),
  'emnist_cr': (10, 20, 1500),
  'shakespeare': (10, 4, 1200),
  'so_nwp': (50, 16, 1500),
  'so_lr': (10, 100, 1500),
}


def by_optimizer(rows: Mapping[str, tuple], keys=OPTIMIZERS) -> dict[str, dict[str, float]]:
  """{task: (value per optimizer, in `keys` order)} -> {task: {optimizer: value}}."""
  return {task: dict(zip(keys, values)) for task, values in rows.items()}


# log10 of the client learning rate (Table 8), columns OPTIMIZERS.
LOG10_CLIENT_LR = by_optimizer(
  {
    'cifar100': (-1, -1.5, -1.5, -1.5, -1),
    'emnist_ae': (1.5, 1, 1, 0.5, 1),
    'emnist_cr': (-1.5, -1.5, -1.5, -1.5, -1),
    'shakespeare': (0, 0, 0, 0, 0),
    'so_nwp': (-0.5, -0.5, -0.5, -0.5, -0.5),
    'so_lr': (2, 2, 2, 2, 2),
  }
)
# log10 of the server learning rate (Table 8).
LOG10_SERVER_LR = by_optimizer(
  {
    'cifar100': (-1, 0, 0, 0, 0.5),
    'emnist_ae': (-1.5, -1.5, -1.5, 0, 0),
    'emnist_cr': (-1, -2.5, -2.5, -0.5, 0),
    'shakespeare': (-0.5, -2, -2, -0.5, 0),
    'so_nwp': (-1.5, -2, -2, 0, 0),
    'so_lr': (1, -0.5, -0.5, 0, 0),
  }
)
# log10 of tau (Table 9), adaptive optimizers only.
LOG10_TAU = by_optimizer(
  {
    'cifar10': (-2, -3, -3),
    'cifar100': (-2, -1, -1),
    'emnist_ae': (-3, -3, -3),
    'emnist_cr': (-2, -4, -4),
    'shakespeare': (-1, -3, -3),
    'so_nwp': (-4, -5, -5),
    'so_lr': (-2, -5, -5),
  },
  keys=ADAPTIVE,
)


def tuned(task: str, optimizer: str) -> dict[str, float]:
  """The published (client_learning_rate, server_learning_rate[, tau]) of a (task, optimizer).

  Raises:
    ValueError: the pair has no published learning rates (e.g. cifar10).
  """
  if task not in LOG10_CLIENT_LR or optimizer not in OPTIMIZERS:
    raise ValueError(
      f'no published learning rates for task={task!r}, optimizer={optimizer!r}; '
      f'tasks: {", ".join(LOG10_CLIENT_LR)}; optimizers: {", ".join(OPTIMIZERS)}'
    )
  values = {
    'client_learning_rate': 10.0 ** LOG10_CLIENT_LR[task][optimizer],
    'server_learning_rate': 10.0 ** LOG10_SERVER_LR[task][optimizer],
  }
  if optimizer in ADAPTIVE:
    values['tau'] = 10.0 ** LOG10_TAU[task][optimizer]
  return values


def task_defaults(task: str) -> config.TaskDefaults:
  """TaskDefaults with the published loop settings and per-optimizer learning rates and tau.

  `client_learning_rate` is the value most optimizers share (every optimizer's own value is
  in `client_learning_rates`). cifar10 borrows cifar100's learning rates (see module doc).
  """
  clients, batch, rounds = LOOP[task]
  lr_task = 'cifar100' if task == 'cifar10' else task
  client = LOG10_CLIENT_LR[lr_task]
  common = max(set(client.values()), key=list(client.values()).count)
  return config.TaskDefaults(
    clients_per_round=clients,
    client_batch_size=batch,
    total_rounds=rounds,
    client_learning_rate=10.0**common,
    server_learning_rate={o: 10.0**v for o, v in LOG10_SERVER_LR[lr_task].items()},
    client_learning_rates={o: 10.0**v for o, v in client.items()},
    tau={o: 10.0**v for o, v in LOG10_TAU[task].items()},
  )
