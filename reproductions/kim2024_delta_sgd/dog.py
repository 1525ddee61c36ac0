"""DoG and L-DoG beside Delta-SGD and the baselines of Kim et al.'s Table 1 (FMNIST column).

Ivgi, Hinder, Carmon. "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule."
ICML 2023 (`tff_adaptive.optimizers.dog`), as client optimizers in Kim et al. 2024's protocol
(`reproductions.kim2024_delta_sgd.protocol`: fmnist, Dirichlet(alpha) labels, 10 clients per
round, E = 1 (7 local steps of 64), batch 64, the unweighted FedAvg server at rate 1).

DoG has no learning rate, but a client restarts it every round from the model it received, so
its warm-up from r_eps = reps_rel (1 + ||x_0||) is repeated in every round's 7 steps: the
package's reps_rel = 1e-6 barely moves. So the study has two stages, each optimizer on its own:

1. pilot: every --reps_grid value for --pilot_rounds rounds (seed --seed); selected: the smallest
   training loss averaged over the pilot's last --pilot_window rounds (the selection rule of
   Reddi et al. App. D.1, on training data only);
2. the selected reps_rel for --rounds rounds (the paper's 1000) with --seeds seeds (a pilot of
   --rounds rounds is the first seed's run).

Committed: a 100-round pilot over six values (results/dog/pilot100: it picked reps_rel 0.1,
which peaks near round 300 and then falls) and a 1000-round pilot over the three best
(results/dog/pilot1000), each with its publish.json entry `dog_pilot<rounds>`.

The table sets the results beside the committed multi-seed Table 1 of the same alpha (Delta-SGD
with the paper's rule and with the authors' code options, and the baselines at the authors'
run.sh rates: results/table1/seeds/table1_fmnist.csv, read, not rerun).

  .venv/bin/python -m reproductions.kim2024_delta_sgd dog --parallel=2
  .venv/bin/python -m reproductions.kim2024_delta_sgd dog --pilot_rounds=1000 --pilot_window=100 \\
      --reps_grid=1e-2,3e-2,1e-1 --parallel=2

Outputs (default runs/kim2024_dog/report; the committed one, with --publish and the settings of
results/publish.json, in results/dog/pilot<rounds>): dog_fmnist.{md,csv} (the final table), pilot_fmnist.csv
(every pilot cell) and accuracy_alpha<A>.png. Rerunning the same command resumes every
unfinished cell; a partial run never replaces the committed result.
"""

import csv
import dataclasses
import math
import os
import shlex
import sys

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.cell_runner import UsageError
from reproductions.kim2024_delta_sgd.protocol import COMMON_FLAGS
from reproductions.kim2024_delta_sgd.protocol import SERVER_FLAGS
from reproductions.kim2024_delta_sgd.published import PAPER_ROUNDS
from reproductions.kim2024_delta_sgd.published import TABLE1
from tff_adaptive.loop import targets

DRIVER = 'reproductions.kim2024_delta_sgd.dog'
BAZEL_TARGET = '//reproductions/kim2024_delta_sgd:dog'
OPTIMIZERS = ('dog', 'ldog')
NAMES = {'dog': 'DoG', 'ldog': 'L-DoG'}
LAST_EVALS = 5  # as Table 1's `ours_last5evals`
STEP_SIZE = 'client_step_size_mean'
DISTANCE = 'client_distance_mean'

