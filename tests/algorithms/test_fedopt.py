"""FedOpt end to end against NumPy on both engines: client SGD(M), weighted averaging, servers.

Every end-to-end test runs on the TFF engine (a LearningProcess on TFF's worker) and on the
in-process engine (one compiled round). References: tests/reference/local_sgd_numpy.py (Algorithm 5's client update and weighted
mean) and tests/reference/fedopt_numpy.py (Algorithm 2's server rules), both float64.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import fedopt_numpy as server_ref
from tests.reference import local_sgd_numpy as client_ref
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime
from tff_adaptive.core import local_loop
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import schedules

D, C = 6, 4  # features, classes
SIZES = (7, 13, 23)  # client example counts: none divisible by the batch size
BATCH = 5
SPEC = collections.OrderedDict(
  x=tf.TensorSpec([None, D], tf.float32), y=tf.TensorSpec([None], tf.int32)
)


@pytest.fixture(scope='module', autouse=True)
def tff_context():
  with runtime.local_execution():
    yield


def _model_fn():
  keras_model = tf.keras.Sequential([tf.keras.Input((D,)), tf.keras.layers.Dense(C)])
  return tff.learning.models.from_keras_model(
    keras_model,
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    input_spec=SPEC,
  )


def _clients(seed=0):
  rng = np.random.default_rng(seed)
  return [
    collections.OrderedDict(
      x=rng.normal(size=(n, D)).astype(np.float32), y=rng.integers(0, C, n).astype(np.int32)
    )
    for n in SIZES
  ]


def _initial_weights(seed=1):
  rng = np.random.default_rng(seed)
  return [
    rng.normal(scale=0.3, size=(D, C)).astype(np.float32),
    rng.normal(scale=0.3, size=(C,)).astype(np.float32),
  ]


ENGINES = ('tff', 'inprocess')


def _seed(round_num, index):
  return seeds.client_seed(7, round_num, index, len(SIZES))


def _perms(arrays, round_num, index, epochs):
  return seeds.epoch_permutations(
    tf.constant(len(arrays['y'])), epochs, _seed(round_num, index)
  ).numpy()


def _config(lr, epochs=1, momentum=0.0, schedule=schedules.ScheduleConfig()):
  name = 'sgdm' if momentum else 'sgd'
  return algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig(name, lr, momentum or 0.9),
    epochs=epochs,
    batch_size=BATCH,
    lr_schedule=schedule,
  )


def _reference_round(w, clients, round_num, lr, epochs, momentum):
  """Algorithm 5's clients: returns (averaged pseudo-gradient, mean train loss)."""
  updates, weights, losses = [], [], []
  for i, arrays in enumerate(clients):
    wi, bi, loss = client_ref.local_sgd(
      w[0],
      w[1],
      arrays['x'],
      arrays['y'],
      _perms(arrays, round_num, i, epochs),
      BATCH,
      lr,
      momentum,
    )
    updates.append([w[0] - wi, w[1] - bi])
    weights.append(len(arrays['y']))
    losses.append(loss * epochs * len(arrays['y']))
  return client_ref.weighted_average(updates, weights), sum(losses) / (epochs * sum(SIZES))


def _run(algorithm, engine_name, w0, clients, rounds):
  """Runs `rounds` rounds on the engine; returns [(weights, train_loss)] per round."""
  engine = engines.build_engine(engine_name, algorithm)
  state = engine.initialize(tff.learning.models.ModelWeights(trainable=list(w0), non_trainable=[]))
  history = []
  for r in range(1, rounds + 1):
    data = [engines.RoundClient(str(i), c, _seed(r, i)) for i, c in enumerate(clients)]
    result = engine.next(state, data)
    state = result.state
    history.append(
      ([np.array(a) for a in engine.model_weights(state).trainable], result.metrics['train_loss'])
    )
  return history


def test_epoch_permutations_are_seeded_permutations_that_differ_by_epoch():
  seed = np.array([3, 11], np.int64)
  p = seeds.epoch_permutations(tf.constant(23), 3, seed).numpy()
  assert p.shape == (3, 23)
  for row in p:
    np.testing.assert_array_equal(np.sort(row), np.arange(23))
  assert not np.array_equal(p[0], p[1])
  np.testing.assert_array_equal(p, seeds.epoch_permutations(tf.constant(23), 3, seed))
  other = seeds.epoch_permutations(tf.constant(23), 3, np.array([3, 12], np.int64))
  assert not np.array_equal(p, other.numpy())


