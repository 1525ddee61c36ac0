"""Seconds per round of our engines on a task's own clients, against the fused-loop floors.

  python -m benchmarks.vectorised_clients [--task=synthetic] [--clients_per_round=100]
      [--rounds=10] [--chunks=0,5,10,25] [--algorithm=fedopt] [--client_optimizer=sgd]
      [--epochs=1]

Infrastructure script (no paper of its own). Default: Ju et al.'s synthetic setting (LEAF
Synthetic(1, 1): clients of power-law sizes), 100 clients per round, batch 10, one epoch of SGD
at 0.01, FedAvg server: the setting of `reproductions.ju2023_adafedadam`'s Table 5
(`--algorithm` and `--client_optimizer` choose another of its algorithms or client optimizers,
with their default hyperparameters; AdaFedAdam with its AdaAdam server). The same
seeded clients go to engine "inprocess" (clients one after another in one compiled round) and
engine "vectorised" (clients side by side; `--chunks`: all at once (0) or C at a time, grouped
by their local steps) and engine "inprocess" with the fused loop (`--fused_loop=on`: the
round's local steps one after another in one XLA computation, `engines.fused_loop`; the other
rows run with it off). On Dense models with client SGD and a FedAvg server (the default), the
floors of `benchmarks.fused_floor` run the same round too: `jax_floor` (the steps in one
`jax.jit`, the limit on this CPU) and `tf_loop_floor` (the same loop as a plain tf.function).
After one warm-up round each, rounds are timed interleaved (one of each in turn), and the table
gives the median and the ratios to the in-process engine and to both floors. It first checks
that all computed the same first round (model to 1e-5 relative; train loss for the engines).
The round's critical path is its largest client: K_max local steps one after another for the
side-by-side engine, against sum K_i for the others; the table prints both.
"""

import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
import tensorflow_federated as tff

from benchmarks import fused_floor
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.core import seeds
from tff_adaptive.loop import sampling
from tff_adaptive.optimizers import config as optimizer_config
from tff_adaptive.optimizers import schedules

_TASK = flags.DEFINE_string('task', 'synthetic', 'Task (synthetic, fmnist, ...).')
_CLIENTS = flags.DEFINE_integer('clients_per_round', 100, 'Clients per round.')
_BATCH = flags.DEFINE_integer('batch_size', 10, 'Client batch size.')
_LR = flags.DEFINE_float('client_lr', 0.01, 'Client SGD learning rate.')
_EPOCHS = flags.DEFINE_integer(
  'epochs', 1, 'Local epochs E (FedPA: at least 2, its burn-in epoch and a sample).'
)
_ROUNDS = flags.DEFINE_integer('rounds', 10, 'Timed rounds per engine.')
_CHUNKS = flags.DEFINE_list('chunks', ['0', '5', '10', '25'], 'Vectorised chunk sizes; 0 = all.')
_FLOORS = flags.DEFINE_bool(
  'floors', True, 'Also time the JAX and TF-loop floors (Dense models, sgd, FedAvg only).'
)
_ALGORITHM = flags.DEFINE_enum(
  'algorithm', 'fedopt', list(algorithm_config.ALGORITHMS), 'Algorithm (server SGD at 1).'
)
_CLIENT_OPTIMIZER = flags.DEFINE_enum(
  'client_optimizer', 'sgd', list(optimizer_config.CLIENT_OPTIMIZERS), 'Client optimizer.'
)


def _algorithm(task):
  server = (
    optimizers.build_adaadam()
    if _ALGORITHM.value == 'adafedadam'
    else tff.learning.optimizers.build_sgdm(1.0)
  )
  return algorithms.build_algorithm(
    _ALGORITHM.value,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      algorithms.ClientTrainingConfig(
        optimizers.ClientOptimizerConfig(_CLIENT_OPTIMIZER.value, _LR.value),
        batch_size=_BATCH.value,
        epochs=_EPOCHS.value,
      ),
      server,
      1.0,
      schedules.ScheduleConfig(),
      num_clients=len(task.client_ids),
    ),
  )


def _engines(task):
  """name -> engine: inprocess, fused (inprocess, fused loop on), vectorised per chunk size."""
  off = engines.EngineOptions(fused_loop='off')
  runners = {
    'inprocess': engines.build_engine('inprocess', _algorithm(task), off),
    'fused': engines.build_engine(
      'inprocess', _algorithm(task), engines.EngineOptions(fused_loop='on')
    ),
  }
  for chunk in (int(c) for c in _CHUNKS.value):
    name = 'vectorised' if chunk == 0 else f'vectorised_c{chunk}'
    runners[name] = engines.build_engine(
      'vectorised',
      _algorithm(task),
      engines.EngineOptions(chunk_size=chunk or None, fused_loop='off'),
    )
  return runners


