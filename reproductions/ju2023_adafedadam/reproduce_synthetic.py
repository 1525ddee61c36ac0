"""Ju et al. (AdaFedAdam) Table 5, Synthetic row: six algorithms, 3 seeds, local fairness metrics.

  .venv/bin/python -m reproductions.ju2023_adafedadam.reproduce_synthetic --rounds=1000 --seeds=1,2,3 --parallel=2
  .venv/bin/python -m reproductions.ju2023_adafedadam.reproduce_synthetic --publish --rounds=1000 \\
      --seeds=1,2,3 --parallel=2   # rewrites the committed results/table5/synthetic (`reproductions.publish`)

Setup (App. C.1): LEAF Synthetic(1, 1) (task
`synthetic`: 100 clients with power-law sizes, x in R^60, 10 classes, softmax regression;
each client's data split 80/20 into local train/test), every client in every round (Algorithm
2 broadcasts to all clients; the paper gives no participation rate), local SGD lr 0.01, batch
10, E = 1, --rounds rounds, evaluation every --rounds_per_eval rounds on each client's local
test data. Servers: FedAvg SGD lr 1; FedAdam Adam lr 0.001, beta (0.9, 0.999), eps 1e-8
(Adam's defaults; the paper gives no eps); q-FedAvg q = 1, lr 1; FedNova SGD lr 1; FedProx SGD
lr 1 with mu tuned over {0.001, 0.005, 0.01, 0.1, 1} on the first seed (the mu whose final
average local accuracy is highest, over the mean of the last 5 evaluations, `avg_last5evals`); AdaFedAdam with
AdaAdam's defaults (eta 0.001, beta (0.9, 0.999), eps 1e-8) and alpha = 1. A Pareto sweep on
the first seed adds AdaFedAdam alpha in --pareto_alphas and q-FedAvg q in --pareto_qs.

Why Synthetic(1, 1): the generator of Li et al. (FedProx), cited by q-FFL and LEAF, offers
(0, 0), (0.5, 0.5) and (1, 1); Ju et al. do not say which. (1, 1) is the most heterogeneous
and the one the fair-FL papers (q-FFL) report; alpha does not change the labels anyway
(tff_adaptive.datasets.synthetic, datasets/synthetic.py), and each seed generates its own data set, model initialisation and
shuffling.

--data_set=fmnist_silo runs the cross-silo setup instead (`paper_setup.FMNIST_SILO`): the paper's
Cifar10 setup (16 clients, Dirichlet(0.1) labels, all of them every round, local SGD lr 0.02,
batch 32, E = 1, 200 rounds) on Fashion-MNIST with the fmnist CNN, beside the published Cifar10
row (its ranking; Fashion-MNIST's accuracies are another data set's). Its table is
table5_fmnist_silo.{md,csv}.

Every cell is one `run.federated_trainer` process (`reproductions.cell_runner`: resumable, progress with
ETA, one TF thread per trainer). Afterwards --out (default runs/ju_synthetic/report; with
--publish, reproductions/ju2023_adafedadam/results/table5/synthetic, or synthetic_leaf and
fmnist_silo for those data sets) gets table5_synthetic.{md,csv} (published
Avg / STD / Worst-30% beside ours, mean +- std over seeds, and the difference),
fedprox_mu.csv (the tuning), and density.png, curves.png, pareto.png (error vs RSD of error,
Fig. 3 right) and pareto_std.png (average vs STD of accuracy) (`plot_fairness.py`).
"""

import csv
import dataclasses
import math
import os
import shlex
import statistics
import sys

from absl import flags
from absl import logging
import pandas as pd

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.ju2023_adafedadam import candidates
from reproductions.ju2023_adafedadam import paper_setup
from reproductions.ju2023_adafedadam import plot_fairness
from reproductions.ju2023_adafedadam.published import PUBLISHED
from reproductions.ju2023_adafedadam.published import PUBLISHED_CIFAR10
from tff_adaptive.loop import targets

