"""FedPA vs FedAvg across regimes: where does posterior averaging pay?

Al-Shedivat et al. 2021 (Sec. 3, Fig. 1) show FedAvg's fixed point is biased away from the
global optimum when the clients' objectives differ and each does much local computation, and
FedPA's clients remove that bias by sending Sigma_hat^-1 (x_t - mu_hat) instead of x_t - x_K.
Our Fashion-MNIST comparison (`reproduce_fmnist`: E = 5, Dir(0.1), rho = 0.1) found no
difference. This driver runs the same comparison where the mechanism should matter more:

  - local computation: E in --epochs (FedPA: one burn-in epoch, then one IASG sample per epoch),
  - heterogeneity: --data_sets, per task (synthetic: `iid` one labelling model for all, `0_0`
    and `1_1` Li et al.'s Synthetic(alpha, beta), each client its own model; fmnist: `dir1`,
    `dir0.1`, `dir0.01`, Dirichlet label skew),
  - FedPA's shrinkage rho on the grid --shrinkages,
  - --seeds, and --rounds of which the first --burnin_rounds are FedAvg rounds for FedPA too.

Everything else is reproduce_fmnist's (the paper's EMNIST settings of Table 6): server SGDM 0.9
lr 0.5, client SGDM 0.9 lr 0.01, 10 clients per round, the task's batch size. Every (data set,
E, seed) has one FedAvg cell and one FedPA cell per rho; through the burn-in they are the same
computation.

  .venv/bin/python -m reproductions.alshedivat2021_fedpa.regimes --task=synthetic --parallel=2
  .venv/bin/python -m reproductions.alshedivat2021_fedpa.regimes --task=fmnist \\
      --data_sets=dir0.1,dir0.01 --parallel=2

Each cell is one `run.federated_trainer` process (`reproductions.cell_runner`: resumable,
progress with ETA). Then --out (default runs/fedpa_regimes_<task>/report; with --publish,
reproductions/alshedivat2021_fedpa/results/regimes/<task>) gets regimes_<task>.{md,csv}: per
(data set, E) FedAvg's and each rho's final test accuracy, mean of the last 5 evaluations and
test loss (mean +- std over seeds), FedPA - FedAvg paired by seed, and the mean client-delta
correction ||u - (x_t - x_K)|| / ||x_t - x_K|| over FedPA's rounds (how far FedPA moved the
clients' deltas from FedAvg's); and regimes_<task>.png, the paired difference over rounds.
"""

import csv
import dataclasses
import math
import os
import statistics
import sys

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.alshedivat2021_fedpa import cell_results
from reproductions.alshedivat2021_fedpa import paper_setup
from tff_adaptive.loop import targets

TASKS = ('synthetic', 'fmnist')
# A synthetic data set's trainer flags (`datasets/synthetic.py`).
SYNTHETIC_DATA_SETS = {
  'iid': ('--synthetic_iid', '--synthetic_beta=0'),
  '0_0': ('--synthetic_alpha=0', '--synthetic_beta=0'),
  '1_1': ('--synthetic_alpha=1', '--synthetic_beta=1'),
}
DEFAULT_DATA_SETS = {'synthetic': ['iid', '1_1'], 'fmnist': ['dir0.1', 'dir0.01']}

flags.DEFINE_enum('task', 'synthetic', list(TASKS), 'The task: synthetic or fmnist.')
flags.DEFINE_list(
  'data_sets',
  None,
  'Heterogeneity levels (synthetic: iid, 0_0, 1_1; fmnist: dir<alpha>, e.g. dir0.01). '
  'Default: iid,1_1 (synthetic), dir0.1,dir0.01 (fmnist).',
)
flags.DEFINE_list('epochs', ['5', '20'], 'Local epochs E (>= 3: a burn-in epoch, 2 samples).')
flags.DEFINE_list('shrinkages', ['0.01', '0.1', '1'], "FedPA's shrinkage rho grid.")
flags.DEFINE_list('seeds', ['1', '2', '3'], 'Seeds (each a FedAvg cell and a FedPA cell per rho).')
flags.DEFINE_integer('rounds', 300, 'Rounds per cell.')
flags.DEFINE_integer('burnin_rounds', 100, 'FedPA server burn-in rounds (FedAvg deltas).')
flags.DEFINE_integer('parallel', 2, 'Trainers at once (each on one TF thread).')
flags.DEFINE_integer('rounds_per_eval', 10, 'Evaluate every this many rounds.')
flags.DEFINE_integer('rounds_per_checkpoint', 50, 'Checkpoint every this many rounds.')
cell_runner.define_output_flags(
  None, runs_dir_help='Where the cells run (default runs/fedpa_regimes_<task>).'
)
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = (
  'task',
  'data_sets',
  'epochs',
  'shrinkages',
  'seeds',
  'rounds',
  'burnin_rounds',
  'rounds_per_eval',
)
LAST_EVALS = cell_results.LAST_EVALS
ACCURACY_LAST = targets.window_column('accuracy', LAST_EVALS, 'evals')

