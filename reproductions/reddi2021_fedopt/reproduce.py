"""Reproduces Reddi et al. 2021's grid search: Table 1, the heatmaps and the tau figure of a task.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021. One command per table or figure, for any task of the trainer:

  python -m reproductions.reddi2021_fedopt.reproduce heatmaps --task=synthetic   # Fig. 2 / 5-11
  python -m reproductions.reddi2021_fedopt.reproduce tau --task=synthetic        # Fig. 3
  python -m reproductions.reddi2021_fedopt.reproduce table --task=synthetic      # Table 1 (+ Fig. 1)
  python -m reproductions.reddi2021_fedopt.reproduce grid --task=synthetic       # every cell, a CSV
  python -m reproductions.reddi2021_fedopt.reproduce all --task=synthetic        # all of the above

Each command runs the cells it needs that have not finished (one trainer per cell, forked from
a process that imported TF and TFF once, --parallel at a time, resumable: rerun the same command
after a stop), then writes its outputs into --out. The protocol (`search` has the details):

* cells: FedOpt with SGD clients, E = 1, the task's clients per round and batch size (Table 7),
  server optimizers --optimizers (FedAvgM: momentum 0.9; adaptive: the trainer's `published`
  variant, as the presets), eta_l and eta on App. D.2's base-10 grids (step --grid_step: the
  paper's 0.5, or 1.0 for a coarser search), tau in {1e-5, ..., 1e-1};
* --search=staged (default): eta_l x eta at tau = 1e-3 (the heatmap cells), then every tau at the
  pair selected there; --search=full: eta_l x eta x tau;
* selection: smallest training loss averaged over the last --window rounds (App. D.1);
  reported: the task's Table 1 metric averaged over the last --window rounds (evaluations every
  --rounds_per_eval rounds in that window; the paper evaluates every round);
* `table` also runs the selected cell of each optimizer with --seeds seeds (seed, seed + 1, ...)
  and reports their mean and standard deviation.

Outputs (default runs/reddi2021/<task>/report; the committed fmnist and synthetic results, in
results/table1/<task>, only with --publish and their settings, recorded in results/publish.json):
grid_<task>.csv (every cell: rates, status, last-window training loss and metric),
table1_<task>.{md,csv} (published, ours, difference, selected and published log10 rates, and the
paper's three claims checked on our numbers), heatmaps_<task>.png, tau_<task>.png and
curves_<task>.png (the selected cells against rounds and against examples processed).
"""

import math
import os
import shlex
import sys
import time

from absl import flags
from absl import logging

from reproductions import cell_runner
from reproductions import publish
from reproductions.cell_runner import UsageError
from reproductions.reddi2021_fedopt import published
from reproductions.reddi2021_fedopt import search
from tff_adaptive.loop import targets
from tff_adaptive.tasks.published import LOG10_CLIENT_LR
from tff_adaptive.tasks.published import LOG10_SERVER_LR
from tff_adaptive.tasks.published import LOG10_TAU
from tff_adaptive.tasks.published import LOOP

DRIVER = 'reproductions.reddi2021_fedopt.reproduce'
BAZEL_TARGET = '//reproductions/reddi2021_fedopt:reproduce'
COMMANDS = ('heatmaps', 'tau', 'table', 'grid', 'all')
TASKS = (*published.GRIDS, 'fmnist', 'synthetic')
# Tasks whose data --seed draws (generated or partitioned): their seeds are different datasets.
SEEDED_DATA = ('fmnist', 'synthetic', 'cifar10')
# Rounds of tasks outside the paper (the paper's are Table 7's / App. D's, LOOP).
OTHER_ROUNDS = {'fmnist': 1000, 'synthetic': 1000}

