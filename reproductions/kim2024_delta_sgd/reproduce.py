"""Reproduces Kim et al. 2024 (Delta-SGD), Table 1 FMNIST column and Table 4 FMNIST alpha 0.1.

Kim, Toghani, Uribe, Kyrillidis, "Adaptive Federated Learning with Auto-Tuned Clients", ICLR
2024: Table 1 (FedAvg server), the FMNIST/CNN column, alpha in {1, 0.1, 0.01}, and Table 4
(App. B.4, FedAdam server), FMNIST at alpha 0.1.

Protocol: the paper's, with one difference: task `fmnist` (100 clients x 500 examples,
Dirichlet(alpha) labels, the paper's CNN) splits each client's 500 examples 80/20 into local
train/test for per-client metrics, so a client trains on 400 (7 steps of 64; the paper says 500,
the authors' code trains on 450, 8 steps), 10 clients per round, E = 1 local epoch, batch 64, unweighted server
average with server learning rate 1 (`--server_optimizer=sgd --server_learning_rate=1
--client_weighting=uniform`), 1000 rounds in the paper (`--rounds`), the final pooled test
accuracy. Table 4 replaces the server by FedAdam with PyTorch's default Adam, which the paper
used (`--server_optimizer=adam --server_learning_rate=0.001 --tau=1e-8`).

Rows (client optimizers) and their learning rates. The paper grid-searched the learning rates on
CIFAR-10 (SGD/SGDM {0.01, 0.05, 0.1, 0.5}, Adam/Adagrad {0.001, 0.01, 0.1}) and does not print
the winners; we use those of the authors' published run.sh, all inside those grids:

  sgd          --client_optimizer=sgd --client_learning_rate=0.1
  sgd_decay    the same + --client_lr_schedule=step_decay (/10 at 50% and 75% of the rounds)
  sgdm         --client_optimizer=sgdm --client_learning_rate=0.1 --client_momentum=0.9
  sgdm_decay   the same + --client_lr_schedule=step_decay
  adam         --client_optimizer=adam --client_learning_rate=0.001
  adagrad      --client_optimizer=adagrad --client_learning_rate=0.01
  sps          --client_optimizer=sps (f* = 0, c = 0.5)
  delta_sgd    --client_optimizer=delta_sgd (eta0 = 0.2, theta0 = 1, gamma = 2, delta = 0.1)

With --extra_rows, two rows that follow the authors' FL code where it differs from the paper
(no published number of their own; they are compared with the SPS / Delta-SGD number):
sps_authors_code (--sps_mode=constant: no step cap) and delta_sgd_authors_code (same-batch
gradient difference, grown first step, the code's zero rule, eps 1e-8).

The exact command (the paper's 1000 rounds, 24 + 2 cells by default; a fmnist training round
took ~0.3 s on one core of this 2-core machine, an evaluated one ~0.8 s), and the one that
rewrites the committed results (500 rounds; `reproductions.publish` refuses other settings):

  .venv/bin/python -m reproductions.kim2024_delta_sgd.reproduce --rounds=1000 --parallel=2
  .venv/bin/python -m reproductions.kim2024_delta_sgd.reproduce --publish --rounds=500 \\
      --parallel=2 --fedadam_rows=all --extra_rows

--seeds=N runs every cell with seeds --seed, ..., --seed + N - 1 (cells `..._seed2`); the tables
then give per (alpha, row) the mean of the seeds' final accuracies, their sample std and each
seed's number, the figures the mean curve with the seeds' range. --alpha_rows=ALPHA:ROW,... picks
one column's rows (e.g. only Delta-SGD and the best baseline), overriding --rows and --extra_rows
there. With --seeds > 1, --publish writes results/table1/seeds (publish.json entry
`reproduce_seeds`; the README has its command), not the one-seed tables.

Every trainer runs with TF_NUM_INTRAOP_THREADS=1 and TF_NUM_INTEROP_THREADS=1 (see `reproductions.cell_runner.child_env`:
the thread count changes the numbers, so it is fixed rather than tied to --parallel).

Every cell is one `run.federated_trainer` process with `--root_output_dir=<runs_dir>
--experiment_name=<cell>` (cells `a0.1_delta_sgd_seed1`, `fedadam_a0.1_sgd_seed1`), its stdout
and stderr appended to `<runs_dir>/<cell>.log`, its exit in `<runs_dir>/<cell>.status.json`.
Rerunning the same command resumes every unfinished cell from its checkpoints (a finished one
exits at once); Ctrl-C or SIGTERM stops the cells (SIGTERM to each) and exits 130 / 143.
Afterwards (or with --report_only) it writes into --out (default runs/kim2024_table1/report;
with --publish, reproductions/kim2024_delta_sgd/results/table1): table1_fmnist.{csv,md} (with a
claim check), table4_fedadam_fmnist.{csv,md}, accuracy_alpha<A>.png and fedadam_alpha0.1.png. A cell
that diverges (trainer exit 3) is reported as diverged with its last accuracy; a crashed cell
makes the script exit 1 naming the cell and its log.

step_decay depends on the total number of rounds, so its cells cannot be extended: use another
--runs_dir for another --rounds.
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
from reproductions.kim2024_delta_sgd import claim
from reproductions.kim2024_delta_sgd.protocol import COMMON_FLAGS
from reproductions.kim2024_delta_sgd.protocol import SERVER_FLAGS
from reproductions.kim2024_delta_sgd.published import FEDADAM_ALPHA
from reproductions.kim2024_delta_sgd.published import PAPER_ROUNDS
from reproductions.kim2024_delta_sgd.published import ROWS
from reproductions.kim2024_delta_sgd.published import TABLE1
from reproductions.kim2024_delta_sgd.published import TABLE4
from tff_adaptive.loop import targets

EXTRA_ROWS = ('sps_authors_code', 'delta_sgd_authors_code')
ROW_FLAGS = {
  'sgd': ['--client_optimizer=sgd', '--client_learning_rate=0.1'],
  'sgd_decay': [
    '--client_optimizer=sgd',
    '--client_learning_rate=0.1',
    '--client_lr_schedule=step_decay',
  ],
  'sgdm': ['--client_optimizer=sgdm', '--client_learning_rate=0.1', '--client_momentum=0.9'],
  'sgdm_decay': [
    '--client_optimizer=sgdm',
    '--client_learning_rate=0.1',
    '--client_momentum=0.9',
    '--client_lr_schedule=step_decay',
  ],
  'adam': ['--client_optimizer=adam', '--client_learning_rate=0.001'],
  'adagrad': ['--client_optimizer=adagrad', '--client_learning_rate=0.01'],
  'sps': ['--client_optimizer=sps'],
  'delta_sgd': ['--client_optimizer=delta_sgd'],
  'sps_authors_code': ['--client_optimizer=sps', '--sps_mode=constant'],
  'delta_sgd_authors_code': [
    '--client_optimizer=delta_sgd',
    '--delta_sgd_gradient=same_batch',
    '--delta_sgd_first_step=grown',
    '--delta_sgd_zero_rule=grow',
    '--delta_sgd_eps=1e-8',
  ],
}
# An extra row is compared with the published number of the row it varies.
EXTRA_OF = {'sps_authors_code': 'sps', 'delta_sgd_authors_code': 'delta_sgd'}
flags.DEFINE_integer('rounds', PAPER_ROUNDS, "Rounds per cell (the paper's: 1000).")
flags.DEFINE_list('alphas', ['1', '0.1', '0.01'], 'Dirichlet alphas of Table 1 (comma list).')
flags.DEFINE_list('rows', list(ROWS), f'Table 1 client optimizers, of {", ".join(ROWS)}.')
flags.DEFINE_bool(
  'extra_rows', False, f"Also the authors'-code rows {', '.join(EXTRA_ROWS)} (Table 1)."
)
flags.DEFINE_list(
  'fedadam_rows',
  ['sgd', 'delta_sgd'],
  f'Client optimizers of the Table 4 cells (FedAdam server, alpha {FEDADAM_ALPHA}); `all` for '
  'the 8 (and the extra rows with --extra_rows), empty for none.',
)
flags.DEFINE_integer('seed', 1, 'Seed of every cell (the first seed with --seeds).')
flags.DEFINE_integer(
  'seeds',
  1,
  'Seeds per cell: seed, seed + 1, ...; with more than one the tables give the mean and std '
  'over them and --publish writes the multi-seed result (results/table1/seeds).',
)
flags.DEFINE_multi_string(
  'alpha_rows',
  [],
  'ALPHA:ROW,ROW,...: the Table 1 rows of one alpha, overriding --rows and --extra_rows for it '
  '(extra rows by name), e.g. --alpha_rows=1:sgdm,delta_sgd,delta_sgd_authors_code',
)
flags.DEFINE_integer('parallel', 1, 'Trainer processes at once.')
flags.DEFINE_integer('rounds_per_eval', 25, 'Evaluate every this many rounds (and the last).')
flags.DEFINE_integer('rounds_per_checkpoint', 25, 'Checkpoint every this many rounds.')
cell_runner.define_output_flags('runs/kim2024_table1')
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values (results/publish.json).
SETTINGS = (
  'rounds',
  'alphas',
  'rows',
  'alpha_rows',
  'extra_rows',
  'fedadam_rows',
  'seed',
  'seeds',
  'rounds_per_eval',
)
# publish.json's entry of the multi-seed result (--seeds > 1); the one-seed table is `reproduce`.
SEEDS_ENTRY = 'reproduce_seeds'
LAST_EVALS = 5
STEP_SIZE_METRIC = 'client_step_size_mean'
# The column of the mean of the last LAST_EVALS evaluations (`targets.window_column`).
OURS_LAST = targets.window_column('ours', LAST_EVALS, 'evals')


class UsageError(ValueError):
  """A bad flag value: one line on stderr, exit 2 (like the trainer)."""


@dataclasses.dataclass(frozen=True)
class Cell:
  """One trainer run: a (server, alpha, client optimizer) cell of a table."""

  name: str
  server: str  # 'fedavg' (Table 1) or 'fedadam' (Table 4)
  alpha: str
  row: str
  seed: int = 1

  @property
  def published(self) -> float:
    row = EXTRA_OF.get(self.row, self.row)
    return TABLE1[self.alpha][row] if self.server == 'fedavg' else TABLE4[row]


@dataclasses.dataclass
class CellResult:
  """What a cell's run directory and status file hold."""

  rounds: int = 0
  ours: float | None = None  # % at eval_round, the last evaluated round
  eval_round: int | None = None
  mean_last: float | None = None  # mean of the last LAST_EVALS evaluations, %
  curve: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  status: str = 'missing'
  # The trainer's client_step_size_mean (the clients' mean local step size) averaged over the
  # rounds that have it: the adaptive step sizes' level (Delta-SGD, SPS); None for fixed rates.
  step_size: float | None = None


