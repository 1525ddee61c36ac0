"""Grid cells side by side (`engines.grid_cells`, `training_loop.run_cells`): K runs that differ in
their hyperparameters as one computation, each cell the run it would be alone.

* every cell's metrics.csv and client_eval equal those of the same cell trained alone on the
  in-process engine (tests/metrics_close.py's tolerances), 5 rounds of synthetic (clients of
  unequal sizes, E = 2) with five server optimizers and four client learning rates, and a
  round of the fmnist CNN (dropout, each client's own masks);
* resume: cells stopped at different rounds (one cell's last checkpoint lost) catch up and end
  where an uninterrupted grid ends; a cell that diverges stops alone, the others go on;
* what cannot be a cell is refused in one line naming why.
"""

import csv
import os
import shutil

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import trainer_processes
from tests.engines import test_vectorised as tv
from tests.metrics_close import assert_rows_close
from tests.metrics_close import central_test
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive.engines import grid_cells
from tff_adaptive.loop import sampling
from tff_adaptive.loop import training_loop
from tff_adaptive.optimizers import schedules
from tff_adaptive.optimizers import server as server_optimizers


def _cell(
  task, server, server_lr, client_lr, tau=None, batch_size=10, epochs=1, name='fedopt', client='sgd'
):
  config = server_optimizers.ServerOptimizerConfig(
    server, learning_rate=server_lr, **({} if tau is None else {'tau': tau})
  )
  return algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      tv._client(client, client_lr, batch_size=batch_size, epochs=epochs),
      server_optimizers.build_server_optimizer(config),
      config.learning_rate,
      schedules.ScheduleConfig(),
      num_clients=len(task.client_ids),
    ),
  )


def _loop_config(output_dir, rounds, checkpoint_every=None, eval_every=None):
  """Evaluated after the last round only by default (central and per client): the train
  metrics of every round and the final model's evaluation say what each cell computed."""
  return training_loop.LoopConfig(
    rounds,
    rounds_per_eval=eval_every or rounds,
    rounds_per_checkpoint=checkpoint_every or rounds,
    seed=1,
    output_dir=str(output_dir),
  )


def _loop_args(task, clients_per_round, client_test=True):
  central = central_test(task)
  return (
    tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1)),
    task.train_clients,
    sampling.build_client_sampler(task.client_ids, clients_per_round, seed=1),
    tv._evaluator(task),
    lambda round_num: central,
    task.client_test if client_test else None,
  )


_QUIET = {'log': open(os.devnull, 'w'), 'warn': open(os.devnull, 'w')}  # noqa: SIM115


def _run_cells(task, cells, dirs, rounds, k, checkpoint_every=None, client_test=True):
  """Without client_test (the resume test), the central evaluation every round."""
  return training_loop.run_cells(
    grid_cells.GridCellsEngine(cells),
    *_loop_args(task, k, client_test),
    [_loop_config(d, rounds, checkpoint_every, None if client_test else 1) for d in dirs],
    **_QUIET,
  )


def _run_alone(task, algorithm, output_dir, rounds, k):
  training_loop.run_training(
    engines.InProcessEngine(algorithm),
    *_loop_args(task, k),
    _loop_config(output_dir, rounds),
    **_QUIET,
  )


def _read(output_dir, rounds):
  """(metrics.csv rows without seconds_per_round, the last round's client_eval rows)."""
  with open(output_dir / 'metrics.csv') as f:
    rows = [{k: v for k, v in r.items() if k != 'seconds_per_round'} for r in csv.DictReader(f)]
  client_eval = output_dir / 'client_eval' / f'round_{rounds:05d}.csv'
  if not client_eval.exists():
    return rows, []
  with open(client_eval) as f:
    return rows, list(csv.DictReader(f))


# (task, cells as (server optimizer, eta, eta_l, tau), rounds, clients per round, E, batch)
CASES = {
  'synthetic-five-optimizers-E2': (
    'synthetic',
    [
      ('sgd', 1.0, 0.01, None),
      ('sgdm', 0.3, 0.03, None),
      ('adagrad', 0.1, 0.01, 1e-3),
      ('adam', 0.01, 0.1, 1e-3),
      ('yogi', 0.03, 0.003, 1e-2),
    ],
    5,
    10,
    2,
    10,
  ),
  'fmnist-two-cells': (
    'fmnist',
    [('sgd', 1.0, 0.01, None), ('adam', 0.01, 0.03, 1e-3)],
    1,
    5,
    1,
    64,
  ),
}


