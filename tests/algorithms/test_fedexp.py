"""FedExP (Jhunjhunwala et al. 2023) against the independent float64 NumPy reference.

tests/reference/fedexp_numpy.py was written from the paper's Algorithm 1 and checked against a
line-by-line transcription of the authors' main.py, without reading `tff_adaptive`. Here the
step size eta_g (both faces of the aggregation: the fold and the TFF factory) is held to it in
each option on updates that tell the options apart; then whole runs on engine "inprocess" (and
"tff") on a heterogeneous linear regression (Keras MSE, full-batch local steps so each client's
Delta_i is deterministic), several rounds: the trained iterates, eta_g of every round and the
released model (x_t + x_{t+1}) / 2, for FedExP, FedProx-ExP and SCAFFOLD-ExP; the reductions
(eta_g = 1 with one client; epsilon -> infinity is FedAvg), and the refusals.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import fedexp_numpy as ref
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive.algorithms import fedexp
from tff_adaptive.core import seeds
from tff_adaptive.engines import base as engine_base

P = 3
BATCH = 1000  # > every client's n: full-batch local steps
RTOL = 2e-4  # float32 vs float64 over several rounds
SIZES = (12, 30, 7, 21)
LR = 0.02
EPOCHS = 4  # local steps per round (one full batch per epoch)


def _model_fn():
  keras = tf.keras.Sequential(
    [
      tf.keras.layers.Input([P]),
      tf.keras.layers.Dense(1, kernel_initializer='zeros', bias_initializer='zeros'),
    ]
  )
  return tff.learning.models.from_keras_model(
    keras,
    loss=tf.keras.losses.MeanSquaredError(),
    input_spec=collections.OrderedDict(
      x=tf.TensorSpec([None, P], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
    ),
  )


def _clients(seed=0):
  """Heterogeneous linear-regression clients: different sizes, scales and optima."""
  rng = np.random.default_rng(seed)
  clients = []
  for k, n in enumerate(SIZES):
    x = rng.normal(size=(n, P)) * np.linspace(0.5, 1.5, P) * (1 + 0.5 * k)
    y = x @ rng.normal(size=P) + k - 1.0 + 0.2 * rng.normal(size=n)
    clients.append(collections.OrderedDict(x=x.astype(np.float32), y=y[:, None].astype(np.float32)))
  return clients


def _grad_fn(client):
  """The gradient of Keras' MSE, mean((x W + b - y)^2), at [W (P, 1), b (1,)] (float64)."""
  x, y = client['x'].astype(np.float64), client['y'].astype(np.float64)

  def grad(w, k):
    del k  # full batch: every step sees all of the client's examples
    r = x @ w[0] + w[1] - y
    return [2.0 / len(y) * x.T @ r, 2.0 / len(y) * r.sum(0)]

  return grad


X0 = [np.array([[0.3], [-0.2], [0.1]]), np.array([0.05])]


def _initial_weights():
  return tff.learning.models.ModelWeights([w.astype(np.float32) for w in X0], [])


def _client_config(weighting='example'):
  return algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig('sgd', LR),
    epochs=EPOCHS,
    batch_size=BATCH,
    weighting=weighting,
  )


def _run(algorithm, clients, rounds, engine='inprocess'):
  """(the trained x_1..x_R, the released models after rounds 1..R, each round's metrics)."""
  eng = engines.build_engine(engine, algorithm, engines.EngineOptions(clients_per_round=4))
  state = eng.initialize(_initial_weights())
  trained, released, rows = [], [], []
  client_states = [None] * len(clients)  # SCAFFOLD-ExP's c_i, as the training loop keeps them
  for r in range(1, rounds + 1):
    round_clients = [
      engine_base.RoundClient(f'c{k}', c, seeds.client_seed(1, r, k, 100), None)
      for k, c in enumerate(clients)
    ]
    round_clients = [c._replace(state=s) for c, s in zip(round_clients, client_states)]
    result = eng.next(state, round_clients)
    state = result.state
    client_states = result.client_states or client_states
    trained.append(_trained(eng, state))
    released.append(_flat(eng.model_weights(state).trainable))
    rows.append(result.metrics)
  return trained, released, rows