def _alpha(text: str) -> str:
  try:
    value = float(text)
  except ValueError:
    raise UsageError(f'--alphas: {text!r} is not a number') from None
  if not (math.isfinite(value) and value > 0):
    raise UsageError(f'--alphas: {text!r} must be > 0')
  return f'{value:g}'


def _check_rows(flag: str, names: list[str], valid: tuple[str, ...]) -> None:
  unknown = [n for n in names if n not in valid]
  if unknown:
    raise UsageError(f'--{flag}: unknown {", ".join(unknown)}; valid: {", ".join(valid)}')


def _alpha_rows() -> dict[str, list[str]]:
  """--alpha_rows as {alpha: rows}."""
  found: dict[str, list[str]] = {}
  for text in FLAGS.alpha_rows:
    alpha, sep, rows = text.partition(':')
    if not sep or not rows.strip():
      raise UsageError(f'--alpha_rows={text}: expected ALPHA:ROW,ROW,... (e.g. 1:sgdm,delta_sgd)')
    names = [r.strip() for r in rows.split(',') if r.strip()]
    _check_rows('alpha_rows', names, ROWS + EXTRA_ROWS)
    if _alpha(alpha) in found:
      raise UsageError(f'--alpha_rows: alpha {_alpha(alpha)} is given twice')
    found[_alpha(alpha)] = list(dict.fromkeys(names))
  return found


