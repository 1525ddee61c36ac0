"""Federated least squares: FedAvg's biased fixed point vs FedPA's (Al-Shedivat et al., ICLR 2021).

  python -m reproductions.alshedivat2021_fedpa.least_squares [--out=DIR]   # runs/fedpa_least_squares
  python -m reproductions.alshedivat2021_fedpa.least_squares --publish  # the committed results

Sec. 3, Fig. 1 and App. A of the paper, made quantitative on a small heterogeneous problem. Each
client i holds its own linear-Gaussian data (X_i [n_i, d], y_i): features from its own
distribution (its own scales and correlations) and targets from its own weight vector, so its
objective is, up to a constant, the quadratic

    f_i(x) = 1/2 (x - mu_i)^T A_i (x - mu_i),   A_i = X_i^T X_i / n_i,   mu_i = its least squares,

and with weights q_i = n_i the global optimum (the pooled least squares; Eq. 3) is
x* = (sum q_i A_i)^-1 sum q_i A_i mu_i. Both algorithms' server steps move along the weighted mean
of the client deltas, so their fixed points are where that mean vanishes:

* FedAvg, K local full-batch GD steps at rate eta: the delta is B_i (x - mu_i) with
  B_i = I - (I - eta A_i)^K, so x_K = (sum q_i B_i)^-1 sum q_i B_i mu_i. K = 1 gives x*; as K
  grows B_i -> I and x_K -> sum q_i mu_i / sum q_i, the biased average of the local optima.
* FedPA: the delta is Sigma_i^-1 (x - mu_hat_i), with mu_hat_i the mean of l samples of the
  client's local posterior and Sigma_i = rho_l I + (1 - rho_l) S_i the shrinkage estimate of its
  covariance (Theorem 3; rho_l = 1 / (1 + (l - 1) rho)), so the fixed point is
  (sum q_i Sigma_i^-1)^-1 sum q_i Sigma_i^-1 mu_hat_i, which tends to x* as l grows.

The samples here are exact: l draws from N(mu_i, c A_i^-1), the local posterior at temperature c
(exp(-f_i / c)), seeded, so the experiment isolates what the paper's second approximation (the
shrinkage estimate of the local moments from l samples) does to the fixed point; the delta is
computed by the project's dynamic program (`tff_adaptive.algorithms.fedpa_math`, App. C). It is
affine in x, so Sigma_i^-1 is recovered column by column from deltas at x = e_j and x = 0.

Panel (b) runs the algorithms themselves on the clients' data with the project's in-process
engine (`AlgorithmsConfig`): every client every round, 51 local epochs of minibatch SGD for both;
FedAvg returns x - x_K, FedPA takes one IASG sample per epoch after a burn-in epoch (l = 50) and
returns the DP delta; server SGD, lr 1 for FedAvg (the average of the final models) and 0.03 for
FedPA (its deltas are up to 1/rho_l = 1 + (l - 1) rho = 50 times larger; 0.1 diverges).

Outputs under --out (default runs/fedpa_least_squares; --publish, with the committed settings
only, writes reproductions/alshedivat2021_fedpa/results/least_squares, `reproductions.publish`):
`distances.csv` (distance to x* of every fixed point; FedPA's mean, std,
min and max over --seeds sample seeds, plus the weighted mean of the mu_i and FedPA with exact
moments), `rounds.csv` (panel (b): distance per round), `least_squares.md` (the distances as a
table, with the command, date and code version that wrote them) and `fedpa_least_squares.png`.

What it shows (defaults, 10 seeds): FedAvg's distance grows from 0 at K = 1 to 1.36 at K = 1000,
the distance of the weighted mean of the local optima; FedPA's falls from 1.54 at l = 2 (worse
than that bias: two samples give a noisy mean and Sigma close to I) to 0.14 at l = 500. In panel
(b) FedAvg settles at about 1.34 within a round and FedPA with 50 IASG samples at about 0.85,
short of the 0.56 of 50 exact samples in (a). The gap was not analysed; a likely cause is that an
epoch of SGD iterates (about 20 steps at lr 0.02) moves little along the flat directions of the
A_i (eigenvalues down to 0.014), so successive samples are correlated there.
"""

import collections
import csv
import dataclasses
import functools
import os
import sys
import time

from absl import flags
from absl import logging
import numpy as np