def _trained(eng, state):
  """x_{t+1} itself (the state's model, not the released one)."""
  if isinstance(eng, engines.TffEngine):
    return _flat(state.global_model_weights.trainable)
  return _flat(state['model'].trainable)


def _flat(weights):
  return np.concatenate([np.asarray(w, np.float64).reshape(-1) for w in weights])


def _assert_close(ours, expected, rtol=RTOL, what='round'):
  assert len(ours) == len(expected)
  for r, (a, b) in enumerate(zip(ours, expected), start=1):
    b = _flat(b) if isinstance(b, list) else b
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max(), err_msg=f'{what} {r}')


def _build(hparams, weighting='example', server=None):
  return algorithms.build_fedexp(
    _model_fn,
    _client_config(weighting),
    server or optimizers.build_fedavg_sgd(1.0),
    num_clients=len(SIZES),
    fedexp=hparams,
  )


# -- eta_g, both faces of the aggregation. ---------------------------------------------------

OPTIONS = {
  'code': algorithms.FedExPHParams(epsilon=0.05),
  'paper-eps': algorithms.FedExPHParams(epsilon=0.05, epsilon_scaling='paper'),
  'no-clip': algorithms.FedExPHParams(epsilon=0.05, clip_at_one=False),
}


def _updates(rng, spread):
  """Five clients' updates around a shared direction: `spread` 0.1 agree (eta_g < 1 before the
  clip), 3 point apart (eta_g > 1)."""
  shared = [rng.normal(size=3), rng.normal(size=2)]
  return [[s + spread * rng.normal(size=s.shape) for s in shared] for _ in range(5)]


def _value_type():
  update = tff.StructWithPythonType(
    [tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [2])], tuple
  )
  return tff.StructWithPythonType(
    [('update', update), ('sq_norm', np.float32)], collections.OrderedDict
  )


@pytest.mark.parametrize('spread', [0.1, 3.0], ids=['agreeing', 'spread'])
@pytest.mark.parametrize('option', list(OPTIONS))
def test_step_size_of_both_faces_matches_the_reference(option, spread):
  hparams = OPTIONS[option]
  rng = np.random.default_rng(int(spread * 10))
  deltas = _updates(rng, spread)
  weights = [3.0, 9.0, 1.0, 14.0, 6.0]
  eta, delta_bar, _ = ref.fedexp_step_size(
    deltas,
    hparams.epsilon * hparams.epsilon_decay,
    weights,
    eps_times_clients=hparams.epsilon_scaling == 'per_client',
    clip_at_one=hparams.clip_at_one,
  )
  values = [
    collections.OrderedDict(
      update=tuple(np.float32(d) for d in delta), sq_norm=np.float32(ref.sq_norm(delta))
    )
    for delta in deltas
  ]
  aggregation = fedexp.extrapolated_mean(hparams)
  specs = tf.nest.map_structure(lambda v: tf.TensorSpec(np.shape(v), tf.float32), values[0])
  state = aggregation.initialize(specs)
  acc = aggregation.zero(specs, state)
  for v, w in zip(values, weights):
    acc = aggregation.accumulate(acc, tf.nest.map_structure(tf.constant, v), w)
  folded, _, measurements = aggregation.report(acc, state)
  process = fedexp.ExtrapolatedMeanFactory(hparams).create(
    _value_type(), tff.TensorType(np.float32)
  )
  out = process.next(process.initialize(), values, [np.float32(w) for w in weights])
  for result, eta_g in (
    (folded, measurements['fedexp']['eta_g']),
    (out.result, out.measurements['fedexp']['eta_g']),
  ):
    assert float(eta_g) == pytest.approx(eta, rel=1e-5)
    np.testing.assert_allclose(_flat(result), eta * _flat(delta_bar), rtol=1e-5)
  if spread < 1 and hparams.clip_at_one:
    assert eta == 1.0
  if spread < 1 and not hparams.clip_at_one:
    assert eta < 0.9  # the clip matters on these updates
  if spread > 1:
    assert eta > 1.5


