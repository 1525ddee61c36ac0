"""Seconds per round of each client optimizer relative to SGD, measured side by side in one run.

  python -m benchmarks.client_optimizer_cost [--rounds=40] [--block=5]
  bazel run //benchmarks:client_optimizer_cost -- --rounds=20

Setup of Kim et al. 2024 Table 1 (no evaluation): fmnist, the paper's CNN, 10 clients of the
Dirichlet(0.1) partition per round (400 training examples each, 7 local steps at batch 64),
FedAvg with the unweighted average, engine "inprocess" (one compiled round in this process).
Client optimizers: sgd (lr 0.1), sgdm, adam, adagrad, sps, delta_sgd (the paper's rule: one
gradient per step), delta_sgd with `gradient='same_batch'` (the authors' code: two
gradients per step), dog and ldog (Ivgi et al. 2023; reps_rel 1e-2, the norms of every step). Every configuration trains the same clients from the same initial model;
after `--warmup` rounds each they are timed in round-robin blocks of `--block` rounds, the order
rotating every block, so machine noise affects them alike. Printed: the median seconds per
round, its ratio to sgd, and the CPU seconds per round (this process, from os.times).
"""

import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import tensorflow_federated as tff

from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime  # noqa: F401  (drops TFF's import-time context cleanly at exit)
from tff_adaptive import tasks
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers.config import DoGHParams

flags.DEFINE_integer('rounds', 40, 'Timed rounds per client optimizer.')
flags.DEFINE_integer('block', 5, 'Rounds per optimizer in each round-robin block.')
flags.DEFINE_integer('warmup', 3, 'Untimed rounds per optimizer (tracing, caches).')
flags.DEFINE_integer('clients_per_round', 10, 'Clients per round.')
for _name in ('rounds', 'block', 'clients_per_round'):
  flags.register_validator(_name, lambda v: v >= 1, message=f'--{_name} must be >= 1')
flags.register_validator('warmup', lambda v: v >= 0, message='--warmup must be >= 0')
FLAGS = flags.FLAGS

CONFIGS = {
  'sgd': client_optimizers.ClientOptimizerConfig('sgd', 0.1),
  'sgdm': client_optimizers.ClientOptimizerConfig('sgdm', 0.1, momentum=0.9),
  'adam': client_optimizers.ClientOptimizerConfig('adam', 0.001),
  'adagrad': client_optimizers.ClientOptimizerConfig('adagrad', 0.01),
  'sps': client_optimizers.ClientOptimizerConfig('sps'),
  'delta_sgd': client_optimizers.ClientOptimizerConfig('delta_sgd'),
  'delta_sgd_same_batch': client_optimizers.ClientOptimizerConfig(
    'delta_sgd', delta_sgd=optimizers.DeltaSGDHParams(gradient='same_batch')
  ),
  'dog': client_optimizers.ClientOptimizerConfig('dog', dog=DoGHParams(reps_rel=1e-2)),
  'ldog': client_optimizers.ClientOptimizerConfig('ldog', dog=DoGHParams(reps_rel=1e-2)),
}


class _Runner:
  """One client optimizer on the in-process engine, stepping through rounds."""

  def __init__(self, task, config, initial):
    client = algorithms.ClientTrainingConfig(config, batch_size=64, weighting='uniform')
    algorithm = algorithms.build_fedopt(
      lambda: task.model_fn(1), client, optimizers.build_fedavg_sgd(1.0)
    )
    self.engine = engines.InProcessEngine(algorithm)
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
    result = self.engine.next(self.state, clients)
    self.state = result.state
    if timed:
      self.seconds.append(time.perf_counter() - start)


def main(argv):
  del argv
  task = tasks.build_task(tasks.TaskConfig('fmnist', seed=1, dirichlet_alpha=0.1))
  initial = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  runners = {name: _Runner(task, config, initial) for name, config in CONFIGS.items()}
  for runner in runners.values():
    for _ in range(FLAGS.warmup):
      runner.step(timed=False)
  cpu = {name: 0.0 for name in runners}
  names = list(runners)
  for block in range(-(-FLAGS.rounds // FLAGS.block)):
    order = names[block % len(names) :] + names[: block % len(names)]
    for name in order:
      before = os.times()
      for _ in range(FLAGS.block):
        runners[name].step(timed=True)
      after = os.times()
      cpu[name] += (after.user - before.user) + (after.system - before.system)
  base = statistics.median(runners['sgd'].seconds)
  print(
    f'fmnist CNN, {FLAGS.clients_per_round} clients x 7 local steps (batch 64), in-process '
    f'engine, median of {len(runners["sgd"].seconds)} rounds each, interleaved:'
  )
  print(f'{"client optimizer":<22} {"s/round":>8} {"vs sgd":>7} {"CPU s/round":>12}')
  for name, runner in runners.items():
    median = statistics.median(runner.seconds)
    print(f'{name:<22} {median:8.4f} {median / base:7.2f} {cpu[name] / len(runner.seconds):12.4f}')


if __name__ == '__main__':
  app.run(main)
