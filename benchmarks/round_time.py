"""Seconds per round of our two engines, TFF's built-in FedAvg and a tight floor, in one run.

  python -m benchmarks.round_time [--rounds=30] [--models=fmnist_cnn,emnist_cnn,mlp]
  bazel run //benchmarks:round_time -- --rounds=10 --models=mlp

Infrastructure script (no paper of its own). Setup: 10 clients x 200 synthetic examples, batch
20, 1 local epoch of SGD (client lr 0.01), published FedAdam server (Reddi et al. 2021,
Algorithm 2 with bias correction; lr 0.01, tau 1e-3). Implementations of one round:

* ours: `algorithms.build_fedopt` on engine "tff" (`engines.TffEngine`, a LearningProcess on
  TFF's worker), fed as the training loop feeds it;
* inprocess: the same algorithm on engine "inprocess" (`engines.InProcessEngine`, one compiled
  TF function per round in this process);
* inprocess_xla: the same with every local step compiled by XLA (`jit_compile=True`);
* vectorised: the same algorithm on engine "vectorised" (`engines.vectorised`: the round's
  clients trained side by side, one batched computation per local step);
* tff: `tff.learning.algorithms.build_weighted_fed_avg` with `build_sgdm` clients and a
  `build_adam` server, each client fed the usual way, `from_tensor_slices(...).batch(20)`;
* floor: the same local steps in one `tf.function` over in-memory tensors (all clients' SGD,
  the example-weighted mean of the deltas, the Adam step of `optimizers.fedopt_math`), no
  TFF runtime, no shuffling, no metrics.

The TFF processes run on one `runtime.local_execution()` worker. A timed round includes
building the clients' inputs from NumPy (as a training loop does) and returning the new state.
After `--warmup` rounds each, the implementations are timed in round-robin blocks of `--block`
rounds (the order rotating every block), so machine noise affects them alike; the table reports
the median, and the CSV also the quartiles and the CPU seconds per round (this process plus the
TFF worker, from /proc).

Before timing, `--check` verifies on the dropout-free MLP that they compute the same round: from
the same initial weights, ours vs inprocess (same seeds), ours vs TFF's with TFF's clients fed
the examples in the order our client work visits them (its seeded permutation), and the floor
vs TFF's in TFF's (unshuffled) order.

Models: the CNN of `tasks.models.build_fmnist_cnn` (21,840 parameters), the EMNIST-CR CNN of
Reddi et al. 2021 Table 4 (`build_emnist_cr_cnn`, 1,206,590), and a 784-200-200-62 MLP
(209,662). Inputs are synthetic (uniform pixels, uniform labels): the cost of a round does
not depend on the values.
"""

import collections
import csv
import dataclasses
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from benchmarks import fused_floor
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import fedopt_math
from tff_adaptive.tasks import models

_ROUNDS = flags.DEFINE_integer('rounds', 30, 'Timed rounds per implementation (>= 1).')
_WARMUP = flags.DEFINE_integer('warmup', 3, 'Untimed rounds per implementation first.')
_BLOCK = flags.DEFINE_integer('block', 5, 'Rounds per round-robin block (>= 1).')
_MODELS = flags.DEFINE_list('models', ['fmnist_cnn', 'emnist_cnn', 'mlp'], 'Models to time.')
_OUTPUT = flags.DEFINE_string('output', 'results/benchmarks/round_time.csv', 'CSV path.')
_CLIENTS = flags.DEFINE_integer('clients', 10, 'Clients per round.')
_EXAMPLES = flags.DEFINE_integer('examples', 200, 'Examples per client.')
_BATCH = flags.DEFINE_integer('batch_size', 20, 'Client batch size.')
_CLIENT_LR = flags.DEFINE_float('client_lr', 0.01, 'Client SGD learning rate.')
_SERVER_LR = flags.DEFINE_float('server_lr', 0.01, 'Server Adam learning rate.')
_TAU = flags.DEFINE_float('tau', 1e-3, 'Server Adam epsilon (tau).')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of data, initial weights and client shuffling.')
_CHECK = flags.DEFINE_bool('check', True, 'Check first that the three compute the same round.')
_MAX_CALLS = flags.DEFINE_integer(
  'max_concurrent_computation_calls', None, 'Worker flag; unset = unlimited (TFF default).'
)
_INTRA = flags.DEFINE_integer('worker_intra_op_threads', None, 'Worker TF intra-op threads.')
_INTER = flags.DEFINE_integer('worker_inter_op_threads', None, 'Worker TF inter-op threads.')