def test_the_epsilon_options_are_told_apart():
  rng = np.random.default_rng(30)
  deltas = _updates(rng, 3.0)
  etas = {
    scaling: ref.fedexp_step_size(deltas, 1.0, eps_times_clients=scaling)[0]
    for scaling in (False, True)
  }
  assert etas[False] > 1.05 * etas[True]


def test_a_client_without_data_does_not_count_in_m():
  """M counts the clients with w_i > 0: a zero-weight client changes neither the means nor eps'."""
  rng = np.random.default_rng(4)
  deltas = _updates(rng, 3.0)
  hparams = algorithms.FedExPHParams(epsilon=0.5)
  values = [
    collections.OrderedDict(
      update=tuple(np.float32(d) for d in x), sq_norm=np.float32(ref.sq_norm(x))
    )
    for x in deltas
  ]
  process = fedexp.ExtrapolatedMeanFactory(hparams).create(
    _value_type(), tff.TensorType(np.float32)
  )
  with_empty = process.next(process.initialize(), values, [2.0, 1.0, 3.0, 1.0, 0.0])
  without = process.next(process.initialize(), values[:4], [2.0, 1.0, 3.0, 1.0])
  eta, _, _ = ref.fedexp_step_size(deltas[:4], 0.5, [2, 1, 3, 1], eps_times_clients=True)
  assert float(with_empty.measurements['fedexp']['eta_g']) == pytest.approx(eta, rel=1e-5)
  assert float(without.measurements['fedexp']['eta_g']) == pytest.approx(eta, rel=1e-5)


# -- Whole runs. -----------------------------------------------------------------------------

ROUNDS = 5


def _reference(hparams, weighting='example', local='fedavg', rounds=ROUNDS):
  clients = _clients()
  grads = [_grad_fn(c) for c in clients]
  weights = [float(n) for n in SIZES] if weighting == 'example' else None
  eps = lambda t: hparams.epsilon * hparams.epsilon_decay ** (t + 1)
  scaling = hparams.epsilon_scaling == 'per_client'
  if local == 'scaffold':
    return ref.run_scaffold_exp(
      X0, grads, rounds, EPOCHS, LR, eps, weights=weights, eps_times_clients=scaling
    )
  if local == 'fedprox':
    updates = [
      lambda x, t, g=g: ref.fedprox_delta(x, g, EPOCHS, LR, hparams.prox_mu) for g in grads
    ]
  else:
    updates = [lambda x, t, g=g: ref.local_sgd_delta(x, g, EPOCHS, LR) for g in grads]
  return ref.run_fedexp(X0, updates, rounds, eps, weights=weights, eps_times_clients=scaling)


RUNS = {
  'code': (algorithms.FedExPHParams(epsilon=1e-3), 'example'),
  'paper': (algorithms.FedExPHParams(epsilon=1e-2, epsilon_scaling='paper'), 'uniform'),
  'authors-decay': (algorithms.FedExPHParams(epsilon=0.2, epsilon_decay=0.5), 'example'),
  'fedprox-exp': (algorithms.FedExPHParams(local='fedprox', prox_mu=0.5), 'example'),
  'scaffold-exp': (algorithms.FedExPHParams(local='scaffold'), 'example'),
}