from reproductions import cell_runner
from reproductions import publish
import tff_adaptive  # noqa: F401  (first: quiets TensorFlow's C++ logging before TF loads)

# TensorFlow, TFF and matplotlib are imported by the functions that use them, after the flags
# and --publish are checked: a refused command answers in a fraction of a second.

FLAGS = flags.FLAGS


# -- The problem. ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
  """A federated least squares problem.

  Attributes:
    features: X_i [n_i, d], one per client.
    targets: y_i [n_i], one per client.
    As: A_i = X_i^T X_i / n_i [d, d].
    mus: mu_i, the client's least-squares solution [d].
    weights: q_i = n_i [N].
  """

  features: tuple[np.ndarray, ...]
  targets: tuple[np.ndarray, ...]
  As: tuple[np.ndarray, ...]
  mus: tuple[np.ndarray, ...]
  weights: np.ndarray


def make_problem(
  seed: int = 0,
  dim: int = 10,
  num_clients: int = 10,
  min_examples: int = 50,
  max_examples: int = 400,
  heterogeneity: float = 1.0,
  noise: float = 0.5,
) -> Problem:
  """Heterogeneous linear-Gaussian clients.

  Client i draws n_i ~ U{min_examples..max_examples - 1} examples x = R_i diag(s_i) z, z ~ N(0, I)
  (R_i a random rotation, s_i per-feature scales log-uniform in [0.2, 2] times a client scale
  exp(N(0, 0.3^2))), so its features have their own scales and correlations, and targets
  y = x^T w_i + N(0, noise^2) with w_i = w_0 + heterogeneity * N(0, I) (its own concept).
  """
  rng = np.random.default_rng(seed)
  w0 = rng.normal(size=dim)
  features, targets, As, mus, ns = [], [], [], [], []
  for _ in range(num_clients):
    n = int(rng.integers(min_examples, max_examples))
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    scales = np.exp(rng.uniform(np.log(0.2), np.log(2.0), size=dim) + rng.normal(0.0, 0.3))
    x = rng.normal(size=(n, dim)) @ np.diag(scales) @ rotation.T
    w = w0 + heterogeneity * rng.normal(size=dim)
    y = x @ w + noise * rng.normal(size=n)
    features.append(x)
    targets.append(y)
    As.append(x.T @ x / n)
    mus.append(np.linalg.lstsq(x, y, rcond=None)[0])
    ns.append(n)
  return Problem(tuple(features), tuple(targets), tuple(As), tuple(mus), np.array(ns, float))


# -- Closed-form fixed points. --------------------------------------------------------------------


def weighted_solve(mats, points, weights) -> np.ndarray:
  """The x with sum_i q_i M_i (x - p_i) = 0: (sum q_i M_i)^-1 sum q_i M_i p_i."""
  lhs = sum(q * np.asarray(m, float) for q, m in zip(weights, mats))
  rhs = sum(
    q * np.asarray(m, float) @ np.asarray(p, float) for q, m, p in zip(weights, mats, points)
  )
  return np.linalg.solve(lhs, rhs)


def global_optimum(As, mus, weights) -> np.ndarray:
  """x* = argmin sum_i q_i f_i = (sum q_i A_i)^-1 sum q_i A_i mu_i (Eq. 3)."""
  return weighted_solve(As, mus, weights)


def fedavg_fixed_point(As, mus, weights, lr: float, K: int) -> np.ndarray:
  """FedAvg with K local GD steps at rate lr: (sum q_i B_i)^-1 sum q_i B_i mu_i,
  B_i = I - (I - lr A_i)^K (the client delta is B_i (x - mu_i); any server step size)."""
  mats = []
  for a in As:
    eye = np.eye(a.shape[0])
    mats.append(eye - np.linalg.matrix_power(eye - lr * np.asarray(a, float), K))
  return weighted_solve(mats, mus, weights)


def fedpa_fixed_point(sigma_invs, means, weights) -> np.ndarray:
  """FedPA with deltas Sigma_i^-1 (x - mu_hat_i): (sum q_i Sigma_i^-1)^-1 sum q_i Sigma_i^-1
  mu_hat_i (Eq. 9 with the estimated moments; exact moments give x*)."""
  return weighted_solve(sigma_invs, means, weights)


