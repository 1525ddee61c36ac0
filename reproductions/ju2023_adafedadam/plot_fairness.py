"""Fairness figures of Ju et al. (AdaFedAdam) from the trainer's run directories.

  python -m reproductions.ju2023_adafedadam.plot_fairness runs/fairness_plots \\
      FedAvg=runs/fedavg_s1:runs/fedavg_s2 'AdaFedAdam(alpha=2)=runs/ada2_s1:runs/ada2_s2' \\
      [--round=N] [--setup=SYNTHETIC]

Ju et al. "Accelerating Fair Federated Learning: Adaptive Federated Adam" (AdaFedAdam, TMLR
submission, 2023), Fig. 2 and Fig. 3. Each LABEL=RUN_DIR[:RUN_DIR...] is one algorithm (a
group), its runs the seeds. Written to OUT_DIR:

* density.png: Fig. 2 bottom, the probability density of the clients' local test accuracy at
  the end of training: a Gaussian kernel density estimate (Silverman's bandwidth) of the
  accuracies in %, pooled over the group's runs.
* curves.png: Fig. 2 top and middle, the average and the worst-30% average of the local test
  accuracy over rounds (metrics.csv's eval_client_accuracy_mean/_worst30): the mean over the
  group's runs, shaded from their minimum to their maximum.
* pareto.png: Fig. 3 right, average local test error (x) against the RSD (std / mean) of the
  local test errors 1 - accuracy (y), each the mean over the group's runs. Groups labelled
  `NAME(alpha=A)` form NAME's front: joined in the order of alpha, each point annotated with
  its alpha; every other group is one marker.

One line per group is printed with its fairness_stats at that round (mean over runs, +- their
sample standard deviation where there are several), the columns of the paper's Tables 1-3.

Per-client accuracies come from client_eval/round_NNNNN.csv (header client_id,loss,accuracy),
written on evaluation rounds; the latest round present is used unless --round says otherwise.

OUT_DIR may not be inside a committed results folder (reproductions/<paper>/results/): the
committed figures are reproduce_synthetic's, rewritten only by its --publish (`reproductions.publish`);
such an OUT_DIR exits 2 before anything is read or written.
"""

import argparse
from collections.abc import Mapping
from collections.abc import Sequence
import math
import os
import re
import sys

import matplotlib
import numpy as np
import pandas as pd

from reproductions import publish

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

MEAN_COLUMN = 'eval_client_accuracy_mean'
WORST30_COLUMN = 'eval_client_accuracy_worst30'
ROUND_COLUMNS = ('round_num', 'round')  # the trainer writes round_num
MIN_BANDWIDTH = 0.5  # percentage points: identical accuracies still give a finite density
_CLIENT_EVAL = re.compile(r'round_(\d+)\.csv')
_ALPHA = re.compile(r'\(\s*alpha\s*=\s*([^)]*)\)')


def _client_eval_rounds(run_dir: str) -> dict[int, str]:
  directory = os.path.join(run_dir, 'client_eval')
  if not os.path.isdir(directory):
    return {}
  rounds = {}
  for name in os.listdir(directory):
    match = _CLIENT_EVAL.fullmatch(name)
    if match:
      rounds[int(match.group(1))] = os.path.join(directory, name)
  return rounds


def client_accuracies(run_dir: str | os.PathLike, round_num: int | None = None) -> np.ndarray:
  """The per-client accuracies in [0, 1] of one evaluation round of a run.

  Args:
    run_dir: a run directory of the trainer, with client_eval/round_NNNNN.csv files.
    round_num: the evaluation round; None for the latest one present.

  Returns:
    A float64 array, one entry per client, in the file's order.

  Raises:
    ValueError: the directory does not exist, has no client_eval files, lacks that round, or
      the file has no accuracy values.
  """
  run_dir = os.fspath(run_dir)
  if not os.path.isdir(run_dir):
    raise ValueError(f'{run_dir}: no such run directory')
  rounds = _client_eval_rounds(run_dir)
  if not rounds:
    raise ValueError(
      f'{run_dir}: no client_eval/round_NNNNN.csv files (no per-client evaluation was written)'
    )
  if round_num is None:
    round_num = max(rounds)
  elif round_num not in rounds:
    raise ValueError(
      f'{run_dir}: no client_eval file for round {round_num} (rounds present: '
      f'{min(rounds)}..{max(rounds)}, {len(rounds)} files)'
    )
  path = rounds[round_num]
  try:
    frame = pd.read_csv(path)
  except pd.errors.EmptyDataError as e:
    raise ValueError(f'{path}: empty file') from e
  if 'accuracy' not in frame or frame.empty:
    raise ValueError(f'{path}: no accuracy column or no clients')
  return frame['accuracy'].to_numpy(np.float64)


