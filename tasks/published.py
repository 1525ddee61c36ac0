"""The published settings and results of Reddi et al. 2021, one table per dict, in one place.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021: Table 7 (batch sizes), App. D (clients per round, rounds), Tables 8-9
(best client/server learning rates and tau, base-10 logs; the PDF's Table 8 is garbled, the
values are those of the authors' hyperparameter docs, google-research/federated
optimization/docs/hyperparameters.md, which match the legible cells), Table 1 (validation
metric averaged over the last 100 rounds) and Table 10 (Stack Overflow, full test set).

CIFAR-10's learning rates are not legible in the paper and not in the authors' docs: cifar10
has Table 1 numbers and Table 9's tau but no tuned learning rates, hence no presets; its task
defaults borrow CIFAR-100's (same model and grids), a starting point to tune, not a published
setting.

Optimizer keys are the trainer's: sgd (FedAvg), sgdm (FedAvgM), adagrad, adam, yogi.
"""

from collections.abc import Mapping
import os

from tasks import base

OPTIMIZERS = ('adagrad', 'adam', 'yogi', 'sgdm', 'sgd')
ADAPTIVE = ('adagrad', 'adam', 'yogi')
PAPER_NAMES = {
  'adagrad': 'FedAdagrad',
  'adam': 'FedAdam',
  'yogi': 'FedYogi',
  'sgdm': 'FedAvgM',
  'sgd': 'FedAvg',
}

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


def _table(rows: Mapping[str, tuple], keys=OPTIMIZERS) -> dict[str, dict[str, float]]:
  return {task: dict(zip(keys, values)) for task, values in rows.items()}


# log10 of the client learning rate (Table 8), columns OPTIMIZERS.
LOG10_CLIENT_LR = _table(
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
LOG10_SERVER_LR = _table(
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
LOG10_TAU = _table(
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

# Table 1: validation metric, average of the last 100 rounds (accuracy %, Recall@5 x 100 for
# so_lr, MSE x 1000 for emnist_ae).
TABLE1 = _table(
  {
    'cifar10': (72.1, 77.4, 78.0, 77.4, 72.8),
    'cifar100': (47.9, 52.5, 52.4, 52.4, 44.7),
    'emnist_cr': (85.1, 85.6, 85.5, 85.2, 84.9),
    'shakespeare': (57.5, 57.0, 57.2, 57.3, 56.9),
    'so_nwp': (23.8, 25.2, 25.2, 23.8, 19.5),
    'so_lr': (67.1, 65.8, 65.9, 36.9, 30.0),
    'emnist_ae': (4.20, 1.01, 0.98, 1.65, 6.47),
  }
)
TABLE1_METRIC = {task: 'accuracy (%)' for task in TABLE1}
TABLE1_METRIC.update(so_lr='recall_at_5 (x100)', emnist_ae='mse (x1000)')
# Table 10: full test set after training (Stack Overflow).
TABLE10 = _table(
  {'so_nwp': (24.4, 25.7, 25.7, 24.5, 20.5), 'so_lr': (66.8, 65.2, 66.5, 46.5, 40.6)}
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


def task_defaults(task: str) -> base.TaskDefaults:
  """TaskDefaults with the published loop settings and per-optimizer learning rates and tau.

  `client_learning_rate` is the value most optimizers share (every optimizer's own value is
  in `client_learning_rates`). cifar10 borrows cifar100's learning rates (see module doc).
  """
  clients, batch, rounds = LOOP[task]
  lr_task = 'cifar100' if task == 'cifar10' else task
  client = LOG10_CLIENT_LR[lr_task]
  common = max(set(client.values()), key=list(client.values()).count)
  return base.TaskDefaults(
    clients_per_round=clients,
    client_batch_size=batch,
    total_rounds=rounds,
    client_learning_rate=10.0**common,
    server_learning_rate={o: 10.0**v for o, v in LOG10_SERVER_LR[lr_task].items()},
    client_learning_rates={o: 10.0**v for o, v in client.items()},
    tau={o: 10.0**v for o, v in LOG10_TAU[task].items()},
  )


TASK_NAMES = {
  'cifar10': 'CIFAR-10',
  'cifar100': 'CIFAR-100',
  'emnist_ae': 'EMNIST AE',
  'emnist_cr': 'EMNIST CR',
  'shakespeare': 'Shakespeare',
  'so_nwp': 'Stack Overflow NWP',
  'so_lr': 'Stack Overflow LR',
}


def preset(task: str, optimizer: str) -> str:
  """The committed flag file presets/<task>_<optimizer>.flags (absl flagfile format).

  Comments give the published result; flags give Table 8-9's hyperparameters and the loop
  settings, for the trainer's published adaptive variant.

  Raises:
    ValueError: the pair has no published learning rates.
  """
  values = tuned(task, optimizer)
  clients, batch, rounds = LOOP[task]
  lines = [
    f'# Reddi et al. 2021 (ICLR), Table 1: {PAPER_NAMES[optimizer]} on '
    f'{TASK_NAMES[task]} reaches {TABLE1[task][optimizer]} ({TABLE1_METRIC[task]}, '
    'validation, average of the last 100 rounds).'
  ]
  if task in TABLE10:
    lines.append(f'# Table 10 (full test set after training): {TABLE10[task][optimizer]}.')
  logs = (
    f'log10 client lr {LOG10_CLIENT_LR[task][optimizer]:g}, '
    f'server lr {LOG10_SERVER_LR[task][optimizer]:g}'
  )
  if optimizer in ADAPTIVE:
    logs += f', tau {LOG10_TAU[task][optimizer]:g} (Table 9)'
  lines.append(f"# Table 8: {logs}. Loop: Table 7 and the authors' docs.")
  lines += [
    f'--task={task}',
    f'--server_optimizer={optimizer}',
    f'--client_learning_rate={values["client_learning_rate"]!r}',
    f'--server_learning_rate={values["server_learning_rate"]!r}',
  ]
  if optimizer in ADAPTIVE:
    lines += [f'--tau={values["tau"]!r}', '--adaptive_variant=published']
  if optimizer == 'sgdm':
    lines.append('--server_momentum=0.9')
  lines += [
    f'--clients_per_round={clients}',
    f'--client_batch_size={batch}',
    f'--total_rounds={rounds}',
    '--client_epochs_per_round=1',
    '--seed=1',
  ]
  return '\n'.join(lines) + '\n'


def preset_pairs() -> list[tuple[str, str]]:
  """Every (task, optimizer) with published learning rates, i.e. every committed preset."""
  return [(task, opt) for task in LOG10_CLIENT_LR for opt in OPTIMIZERS]


def write_presets(directory: str) -> list[str]:
  """Writes every preset into `directory` (``python -c 'from tasks import published;
  published.write_presets("presets")'``); returns the paths."""
  paths = []
  for task, optimizer in preset_pairs():
    path = os.path.join(directory, f'{task}_{optimizer}.flags')
    with open(path, 'w') as f:
      f.write(preset(task, optimizer))
    paths.append(path)
  return paths
