"""The Synthetic data sets Ju et al. may have run, and what one centrally fitted model reaches on each.

Ju et al. cite Caldas et al. (LEAF) for their Synthetic data set and give no generator settings.
The candidates: Li et al.'s (FedProx) generator at Synthetic(0, 0), (0.5, 0.5), (1, 1), each
with a labelling model drawn per client, and its IID branch (one model for all); LEAF's own
generator as its paper states the model, and as its code labels (`datasets.synthetic`).
"""

import numpy as np

from reproductions.ju2023_adafedadam import fairness_statistics

# Data set name -> its `tasks.TaskConfig` options (the trainer's flags of the same names).
DATA_SETS = {
  'synthetic_0_0': {'synthetic_alpha': 0.0, 'synthetic_beta': 0.0},
  'synthetic_0.5_0.5': {'synthetic_alpha': 0.5, 'synthetic_beta': 0.5},
  'synthetic_1_1': {'synthetic_alpha': 1.0, 'synthetic_beta': 1.0},
  'synthetic_iid': {'synthetic_iid': True, 'synthetic_beta': 0.0},
  'leaf': {'synthetic_generator': 'leaf'},
  'leaf_code': {'synthetic_generator': 'leaf_code'},
}
LABELS = {
  'synthetic_0_0': 'Synthetic(0, 0)',
  'synthetic_0.5_0.5': 'Synthetic(0.5, 0.5)',
  'synthetic_1_1': 'Synthetic(1, 1)',
  'synthetic_iid': 'Synthetic IID',
  'leaf': 'LEAF (paper)',
  'leaf_code': 'LEAF (code)',
}


def data_set_flags(data_set: str) -> list[str]:
  """The trainer's flags of a data set (`--synthetic_alpha=1`, `--synthetic_iid`, ...)."""
  flags = []
  for name, value in DATA_SETS[data_set].items():
    if value is True:
      flags.append(f'--{name}')
    elif isinstance(value, float):
      flags.append(f'--{name}={value:g}')
    else:
      flags.append(f'--{name}={value}')
  return flags


def pooled_fit_statistics(data_set: str, seed: int) -> dict[str, float]:
  """The statistics of one softmax regression fitted centrally to the union of the clients'
  training data (cross-entropy, L-BFGS to convergence), on each client's local test set: what a
  single model of the paper's kind reaches on that data set when the optimisation is not the
  question. Its objective weights examples, as FedAvg's does."""
  from scipy import optimize  # pylint: disable=g-import-not-at-top

  from tff_adaptive import tasks  # pylint: disable=g-import-not-at-top

  task = tasks.build_task(tasks.TaskConfig('synthetic', seed=seed, **DATA_SETS[data_set]))
  x = np.concatenate([c['x'] for c in task.train_clients.values()]).astype(np.float64)
  y = np.concatenate([c['y'] for c in task.train_clients.values()])
  features, classes = x.shape[1], 10
  onehot = np.eye(classes)[y]

  def loss_and_gradient(theta):
    w, b = theta[: features * classes].reshape(features, classes), theta[features * classes :]
    z = x @ w + b
    z -= z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    g = (np.exp(log_p) - onehot) / len(y)
    return -np.sum(onehot * log_p) / len(y), np.concatenate([(x.T @ g).ravel(), g.sum(axis=0)])

  theta = optimize.minimize(
    loss_and_gradient,
    np.zeros(features * classes + classes),
    jac=True,
    method='L-BFGS-B',
    options={'maxiter': 2000},
  ).x
  w, b = theta[: features * classes].reshape(features, classes), theta[features * classes :]
  tests = list(task.client_test.values())
  accuracies = [np.mean(np.argmax(c['x'] @ w + b, axis=1) == c['y']) for c in tests]
  return fairness_statistics.statistics_both_ways(accuracies, [len(c['y']) for c in tests])