flags.DEFINE_string('task', None, f'Task: one of {", ".join(TASKS)}.')
flags.DEFINE_list(
  'optimizers', list(search.OPTIMIZERS), f'Server optimizers, of {", ".join(search.OPTIMIZERS)}.'
)
flags.DEFINE_enum('search', 'staged', search.SEARCHES, 'staged: tau after eta; full: all at once.')
flags.DEFINE_float('grid_step', published.GRID_STEP, 'Step of the log10 grids (0.5 or 1.0).')
flags.DEFINE_list('client_grid', [], 'log10 eta_l range LOW,HIGH (default: App. D.2).')
flags.DEFINE_list('server_grid', [], 'log10 eta range LOW,HIGH (default: App. D.2).')
flags.DEFINE_list(
  'taus', [search.log_text(t) for t in published.LOG10_TAUS], 'log10 tau values (App. D.2).'
)
flags.DEFINE_integer('rounds', None, "Rounds per cell (default: the paper's for the task).")
flags.DEFINE_integer('window', 100, 'Rounds of the last-window averages (the paper: 100).')
flags.DEFINE_integer('seed', 1, 'Seed of the search cells.')
flags.DEFINE_integer('seeds', 3, '`table`: seeds of each selected cell (seed, seed + 1, ...).')
flags.DEFINE_enum(
  'engine',
  'inprocess',
  ['inprocess', 'vectorised', 'tff'],
  "The trainer's --engine (vectorised: each cell's clients side by side; synthetic, fmnist and "
  'emnist_cr have models it supports).',
)
flags.DEFINE_integer('rounds_per_eval', 10, 'Evaluate every this many rounds (and the last).')
flags.DEFINE_integer('rounds_per_checkpoint', 100, 'Checkpoint every this many rounds.')
flags.DEFINE_multi_string(
  'trainer_flags',
  [],
  'A trainer flag for every cell, e.g. --trainer_flags=--dirichlet_alpha=0.1 (repeat for more); '
  'not one the driver sets (rates, optimizer, seed, rounds, cadences, output).',
)
flags.DEFINE_string('data_dir', None, "The task's data directory (the trainer's --data_dir).")
flags.DEFINE_float(
  'good_within',
  0.05,
  'Claim 2: a cell is good when its metric is within this fraction of the best cell of its map.',
)
flags.DEFINE_integer('parallel', 1, 'Trainer processes at once.')
flags.DEFINE_integer(
  'cells_per_process',
  1,
  "Cells trained side by side by one trainer process (--engine=vectorised; the trainer's "
  '--cells): cells of one seed, up to this many at a time, as one computation.',
)
flags.DEFINE_bool(
  'preload',
  True,
  'Fork each cell from one process that imported TF and TFF (--nopreload: a new trainer process '
  'per cell; the same numbers, to compare cells per hour).',
)
cell_runner.define_output_flags(
  None,
  runs_dir_help='Where the cells run (default runs/reddi2021/<task>).',
  dry_run_help='Print the first stage of trainer commands; write nothing.',
)
flags.adopt_module_key_flags(cell_runner)  # listed in --help with the driver's own
FLAGS = flags.FLAGS
# The flags that change the numbers: --publish requires the committed values.
SETTINGS = (
  'task',
  'optimizers',
  'search',
  'grid_step',
  'client_grid',
  'server_grid',
  'taus',
  'rounds',
  'window',
  'seed',
  'seeds',
  'engine',
  'rounds_per_eval',
  'trainer_flags',
)


# --- flags ---


def _float_pair(flag: str, values: list[str], default: tuple[float, float]) -> tuple[float, float]:
  if not values:
    return default
  try:
    low, high = (float(v) for v in values)
  except ValueError:
    raise UsageError(f'--{flag}={",".join(values)}: give LOW,HIGH (base-10 logs)') from None
  if not (math.isfinite(low) and math.isfinite(high) and low <= high):
    raise UsageError(f'--{flag}={",".join(values)}: need finite LOW <= HIGH')
  return low, high


def grid_from_flags(task: str) -> search.Grid:
  step = FLAGS.grid_step
  if not (step > 0 and math.isfinite(step)):
    raise UsageError(f'--grid_step={step:g}: must be > 0 (the paper: 0.5)')
  ranges = published.GRIDS.get(task, published.DEFAULT_GRID)
  client = _float_pair('client_grid', FLAGS.client_grid, ranges['client'])
  server = _float_pair('server_grid', FLAGS.server_grid, ranges['server'])
  try:
    taus = tuple(float(t) for t in FLAGS.taus)
  except ValueError:
    raise UsageError(f'--taus={",".join(FLAGS.taus)}: base-10 logs, e.g. -5,-3,-1') from None
  if not all(math.isfinite(t) for t in taus) or len(set(taus)) != len(taus):
    raise UsageError(f'--taus={",".join(FLAGS.taus)}: distinct finite base-10 logs, e.g. -5,-3,-1')
  heatmap_tau = published.HEATMAP_LOG10_TAU
  if heatmap_tau not in taus:
    raise UsageError(f'--taus must include {heatmap_tau:g} (the heatmaps use tau = 1e-3)')
  return search.Grid(
    search.log_grid(*client, step), search.log_grid(*server, step), taus, heatmap_tau
  )


def check_flags(argv: list[str]) -> str:
  """The command; UsageError (one line) for anything else wrong."""
  if len(argv) != 2 or argv[1] not in COMMANDS:
    given = ' '.join(argv[1:]) or 'none'
    raise UsageError(f'give one command of {", ".join(COMMANDS)} (got {given})')
  if FLAGS.task not in TASKS:
    raise UsageError(f'--task={FLAGS.task}: valid: {", ".join(TASKS)}')
  unknown = [o for o in FLAGS.optimizers if o not in search.OPTIMIZERS]
  if unknown or not FLAGS.optimizers:
    raise UsageError(
      f'--optimizers: unknown {", ".join(unknown) or "(none given)"}; valid: '
      f'{", ".join(search.OPTIMIZERS)}'
    )
  for name in (
    'parallel',
    'cells_per_process',
    'rounds_per_eval',
    'rounds_per_checkpoint',
    'window',
    'seeds',
  ):
    if FLAGS[name].value < 1:
      raise UsageError(f'--{name} must be >= 1, got {FLAGS[name].value}')
  if FLAGS.cells_per_process > 1 and FLAGS.engine != 'vectorised':
    raise UsageError(
      f'--cells_per_process={FLAGS.cells_per_process} trains cells side by side on '
      f'--engine=vectorised; got --engine={FLAGS.engine}'
    )
  if FLAGS.rounds is not None and FLAGS.rounds < 1:
    raise UsageError(f'--rounds must be >= 1, got {FLAGS.rounds}')
  if len(set(FLAGS.optimizers)) != len(FLAGS.optimizers):
    raise UsageError(f'--optimizers={",".join(FLAGS.optimizers)}: repeats an optimizer')
  driver_set = sorted(driver_flags())
  for extra in FLAGS.trainer_flags:
    name = extra.split('=', 1)[0]
    if not extra.startswith('--') or '=' not in extra:
      raise UsageError(f'--trainer_flags={extra}: give one trainer flag as --name=value')
    if name in driver_set or name == '--data_dir':
      raise UsageError(
        f'--trainer_flags={extra}: {name} is set by the driver (it sets {", ".join(driver_set)}; '
        '--data_dir has its own flag)'
      )
  return argv[1]