IMPLEMENTATIONS = ('ours', 'inprocess', 'inprocess_xla', 'vectorised', 'fused', 'tff', 'floor')
# Dense models only (`fused_floor.dense_layers`): the round's steps in one jax.jit.
JAX_FLOOR = 'jax_floor'

_EPOCHS = 1
_BETA_1, _BETA_2 = 0.9, 0.999


def build_mlp(seed=None) -> tf.keras.Model:
  """784-200-200-62 ReLU MLP, logits out (209,662 parameters)."""
  init = lambda k: (
    {} if seed is None else {'kernel_initializer': tf.keras.initializers.GlorotUniform(seed + k)}
  )
  return tf.keras.Sequential(
    [
      tf.keras.Input(shape=(784,), dtype=tf.float32),
      tf.keras.layers.Dense(200, activation='relu', **init(0)),
      tf.keras.layers.Dense(200, activation='relu', **init(1)),
      tf.keras.layers.Dense(62, **init(2)),
    ],
    name='mlp',
  )


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  keras_fn: object  # seed -> tf.keras.Model
  input_shape: tuple
  num_classes: int


MODELS = {
  'fmnist_cnn': ModelSpec(lambda seed: models.build_fmnist_cnn(10, seed=seed), (28, 28, 1), 10),
  'emnist_cnn': ModelSpec(models.build_emnist_cr_cnn, (28, 28, 1), 62),
  'mlp': ModelSpec(build_mlp, (784,), 62),
}


def make_clients(spec: ModelSpec, num_clients: int, n: int, seed: int) -> list:
  rng = np.random.default_rng(seed)
  return [
    collections.OrderedDict(
      x=rng.uniform(size=(n,) + spec.input_shape).astype(np.float32),
      y=rng.integers(0, spec.num_classes, size=n).astype(np.int32),
    )
    for _ in range(num_clients)
  ]


def make_model_fn(spec: ModelSpec, seed: int):
  input_spec = collections.OrderedDict(
    x=tf.TensorSpec((None,) + spec.input_shape, tf.float32), y=tf.TensorSpec((None,), tf.int32)
  )

  def model_fn():
    return tff.learning.models.from_keras_model(
      spec.keras_fn(seed),
      input_spec=input_spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    )

  return model_fn


def client_seed(round_num: int, client: int, num_clients: int) -> np.ndarray:
  return seeds.client_seed(_SEED.value, round_num, client, num_clients)


class Ours:
  """`algorithms.build_fedopt` on one of our engines, fed as the training loop feeds it."""

  def __init__(
    self, model_fn, clients, initial_weights, engine='tff', jit_compile=False, fused_loop='off'
  ):
    self.clients = clients
    algorithm = algorithms.build_fedopt(
      model_fn,
      algorithms.ClientTrainingConfig(
        optimizers.ClientOptimizerConfig('sgd', _CLIENT_LR.value),
        batch_size=_BATCH.value,
        epochs=_EPOCHS,
      ),
      optimizers.build_fedadam(_SERVER_LR.value, tau=_TAU.value, beta_1=_BETA_1, beta_2=_BETA_2),
    )
    self.engine = engines.build_engine(
      engine, algorithm, engines.EngineOptions(jit_compile=jit_compile, fused_loop=fused_loop)
    )
    self.state = self.engine.initialize(initial_weights)
    self.round_num = 0

  def run_round(self):
    self.round_num += 1
    clients = [
      engines.RoundClient(str(i), c, client_seed(self.round_num, i, len(self.clients)))
      for i, c in enumerate(self.clients)
    ]
    result = self.engine.next(self.state, clients)
    self.state = result.state
    return result

  def weights(self):
    return self.engine.model_weights(self.state)