def fairness_stats(accuracies: np.ndarray) -> dict[str, float]:
  """The paper's fairness numbers of one set of per-client accuracies in [0, 1].

  Returns:
    avg: the mean accuracy, in %.
    std: the population standard deviation of the accuracies, in %.
    worst30: the mean of the ceil(0.3 K) (at least one) lowest of the K accuracies, in %
      (as eval_client_accuracy_worst30 in metrics.csv).
    error_mean: the mean of the errors e_k = 1 - accuracy_k.
    error_rsd: std(e) / mean(e) (population std), 0 where the mean error is 0.

  Raises:
    ValueError: no accuracies.
  """
  accuracies = np.sort(np.asarray(accuracies, np.float64).ravel())
  if accuracies.size == 0:
    raise ValueError('fairness_stats needs at least one accuracy')
  worst = max(1, math.ceil(0.3 * accuracies.size))
  errors = 1.0 - accuracies
  error_mean = float(errors.mean())
  return {
    'avg': 100.0 * float(accuracies.mean()),
    'std': 100.0 * float(accuracies.std()),
    'worst30': 100.0 * float(accuracies[:worst].mean()),
    'error_mean': error_mean,
    'error_rsd': float(errors.std()) / error_mean if error_mean > 0 else 0.0,
  }


def silverman_bandwidth(samples: np.ndarray, floor: float = MIN_BANDWIDTH) -> float:
  """Silverman's rule of thumb 0.9 min(sigma, IQR / 1.34) n^(-1/5), at least `floor`.

  sigma is the sample standard deviation; where the IQR is 0 (most samples equal) sigma alone
  is used, and where both are 0 the floor is.
  """
  samples = np.asarray(samples, np.float64).ravel()
  if samples.size == 0:
    raise ValueError('silverman_bandwidth needs at least one sample')
  sigma = float(samples.std(ddof=1)) if samples.size > 1 else 0.0
  q75, q25 = np.percentile(samples, [75, 25])
  spread = min(sigma, (q75 - q25) / 1.34) if q75 > q25 else sigma
  return max(0.9 * spread * samples.size ** (-0.2), floor)


def kernel_density(
  samples: np.ndarray, grid: np.ndarray, bandwidth: float | None = None
) -> np.ndarray:
  """Gaussian kernel density estimate of `samples` at the points of `grid`.

  f(x) = 1 / (n h) sum_i phi((x - x_i) / h), phi the standard normal density, h the bandwidth
  (default: silverman_bandwidth). It integrates to 1 over the real line.
  """
  samples = np.asarray(samples, np.float64).ravel()
  if bandwidth is None:
    bandwidth = silverman_bandwidth(samples)
  if not bandwidth > 0:
    raise ValueError(f'bandwidth must be positive, got {bandwidth}')
  z = (np.asarray(grid, np.float64)[..., None] - samples) / bandwidth
  return np.exp(-0.5 * z**2).sum(axis=-1) / (samples.size * bandwidth * math.sqrt(2 * math.pi))


def _save(fig, path: str | os.PathLike) -> None:
  fig.tight_layout()
  directory = os.path.dirname(os.fspath(path))
  if directory:
    os.makedirs(directory, exist_ok=True)
  publish.save_figure(fig, os.fspath(path), dpi=120)


def _prefixed(setup: str | None, title: str) -> str:
  return f'{setup}: {title}' if setup else title


def density_figure(
  groups: Mapping[str, Sequence[np.ndarray]], path: str | os.PathLike, *, setup: str | None = None
) -> None:
  """Fig. 2 bottom: one density curve per label of its accuracies (in [0, 1]) pooled over runs.

  Args:
    groups: label -> the per-client accuracies of each of its runs.
    path: the PNG to write.
    setup: a name prefixed to the title (the paper's 'FEMNIST: ...').
  """
  grid = np.linspace(0.0, 100.0, 501)
  fig, ax = plt.subplots(figsize=(6, 4))
  try:
    for label, runs in groups.items():
      if not runs:
        raise ValueError(f'density_figure: group {label!r} has no runs')
      pooled = 100.0 * np.concatenate([np.asarray(r, np.float64).ravel() for r in runs])
      ax.plot(grid, kernel_density(pooled, grid), lw=1.5, label=label)
    ax.set_xlim(0, 100)
    ax.set_ylim(bottom=0)
    ax.set_xlabel('Accuracy / %')
    ax.set_ylabel('Density')
    ax.set_title(_prefixed(setup, 'Local accuracy distribution'))
    ax.legend()
    _save(fig, path)
  finally:
    plt.close(fig)


def _round_column(frame: pd.DataFrame) -> str:
  for column in ROUND_COLUMNS:
    if column in frame:
      return column
  raise ValueError(f'metrics have no round column (one of {", ".join(ROUND_COLUMNS)})')