@pytest.mark.parametrize('case', list(CASES))
def test_each_cell_is_the_run_it_would_be_alone(case, tmp_path):
  task_name, specs, rounds, k, epochs, batch = CASES[case]
  task = tv._task(task_name)
  make = lambda spec: _cell(task, *spec, batch_size=batch, epochs=epochs)
  dirs = [tmp_path / f'cell{i}' for i in range(len(specs))]
  results = _run_cells(task, [make(s) for s in specs], dirs, rounds, k)
  assert all(isinstance(r, training_loop.TrainingResult) for r in results), results
  smallest = min(len(c['y']) for c in task.client_test.values())
  finals = []
  for i, spec in enumerate(specs):
    _run_alone(task, make(spec), tmp_path / f'alone{i}', rounds, k)
    want_rows, want_clients = _read(tmp_path / f'alone{i}', rounds)
    got_rows, got_clients = _read(dirs[i], rounds)
    assert len(want_clients) == len(task.client_test) and 'eval_accuracy' in got_rows[-1]
    assert_rows_close(want_rows, got_rows, n_examples=smallest)
    assert_rows_close(want_clients, got_clients, n_examples=smallest)
    finals.append(float(got_rows[-1]['train_loss']))
  assert len(set(finals)) == len(finals), finals  # the cells' hyperparameters told them apart


def test_fedexp_cells_are_the_runs_alone(tmp_path):
  """FedExP as grid cells (eta_l x server momentum): each cell's extrapolated step (its own
  aggregation fold and eps round count), its server optimizer that keeps x_t and its released
  model (x_t + x_{t+1}) / 2, which the cell's evaluation reads, are the run's alone."""
  task = tv._task('synthetic')
  specs = [('sgd', 1.0, 0.01, None), ('sgd', 1.0, 0.05, None), ('sgdm', 1.0, 0.02, None)]
  make = lambda spec: _cell(task, *spec, name='fedexp')
  dirs = [tmp_path / f'cell{i}' for i in range(len(specs))]
  _run_cells(task, [make(s) for s in specs], dirs, 4, 10)
  smallest = min(len(c['y']) for c in task.client_test.values())
  for i, spec in enumerate(specs):
    _run_alone(task, make(spec), tmp_path / f'alone{i}', 4, 10)
    want_rows, want_clients = _read(tmp_path / f'alone{i}', 4)
    got_rows, got_clients = _read(dirs[i], 4)
    assert max(float(r['fedexp_eta_g']) for r in got_rows) > 1.0
    assert_rows_close(want_rows, got_rows, n_examples=smallest)
    assert_rows_close(want_clients, got_clients, n_examples=smallest)


def test_cells_at_different_rounds_catch_up_and_a_diverging_cell_stops_alone(tmp_path):
  """Three synthetic cells to round 4 (checkpoints every 2); cell 1 loses its round-4
  checkpoint, so it resumes at round 2 and trains rounds 3-4 alone before the three train round
  5 together: every file as an uninterrupted 5-round grid's. A fourth cell's learning rates
  blow up: it stops with its DivergenceError, its rows those before the round that diverged."""
  task = tv._task('synthetic')
  specs = [
    ('adam', 0.01, 0.03, 1e-3),
    ('sgd', 1.0, 0.01, None),
    ('yogi', 0.03, 0.01, 1e-3),
    ('sgd', 1e36, 0.1, None),
  ]
  cells = lambda: [_cell(task, *s) for s in specs]
  straight = [tmp_path / f'straight{i}' for i in range(4)]
  resumed = [tmp_path / f'resumed{i}' for i in range(4)]
  run = lambda dirs, rounds: _run_cells(task, cells(), dirs, rounds, 10, 2, client_test=False)
  want = run(straight, 5)
  run(resumed, 4)
  checkpoints = resumed[1] / 'checkpoints'
  assert sorted(os.listdir(checkpoints)) == ['program_state_2', 'program_state_4']
  shutil.rmtree(checkpoints / 'program_state_4')
  got = run(resumed, 5)
  for i in range(3):
    assert isinstance(got[i], training_loop.TrainingResult)
    want_rows, want_clients = _read(straight[i], 5)
    got_rows, got_clients = _read(resumed[i], 5)
    assert got_rows == want_rows and got_clients == want_clients
  assert isinstance(want[3], training_loop.DivergenceError)
  assert isinstance(got[3], training_loop.DivergenceError)
  diverged = int(str(want[3]).split('round ')[1].split(' ')[0])
  assert diverged >= 2, want[3]  # some rounds kept before
  rows, _ = _read(straight[3], diverged - 1)
  assert [int(r['round_num']) for r in rows] == list(range(1, diverged))
  assert np.isfinite(float(rows[-1]['train_loss']))