def driver_flags() -> set[str]:
  """The trainer flags the driver sets for a cell (of any optimizer)."""
  names = set()
  for optimizer in search.OPTIMIZERS:
    cell = search.Cell(optimizer, 0.0, 0.0, -3.0 if optimizer in search.ADAPTIVE else None, 1)
    names.update(a.split('=', 1)[0] for a in _cell_args(cell, 'runs'))
  return names


def total_rounds() -> int:
  if FLAGS.rounds is not None:
    return FLAGS.rounds
  return LOOP[FLAGS.task][2] if FLAGS.task in LOOP else OTHER_ROUNDS[FLAGS.task]


# --- cells ---


def _cell_args(cell: search.Cell, runs_dir: str) -> list[str]:
  return [
    f'--task={FLAGS.task}',
    *cell.trainer_flags(),
    '--client_optimizer=sgd',
    '--client_epochs_per_round=1',
    f'--engine={FLAGS.engine}',
    f'--total_rounds={total_rounds()}',
    f'--rounds_per_eval={FLAGS.rounds_per_eval}',
    f'--rounds_per_checkpoint={FLAGS.rounds_per_checkpoint}',
    f'--root_output_dir={runs_dir}',
    f'--experiment_name={cell.name}',
  ]


def trainer_command(cell: search.Cell, runs_dir: str) -> list[str]:
  """The trainer command of a cell (runs_dir absolute)."""
  args = [*_cell_args(cell, runs_dir), *FLAGS.trainer_flags]
  if FLAGS.data_dir:
    args.append(f'--data_dir={publish.resolve(FLAGS.data_dir)}')
  return [sys.executable, '-m', 'run.federated_trainer', *args]


# Flags of a cell's command that say where it runs, not what it computes.
_PLACE_FLAGS = ('--root_output_dir', '--data_dir')


def _settings(command: list[str]) -> dict[str, str]:
  args = [a for a in command if a.startswith('--')]
  return {
    name: value
    for name, value in (a.split('=', 1) if '=' in a else (a, '') for a in args)
    if name not in _PLACE_FLAGS
  }


def check_same_settings(cell: search.Cell, recorded: str | None, runs_dir: str) -> None:
  """UsageError if the cell's last run (its status file's command) had other trainer flags than
  this command gives it: its numbers would be reported under this command's settings."""
  if not recorded:
    return
  was, now = _settings(shlex.split(recorded)), _settings(trainer_command(cell, runs_dir))
  differ = [
    f'{name} {was.get(name, "(unset)")} there, {now.get(name, "(unset)")} now'
    for name in dict.fromkeys([*was, *now])
    if was.get(name) != now.get(name)
  ]
  if differ:
    raise UsageError(
      f'cell {cell.name} in {runs_dir} was run with other settings ({"; ".join(differ)}); use '
      'another --runs_dir, or the flags it was run with'
    )


class Search:
  """The cells run so far and their statistics; runs more of them on request."""

  def __init__(self, runs_dir: str, grid: search.Grid):
    self.runs_dir = runs_dir
    self.grid = grid
    self.metric = search.task_metric(FLAGS.task)
    self.rounds = total_rounds()
    self.stats: dict[str, search.CellStats] = {}
    self.status: dict[str, str] = {}
    self.failed: list[search.Cell] = []
    self.trained = 0  # cells this process trained to the end, and their seconds
    self.seconds = 0.0

  def run(self, cells: list[search.Cell]) -> int | None:
    """Trains the unfinished `cells` (unless --report_only), then reads every one; 130 / 143
    if stopped."""
    cells = list(dict.fromkeys(cells))
    if not FLAGS.report_only:
      todo = [c for c in cells if not self._finished(c)]
      if todo:
        start = time.monotonic()
        stopped, failed, runner = cell_runner.run_cells(
          todo,
          self.runs_dir,
          FLAGS.parallel,
          trainer_command,
          self.rounds,
          FLAGS.preload,
          cells_per_process=FLAGS.cells_per_process,
        )
        if stopped is not None:
          return stopped
        cell_runner.report_failures('reproduce', failed, runner, self.runs_dir)
        self.failed += failed
        self.trained += sum(1 for c in todo if runner.exit_codes.get(c.name) == 0)
        self.seconds += time.monotonic() - start
    for cell in cells:
      self._read(cell)
    return None

  def _finished(self, cell: search.Cell) -> bool:
    self._read(cell)
    status = cell_runner.read_status(self.runs_dir, cell) or {}
    return self.stats[cell.name].finished or status.get('exit_code') == cell_runner.EXIT_DIVERGED

  def _read(self, cell: search.Cell) -> None:
    status = cell_runner.read_status(self.runs_dir, cell) or {}
    check_same_settings(cell, status.get('command'), self.runs_dir)
    rows = cell_runner.read_metrics(os.path.join(self.runs_dir, cell.name, 'metrics.csv'))
    stats = search.window_stats(rows, self.metric, FLAGS.window, self.rounds)
    self.stats[cell.name] = stats
    self.status[cell.name] = cell_runner.run_status(
      stats.finished, stats.rounds, self.rounds, status.get('exit_code')
    )

  def selected(self, cells: list[search.Cell], optimizer: str) -> search.Cell | None:
    return search.select([c for c in cells if c.optimizer == optimizer], self.stats)