def build_cells() -> list[Cell]:
  """The cells of the flags, seed by seed: Table 1 (alphas x rows, or an alpha's --alpha_rows)
  then Table 4 (fedadam_rows)."""
  alphas = [_alpha(a) for a in FLAGS.alphas]
  for alpha in alphas:
    if alpha not in TABLE1:
      raise UsageError(f'--alphas: no published number for alpha {alpha}; use 1, 0.1, 0.01')
  _check_rows('rows', FLAGS.rows, ROWS)
  if FLAGS.seeds < 1:
    raise UsageError(f'--seeds={FLAGS.seeds} must be >= 1')
  rows = list(FLAGS.rows) + (list(EXTRA_ROWS) if FLAGS.extra_rows else [])
  per_alpha = _alpha_rows()
  for alpha in per_alpha:
    if alpha not in alphas:
      raise UsageError(f'--alpha_rows: alpha {alpha} is not in --alphas ({",".join(alphas)})')
  fedadam_rows = list(ROWS) if FLAGS.fedadam_rows == ['all'] else list(FLAGS.fedadam_rows)
  _check_rows('fedadam_rows', fedadam_rows, ROWS + EXTRA_ROWS)
  if FLAGS.extra_rows and FLAGS.fedadam_rows == ['all']:
    fedadam_rows += list(EXTRA_ROWS)
  cells = []
  for seed in range(FLAGS.seed, FLAGS.seed + FLAGS.seeds):
    cells += [
      Cell(f'a{a}_{r}_seed{seed}', 'fedavg', a, r, seed)
      for a in dict.fromkeys(alphas)
      for r in per_alpha.get(a, rows)
    ]
    cells += [
      Cell(f'fedadam_a{FEDADAM_ALPHA}_{r}_seed{seed}', 'fedadam', FEDADAM_ALPHA, r, seed)
      for r in dict.fromkeys(fedadam_rows)
    ]
  return cells


