"""Reddi et al. 2021's published results (Tables 1 and 10) and the preset flag files.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. Table 1: the validation metric averaged over the last 100 rounds;
Table 10: Stack Overflow's full test set after training. The tuned hyperparameters (Tables 7-9)
are the tasks' defaults and live in the library, `tff_adaptive.tasks.published`; a preset
(`presets/<task>_<optimizer>.flags`) writes them as trainer flags beside the number they reached.

Regenerate the presets (tests/tasks/test_tasks.py checks the committed files match):

  python -c 'from reproductions.reddi2021_fedopt import published; published.write_presets()'
"""

import os

from tff_adaptive.tasks.published import ADAPTIVE
from tff_adaptive.tasks.published import LOG10_CLIENT_LR
from tff_adaptive.tasks.published import LOG10_SERVER_LR
from tff_adaptive.tasks.published import LOG10_TAU
from tff_adaptive.tasks.published import LOOP
from tff_adaptive.tasks.published import OPTIMIZERS
from tff_adaptive.tasks.published import by_optimizer
from tff_adaptive.tasks.published import tuned

PRESETS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'presets')

PAPER_NAMES = {
  'adagrad': 'FedAdagrad',
  'adam': 'FedAdam',
  'yogi': 'FedYogi',
  'sgdm': 'FedAvgM',
  'sgd': 'FedAvg',
}


# Table 1: validation metric, average of the last 100 rounds (accuracy %, Recall@5 x 100 for
# so_lr, MSE x 1000 for emnist_ae).
TABLE1 = by_optimizer(
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
TABLE10 = by_optimizer(
  {'so_nwp': (24.4, 25.7, 25.7, 24.5, 20.5), 'so_lr': (66.8, 65.2, 66.5, 46.5, 40.6)}
)


# App. D.2: base-10 log grids (lowest, highest) of the client (eta_l) and server (eta) learning
# rates, step 0.5. The paper first searched DEFAULT_GRID on every task, then widened it for
# EMNIST AE and Stack Overflow LR; tasks outside the paper (fmnist, synthetic) use DEFAULT_GRID.
GRID_STEP = 0.5
DEFAULT_GRID = {'client': (-3.0, 0.5), 'server': (-3.0, 1.0)}
GRIDS = {
  'cifar10': DEFAULT_GRID,
  'cifar100': DEFAULT_GRID,
  'emnist_ae': {'client': (-1.5, 2.0), 'server': (-2.0, 1.0)},
  'emnist_cr': DEFAULT_GRID,
  'shakespeare': DEFAULT_GRID,
  'so_lr': {'client': (-1.0, 3.0), 'server': (-2.0, 1.5)},
  'so_nwp': DEFAULT_GRID,
}
# tau in {1e-5, ..., 1e-1} for FedAdagrad, FedAdam, FedYogi (App. D.2); the heatmaps (Fig. 2,
# Figs. 5-11) fix tau = 1e-3 (App. E.3).
LOG10_TAUS = (-5.0, -4.0, -3.0, -2.0, -1.0)
HEATMAP_LOG10_TAU = -3.0

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
  """The text of presets/<task>_<optimizer>.flags (absl flagfile format).

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


def write_presets(directory: str = PRESETS_DIR) -> list[str]:
  """Writes every preset into `directory` (default: the committed presets/); returns the paths."""
  paths = []
  for task, optimizer in preset_pairs():
    path = os.path.join(directory, f'{task}_{optimizer}.flags')
    with open(path, 'w') as f:
      f.write(preset(task, optimizer))
    paths.append(path)
  return paths
