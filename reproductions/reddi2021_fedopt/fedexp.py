"""FedExP beside Table 1's tuned optimizers: the same search, the same selection, the same seeds.

Jhunjhunwala, Wang, Joshi. "FedExP: Speeding Up Federated Averaging via Extrapolation." ICLR
2023. FedExP's server step eta_g (`tff_adaptive.algorithms.fedexp`) is set every round from the
clients' updates, so of Reddi et al.'s two rates only the client learning rate eta_l is searched
(the FedExP paper tunes eta_l alone too); the server optimizer is SGD at rate 1 on the
extrapolated update. Everything else is the committed Table 1 protocol of the task
(`reproductions.reddi2021_fedopt.reproduce`, results/table1/<task>):

* cells: FedExP (`--algorithm=fedexp`, its defaults: the authors' code's epsilon, the average
  of the last two iterates evaluated) with SGD clients, E = 1, eta_l on App. D.2's base-10 grid
  at --grid_step (the committed fmnist search: step 1, eta_l in 1e-3 .. 1);
* selection: the smallest training loss averaged over the last --window rounds (App. D.1);
* reported: accuracy averaged over the evaluations in the last --window rounds, for the selected
  eta_l with --seeds seeds (seed, seed + 1, ...);

and the table sets FedExP beside the committed rows of Table 1 (FedAvg, FedAvgM, FedAdagrad,
FedAdam, FedYogi: their numbers read from results/table1/<task>/table1_<task>.csv, not rerun).

  .venv/bin/python -m reproductions.reddi2021_fedopt fedexp --task=fmnist --parallel=2

Outputs (default runs/reddi2021_fedexp/<task>/report; the committed one, with --publish and the
settings of results/publish.json, in results/fedexp/<task>): fedexp_<task>.{md,csv} (the table),
search_<task>.csv (every eta_l: its last-window training loss, accuracy and mean eta_g) and
fedexp_<task>.png (accuracy and eta_g against rounds, mean over the seeds with their range, and
the committed rows' last-window accuracies). Rerunning the same command resumes every unfinished
cell; a partial run never replaces the committed result.
"""

import csv
import dataclasses
import os
import shlex
import sys

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.cell_runner import UsageError
from reproductions.reddi2021_fedopt import published
from reproductions.reddi2021_fedopt import search
from tff_adaptive.loop import targets

DRIVER = 'reproductions.reddi2021_fedopt.fedexp'
BAZEL_TARGET = '//reproductions/reddi2021_fedopt:fedexp'
TASKS = ('fmnist', 'synthetic')  # the tasks with a committed Table 1 here
ETA_G = 'fedexp_eta_g'

flags.DEFINE_enum('task', 'fmnist', TASKS, 'Task (its committed Table 1 is the comparison).')
flags.DEFINE_float('grid_step', 1.0, 'Step of the log10 eta_l grid (the committed fmnist: 1).')
flags.DEFINE_list('client_grid', [], 'log10 eta_l range LOW,HIGH (default: App. D.2).')
flags.DEFINE_integer('rounds', 300, 'Rounds per cell (the committed fmnist Table 1: 300).')
flags.DEFINE_integer('window', 100, 'Rounds of the last-window averages (the paper: 100).')
flags.DEFINE_integer('seed', 1, 'Seed of the search cells.')
flags.DEFINE_integer('seeds', 3, 'Seeds of the selected cell (seed, seed + 1, ...).')
flags.DEFINE_enum(
  'engine', 'inprocess', ['inprocess', 'vectorised', 'tff'], "The trainer's --engine."
)
flags.DEFINE_integer('rounds_per_eval', 10, 'Evaluate every this many rounds (and the last).')
flags.DEFINE_integer('rounds_per_checkpoint', 100, 'Checkpoint every this many rounds.')
flags.DEFINE_multi_string(
  'trainer_flags',
  [],
  'A trainer flag for every cell, e.g. --trainer_flags=--fedexp_epsilon_scaling=paper (repeat '
  'for more); not one the driver sets.',
)
flags.DEFINE_integer('parallel', 1, 'Trainer processes at once.')
cell_runner.define_output_flags(
  None, runs_dir_help='Where the cells run (default runs/reddi2021_fedexp/<task>).'
)
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values.
SETTINGS = (
  'task',
  'grid_step',
  'client_grid',
  'rounds',
  'window',
  'seed',
  'seeds',
  'engine',
  'rounds_per_eval',
  'trainer_flags',
)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One FedExP run: log10 eta_l and the seed."""

  log_client: float
  seed: int

  @property
  def name(self) -> str:
    return f'fedexp_c{search.log_text(self.log_client)}_seed{self.seed}'

  def with_seed(self, seed: int) -> 'Cell':
    return dataclasses.replace(self, seed=seed)


def client_grid() -> tuple[float, ...]:
  low, high = published.DEFAULT_GRID['client']
  if FLAGS.client_grid:
    try:
      low, high = (float(v) for v in FLAGS.client_grid)
    except ValueError:
      raise UsageError(f'--client_grid={",".join(FLAGS.client_grid)}: expected LOW,HIGH') from None
  try:
    return search.log_grid(low, high, FLAGS.grid_step)
  except ValueError as e:
    raise UsageError(f'--client_grid / --grid_step: {e}') from None


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  """The trainer command of a cell (runs_dir absolute)."""
  args = [
    f'--task={FLAGS.task}',
    '--algorithm=fedexp',
    '--server_optimizer=sgd',
    '--server_learning_rate=1.0',
    f'--client_learning_rate={10.0**cell.log_client!r}',
    f'--seed={cell.seed}',
    '--client_optimizer=sgd',
    '--client_epochs_per_round=1',
    f'--engine={FLAGS.engine}',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *FLAGS.trainer_flags,
  ]
  return [sys.executable, '-m', 'run.federated_trainer', *args]


@dataclasses.dataclass
class Result:
  """A cell's last-window statistics (`search.window_stats`), its eta_g per round and status."""

  stats: search.CellStats
  eta_g: list[tuple[int, float]]
  status: str