def trainer_command(cell: Cell, runs_dir: str) -> list[str]:
  """The trainer command of a cell (runs_dir absolute)."""
  args = [
    *COMMON_FLAGS,
    f'--dirichlet_alpha={cell.alpha}',
    *SERVER_FLAGS[cell.server],
    f'--total_rounds={FLAGS.rounds}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--seed={cell.seed}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
    *ROW_FLAGS[cell.row],
  ]
  return [sys.executable, '-m', 'run.federated_trainer', *args]


# --- metrics ---


def cell_result(runs_dir: str, cell: Cell, total_rounds: int) -> CellResult:
  """A cell's results: the last evaluation (the trainer evaluates the final round; a partial or
  diverged run ends at its last evaluated round, named in eval_round), the mean of the last
  LAST_EVALS evaluations, and its status."""
  rows = cell_runner.read_metrics(os.path.join(runs_dir, cell.name, 'metrics.csv'))
  result = CellResult(rounds=cell_runner.last_round(rows))
  for row in sorted(rows, key=lambda r: cell_runner.to_float(r.get('round_num')) or 0):
    accuracy, round_num = (
      cell_runner.to_float(row.get('eval_accuracy')),
      cell_runner.to_float(row.get('round_num')),
    )
    if accuracy is not None and round_num is not None:
      result.curve.append((int(round_num), 100.0 * accuracy))
  steps = [cell_runner.to_float(row.get(STEP_SIZE_METRIC)) for row in rows]
  result.step_size = seed_stats.mean_std(s for s in steps if s is None or math.isfinite(s))[0]
  if result.curve:
    result.eval_round, result.ours = result.curve[-1]
    last = [a for _, a in result.curve[-LAST_EVALS:]]
    result.mean_last = sum(last) / len(last)
  status = cell_runner.read_status(runs_dir, cell) or {}
  code = status.get('exit_code')
  if result.rounds >= total_rounds:
    result.status = 'done' if result.rounds == total_rounds else f'done ({result.rounds} rounds)'
  elif code == cell_runner.EXIT_DIVERGED:
    diverged = status.get('diverged_round') or result.rounds + 1
    result.status = f'diverged at round {diverged}'
  elif code is not None and code != 0 and code not in cell_runner.EXIT_INTERRUPTED:
    result.status = (
      f'crashed ({cell_runner.exit_text(code)}) after {result.rounds} of {total_rounds}'
    )
  elif result.rounds:
    result.status = f'partial {result.rounds} of {total_rounds}'
  return result


# --- report ---


def _fmt(value: float | None, digits: int = 1, sign: bool = False) -> str:
  if value is None:
    return ''
  return f'{value:+.{digits}f}' if sign else f'{value:.{digits}f}'