class TffFedAvg:
  """tff.learning.algorithms.build_weighted_fed_avg, clients fed as batched datasets."""

  def __init__(self, model_fn, clients, initial_weights):
    self.clients = clients
    self.process = tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(_CLIENT_LR.value),
      server_optimizer_fn=tff.learning.optimizers.build_adam(
        _SERVER_LR.value, beta_1=_BETA_1, beta_2=_BETA_2, epsilon=_TAU.value
      ),
    )
    self.state = self.process.set_model_weights(self.process.initialize(), initial_weights)

  def data(self, clients=None):
    return [
      tf.data.Dataset.from_tensor_slices(c).batch(_BATCH.value) for c in (clients or self.clients)
    ]

  def run_round(self, clients=None):
    output = self.process.next(self.state, self.data(clients))
    self.state = output.state
    return output

  def weights(self):
    return self.process.get_model_weights(self.state)


class Floor:
  """All clients' local SGD, the weighted mean delta and Adam, in one tf.function."""

  def __init__(self, keras_fn, seed, clients, initial_weights):
    self.model = keras_fn(seed)
    self.loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    trainable = self.model.trainable_variables
    self.server = [tf.Variable(w) for w in initial_weights.trainable]
    self.m = [tf.Variable(tf.zeros_like(v)) for v in trainable]
    self.v = [tf.Variable(tf.zeros_like(v)) for v in trainable]
    self.acc = [tf.Variable(tf.zeros_like(v)) for v in trainable]
    self.step = tf.Variable(0.0)
    self.x = tf.constant(np.stack([c['x'] for c in clients]))
    self.y = tf.constant(np.stack([c['y'] for c in clients]))
    self.run_round = tf.function(self._round)

  def _round(self):
    trainable = self.model.trainable_variables
    num_clients, n = self.x.shape[0], self.x.shape[1]
    batch, lr = _BATCH.value, _CLIENT_LR.value
    steps = (n + batch - 1) // batch
    for a in self.acc:
      a.assign(tf.zeros_like(a))
    for c in tf.range(num_clients):
      for v, s in zip(trainable, self.server):
        v.assign(s)
      for b in tf.range(steps * _EPOCHS):
        start = (b % steps) * batch
        xb = self.x[c, start : start + batch]
        yb = self.y[c, start : start + batch]
        with tf.GradientTape() as tape:
          loss = self.loss(yb, self.model(xb, training=True))
        for v, g in zip(trainable, tape.gradient(loss, trainable)):
          v.assign_sub(lr * g)
      for a, v, s in zip(self.acc, trainable, self.server):
        a.assign_add(float(n) * (s - v))
    self.step.assign_add(1.0)
    eta = fedopt_math.bias_corrected_learning_rate(_SERVER_LR.value, _BETA_1, _BETA_2, self.step)
    for s, m, v, a in zip(self.server, self.m, self.v, self.acc):
      g = a / float(n * num_clients)
      m.assign(fedopt_math.first_moment(m, g, _BETA_1))
      v.assign(fedopt_math.adam_second_moment(v, g, _BETA_2))
      s.assign(fedopt_math.adaptive_step(s, m, v, eta, _TAU.value))
    return self.step

  def weights(self):
    return [s.numpy() for s in self.server]


