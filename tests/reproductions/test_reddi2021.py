"""Reddi et al. 2021's grid search (`reproductions.reddi2021_fedopt`): the protocol's arithmetic
against NumPy, and the driver end to end on a 2 x 2 grid of 2-3 rounds (synthetic; Stack Overflow
LR on TFF-format sample files), plus every task's commands checked by the trainer's flags."""

import csv
import json
import math
import os
import pathlib
import random
import re
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

from reproductions import publish
from reproductions.reddi2021_fedopt import published
from reproductions.reddi2021_fedopt import search
from tests import trainer_processes
from tff_adaptive.run import provenance
from tff_adaptive.tasks.published import LOOP

REPO = pathlib.Path(__file__).resolve().parents[2]
DRIVER = 'reproductions.reddi2021_fedopt.reproduce'
ACCURACY = search.task_metric('synthetic')
MSE = search.task_metric('emnist_ae')


def _run(*args, cwd, timeout=900):
  return subprocess.run(
    [sys.executable, '-m', DRIVER, *args],
    cwd=cwd,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
    env=trainer_processes.driver_env(),
  )


def _csv(path):
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


# --- the protocol ---


def test_grids_are_those_of_appendix_d2():
  emnist = search.paper_grid('emnist_cr')
  assert emnist.client == tuple(np.round(np.arange(-3, 0.51, 0.5), 6))  # 10^-3 .. 10^0.5
  assert emnist.server == tuple(np.round(np.arange(-3, 1.01, 0.5), 6))  # 10^-3 .. 10^1
  so_lr = search.paper_grid('so_lr')
  assert (so_lr.client[0], so_lr.client[-1], len(so_lr.client)) == (-1.0, 3.0, 9)
  assert (so_lr.server[0], so_lr.server[-1], len(so_lr.server)) == (-2.0, 1.5, 8)
  ae = search.paper_grid('emnist_ae')
  assert (ae.client[0], ae.client[-1], ae.server[0], ae.server[-1]) == (-1.5, 2.0, -2.0, 1.0)
  assert search.paper_grid('fmnist') == search.paper_grid('cifar10')  # the initial grid
  assert search.paper_grid('fmnist', 1.0).client == (-3.0, -2.0, -1.0, 0.0)
  assert emnist.taus == (-5.0, -4.0, -3.0, -2.0, -1.0) and emnist.heatmap_tau == -3.0
  # 8 x 9 pairs per optimizer, tau 1e-3 for the adaptive ones; full adds the other 4 taus.
  cells = search.heatmap_cells(search.OPTIMIZERS, emnist, 1)
  assert len(cells) == 5 * 8 * 9 and len({c.name for c in cells}) == len(cells)
  assert {c.log_tau for c in cells if c.optimizer in search.ADAPTIVE} == {-3.0}
  assert {c.log_tau for c in cells if c.optimizer not in search.ADAPTIVE} == {None}
  assert len(search.full_cells(search.OPTIMIZERS, emnist, 1)) == 5 * 72 + 3 * 72 * 4


def test_a_cell_is_the_trainer_flags_of_the_presets():
  """The cell at Tables 8-9's tuned EMNIST CR FedAdam rates gives its preset's rate flags."""
  from tff_adaptive.tasks import published as tuned  # pylint: disable=g-import-not-at-top

  cell = search.Cell(
    'adam',
    tuned.LOG10_CLIENT_LR['emnist_cr']['adam'],
    tuned.LOG10_SERVER_LR['emnist_cr']['adam'],
    tuned.LOG10_TAU['emnist_cr']['adam'],
    1,
  )
  assert cell.name == 'adam_c-1.5_s-2.5_t-4_seed1'
  flags = dict(f[2:].split('=', 1) for f in cell.trainer_flags())
  preset = pathlib.Path(published.PRESETS_DIR, 'emnist_cr_adam.flags').read_text().splitlines()
  preset = dict(l[2:].split('=', 1) for l in preset if l.startswith('--'))
  for name in ('server_optimizer', 'adaptive_variant', 'seed'):
    assert flags[name] == preset[name], name
  for name in ('client_learning_rate', 'server_learning_rate', 'tau'):
    assert float(flags[name]) == pytest.approx(float(preset[name]), rel=1e-15), name
  sgdm = dict(f[2:].split('=', 1) for f in search.Cell('sgdm', 0, 0, None, 2).trainer_flags())
  assert sgdm['server_momentum'] == '0.9' and 'tau' not in sgdm and sgdm['seed'] == '2'


