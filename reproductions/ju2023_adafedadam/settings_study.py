"""Ju et al. (AdaFedAdam) Table 5, Synthetic: which data set and which averaging give the published numbers.

  .venv/bin/python -m reproductions.ju2023_adafedadam.settings_study --parallel=2
  .venv/bin/python -m reproductions.ju2023_adafedadam.settings_study --publish --parallel=2
      # rewrites the committed results/settings (`reproductions.publish`)

The paper does not say which Synthetic data set it ran (it cites Caldas et al., LEAF), nor how
its Avg, STD and Worst 30% are averaged, and its FedAvg, FedAdam and FedProx rows cannot be
unweighted means over the same clients (`reproduce_synthetic.published_consistency`). This
driver runs the candidates the paper leaves open -- the generator of Li et al. (FedProx) at
Synthetic(0, 0), (0.5, 0.5), (1, 1) and its IID branch (`--synthetic_iid`: one labelling model
for all clients; every other setting of it draws a model per client), and LEAF's own generator
(`--synthetic_generator=leaf`: one labelling direction scaled per client, tiny clients; and
`leaf_code`, its code's softmax over each class's examples) -- for --algorithms (default FedAvg
and AdaFedAdam) over --seeds, with App. C.1's client training and servers (`paper_setup`), each
client's data split 80/20 into local train/test, all 100 clients every round, --rounds rounds.

From the last evaluation's client_eval file (each client's test accuracy a_k and test-set size
n_k) it computes each statistic over clients and over examples (`fairness_statistics`) and, per
data set and each of the 8 ways of combining them, the largest distance of ours from the
published Avg, STD and Worst 30% over the algorithms; beside them, one softmax regression fitted
centrally to each data set (`candidates.pooled_fit_statistics`). The report (--out; with --publish
results/settings) gets settings_study.{md,csv} and settings_study.png.
"""

import csv
import dataclasses
import json
import os
import sys

from absl import flags
from absl import logging
import numpy as np

from reproductions import cell_runner
from reproductions import publish
from reproductions import seed_stats
from reproductions.ju2023_adafedadam import candidates
from reproductions.ju2023_adafedadam import fairness_statistics
from reproductions.ju2023_adafedadam import paper_setup
from reproductions.ju2023_adafedadam.published import PUBLISHED

DATA_SETS = candidates.DATA_SETS
LABELS = candidates.LABELS
STATISTICS = fairness_statistics.STATISTICS
WAYS = fairness_statistics.WAYS
CLOSE = 5.0  # "within a few points"

flags.DEFINE_integer('rounds', 1000, 'Rounds per cell (the paper: 1000).')
flags.DEFINE_list('seeds', ['1', '2', '3'], 'Seeds (each generates its own data set).')
flags.DEFINE_list('data_sets', list(DATA_SETS), f'Data sets, of {", ".join(DATA_SETS)}.')
flags.DEFINE_list(
  'algorithms', ['FedAvg', 'AdaFedAdam'], f'Algorithms, of {", ".join(paper_setup.ARGS)}.'
)
flags.DEFINE_float('fedprox_mu', 1.0, "FedProx's mu, if FedProx is run (Table 5's tuned mu: 1).")
flags.DEFINE_integer('parallel', 2, 'Trainers at once (each on one TF thread).')
flags.DEFINE_enum(
  'engine',
  'vectorised',
  ['inprocess', 'vectorised'],
  "The trainer's --engine (both give the same rounds to float rounding: the README).",
)
flags.DEFINE_integer('clients_per_chunk', 10, "With --engine=vectorised: the trainer's.")
flags.DEFINE_integer('rounds_per_eval', 50, 'Evaluate every this many rounds.')
flags.DEFINE_integer('rounds_per_checkpoint', 100, 'Checkpoint every this many rounds.')
cell_runner.define_output_flags('runs/ju_settings')
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = ('rounds', 'seeds', 'data_sets', 'algorithms', 'fedprox_mu', 'engine', 'rounds_per_eval')

UsageError = cell_runner.UsageError


@dataclasses.dataclass(frozen=True)
class Cell:
  name: str
  data_set: str  # a key of DATA_SETS
  algorithm: str  # a key of paper_setup.ARGS
  seed: int


def _choices(name: str, values: list[str], valid) -> list[str]:
  if not values:
    raise UsageError(f'--{name}: give at least one')
  for value in values:
    if value not in valid:
      raise UsageError(f'--{name}: {value!r} is not one of {", ".join(valid)}')
  return list(dict.fromkeys(values))


def seeds() -> list[int]:
  values = []
  for text in FLAGS.seeds:
    if not text.isdigit():
      raise UsageError(f'--seeds: {text!r} is not a seed (an integer >= 0)')
    values.append(int(text))
  if not values:
    raise UsageError('--seeds: give at least one seed')
  return list(dict.fromkeys(values))


