"""FedAvg vs FedPA on Fashion-MNIST Dir(0.1): the offline stand-in for Al-Shedivat et al. 2021.

The paper's Table 3 tasks (EMNIST-62, CIFAR-100, StackOverflow) need data this machine cannot
download (their presets are reproductions/alshedivat2021_fedpa/presets/*.flags). This runs the same comparison, FedAvg-ME vs
FedPA-ME with identical local work, on task `fmnist` (100 clients x 500 examples, Dirichlet(0.1)
labels, the CNN of Kim et al. 2024), with the paper's EMNIST settings of Table 6: server SGDM
(0.9) lr 0.5, client SGDM (0.9) lr 0.01, E = 5 local epochs (FedPA: one burn-in epoch, then one
IASG sample per epoch, l = 4), 10 clients per round, shrinkage rho = 0.1, and a server burn-in
of --burnin_rounds FedAvg rounds. Both algorithms run the same seeds; before the burn-in ends
they are the same computation (bit for bit, tests/algorithms/test_fedpa.py), after it FedPA's clients send
Sigma_hat^-1 (x_t - mu_hat).

  .venv/bin/python -m reproductions.alshedivat2021_fedpa.reproduce_fmnist --rounds=300 --seeds=1,2,3 --parallel=2
  .venv/bin/python -m reproductions.alshedivat2021_fedpa.reproduce_fmnist --publish --rounds=300 \\
      --seeds=1,2,3 --parallel=2   # rewrites the committed results/fmnist (`reproductions.publish`)

Every cell is one `run.federated_trainer` process (`reproductions.cell_runner`: resumable, a progress line
with ETA every 30 s, TF pinned to one thread per trainer). Afterwards it writes into --out
(default runs/fedpa_fmnist/report; with --publish, reproductions/alshedivat2021_fedpa/results/fmnist):
fedpa_fmnist.{csv,md} (per seed and mean +- std over seeds: final accuracy, the mean of the
last 5 evaluations (`accuracy_last5evals`), the worst-30% client accuracy, rounds to --targets; the paired FedPA - FedAvg
difference; the paper's Table 3 differences for reference) and fedpa_fmnist.png.
"""

import csv
import dataclasses
import os
import sys

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.alshedivat2021_fedpa import cell_results
from reproductions.alshedivat2021_fedpa import paper_setup
from tff_adaptive.loop import targets

flags.DEFINE_integer('rounds', 300, 'Rounds per cell.')
flags.DEFINE_list('seeds', ['1', '2', '3'], 'Seeds (one FedAvg and one FedPA cell each).')
flags.DEFINE_integer('burnin_rounds', 100, 'FedPA server burn-in rounds (FedAvg deltas).')
flags.DEFINE_float('shrinkage', 0.1, 'FedPA shrinkage rho (the paper form; EMNIST: 0.1).')
flags.DEFINE_integer('parallel', 2, 'Trainers at once (each on one TF thread).')
flags.DEFINE_integer('rounds_per_eval', 5, 'Evaluate every this many rounds.')
flags.DEFINE_integer('rounds_per_checkpoint', 25, 'Checkpoint every this many rounds.')
flags.DEFINE_list('targets', ['0.75', '0.8'], 'Accuracy thresholds for rounds-to-target.')
cell_runner.define_output_flags('runs/fedpa_fmnist')
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = ('rounds', 'seeds', 'burnin_rounds', 'shrinkage', 'rounds_per_eval', 'targets')
LAST_EVALS = cell_results.LAST_EVALS
# The column of the mean of the last LAST_EVALS evaluations (`targets.window_column`).
ACCURACY_LAST = targets.window_column('accuracy', LAST_EVALS, 'evals')

ALGORITHMS = ('fedavg', 'fedpa')
# Table 3, FedPA-ME minus FedAvg-ME (accuracy points), for reference.
PAPER_DIFFERENCES = (
  'EMNIST-62 +0.7 (500 rounds) / +1.4 (1500); CIFAR-100 +4.1 (1000) / +4.2 (1500); '
  'StackOverflow NWP +0.4; StackOverflow LR macro-F1 +1.7'
)