@pytest.mark.parametrize('momentum,epochs', [(0.0, 1), (0.0, 2), (0.9, 2)])
def test_client_update_matches_numpy_sgd_and_reports_local_steps(momentum, epochs):
  arrays = _clients()[2]
  w0 = _initial_weights()
  model = _model_fn()
  algorithm = algorithms.build_fedopt(
    _model_fn, _config(0.3, epochs, momentum), optimizers.build_fedavg_sgd()
  )
  out = tf.function(
    lambda: algorithm.client_update(
      model,
      tff.learning.models.ModelWeights(trainable=w0, non_trainable=[]),
      collections.OrderedDict(arrays),
      _seed(1, 2),
      0.3,
      (),
      (),
    )
  )()
  w, b, _ = client_ref.local_sgd(
    w0[0], w0[1], arrays['x'], arrays['y'], _perms(arrays, 1, 2, epochs), BATCH, 0.3, momentum
  )
  np.testing.assert_allclose(out.update[0], w0[0] - w, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(out.update[1], w0[1] - b, rtol=1e-4, atol=1e-6)
  assert float(out.weight) == 23.0
  # K = E * ceil(23 / 5) local steps.
  assert float(out.stats['local_steps']) == epochs * 5
  # The update is not trivially small: the comparison above is meaningful.
  assert np.abs(out.update[0]).max() > 0.05


def test_local_step_hook_sees_every_minibatch_and_can_transform_gradients():
  """The loop calls the step once per minibatch; a gradient transform changes the result."""
  arrays = _clients()[1]  # 13 examples, batch 5: minibatches of 5, 5, 3 per epoch
  model = _model_fn()
  sizes = []

  def init(model):
    return tf.constant(0.0)

  def apply(model, batch, step_seed, count):
    sizes.append(None)  # traced once: the while loop body
    return count + tf.cast(tf.shape(batch['y'])[0], tf.float32)

  seen, steps = tf.function(
    lambda: local_loop.run_local_steps(
      model, arrays, _seed(1, 1), BATCH, 2, local_loop.LocalStep(init, apply)
    )
  )()
  assert float(seen) == 26.0 and int(steps) == 6 and len(sizes) == 1

  def train(transform):
    for v, w in zip(model.trainable_variables, _initial_weights()):
      v.assign(w)
    step = local_loop.optimizer_step(tff.learning.optimizers.build_sgdm(0.1), 0.1, transform)
    tf.function(lambda: local_loop.run_local_steps(model, arrays, _seed(1, 1), BATCH, 1, step))()
    return [v.numpy() for v in model.trainable_variables]

  plain = train(None)
  # Adding 1 to the bias gradient in each of the K = 3 steps moves the bias by about
  # -lr * K = -0.3 (the later gradients change too, so only the order of magnitude is exact).
  shifted = train(lambda g, model: (g[0], g[1] + 1.0))
  assert np.abs(shifted[1] - plain[1]).max() > 0.2


@pytest.mark.parametrize('engine', ENGINES)
def test_fedavg_with_server_lr_1_is_example_weighted_model_averaging(engine):
  clients, w0 = _clients(), _initial_weights()
  algorithm = algorithms.build_fedopt(_model_fn, _config(0.2), optimizers.build_fedavg_sgd(1.0))
  ((weights, loss),) = _run(algorithm, engine, w0, clients, rounds=1)
  trained = []
  for i, arrays in enumerate(clients):
    trained.append(
      client_ref.local_sgd(
        w0[0], w0[1], arrays['x'], arrays['y'], _perms(arrays, 1, i, 1), BATCH, 0.2
      )[:2]
    )
  expected = client_ref.weighted_average([list(t) for t in trained], SIZES)
  np.testing.assert_allclose(weights[0], expected[0], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(weights[1], expected[1], rtol=1e-4, atol=1e-6)
  # Example weighting matters here: the unweighted mean is measurably different.
  unweighted = client_ref.weighted_average([list(t) for t in trained], [1, 1, 1])
  assert np.abs(unweighted[0] - expected[0]).max() > 1e-3
  _, ref_loss = _reference_round(w0, clients, 1, 0.2, 1, 0.0)
  assert loss == pytest.approx(ref_loss, rel=1e-4)


@pytest.mark.parametrize('engine', ENGINES)
@pytest.mark.parametrize(
  'rule,variant', [('adam', 'published'), ('yogi', 'algorithm2'), ('adagrad', 'published')]
)
def test_adaptive_fedopt_matches_numpy_over_five_rounds(rule, variant, engine):
  clients, w0 = _clients(), _initial_weights()
  lr, client_lr, tau = 0.05, 0.2, 0.01
  builders = {
    'adam': optimizers.build_fedadam,
    'yogi': optimizers.build_fedyogi,
    'adagrad': optimizers.build_fedadagrad,
  }
  algorithm = algorithms.build_fedopt(
    _model_fn, _config(client_lr, 2, 0.5), builders[rule](lr, tau=tau, variant=variant)
  )
  history = _run(algorithm, engine, w0, clients, rounds=5)
  w = [a.astype(np.float64) for a in w0]
  grads = []
  for r in range(1, 6):
    # The server trajectory depends on the client results at the current weights, so the
    # reference alternates: clients at w_t, then one server step of the NumPy rule.
    g, loss = _reference_round(w, clients, r, client_lr, 2, 0.5)
    grads.append(g)
    w = server_ref.fedopt(w0, grads, rule, variant, learning_rate=lr, tau=tau)[-1]
    np.testing.assert_allclose(history[r - 1][0][0], w[0], rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(history[r - 1][0][1], w[1], rtol=2e-4, atol=2e-5)
    assert history[r - 1][1] == pytest.approx(loss, rel=1e-4)


@pytest.mark.parametrize('engine', ENGINES)
def test_fedavgm_with_momentum_0_equals_fedavg_and_momentum_changes_it(engine):
  clients, w0 = _clients(), _initial_weights()
  runs = {
    m: _run(
      algorithms.build_fedopt(_model_fn, _config(0.2), optimizers.build_fedavgm(0.7, m)),
      engine,
      w0,
      clients,
      rounds=3,
    )
    for m in (0.0, 0.9)
  }
  fedavg = _run(
    algorithms.build_fedopt(_model_fn, _config(0.2), optimizers.build_fedavg_sgd(0.7)),
    engine,
    w0,
    clients,
    rounds=3,
  )
  for (wa, _), (wb, _) in zip(runs[0.0], fedavg):
    np.testing.assert_allclose(wa[0], wb[0], rtol=1e-6, atol=1e-7)
  assert np.abs(runs[0.9][-1][0][0] - fedavg[-1][0][0]).max() > 1e-3


@pytest.mark.parametrize('engine', ENGINES)
def test_client_and_server_learning_rate_schedules_follow_the_round(engine):
  clients, w0 = _clients(), _initial_weights()
  # Client ExpDecay with period 2: rounds 1..4 run client step counter t = 0..3, so
  # lr_l = 0.2, 0.2, 0.02, 0.02. Server step decay over 4 rounds: 1.0, 1.0, 0.1, 0.01.
  client_cfg = _config(
    0.2, schedule=schedules.ScheduleConfig('exp_decay', decay_rate=0.1, decay_period=2)
  )
  algorithm = algorithms.build_fedopt(
    _model_fn,
    client_cfg,
    optimizers.build_fedavg_sgd(1.0),
    server_lr_schedule=schedules.ScheduleConfig('step_decay', total_rounds=4),
    server_learning_rate=1.0,
  )
  history = _run(algorithm, engine, w0, clients, rounds=4)
  w = [a.astype(np.float64) for a in w0]
  for r, (client_lr, server_lr) in enumerate(
    [(0.2, 1.0), (0.2, 1.0), (0.02, 0.1), (0.02, 0.01)], start=1
  ):
    g, _ = _reference_round(w, clients, r, client_lr, 1, 0.0)
    w = [a - server_lr * b for a, b in zip(w, g)]
    np.testing.assert_allclose(history[r - 1][0][0], w[0], rtol=2e-4, atol=1e-5)