flags.DEFINE_integer(
  'rounds', 1000, "Rounds per cell (default: the paper's, 1000; 200 with --data_set=fmnist_silo)."
)
flags.DEFINE_list('seeds', ['1', '2', '3'], 'Seeds; FedProx mu and the Pareto sweep use the first.')
flags.DEFINE_list('fedprox_mus', ['0.001', '0.005', '0.01', '0.1', '1'], 'FedProx mu grid.')
flags.DEFINE_list('pareto_alphas', ['2', '4', '8'], 'AdaFedAdam alphas of the Pareto sweep.')
flags.DEFINE_list('pareto_qs', ['2', '4'], 'q-FedAvg qs of the Pareto sweep.')
flags.DEFINE_integer('parallel', 2, 'Trainers at once (each on one TF thread).')
flags.DEFINE_enum(
  'engine',
  'inprocess',
  ['inprocess', 'vectorised'],
  "The trainer's --engine: inprocess (each round's clients one after another; the committed "
  'results) or vectorised (side by side; the same rounds to float rounding, faster: README).',
)
flags.DEFINE_integer(
  'clients_per_chunk',
  10,
  "With --engine=vectorised: the trainer's --clients_per_chunk (clients trained at a time, "
  'grouped by their number of local steps; 10 was fastest for these power-law sizes).',
)
flags.DEFINE_enum(
  'data_set',
  'synthetic_1_1',
  [*candidates.DATA_SETS, 'fmnist_silo'],
  "The Synthetic data set (`candidates`; the committed table: synthetic_1_1, FedProx's "
  "Synthetic(1, 1)), or fmnist_silo: the paper's cross-silo (Cifar10) setup on Fashion-MNIST "
  '(16 clients, Dir(0.1)). Another than synthetic_1_1 runs in '
  'runs/ju_table5_<data_set>[_vectorised] and publishes, where publish.json records it, as '
  'entry reproduce_synthetic_<data_set>.',
)
flags.DEFINE_integer(
  'clients_per_round',
  100,
  'Clients per round (default: all of them, 100; 16 with --data_set=fmnist_silo).',
)
flags.DEFINE_integer('rounds_per_eval', 10, 'Evaluate every this many rounds.')
flags.DEFINE_integer('rounds_per_checkpoint', 100, 'Checkpoint every this many rounds.')
cell_runner.define_output_flags(
  'runs/ju_synthetic',
  runs_dir_help='Where the cells run (with --engine=vectorised the default is '
  'runs/ju_synthetic_vectorised: a run directory records its engine, so the two engines keep '
  'their cells apart).',
)
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = (
  'rounds',
  'seeds',
  'fedprox_mus',
  'pareto_alphas',
  'pareto_qs',
  'clients_per_round',
  'rounds_per_eval',
  'engine',
  'data_set',
)
VECTORISED_RUNS_DIR = 'runs/ju_synthetic_vectorised'
DEFAULT_DATA_SET = 'synthetic_1_1'
FMNIST_SILO = 'fmnist_silo'
LAST_EVALS = 5
# fedprox_mu.csv's column of the mean of the last LAST_EVALS evaluations (`targets.window_column`).
AVG_LAST = targets.window_column('avg', LAST_EVALS, 'evals')

ARGS = paper_setup.ARGS


UsageError = cell_runner.UsageError


@dataclasses.dataclass(frozen=True)
class Cell:
  name: str
  algorithm: str  # a key of ARGS
  seed: int
  param: float | None = None  # mu, q or alpha

  @property
  def label(self) -> str:
    if self.algorithm == 'AdaFedAdam' and self.param is not None:
      return f'AdaFedAdam(alpha={self.param:g})'
    if self.algorithm == 'q-FedAvg' and self.param is not None:
      return f'q-FedAvg(q={self.param:g})'
    if self.algorithm == 'FedProx' and self.param is not None:
      return f'FedProx(mu={self.param:g})'
    return self.algorithm


def setup() -> paper_setup.Setup:
  """The setup --data_set names."""
  if FLAGS.data_set == FMNIST_SILO:
    return paper_setup.FMNIST_SILO
  return paper_setup.synthetic_setup(
    candidates.LABELS[FLAGS.data_set],
    ('--task=synthetic', *candidates.data_set_flags(FLAGS.data_set)),
  )


def published_row() -> dict[str, tuple[float, float, float]]:
  """The published Table 5 row set beside ours (`Setup.published_label`)."""
  return PUBLISHED_CIFAR10 if FLAGS.data_set == FMNIST_SILO else PUBLISHED


def _slug(algorithm: str) -> str:
  return algorithm.lower().replace('-', '')


def _numbers(name: str, texts: list[str], integer: bool = False) -> list:
  values = []
  for text in texts:
    try:
      value = int(text) if integer else float(text)
    except ValueError:
      raise UsageError(f'--{name}: {text!r} is not a number') from None
    if value < 0:
      raise UsageError(f'--{name}: {text!r} must be >= 0')
    values.append(value)
  return list(dict.fromkeys(values))