def search_cells(s: Search, grid: search.Grid) -> tuple[list[search.Cell], int | None]:
  """Runs the search (both stages when staged); returns its cells and a stop code."""
  optimizers = FLAGS.optimizers
  if FLAGS.search == 'full':
    cells = search.full_cells(optimizers, grid, FLAGS.seed)
    return cells, s.run(cells)
  cells = search.heatmap_cells(optimizers, grid, FLAGS.seed)
  stopped = s.run(cells)
  if stopped is not None:
    return cells, stopped
  second = []
  for optimizer in (o for o in optimizers if o in search.ADAPTIVE):
    best = s.selected(cells, optimizer)
    if best is not None:
      second += search.tau_cells(best, grid)
  return cells + second, s.run(second)


def confirm_cells(s: Search, cells: list[search.Cell]) -> dict[str, list[search.Cell]]:
  """Each optimizer's selected cell with --seeds seeds."""
  chosen = {}
  for optimizer in FLAGS.optimizers:
    best = s.selected(cells, optimizer)
    if best is not None:
      chosen[optimizer] = [best.with_seed(FLAGS.seed + k) for k in range(FLAGS.seeds)]
  return chosen


# --- outputs ---


def loss_column() -> str:
  return targets.window_column('train_loss', FLAGS.window, 'rounds')


def metric_column(s: Search) -> str:
  return targets.window_column(s.metric.column, FLAGS.window, 'rounds')


def write_grid(s: Search, cells: list[search.Cell], out: str) -> str:
  path = os.path.join(out, f'grid_{FLAGS.task}.csv')
  columns = [
    'optimizer',
    'log10_client_lr',
    'log10_server_lr',
    'log10_tau',
    'seed',
    'status',
    'rounds',
    loss_column(),
    metric_column(s),
    'evaluations',
  ]
  rows = []
  for cell in cells:
    st = s.stats[cell.name]
    rows.append(
      {
        'optimizer': cell.optimizer,
        'log10_client_lr': search.log_text(cell.log_client),
        'log10_server_lr': search.log_text(cell.log_server),
        'log10_tau': None if cell.log_tau is None else search.log_text(cell.log_tau),
        'seed': cell.seed,
        'status': s.status[cell.name],
        'rounds': st.rounds,
        loss_column(): None if st.train_loss is None else round(st.train_loss, 6),
        metric_column(s): None if st.metric is None else round(st.metric, 4),
        'evaluations': st.evaluations,
      }
    )
  publish.write_csv(path, columns, rows)
  return path


def header_lines(title: str, s: Search, cells: list[search.Cell]) -> list[str]:
  example = cell_runner.shown_command(trainer_command(cells[0], s.runs_dir)) if cells else ''
  grid = s.grid
  return [
    f'# {title}',
    '',
    f'- Command: `{cell_runner.command_line(BAZEL_TARGET)}`',
    cell_runner.stamp_line(),
    f'- Task {FLAGS.task}, {s.rounds} rounds per cell (the paper: '
    f'{LOOP[FLAGS.task][2] if FLAGS.task in LOOP else "not in the paper"}), evaluation every '
    f'{FLAGS.rounds_per_eval} rounds and at the last, engine {FLAGS.engine}.',
    f'- Seeds: {FLAGS.seed} for every search cell; '
    + (
      f'{FLAGS.seed}-{FLAGS.seed + FLAGS.seeds - 1} for each selected cell (ours: their mean, '
      'ours_std their sample std).'
      if FLAGS.seeds > 1
      else f'{FLAGS.seed} for each selected cell.'
    ),
    f'- Grid (log10): eta_l {search.log_text(grid.client[0])}..{search.log_text(grid.client[-1])}, '
    f'eta {search.log_text(grid.server[0])}..{search.log_text(grid.server[-1])}, step '
    f'{FLAGS.grid_step:g} (the paper: 0.5); tau {", ".join(search.log_text(t) for t in grid.taus)}; '
    f'{FLAGS.search} search (see reproductions/reddi2021_fedopt/search.py).',
    f'- Selection: smallest training loss averaged over the last {FLAGS.window} rounds; metric: '
    f'{s.metric.label} averaged over the evaluations in the last {FLAGS.window} rounds (the '
    'paper evaluates every round).'
    + (
      ' Staged search: the selection is over the heatmap cells (tau = 1e-3) and the taus at '
      'their selected pair, not eta_l x eta x tau jointly as the paper (--search=full).'
      if FLAGS.search == 'staged'
      else ''
    ),
    "- FedAdagrad, FedAdam, FedYogi: the trainer's `published` variant (bias-corrected, "
    'accumulators from 0, as the presets); FedAdam and FedYogi with beta_1 0.9, beta_2 0.999 '
    "(the authors' runs; App. D.1 says 0.99); FedAvgM: server momentum 0.9; SGD clients, E = 1.",
    f'- Trainer command of a cell (logs in `<runs_dir>/<cell>.log`): `{example}`',
    f'- TF thread pools per trainer: '
    + ', '.join(f'{n}={cell_runner.child_env()[n]}' for n in cell_runner.THREAD_VARIABLES),
  ]