class JaxFloorRunner:
  """`fused_floor.JaxFloor` on the clients in our engines' minibatch order, Adam server."""

  def __init__(self, keras_fn, seed, clients, initial_weights, engine):
    self.x = np.concatenate([c['x'] for c in clients])
    self.y = np.concatenate([c['y'] for c in clients])
    self.clients, self.engine = clients, engine
    self.weights_ = [np.asarray(w) for w in initial_weights.trainable]
    self.m = [np.zeros_like(w) for w in self.weights_]
    self.v = [np.zeros_like(w) for w in self.weights_]
    self.step = 0
    self.floor = fused_floor.JaxFloor(
      fused_floor.dense_layers(keras_fn(seed)), _CLIENT_LR.value, server_step=self._adam
    )
    self.tables = {}
    self.round_num = 0

  def _adam(self, x_t, g):
    self.step += 1
    eta = fedopt_math.bias_corrected_learning_rate(_SERVER_LR.value, _BETA_1, _BETA_2, self.step)
    self.m = [np.asarray(fedopt_math.first_moment(m, u, _BETA_1)) for m, u in zip(self.m, g)]
    self.v = [np.asarray(fedopt_math.adam_second_moment(v, u, _BETA_2)) for v, u in zip(self.v, g)]
    return [
      np.asarray(fedopt_math.adaptive_step(w, m, v, eta, _TAU.value), np.float32)
      for w, m, v in zip(x_t, self.m, self.v)
    ]

  def table(self, round_num):
    """The round's step table (built outside the timed loop: `prepare`)."""
    if round_num not in self.tables:
      clients = [
        engines.RoundClient(str(i), c, client_seed(round_num, i, len(self.clients)))
        for i, c in enumerate(self.clients)
      ]
      features, splits, seeds_ = self.engine.round_inputs(clients)[:3]
      self.tables[round_num] = fused_floor.step_table(self.engine, features, splits, seeds_)
    return self.tables[round_num]

  def prepare(self, rounds):
    for round_num in range(1, rounds + 1):
      self.table(round_num)

  def run_round(self):
    self.round_num += 1
    self.weights_ = self.floor(self.weights_, self.x, self.y, self.table(self.round_num))
    return self.weights_

  def weights(self):
    return self.weights_


def _max_abs_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)))) for u, v in zip(a, b))


def check_equivalence() -> list[str]:
  """One round of each from the same weights on the MLP, batch orders aligned; returns lines."""
  spec = MODELS['mlp']
  seed = _SEED.value
  clients = make_clients(spec, _CLIENTS.value, _EXAMPLES.value, seed)
  model_fn = make_model_fn(spec, seed)
  initial = tff.learning.models.ModelWeights.from_model(spec.keras_fn(seed))
  ours = Ours(model_fn, clients, initial)
  out_ours = ours.run_round()
  inprocess = Ours(model_fn, clients, initial, engine='inprocess')
  out_inprocess = inprocess.run_round()
  xla = Ours(model_fn, clients, initial, engine='inprocess', jit_compile=True)
  xla.run_round()
  vectorised = Ours(model_fn, clients, initial, engine='vectorised')
  out_vectorised = vectorised.run_round()
  fused = Ours(model_fn, clients, initial, engine='inprocess', fused_loop='on')
  out_fused = fused.run_round()
  jax_floor = JaxFloorRunner(spec.keras_fn, seed, clients, initial, fused.engine)
  jax_floor.run_round()
  # TFF's client work does not shuffle: give it each client's examples in the order of our
  # epoch-1 permutation (a pure function of the client seed of round 1).
  permuted = []
  for i, c in enumerate(clients):
    perm = seeds.epoch_permutations(
      tf.constant(_EXAMPLES.value), 1, tf.constant(client_seed(1, i, len(clients)))
    )[0]
    permuted.append(collections.OrderedDict((k, v[perm.numpy()]) for k, v in c.items()))
  tff_aligned = TffFedAvg(model_fn, clients, initial)
  out_tff_aligned = tff_aligned.run_round(permuted)
  tff_plain = TffFedAvg(model_fn, clients, initial)
  tff_plain.run_round()
  floor = Floor(spec.keras_fn, seed, clients, initial)
  floor.run_round()

  w0 = initial.trainable
  w_ours = ours.weights().trainable
  w_inprocess = inprocess.weights().trainable
  w_xla = xla.weights().trainable
  w_tff_aligned = tff_aligned.weights().trainable
  w_tff_plain = tff_plain.weights().trainable
  w_floor = floor.weights()
  moved = _max_abs_diff(w_ours, w0)
  tff_loss = float(out_tff_aligned.metrics['client_work']['train']['loss'])
  diffs = {
    'ours vs inprocess, same seeds:    ': _max_abs_diff(w_ours, w_inprocess),
    'ours vs inprocess + XLA steps:    ': _max_abs_diff(w_ours, w_xla),
    'ours vs vectorised, same seeds:   ': _max_abs_diff(w_ours, vectorised.weights().trainable),
    'ours vs fused loop, same seeds:   ': _max_abs_diff(w_ours, fused.weights().trainable),
    'ours vs JAX floor, same order:    ': _max_abs_diff(w_ours, jax_floor.weights()),
    'ours vs tff, same batch order:    ': _max_abs_diff(w_ours, w_tff_aligned),
    'ours vs tff, tff unshuffled:      ': _max_abs_diff(w_ours, w_tff_plain),
    'floor vs tff, both unshuffled:    ': _max_abs_diff(w_floor, w_tff_plain),
  }
  lines = [f'check (mlp, 1 round, Adam step size {_SERVER_LR.value}): max |w1 - w0| = {moved:.3g}']
  lines += [f'  {name} max |dw| = {d:.3g}' for name, d in diffs.items()]
  lines.append(
    f'  train loss: ours {out_ours.metrics["train_loss"]:.6f}, inprocess '
    f'{out_inprocess.metrics["train_loss"]:.6f}, tff same order {tff_loss:.6f}'
  )
  ok = (
    diffs['ours vs inprocess, same seeds:    '] < 1e-3 * moved
    and diffs['ours vs inprocess + XLA steps:    '] < 1e-2 * moved
    and diffs['ours vs vectorised, same seeds:   '] < 1e-3 * moved
    and diffs['ours vs fused loop, same seeds:   '] < 1e-3 * moved
    and diffs['ours vs JAX floor, same order:    '] < 1e-3 * moved
    and diffs['ours vs tff, same batch order:    '] < 1e-2 * moved
    and diffs['floor vs tff, both unshuffled:    '] < 1e-2 * moved
    and abs(out_ours.metrics['train_loss'] - tff_loss) < 1e-4
    and abs(out_ours.metrics['train_loss'] - out_inprocess.metrics['train_loss']) < 1e-6
    and abs(out_ours.metrics['train_loss'] - out_vectorised.metrics['train_loss']) < 1e-5
    and abs(out_ours.metrics['train_loss'] - out_fused.metrics['train_loss']) < 1e-5
  )
  lines.append('  -> ' + ('they compute the same round' if ok else 'MISMATCH'))
  if not ok:
    raise AssertionError('\n'.join(lines))
  return lines