def _round(value: float | None) -> float | None:
  return None if value is None else round(value, 2)


def groups_by_row(cells: list[Cell]) -> dict[tuple[str, str, str], list[Cell]]:
  """The cells of each (server, alpha, row), seeds in order, rows in the cells' order."""
  groups: dict[tuple[str, str, str], list[Cell]] = {}
  for cell in cells:
    groups.setdefault((cell.server, cell.alpha, cell.row), []).append(cell)
  return groups


def table_rows(cells: list[Cell], results: dict[str, CellResult]) -> list[dict]:
  """One row per (alpha, row) over its seeds: `ours` the mean of the seeds' final accuracies
  (a diverged or unfinished seed with its last evaluation, named in `status`), `ours_std` their
  sample std, `ours_per_seed` each, OURS_LAST the mean over seeds of the last-5-evaluation mean.
  With one seed these are that seed's numbers (the table shows COLUMNS, with its eval_round)."""
  rows = []
  for group in groups_by_row(cells).values():
    found = [(c, results[c.name]) for c in group]
    finals = [r.ours for _, r in found if r.ours is not None]
    mean, std = seed_stats.mean_std(finals)
    published = group[0].published
    rows.append(
      {
        'alpha': group[0].alpha,
        'optimizer': group[0].row,
        'published': published,
        'ours': _round(mean),
        'ours_std': _round(std),
        'ours_per_seed': ' '.join(
          f'{c.seed}:{"-" if r.ours is None else f"{r.ours:.2f}"}' for c, r in found
        ),
        OURS_LAST: _round(seed_stats.mean_std(r.mean_last for _, r in found)[0]),
        'difference': _round(None if mean is None else mean - published),
        'rounds': min(r.rounds for _, r in found),
        'eval_round': found[0][1].eval_round if len(found) == 1 else None,
        'step_size': seed_stats.mean_std(r.step_size for _, r in found)[0],
        'seeds': f'{len(finals)} of {len(group)}',
        'status': seed_stats.status_summary([r.status for _, r in found]),
        claim.PER_SEED: {c.seed: r.ours for c, r in found if r.ours is not None},
      }
    )
  return rows


COLUMNS = (
  'alpha',
  'optimizer',
  'published',
  'ours',
  OURS_LAST,
  'difference',
  'rounds',
  'eval_round',
  'status',
)
SEED_COLUMNS = (
  'alpha',
  'optimizer',
  'published',
  'ours',
  'ours_std',
  'ours_per_seed',
  OURS_LAST,
  'difference',
  'step_size',
  'rounds',
  'seeds',
  'status',
)
# How the markdown shows a column (the CSV keeps the number).
SHOWN = {
  'published': lambda v: _fmt(v),
  'ours': lambda v: _fmt(v, 2),
  'ours_std': lambda v: _fmt(v, 2),
  OURS_LAST: lambda v: _fmt(v, 2),
  'difference': lambda v: _fmt(v, 2, sign=True),
  'step_size': lambda v: '' if v is None else f'{v:.3g}',
}


def columns() -> tuple[str, ...]:
  return SEED_COLUMNS if FLAGS.seeds > 1 else COLUMNS


def write_csv(path: str, rows: list[dict]) -> None:
  head = columns()
  with publish.atomic_output(path, newline='') as f:
    writer = csv.DictWriter(f, fieldnames=head)
    writer.writeheader()
    for row in rows:
      writer.writerow({k: '' if row[k] is None else row[k] for k in head})


def markdown_table(rows: list[dict]) -> list[str]:
  head = columns()
  return publish.markdown_table(
    head,
    [
      [SHOWN[k](row[k]) if k in SHOWN else ('' if row[k] is None else row[k]) for k in head]
      for row in rows
    ],
  )


def seeds_text() -> str:
  if FLAGS.seeds == 1:
    return f'seed {FLAGS.seed}'
  return f'seeds {FLAGS.seed}-{FLAGS.seed + FLAGS.seeds - 1}'