def fedavg_lr(As) -> float:
  """eta = 1 / max_i lambda_max(A_i): local GD is stable (eta lambda < 2) on every client."""
  return 1.0 / max(float(np.linalg.eigvalsh(a)[-1]) for a in As)


def fedavg_distances(problem: Problem, k_values, lr: float) -> np.ndarray:
  """||x_K - x*|| for each K."""
  opt = global_optimum(problem.As, problem.mus, problem.weights)
  return np.array(
    [
      np.linalg.norm(fedavg_fixed_point(problem.As, problem.mus, problem.weights, lr, k) - opt)
      for k in k_values
    ]
  )


# -- FedPA with sampled local posteriors. -------------------------------------------------------


def sample_local_posteriors(As, mus, num_samples: int, temperature: float, rng) -> np.ndarray:
  """[N, l, d]: l exact draws from each client's N(mu_i, c A_i^-1)."""
  out = []
  for a, mu in zip(As, mus):
    chol = np.linalg.cholesky(temperature * np.linalg.inv(a))
    out.append(mu + rng.normal(size=(num_samples, len(mu))) @ chol.T)
  return np.stack(out)


@functools.cache
def _batched_posterior_deltas():
  """fedpa_math's DP for B independent problems, a tf.function: (x0s [B, d], samples
  [B, l, d], rho) -> [B, d].

  The same steps as `fedpa_math.posterior_delta` (dp_init, dp_update per sample, dp_delta), in
  a graph loop instead of a Python-unrolled one (whose trace grows with l), vectorized over B.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from tff_adaptive.algorithms import fedpa_math  # pylint: disable=g-import-not-at-top

  @tf.function
  def deltas(x0s, samples, rho):
    num_samples = samples.shape[1]

    def one(args):
      x0, xs = args
      state = fedpa_math.dp_init((x0,), num_samples)
      for j in tf.range(num_samples):
        state = fedpa_math.dp_update(state, (xs[j],), rho)
      return fedpa_math.dp_delta(state, rho)[0]

    return tf.vectorized_map(one, (x0s, samples))

  return deltas


def dp_inverse_covariances(samples, rho: float) -> np.ndarray:
  """Sigma_l^-1 [B, d, d] of each of B sample sets [B, l, d] (float64), from the DP deltas.

  Delta(x0) = Sigma_l^-1 (x0 - mean) is affine in x0, so column j of Sigma_l^-1 is
  Delta(e_j) - Delta(0).
  """
  samples = np.asarray(samples, np.float64)
  b, l, d = samples.shape
  x0s = np.tile(np.vstack([np.eye(d), np.zeros((1, d))]), (b, 1))  # [B (d + 1), d]
  rep = np.repeat(samples, d + 1, axis=0)  # [B (d + 1), l, d]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  deltas = _batched_posterior_deltas()(
    tf.constant(x0s), tf.constant(rep), tf.constant(rho, tf.float64)
  ).numpy()
  deltas = deltas.reshape(b, d + 1, d)
  return np.transpose(deltas[:, :d] - deltas[:, d:], (0, 2, 1))  # [B, row, column]


def fedpa_distances(
  problem: Problem, l_values, rho: float, temperature: float, seeds
) -> np.ndarray:
  """||FedPA fixed point - x*|| [len(l_values), len(seeds)]; seed s, l samples: rng (s, l)."""
  opt = global_optimum(problem.As, problem.mus, problem.weights)
  n = len(problem.As)
  out = np.zeros((len(l_values), len(seeds)))
  for i, l in enumerate(l_values):
    samples = np.concatenate(
      [
        sample_local_posteriors(
          problem.As, problem.mus, l, temperature, np.random.default_rng((s, l))
        )
        for s in seeds
      ]
    )  # [S N, l, d]
    sigma_invs = dp_inverse_covariances(samples, rho)
    means = samples.mean(axis=1)
    for j in range(len(seeds)):
      block = slice(j * n, (j + 1) * n)
      x = fedpa_fixed_point(sigma_invs[block], means[block], problem.weights)
      out[i, j] = np.linalg.norm(x - opt)
  return out


# -- The algorithms themselves. -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AlgorithmsConfig:
  """Panel (b): both algorithms, every client every round, from x = 0.

  Attributes:
    rounds: server rounds.
    epochs: E local epochs of SGD (both algorithms); FedPA's first is IASG burn-in, each later
      one gives a sample (the mean of its iterates), so l = E - 1.
    batch_size, client_lr: local minibatch SGD (no momentum) on the Keras MSE (mean, no 1/2).
    rho: FedPA's shrinkage (the paper's form).
    fedavg_server_lr, fedpa_server_lr: server SGD. FedAvg's 1 is McMahan et al.'s average of the
      clients' final models; FedPA's deltas are up to 1/rho_l = 1 + (l - 1) rho times larger
      (Sigma_l^-1 where the samples vary little), so its step is smaller.
    seed: seed of the clients' local shuffling (`core.seeds.client_seed`).
  """

  rounds: int = 30
  epochs: int = 51
  batch_size: int = 10
  client_lr: float = 0.02
  rho: float = 1.0
  fedavg_server_lr: float = 1.0
  fedpa_server_lr: float = 0.03
  seed: int = 0


def run_algorithms(problem: Problem, config: AlgorithmsConfig) -> dict[str, np.ndarray]:
  """{'FedAvg': [rounds + 1], 'FedPA': [rounds + 1]}: ||x_t - x*|| for t = 0..rounds.

  A linear model without bias (Keras Dense(1), float32) on each client's (X_i, y_i), run by the
  project's `engines.InProcessEngine` with `algorithms.build_fedopt` (FedAvg) and
  `algorithms.build_fedpa` (IASG samples, DP delta), weights q_i = n_i (example weighting).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_federated as tff

  from tff_adaptive import algorithms
  from tff_adaptive import engines
  from tff_adaptive import optimizers
  from tff_adaptive.core import seeds as seeds_lib
  # pylint: enable=g-import-not-at-top

  dim = problem.features[0].shape[1]
  spec = collections.OrderedDict(
    x=tf.TensorSpec([None, dim], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
  )

  def model_fn():
    keras_model = tf.keras.Sequential(
      [
        tf.keras.layers.InputLayer(input_shape=(dim,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer='zeros'),
      ]
    )
    return tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.MeanSquaredError(), input_spec=spec
    )

  client = algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig('sgd', config.client_lr, momentum=0.0),
    epochs=config.epochs,
    batch_size=config.batch_size,
  )
  built = {
    'FedAvg': algorithms.build_fedopt(
      model_fn, client, tff.learning.optimizers.build_sgdm(config.fedavg_server_lr)
    ),
    'FedPA': algorithms.build_fedpa(
      model_fn,
      client,
      tff.learning.optimizers.build_sgdm(config.fedpa_server_lr),
      fedpa=algorithms.FedPAHParams(burnin_rounds=0, burnin_epochs=1, shrinkage=config.rho),
    ),
  }
  data = [
    collections.OrderedDict(x=x.astype(np.float32), y=y.astype(np.float32)[:, np.newaxis])
    for x, y in zip(problem.features, problem.targets)
  ]
  opt = global_optimum(problem.As, problem.mus, problem.weights)
  initial = tff.learning.models.ModelWeights.from_model(model_fn())
  out = {}
  for name, algorithm in built.items():
    engine = engines.InProcessEngine(algorithm)
    state = engine.initialize(initial)
    dists = [np.linalg.norm(np.asarray(initial.trainable[0]).reshape(-1) - opt)]
    for t in range(config.rounds):
      clients = [
        engines.RoundClient(str(i), x, seeds_lib.client_seed(config.seed, t, i, len(data)))
        for i, x in enumerate(data)
      ]
      state = engine.next(state, clients).state
      weights = np.asarray(engine.model_weights(state).trainable[0], np.float64).reshape(-1)
      dists.append(np.linalg.norm(weights - opt))
    out[name] = np.array(dists)
  return out