def build_cells() -> list[Cell]:
  data_sets = _choices('data_sets', FLAGS.data_sets, DATA_SETS)
  algorithms = _choices('algorithms', FLAGS.algorithms, paper_setup.ARGS)
  return [
    Cell(f'{d}_{a.lower().replace("-", "")}_seed{s}', d, a, s)
    for s in seeds()
    for d in data_sets
    for a in algorithms
  ]


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  args = [
    '--task=synthetic',
    *candidates.data_set_flags(cell.data_set),
    f'--engine={FLAGS.engine}',
    *paper_setup.CLIENT_ARGS,
    '--clients_per_round=100',
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *paper_setup.ARGS[cell.algorithm],
  ]
  if FLAGS.engine == 'vectorised':
    args.append(f'--clients_per_chunk={FLAGS.clients_per_chunk}')
  param = {'FedProx': FLAGS.fedprox_mu, 'q-FedAvg': 1.0, 'AdaFedAdam': 1.0}.get(cell.algorithm)
  args += paper_setup.param_flags(cell.algorithm, param)
  return [sys.executable, '-m', 'run.federated_trainer', *args]


# -- Results. --------------------------------------------------------------------------------


def last_client_eval(run_dir: str) -> tuple[int, dict[str, float]] | None:
  """(round, statistics) of the run's last client_eval file; None if it has none."""
  directory = os.path.join(run_dir, 'client_eval')
  if not os.path.isdir(directory):
    return None
  files = sorted(f for f in os.listdir(directory) if f.startswith('round_') and f.endswith('.csv'))
  if not files:
    return None
  with open(os.path.join(directory, files[-1]), newline='') as f:
    rows = list(csv.DictReader(f))
  if not rows or 'num_examples' not in rows[0]:
    raise ValueError(f'{directory}/{files[-1]}: no num_examples column (written before it existed)')
  stats = fairness_statistics.statistics_both_ways(
    [float(r['accuracy']) for r in rows], [float(r['num_examples']) for r in rows]
  )
  return int(files[-1][len('round_') : -len('.csv')]), stats


def finished_results(cells: list[Cell], runs_dir: str) -> dict[str, dict[str, float]]:
  """Cell name -> the statistics of its last evaluation, for the cells that ran all rounds."""
  results = {}
  for cell in cells:
    last = last_client_eval(os.path.join(runs_dir, cell.name))
    if last is not None and last[0] >= FLAGS.rounds:
      results[cell.name] = last[1]
  return results


def _columns(runs: list[dict[str, float]]) -> dict:
  """Each statistic both ways: its mean and std over `runs` ('' without runs), 2 decimals."""
  columns = {}
  for stat in STATISTICS:
    for way in WAYS:
      key = f'{stat}_{way}'
      mean, std = seed_stats.mean_std(r[key] for r in runs)
      columns[key] = '' if mean is None else round(mean, 2)
      columns[f'{key}_std'] = '' if std is None else round(std, 2)
  return columns


def summary(cells: list[Cell], finished: dict[str, dict[str, float]]) -> list[dict]:
  """One row per (data set, algorithm): each statistic both ways, mean and std over the seeds of
  the finished cells, beside the published number."""
  rows = []
  for data_set, algorithm in dict.fromkeys((c.data_set, c.algorithm) for c in cells):
    runs = [
      finished[c.name]
      for c in cells
      if (c.data_set, c.algorithm) == (data_set, algorithm) and c.name in finished
    ]
    row = {'data_set': data_set, 'algorithm': algorithm, 'seeds': len(runs)}
    columns = _columns(runs)
    for i, stat in enumerate(STATISTICS):  # each statistic's published number, then ours
      row[f'{stat}_published'] = PUBLISHED[algorithm][i]
      row.update({k: v for k, v in columns.items() if k.startswith(f'{stat}_')})
    rows.append(row)
  return rows


def _cached_pooled_fit(runs_dir: str, data_set: str, seed: int) -> dict[str, float]:
  """`pooled_fit_statistics`, kept in the runs directory (a fit takes seconds; reports repeat)."""
  path = os.path.join(runs_dir, f'pooled_fit_{data_set}_seed{seed}.json')
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  stats = candidates.pooled_fit_statistics(data_set, seed)
  with publish.atomic_output(path) as f:
    json.dump(stats, f)
  return stats