def read_result(runs_dir: str, cell: Cell) -> Result:
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  stats = search.window_stats(rows, search.task_metric(FLAGS.task), FLAGS.window, FLAGS.rounds)
  eta_g = [
    (int(r), v)
    for r, v in (
      (cell_runner.to_float(x.get('round_num')), cell_runner.to_float(x.get(ETA_G))) for x in rows
    )
    if r is not None and v is not None
  ]
  code = (cell_runner.read_status(runs_dir, cell) or {}).get('exit_code')
  status = cell_runner.run_status(stats.finished, stats.rounds, FLAGS.rounds, code)
  return Result(stats, sorted(eta_g), status)


def mean_eta_g(result: Result) -> float | None:
  return seed_stats.mean_std(v for _, v in result.eta_g)[0]


# --- the committed Table 1 ---


def committed_rows(task: str) -> list[dict[str, str]]:
  """The committed Table 1 rows of `task` (results/table1/<task>/table1_<task>.csv)."""
  path = os.path.join(
    publish.repo_root(),
    'reproductions',
    'reddi2021_fedopt',
    'results',
    'table1',
    task,
    f'table1_{task}.csv',
  )
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


# --- report ---


def write_search(cells: list[Cell], results: dict[str, Result], out: str) -> str:
  loss = targets.window_column('train_loss', FLAGS.window, 'rounds')
  metric = targets.window_column(search.task_metric(FLAGS.task).column, FLAGS.window, 'rounds')
  path = os.path.join(out, f'search_{FLAGS.task}.csv')
  rows = [
    {
      'log10_client_lr': search.log_text(c.log_client),
      'seed': c.seed,
      loss: None
      if results[c.name].stats.train_loss is None
      else round(results[c.name].stats.train_loss, 6),
      metric: None
      if results[c.name].stats.metric is None
      else round(results[c.name].stats.metric, 2),
      'mean_eta_g': None
      if mean_eta_g(results[c.name]) is None
      else round(mean_eta_g(results[c.name]), 4),
      'status': results[c.name].status,
    }
    for c in cells
  ]
  publish.write_csv(path, ['log10_client_lr', 'seed', loss, metric, 'mean_eta_g', 'status'], rows)
  return path


def table_rows(chosen: list[Cell], results: dict[str, Result]) -> tuple[list[dict], dict]:
  """FedExP's row (mean and sample std over the seeds) and the committed rows, each with
  FedExP minus it."""
  values = {c.seed: results[c.name].stats.metric for c in chosen if results[c.name].stats.finished}
  values = {s: v for s, v in values.items() if v is not None}
  mean, std = seed_stats.mean_std(values.values())
  ours = {
    'method': 'FedExP',
    'ours': mean,
    'ours_std': std,
    'seeds': f'{len(values)} of {len(chosen)}',
    'per_seed': ' '.join(f'{s}:{v:.2f}' for s, v in sorted(values.items())),
    'log10_client_lr': search.log_text(chosen[0].log_client) if chosen else None,
    'log10_server_lr': 'eta_g (adaptive)',
    'log10_tau': None,
    'mean_eta_g': seed_stats.mean_std(mean_eta_g(results[c.name]) for c in chosen)[0],
    'source': 'this study',
  }
  rows = [ours]
  for row in committed_rows(FLAGS.task):
    value = cell_runner.to_float(row.get('ours'))
    rows.append(
      {
        'method': row['paper_name'],
        'ours': value,
        'ours_std': cell_runner.to_float(row.get('ours_std')),
        'seeds': row.get('seeds'),
        'per_seed': None,
        'log10_client_lr': row.get('log10_client_lr'),
        'log10_server_lr': row.get('log10_server_lr'),
        'log10_tau': row.get('log10_tau') or None,
        'mean_eta_g': None,
        'source': f'results/table1/{FLAGS.task}',
        'fedexp_minus_this': None if mean is None or value is None else mean - value,
      }
    )
  return rows, values