UsageError = cell_runner.UsageError


@dataclasses.dataclass(frozen=True)
class Cell:
  name: str
  data_set: str
  epochs: int
  seed: int
  shrinkage: float | None = None  # None: FedAvg

  @property
  def label(self) -> str:
    return 'FedAvg' if self.shrinkage is None else f'FedPA rho={self.shrinkage:g}'


def data_set_flags(task: str, data_set: str) -> tuple[str, ...]:
  """The trainer flags of a heterogeneity level; UsageError naming the valid ones."""
  if task == 'synthetic':
    if data_set not in SYNTHETIC_DATA_SETS:
      raise UsageError(
        f'--data_sets: {data_set!r} is not a synthetic data set; valid: '
        f'{", ".join(SYNTHETIC_DATA_SETS)}'
      )
    return SYNTHETIC_DATA_SETS[data_set]
  return (f'--dirichlet_alpha={_dirichlet_alpha(data_set):g}',)


def _dirichlet_alpha(data_set: str) -> float:
  try:
    alpha = float(data_set.removeprefix('dir')) if data_set.startswith('dir') else -1.0
  except ValueError:
    alpha = -1.0
  if not (math.isfinite(alpha) and alpha > 0):
    raise UsageError(
      f'--data_sets: {data_set!r} is not an fmnist data set; valid: dir<alpha> with alpha > 0, '
      'e.g. dir0.1'
    )
  return alpha


def _numbers(name: str, texts: list[str], kind=float) -> list:
  """The flag's values, each finite and >= 0, without repeats (floats: as `:g` names them)."""
  values = {}
  for text in texts:
    try:
      value = kind(text)
    except ValueError:
      what = 'an integer' if kind is int else 'a number'
      raise UsageError(f'--{name}: {text!r} is not {what}') from None
    if not (math.isfinite(value) and value >= 0):
      raise UsageError(f'--{name}: {text!r} must be a finite number >= 0')
    values.setdefault(f'{value:g}', value)
  if not values:
    raise UsageError(f'--{name}: give at least one value')
  return list(values.values())


def data_sets() -> list[str]:
  """--data_sets without repeats, fmnist's named canonically (dir.1 is dir0.1)."""
  if FLAGS.task == 'fmnist':
    return list(dict.fromkeys(f'dir{_dirichlet_alpha(d):g}' for d in FLAGS.data_sets))
  return list(dict.fromkeys(FLAGS.data_sets))


def seeds() -> list[int]:
  return _numbers('seeds', FLAGS.seeds, int)


def build_cells() -> list[Cell]:
  epochs = _numbers('epochs', FLAGS.epochs, int)
  if min(epochs) < 3:
    raise UsageError(f'--epochs must be >= 3 (a burn-in epoch and two samples), got {min(epochs)}')
  rhos = _numbers('shrinkages', FLAGS.shrinkages)
  if min(rhos) <= 0:
    raise UsageError(f'--shrinkages must be > 0, got {min(rhos):g}')
  if not data_sets():
    raise UsageError('--data_sets: give at least one data set')
  for data_set in data_sets():
    data_set_flags(FLAGS.task, data_set)
  cells = []
  for seed in seeds():
    for data_set in data_sets():
      for e in epochs:
        prefix = f'{data_set}_E{e}'
        cells.append(Cell(f'{prefix}_fedavg_seed{seed}', data_set, e, seed))
        cells += [
          Cell(f'{prefix}_fedpa_rho{rho:g}_seed{seed}', data_set, e, seed, rho) for rho in rhos
        ]
  return cells


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  args = [
    f'--task={FLAGS.task}',
    *data_set_flags(FLAGS.task, cell.data_set),
    *paper_setup.TRAINING_ARGS,
    f'--client_epochs_per_round={cell.epochs}',
    '--clients_per_round=10',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *paper_setup.algorithm_args(cell.shrinkage, FLAGS.burnin_rounds),
  ]
  return [sys.executable, '-m', 'run.federated_trainer', *args]