# -- Output. --------------------------------------------------------------------------------------


def distance_rows(k_values, fedavg, l_values, fedpa, reference_rows) -> list[tuple]:
  """(method, K or l, distance, std, min, max, seeds) of every fixed point: FedAvg's per K (one
  value), FedPA's per l over its sample seeds, then the reference points (one value each)."""
  one = lambda d: (d, 0.0, d, d, 1)  # noqa: E731
  rows = [('fedavg', k, *one(d)) for k, d in zip(k_values, fedavg)]
  rows += [
    ('fedpa', l, r.mean(), r.std(), r.min(), r.max(), len(r)) for l, r in zip(l_values, fedpa)
  ]
  return rows + [(name, '', *one(d)) for name, d in reference_rows]


def write_csv(path, rows: list[tuple]) -> None:
  with publish.atomic_output(path, newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['method', 'K_or_l', 'distance', 'std', 'min', 'max', 'seeds'])
    for method, k_or_l, *stats, seeds in rows:
      writer.writerow([method, k_or_l, *(f'{v:.6g}' for v in stats), seeds])


def write_markdown(path, setup: str, rows: list[tuple], tail=None):
  """`distance_rows` as a table (distances.csv's), under the command, date and code version that
  wrote it, the problem's setup and (with panel (b)) the algorithms' distance over their last
  rounds."""
  labels = {'fedavg': 'FedAvg, K = {}', 'fedpa': 'FedPA, l = {}'}
  shown = []
  for method, k_or_l, dist, std, low, high, seeds in rows:
    label = labels[method].format(k_or_l) if method in labels else method.replace('_', ' ')
    spread = [f'{v:.3g}' for v in (std, low, high)] if method == 'fedpa' else ['', '', '']
    shown.append([label, f'{dist:.4g}', *spread, seeds])
  lines = [
    '# Al-Shedivat et al. 2021, Fig. 1: federated least squares',
    '',
    f'- Command: `{cell_runner.command_line("//reproductions/alshedivat2021_fedpa:least_squares")}`',
    cell_runner.stamp_line(),
    f'- {setup}',
    '',
    'Distance ||x - x*|| of each fixed point to the global optimum (FedPA: mean, std, min and '
    'max over the sample seeds; `distances.csv`):',
    '',
    *publish.markdown_table(('fixed point', 'distance', 'std', 'min', 'max', 'seeds'), shown),
  ]
  if tail:
    lines += ['', tail]
  with publish.atomic_output(path) as f:
    f.write('\n'.join(lines) + '\n')