flags.DEFINE_list('alphas', ['0.1'], 'Dirichlet alphas (of 1, 0.1, 0.01).')
flags.DEFINE_list('optimizers', list(OPTIMIZERS), f'Of {", ".join(OPTIMIZERS)}.')
flags.DEFINE_list(
  'reps_grid',
  ['1e-6', '1e-4', '1e-2', '3e-2', '1e-1', '3e-1'],
  "The pilot's --dog_reps_rel values (1e-6: the package's default).",
)
flags.DEFINE_integer('pilot_rounds', 100, 'Rounds of a pilot cell.')
flags.DEFINE_integer('pilot_window', 25, 'Pilot selection: training loss over its last rounds.')
flags.DEFINE_integer('rounds', PAPER_ROUNDS, "Rounds of a selected cell (the paper's: 1000).")
flags.DEFINE_integer('seed', 1, 'Seed of the pilot (and the first of --seeds).')
flags.DEFINE_integer('seeds', 3, 'Seeds of each selected cell (seed, seed + 1, ...).')
flags.DEFINE_integer('rounds_per_eval', 25, 'Evaluate every this many rounds (and the last).')
flags.DEFINE_integer('rounds_per_checkpoint', 25, 'Checkpoint every this many rounds.')
flags.DEFINE_integer('parallel', 1, 'Trainer processes at once.')
cell_runner.define_output_flags('runs/kim2024_dog')
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
SETTINGS = (
  'alphas',
  'optimizers',
  'reps_grid',
  'pilot_rounds',
  'pilot_window',
  'rounds',
  'seed',
  'seeds',
  'rounds_per_eval',
)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One trainer run: alpha, optimizer, reps_rel (as given), seed, rounds (pilot or full)."""

  alpha: str
  optimizer: str
  reps: str
  seed: int
  rounds: int
  pilot: bool

  @property
  def name(self) -> str:
    stage = f'pilot{self.rounds}_' if self.pilot else ''
    return f'{stage}a{self.alpha}_{self.optimizer}_reps{self.reps}_seed{self.seed}'


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  """The trainer command of a cell (runs_dir absolute): Table 1's, with a DoG client."""
  args = [
    *COMMON_FLAGS,
    f'--dirichlet_alpha={cell.alpha}',
    *SERVER_FLAGS['fedavg'],
    f'--total_rounds={cell.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    f'--client_optimizer={cell.optimizer}',
    f'--dog_reps_rel={cell.reps}',
  ]
  return [sys.executable, '-m', 'run.federated_trainer', *args]


@dataclasses.dataclass
class Result:
  """What a cell's metrics.csv and status file say."""

  rounds: int = 0
  curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  final: float | None = None
  mean_last: float | None = None
  train_loss: float | None = None  # over the last --pilot_window rounds
  step_size: float | None = None
  distance: float | None = None
  status: str = 'missing'


def read_result(runs_dir: str, cell: Cell) -> Result:
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  result = Result(rounds=cell_runner.last_round(rows))
  number = cell_runner.to_float
  for row in rows:
    r, a = number(row.get('round_num')), number(row.get('eval_accuracy'))
    if r is not None and a is not None:
      result.curve.append((int(r), 100.0 * a))
  result.curve.sort()
  if result.curve:
    result.final = result.curve[-1][1]
    last = [a for _, a in result.curve[-LAST_EVALS:]]
    result.mean_last = sum(last) / len(last)
  losses = sorted(
    (int(number(row['round_num'])), number(row.get('train_loss')))
    for row in rows
    if number(row.get('round_num')) is not None
  )
  if losses and all(v is not None and math.isfinite(v) for r, v in losses[-FLAGS.pilot_window :]):
    result.train_loss = targets.running_average(losses, losses[-1][0], FLAGS.pilot_window)
  result.step_size = seed_stats.mean_std(number(row.get(STEP_SIZE)) for row in rows)[0]
  result.distance = seed_stats.mean_std(number(row.get(DISTANCE)) for row in rows)[0]
  code = (cell_runner.read_status(runs_dir, cell) or {}).get('exit_code')
  result.status = cell_runner.run_status(
    result.rounds >= cell.rounds, result.rounds, cell.rounds, code
  )
  return result


def select(pilot: list[Cell], results: dict[str, Result]) -> Cell | None:
  """The finished pilot cell with the smallest last-window training loss (a diverged one is
  never selected)."""
  done = [c for c in pilot if results[c.name].status == 'done' and results[c.name].train_loss]
  return min(done, key=lambda c: results[c.name].train_loss, default=None)


# --- the committed Table 1 ---


def committed_rows(alpha: str) -> list[dict[str, str]]:
  path = os.path.join(
    publish.repo_root(),
    'reproductions',
    'kim2024_delta_sgd',
    'results',
    'table1',
    'seeds',
    'table1_fmnist.csv',
  )
  with open(path, newline='') as f:
    return [row for row in csv.DictReader(f) if row['alpha'] == alpha]


# --- report ---


def _g(value: float | None) -> str:
  return '' if value is None else f'{value:.3g}'


PILOT_COLUMNS = [
  'alpha',
  'optimizer',
  'reps_rel',
  'train_loss_window',
  'accuracy_final',
  'step_size',
  'distance',
  'selected',
  'status',
]