def _rows(rounds, rounds_per_eval, rng, metric='eval_accuracy', nan_at=None):
  rows = []
  for r in range(1, rounds + 1):
    loss = float('nan') if r == nan_at else rng.uniform(0.1, 2.0)
    row = {'round_num': str(r), 'train_loss': repr(loss), 'train_num_examples': '50.0'}
    if r % rounds_per_eval == 0 or r == rounds:
      row[metric] = repr(rng.uniform(0, 1))
    rows.append(row)
  return rows


@pytest.mark.parametrize('rounds_per_eval', [1, 10])
def test_window_statistics_against_numpy(rounds_per_eval):
  rng = np.random.default_rng(3)
  rows = _rows(250, rounds_per_eval, rng)
  stats = search.window_stats(rows, ACCURACY, window=100, total_rounds=250)
  loss = np.array([float(r['train_loss']) for r in rows])
  evals = np.array(
    [(int(r['round_num']), float(r['eval_accuracy'])) for r in rows if 'eval_accuracy' in r]
  )
  assert stats.finished and stats.rounds == 250
  np.testing.assert_allclose(stats.train_loss, loss[150:].mean(), rtol=1e-12)
  in_window = evals[evals[:, 0] > 150][:, 1]
  assert stats.evaluations == len(in_window) == (100 if rounds_per_eval == 1 else 10)
  np.testing.assert_allclose(stats.metric, 100 * in_window.mean(), rtol=1e-12)
  assert stats.curve[0][0] == rounds_per_eval and stats.examples[-1] == (250, 250 * 50.0)


def test_short_diverged_and_non_finite_runs():
  rng = np.random.default_rng(4)
  short = search.window_stats(_rows(30, 1, rng), ACCURACY, 100, 250)
  assert not short.finished and short.rounds == 30 and short.evaluations == 30
  broken = search.window_stats(_rows(250, 1, rng, nan_at=200), ACCURACY, 100, 250)
  assert broken.train_loss is None and broken.metric is not None
  early_nan = search.window_stats(_rows(250, 1, rng, nan_at=120), ACCURACY, 100, 250)
  assert early_nan.train_loss is not None  # outside the window
  assert search.window_stats([], ACCURACY, 100, 250) == search.CellStats()


def test_selection_is_the_smallest_last_window_training_loss_of_finished_cells():
  cells = [search.Cell('sgd', c, 0.0, None, 1) for c in (-2.0, -1.0, 0.0, 0.5)]
  stats = {
    cells[0].name: search.CellStats(rounds=10, finished=True, train_loss=0.5, metric=10.0),
    cells[1].name: search.CellStats(rounds=10, finished=True, train_loss=0.3, metric=5.0),
    cells[2].name: search.CellStats(rounds=4, finished=False, train_loss=0.1, metric=90.0),
    cells[3].name: search.CellStats(rounds=10, finished=True, train_loss=None, metric=99.0),
  }
  # The training loss decides, not the metric; unfinished and non-finite cells never win.
  assert search.select(cells, stats) == cells[1]
  assert search.select(cells[2:], stats) is None
  assert MSE.better(1.0, 2.0) and not ACCURACY.better(1.0, 2.0)