def plot(
  path, problem, lr, k_values, fedavg, l_values, fedpa, title, rounds=None, config=None
) -> None:
  """Panel (a): distances of the fixed points; panel (b) (if `rounds`, from `run_algorithms`
  with `config`): distance per round."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  panels = 2 if rounds else 1
  fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
  ax = axes[0, 0]
  k_max = max(k_values)
  grid = np.unique(np.round(np.logspace(np.log10(2), np.log10(max(k_max, 2)), 60)).astype(int))
  dense = fedavg_distances(problem, grid, lr)
  label = f'FedAvg, K local GD steps (eta={lr:.3g})'
  if 1 in k_values:
    label += f'; K=1: {fedavg[list(k_values).index(1)]:.0e} (not shown)'
  ax.plot(grid, dense, color='tab:blue', lw=1.2, label=label)
  shown = [(k, v) for k, v in zip(k_values, fedavg) if k > 1]
  ax.plot([k for k, _ in shown], [v for _, v in shown], 'o', color='tab:blue')
  mean = fedpa.mean(axis=1)
  ax.plot(
    l_values,
    mean,
    'o-',
    color='tab:red',
    label=f'FedPA, l posterior samples (mean; band: min-max of {fedpa.shape[1]} seeds)',
  )
  ax.fill_between(l_values, fedpa.min(axis=1), fedpa.max(axis=1), color='tab:red', alpha=0.15)
  bias = fedavg[list(k_values).index(k_max)]
  ax.axhline(bias, color='tab:blue', ls='--', lw=0.8, label=f'FedAvg bias at K={k_max}: {bias:.3g}')
  ax.set_xscale('log')
  ax.set_yscale('log')
  ax.set_xlabel('local computation: K (FedAvg) or l (FedPA)')
  ax.set_ylabel('||fixed point - global optimum||')
  ax.set_title('(a) fixed points', fontsize=10)
  ax.legend(fontsize=8)
  if rounds:
    ax = axes[0, 1]
    samples = config.epochs - 1
    labels = {
      'FedAvg': f'FedAvg, server SGD lr {config.fedavg_server_lr:g}',
      'FedPA': f'FedPA, l={samples} IASG samples, rho={config.rho:g}, server SGD lr '
      f'{config.fedpa_server_lr:g}',
    }
    colors = {'FedAvg': 'tab:blue', 'FedPA': 'tab:red'}
    for name, dists in rounds.items():
      ax.plot(np.arange(len(dists)), dists, color=colors[name], label=labels[name])
    ax.axhline(bias, color='tab:blue', ls='--', lw=0.8, label=f'(a): FedAvg K={k_max}')
    if samples in l_values:
      exact = fedpa[list(l_values).index(samples)].mean()
      ax.axhline(exact, color='tab:red', ls=':', lw=0.8, label=f'(a): FedPA l={samples}, mean')
    ax.set_yscale('log')
    ax.set_xlabel('round (all clients)')
    ax.set_ylabel('||x_t - global optimum||')
    ax.set_title(
      f'(b) the algorithms (in-process engine): E={config.epochs} epochs of SGD, '
      f'B={config.batch_size}, lr {config.client_lr:g}',
      fontsize=10,
    )
    ax.legend(fontsize=8)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  publish.save_figure(fig, path, dpi=120)
  plt.close(fig)


def define_flags() -> None:
  """The script's flags; defined when it runs, not on import (tests import its functions)."""
  flags.DEFINE_string(
    'out',
    'runs/fedpa_least_squares',
    'Output directory (not a committed results folder: see --publish).',
  )
  flags.DEFINE_bool('publish', False, publish.PUBLISH_HELP)
  flags.DEFINE_bool('dry_run', False, 'Check the flags, print where the outputs go; write nothing.')
  flags.DEFINE_integer('dim', 10, 'd, the number of features (no bias).')
  flags.DEFINE_integer('clients', 10, 'Number of clients.')
  flags.DEFINE_integer('problem_seed', 0, 'Seed of the clients data.')
  flags.DEFINE_list('k_values', ['1', '10', '100', '1000'], 'FedAvg local GD steps K.')
  flags.DEFINE_list('l_values', ['2', '5', '10', '20', '50', '100', '500'], 'FedPA samples l.')
  flags.DEFINE_integer('seeds', 10, 'FedPA sample seeds averaged over (seeds 0..seeds-1).')
  flags.DEFINE_float('rho', 1.0, "FedPA's shrinkage rho (the paper's form, Theorem 3).")
  flags.DEFINE_float('temperature', 0.1, 'c: each client samples N(mu_i, c A_i^-1).')
  flags.DEFINE_integer('rounds', 30, 'Rounds of panel (b), the algorithms (0: no panel (b)).')
  flags.DEFINE_integer('epochs', 51, 'Panel (b): local epochs (FedPA: l = epochs - 1 samples).')


# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = (
  'dim',
  'clients',
  'problem_seed',
  'k_values',
  'l_values',
  'seeds',
  'rho',
  'temperature',
  'rounds',
  'epochs',
)


def reference_rows(problem: Problem, opt: np.ndarray) -> list[tuple[str, float]]:
  """The distances to x* of the clients' weighted mean of local optima and of FedPA's fixed point
  from the exact moments (Sigma_i^-1 = A_i / c)."""
  average = problem.weights @ np.array(problem.mus) / problem.weights.sum()
  exact = fedpa_fixed_point(
    [a / FLAGS.temperature for a in problem.As], problem.mus, problem.weights
  )  # Sigma_i^-1 = A_i / c
  return [
    ('weighted_mean_of_local_optima', float(np.linalg.norm(average - opt))),
    ('fedpa_exact_moments', float(np.linalg.norm(exact - opt))),
  ]


def setup_text(problem: Problem, opt: np.ndarray, lr: float) -> str:
  """One line on the problem and the settings, for stdout and the report."""
  eig = np.array([np.linalg.eigvalsh(a) for a in problem.As])
  return (
    f'{FLAGS.clients} clients, d={FLAGS.dim}, n_i in [{int(problem.weights.min())}, '
    f'{int(problem.weights.max())}], eigenvalues of A_i in [{eig.min():.3g}, {eig.max():.3g}]; '
    f'||x*|| = {np.linalg.norm(opt):.3g}; FedAvg local GD eta = {lr:.3g}; FedPA rho = {FLAGS.rho}, '
    f'temperature c = {FLAGS.temperature}, {FLAGS.seeds} seeds'
  )