def eval_curve(frames: Sequence[pd.DataFrame], column: str) -> pd.DataFrame:
  """One metrics.csv column over the runs' evaluation rounds: mean, min and max over runs.

  Rows where the column is empty (not evaluation rounds) are dropped; the rounds kept are those
  evaluated in every run, so that each point is a mean over all of them.

  Returns:
    A DataFrame indexed by round with columns mean, min and max.
  """
  if not frames:
    raise ValueError('eval_curve needs at least one run')
  series = []
  for frame in frames:
    if column not in frame:
      raise ValueError(f'metrics have no {column} column')
    round_column = _round_column(frame)
    rows = frame.dropna(subset=[column]).drop_duplicates(subset=round_column, keep='last')
    rounds = rows[round_column].astype(int)
    series.append(pd.Series(rows[column].to_numpy(np.float64), index=rounds.to_numpy()))
  runs = pd.concat(series, axis=1, join='inner').sort_index()
  if runs.empty:
    raise ValueError(f'no round has {column} in every run')
  return pd.DataFrame({'mean': runs.mean(axis=1), 'min': runs.min(axis=1), 'max': runs.max(axis=1)})


def curves_figure(
  groups: Mapping[str, Sequence[pd.DataFrame]],
  path: str | os.PathLike,
  *,
  setup: str | None = None,
) -> None:
  """Fig. 2 top and middle: average and worst-30% client accuracy (%) against round.

  Args:
    groups: label -> the metrics.csv frame of each of its runs.
    path: the PNG to write.
    setup: a name prefixed to the titles.
  """
  panels = (
    (MEAN_COLUMN, 'Accuracy / %', 'Test accuracy'),
    (WORST30_COLUMN, 'Accuracy of worst 30% / %', 'Test accuracy of worst 30%'),
  )
  fig, axes = plt.subplots(1, 2, figsize=(12, 4))
  try:
    for ax, (column, ylabel, title) in zip(axes, panels):
      for i, (label, frames) in enumerate(groups.items()):
        curve = 100.0 * eval_curve(frames, column)
        color = f'C{i % 10}'
        ax.plot(curve.index, curve['mean'], color=color, lw=1.2, label=label)
        ax.fill_between(curve.index, curve['min'], curve['max'], color=color, alpha=0.2, lw=0)
      ax.set_xlabel('Num. of rounds')
      ax.set_ylabel(ylabel)
      ax.set_title(_prefixed(setup, title))
    axes[0].legend()
    _save(fig, path)
  finally:
    plt.close(fig)


def alpha_of(label: str) -> float | None:
  """The alpha of a label of the form NAME(alpha=A), None for other labels."""
  match = _ALPHA.search(label)
  if match is None:
    return None
  try:
    return float(match.group(1))
  except ValueError:
    raise ValueError(f'{label!r}: alpha {match.group(1)!r} is not a number') from None


def pareto_figure(
  points: Sequence[Mapping],
  path: str | os.PathLike,
  *,
  setup: str | None = None,
  axes: tuple[str, str, str, str] = ('error_mean', 'error_rsd', 'Error', 'RSD of Error'),
) -> None:
  """Fig. 3 right: average local test error (x) against its RSD (y).

  `axes` = (x key, y key, x label, y label) plots other columns of the points the same way
  (e.g. average accuracy against its standard deviation).

  Args:
    points: dicts with label, error_mean, error_rsd and an optional alpha (float). Points with
      an alpha form a front per name (the label without its '(alpha=...)'): sorted by alpha,
      joined by a line and annotated 'alpha=A'. Every other point is one marker, its label in
      the legend.
    path: the PNG to write.
    setup: a name prefixed to the title.
  """
  x_key, y_key, x_label, y_label = axes
  fronts, singles, colors = {}, [], {}  # colors in order of first appearance
  for point in points:
    if point.get('alpha') is None:
      singles.append(point)
      colors[point['label']] = f'C{len(colors) % 10}'
    else:
      name = _ALPHA.sub('', point['label']).strip() or point['label']
      fronts.setdefault(name, []).append(point)
      colors.setdefault(name, f'C{len(colors) % 10}')
  fig, ax = plt.subplots(figsize=(6, 4.5))
  try:
    for name, front in fronts.items():
      front = sorted(front, key=lambda p: float(p['alpha']))
      x = [p[x_key] for p in front]
      y = [p[y_key] for p in front]
      ax.plot(x, y, marker='o', color=colors[name], lw=1.2, label=name)
      for p in front:
        ax.annotate(
          f'alpha={float(p["alpha"]):g}',
          (p[x_key], p[y_key]),
          textcoords='offset points',
          xytext=(4, 4),
          fontsize=8,
        )
    markers = 'sD^v<>Pp*Xh'
    for i, p in enumerate(singles):
      marker = markers[i % len(markers)]
      x, y = p[x_key], p[y_key]
      ax.plot(x, y, ls='none', marker=marker, color=colors[p['label']], label=p['label'])
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(_prefixed(setup, 'Pareto front'))
    ax.legend()
    _save(fig, path)
  finally:
    plt.close(fig)