def pilot_rows(pilot: list[Cell], chosen: dict, results: dict[str, Result]) -> list[dict]:
  selected = {(c.alpha, c.optimizer): c.reps for c in chosen.values()}
  return [
    {
      'alpha': c.alpha,
      'optimizer': c.optimizer,
      'reps_rel': c.reps,
      'train_loss_window': _round(results[c.name].train_loss, 4),
      'accuracy_final': _round(results[c.name].final, 2),
      'step_size': _round(results[c.name].step_size, 5),
      'distance': _round(results[c.name].distance, 5),
      'selected': 'yes' if selected.get((c.alpha, c.optimizer)) == c.reps else '',
      'status': results[c.name].status,
    }
    for c in pilot
  ]


def _round(value: float | None, digits: int) -> float | None:
  return None if value is None else round(value, digits)


TABLE_COLUMNS = [
  'alpha',
  'optimizer',
  'published',
  'ours',
  'ours_std',
  'ours_per_seed',
  'ours_last5evals',
  'step_size',
  'seeds',
  'source',
]


def table_rows(
  alpha: str, chosen: dict, full: list[Cell], results: dict[str, Result]
) -> list[dict]:
  """The DoG rows of `alpha` (mean over the seeds) then the committed rows of that alpha."""
  rows = []
  for optimizer in FLAGS.optimizers:
    best = chosen.get((alpha, optimizer))
    if best is None:
      continue
    seeds = [c for c in full if c.alpha == alpha and c.optimizer == optimizer]
    finals = {c.seed: results[c.name].final for c in seeds if results[c.name].final is not None}
    mean, std = seed_stats.mean_std(finals.values())
    rows.append(
      {
        'alpha': alpha,
        'optimizer': f'{optimizer} (reps_rel {best.reps})',
        'published': None,
        'ours': _round(mean, 2),
        'ours_std': _round(std, 2),
        'ours_per_seed': ' '.join(f'{s}:{v:.2f}' for s, v in sorted(finals.items())),
        'ours_last5evals': _round(
          seed_stats.mean_std(results[c.name].mean_last for c in seeds)[0], 2
        ),
        'step_size': seed_stats.mean_std(results[c.name].step_size for c in seeds)[0],
        'seeds': f'{len(finals)} of {len(seeds)}',
        'source': 'this study; '
        + seed_stats.status_summary([results[c.name].status for c in seeds]),
      }
    )
  for row in committed_rows(alpha):
    rows.append(
      {
        'alpha': alpha,
        'optimizer': row['optimizer'],
        'published': cell_runner.to_float(row['published']),
        'ours': cell_runner.to_float(row['ours']),
        'ours_std': cell_runner.to_float(row['ours_std']),
        'ours_per_seed': row['ours_per_seed'],
        'ours_last5evals': cell_runner.to_float(row['ours_last5evals']),
        'step_size': cell_runner.to_float(row['step_size']),
        'seeds': row['seeds'],
        'source': 'results/table1/seeds',
      }
    )
  return rows


def verdict(rows: list[dict]) -> list[str]:
  """Each DoG row against Delta-SGD (both forms) and the best committed row: the difference of
  the seed means, and "ahead" / "behind" only beyond the larger of the two seed stds."""
  ours = [r for r in rows if r['source'].startswith('this study') and r['ours'] is not None]
  committed = [
    r for r in rows if not r['source'].startswith('this study') and r['ours'] is not None
  ]
  if not committed:
    return []
  best = max(committed, key=lambda r: r['ours'])
  others = [r for r in committed if r['optimizer'].startswith('delta_sgd')]
  lines = []
  for row in ours:
    for other in [*others, *([best] if best not in others else [])]:
      gap = row['ours'] - other['ours']
      spread = max(row['ours_std'] or 0.0, other['ours_std'] or 0.0)
      word = (
        'ahead of' if gap > spread else 'behind' if gap < -spread else "within the seeds' spread of"
      )
      tag = ' (the best committed row)' if other is best else ''
      lines.append(
        f'- alpha {row["alpha"]}: {row["optimizer"]} {row["ours"]:.2f} is {word} '
        f'{other["optimizer"]}{tag} {other["ours"]:.2f} ({gap:+.2f}; larger seed std {spread:.2f})'
      )
  return lines


