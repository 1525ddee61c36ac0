"""SCAFFOLD (Option II, Reddi et al. 2021 Algorithm 6) on both engines against NumPy.

References: tests/reference/scaffold_numpy.py (the round, float64) and
tests/reference/quadratic_fixed_points.py (closed-form fixed points of heterogeneous least
squares), both independent of the library.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import quadratic_fixed_points as quad
from tests.reference import scaffold_numpy as ref
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive.core import seeds

ENGINES = ('tff', 'inprocess')
D, C = 5, 3
SIZES = (7, 13, 9, 11, 6, 10)  # six clients; none divisible by the batch size
BATCH = 4


def _softmax_model_fn():
  keras_model = tf.keras.Sequential([tf.keras.Input((D,)), tf.keras.layers.Dense(C)])
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=collections.OrderedDict(
      x=tf.TensorSpec([None, D], tf.float32), y=tf.TensorSpec([None], tf.int32)
    ),
  )


def _softmax_clients():
  rng = np.random.default_rng(3)
  return [
    collections.OrderedDict(
      x=rng.normal(size=(n, D)).astype(np.float32), y=rng.integers(0, C, n).astype(np.int32)
    )
    for n in SIZES
  ]


def _seed(round_num, index):
  return seeds.client_seed(5, round_num, index, len(SIZES))


def _perms(n, round_num, index, epochs):
  return list(seeds.epoch_permutations(tf.constant(n), epochs, _seed(round_num, index)).numpy())


def _client_config(lr, epochs, momentum=0.0, batch=BATCH):
  name = 'sgdm' if momentum else 'sgd'
  return algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig(name, lr, momentum or 0.9), epochs=epochs, batch_size=batch
  )


def _run(algorithm, engine_name, w0, clients, schedule, clients_per_round):
  """Runs the rounds of `schedule` (lists of client indices); returns weights per round.

  Client states live in a dict here (the trainer's store is tested in test_client_states).
  """
  engine = engines.build_engine(
    engine_name, algorithm, engines.EngineOptions(clients_per_round=clients_per_round)
  )
  state = engine.initialize(tff.learning.models.ModelWeights(list(w0), []))
  store, history = {}, []
  for r, sampled in enumerate(schedule, start=1):
    result = engine.next(
      state,
      [engines.RoundClient(str(i), clients[i], _seed(r, i), store.get(i)) for i in sampled],
    )
    state = result.state
    if result.client_states is not None:
      store.update(zip(sampled, result.client_states))
    history.append(([np.asarray(w) for w in engine.model_weights(state).trainable], result))
  return history, store


def _w0():
  rng = np.random.default_rng(1)
  return [
    rng.normal(scale=0.3, size=(D, C)).astype(np.float32),
    rng.normal(scale=0.3, size=(C,)).astype(np.float32),
  ]


@pytest.mark.parametrize('engine', ENGINES)
def test_each_client_sampled_at_most_once_is_fedavg_exactly(engine):
  """c_i := c on first sampling makes every correction c - c_i zero: FedAvg's trajectory."""
  clients, w0 = _softmax_clients(), _w0()
  schedule = [[0, 1], [2, 3], [4, 5]]
  config = _client_config(0.3, epochs=2, momentum=0.5)
  build = lambda name: algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      _softmax_model_fn,
      config,
      optimizers.build_fedavg_sgd(0.8),
      0.8,
      optimizers.ScheduleConfig(),
      num_clients=len(SIZES),
    ),
  )
  scaffold, _ = _run(build('scaffold'), engine, w0, clients, schedule, 2)
  fedavg, _ = _run(build('fedopt'), engine, w0, clients, schedule, 2)
  for (ws, _), (wf, _) in zip(scaffold, fedavg):
    for a, b in zip(ws, wf):
      np.testing.assert_array_equal(a, b)
  assert np.abs(scaffold[-1][0][0] - w0[0]).max() > 0.05  # the model did move


@pytest.mark.parametrize('engine', ENGINES)
@pytest.mark.parametrize('momentum', [0.0, 0.5])
def test_matches_numpy_reference_over_six_rounds_with_repeated_clients(engine, momentum):
  clients, w0 = _softmax_clients(), _w0()
  # Clients come back (with their stored c_i) and new ones arrive (c_i := current c).
  schedule = [[0, 1, 2], [1, 3, 0], [4, 0, 2], [2, 5, 1], [3, 4, 5], [0, 5, 3]]
  client_lr, server_lr, epochs = 0.25, 0.9, 2
  algorithm = algorithms.build_scaffold(
    _softmax_model_fn,
    _client_config(client_lr, epochs, momentum),
    optimizers.build_fedavg_sgd(server_lr),
    num_clients=len(SIZES),
  )
  history, store = _run(algorithm, engine, w0, clients, schedule, 3)

  x = [a.astype(np.float64) for a in w0]
  c = [np.zeros_like(a) for a in x]
  states = {}
  for r, sampled in enumerate(schedule, start=1):
    batch = [(i, clients[i]['x'], clients[i]['y'], _perms(SIZES[i], r, i, epochs)) for i in sampled]
    x, c, states, diag = ref.scaffold_round(
      x, c, states, batch, len(SIZES), client_lr, server_lr, BATCH, momentum=momentum
    )
    weights, result = history[r - 1]
    for got, want in zip(weights, x):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
    assert result.metrics['train_loss'] == pytest.approx(diag['mean_loss'], rel=1e-4)
  for i, c_i in states.items():
    for got, want in zip(store[i], c_i):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
  # The control variates are not trivially zero (the comparison means something).
  assert max(np.abs(a).max() for s in states.values() for a in s) > 0.05