def table_rows(s: Search, chosen: dict[str, list[search.Cell]]) -> list[dict]:
  rows = []
  table1 = published.TABLE1.get(FLAGS.task, {})
  for optimizer in FLAGS.optimizers:
    cells = chosen.get(optimizer, [])
    values = [s.stats[c.name].metric for c in cells if s.stats[c.name].finished]
    values = [v for v in values if v is not None]
    ours = sum(values) / len(values) if values else None
    drifts = [s.stats[c.name].drift for c in cells if s.stats[c.name].finished]
    drifts = [d for d in drifts if d is not None]
    std = (
      math.sqrt(sum((v - ours) ** 2 for v in values) / (len(values) - 1))
      if len(values) > 1
      else None
    )
    paper = table1.get(optimizer)
    best = cells[0] if cells else None
    rows.append(
      {
        'optimizer': optimizer,
        'paper_name': published.PAPER_NAMES[optimizer],
        'published': paper,
        'ours': None if ours is None else round(ours, 2),
        'ours_std': None if std is None else round(std, 2),
        'seeds': f'{len(values)} of {len(cells)}' if cells else '0',
        'difference': None if ours is None or paper is None else round(ours - paper, 2),
        'window_drift': round(sum(drifts) / len(drifts), 2) if drifts else None,
        'log10_client_lr': None if best is None else search.log_text(best.log_client),
        'log10_server_lr': None if best is None else search.log_text(best.log_server),
        'log10_tau': None
        if best is None or best.log_tau is None
        else search.log_text(best.log_tau),
        'published_log10_client_lr': LOG10_CLIENT_LR.get(FLAGS.task, {}).get(optimizer),
        'published_log10_server_lr': LOG10_SERVER_LR.get(FLAGS.task, {}).get(optimizer),
        'published_log10_tau': LOG10_TAU.get(FLAGS.task, {}).get(optimizer),
        loss_column(): None if best is None else _round6(s.stats[best.name].train_loss),
      }
    )
  return rows


def _round6(value):
  return None if value is None else round(value, 6)


TABLE_COLUMNS = [
  'optimizer',
  'paper_name',
  'published',
  'ours',
  'ours_std',
  'seeds',
  'difference',
  'window_drift',
  'log10_client_lr',
  'log10_server_lr',
  'log10_tau',
  'published_log10_client_lr',
  'published_log10_server_lr',
  'published_log10_tau',
]


def heatmap_values(
  s: Search, cells: list[search.Cell], optimizer: str
) -> dict[tuple[float, float], float]:
  """(log eta_l, log eta) -> last-window metric of the heatmap cells of `optimizer` that ran to
  the end."""
  tau = s.grid.heatmap_tau if optimizer in search.ADAPTIVE else None
  return {
    (c.log_client, c.log_server): s.stats[c.name].metric
    for c in finished_search_cells(s, cells, optimizer)
    if c.log_tau == tau
  }


def finished_search_cells(s: Search, cells: list[search.Cell], optimizer: str) -> list[search.Cell]:
  """`optimizer`'s cells of seed --seed that ran to the end with a last-window metric."""
  return [
    c
    for c in cells
    if c.optimizer == optimizer
    and c.seed == FLAGS.seed
    and s.stats[c.name].finished
    and s.stats[c.name].metric is not None
  ]


def best_by_tau(s: Search, cells: list[search.Cell], optimizer: str) -> dict[float, float]:
  """tau -> the metric of the cell selected (training loss) among `optimizer`'s cells at tau."""
  found = {}
  for tau in s.grid.taus:
    best = search.select(
      [c for c in cells if c.optimizer == optimizer and c.log_tau == tau], s.stats
    )
    if best is not None and s.stats[best.name].metric is not None:
      found[tau] = s.stats[best.name].metric
  return found


def seed_values(s: Search, chosen: dict[str, list[search.Cell]]) -> dict[str, dict[int, float]]:
  """optimizer -> seed -> the last-window metric of its selected cell run with that seed."""
  return {
    optimizer: {
      c.seed: s.stats[c.name].metric
      for c in group
      if s.stats[c.name].finished and s.stats[c.name].metric is not None
    }
    for optimizer, group in chosen.items()
  }