def _floors(task, runners):
  """name -> (x_t, the round's inputs (`floor_inputs`)) -> x_{t+1} for the floors, or {} where
  they do not apply."""
  if not _FLOORS.value or _ALGORITHM.value != 'fedopt' or _CLIENT_OPTIMIZER.value != 'sgd':
    return {}
  try:
    activations = fused_floor.dense_layers(task.keras_model_fn(1))
  except ValueError:
    return {}
  del runners
  return {
    'jax_floor': fused_floor.JaxFloor(activations, _LR.value),
    'tf_loop_floor': fused_floor.TfLoopFloor(activations, _LR.value),
  }


def floor_inputs(engine, clients):
  """(x, y, step table) of a round for the floors: the engine's own schedule of the clients'
  minibatches (built here, outside the timed floor)."""
  features, splits, seeds_ = engine.round_inputs(clients)[:3]
  table = fused_floor.step_table(engine, features, splits, seeds_)
  return features['x'], features['y'], table


def _check_first_round(runners, floors, states, initial, clients, inputs):
  """Runs round 0 on every engine and floor; asserts they agree (module docstring)."""
  first = {}
  for name, engine in runners.items():  # warm-up (traces) and the equality check
    result = engine.next(states[name], clients)
    states[name], first[name] = result.state, result
  want = first['inprocess']
  want_weights = runners['inprocess'].model_weights(want.state).trainable
  for name, result in first.items():
    loss = abs(result.metrics['train_loss'] - want.metrics['train_loss'])
    weights = fused_floor.max_relative_difference(
      want_weights, runners[name].model_weights(result.state).trainable
    )
    assert loss <= 1e-5 * abs(want.metrics['train_loss']) and weights <= 1e-5, (name, loss, weights)
  start = [np.asarray(w) for w in initial.trainable]
  for name, floor in floors.items():
    weights = fused_floor.max_relative_difference(want_weights, floor(start, *inputs))
    assert weights <= 1e-5, (name, weights)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  task = tasks.build_task(tasks.TaskConfig(_TASK.value, seed=1))
  ids = list(task.client_ids)
  sampler = sampling.build_client_sampler(ids, min(_CLIENTS.value, len(ids)), seed=1)
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  runners = _engines(task)
  floors = _floors(task, runners)
  states = {name: engine.initialize(initial) for name, engine in runners.items()}

  def clients(round_num):
    return [
      engines.RoundClient(
        c, task.train_clients[c], seeds.client_seed(1, round_num, ids.index(c), len(ids))
      )
      for c in sampler(round_num)
    ]

  inputs = {r: floor_inputs(runners['fused'], clients(r)) for r in range(_ROUNDS.value + 1)}
  _check_first_round(runners, floors, states, initial, clients(0), inputs[0])
  start = [np.asarray(w) for w in initial.trainable]
  for floor in floors.values():  # compiled for every bucket of the timed rounds
    for round_num in range(1, _ROUNDS.value + 1):
      floor(start, *inputs[round_num])
  steps = [
    (int(np.ceil(len(task.train_clients[c.client_id]['y']) / _BATCH.value))) for c in clients(1)
  ]
  times = {name: [] for name in [*runners, *floors]}
  for round_num in range(1, _ROUNDS.value + 1):
    round_clients = clients(round_num)
    for name, engine in runners.items():
      started = time.perf_counter()
      states[name] = engine.next(states[name], round_clients).state
      times[name].append(time.perf_counter() - started)
    for name, floor in floors.items():
      started = time.perf_counter()
      floor(start, *inputs[round_num])
      times[name].append(time.perf_counter() - started)
  _report(times, steps, floors)


def _report(times, steps, floors):
  base = float(np.median(times['inprocess']))
  print(
    f'{_TASK.value}, {_ALGORITHM.value} with {_CLIENT_OPTIMIZER.value} clients: '
    f'{len(steps)} clients per round, batch {_BATCH.value}; round 1: sum K_i = '
    f'{sum(steps)} local steps, max K_i = {max(steps)}; first rounds agree to 1e-5; '
    f'{_ROUNDS.value} rounds each, interleaved; {os.cpu_count()} CPUs, load average '
    f'{os.getloadavg()[0]:.1f}'
  )
  floor_names = list(floors)
  header = f'{"engine":<16} {"s/round":>9} {"vs inprocess":>13}'
  header += ''.join(f' {"vs " + n:>18}' for n in floor_names)
  print(header)
  for name, values in times.items():
    median = float(np.median(values))
    line = f'{name:<16} {median:>9.4f} {median / base:>12.2f}x'
    for n in floor_names:
      line += f' {median / float(np.median(times[n])):>17.2f}x'
    print(line)


if __name__ == '__main__':
  app.run(main)