@pytest.mark.parametrize('run', list(RUNS))
def test_rounds_match_the_reference(run):
  hparams, weighting = RUNS[run]
  expected = _reference(hparams, weighting, hparams.local)
  trained, released, rows = _run(_build(hparams, weighting), _clients(), ROUNDS)
  _assert_close(trained, expected['x'][1:])
  _assert_close(released, expected['x_eval'], what='released model after round')
  etas = [float(r['fedexp_eta_g']) for r in rows]
  np.testing.assert_allclose(etas, expected['eta_g'], rtol=1e-4)
  assert max(etas) > 1.2  # it extrapolated
  fedavg = ref.run_fedexp(
    X0,
    [lambda x, t, g=_grad_fn(c): ref.local_sgd_delta(x, g, EPOCHS, LR) for c in _clients()],
    ROUNDS,
    0.0,
    extrapolate=False,
  )
  assert np.abs(_flat(expected['x'][-1]) - _flat(fedavg['x'][-1])).max() > 1e-2  # not FedAvg


def test_the_tff_engine_gives_the_same_rounds():
  """The LearningProcess (template route: client work, `ExtrapolatedMeanFactory`, TFF's
  finalizer on the server optimizer that keeps x_t) and its `get_model_weights` (the released
  model); SCAFFOLD-ExP takes the hand-written route (client states)."""
  for run in ('code', 'scaffold-exp'):
    hparams, weighting = RUNS[run]
    expected = _reference(hparams, weighting, hparams.local, rounds=3)
    trained, released, rows = _run(_build(hparams, weighting), _clients(), 3, engine='tff')
    _assert_close(trained, expected['x'][1:])
    _assert_close(released, expected['x_eval'], what='released model after round')
    np.testing.assert_allclose(
      [float(r['fedexp_eta_g']) for r in rows], expected['eta_g'], rtol=1e-4
    )


def test_eval_average_none_releases_the_trained_model():
  hparams = algorithms.FedExPHParams(eval_average='none')
  trained, released, _ = _run(_build(hparams), _clients(), 3)
  for a, b in zip(trained, released):
    np.testing.assert_array_equal(a, b)


def test_one_client_is_fedavg():
  """M = 1: eta_g = max(1, ||Delta||^2 / (2 (||Delta||^2 + eps))) = 1, FedAvg's step."""
  hparams = algorithms.FedExPHParams(eval_average='none')
  clients = _clients()[1:2]
  ours, _, rows = _run(_build(hparams), clients, 3)
  fedavg, _, _ = _run(
    algorithms.build_fedopt(_model_fn, _client_config(), optimizers.build_fedavg_sgd(1.0)),
    clients,
    3,
  )
  assert [float(r['fedexp_eta_g']) for r in rows] == [1.0] * 3
  _assert_close(ours, fedavg, rtol=1e-6)


def test_a_huge_epsilon_is_fedavg():
  """eps' >> ||Delta||^2: eta_g = max(1, ~0) = 1 every round, FedAvg bit for bit."""
  hparams = algorithms.FedExPHParams(epsilon=1e12, eval_average='none')
  ours, _, _ = _run(_build(hparams), _clients(), 3)
  fedavg, _, _ = _run(
    algorithms.build_fedopt(_model_fn, _client_config(), optimizers.build_fedavg_sgd(1.0)),
    _clients(),
    3,
  )
  for a, b in zip(ours, fedavg):
    np.testing.assert_array_equal(a, b)


def test_dp_and_compression_are_refused_with_the_reason():
  dp = aggregators.dp_mean('gaussian_fixed', 1.0, 4, 0.1)
  with pytest.raises(ValueError, match=r"build_fedexp: algorithm 'fedexp' cannot run under DP: "):
    algorithms.build_fedexp(
      _model_fn, _client_config(), optimizers.build_fedavg_sgd(1.0), aggregation=dp
    )


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (dict(epsilon=-1.0), 'FedExP epsilon=-1.0 is invalid'),
    (dict(epsilon_decay=0.0), r'FedExP epsilon_decay must be in \(0, 1\], got 0.0'),
    (dict(local='fednova'), "unknown FedExP local 'fednova'; valid choices: fedavg, fedprox"),
    (dict(epsilon_scaling='x'), "unknown FedExP epsilon_scaling 'x'"),
  ],
)
def test_bad_hyperparameters(kwargs, message):
  with pytest.raises(ValueError, match=message):
    algorithms.FedExPHParams(**kwargs)