def claim_lines(
  s: Search, cells: list[search.Cell], rows: list[dict], chosen: dict[str, list[search.Cell]]
) -> list[str]:
  """The paper's three claims, checked on our numbers."""
  metric = s.metric
  lines = ["## The paper's claims on our numbers", '']
  ours = {r['optimizer']: r['ours'] for r in rows if r['ours'] is not None}
  adaptive = {o: v for o, v in ours.items() if o in search.ADAPTIVE}
  plain = {o: v for o, v in ours.items() if o not in search.ADAPTIVE}
  if adaptive and plain:
    best = max(plain, key=plain.get) if metric.higher_is_better else min(plain, key=plain.get)
    verdicts = [
      f'{published.PAPER_NAMES[o]} {v:.2f} '
      + ('matches or beats' if not metric.better(plain[best], v) else 'is behind')
      for o, v in adaptive.items()
    ]
    lines.append(
      f'1. Tuned adaptive optimizers match or beat tuned FedAvg / FedAvgM (best: '
      f'{published.PAPER_NAMES[best]} {plain[best]:.2f}): {"; ".join(verdicts)}.'
    )
    by_seed = seed_values(s, chosen)
    paired = []
    for o in adaptive:
      seeds = sorted(set(by_seed.get(o, {})) & set(by_seed.get(best, {})))
      if len(seeds) > 1:
        gaps = [by_seed[o][k] - by_seed[best][k] for k in seeds]
        paired.append(
          f'{published.PAPER_NAMES[o]}: {", ".join(f"{g:+.2f}" for g in gaps)} (mean '
          f'{sum(gaps) / len(gaps):+.2f})'
        )
    if paired:
      lines.append(
        f'   Paired by seed, minus {published.PAPER_NAMES[best]} (seeds '
        f'{", ".join(str(k) for k in seeds)}; where the task draws its data from the seed, '
        f'as synthetic and fmnist do, each seed is another dataset): {"; ".join(paired)}.'
      )
  else:
    lines.append('1. Tuned adaptive vs tuned FedAvg / FedAvgM: not enough finished cells.')
  lines += [
    '',
    f'2. Good regions (cells within {FLAGS.good_within:.0%} of the best of the map): adaptive '
    "ones rectangular, FedAvg's and FedAvgM's triangular (App. E.3), eta_l x eta about constant "
    '(App. E.4). Rectangularity = good cells / cells of their bounding box (1 = rectangle); '
    'correlation of log eta_l and log eta over the good cells (near -1 = a diagonal band).',
    '',
    '| optimizer | good cells | rectangularity | correlation |',
    '|---|---|---|---|',
  ]
  for optimizer in FLAGS.optimizers:
    good = search.good_region(heatmap_values(s, cells, optimizer), metric, FLAGS.good_within)
    lines.append(
      f'| {published.PAPER_NAMES[optimizer]} | {len(good)} | '
      f'{publish.number_text(search.rectangularity(good, s.grid))} | {publish.number_text(search.diagonal_correlation(good))} |'
    )
  lines += [
    '',
    '3. FedAdam / FedYogi vary little across tau (range of the best metric over tau):',
    '',
  ]
  for optimizer in (o for o in FLAGS.optimizers if o in search.ADAPTIVE):
    by_tau = best_by_tau(s, cells, optimizer)
    if by_tau:
      spread = max(by_tau.values()) - min(by_tau.values())
      values = ', '.join(f'1e{search.log_text(t)}: {v:.2f}' for t, v in sorted(by_tau.items()))
      lines.append(f'- {published.PAPER_NAMES[optimizer]}: range {spread:.2f} ({values})')
  if FLAGS.search == 'staged':
    lines.append('  (staged search: eta_l, eta selected at tau = 1e-3 and held for the other taus)')
  return lines


def _rates(cell: search.Cell) -> str:
  logs = [cell.log_client, cell.log_server] + ([cell.log_tau] if cell.log_tau is not None else [])
  return f'({", ".join(search.log_text(v) for v in logs)})'


def best_metric_cell(s: Search, cells: list[search.Cell], optimizer: str) -> search.Cell | None:
  """Among `optimizer`'s finished search cells of seed --seed, the one with the best last-window
  metric (not the paper's rule: what the rule would have had to pick to get the best metric)."""
  found = finished_search_cells(s, cells, optimizer)
  if not found:
    return None
  sign = 1.0 if s.metric.higher_is_better else -1.0
  return max(found, key=lambda c: sign * s.stats[c.name].metric)


def selection_lines(s: Search, cells: list[search.Cell]) -> list[str]:
  """Per optimizer, the cell the paper's rule selected against the search cell with the best
  metric (seed --seed), so that a table whose training loss and validation metric disagree
  says so."""
  loss = f'training loss, last {FLAGS.window} rounds'
  rows = []
  for optimizer in FLAGS.optimizers:
    chosen, best = s.selected(cells, optimizer), best_metric_cell(s, cells, optimizer)
    if chosen is None or best is None:
      continue
    a, b = s.stats[chosen.name], s.stats[best.name]
    rows.append(
      [
        published.PAPER_NAMES[optimizer],
        _rates(chosen),
        publish.number_text(a.train_loss, 4),
        publish.number_text(a.metric),
        _rates(best),
        publish.number_text(b.train_loss, 4),
        publish.number_text(b.metric),
        publish.number_text(None if a.metric is None else a.metric - b.metric, sign=True),
      ]
    )
  if not rows:
    return []
  return [
    '## The selection rule against the best metric of the search',
    '',
    f"Seed {FLAGS.seed}'s search cells: the one the paper's rule selected (smallest {loss}) and "
    f'the one with the best {s.metric.label} (last {FLAGS.window} rounds); `rule - best` is what '
    'the rule gave up on the reported metric. Not a selection rule of the paper: the best cell '
    'is chosen on the metric it reports. Large gaps mean the training loss, measured on the '
    "clients' own data during the round, and the metric on held-out data disagree.",
    '',
    *publish.markdown_table(
      [
        'optimizer',
        'selected log10 (eta_l, eta, tau)',
        'its training loss',
        'its metric',
        'best-metric cell',
        'its training loss',
        'its metric',
        'rule - best',
      ],
      rows,
    ),
  ]