def print_distances(setup: str, k_values, fedavg, l_values, fedpa, references) -> None:
  """The setup and the fixed points' distances to x*, as a table on stdout."""
  print(setup)
  print(f'{"method":<8} {"K or l":>7} {"||x - x*||":>11} {"std":>9} {"min":>9} {"max":>9}')
  for k, dist in zip(k_values, fedavg):
    print(f'{"FedAvg":<8} {k:>7} {dist:>11.4g}')
  for l, row in zip(l_values, fedpa):
    print(
      f'{"FedPA":<8} {l:>7} {row.mean():>11.4g} {row.std():>9.3g} {row.min():>9.3g} {row.max():>9.3g}'
    )
  for name, dist in references:
    print(f'{name}: {dist:.4g}')


def run_panel_b(problem: Problem, out: str) -> tuple[dict[str, np.ndarray], AlgorithmsConfig, str]:
  """Panel (b): both algorithms for --rounds rounds (`run_algorithms`), each round's distance to
  x* into rounds.csv; returns (the distances by algorithm, their config, the report's line)."""
  config = AlgorithmsConfig(rounds=FLAGS.rounds, epochs=FLAGS.epochs)
  rounds = run_algorithms(problem, config)
  with publish.atomic_output(os.path.join(out, 'rounds.csv'), newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', *rounds])
    for t, row in enumerate(zip(*rounds.values())):
      writer.writerow([t, *(f'{v:.6g}' for v in row)])
  tail = max(config.rounds // 3, 1)
  summary = (
    f'Panel (b), the algorithms, {config.rounds} rounds ({config}; `rounds.csv`): '
    f'||x_t - x*|| averaged over the last {tail} rounds: '
    + ', '.join(f'{name} {dists[-tail:].mean():.4g}' for name, dists in rounds.items())
  )
  print(summary)
  return rounds, config, summary


def main(argv):
  if len(argv) > 1:
    print(f'least_squares: error: unexpected arguments {argv[1:]}', file=sys.stderr)
    return 2
  try:
    out = publish.output_from_flags(
      'reproductions.alshedivat2021_fedpa.least_squares', FLAGS, SETTINGS
    )
  except publish.PublishError as e:
    print(f'least_squares: error: {e}', file=sys.stderr)
    return 2
  if FLAGS.dry_run:
    print(
      f'would write distances.csv, rounds.csv, least_squares.md and fedpa_least_squares.png '
      f'into {out}'
    )
    return 0
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  tf.get_logger().setLevel('ERROR')  # one trace per l is expected: no retracing warnings
  logging.set_verbosity(logging.WARNING)  # nor TFF's model-building info lines
  start = time.time()
  k_values = [int(k) for k in FLAGS.k_values]
  l_values = [int(v) for v in FLAGS.l_values]
  problem = make_problem(FLAGS.problem_seed, FLAGS.dim, FLAGS.clients)
  opt = global_optimum(problem.As, problem.mus, problem.weights)
  lr = fedavg_lr(problem.As)
  fedavg = fedavg_distances(problem, k_values, lr)
  fedpa = fedpa_distances(problem, l_values, FLAGS.rho, FLAGS.temperature, range(FLAGS.seeds))
  references = reference_rows(problem, opt)
  setup = setup_text(problem, opt, lr)
  print_distances(setup, k_values, fedavg, l_values, fedpa, references)
  os.makedirs(out, exist_ok=True)
  distances = distance_rows(k_values, fedavg, l_values, fedpa, references)
  write_csv(os.path.join(out, 'distances.csv'), distances)
  title = (
    f'Federated least squares: {FLAGS.clients} heterogeneous clients, d={FLAGS.dim}, global '
    f'optimum x*\n(a) FedPA from l exact samples of N(mu_i, {FLAGS.temperature} A_i^-1) per '
    f'client, shrinkage rho={FLAGS.rho}, delta by the DP of App. C'
  )
  rounds, config, summary = None, None, None
  if FLAGS.rounds > 0:
    rounds, config, summary = run_panel_b(problem, out)
  write_markdown(os.path.join(out, 'least_squares.md'), setup, distances, summary)
  png = os.path.join(out, 'fedpa_least_squares.png')
  plot(png, problem, lr, k_values, fedavg, l_values, fedpa, title, rounds, config)
  print(f'wrote {png} ({time.time() - start:.1f} s)')


if __name__ == '__main__':
  define_flags()
  cell_runner.app_run(main)