def write_report(pilot, chosen, full, results, runs_dir: str, out: str) -> list[str]:
  written = []
  path = os.path.join(out, 'pilot_fmnist.csv')
  prows = pilot_rows(pilot, chosen, results)
  publish.write_csv(path, PILOT_COLUMNS, prows)
  written.append(path)
  rows = [
    r
    for alpha in dict.fromkeys(c.alpha for c in pilot)
    for r in table_rows(alpha, chosen, full, results)
  ]
  path = os.path.join(out, 'dog_fmnist.csv')
  publish.write_csv(path, TABLE_COLUMNS, rows)
  written.append(path)
  example = cell_runner.shown_command(trainer_command(full[0], runs_dir)) if full else ''
  shown = {
    'published': lambda v: publish.number_text(v, 1),
    'ours': publish.number_text,
    'ours_std': publish.number_text,
    'ours_last5evals': publish.number_text,
    'step_size': _g,
  }
  lines = [
    "# DoG and L-DoG beside Kim et al. 2024's Table 1 (FMNIST)",
    '',
    f'- Command: `{cell_runner.command_line(BAZEL_TARGET)}`',
    cell_runner.stamp_line(),
    f"- Protocol: Kim et al.'s Table 1 (`{' '.join(COMMON_FLAGS)} {' '.join(SERVER_FLAGS['fedavg'])}`), "
    f'Dirichlet alpha {", ".join(dict.fromkeys(c.alpha for c in pilot))}.',
    f'- Pilot: reps_rel in {", ".join(FLAGS.reps_grid)}, {FLAGS.pilot_rounds} rounds, seed '
    f'{FLAGS.seed}; selected per optimizer: the smallest training loss over the last '
    f'{FLAGS.pilot_window} rounds. Then the selected reps_rel, {FLAGS.rounds} rounds, seeds '
    f'{FLAGS.seed}-{FLAGS.seed + FLAGS.seeds - 1}; evaluation every {FLAGS.rounds_per_eval} rounds.',
    f'- Trainer command of a cell (logs in `<runs_dir>/<cell>.log`): `{example}`',
    '',
    '## Pilot',
    '',
    *publish.markdown_table(
      PILOT_COLUMNS, [[('' if r[k] is None else r[k]) for k in PILOT_COLUMNS] for r in prows]
    ),
    '',
    f'`train_loss_window`: mean training loss over the last {FLAGS.pilot_window} rounds; '
    '`accuracy_final`: test accuracy (%) at the last round; `step_size`, `distance`: the '
    "clients' mean step size and rbar after their last step, averaged over the rounds.",
    '',
    f'## Final test accuracy after {FLAGS.rounds} rounds',
    '',
    *publish.markdown_table(
      TABLE_COLUMNS,
      [
        [shown[k](r[k]) if k in shown else ('' if r[k] is None else r[k]) for k in TABLE_COLUMNS]
        for r in rows
      ],
    ),
    '',
    '`ours`: the mean over the seeds of the final test accuracy (%), `ours_std` their sample '
    "std, `ours_last5evals` the mean of the last 5 evaluations; `published`: Kim et al.'s number "
    '(none for DoG: the paper does not run it). The rows below the DoG rows are the committed '
    'multi-seed Table 1 (results/table1/seeds), the same protocol and seeds.',
    '',
    '## Does DoG beat what is here?',
    '',
    *verdict(rows),
  ]
  path = os.path.join(out, 'dog_fmnist.md')
  with publish.atomic_output(path) as f:
    f.write('\n'.join(lines) + '\n')
  written.append(path)
  written += write_figures(chosen, full, results, out)
  return written


def write_figures(chosen, full, results, out: str) -> list[str]:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  written = []
  for alpha in dict.fromkeys(c.alpha for c in full):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for optimizer in FLAGS.optimizers:
      seeds = [c for c in full if c.alpha == alpha and c.optimizer == optimizer]
      rounds, mean, low, high = seed_stats.curve_band([results[c.name].curve for c in seeds])
      if rounds:
        best = chosen[(alpha, optimizer)]
        (line,) = ax.plot(rounds, mean, label=f'{NAMES[optimizer]} (reps_rel {best.reps})')
        ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    for k, row in enumerate(committed_rows(alpha)):
      if row['optimizer'] in ('delta_sgd', 'delta_sgd_authors_code', 'sgdm_decay', 'sgd'):
        ax.axhline(
          float(row['ours']),
          linestyle=':',
          linewidth=1,
          color=f'C{k + 2}',
          label=f'{row["optimizer"]} (committed final, mean of 3 seeds)',
        )
    ax.set_ylim(bottom=max(0.0, ax.get_ylim()[0]))
    ax.set_xlabel('round')
    ax.set_ylabel('test accuracy (%)')
    ax.set_title(
      f'FMNIST, Dirichlet alpha={alpha}, FedAvg server (mean; band: min to max over seeds)',
      fontsize=9,
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc='lower right')
    path = os.path.join(out, f'accuracy_alpha{alpha}.png')
    publish.save_figure(fig, path, dpi=120, bbox_inches='tight')
    plt.close(fig)
    written.append(path)
  return written