def write_table(s: Search, cells, chosen, out: str) -> list[str]:
  rows = table_rows(s, chosen)
  csv_path = os.path.join(out, f'table1_{FLAGS.task}.csv')
  publish.write_csv(csv_path, [*TABLE_COLUMNS, loss_column()], rows)
  published_note = (
    f'Table 1 ({published.TABLE1_METRIC[FLAGS.task]})'
    if FLAGS.task in published.TABLE1
    else 'no published number (the task is not in the paper)'
  )
  lines = [
    *header_lines(f'Reddi et al. 2021, Table 1: {FLAGS.task}', s, cells),
    '',
    f'`published`: {published_note}; `ours`: mean over the seeds of the selected cell of '
    f'{s.metric.label} averaged over the last {FLAGS.window} rounds, `ours_std` their standard '
    'deviation; `window_drift`: how far the metric still moved within that window (mean of its '
    'second half minus its first half, mean over the seeds; about 0 on a plateau, where the '
    'average is meant to be taken); log10 rates: ours selected, and the published Tables 8-9.'
    + (
      f' Task {FLAGS.task} draws its data from the seed (LEAF synthetic / the Dirichlet '
      'partition): the seeds are different datasets, and most of `ours_std` is between them.'
      if FLAGS.task in SEEDED_DATA
      else ''
    ),
    '',
    *publish.markdown_table(
      TABLE_COLUMNS,
      [
        [
          publish.number_text(row[k], sign=k in ('difference', 'window_drift'))
          if k in ('ours', 'ours_std', 'difference', 'window_drift')
          else ('' if row[k] is None else row[k])
          for k in TABLE_COLUMNS
        ]
        for row in rows
      ],
    ),
  ]
  lines += ['', *claim_lines(s, cells, rows, chosen)]
  selection = selection_lines(s, cells)
  if selection:
    lines += ['', *selection]
  md_path = os.path.join(out, f'table1_{FLAGS.task}.md')
  with publish.atomic_output(md_path) as f:
    f.write('\n'.join(lines) + '\n')
  print('\n'.join(lines[lines.index(publish.markdown_table(TABLE_COLUMNS, [])[0]) :]))
  return [md_path, csv_path]


def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  return plt


def write_heatmaps(s: Search, cells: list[search.Cell], out: str) -> str:
  plt = _pyplot()
  grid = s.grid
  optimizers = FLAGS.optimizers
  fig, axes = plt.subplots(
    1, len(optimizers), figsize=(3.2 * len(optimizers) + 1, 3.4), squeeze=False
  )
  values_by_opt = {o: heatmap_values(s, cells, o) for o in optimizers}
  every = [v for vals in values_by_opt.values() for v in vals.values()]
  low, high = (min(every), max(every)) if every else (0.0, 1.0)
  cmap = 'viridis' if s.metric.higher_is_better else 'viridis_r'
  image = None
  digits = 0 if s.metric.scale == 100.0 else 1  # 85 (accuracy %), 1.0 (MSE x 1000)
  for ax, optimizer in zip(axes[0], optimizers):
    values = values_by_opt[optimizer]
    tau = grid.heatmap_tau if optimizer in search.ADAPTIVE else None
    matrix = [[values.get((c, v), math.nan) for c in grid.client] for v in grid.server]
    image = ax.imshow(matrix, origin='lower', cmap=cmap, vmin=low, vmax=high, aspect='auto')
    for i, server in enumerate(grid.server):
      for j, client in enumerate(grid.client):
        value = values.get((client, server))
        text = '' if value is None else f'{value:.{digits}f}'
        ax.text(j, i, text, ha='center', va='center', fontsize=6)
    best = search.select(  # the selection among this map's cells (its tau)
      [
        c
        for c in cells
        if c.optimizer == optimizer
        and c.log_tau == tau
        and c.seed == FLAGS.seed
        and (c.log_client, c.log_server) in values
      ],
      s.stats,
    )
    if best is not None:
      j, i = grid.client.index(best.log_client), grid.server.index(best.log_server)
      ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec='red', lw=1.5))
    ax.set_xticks(range(len(grid.client)), [search.log_text(c) for c in grid.client], fontsize=6)
    ax.set_yticks(range(len(grid.server)), [search.log_text(v) for v in grid.server], fontsize=6)
    ax.set_xlabel('client learning rate (log10)', fontsize=7)
    if ax is axes[0][0]:  # one label for the row: the panels share it, and it would overlap
      ax.set_ylabel('server learning rate (log10)', fontsize=7)
    at = '' if tau is None else f', tau 1e{search.log_text(tau)}'
    ax.set_title(f'{published.PAPER_NAMES[optimizer]}{at}', fontsize=8)
  if image is not None:
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label=s.metric.label)
  fig.suptitle(
    f'{FLAGS.task}, seed {FLAGS.seed}: {s.metric.label}, last {FLAGS.window} rounds (red: the '
    'smallest training loss on the map); blank = diverged or not run',
    fontsize=8,
  )
  path = os.path.join(out, f'heatmaps_{FLAGS.task}.png')
  publish.save_figure(fig, path, dpi=130, bbox_inches='tight')
  plt.close(fig)
  return path