UsageError = cell_runner.UsageError


@dataclasses.dataclass(frozen=True)
class Cell:
  name: str
  algorithm: str
  seed: int


def build_cells() -> list[Cell]:
  seeds = []
  for text in FLAGS.seeds:
    if not text.isdigit():
      raise UsageError(f'--seeds: {text!r} is not a non-negative integer')
    seeds.append(int(text))
  if not seeds:
    raise UsageError('--seeds: give at least one seed')
  return [Cell(f'{a}_seed{s}', a, s) for s in dict.fromkeys(seeds) for a in ALGORITHMS]


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  args = [
    '--task=fmnist',
    '--dirichlet_alpha=0.1',
    *paper_setup.TRAINING_ARGS,
    '--client_epochs_per_round=5',
    '--clients_per_round=10',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *paper_setup.algorithm_args(
      FLAGS.shrinkage if cell.algorithm == 'fedpa' else None, FLAGS.burnin_rounds
    ),
  ]
  return [sys.executable, '-m', 'run.federated_trainer', *args]


def _fmt(value, digits=2) -> str:
  return '' if value is None else f'{value:.{digits}f}'


def _mean_std(values: list) -> str:
  return seed_stats.mean_std_text(seed_stats.mean_std(values))


def table_rows(cells: list[Cell], results: dict[str, cell_results.CellResult]) -> list[dict]:
  thresholds = [float(t) for t in FLAGS.targets]
  rows = []
  for cell in cells:
    r = results[cell.name]
    row = {
      'algorithm': cell.algorithm,
      'seed': cell.seed,
      'rounds': r.rounds,
      'final_accuracy': _fmt(r.final),
      ACCURACY_LAST: _fmt(r.last5),
      'worst30_final': _fmt(None if r.worst30 is None else 100 * r.worst30),
    }
    for t in thresholds:
      row[f'rounds_to_{t:g}'] = r.rounds_to(t) or ''
    rows.append(row)
  return rows


def summary_lines(cells: list[Cell], results: dict[str, cell_results.CellResult]) -> list[str]:
  thresholds = [float(t) for t in FLAGS.targets]
  head = ['algorithm', 'final accuracy %', 'mean of last 5 evals %', 'worst-30% clients %']
  head += [f'rounds to {100 * t:g}%' for t in thresholds]
  body = []
  for algorithm in ALGORITHMS:
    group = [results[c.name] for c in cells if c.algorithm == algorithm]
    cols = [
      algorithm,
      _mean_std([r.final for r in group]),
      _mean_std([r.last5 for r in group]),
      _mean_std([None if r.worst30 is None else 100 * r.worst30 for r in group]),
    ]
    for t in thresholds:
      reached = [r.rounds_to(t) for r in group]
      cols.append(', '.join('never' if x is None else str(x) for x in reached))
    body.append(cols)
  lines = publish.markdown_table(head, body)
  paired = {'final': [], 'last5': []}
  for seed in sorted({c.seed for c in cells}):
    pa, avg = results.get(f'fedpa_seed{seed}'), results.get(f'fedavg_seed{seed}')
    if pa and avg and pa.final is not None and avg.final is not None:
      paired['final'].append(pa.final - avg.final)
      paired['last5'].append(pa.last5 - avg.last5)
  lines += [
    '',
    f'FedPA - FedAvg, paired by seed (accuracy points): final {_mean_std(paired["final"])} '
    f'(per seed: {", ".join(f"{d:+.2f}" for d in paired["final"])}); mean of the last 5 '
    f'evaluations {_mean_std(paired["last5"])}.',
    f'The paper (Table 3, FedPA-ME - FedAvg-ME): {PAPER_DIFFERENCES}.',
  ]
  return lines