# --- main ---


def check_flags(argv: list[str]) -> None:
  cell_runner.check_driver_flags(FLAGS, argv)
  for name in ('pilot_rounds', 'pilot_window', 'seeds'):
    if FLAGS[name].value < 1:
      raise UsageError(f'--{name} must be >= 1, got {FLAGS[name].value}')
  for alpha in FLAGS.alphas:
    if alpha not in TABLE1:
      raise UsageError(
        f'--alphas: {alpha!r} has no committed Table 1 column; valid: {", ".join(TABLE1)}'
      )
  unknown = [o for o in FLAGS.optimizers if o not in OPTIMIZERS]
  if unknown or not FLAGS.optimizers:
    raise UsageError(
      f'--optimizers: unknown {", ".join(unknown) or "(none)"}; valid: {", ".join(OPTIMIZERS)}'
    )
  for reps in FLAGS.reps_grid:
    try:
      value = float(reps)
    except ValueError:
      value = math.nan
    if not (math.isfinite(value) and value > 0):
      raise UsageError(f'--reps_grid: {reps!r} is not a number > 0')


def run(cells: list[Cell], runs_dir: str, rounds: int) -> tuple[int | None, list]:
  if FLAGS.report_only or not cells:
    return None, []
  stopped, failed, runner = cell_runner.run_cells(
    cells, runs_dir, FLAGS.parallel, trainer_command, rounds
  )
  if stopped is None:
    cell_runner.report_failures('dog', failed, runner, runs_dir)
  return stopped, failed


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  check_flags(argv)
  runs_dir = publish.resolve(FLAGS.runs_dir)
  # One committed result per pilot length (results/dog/pilot<rounds>).
  out = publish.output_from_flags(DRIVER, FLAGS, SETTINGS, entry=f'dog_pilot{FLAGS.pilot_rounds}')
  pilot = [
    Cell(a, o, r, FLAGS.seed, FLAGS.pilot_rounds, True)
    for a in FLAGS.alphas
    for o in FLAGS.optimizers
    for r in FLAGS.reps_grid
  ]
  if FLAGS.dry_run:
    for cell in pilot:
      print(shlex.join(trainer_command(cell, runs_dir)))
    print(f'{len(pilot)} pilot cells, then the selected ones; the report would go to {out}')
    return 0
  os.makedirs(runs_dir, exist_ok=True)
  stopped, failed = run(pilot, runs_dir, FLAGS.pilot_rounds)
  if stopped is not None:
    return stopped
  results = {c.name: read_result(runs_dir, c) for c in pilot}
  chosen = {}
  for alpha in FLAGS.alphas:
    for optimizer in FLAGS.optimizers:
      best = select([c for c in pilot if (c.alpha, c.optimizer) == (alpha, optimizer)], results)
      if best is not None:
        chosen[(alpha, optimizer)] = best
  # A pilot as long as the full runs is the selected cell's first seed.
  full = [
    best
    if k == 0 and best.rounds == FLAGS.rounds
    else dataclasses.replace(best, seed=FLAGS.seed + k, rounds=FLAGS.rounds, pilot=False)
    for best in chosen.values()
    for k in range(FLAGS.seeds)
  ]
  stopped, more = run([c for c in full if not c.pilot], runs_dir, FLAGS.rounds)
  if stopped is not None:
    return stopped
  failed += more
  results.update({c.name: read_result(runs_dir, c) for c in full})
  unfinished = [
    c.name
    for c in pilot + full
    if not cell_runner.ran_to_the_end(
      runs_dir, c, shlex.join(trainer_command(c, runs_dir)), c.rounds, diverged=True
    )
  ]
  if FLAGS.publish and (unfinished or not full):
    print(
      f'dog: error: --publish: {len(unfinished)} cells have not finished'
      + (f' (e.g. {unfinished[0]})' if unfinished else '')
      + '; nothing was written',
      file=sys.stderr,
      flush=True,
    )
    return 1
  os.makedirs(out, exist_ok=True)
  written = write_report(pilot, chosen, full, results, runs_dir, out)
  print('wrote ' + ', '.join(written))
  return 1 if failed else 0


def main(argv: list[str]) -> int:
  return cell_runner.run_main('dog', _main, argv)


if __name__ == '__main__':
  cell_runner.app_run(main)