TABLE_COLUMNS = [
  'method',
  'ours',
  'ours_std',
  'seeds',
  'per_seed',
  'fedexp_minus_this',
  'log10_client_lr',
  'log10_server_lr',
  'log10_tau',
  'mean_eta_g',
  'source',
]


def verdict(rows: list[dict]) -> list[str]:
  """Whether FedExP beats each committed row: by more than the larger of the two seed stds
  ("ahead" / "behind"), else "within the seeds' spread"."""
  ours = rows[0]
  if ours['ours'] is None:
    return ['FedExP has no finished seed yet.']
  lines = []
  for row in rows[1:]:
    if row['ours'] is None:
      continue
    gap = ours['ours'] - row['ours']
    spread = max(ours['ours_std'] or 0.0, row['ours_std'] or 0.0)
    word = (
      'ahead of' if gap > spread else 'behind' if gap < -spread else "within the seeds' spread of"
    )
    lines.append(
      f'- FedExP {ours["ours"]:.2f} is {word} {row["method"]} {row["ours"]:.2f} '
      f'({gap:+.2f}; the larger seed std {spread:.2f})'
    )
  return lines


def write_table(
  chosen: list[Cell], results: dict[str, Result], runs_dir: str, out: str
) -> list[str]:
  rows, _ = table_rows(chosen, results)
  csv_path = os.path.join(out, f'fedexp_{FLAGS.task}.csv')
  publish.write_csv(
    csv_path,
    TABLE_COLUMNS,
    [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows],
  )
  shown = {
    'ours': publish.number_text,
    'ours_std': publish.number_text,
    'fedexp_minus_this': lambda v: publish.number_text(v, sign=True),
    'mean_eta_g': lambda v: publish.number_text(v, 3),
  }
  table = publish.markdown_table(
    TABLE_COLUMNS,
    [[shown[k](r.get(k)) if k in shown else (r.get(k) or '') for k in TABLE_COLUMNS] for r in rows],
  )
  example = cell_runner.shown_command(trainer_command(chosen[0], runs_dir)) if chosen else ''
  grid = ', '.join(search.log_text(c) for c in client_grid())
  lines = [
    f'# FedExP beside Reddi et al. 2021 Table 1: {FLAGS.task}',
    '',
    f'- Command: `{cell_runner.command_line(BAZEL_TARGET)}`',
    cell_runner.stamp_line(),
    f'- Task {FLAGS.task}, {FLAGS.rounds} rounds per cell, evaluation every '
    f'{FLAGS.rounds_per_eval} rounds and at the last, engine {FLAGS.engine}; search seed '
    f'{FLAGS.seed}, the selected eta_l with seeds {FLAGS.seed}-{FLAGS.seed + FLAGS.seeds - 1}.',
    f"- Search: log10 eta_l in {grid} (the server step eta_g is FedExP's own); selection: the "
    f"smallest training loss over the last {FLAGS.window} rounds (App. D.1), as Table 1's rows; "
    f'metric: accuracy (%) averaged over the evaluations in the last {FLAGS.window} rounds.',
    f'- Trainer command of a cell (logs in `<runs_dir>/<cell>.log`): `{example}`',
    '- The other rows are the committed Table 1 of this task (their own search over eta_l x eta '
    '(x tau), the same rule, the same seeds), read, not rerun.',
    '',
    *table,
    '',
    "`ours`: mean over the seeds, `ours_std` their sample std, `per_seed` each seed's; "
    "`fedexp_minus_this`: FedExP's mean minus the row's; `mean_eta_g`: FedExP's server step "
    'averaged over the rounds and seeds (1 = a FedAvg step). The task draws its data from the '
    'seed, so most of a std is between datasets.',
    '',
    '## Does FedExP beat what is here?',
    '',
    *verdict(rows),
  ]
  md_path = os.path.join(out, f'fedexp_{FLAGS.task}.md')
  with publish.atomic_output(md_path) as f:
    f.write('\n'.join(lines) + '\n')
  return [csv_path, md_path]