def test_good_regions_tell_a_rectangle_from_a_diagonal():
  grid = search.Grid(client=(-3.0, -2.0, -1.0, 0.0), server=(-2.0, -1.0, 0.0, 1.0))
  rectangle = {
    (c, s): (90.0 if c >= -2 and s <= 0 else 40.0) for c in grid.client for s in grid.server
  }
  good = search.good_region(rectangle, ACCURACY, 0.05)
  assert len(good) == 9 and search.rectangularity(good, grid) == 1.0
  assert abs(search.diagonal_correlation(good)) < 1e-12
  diagonal = {(c, s): (90.0 if c + s == -2 else 40.0) for c in grid.client for s in grid.server}
  good = search.good_region(diagonal, ACCURACY, 0.05)
  assert good == {(-3.0, 1.0), (-2.0, 0.0), (-1.0, -1.0), (0.0, -2.0)}
  assert search.rectangularity(good, grid) == 4 / 16
  np.testing.assert_allclose(search.diagonal_correlation(good), -1.0)
  # Lower is better for MSE: within 5% above the smallest.
  assert search.good_region({(0.0, 0.0): 1.0, (1.0, 0.0): 1.04, (2.0, 0.0): 1.2}, MSE, 0.05) == {
    (0.0, 0.0),
    (1.0, 0.0),
  }


# --- the driver ---