def parse_group(spec: str) -> tuple[str, float | None, list[str]]:
  """LABEL=RUN_DIR[:RUN_DIR...] -> (label, alpha of the label or None, run directories).

  The label ends at the first '=' outside parentheses, so 'AdaFedAdam(alpha=2)=runs/a' works.
  """
  depth = 0
  for i, char in enumerate(spec):
    if char == '(':
      depth += 1
    elif char == ')':
      depth = max(0, depth - 1)
    elif char == '=' and depth == 0:
      label, dirs = spec[:i].strip(), spec[i + 1 :].split(':')
      if not label or not all(dirs):
        break
      return label, alpha_of(label), dirs
  raise ValueError(f'{spec!r}: expected LABEL=RUN_DIR[:RUN_DIR...]')


class _ArgumentParser(argparse.ArgumentParser):
  def error(self, message):
    self.exit(2, f'{self.prog}: error: {message}\n')


_PERCENT_STATS = ('avg', 'std', 'worst30')


def _mean_and_spread(key: str, values: list[float]) -> str:
  digits = 2 if key in _PERCENT_STATS else 4
  text = f'{key}={np.mean(values):.{digits}f}'
  if len(values) > 1:
    text += f'+-{np.std(values, ddof=1):.{digits}f}'
  return text


def _read_metrics(run_dir: str) -> pd.DataFrame:
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.isfile(path):
    raise ValueError(f'{run_dir}: no metrics.csv')
  frame = pd.read_csv(path)
  missing = [c for c in (MEAN_COLUMN, WORST30_COLUMN) if c not in frame]
  if missing:
    raise ValueError(f'{path}: no {" or ".join(missing)} column (no per-client evaluation)')
  return frame


def plot_groups(
  out_dir: str, specs: Sequence[str], round_num: int | None = None, setup: str | None = None
) -> list[str]:
  """The CLI: loads each LABEL=RUN_DIR[:RUN_DIR...] group, writes the three figures.

  Returns:
    One line per group: its runs, clients and fairness_stats (mean over runs, +- the sample
    standard deviation over runs where there are several).
  """
  groups = [parse_group(spec) for spec in specs]
  labels = [label for label, _, _ in groups]
  if len(set(labels)) != len(labels):
    raise ValueError(f'labels must be distinct, got {", ".join(labels)}')
  accuracies, metrics, points, lines = {}, {}, [], []
  for label, alpha, dirs in groups:
    accuracies[label] = [client_accuracies(d, round_num) for d in dirs]
    metrics[label] = [_read_metrics(d) for d in dirs]
    stats = [fairness_stats(a) for a in accuracies[label]]
    points.append(
      {
        'label': label,
        'alpha': alpha,
        'error_mean': float(np.mean([s['error_mean'] for s in stats])),
        'error_rsd': float(np.mean([s['error_rsd'] for s in stats])),
      }
    )
    numbers = ' '.join(_mean_and_spread(key, [s[key] for s in stats]) for key in stats[0])
    clients = ','.join(str(n) for n in sorted({a.size for a in accuracies[label]}))
    lines.append(f'{label}: runs={len(dirs)} clients={clients} {numbers}')
  os.makedirs(out_dir, exist_ok=True)
  density_figure(accuracies, os.path.join(out_dir, 'density.png'), setup=setup)
  curves_figure(metrics, os.path.join(out_dir, 'curves.png'), setup=setup)
  pareto_figure(points, os.path.join(out_dir, 'pareto.png'), setup=setup)
  return lines


def main(argv: Sequence[str] | None = None) -> int:
  parser = _ArgumentParser(prog='plot_fairness', description=__doc__.split('\n', 1)[0])
  parser.add_argument('out_dir', help='Directory for density.png, curves.png and pareto.png.')
  parser.add_argument('groups', nargs='+', metavar='LABEL=RUN_DIR[:RUN_DIR...]')
  parser.add_argument(
    '--round', type=int, default=None, help='Evaluation round (default: the latest of each run).'
  )
  parser.add_argument('--setup', default=None, help="Title prefix, e.g. 'SYNTHETIC'.")
  args = parser.parse_args(argv)
  try:
    publish.refuse_committed([os.path.abspath(args.out_dir)], 'OUT_DIR')
    lines = plot_groups(args.out_dir, args.groups, args.round, args.setup)
  except (ValueError, OSError) as e:
    print(f'plot_fairness: error: {e}'.replace('\n', ' '), file=sys.stderr)
    return 2
  for line in lines:
    print(line)
  return 0


if __name__ == '__main__':
  sys.exit(main())