# -- Results. --------------------------------------------------------------------------------


def done(result: cell_results.CellResult) -> bool:
  """Ran all --rounds rounds (a diverged or unfinished cell is left out of the means)."""
  return result.rounds == FLAGS.rounds and bool(result.curve) and not result.diverged


def summary_rows(cells: list[Cell], results: dict[str, cell_results.CellResult]) -> list[dict]:
  """One row per (data set, E, algorithm/rho): means over the seeds that ran all rounds (how
  many diverged is counted), and FedPA - FedAvg paired by seed where both ran all rounds."""
  fedavg = {(c.data_set, c.epochs, c.seed): results[c.name] for c in cells if c.shrinkage is None}
  groups: dict[tuple, list[Cell]] = {}
  for cell in cells:
    groups.setdefault((cell.data_set, cell.epochs, cell.shrinkage), []).append(cell)
  rows = []
  for (data_set, epochs, rho), members in groups.items():
    finished = [c for c in members if done(results[c.name])]
    res = [results[c.name] for c in finished]
    row = {
      'data_set': data_set,
      'epochs': epochs,
      'algorithm': 'fedavg' if rho is None else 'fedpa',
      'shrinkage': '' if rho is None else f'{rho:g}',
      'seeds': len(finished),
      'diverged': sum(results[c.name].diverged for c in members),
    }
    for key, values in (
      ('final_accuracy', [r.final for r in res]),
      (ACCURACY_LAST, [r.last5 for r in res]),
      ('final_loss', [r.loss for r in res]),
      ('correction', [r.correction_after(FLAGS.burnin_rounds) for r in res]),
    ):
      mean, std = seed_stats.mean_std(values)
      row[key] = '' if mean is None else round(mean, 4)
      row[f'{key}_std'] = '' if std is None else round(std, 4)
    paired = {}  # seed -> FedPA - FedAvg, mean of the last 5 evaluations
    for c in finished:
      base = fedavg.get((data_set, epochs, c.seed))
      if rho is not None and base is not None and done(base):
        paired[c.seed] = results[c.name].last5 - base.last5
    mean, std = seed_stats.mean_std(list(paired.values()))
    row['difference_last5'] = '' if mean is None else round(mean, 4)
    row['difference_last5_std'] = '' if std is None else round(std, 4)
    row['difference_per_seed'] = ' '.join(f's{k}:{d:+.2f}' for k, d in paired.items())
    rows.append(row)
  return rows


def _cell(row: dict, key: str, digits: int = 2, sign: bool = False) -> str:
  if row[key] == '':
    return ''
  std = row[f'{key}_std']
  return seed_stats.mean_std_text((row[key], std), digits, sign)