def write_tau(s: Search, cells: list[search.Cell], out: str) -> str:
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(4.5, 3.4))
  for optimizer in (o for o in FLAGS.optimizers if o in search.ADAPTIVE):
    by_tau = best_by_tau(s, cells, optimizer)
    if by_tau:
      taus = sorted(by_tau)
      ax.plot([10.0**t for t in taus], [by_tau[t] for t in taus], 'o-', label=optimizer)
  ax.set_xscale('log')
  ax.set_xlabel('adaptivity tau')
  ax.set_ylabel(s.metric.label)
  how = (
    'eta_l, eta tuned per tau'
    if FLAGS.search == 'full'
    else 'staged: eta_l, eta tuned at tau=1e-3 only'
  )
  ax.set_title(f'{FLAGS.task}: best cell per tau ({how})', fontsize=8)
  ax.legend(fontsize=7)
  path = os.path.join(out, f'tau_{FLAGS.task}.png')
  publish.save_figure(fig, path, dpi=130, bbox_inches='tight')
  plt.close(fig)
  return path


def write_curves(s: Search, chosen: dict[str, list[search.Cell]], out: str) -> str:
  plt = _pyplot()
  fig, (by_round, by_examples) = plt.subplots(1, 2, figsize=(9, 3.4))
  for optimizer, cells in chosen.items():
    stats = s.stats[cells[0].name]
    if stats.curve:
      by_round.plot(*zip(*stats.curve), label=published.PAPER_NAMES[optimizer])
      xs = [e for _, e in stats.examples]
      by_examples.plot(xs, [v for _, v in stats.curve], label=published.PAPER_NAMES[optimizer])
  by_round.set_xlabel('round')
  by_examples.set_xlabel('examples processed by the clients')
  for ax in (by_round, by_examples):
    ax.set_ylabel(s.metric.label)
    ax.legend(fontsize=7)
  fig.suptitle(f'{FLAGS.task}: the selected cells (seed {FLAGS.seed})', fontsize=9)
  path = os.path.join(out, f'curves_{FLAGS.task}.png')
  publish.save_figure(fig, path, dpi=130, bbox_inches='tight')
  plt.close(fig)
  return path


# --- main ---


def _main(argv: list[str]) -> int:
  logging.set_verbosity(logging.WARNING)
  command = check_flags(argv)
  grid = grid_from_flags(FLAGS.task)
  runs_dir = publish.resolve(FLAGS.runs_dir or os.path.join('runs', 'reddi2021', FLAGS.task))
  out = publish.output_from_flags(
    DRIVER,
    FLAGS,
    SETTINGS,
    out=FLAGS.out or os.path.join(runs_dir, 'report'),
    entry=f'reproduce_{FLAGS.task}',
  )
  publish.refuse_committed([runs_dir], '--runs_dir')
  s = Search(runs_dir, grid)
  if FLAGS.dry_run:
    first = (
      search.full_cells(FLAGS.optimizers, grid, FLAGS.seed)
      if FLAGS.search == 'full'
      else search.heatmap_cells(FLAGS.optimizers, grid, FLAGS.seed)
    )
    for cell in first:
      print(shlex.join(trainer_command(cell, runs_dir)))
    print(f'{len(first)} cells in the first stage; the report would go to {out}')
    return 0
  os.makedirs(runs_dir, exist_ok=True)
  if command == 'heatmaps':
    cells = search.heatmap_cells(FLAGS.optimizers, grid, FLAGS.seed)
    stopped = s.run(cells)
  else:
    cells, stopped = search_cells(s, grid)
  if stopped is not None:
    return stopped
  chosen = {}
  if command in ('table', 'all'):
    chosen = confirm_cells(s, cells)
    stopped = s.run([c for group in chosen.values() for c in group])
    if stopped is not None:
      return stopped
  needed = cells + [c for group in chosen.values() for c in group]
  unfinished = [c.name for c in needed if not s.status[c.name].startswith(('done', 'diverged'))]
  if FLAGS.publish and unfinished:
    print(
      f'reproduce: error: --publish: {len(unfinished)} cells have not finished (e.g. '
      f'{unfinished[0]}: {s.status[unfinished[0]]}); nothing was written',
      file=sys.stderr,
    )
    return 1
  os.makedirs(out, exist_ok=True)
  written = [write_grid(s, cells, out)]
  if command in ('heatmaps', 'all'):
    written.append(write_heatmaps(s, cells, out))
  if command in ('tau', 'all'):
    written.append(write_tau(s, cells, out))
  if command in ('table', 'all'):
    written += write_table(s, cells, chosen, out)
    written.append(write_curves(s, chosen, out))
  if s.trained:
    print(
      f'trained {s.trained} cells in {cell_runner.duration(s.seconds)}: '
      f'{3600.0 * s.trained / s.seconds:.1f} cells per hour at --parallel={FLAGS.parallel}'
      + ('' if FLAGS.preload else ' (--nopreload)')
    )
  print('wrote ' + ', '.join(written))
  return 1 if s.failed else 0


def main(argv: list[str]) -> int:
  return cell_runner.run_main('reproduce', _main, argv)


if __name__ == '__main__':
  cell_runner.app_run(main)