def seeds() -> list[int]:
  values = _numbers('seeds', FLAGS.seeds, integer=True)
  if not values:
    raise UsageError('--seeds: give at least one seed')
  return values


def main_cells(mu: float | None) -> list[Cell]:
  """The table's cells: FedProx with the tuned mu (None: not yet known, left out)."""
  cells = []
  for seed in seeds():
    for algorithm in ARGS:
      param = {'q-FedAvg': 1.0, 'AdaFedAdam': 1.0, 'FedProx': mu}.get(algorithm)
      if algorithm == 'FedProx' and mu is None:
        continue
      name = f'{_slug(algorithm)}_seed{seed}'
      if algorithm == 'FedProx':
        name = f'fedprox_mu{mu:g}_seed{seed}'
      cells.append(Cell(name, algorithm, seed, param))
  return cells


def tuning_cells() -> list[Cell]:
  seed = seeds()[0]
  mus = _numbers('fedprox_mus', FLAGS.fedprox_mus)
  if not mus:
    raise UsageError('--fedprox_mus: give at least one mu')
  return [Cell(f'fedprox_mu{mu:g}_seed{seed}', 'FedProx', seed, mu) for mu in mus]


def pareto_cells() -> list[Cell]:
  seed = seeds()[0]
  cells = [
    Cell(f'adafedadam_alpha{a:g}_seed{seed}', 'AdaFedAdam', seed, a)
    for a in _numbers('pareto_alphas', FLAGS.pareto_alphas)
    if a != 1.0
  ]
  cells += [
    Cell(f'qfedavg_q{q:g}_seed{seed}', 'q-FedAvg', seed, q)
    for q in _numbers('pareto_qs', FLAGS.pareto_qs)
    if q != 1.0
  ]
  return cells


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  args = [
    *setup().task_args,
    f'--engine={FLAGS.engine}',
    *setup().client_args,
    f'--clients_per_round={FLAGS.clients_per_round}',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *ARGS[cell.algorithm],
  ]
  if FLAGS.engine == 'vectorised':
    args.append(f'--clients_per_chunk={FLAGS.clients_per_chunk}')
  args += paper_setup.param_flags(cell.algorithm, cell.param)
  return [sys.executable, '-m', 'run.federated_trainer', *args]


# -- Results. --------------------------------------------------------------------------------


@dataclasses.dataclass
class CellResult:
  rounds: int = 0
  avg: float | None = None  # % at the last evaluation
  std: float | None = None
  worst30: float | None = None
  last5_avg: float | None = None  # mean of the last LAST_EVALS evaluations' averages, %
  pooled: float | None = None  # accuracy on the union of the local test sets (example-weighted)


def cell_result(runs_dir: str, cell: Cell) -> CellResult:
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  result = CellResult(rounds=cell_runner.last_round(rows))
  evaluated = [
    r for r in rows if cell_runner.to_float(r.get('eval_client_accuracy_mean')) is not None
  ]
  evaluated.sort(key=lambda r: cell_runner.to_float(r['round_num']))
  if evaluated:
    last = evaluated[-1]
    pct = lambda key, row=last: 100 * cell_runner.to_float(row[key])
    result.avg = pct('eval_client_accuracy_mean')
    result.std = pct('eval_client_accuracy_std')
    result.worst30 = pct('eval_client_accuracy_worst30')
    result.pooled = pct('eval_accuracy')
    result.last5_avg = statistics.mean(
      100 * cell_runner.to_float(r['eval_client_accuracy_mean']) for r in evaluated[-LAST_EVALS:]
    )
  return result


def tuned_mu(runs_dir: str) -> tuple[float | None, list[dict]]:
  """The mu of the highest mean-of-the-last-5-evaluations average local accuracy (AVG_LAST)
  among the tuning cells that ran all rounds, once every other one has diverged (None while
  some are still to run, or if all diverged)."""
  rows = []
  for cell in tuning_cells():
    r = cell_result(runs_dir, cell)
    rows.append(
      {
        'mu': cell.param,
        'seed': cell.seed,
        'rounds': r.rounds,
        AVG_LAST: r.last5_avg,
        'avg': r.avg,
        'worst30': r.worst30,
      }
    )
  done = [r for r in rows if r['rounds'] >= FLAGS.rounds and r[AVG_LAST] is not None]
  diverged = [
    c
    for c in tuning_cells()
    if (cell_runner.read_status(runs_dir, c) or {}).get('exit_code') == cell_runner.EXIT_DIVERGED
  ]
  if not done or len(done) + len(diverged) < len(rows):  # a mu that diverged is not chosen
    return None, rows
  return max(done, key=lambda r: r[AVG_LAST])['mu'], rows