def _worker_cpu_s(pid: int) -> float:
  with open(f'/proc/{pid}/stat') as f:
    fields = f.read().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _cpu_s(worker_pid: int) -> float:
  t = os.times()
  return t.user + t.system + _worker_cpu_s(worker_pid)


def bench_model(name: str, worker_pid: int) -> collections.OrderedDict:
  """Builds the three for one model, warms them up and times them interleaved."""
  spec = MODELS[name]
  seed = _SEED.value
  clients = make_clients(spec, _CLIENTS.value, _EXAMPLES.value, seed)
  model_fn = make_model_fn(spec, seed)
  initial = tff.learning.models.ModelWeights.from_model(spec.keras_fn(seed))
  num_params = sum(int(np.prod(w.shape)) for w in initial.trainable)

  runners, build_s, first_s = {}, {}, {}
  try:
    fused_floor.dense_layers(spec.keras_fn(seed))
    impls = (*IMPLEMENTATIONS, JAX_FLOOR)
  except ValueError:
    impls = IMPLEMENTATIONS
  for impl in impls:
    started = time.perf_counter()
    if impl == 'ours':
      runners[impl] = Ours(model_fn, clients, initial)
    elif impl == 'inprocess':
      runners[impl] = Ours(model_fn, clients, initial, engine='inprocess')
    elif impl == 'inprocess_xla':
      runners[impl] = Ours(model_fn, clients, initial, engine='inprocess', jit_compile=True)
    elif impl == 'vectorised':
      runners[impl] = Ours(model_fn, clients, initial, engine='vectorised')
    elif impl == 'fused':  # the CNNs' dropout: falls back to the unfused engine, with a warning
      runners[impl] = Ours(model_fn, clients, initial, engine='inprocess', fused_loop='on')
    elif impl == JAX_FLOOR:
      runners[impl] = JaxFloorRunner(spec.keras_fn, seed, clients, initial, runners['fused'].engine)
      runners[impl].prepare(_WARMUP.value + _ROUNDS.value + 1)
    elif impl == 'tff':
      runners[impl] = TffFedAvg(model_fn, clients, initial)
    else:
      runners[impl] = Floor(spec.keras_fn, seed, clients, initial)
    build_s[impl] = time.perf_counter() - started
    started = time.perf_counter()
    runners[impl].run_round()
    first_s[impl] = time.perf_counter() - started
  for _ in range(_WARMUP.value - 1):
    for impl in impls:
      runners[impl].run_round()

  wall = {impl: [] for impl in impls}
  cpu = {impl: [] for impl in impls}
  block, done = 0, 0
  while done < _ROUNDS.value:
    size = min(_BLOCK.value, _ROUNDS.value - done)
    k = block % len(impls)
    order = impls[k:] + impls[:k]
    for impl in order:
      for _ in range(size):
        c0, t0 = _cpu_s(worker_pid), time.perf_counter()
        runners[impl].run_round()
        wall[impl].append(time.perf_counter() - t0)
        cpu[impl].append(_cpu_s(worker_pid) - c0)
    done += size
    block += 1

  row = collections.OrderedDict(model=name, params=num_params)
  med = {impl: float(np.median(wall[impl])) for impl in impls}
  for impl in impls:
    row[f'{impl}_s'] = med[impl]
  row['ours_over_tff'] = med['ours'] / med['tff']
  row['ours_over_floor'] = med['ours'] / med['floor']
  row['inprocess_over_floor'] = med['inprocess'] / med['floor']
  row['inprocess_xla_over_floor'] = med['inprocess_xla'] / med['floor']
  row['vectorised_over_floor'] = med['vectorised'] / med['floor']
  row['vectorised_over_inprocess'] = med['vectorised'] / med['inprocess']
  row['fused_over_floor'] = med['fused'] / med['floor']
  row['fused_over_inprocess'] = med['fused'] / med['inprocess']
  row['fused_engine'] = 'fused' if getattr(runners['fused'].engine, 'fused', None) else 'unfused'
  for impl in ('inprocess', 'vectorised', 'fused', 'floor'):
    row[f'{impl}_over_jax_floor'] = med[impl] / med[JAX_FLOOR] if JAX_FLOOR in med else float('nan')
  for impl in impls:
    q25, q75 = np.percentile(wall[impl], [25, 75])
    row[f'{impl}_q25_s'], row[f'{impl}_q75_s'] = float(q25), float(q75)
    row[f'{impl}_min_s'] = float(np.min(wall[impl]))
    row[f'{impl}_cpu_s'] = float(np.median(cpu[impl]))
  for impl in impls:
    row[f'{impl}_build_s'] = build_s[impl]
    row[f'{impl}_first_round_s'] = first_s[impl]
  row['rounds'] = _ROUNDS.value
  for impl in (*IMPLEMENTATIONS, JAX_FLOOR):  # one CSV shape for every model
    for suffix in ('s', 'q25_s', 'q75_s', 'min_s', 'cpu_s', 'build_s', 'first_round_s'):
      row.setdefault(f'{impl}_{suffix}', float('nan'))
  return row


