"""Seconds per round of DP and compressed aggregation (and FedExP's) relative to the plain mean.

  python -m benchmarks.aggregation_cost [--rounds=20] [--block=5]
  bazel run //benchmarks:aggregation_cost -- --rounds=10

Setup of the DP study (reproductions/dp_fedopt): fmnist as 1000 clients x 60 examples, the CNN
of Kim et al. 2024 (21,840 weights), 50 clients per round, one local epoch of SGD (batch 16,
3 steps), FedAvg (server SGD, lr 1), no evaluation. Aggregations: the weighted mean (`mean`),
`aggregators.dp_mean` with the fixed clip (z = 1, C = 0.25), the adaptive clip (z = 1,
initial C = 0.1) and DP-FTRL's tree (z = 1, C = 0.25, restarted every 1000 / m rounds),
`aggregators.quantized_mean` at 8 and 4 bits, `aggregators.ddp_mean` (distributed Skellam
under simulated secure aggregation, z = 1, C = 0.25, 16 bits; engine tff only), and FedExP
(`--algorithm=fedexp`: its extrapolated mean of Delta_i and ||Delta_i||^2, and the server
optimizer that keeps x_t for the released model, against FedAvg's mean); each on engine
"inprocess" (one compiled round in this process) and "tff" (a LearningProcess on one local TFF
worker).
Every configuration trains the same clients from the same initial model; after `--warmup`
rounds each they are timed in round-robin blocks of `--block` rounds, the order rotating every
block, so machine noise affects them alike. Printed: the median seconds per round and its
ratio to the plain mean on the same engine.
"""

import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime
from tff_adaptive import tasks
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import client as client_optimizers

flags.DEFINE_integer('rounds', 20, 'Timed rounds per configuration.')
flags.DEFINE_integer('block', 5, 'Rounds per configuration in each round-robin block.')
flags.DEFINE_integer('warmup', 2, 'Untimed rounds per configuration (tracing, caches).')
flags.DEFINE_integer('clients_per_round', 50, 'Clients per round.')
flags.DEFINE_list('engines', ['inprocess', 'tff'], 'Engines to time.')
for _name in ('rounds', 'block', 'clients_per_round'):
  flags.register_validator(_name, lambda v: v >= 1, message=f'--{_name} must be >= 1')
flags.register_validator('warmup', lambda v: v >= 0, message='--warmup must be >= 0')
FLAGS = flags.FLAGS


def aggregations(clients_per_round: int) -> dict:
  m = clients_per_round
  return {
    'mean': lambda: None,
    'dp_fixed': lambda: aggregators.dp_mean('gaussian_fixed', 1.0, m, 0.25),
    'dp_adaptive': lambda: aggregators.dp_mean('gaussian_adaptive', 1.0, m, 0.1),
    # DP-FTRL's tree, restarted every epoch of 1000 / m rounds (the trainer's --dp=tree).
    'dp_tree': lambda: aggregators.dp_mean('tree', 1.0, m, 0.25, restart_rounds=1000 // m),
    'uniform8': lambda: aggregators.quantized_mean(8),
    'uniform4': lambda: aggregators.quantized_mean(4),
    # Distributed DP under simulated secure aggregation, 16 bits: engine tff only.
    'ddp16': lambda: aggregators.ddp_mean(1.0, m, 0.25, 16),
    # FedExP: the algorithm with its own aggregation (`ALGORITHM_ROWS`).
    'fedexp': lambda: None,
  }


# Rows that run another algorithm (with its own aggregation) than FedAvg.
ALGORITHM_ROWS = {'fedexp': 'fedexp'}


class _Runner:
  """One aggregation on one engine, stepping through rounds."""

  def __init__(self, task, engine_name, aggregation, initial, algorithm_name='fedopt'):
    client = algorithms.ClientTrainingConfig(
      client_optimizers.ClientOptimizerConfig('sgd', 0.1), batch_size=16, weighting='uniform'
    )
    build = getattr(algorithms, f'build_{algorithm_name}')
    kwargs = {} if aggregation is None else {'aggregation': aggregation}
    algorithm = build(lambda: task.model_fn(1), client, optimizers.build_fedavg_sgd(1.0), **kwargs)
    self.engine = engines.build_engine(
      engine_name, algorithm, engines.EngineOptions(clients_per_round=FLAGS.clients_per_round)
    )
    self.state = self.engine.initialize(initial)
    self.task = task
    self.round_num = 0
    self.seconds = []

  def step(self, timed: bool):
    self.round_num += 1
    ids = self.task.client_ids
    chosen = [(self.round_num * 7 + 13 * i) % len(ids) for i in range(FLAGS.clients_per_round)]
    clients = [
      engines.RoundClient(
        ids[i], self.task.train_clients[ids[i]], seeds.client_seed(1, self.round_num, i, len(ids))
      )
      for i in chosen
    ]
    start = time.perf_counter()
    self.state = self.engine.next(self.state, clients).state
    if timed:
      self.seconds.append(time.perf_counter() - start)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # TFF's INFO lines for every model it builds
  task = tasks.build_task(
    tasks.TaskConfig(
      'fmnist', seed=1, dirichlet_alpha=1.0, num_clients=1000, examples_per_client=60
    )
  )
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  with runtime.local_execution():
    # TFF's engines first: building a model inside a tf.Graph (as TFF's types are read) makes
    # Keras models built eagerly before it unusable, and the in-process engine keeps one.
    order = sorted(FLAGS.engines, key=lambda engine: engine != 'tff')
    runners = {}
    for engine in order:
      for name, build in aggregations(FLAGS.clients_per_round).items():
        aggregation = build()
        if engine != 'tff' and aggregation is not None and aggregation.tff_only:
          continue  # secure aggregation is a TFF intrinsic
        runners[(engine, name)] = _Runner(
          task, engine, aggregation, initial, ALGORITHM_ROWS.get(name, 'fedopt')
        )
    for runner in runners.values():
      for _ in range(FLAGS.warmup):
        runner.step(timed=False)
    keys = list(runners)
    for block in range(-(-FLAGS.rounds // FLAGS.block)):
      for key in keys[block % len(keys) :] + keys[: block % len(keys)]:
        for _ in range(FLAGS.block):
          runners[key].step(timed=True)
  print(
    f'fmnist CNN, {FLAGS.clients_per_round} clients x 3 local steps (batch 16), FedAvg, median '
    f'of {FLAGS.rounds} rounds each, interleaved:'
  )
  print(f'{"engine":<10} {"aggregation":<12} {"s/round":>8} {"vs mean":>8}')
  for (engine, name), runner in runners.items():
    median = statistics.median(runner.seconds)
    base = statistics.median(runners[(engine, 'mean')].seconds)
    print(f'{engine:<10} {name:<12} {median:8.3f} {median / base:8.2f}')


if __name__ == '__main__':
  app.run(main)