def table(cells: list[Cell], results: dict[str, CellResult]) -> list[dict]:
  rows = []
  for algorithm, published in published_row().items():
    group = [
      results[c.name]
      for c in cells
      if c.algorithm == algorithm and results[c.name].rounds >= FLAGS.rounds
    ]
    ours = [
      seed_stats.mean_std([r.avg for r in group]),
      seed_stats.mean_std([r.std for r in group]),
      seed_stats.mean_std([r.worst30 for r in group]),
    ]
    row = {'algorithm': algorithm, 'seeds': len([r for r in group if r.avg is not None])}
    for metric, pub, (mean, std) in zip(('avg', 'std', 'worst30'), published, ours):
      row[f'{metric}_published'] = pub
      row[f'{metric}_ours'] = '' if mean is None else round(mean, 2)
      row[f'{metric}_ours_std'] = '' if std is None else round(std, 2)
      if FLAGS.data_set != FMNIST_SILO:  # another data set's row: its levels are no target
        row[f'{metric}_difference'] = '' if mean is None else round(mean - pub, 2)
    pooled = seed_stats.mean_std([r.pooled for r in group])
    row['pooled_ours'] = '' if pooled[0] is None else round(pooled[0], 2)
    row['pooled_ours_std'] = '' if pooled[1] is None else round(pooled[1], 2)
    rows.append(row)
  return rows


def write_report(cells, extra_cells, mu, tuning, runs_dir, out) -> None:
  os.makedirs(out, exist_ok=True)
  everything = cells + extra_cells
  results = {c.name: cell_result(runs_dir, c) for c in everything}
  rows = table(cells, results)
  stem = setup().stem
  with publish.atomic_output(os.path.join(out, f'{stem}.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  with publish.atomic_output(os.path.join(out, 'fedprox_mu.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(tuning[0]))
    writer.writeheader()
    writer.writerows(tuning)
  silo = FLAGS.data_set == FMNIST_SILO
  shown = ' / '.join(('paper Cifar10' if silo else 'paper', 'ours', *(() if silo else ('diff',))))
  head = f'| algorithm | Avg % ({shown}) | STD % ({shown}) | Worst 30% % ({shown}) | ' + (
    'pooled accuracy % (ours) |'
  )
  if silo:
    title = 'Table 5, the cross-silo setup on Fashion-MNIST'
    data_set = (
      f'- Data set: {setup().label}; the paper ran this setup on CIFAR-10 with VGG11 (App. C.1), '
      f'so "paper" is its {setup().published_label} row: the ranking to compare, not the '
      'levels.'
    )
  else:
    title = 'Table 5, Synthetic row, reproduced'
    data_set = (
      f'- Data set: {setup().label} (`settings_study`: which one the paper ran is not stated).'
    )
  lines = [
    f'# Ju et al. (AdaFedAdam) {title}',
    '',
    data_set,
    f'- Command: `{cell_runner.command_line("//reproductions/ju2023_adafedadam:reproduce_synthetic")}`',
    f'- Rounds {FLAGS.rounds}; seeds {", ".join(str(s) for s in seeds())}; '
    f'{FLAGS.clients_per_round} clients per round; evaluation every {FLAGS.rounds_per_eval} '
    'rounds; numbers are the last evaluation (round '
    f"{FLAGS.rounds}), mean +- std over seeds, of the clients' local test accuracy.",
    f'- FedProx mu tuned on seed {seeds()[0]} over {", ".join(FLAGS.fedprox_mus)}: '
    f'mu = {mu if mu is None else f"{mu:g}"} (fedprox_mu.csv).',
    f'- Trainer command of a cell: `{cell_runner.shown_command(trainer_command(cells[-1], runs_dir))}`',
    cell_runner.stamp_line(),
    '- Only cells that ran all rounds enter the summary; Avg, STD and Worst 30% are over the '
    f'{setup().num_clients} clients (unweighted; Worst 30%: the '
    f'{math.ceil(0.3 * setup().num_clients)} lowest), "pooled" is the accuracy on the union of '
    'their test sets.',
    '',
    head,
    '|---|---|---|---|---|',
  ]
  for row in rows:
    cols = [row['algorithm']]
    for metric in ('avg', 'std', 'worst30'):
      ours = row[f'{metric}_ours']
      cols.append(
        f'{row[f"{metric}_published"]:.2f} / '
        + ('—' if ours == '' else seed_stats.mean_std_text((ours, row[f'{metric}_ours_std'])))
        + ('' if ours == '' or silo else f' / {row[f"{metric}_difference"]:+.2f}')
      )
    pooled = row['pooled_ours']
    cols.append('—' if pooled == '' else seed_stats.mean_std_text((pooled, row['pooled_ours_std'])))
    lines.append('| ' + ' | '.join(cols) + ' |')
  lines += ['', *(ranking_lines(rows) if silo else published_consistency())]
  lines += ['', '| cell | rounds | Avg % | STD % | Worst 30% % |', '|---|---|---|---|---|']
  for cell in everything:
    r = results[cell.name]
    fmt = lambda v: '' if v is None else f'{v:.2f}'
    lines.append(f'| {cell.name} | {r.rounds} | {fmt(r.avg)} | {fmt(r.std)} | {fmt(r.worst30)} |')
  with publish.atomic_output(os.path.join(out, f'{stem}.md')) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines[8:]), flush=True)
  write_figures(cells, extra_cells, runs_dir, out)


