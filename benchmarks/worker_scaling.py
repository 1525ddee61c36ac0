"""Seconds and CPU seconds per round with 1, 2 and 4 loopback TFF workers vs the local worker.

  python -m benchmarks.worker_scaling [--client_counts=10,50] [--worker_counts=1,2,4]
  bazel run //benchmarks:worker_scaling -- --client_counts=10 --worker_counts=1,2 --timed_rounds=3

Infrastructure script (no paper). The round is the one of `benchmarks.round_time` (ours on
engine "tff": FedAdam server, SGD clients, 200 synthetic examples each, batch 20, 1 epoch) on
the EMNIST-CR CNN of Reddi et al. (1,206,590 parameters), with 10 and 50 clients per round,
run on:

* local: the trainer's default, one `runtime.local_execution()` worker_binary;
* N workers: `runtime.local_workers_execution(N)`, what `--local_workers=N` uses: N
  `worker_server` processes on 127.0.0.1 (each a relay in front of its worker_binary), each
  round's clients split over them by TFF's `MergeableCompExecutionContext`.

Wall seconds per round (median of --rounds after --warmup) and CPU seconds per round of this
process plus every descendant (workers, relays), from /proc. The same initial state and
clients are used for every setting, and the first timed round's model is compared with the
local worker's (it differs only by the order of the float sums).
"""

import collections
import csv
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow_federated as tff  # noqa: E402

from benchmarks import round_time  # noqa: E402
from tff_adaptive import runtime  # noqa: E402

_CLIENT_COUNTS = flags.DEFINE_list('client_counts', ['10', '50'], 'Clients per round to time.')
_WORKER_COUNTS = flags.DEFINE_list('worker_counts', ['1', '2', '4'], 'Loopback worker counts.')
_TIMED = flags.DEFINE_integer('timed_rounds', 5, 'Timed rounds per setting (>= 1).')
_WARM = flags.DEFINE_integer('warmup_rounds', 2, 'Untimed rounds per setting first.')
_MODEL = flags.DEFINE_string('model', 'emnist_cnn', 'A model of benchmarks.round_time.')
_CSV = flags.DEFINE_string('csv', 'results/benchmarks/worker_scaling.csv', 'CSV path.')


def _descendants(pid: int) -> list[int]:
  """Every live descendant of pid (children files of all its threads, recursively)."""
  found, stack = [], [pid]
  while stack:
    parent = stack.pop()
    try:
      tasks = os.listdir(f'/proc/{parent}/task')
    except FileNotFoundError:
      continue
    for task in tasks:
      try:
        with open(f'/proc/{parent}/task/{task}/children') as f:
          children = [int(c) for c in f.read().split()]
      except FileNotFoundError:
        continue
      found += children
      stack += children
  return found


def _process_cpu_s(pid: int) -> float:
  try:
    with open(f'/proc/{pid}/stat') as f:
      fields = f.read().rsplit(')', 1)[1].split()
  except FileNotFoundError:
    return 0.0
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _cpu_s() -> float:
  """CPU seconds of this process and its live descendants so far."""
  t = os.times()
  return t.user + t.system + sum(_process_cpu_s(p) for p in _descendants(os.getpid()))


def _time(num_clients: int, context_fn, initial, model_fn, clients):
  """(median s/round, CPU s/round, first timed round's weights) of one setting."""
  with context_fn():
    ours = round_time.Ours(model_fn, clients, initial)
    for _ in range(_WARM.value):
      ours.run_round()
    ours.state = ours.engine.initialize(initial)  # every setting times the same rounds
    ours.round_num = 0
    walls, first = [], None
    cpu_start = _cpu_s()
    for _ in range(_TIMED.value):
      started = time.perf_counter()
      ours.run_round()
      walls.append(time.perf_counter() - started)
      if first is None:
        first = ours.weights()
    cpu = (_cpu_s() - cpu_start) / _TIMED.value
  return float(np.median(walls)), cpu, first


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  spec = round_time.MODELS[_MODEL.value]
  seed = flags.FLAGS.seed  # round_time defines --seed
  model_fn = round_time.make_model_fn(spec, seed)
  initial = tff.learning.models.ModelWeights.from_model(spec.keras_fn(seed))
  rows = []
  print(f'{_MODEL.value}, {os.cpu_count()} cores; s/round (CPU s/round)', flush=True)
  for num_clients in [int(c) for c in _CLIENT_COUNTS.value]:
    clients = round_time.make_clients(spec, num_clients, 200, seed)
    settings = [('local', runtime.local_execution)] + [
      (f'{n} workers', lambda n=int(n): runtime.local_workers_execution(n))
      for n in _WORKER_COUNTS.value
    ]
    base = None
    for name, context_fn in settings:
      wall, cpu, weights = _time(num_clients, context_fn, initial, model_fn, clients)
      if base is None:
        base, base_weights = wall, weights
      diff = max(
        float(np.max(np.abs(a - b))) for a, b in zip(weights.trainable, base_weights.trainable)
      )
      row = collections.OrderedDict(
        model=_MODEL.value,
        clients=num_clients,
        setting=name,
        s_per_round=round(wall, 3),
        cpu_s_per_round=round(cpu, 3),
        speedup_vs_local=round(base / wall, 2),
        max_abs_weight_diff_vs_local=f'{diff:.2g}',
      )
      rows.append(row)
      print(
        f'{num_clients:3d} clients  {name:10s} {wall:7.3f} s/round ({cpu:6.2f} CPU s)  '
        f'x{base / wall:.2f} vs local  weights differ by {diff:.2g}',
        flush=True,
      )
  os.makedirs(os.path.dirname(_CSV.value) or '.', exist_ok=True)
  with open(_CSV.value, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(f'wrote {_CSV.value}')


if __name__ == '__main__':
  sys.exit(app.run(main))