def write_report(cells: list[Cell], runs_dir: str, out: str) -> None:
  os.makedirs(out, exist_ok=True)
  results = {c.name: cell_results.read(runs_dir, c) for c in cells}
  rows = summary_rows(cells, results)
  stem = f'regimes_{FLAGS.task}'
  with publish.atomic_output(os.path.join(out, f'{stem}.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  example = cell_runner.shown_command(trainer_command(cells[-1], runs_dir))
  lines = [
    f'# FedPA vs FedAvg across regimes ({FLAGS.task}): local epochs, heterogeneity, shrinkage',
    '',
    f'- Command: `{cell_runner.command_line("//reproductions/alshedivat2021_fedpa:regimes")}`',
    f'- Rounds {FLAGS.rounds}, of which the first {FLAGS.burnin_rounds} are FedAvg rounds for '
    f'FedPA too; seeds {", ".join(str(s) for s in seeds())}; evaluation every {FLAGS.rounds_per_eval} rounds '
    'on the pooled test set; accuracy and loss at the last evaluation and the mean of the last '
    f'{LAST_EVALS} evaluations, mean +- std over the seeds that ran all rounds (a diverged '
    'cell is counted, not averaged).',
    '- "FedPA - FedAvg": the mean of the last 5 evaluations, paired by seed (accuracy points). '
    '"correction": ||u - (x_t - x_K)|| / ||x_t - x_K|| averaged over the clients of each round '
    "after the burn-in, then over the rounds (0: FedPA sent FedAvg's delta).",
    f'- Trainer command of a cell: `{example}`',
    cell_runner.stamp_line(),
    '',
    '| data set | E | algorithm | seeds | final accuracy % | mean of last 5 evals % | test loss '
    '| FedPA - FedAvg (points) | per seed | correction |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    name = 'FedAvg' if row['algorithm'] == 'fedavg' else f'FedPA rho={row["shrinkage"]}'
    lines.append(
      f'| {row["data_set"]} | {row["epochs"]} | {name} | {row["seeds"]}'
      + (f' ({row["diverged"]} diverged)' if row['diverged'] else '')
      + ' | '
      f'{_cell(row, "final_accuracy")} | {_cell(row, ACCURACY_LAST)} | '
      f'{_cell(row, "final_loss", 3)} | {_cell(row, "difference_last5", sign=True)} | '
      f'{row["difference_per_seed"]} | {_cell(row, "correction", 3)} |'
    )
  with publish.atomic_output(os.path.join(out, f'{stem}.md')) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines[8:]), flush=True)
  print(f'wrote {out}/{stem}.csv and .md', flush=True)
  write_figure(cells, results, os.path.join(out, f'{stem}.png'))


def write_figure(cells: list[Cell], results: dict[str, cell_results.CellResult], path: str) -> None:
  """One panel per (data set, E): FedPA - FedAvg test accuracy over rounds, per rho, the mean
  over the seeds both ran."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  sets = data_sets()
  epochs = sorted({c.epochs for c in cells})
  rhos = sorted({c.shrinkage for c in cells if c.shrinkage is not None})
  fig, axes = plt.subplots(
    len(sets), len(epochs), figsize=(4.2 * len(epochs), 3.2 * len(sets)), squeeze=False
  )
  for i, data_set in enumerate(sets):
    for j, e in enumerate(epochs):
      ax = axes[i][j]
      for rho in rhos:
        differences: dict[int, list[float]] = {}
        for cell in cells:
          if (cell.data_set, cell.epochs, cell.shrinkage) != (data_set, e, rho):
            continue
          base = results[f'{data_set}_E{e}_fedavg_seed{cell.seed}']
          if not (done(base) and done(results[cell.name])):
            continue
          base = dict(base.curve)
          for round_num, accuracy in results[cell.name].curve:
            if round_num in base:
              differences.setdefault(round_num, []).append(100 * (accuracy - base[round_num]))
        if differences:
          xs = sorted(differences)
          ax.plot(xs, [statistics.mean(differences[x]) for x in xs], label=f'rho={rho:g}')
      ax.axhline(0, color='black', linewidth=0.8)
      ax.axvline(FLAGS.burnin_rounds, color='gray', linestyle=':')
      ax.set_title(f'{FLAGS.task} {data_set}, E = {e}', fontsize=9)
      ax.grid(alpha=0.3)
      if i == len(sets) - 1:
        ax.set_xlabel('round')
      if j == 0:
        ax.set_ylabel('FedPA - FedAvg (accuracy points)')
      if i == 0 and j == 0:
        ax.legend(fontsize=7)
  fig.suptitle('FedPA - FedAvg, mean over seeds\n(dotted: the burn-in ends)', fontsize=10)
  fig.tight_layout()
  publish.save_figure(fig, path, dpi=110)
  plt.close(fig)
  print(f'wrote {path}', flush=True)


def main(argv: list[str]) -> int:
  return cell_runner.run_main('regimes', _main, argv)


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  if FLAGS.data_sets is None:
    FLAGS.data_sets = DEFAULT_DATA_SETS[FLAGS.task]
  if not 0 <= FLAGS.burnin_rounds < FLAGS.rounds:
    raise UsageError(f'--burnin_rounds must be in [0, --rounds), got {FLAGS.burnin_rounds}')
  cells = build_cells()
  runs_dir = FLAGS.runs_dir or f'runs/fedpa_regimes_{FLAGS.task}'
  default_out = None if FLAGS.out else os.path.join(runs_dir, 'report')
  runs_dir = publish.resolve(runs_dir)
  out = publish.output_from_flags(
    'reproductions.alshedivat2021_fedpa.regimes',
    FLAGS,
    SETTINGS,
    out=default_out,
    entry=f'regimes_{FLAGS.task}',
  )
  return cell_runner.drive('regimes', FLAGS, cells, runs_dir, out, trainer_command, write_report)


if __name__ == '__main__':
  cell_runner.app_run(main)