def test_what_cannot_be_a_cell_is_refused_in_one_line():
  task = tv._task('synthetic')
  adam_clients = _cell(task, 'sgd', 1.0, 0.01, client='adam')
  with pytest.raises(
    ValueError, match=r"^grid cells: client optimizer 'adam' cannot run as a grid"
  ):
    grid_cells.check_cells([adam_clients])
  prox = _cell(task, 'sgd', 1.0, 0.01, name='fedprox')
  with pytest.raises(ValueError, match=r"algorithm 'fedprox'.s clients do more than local steps"):
    grid_cells.check_cells([prox])
  with pytest.raises(ValueError, match=r'cell 1 differs from cell 0 in more than'):
    grid_cells.check_cells([_cell(task, 'sgd', 1.0, 0.01), _cell(task, 'sgd', 1.0, 0.01, epochs=2)])
  dp = tv._algorithm(
    task,
    'sgd',
    tv._client('sgd', 0.01, batch_size=10),
    aggregators.dp_mean('gaussian_adaptive', 0.5, 10, 0.1, noise_seed=3),
  )
  with pytest.raises(ValueError, match=r'\(DP or compression\) does not run as a grid cell'):
    grid_cells.check_cells([dp])
  with pytest.raises(ValueError, match='no cells given'):
    grid_cells.check_cells([])
  grid_cells.check_cells([_cell(task, 'sgd', 1.0, 0.01), _cell(task, 'adam', 0.1, 1.0, 1e-3)])


def _trainer(tmp_path, *args):
  return trainer_processes.run(
    [
      '--task=synthetic',
      '--engine=vectorised',
      '--clients_per_round=10',
      '--client_batch_size=10',
      '--rounds_per_eval=2',
      f'--root_output_dir={tmp_path}',
      *args,
    ],
    timeout=300,
  )


def test_the_trainer_runs_cells_each_as_the_trainer_runs_it_alone(tmp_path):
  """--cells: two cells and one that diverges, 3 rounds; each cell's directory is the one the
  trainer makes for the same flags alone (the same hparams.json: the lone command finds it
  finished; that its numbers are the lone run's, the tests above), exit 3 naming the diverged
  cell; bad cell files are one line, exit 2."""
  cells = tmp_path / 'cells.txt'
  cells.write_text(
    '# a grid\n'
    'adam --server_optimizer=adam --server_learning_rate=0.01 --tau=0.001\n'
    'sgd --server_optimizer=sgd --server_learning_rate=1.0 --client_learning_rate=0.03\n'
    'wild --server_optimizer=sgd --server_learning_rate=1e36 --client_learning_rate=0.1\n'
  )
  grid = _trainer(tmp_path / 'grid', f'--cells={cells}', '--total_rounds=3')
  lines = trainer_processes.stderr_lines(grid.stderr)
  assert grid.returncode == 3, grid.stderr
  assert lines[-1] == 'federated_trainer: error: 1 of 3 cells diverged (the others finished)'
  assert 'wild: diverged in round 2: training diverged in round 2' in grid.stdout
  again = _trainer(
    tmp_path / 'grid',
    '--server_optimizer=adam',
    '--server_learning_rate=0.01',
    '--tau=0.001',
    '--experiment_name=adam',
    '--total_rounds=3',
  )
  assert again.returncode == 0 and 'had already finished 3 rounds' in again.stdout, again.stderr
  for text, message in [
    ('x --client_optimizer=adam\n', "'--client_optimizer=adam'; a cell sets only --name=value"),
    ('x --tau=0.01\nx --tau=0.1\n', "line 2: cell 'x' named twice"),
    ('x --client_learning_rate=-1\n', "cell 'x': --client_learning_rate must be > 0, got -1.0"),
  ]:
    cells.write_text(text)
    bad = _trainer(tmp_path / 'bad', f'--cells={cells}', '--total_rounds=1')
    lines = trainer_processes.stderr_lines(bad.stderr)
    assert bad.returncode == 2 and len(lines) == 1 and message in lines[0], bad.stderr
  assert not (tmp_path / 'bad').exists()