def header(title: str, protocol: str, cells: list[Cell], runs_dir: str) -> list[str]:
  example = cell_runner.shown_command(trainer_command(cells[0], runs_dir)) if cells else ''
  lines = [
    f'# {title}',
    '',
    protocol,
    '',
    f'- Rounds: {FLAGS.rounds} (the paper: {PAPER_ROUNDS}); evaluation every '
    f'{FLAGS.rounds_per_eval} rounds and at the last; {seeds_text()}'
    + (' (ours: the mean over them, ours_std their sample std).' if FLAGS.seeds > 1 else '.'),
    f'- Command: `{cell_runner.command_line("//reproductions/kim2024_delta_sgd:reproduce")}`',
    f'- Trainer command of each cell (here {cells[0].name if cells else "-"}; logs in '
    f'`{publish.shown_path(runs_dir)}/<cell>.log`): `{example}`',
    f'- TF thread pools per trainer: '
    f'{", ".join(f"{n}={cell_runner.child_env()[n]}" for n in cell_runner.THREAD_VARIABLES)} (fixed for every cell: '
    'the thread count changes float summation order, hence the numbers).',
    cell_runner.stamp_line(),
  ]
  return lines


NOTES = [
  '',
  'Columns: test accuracy % on the pooled 10,000 test images. `ours` is the last evaluation '
  f'(the final round when status is done, else the round in `eval_round`), `{OURS_LAST}` '
  f'the mean of the last {LAST_EVALS} evaluations, `difference` = ours - published, `rounds` the rounds '
  "trained. Learning rates: those of the authors' run.sh (the paper tuned on CIFAR-10 and "
  'prints no winners); see reproductions/kim2024_delta_sgd/reproduce.py.',
]
SEEDS_NOTE = (
  'Over seeds: per seed, the final evaluation (a diverged or unfinished seed: its last one; see '
  f'status) and the mean of its last {LAST_EVALS} evaluations; `ours` and `{OURS_LAST}` are '
  'their means over the seeds, `ours_std` the sample std (n - 1) of `ours`, `ours_per_seed` each '
  "seed's, `seeds` how many have a number, `rounds` the fewest any seed trained; `step_size` the "
  "clients' mean local step size (the trainer's `client_step_size_mean`) averaged over the "
  'rounds and the seeds, for the optimizers that set their own (Delta-SGD, SPS).'
)
EXTRA_NOTE = (
  "Rows `sps_authors_code` and `delta_sgd_authors_code` follow the authors' FL code; the paper "
  'has no number of their own, so `published` is the SPS / Delta-SGD number.'
)
SEEDS_NOTES = [
  '',
  'Columns: test accuracy % on the pooled 10,000 test images; `difference` = ours - published. '
  "Learning rates: those of the authors' run.sh (the paper tuned on CIFAR-10 and prints no "
  'winners); see reproductions/kim2024_delta_sgd/reproduce.py.',
  '',
  SEEDS_NOTE,
]


def write_report(cells: list[Cell], runs_dir: str, out: str) -> None:
  os.makedirs(out, exist_ok=True)
  results = {c.name: cell_result(runs_dir, c, FLAGS.rounds) for c in cells}
  protocol = (
    'Kim et al. 2024 (Delta-SGD), ICLR 2024. Protocol: task fmnist (100 clients x 500 '
    "examples, Dirichlet(alpha) labels, the paper's CNN; each client trains on its local 80% "
    'split), 10 clients per round, E = 1, batch 64, {server}.'
  )
  for table, title, server in (
    ('table1_fmnist', 'Table 1, FMNIST column (FedAvg server)', 'fedavg'),
    ('table4_fedadam_fmnist', f'Table 4, FMNIST alpha {FEDADAM_ALPHA} (FedAdam server)', 'fedadam'),
  ):
    group = [c for c in cells if c.server == server]
    if not group:
      continue
    rows = table_rows(group, results)
    write_csv(os.path.join(out, f'{table}.csv'), rows)
    server_text = (
      'unweighted average of the client models (server SGD, learning rate 1)'
      if server == 'fedavg'
      else 'FedAdam server (PyTorch default Adam: learning rate 0.001, eps 1e-8) on the '
      'unweighted average update'
    )
    lines = header(
      f'Kim et al. 2024, {title}', protocol.format(server=server_text), group, runs_dir
    )
    lines += ['', *markdown_table(rows), *(NOTES if FLAGS.seeds == 1 else SEEDS_NOTES)]
    if any(c.row in EXTRA_ROWS for c in group):
      lines += ['', EXTRA_NOTE]
    lines += ['', *claim.claim_check(rows)]
    with publish.atomic_output(os.path.join(out, f'{table}.md')) as f:
      f.write('\n'.join(lines) + '\n')
    print(f'wrote {out}/{table}.csv and .md', flush=True)
  write_figures(cells, results, out)