def write_report(cells: list[Cell], runs_dir: str, out: str) -> None:
  os.makedirs(out, exist_ok=True)
  results = {c.name: cell_results.read(runs_dir, c) for c in cells}
  rows = table_rows(cells, results)
  with publish.atomic_output(os.path.join(out, 'fedpa_fmnist.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  example = cell_runner.shown_command(trainer_command(cells[-1], runs_dir))
  lines = [
    '# FedAvg-ME vs FedPA-ME on Fashion-MNIST Dir(0.1) (offline stand-in for Al-Shedivat et al. '
    '2021, Table 3)',
    '',
    f'- Command: `{cell_runner.command_line("//reproductions/alshedivat2021_fedpa:reproduce_fmnist")}`',
    f'- Rounds: {FLAGS.rounds}; server burn-in {FLAGS.burnin_rounds} rounds; shrinkage rho '
    f'{FLAGS.shrinkage}; seeds {", ".join(FLAGS.seeds)}; evaluation every '
    f'{FLAGS.rounds_per_eval} rounds on the pooled 10,000 test images.',
    f'- Trainer command of a cell: `{example}`',
    cell_runner.stamp_line(),
    '',
    *summary_lines(cells, results),
    '',
    *publish.markdown_table(rows[0], [row.values() for row in rows]),
  ]
  with publish.atomic_output(os.path.join(out, 'fedpa_fmnist.md')) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(summary_lines(cells, results)), flush=True)
  print(f'wrote {out}/fedpa_fmnist.csv and .md', flush=True)
  write_figure(cells, results, out)


def write_figure(cells: list[Cell], results: dict[str, cell_results.CellResult], out: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (ax, diff_ax) = plt.subplots(1, 2, figsize=(13, 4.5))
  colors = {'fedavg': 'tab:blue', 'fedpa': 'tab:red'}
  for cell in cells:
    curve = results[cell.name].curve
    if curve:
      ax.plot(
        [r for r, _ in curve],
        [100 * a for _, a in curve],
        color=colors[cell.algorithm],
        alpha=0.8,
        linewidth=1,
        label=f'{cell.algorithm} seed {cell.seed}',
      )
  for axis in (ax, diff_ax):
    axis.axvline(FLAGS.burnin_rounds, color='gray', linestyle=':', label='end of burn-in')
    axis.grid(alpha=0.3)
    axis.set_xlabel('round')
  ax.set_ylabel('test accuracy (%)')
  ax.set_title('FMNIST Dir(0.1): FedAvg-ME vs FedPA-ME (E = 5, SGDM server 0.5)')
  ax.legend(fontsize=7, ncol=2)
  for seed in sorted({c.seed for c in cells}):
    pa = dict(results[f'fedpa_seed{seed}'].curve)
    avg = dict(results[f'fedavg_seed{seed}'].curve)
    common = sorted(set(pa) & set(avg))
    diff_ax.plot(common, [100 * (pa[r] - avg[r]) for r in common], label=f'seed {seed}')
  diff_ax.axhline(0, color='black', linewidth=0.8)
  diff_ax.set_ylabel('FedPA - FedAvg (accuracy points)')
  diff_ax.set_title('paired difference (0 until the burn-in ends)')
  diff_ax.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(out, 'fedpa_fmnist.png')
  publish.save_figure(fig, path, dpi=120)
  plt.close(fig)
  print(f'wrote {path}', flush=True)


def main(argv: list[str]) -> int:
  return cell_runner.run_main('reproduce_fmnist', _main, argv)


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  if not 0 <= FLAGS.burnin_rounds < FLAGS.rounds:
    raise UsageError(f'--burnin_rounds must be in [0, --rounds), got {FLAGS.burnin_rounds}')
  try:
    targets.parse_thresholds('targets', FLAGS.targets)
  except ValueError as e:
    raise UsageError(str(e)) from None
  cells = build_cells()
  runs_dir = publish.resolve(FLAGS.runs_dir)
  out = publish.output_from_flags(
    'reproductions.alshedivat2021_fedpa.reproduce_fmnist', FLAGS, SETTINGS
  )
  return cell_runner.drive(
    'reproduce_fmnist', FLAGS, cells, runs_dir, out, trainer_command, write_report
  )


if __name__ == '__main__':
  cell_runner.app_run(main)