def pooled_fit_rows(
  cells: list[Cell], finished: dict[str, dict[str, float]], runs_dir: str
) -> list[dict]:
  """One row per data set: `pooled_fit_statistics` (mean and std over the seeds of which a cell
  of that data set finished)."""
  rows = []
  for data_set in dict.fromkeys(c.data_set for c in cells):
    ran = sorted({c.seed for c in cells if c.data_set == data_set and c.name in finished})
    fits = [_cached_pooled_fit(runs_dir, data_set, seed) for seed in ran]
    rows.append(
      {'data_set': data_set, 'algorithm': 'pooled fit', 'seeds': len(fits), **_columns(fits)}
    )
  return rows


# -- The report. -----------------------------------------------------------------------------


def write_report(cells: list[Cell], runs_dir: str, out: str) -> None:
  """settings_study.{csv,md}, settings_combinations.csv and settings_study.png into `out`; the
  tables (less the header) on stdout."""
  os.makedirs(out, exist_ok=True)
  finished = finished_results(cells, runs_dir)
  rows = summary(cells, finished)
  combos = fairness_statistics.combinations(rows)
  fits = pooled_fit_rows(cells, finished, runs_dir)
  algorithms = list(dict.fromkeys(c.algorithm for c in cells))
  write_csvs(out, rows, fits, combos, algorithms)
  header = header_lines(cells, runs_dir)
  lines = [
    *header,
    *statistics_table(rows),
    *combinations_table(combos, algorithms),
    *pooled_fit_table(fits),
  ]
  with publish.atomic_output(os.path.join(out, 'settings_study.md')) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines[len(header) :]), flush=True)
  write_figure(rows, out)