def write_figures(cells: list[Cell], results: dict[str, CellResult], out: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top

  panels: dict[tuple[str, str], list[list[Cell]]] = {}
  for (server, alpha, _), seeds in groups_by_row(cells).items():
    panels.setdefault((server, alpha), []).append(seeds)
  for (server, alpha), rows in panels.items():
    if not any(results[c.name].curve for seeds in rows for c in seeds):
      continue
    fig, ax = plt.subplots(figsize=(11, 5))
    for seeds in rows:
      rounds, mean, low, high = seed_stats.curve_band([results[c.name].curve for c in seeds])
      if not rounds:
        continue
      cell = seeds[0]
      extra = cell.row in EXTRA_ROWS
      status = seed_stats.status_summary([results[c.name].status for c in seeds])
      (line,) = ax.plot(
        rounds,
        mean,
        linestyle='--' if extra else '-',
        marker='.' if len(rounds) <= 40 else None,
        label=f'{cell.row} ({status}; paper {cell.published:.1f})',
      )
      if len(seeds) > 1:  # the seeds' range
        ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
      if not extra:  # the published number, in the line's colour
        ax.axhline(cell.published, color=line.get_color(), linestyle=':', linewidth=0.8)
    name = 'FedAvg' if server == 'fedavg' else 'FedAdam'
    ax.set_title(
      f'FMNIST, Dirichlet alpha={alpha}, {name} server: {FLAGS.rounds} rounds (paper: '
      f'{PAPER_ROUNDS}), {seeds_text()}'
      + ('\n(mean; band: min to max over seeds)' if FLAGS.seeds > 1 else '')
    )
    ax.set_xlabel('round (dotted: published final accuracy)')
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_ylabel('test accuracy (%)')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = os.path.join(
      out, f'accuracy_alpha{alpha}.png' if server == 'fedavg' else f'fedadam_alpha{alpha}.png'
    )
    publish.save_figure(fig, path, dpi=120)
    plt.close(fig)
    print(f'wrote {path}', flush=True)


# --- main ---


def main(argv: list[str]) -> int:
  try:
    return _main(argv)
  except (UsageError, publish.PublishError) as e:
    print(f'reproduce: error: {e}', file=sys.stderr, flush=True)
    return 2


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)  # matplotlib's INFO lines (font cache) through absl
  if len(argv) > 1:
    raise UsageError(f'unexpected arguments {argv[1:]}')
  for name in ('rounds', 'parallel', 'rounds_per_eval', 'rounds_per_checkpoint'):
    if FLAGS[name].value < 1:
      raise UsageError(f'--{name} must be >= 1')
  cells = build_cells()
  if not cells:
    raise UsageError('no cells: give --rows or --fedadam_rows')
  runs_dir = publish.resolve(FLAGS.runs_dir)
  out = publish.output_from_flags(
    'reproductions.kim2024_delta_sgd.reproduce',
    FLAGS,
    SETTINGS,
    entry=SEEDS_ENTRY if FLAGS.seeds > 1 else None,
  )
  if FLAGS.dry_run:
    for cell in cells:
      print(
        shlex.join(trainer_command(cell, runs_dir))
        + f' >> {cell_runner.log_path(runs_dir, cell)} 2>&1'
      )
    print(f'# then the tables and figures into {out}')
    return 0
  failed, runner = [], None  # --report_only: nothing runs, nothing fails
  if not FLAGS.report_only:
    stopped, failed, runner = cell_runner.run_cells(
      cells, runs_dir, FLAGS.parallel, trainer_command, FLAGS.rounds
    )
    if stopped is not None:
      return stopped
  if cell_runner.refuse_unfinished('reproduce', FLAGS, cells, runs_dir, trainer_command):
    cell_runner.report_failures('reproduce', failed, runner, runs_dir)
    return 1
  write_report(cells, runs_dir, out)
  cell_runner.report_failures('reproduce', failed, runner, runs_dir)
  return 1 if failed else 0


if __name__ == '__main__':
  cell_runner.app_run(main)