def test_every_task_has_valid_trainer_commands(tmp_path):
  """--dry_run of every task of the paper and the two of this project: the first stage's cell
  count, and every printed command accepted by the trainer's own flag checks."""
  commands = []
  for task in (*published.GRIDS, 'fmnist', 'synthetic'):
    result = _run('grid', f'--task={task}', '--dry_run', cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    grid = search.paper_grid(task)
    assert lines[-1].startswith(f'{5 * len(grid.client) * len(grid.server)} cells')
    commands += [line for line in lines[:-1]]
  assert not os.listdir(tmp_path)  # a dry run writes nothing
  check = (
    'import shlex, sys\n'
    'from absl import flags\n'
    'from tff_adaptive.run import flags as trainer_flags\n'
    'for line in sys.stdin:\n'
    '  argv = shlex.split(line)\n'
    "  assert argv[1:3] == ['-m', 'run.federated_trainer'], argv\n"
    '  flags.FLAGS.unparse_flags()\n'
    "  flags.FLAGS(['trainer', *argv[3:]])\n"
    '  c = trainer_flags.experiment_config_from_flags()\n'
    '  print(c.task.name, c.clients_per_round, c.client.batch_size, c.client.epochs, c.seed)\n'
    'print("checked", flush=True)\n'
  )
  sample = commands[:: max(1, len(commands) // 60)] + commands[-5:]
  result = subprocess.run(
    [sys.executable, '-c', check],
    input='\n'.join(sample) + '\n',
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert result.returncode == 0 and result.stdout.endswith('checked\n'), result.stderr[-2000:]
  # Table 7 / App. D: clients per round, batch size; E = 1; the search's seed.
  seen = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[:-1]}
  assert set(seen) == {*published.GRIDS, 'fmnist', 'synthetic'}
  for task, (clients, batch, _) in LOOP.items():
    assert seen[task] == [str(clients), str(batch), '1', '1'], task


def test_bad_input_is_one_line_and_exit_2(tmp_path):
  for args, expected in (
    (['heatmap', '--task=synthetic'], 'give one command of heatmaps, tau, table, grid, all'),
    (['table', '--task=nope'], '--task=nope: valid: cifar10'),
    (['table', '--task=synthetic', '--optimizers=adam,sgdx'], 'unknown sgdx'),
    (['table', '--task=synthetic', '--taus=-5,-1'], 'must include -3'),
    (['table', '--task=synthetic', '--client_grid=1,0'], '--client_grid=1,0'),
    (['table', '--task=synthetic', '--trainer_flags=--tau=0.1'], '--tau is set by the driver'),
    (['table', '--task=synthetic', '--trainer_flags=--seed=5'], '--seed is set by the driver'),
    (
      ['table', '--task=synthetic', '--trainer_flags=--experiment_name=x'],
      '--experiment_name is set by the driver',
    ),
    (['table', '--task=synthetic', '--taus=-3,nan'], 'distinct finite'),
    (['table', '--task=synthetic', '--optimizers=adam,adam'], 'repeats an optimizer'),
    (['table', '--task=synthetic', '--publish', '--rounds=3'], '--publish'),
    (
      ['table', '--task=synthetic', f'--out={REPO}/reproductions/reddi2021_fedopt/results/x'],
      'holds committed results',
    ),
  ):
    result = _run(*args, cwd=tmp_path)
    assert result.returncode == 2, (args, result.stderr)
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith('reproduce: error: '), (args, lines)
    assert expected in lines[0], (args, lines)
  assert not os.listdir(tmp_path)


SMALL = [
  '--client_grid=-2,-1',
  '--server_grid=-1,0',
  '--grid_step=1',
  '--window=2',
  '--rounds_per_eval=1',
  '--parallel=2',
]


GRID_ARGS = [
  'all',
  '--task=synthetic',
  *SMALL,
  '--rounds=3',
  '--optimizers=sgd,adam',
  '--taus=-3,-1',
  '--seeds=2',
]


@pytest.fixture(scope='module')
def synthetic_grid(tmp_path_factory):
  """`all` with GRID_ARGS, uninterrupted: (the directory it ran in, its CompletedProcess)."""
  cwd = tmp_path_factory.mktemp('grid')
  return cwd, _run(*GRID_ARGS, cwd=cwd)


def test_synthetic_grid_table_heatmaps_and_tau_end_to_end(synthetic_grid):
  """`all` on a 2 x 2 grid, FedAvg and FedAdam, 3 rounds, taus 1e-3 and 1e-1, 2 seeds: the
  staged search runs 8 + 1 cells and the second seed of each selected cell; the outputs follow
  from the cells' metrics.csv by the paper's rule; a rerun trains nothing."""
  tmp_path, result = synthetic_grid
  args = GRID_ARGS
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'trained 11 cells' in result.stdout, result.stdout
  runs = tmp_path / 'runs' / 'reddi2021' / 'synthetic'
  out = runs / 'report'
  grid = _csv(out / 'grid_synthetic.csv')
  assert len(grid) == 9 and all(r['status'] == 'done' and r['rounds'] == '3' for r in grid)
  assert [r['log10_tau'] for r in grid if r['optimizer'] == 'adam'] == ['-3'] * 4 + ['-1']
  # Recompute the selection and the table from the runs' metrics.csv.
  table = {r['optimizer']: r for r in _csv(out / 'table1_synthetic.csv')}
  for optimizer in ('sgd', 'adam'):
    cells = [r for r in grid if r['optimizer'] == optimizer]
    losses = {}
    for r in cells:
      tau = f'_t{r["log10_tau"]}' if r['log10_tau'] else ''
      name = f'{optimizer}_c{r["log10_client_lr"]}_s{r["log10_server_lr"]}{tau}_seed1'
      rows = _csv(runs / name / 'metrics.csv')
      losses[name] = np.mean([float(x['train_loss']) for x in rows[-2:]])
      assert float(r['train_loss_last2rounds']) == pytest.approx(losses[name], rel=1e-6)
    best = min(losses, key=losses.get)
    values = [
      100
      * np.mean(
        [
          float(x['eval_accuracy'])
          for x in _csv(runs / best.replace('seed1', f'seed{k}') / 'metrics.csv')[-2:]
        ]
      )
      for k in (1, 2)
    ]
    row = table[optimizer]
    assert f'{optimizer}_c{row["log10_client_lr"]}_s{row["log10_server_lr"]}' in best
    assert float(row['ours']) == pytest.approx(np.mean(values), abs=0.006)
    assert float(row['ours_std']) == pytest.approx(np.std(values, ddof=1), abs=0.006)
    assert row['seeds'] == '2 of 2' and row['published'] == ''  # synthetic is not in the paper
  markdown = (out / 'table1_synthetic.md').read_text()
  assert f'; code version {provenance.code_version(str(REPO))}' in markdown  # and the date
  assert "## The paper's claims on our numbers" in markdown and 'FedAdam' in markdown
  assert str(tmp_path) not in markdown  # commands with paths as typed there (relative)
  assert '--task=synthetic' in markdown and 'Selection: smallest training loss' in markdown
  assert '- Seeds: 1 for every search cell; 1-2 for each selected cell' in markdown
  # The rule's cell against the search cell (seed 1) with the best metric, from grid_synthetic.csv.
  assert '## The selection rule against the best metric of the search' in markdown
  for optimizer, name in (('sgd', 'FedAvg'), ('adam', 'FedAdam')):
    search_rows = [r for r in grid if r['optimizer'] == optimizer and r['seed'] == '1']
    best = max(float(r['eval_accuracy_last2rounds']) for r in search_rows)
    line = next(l for l in markdown.splitlines() if l.startswith(f'| {name} | ('))
    cols = [c.strip() for c in line.strip('|').split('|')]
    assert float(cols[6]) == pytest.approx(best, abs=0.006)
    chosen = table[optimizer]
    assert cols[1].startswith(f'({chosen["log10_client_lr"]}, {chosen["log10_server_lr"]}')
    assert float(cols[3]) - float(cols[6]) == pytest.approx(float(cols[7]), abs=0.011)
    assert float(cols[7]) <= 0
  for figure in ('heatmaps', 'tau', 'curves'):
    assert (out / f'{figure}_synthetic.png').stat().st_size > 10000
  again = _run(*args, cwd=tmp_path)
  assert again.returncode == 0 and 'trained' not in again.stdout, again.stdout + again.stderr
  assert _csv(out / 'table1_synthetic.csv') == list(table.values())
  # Finished cells made with other trainer flags are refused, not reported under these.
  other = _run(*args, '--trainer_flags=--num_clients=50', cwd=tmp_path)
  assert other.returncode == 2, other.stdout + other.stderr
  assert 'was run with other settings (--num_clients (unset) there, 50 now)' in other.stderr
  assert _csv(out / 'table1_synthetic.csv') == list(table.values())


def test_cells_side_by_side_give_the_grid_of_one_trainer_per_cell(synthetic_grid, tmp_path):
  """FedAdam's 4 heatmap cells with --engine=vectorised --cells_per_process=4: one trainer
  (`--cells`) for the four; every cell's numbers those of the reference's one trainer per cell
  (in-process engine: float rounding apart), and each cell's status names the command that
  runs it alone."""
  reference_dir, reference = synthetic_grid
  assert reference.returncode == 0, reference.stdout + reference.stderr
  args = ['heatmaps', *GRID_ARGS[1:], '--engine=vectorised', '--cells_per_process=4']
  result = _run(
    *[a for a in args if a != '--optimizers=sgd,adam'], '--optimizers=adam', cwd=tmp_path
  )
  assert result.returncode == 0, result.stdout + result.stderr
  assert '4 cells in 1 trainers side by side' in result.stdout, result.stdout
  report = pathlib.Path('runs') / 'reddi2021' / 'synthetic' / 'report' / 'grid_synthetic.csv'
  key = lambda r: (r['optimizer'], r['log10_client_lr'], r['log10_server_lr'], r['log10_tau'])
  want = {key(r): r for r in _csv(reference_dir / report)}
  got = _csv(tmp_path / report)
  assert len(got) == 4 and all(r['status'] == 'done' for r in got)
  for g in got:
    for column, value in want[key(g)].items():
      try:
        number = float(value)
      except ValueError:  # names, statuses, empty cells
        assert g[column] == value, column
        continue
      assert float(g[column]) == pytest.approx(number, rel=1e-4, abs=1e-4), (column, value)
  runs = tmp_path / 'runs' / 'reddi2021' / 'synthetic'
  status = json.loads((runs / 'adam_c-1_s0_t-3_seed1.status.json').read_text())
  assert status['exit_code'] == 0 and '--experiment_name=adam_c-1_s0_t-3_seed1' in status['command']
  assert '--cells=' in status['trained_in'] and '--cells' not in status['command']


def _cells_done(runs: pathlib.Path) -> int:
  """Cells whose status file says they ended with exit 0."""
  done = 0
  for path in runs.glob('*.status.json'):
    try:
      done += json.loads(path.read_text()).get('exit_code') == 0
    except (OSError, ValueError):  # being replaced
      pass
  return done


def _lock_holders(runs: pathlib.Path) -> list[int]:
  """Pids written in the cells' run locks (a lock file outlives its holder; the pid tells)."""
  pids = []
  for lock in runs.glob('*/.lock'):
    text = lock.read_text().strip()
    if text.isdigit():
      pids.append(int(text))
  return pids


def test_a_driver_killed_at_random_moments_ends_with_the_uninterrupted_tables(
  synthetic_grid, tmp_path
):
  """SIGKILL of the driver at three seeded random moments (each takes its preloading server
  down, and the server's trainers stop on SIGTERM: none outlives it), then a rerun to the end:
  the grid and Table 1 CSVs equal the uninterrupted run's, and nothing half-written is left."""
  reference_dir, reference = synthetic_grid
  assert reference.returncode == 0, reference.stdout + reference.stderr
  runs = tmp_path / 'runs' / 'reddi2021' / 'synthetic'
  rng = random.Random(3)
  for target in (1, 3, 5):
    driver = subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, '-m', DRIVER, *GRID_ARGS],
      cwd=tmp_path,
      # A server of its own, as the moments were drawn for (a shared one starts the cells
      # ~10 s sooner); tests/reproductions/test_cell_runner.py kills a driver that shares one.
      env=dict(os.environ, PYTHONPATH=str(REPO)),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
    )
    # Killed a seeded moment after the first, third, fifth cell ended (seconds would depend on
    # how fast this machine trains: fixed ones once fell after the last cell).
    deadline = time.monotonic() + 300
    while _cells_done(runs) < target and driver.poll() is None:
      assert time.monotonic() < deadline, 'no cell ended'
      time.sleep(0.1)
    time.sleep(rng.uniform(0.0, 2.0))
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 60
    while any(os.path.exists(f'/proc/{pid}') for pid in _lock_holders(runs)):
      assert time.monotonic() < deadline, f'a trainer outlived its driver: {_lock_holders(runs)}'
      time.sleep(0.2)
  finished_before = len(list(runs.glob('*.status.json')))
  final = _run(*GRID_ARGS, cwd=tmp_path)
  assert final.returncode == 0, final.stdout + final.stderr
  # The kills fell among the cells: some had ended, the rerun trained the rest (of 11).
  trained = int(re.search(r'trained (\d+) cells', final.stdout).group(1))
  assert 0 < finished_before and 0 < trained < 11, (finished_before, final.stdout)
  for name in ('grid_synthetic.csv', 'table1_synthetic.csv'):
    reference_csv = _csv(reference_dir / 'runs' / 'reddi2021' / 'synthetic' / 'report' / name)
    assert _csv(runs / 'report' / name) == reference_csv, name
  assert [p for p in tmp_path.rglob('*') if '.tmp' in p.name or '_temp' in p.name] == []


@pytest.mark.parametrize(
  'task,optimizer,column,label',
  [
    ('so_lr', 'adagrad', 'eval_recall_at_5', 'recall_at_5 (x100)'),
    ('emnist_ae', 'sgd', 'eval_mse', 'mse (x1000)'),  # lower is better
  ],
)
def test_a_paper_task_on_sample_files_has_the_published_column(
  tff_data_dir, tmp_path, task, optimizer, column, label
):
  """`table` on TFF-format sample files, one optimizer, 2 x 2 grid, 2 rounds: the task's own
  metric, scaled as Table 1, beside the published number and rates."""
  args = [
    'table',
    f'--task={task}',
    *SMALL,
    '--rounds=2',
    f'--optimizers={optimizer}',
    '--taus=-3',
    '--seeds=1',
    f'--data_dir={tff_data_dir}',
    '--trainer_flags=--clients_per_round=2',
  ]
  result = _run(*args, cwd=tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  runs = tmp_path / 'runs' / 'reddi2021' / task
  out = runs / 'report'
  (row,) = _csv(out / f'table1_{task}.csv')
  assert float(row['published']) == published.TABLE1[task][optimizer]
  assert row['published_log10_client_lr'] and row['published_log10_server_lr']
  assert float(row['difference']) == pytest.approx(
    float(row['ours']) - float(row['published']), abs=0.011
  )
  grid = _csv(out / f'grid_{task}.csv')
  assert len(grid) == 4 and f'{column}_last2rounds' in grid[0]
  metric = search.task_metric(task)
  name = f'{optimizer}_c{row["log10_client_lr"]}_s{row["log10_server_lr"]}'
  name += f'_t{row["log10_tau"]}' if row['log10_tau'] else ''
  rows = _csv(runs / f'{name}_seed1' / 'metrics.csv')
  assert float(row['ours']) == pytest.approx(
    metric.scale * np.mean([float(r[column]) for r in rows if r.get(column)]), abs=0.006
  )
  assert label in (out / f'table1_{task}.md').read_text()
  assert (out / f'curves_{task}.png').stat().st_size > 10000
  assert math.isfinite(float(row['train_loss_last2rounds']))


def test_the_committed_results_record_their_commands_and_settings(tmp_path):
  """Each committed task's publish.json command is accepted by --publish (its settings are what
  the driver's flags give for it: a dry run passes the check) and is the one its table quotes."""
  record = json.loads((REPO / 'reproductions/reddi2021_fedopt/results/publish.json').read_text())
  assert 'reproduce_synthetic' in record
  for key, entry in record.items():
    if not key.startswith('reproduce_'):
      continue  # another study's (tests/reproductions/test_reddi2021_fedexp.py)
    task = key.removeprefix('reproduce_')
    table = REPO / entry['out'] / f'table1_{task}.md'
    assert f'{entry["command"].split(" -m ", 1)[1]}' in table.read_text().replace('`', '')
    assert entry['out'] == f'reproductions/reddi2021_fedopt/results/table1/{task}'
    assert entry['settings']['task'] == task
    assert f'--task={task}' in entry['command'] and '--publish' in entry['command']
    args = shlex.split(entry['command'].split(f' -m {DRIVER} ', 1)[1])
    result = _run(*args, '--dry_run', cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(f'the report would go to {REPO / entry["out"]}')


def test_publish_refuses_unfinished_cells(tmp_path):
  """The committed command with an empty --runs_dir and --report_only: its settings pass, no cell
  has finished, so it exits 1 and the committed results stay as they are."""
  record = json.loads((REPO / 'reproductions/reddi2021_fedopt/results/publish.json').read_text())
  entry = record['reproduce_synthetic']
  committed = publish.digests(str(REPO / entry['out']))
  args = shlex.split(entry['command'].split(f' -m {DRIVER} ', 1)[1])
  result = _run(*args, '--report_only', f'--runs_dir={tmp_path / "empty"}', cwd=tmp_path)
  assert result.returncode == 1, result.stdout + result.stderr
  assert 'reproduce: error: --publish: 360 cells have not finished' in result.stderr
  assert 'nothing was written' in result.stderr
  assert publish.digests(str(REPO / entry['out'])) == committed


def test_window_drift_is_the_second_half_minus_the_first_half_of_the_window():
  ramp = [(r, float(r)) for r in range(10, 251, 10)]  # rising by 1 per round
  # (150, 200]: 160..200, mean 180; (200, 250]: 210..250, mean 230.
  assert search.window_drift(ramp, 250, 100) == pytest.approx(50.0)
  flat = [(r, 7.0) for r in range(10, 251, 10)]
  assert search.window_drift(flat, 250, 100) == 0.0
  assert search.window_drift([(250, 1.0)], 250, 100) is None  # nothing in the first half
  rng = np.random.default_rng(5)
  stats = search.window_stats(_rows(250, 1, rng), ACCURACY, window=100, total_rounds=250)
  values = np.array([v for _, v in stats.curve])  # rounds 1..250
  np.testing.assert_allclose(stats.drift, values[200:].mean() - values[150:200].mean())