def write_csvs(
  out: str, rows: list[dict], fits: list[dict], combos: list[dict], algorithms: list[str]
) -> None:
  """settings_study.csv (the statistics, then the pooled fits) and settings_combinations.csv."""
  with publish.atomic_output(os.path.join(out, 'settings_study.csv'), newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    writer.writerows(fits)  # published columns empty
  with publish.atomic_output(os.path.join(out, 'settings_combinations.csv'), newline='') as f:
    writer = csv.DictWriter(
      f,
      fieldnames=[
        'data_set',
        'avg_over',
        'std_over',
        'worst30_over',
        'largest_difference',
        'algorithms',
        *[f'largest_difference_{a}' for a in algorithms],
      ],
    )
    writer.writeheader()
    writer.writerows(combos)


def _mean_std_cell(row: dict, key: str) -> str:
  """A table cell: the mean +- std over seeds of `key`, or a dash where there is none."""
  return '—' if row[key] == '' else seed_stats.mean_std_text((row[key], row[f'{key}_std']))


def header_lines(cells: list[Cell], runs_dir: str) -> list[str]:
  """The report's title, command, settings, date and code version."""
  return [
    '# Ju et al. (AdaFedAdam) Table 5, Synthetic: which data set and averaging match the paper',
    '',
    f'- Command: `{cell_runner.command_line("//reproductions/ju2023_adafedadam:settings_study")}`',
    f'- Rounds {FLAGS.rounds}; seeds {", ".join(str(s) for s in seeds())}; all 100 clients per '
    f'round; engine {FLAGS.engine}; the last evaluation (round {FLAGS.rounds}) of each '
    "client's local test accuracy; mean +- std over seeds.",
    f'- Trainer command of a cell: `{cell_runner.shown_command(trainer_command(cells[-1], runs_dir))}`',
    cell_runner.stamp_line() + '.',
    '- "clients": the unweighted statistic over the 100 clients; "examples": weighted by each '
    "client's test examples (Worst 30%: the lowest-accuracy clients holding 30% of the examples).",
  ]


def statistics_table(rows: list[dict]) -> list[str]:
  """Per data set and algorithm: the published Avg, STD and Worst 30% beside ours, each over
  clients and over examples."""
  lines = [
    '',
    '| data set | algorithm | seeds | Avg paper | Avg clients | Avg examples | STD paper | '
    'STD clients | STD examples | Worst 30% paper | Worst 30% clients | Worst 30% examples |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    cols = [LABELS[row['data_set']], row['algorithm'], str(row['seeds'])]
    for stat in STATISTICS:
      cols.append(f'{row[f"{stat}_published"]:.2f}')
      cols += [_mean_std_cell(row, f'{stat}_{way}') for way in WAYS]
    lines.append('| ' + ' | '.join(cols) + ' |')
  return lines


def combinations_table(combos: list[dict], algorithms: list[str]) -> list[str]:
  """Per data set: the way of averaging closest to the paper over all algorithms, and each
  algorithm's own closest way, with the largest difference."""
  lines = [
    '',
    'Largest |ours - paper| over Avg, STD and Worst 30%, per data set: over all algorithms for the '
    'way of averaging that comes closest, and for each algorithm alone with its own closest way '
    f'(all 8 ways: settings_combinations.csv). Within {CLOSE:g} points: "yes".',
    '',
    '| data set | closest way (Avg / STD / Worst 30% over) | largest difference | '
    + ' | '.join(f'{a}: closest way, largest difference' for a in algorithms)
    + ' |',
    '|---|---|---|' + '---|' * len(algorithms),
  ]
  way = lambda c: f'{c["avg_over"]} / {c["std_over"]} / {c["worst30_over"]}'
  close = lambda d: f'{d:.2f} ({"yes" if d <= CLOSE else "no"})'
  for data_set in dict.fromkeys(c['data_set'] for c in combos):
    mine = [c for c in combos if c['data_set'] == data_set]
    best = min(mine, key=lambda c: c['largest_difference'])
    cols = [LABELS[data_set], way(best), close(best['largest_difference'])]
    for algorithm in algorithms:
      key = f'largest_difference_{algorithm}'
      ranked = [c for c in mine if key in c]
      if not ranked:
        cols.append('—')
        continue
      own = min(ranked, key=lambda c, key=key: c[key])
      cols.append(f'{way(own)}, {close(own[key])}')
    lines.append('| ' + ' | '.join(cols) + ' |')
  return lines


def pooled_fit_table(fits: list[dict]) -> list[str]:
  """The centrally fitted softmax regression's statistics per data set, for reference."""
  lines = [
    '',
    "For reference, one softmax regression fitted centrally to the union of the clients' "
    "training data (cross-entropy, L-BFGS; what a single model of the paper's kind reaches "
    'on the data set when federated optimisation is not the question), on the same local test '
    'sets (`pooled fit` rows of settings_study.csv):',
    '',
    '| data set | seeds | Avg clients | Avg examples | STD clients | STD examples | '
    'Worst 30% clients | Worst 30% examples |',
    '|---|---|---|---|---|---|---|---|',
  ]
  for row in fits:
    cols = [LABELS[row['data_set']], str(row['seeds'])]
    cols += [_mean_std_cell(row, f'{stat}_{way}') for stat in STATISTICS for way in WAYS]
    lines.append('| ' + ' | '.join(cols) + ' |')
  return lines


def write_figure(rows: list[dict], out: str) -> None:
  """Per algorithm (rows) and statistic (columns): ours per data set, over clients and over
  examples (bars, +- std over seeds), and the published number (dashed)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  algorithms = list(dict.fromkeys(r['algorithm'] for r in rows))
  data_sets = list(dict.fromkeys(r['data_set'] for r in rows))
  fig, axes = plt.subplots(len(algorithms), 3, figsize=(13, 3.2 * len(algorithms)), squeeze=False)
  x = np.arange(len(data_sets))
  titles = {'avg': 'Avg', 'std': 'STD', 'worst30': 'Worst 30%'}
  for i, algorithm in enumerate(algorithms):
    for j, stat in enumerate(STATISTICS):
      ax = axes[i][j]
      by_set = {r['data_set']: r for r in rows if r['algorithm'] == algorithm}
      for k, way in enumerate(WAYS):
        values = [by_set[d][f'{stat}_{way}'] for d in data_sets]
        errors = [by_set[d][f'{stat}_{way}_std'] for d in data_sets]
        ax.bar(
          x + (k - 0.5) * 0.38,
          [np.nan if v == '' else v for v in values],
          0.38,
          yerr=[0 if e == '' else e for e in errors],
          label=f'ours, over {way}',
          capsize=2,
        )
      published = PUBLISHED[algorithm][j]
      ax.axhline(published, color='k', linestyle='--', linewidth=1, label=f'paper ({published})')
      ax.set_xticks(x, [LABELS[d].replace('Synthetic', 'Syn.') for d in data_sets], fontsize=7)
      ax.set_ylim(0, 100 if stat != 'std' else 50)
      ax.set_title(f'{algorithm}: {titles[stat]} (%)', fontsize=9)
      ax.grid(axis='y', alpha=0.3)
      if i == 0 and j == 0:
        ax.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(out, 'settings_study.png')
  publish.save_figure(fig, path, dpi=110)
  plt.close(fig)
  print(f'wrote {path}', flush=True)


def main(argv: list[str]) -> int:
  return cell_runner.run_main('settings_study', _main, argv)


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  cell_runner.check_driver_flags(FLAGS, argv)
  if FLAGS.clients_per_chunk < 1:
    raise UsageError(f'--clients_per_chunk must be >= 1, got {FLAGS.clients_per_chunk}')
  cells = build_cells()
  runs_dir = publish.resolve(FLAGS.runs_dir)
  out = publish.output_from_flags('reproductions.ju2023_adafedadam.settings_study', FLAGS, SETTINGS)
  return cell_runner.drive(
    'settings_study', FLAGS, cells, runs_dir, out, trainer_command, write_report
  )


if __name__ == '__main__':
  cell_runner.app_run(main)