def ranking_lines(rows: list[dict]) -> list[str]:
  """The algorithms ordered by Avg, STD (lowest first) and Worst 30%, the paper's and ours."""
  lines = []
  for metric, label, lowest_first in (
    ('avg', 'Avg', False),
    ('std', 'STD (lowest first)', True),
    ('worst30', 'Worst 30%', False),
  ):
    order = lambda key: ' > '.join(
      r['algorithm']
      for r in sorted(
        (r for r in rows if r[key] != ''), key=lambda r: r[key], reverse=not lowest_first
      )
    )
    lines.append(
      f'- {label}: paper ({setup().published_label}) '
      f'{order(f"{metric}_published")}; ours {order(f"{metric}_ours") or "—"}.'
    )
  return ['Rankings:', '', *lines]


def published_consistency() -> list[str]:
  """Whether each published (Avg, Worst 30%) pair can be unweighted means over the setup's K clients.

  If Avg is the mean over K clients and Worst 30% the mean of the lowest k = ceil(0.3 K), the
  other K - k average (K Avg - k Worst) / (K - k), which cannot exceed 100%.
  """
  clients = setup().num_clients
  worst_k = math.ceil(0.3 * clients)
  lines = []
  for algorithm, (avg, _, worst) in published_row().items():
    rest = (clients * avg - worst_k * worst) / (clients - worst_k)
    if rest > 100:
      lines.append(
        f'{algorithm} ({avg} / {worst}: the other {100 * (clients - worst_k) / clients:g}% would '
        f'average {rest:.1f}%)'
      )
  if not lines:
    return []
  return [
    'Published rows whose Avg and Worst 30% cannot both be unweighted means over the same '
    "clients (so the paper's Avg is presumably example-weighted or over another set): "
    + '; '.join(lines)
    + '.'
  ]


def write_figures(cells, extra_cells, runs_dir, out) -> None:
  done = lambda c: os.path.isdir(os.path.join(runs_dir, c.name, 'client_eval'))
  groups: dict[str, list[str]] = {}
  for cell in cells:
    if done(cell):
      groups.setdefault(cell.algorithm, []).append(os.path.join(runs_dir, cell.name))
  if not groups:
    return
  figure_setup = 'FMNIST CROSS-SILO' if FLAGS.data_set == FMNIST_SILO else 'SYNTHETIC'
  plot_fairness.density_figure(
    {k: [plot_fairness.client_accuracies(d) for d in v] for k, v in groups.items()},
    os.path.join(out, 'density.png'),
    setup=figure_setup,
  )
  plot_fairness.curves_figure(
    {k: [pd.read_csv(os.path.join(d, 'metrics.csv')) for d in v] for k, v in groups.items()},
    os.path.join(out, 'curves.png'),
    setup=figure_setup,
  )
  first = seeds()[0]
  points = []
  for cell in cells + extra_cells:
    if cell.seed != first or not done(cell):
      continue
    stats = plot_fairness.fairness_stats(
      plot_fairness.client_accuracies(os.path.join(runs_dir, cell.name))
    )
    point = {'label': cell.label, **stats}
    if cell.algorithm == 'AdaFedAdam':
      point['alpha'] = cell.param
    points.append(point)
  plot_fairness.pareto_figure(points, os.path.join(out, 'pareto.png'), setup=figure_setup)
  plot_fairness.pareto_figure(
    points,
    os.path.join(out, 'pareto_std.png'),
    setup=figure_setup,
    axes=('avg', 'std', 'average local accuracy (%)', 'STD of local accuracy (%)'),
  )
  print(f'wrote {out}/density.png, curves.png, pareto.png, pareto_std.png', flush=True)


