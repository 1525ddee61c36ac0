"""Cells per hour of a learning-rate grid: K cells side by side (`engines.grid_cells`) against the
same K cells one after another (engine "inprocess" and engine "vectorised", one engine each).

  python -m benchmarks.grid_cells [--task=fmnist] [--cells=20] [--rounds=10]
      [--clients_per_round=10] [--batch_size=20]

Infrastructure script (no paper of its own). The cells are a Reddi et al. (2021) grid: the five
server optimizers (FedAvg, FedAvgM, FedAdagrad, FedAdam, FedYogi at their default rates, tau
1e-3) crossed with client learning rates 10^-2.5 .. 10^-1 (step 0.5), the first `--cells` of
them; FedOpt with client SGD, E = 1, seed 1. Each way builds its engines and traces its round
(a cell's fixed cost: one process per cell pays it for every cell, plus TF's import), then
trains `--rounds` rounds of the same seeded clients. It checks that the grid's first round is
every cell's own (train loss to 1e-5 relative), then prints seconds per cell (fixed cost and
per round) and cells per hour for cells of `--rounds` and of 500 rounds (no evaluation: the
evaluation is the same per cell either way).
"""

import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
import tensorflow_federated as tff

from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.core import seeds
from tff_adaptive.engines import grid_cells
from tff_adaptive.loop import sampling
from tff_adaptive.optimizers import schedules
from tff_adaptive.optimizers import server as server_optimizers

_TASK = flags.DEFINE_string('task', 'fmnist', 'Task (fmnist, synthetic, emnist_cr, ...).')
_CELLS = flags.DEFINE_integer('cells', 20, 'Grid cells (at most 20).')
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Timed rounds per cell.')
_CLIENTS = flags.DEFINE_integer('clients_per_round', 10, 'Clients per round.')
_BATCH = flags.DEFINE_integer('batch_size', 20, 'Client batch size.')
_PROJECTED_ROUNDS = 500
_SERVERS = ('sgd', 'sgdm', 'adagrad', 'adam', 'yogi')
_CLIENT_LRS = tuple(10.0**e for e in (-2.5, -2.0, -1.5, -1.0))


def _cells(task):
  grid = [(server, lr) for lr in _CLIENT_LRS for server in _SERVERS][: _CELLS.value]

  def build(server, client_lr):
    config = optimizers.ServerOptimizerConfig(
      server, learning_rate=server_optimizers.SERVER_OPTIMIZERS[server].default_learning_rate
    )
    return algorithms.build_algorithm(
      'fedopt',
      algorithms.AlgorithmInputs(
        lambda: task.model_fn(1),
        algorithms.ClientTrainingConfig(
          optimizers.ClientOptimizerConfig('sgd', client_lr), batch_size=_BATCH.value
        ),
        server_optimizers.build_server_optimizer(config),
        config.learning_rate,
        schedules.ScheduleConfig(),
        num_clients=len(task.client_ids),
      ),
    )

  return grid, lambda: [build(*cell) for cell in grid]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  if not 1 <= _CELLS.value <= len(_SERVERS) * len(_CLIENT_LRS):
    raise app.UsageError(f'--cells must be 1..{len(_SERVERS) * len(_CLIENT_LRS)}')
  logging.set_verbosity(logging.WARNING)
  task = tasks.build_task(tasks.TaskConfig(_TASK.value, seed=1))
  ids = list(task.client_ids)
  sampler = sampling.build_client_sampler(ids, min(_CLIENTS.value, len(ids)), seed=1)
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  grid, make = _cells(task)
  rounds = [
    [
      engines.RoundClient(c, task.train_clients[c], seeds.client_seed(1, r, ids.index(c), len(ids)))
      for c in sampler(r)
    ]
    for r in range(1, _ROUNDS.value + 2)
  ]
  times = {}  # way -> (fixed seconds per cell, seconds per cell-round)
  first = {}  # way -> first-round train losses per cell
  for way in ('inprocess', 'vectorised'):
    fixed, per_round, losses = 0.0, [], []
    for algorithm in make():
      started = time.perf_counter()
      engine = engines.build_engine(way, algorithm)
      result = engine.next(engine.initialize(initial), rounds[0])  # builds and traces
      fixed += time.perf_counter() - started
      losses.append(result.metrics['train_loss'])
      state = result.state
      started = time.perf_counter()
      for clients in rounds[1:]:
        state = engine.next(state, clients).state
      per_round.append((time.perf_counter() - started) / _ROUNDS.value)
    times[way] = (fixed / len(grid), float(np.median(per_round)))
    first[way] = losses
  started = time.perf_counter()
  engine = grid_cells.GridCellsEngine(make())
  active = [True] * len(grid)
  results = engine.next(engine.initialize(initial), rounds[0], active)
  fixed = time.perf_counter() - started
  first['grid'] = [r.metrics['train_loss'] for r in results]
  states = [r.state for r in results]
  started = time.perf_counter()
  for clients in rounds[1:]:
    states = [r.state for r in engine.next(states, clients, active)]
  per_round = (time.perf_counter() - started) / _ROUNDS.value
  times['grid'] = (fixed / len(grid), per_round / len(grid))
  want = np.asarray(first['inprocess'])
  for way, losses in first.items():
    np.testing.assert_allclose(losses, want, rtol=1e-5, err_msg=way)
  print(
    f'{_TASK.value}: {len(grid)} cells (5 server optimizers x client lr 10^-2.5..10^-1), '
    f'{len(rounds[0])} clients per round, batch {_BATCH.value}, client SGD E=1; first rounds '
    f'agree to 1e-5; {_ROUNDS.value} timed rounds; {os.cpu_count()} CPUs, load average '
    f'{os.getloadavg()[0]:.1f}'
  )
  print(
    f'{"way":<34} {"fixed s/cell":>12} {"s/cell-round":>13} '
    f'{f"cells/h ({_ROUNDS.value} r)":>16} {f"cells/h ({_PROJECTED_ROUNDS} r)":>17} '
    f'{"vs one by one":>14}'
  )
  names = {
    'inprocess': 'one by one, engine inprocess',
    'vectorised': 'one by one, engine vectorised',
    'grid': f'{len(grid)} cells side by side (grid)',
  }
  base = times['inprocess'][0] + _PROJECTED_ROUNDS * times['inprocess'][1]
  for way, (fixed, per_round) in times.items():
    short = 3600 / (fixed + _ROUNDS.value * per_round)
    cell = fixed + _PROJECTED_ROUNDS * per_round
    print(
      f'{names[way]:<34} {fixed:>12.2f} {per_round:>13.4f} {short:>16.0f} {3600 / cell:>17.0f} '
      f'{base / cell:>13.2f}x'
    )


if __name__ == '__main__':
  app.run(main)