def _least_squares_model_fn():
  keras_model = tf.keras.Sequential(
    [tf.keras.Input((3,)), tf.keras.layers.Dense(1, use_bias=False)]
  )
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.MeanSquaredError(),
    input_spec=collections.OrderedDict(
      x=tf.TensorSpec([None, 3], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
    ),
  )


@pytest.mark.parametrize('engine', ENGINES)
def test_heterogeneous_quadratics_scaffold_reaches_the_optimum_fedavg_a_biased_point(engine):
  """Full participation, K = 20 full-batch GD steps per round (Karimireddy et al. Sec. 3).

  Closed forms (quadratic_fixed_points): FedAvg's fixed point solves
  sum p_i M_i (w - w_i*) = 0 with M_i = I - (I - eta_l A_i)^K, which differs from the global
  optimum (sum p_i A_i)^{-1} sum p_i A_i w_i* when the A_i differ; SCAFFOLD's corrections make
  every client follow the global gradient, so its fixed point is the optimum.
  """
  problem = quad.heterogeneous_clients()
  clients = [collections.OrderedDict(x=x, y=y.reshape(-1, 1)) for x, y in problem]
  lr, steps, rounds = 0.05, 20, 100
  w_opt = quad.global_optimum(problem)
  w_fedavg = quad.fedavg_fixed_point(problem, lr, steps)
  config = _client_config(lr, epochs=steps, batch=max(len(x) for x, _ in problem))
  schedule = [list(range(len(clients)))] * rounds
  w0 = [np.zeros((3, 1), np.float32)]
  inputs = algorithms.AlgorithmInputs(
    _least_squares_model_fn,
    config,
    optimizers.build_fedavg_sgd(1.0),
    1.0,
    optimizers.ScheduleConfig(),
    num_clients=len(clients),
  )
  scaffold, _ = _run(
    algorithms.build_algorithm('scaffold', inputs), engine, w0, clients, schedule, len(clients)
  )
  fedavg, _ = _run(
    algorithms.build_algorithm('fedopt', inputs), engine, w0, clients, schedule, len(clients)
  )
  bias = np.linalg.norm(w_fedavg - w_opt)
  scaffold_error = np.linalg.norm(scaffold[-1][0][0] - w_opt)
  fedavg_error = np.linalg.norm(fedavg[-1][0][0] - w_fedavg)
  assert bias > 1.0, bias  # the problem separates the two fixed points (1.89)
  assert scaffold_error < 1e-4, (scaffold_error, bias)
  assert fedavg_error < 1e-4, (fedavg_error, bias)
  assert np.linalg.norm(fedavg[-1][0][0] - w_opt) > 0.9 * bias


def test_invalid_population_raises_naming_it():
  with pytest.raises(ValueError, match='num_clients'):
    algorithms.build_scaffold(
      _softmax_model_fn, _client_config(0.1, 1), optimizers.build_fedavg_sgd(), num_clients=0
    )


def test_tff_engine_needs_clients_per_round_for_stateful_clients():
  algorithm = algorithms.build_scaffold(
    _softmax_model_fn, _client_config(0.1, 1), optimizers.build_fedavg_sgd(), num_clients=3
  )
  with pytest.raises(ValueError, match='clients_per_round'):
    engines.build_learning_process(algorithm)


def _extra(engine_name, state):
  """SCAFFOLD's server control variate c in either engine's state."""
  extra = state['extra'] if engine_name == 'inprocess' else state.client_work['extra']
  return [np.asarray(c) for c in extra]


@pytest.mark.parametrize('engine', ENGINES)
def test_a_rejected_round_keeps_the_model_and_the_control_variate(engine):
  """A non-finite update rejects the whole server step: x, the optimizer and c stay."""
  clients, w0 = _softmax_clients(), _w0()
  algorithm = algorithms.build_scaffold(
    _softmax_model_fn,
    _client_config(0.2, 1),
    optimizers.build_fedavgm(0.5, 0.9),
    num_clients=len(SIZES),
  )
  eng = engines.build_engine(engine, algorithm, engines.EngineOptions(clients_per_round=2))
  state = eng.initialize(tff.learning.models.ModelWeights(list(w0), []))
  first = eng.next(state, [engines.RoundClient(str(i), clients[i], _seed(1, i)) for i in (0, 1)])
  poisoned = collections.OrderedDict(clients[3])
  poisoned['x'] = np.full_like(poisoned['x'], np.nan)
  rejected = eng.next(
    first.state,
    [
      engines.RoundClient('2', clients[2], _seed(2, 2)),
      engines.RoundClient('3', poisoned, _seed(2, 3)),
    ],
  )
  assert rejected.metrics['train_update_non_finite'] == 1.0
  for a, b in zip(
    eng.model_weights(first.state).trainable, eng.model_weights(rejected.state).trainable
  ):
    np.testing.assert_array_equal(a, b)
  c_before, c_after = _extra(engine, first.state), _extra(engine, rejected.state)
  assert max(np.abs(c).max() for c in c_before) > 0  # c moved in round 1
  for a, b in zip(c_before, c_after):
    np.testing.assert_array_equal(a, b)
  # The next round trains normally from the kept state.
  after = eng.next(
    rejected.state, [engines.RoundClient(str(i), clients[i], _seed(3, i)) for i in (4, 5)]
  )
  assert after.metrics['train_update_non_finite'] == 0.0
  assert all(np.all(np.isfinite(w)) for w in eng.model_weights(after.state).trainable)