def main(argv: list[str]) -> int:
  return cell_runner.run_main('reproduce_synthetic', _main, argv)


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  population = setup().num_clients
  if not FLAGS['rounds'].present:
    FLAGS.rounds = setup().rounds
  if not FLAGS['clients_per_round'].present:
    FLAGS.clients_per_round = population
  if not 1 <= FLAGS.clients_per_round <= population:
    raise UsageError(
      f'--clients_per_round must be in [1, {population}] for --data_set={FLAGS.data_set}, '
      f'got {FLAGS.clients_per_round}'
    )
  if FLAGS.clients_per_chunk < 1:
    raise UsageError(f'--clients_per_chunk must be >= 1, got {FLAGS.clients_per_chunk}')
  runs_dir = FLAGS.runs_dir
  if not FLAGS['runs_dir'].present:
    if FLAGS.data_set != DEFAULT_DATA_SET:
      runs_dir = f'runs/ju_table5_{FLAGS.data_set}'
      runs_dir += '_vectorised' if FLAGS.engine == 'vectorised' else ''
    elif FLAGS.engine == 'vectorised':
      runs_dir = VECTORISED_RUNS_DIR
  default_out = None if FLAGS['out'].present else os.path.join(runs_dir, 'report')
  runs_dir = publish.resolve(runs_dir)
  out = publish.output_from_flags(
    'reproductions.ju2023_adafedadam.reproduce_synthetic',
    FLAGS,
    SETTINGS,
    out=default_out,
    entry=None if FLAGS.data_set == DEFAULT_DATA_SET else f'reproduce_synthetic_{FLAGS.data_set}',
  )
  first = main_cells(None) + tuning_cells() + pareto_cells()
  if FLAGS.dry_run:
    for cell in first:
      print(shlex.join(trainer_command(cell, runs_dir)))
    print('# then FedProx on the other seeds with the tuned mu')
    print(f'# then the tables and figures into {out}')
    return 0
  failed, runner = [], None
  if not FLAGS.report_only:
    stopped, failed, runner = cell_runner.run_cells(
      first, runs_dir, FLAGS.parallel, trainer_command, FLAGS.rounds
    )
    if stopped is not None:
      return stopped
  mu, tuning = tuned_mu(runs_dir)
  cells = main_cells(mu)
  if mu is not None and not FLAGS.report_only:
    rest = [c for c in cells if c.algorithm == 'FedProx' and c.seed != seeds()[0]]
    if rest:
      stopped, more_failed, more_runner = cell_runner.run_cells(
        rest, runs_dir, FLAGS.parallel, trainer_command, FLAGS.rounds
      )
      if stopped is not None:
        return stopped
      if more_failed:
        cell_runner.report_failures('reproduce_synthetic', more_failed, more_runner, runs_dir)
  others = [c for c in tuning_cells() + pareto_cells() if c.name not in {x.name for x in cells}]
  if cell_runner.refuse_unfinished(
    'reproduce_synthetic', FLAGS, cells + others, runs_dir, trainer_command
  ):
    return 1
  if FLAGS.publish and mu is None:  # every mu diverged: a table without FedProx
    print(
      'reproduce_synthetic: error: --publish: every FedProx tuning cell diverged, so FedProx '
      'has no mu; nothing was written',
      file=sys.stderr,
      flush=True,
    )
    return 1
  write_report(cells, others, mu, tuning, runs_dir, out)
  if runner is not None:
    cell_runner.report_failures('reproduce_synthetic', failed, runner, runs_dir)
  return 1 if failed else 0


if __name__ == '__main__':
  cell_runner.app_run(main)