def write_figure(chosen: list[Cell], results: dict[str, Result], out: str) -> str:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (acc, eta) = plt.subplots(1, 2, figsize=(11, 4))
  rounds, mean, low, high = seed_stats.curve_band([results[c.name].stats.curve for c in chosen])
  if rounds:
    (line,) = acc.plot(rounds, mean, label='FedExP (mean over seeds)')
    acc.fill_between(rounds, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
  for k, row in enumerate(committed_rows(FLAGS.task)):
    value = cell_runner.to_float(row.get('ours'))
    if value is not None:
      acc.axhline(
        value,
        linestyle=':',
        linewidth=1,
        color=f'C{k + 1}',
        label=f'{row["paper_name"]} (committed, last {FLAGS.window} rounds)',
      )
  acc.set_xlabel('round')
  acc.set_ylabel('test accuracy (%)')
  acc.legend(fontsize=7)
  rounds, mean, low, high = seed_stats.curve_band([results[c.name].eta_g for c in chosen])
  if rounds:
    (line,) = eta.plot(rounds, mean)
    eta.fill_between(rounds, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
  eta.set_xlabel('round')
  eta.set_ylabel('eta_g (FedExP server step)')
  fig.suptitle(
    f'FedExP on {FLAGS.task}, eta_l selected as Table 1 (band: min to max over seeds)', fontsize=9
  )
  fig.tight_layout()
  path = os.path.join(out, f'fedexp_{FLAGS.task}.png')
  publish.save_figure(fig, path, dpi=120, bbox_inches='tight')
  plt.close(fig)
  return path


# --- main ---


def run(cells: list[Cell], runs_dir: str) -> tuple[int | None, list]:
  if FLAGS.report_only:
    return None, []
  stopped, failed, runner = cell_runner.run_cells(
    cells, runs_dir, FLAGS.parallel, trainer_command, FLAGS.rounds
  )
  if stopped is None:
    cell_runner.report_failures('fedexp', failed, runner, runs_dir)
  return stopped, failed


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  if FLAGS.seeds < 1 or FLAGS.window < 1:
    raise UsageError(f'--seeds={FLAGS.seeds} and --window={FLAGS.window} must be >= 1')
  driver_set = {a.split('=', 1)[0] for a in trainer_command(Cell(0.0, 1), 'runs')[3:]}
  for flag in FLAGS.trainer_flags:
    if flag.split('=', 1)[0] in driver_set:
      raise UsageError(f'--trainer_flags={flag}: the driver sets {flag.split("=", 1)[0]} itself')
  runs_dir = publish.resolve(FLAGS.runs_dir or os.path.join('runs', 'reddi2021_fedexp', FLAGS.task))
  out = publish.output_from_flags(
    DRIVER,
    FLAGS,
    SETTINGS,
    out=FLAGS.out or os.path.join(runs_dir, 'report'),
    entry=f'fedexp_{FLAGS.task}',
  )
  publish.refuse_committed([runs_dir], '--runs_dir')
  cells = [Cell(c, FLAGS.seed) for c in client_grid()]
  if FLAGS.dry_run:
    for cell in cells:
      print(shlex.join(trainer_command(cell, runs_dir)))
    print(
      f'{len(cells)} search cells, then the selected eta_l with {FLAGS.seeds} seeds; the '
      f'report would go to {out}'
    )
    return 0
  os.makedirs(runs_dir, exist_ok=True)
  stopped, failed = run(cells, runs_dir)
  if stopped is not None:
    return stopped
  results = {c.name: read_result(runs_dir, c) for c in cells}
  best = search.select(cells, {n: r.stats for n, r in results.items()})
  chosen = [] if best is None else [best.with_seed(FLAGS.seed + k) for k in range(FLAGS.seeds)]
  stopped, more = run(chosen, runs_dir)
  if stopped is not None:
    return stopped
  failed += more
  results.update({c.name: read_result(runs_dir, c) for c in chosen})
  needed = list(dict.fromkeys(cells + chosen))
  unfinished = [
    c.name for c in needed if not results[c.name].status.startswith(('done', 'diverged'))
  ]
  if FLAGS.publish and (unfinished or not chosen):
    print(
      f'fedexp: error: --publish: {len(unfinished)} cells have not finished'
      + (f' (e.g. {unfinished[0]}: {results[unfinished[0]].status})' if unfinished else '')
      + '; nothing was written',
      file=sys.stderr,
    )
    return 1
  os.makedirs(out, exist_ok=True)
  written = [write_search(cells, results, out)]
  if chosen:
    written += write_table(chosen, results, runs_dir, out)
    written.append(write_figure(chosen, results, out))
  print('wrote ' + ', '.join(written))
  return 1 if failed else 0


def main(argv: list[str]) -> int:
  return cell_runner.run_main('fedexp', _main, argv)


if __name__ == '__main__':
  cell_runner.app_run(main)