def _format_tables(rows) -> str:
  lines = [
    'seconds per round (median); ratios to TFF built-in and to the floor',
    f'{"model":<11} {"params":>9} {"ours-tff":>9} {"inproc":>9} {"inp+XLA":>9} {"TFF":>9} '
    f'{"vector":>9} {"floor":>9} {"ours/TFF":>9} {"ours/fl":>8} {"inp/fl":>7} {"XLA/fl":>7} '
    f'{"vec/fl":>7} {"vec/inp":>7}',
  ]
  for r in rows:
    lines.append(
      f'{r["model"]:<11} {r["params"]:>9,} {r["ours_s"]:>9.4f} {r["inprocess_s"]:>9.4f} '
      f'{r["inprocess_xla_s"]:>9.4f} {r["tff_s"]:>9.4f} {r["vectorised_s"]:>9.4f} '
      f'{r["floor_s"]:>9.4f} {r["ours_over_tff"]:>9.2f} {r["ours_over_floor"]:>8.2f} '
      f'{r["inprocess_over_floor"]:>7.2f} {r["inprocess_xla_over_floor"]:>7.2f} '
      f'{r["vectorised_over_floor"]:>7.2f} {r["vectorised_over_inprocess"]:>7.2f}'
    )
  lines.append('')
  lines.append(
    'the fused loop (--fused_loop=on; "unfused" where the model has dropout) and the JAX floor '
    '(Dense models)'
  )
  lines.append(
    f'{"model":<11} {"fused":>9} {"path":>8} {"fus/inp":>8} {"fus/fl":>7} {"JAX fl":>9} '
    f'{"inp/JAX":>8} {"vec/JAX":>8} {"fus/JAX":>8} {"fl/JAX":>8}'
  )
  for r in rows:
    lines.append(
      f'{r["model"]:<11} {r["fused_s"]:>9.4f} {r["fused_engine"]:>8} '
      f'{r["fused_over_inprocess"]:>8.2f} {r["fused_over_floor"]:>7.2f} '
      f'{r["jax_floor_s"]:>9.4f} {r["inprocess_over_jax_floor"]:>8.2f} '
      f'{r["vectorised_over_jax_floor"]:>8.2f} {r["fused_over_jax_floor"]:>8.2f} '
      f'{r["floor_over_jax_floor"]:>8.2f}'
    )
  lines.append('')
  lines.append('noise: interquartile range of s/round; CPU s/round (this process + TFF worker)')
  for r in rows:
    lines.append(
      f'{r["model"]:<11} '
      + '  '.join(
        f'{impl} [{r[f"{impl}_q25_s"]:.4f}, {r[f"{impl}_q75_s"]:.4f}] cpu {r[f"{impl}_cpu_s"]:.3f}'
        for impl in IMPLEMENTATIONS
      )
    )
  lines.append('')
  lines.append('one-off: build s (construct/trace) + first round s (incl. worker compile)')
  for r in rows:
    lines.append(
      f'{r["model"]:<11} '
      + '  '.join(
        f'{impl} {r[f"{impl}_build_s"]:.2f} + {r[f"{impl}_first_round_s"]:.2f}'
        for impl in IMPLEMENTATIONS
      )
    )
  return '\n'.join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  for name in _MODELS.value:
    if name not in MODELS:
      raise app.UsageError(f'--models: unknown model {name!r}; valid: {", ".join(MODELS)}')
  for flag in (_ROUNDS, _BLOCK, _CLIENTS, _EXAMPLES, _BATCH):
    if flag.value < 1:
      raise app.UsageError(f'--{flag.name} must be >= 1, got {flag.value}')
  if _WARMUP.value < 1:
    raise app.UsageError(f'--warmup must be >= 1, got {_WARMUP.value}')
  tf.keras.utils.set_random_seed(_SEED.value)
  print(
    f'{_CLIENTS.value} clients x {_EXAMPLES.value} examples, batch {_BATCH.value}, '
    f'{_EPOCHS} epoch, Adam server; {_WARMUP.value} warm-up + {_ROUNDS.value} timed rounds '
    f'each, blocks of {_BLOCK.value}; {os.cpu_count()} CPUs, load average '
    f'{os.getloadavg()[0]:.1f}',
    flush=True,
  )
  rows = []
  with runtime.local_execution(
    max_concurrent_computation_calls=_MAX_CALLS.value,
    intra_op_threads=_INTRA.value,
    inter_op_threads=_INTER.value,
  ) as execution:
    if _CHECK.value:
      print('\n'.join(check_equivalence()), flush=True)
    for name in _MODELS.value:
      started = time.perf_counter()
      rows.append(bench_model(name, execution.worker_pid))
      print(f'{name}: done in {time.perf_counter() - started:.0f} s', file=sys.stderr, flush=True)
  print(_format_tables(rows))
  print(f'load average at the end: {os.getloadavg()[0]:.1f}')
  # Under `bazel run` the working directory is the runfiles tree.
  output = os.path.join(os.environ.get('BUILD_WORKING_DIRECTORY', os.getcwd()), _OUTPUT.value)
  os.makedirs(os.path.dirname(output), exist_ok=True)
  with open(output, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  print(f'wrote {output}')


if __name__ == '__main__':
  app.run(main)
