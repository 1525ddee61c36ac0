"""AdaFedAdam, FedNova, q-FedAvg and FedProx against the independent float64 NumPy reference.

tests/reference/fair_numpy.py was written from the papers without reading the implementation.
Every end-to-end check runs the algorithm through engine "inprocess" for several rounds on a
linear regression (Keras MSE) with full participation and full-batch local steps (B >= n_k,
so each local epoch is one step on all of a client's examples and no shuffling is involved),
with clients of different sizes and scales so that the quantities differ from client to
client and from round to round. Tolerances are float32 against float64.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import fair_numpy as ref
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive.core import seeds
from tff_adaptive.engines import base as engine_base

P = 3
BATCH = 1000  # > every client's n: full-batch local steps
RTOL = 2e-4


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


def _clients(seed=0, sizes=(12, 30, 7, 21)):
  """Heterogeneous linear-regression clients: different sizes, scales, optima and noise."""
  rng = np.random.default_rng(seed)
  clients = []
  for k, n in enumerate(sizes):
    x = rng.normal(size=(n, P)) * np.linspace(0.5, 1.5, P) * (1 + 0.5 * k)
    y = x @ rng.normal(size=P) + k - 1.0 + 0.2 * rng.normal(size=n)
    clients.append(collections.OrderedDict(x=x.astype(np.float32), y=y[:, None].astype(np.float32)))
  return clients


THETA0 = np.array([0.3, -0.2, 0.1, 0.05])  # (W, b)


def _initial_weights(theta0=THETA0):
  return tff.learning.models.ModelWeights(
    [theta0[:P, None].astype(np.float32), theta0[P:].astype(np.float32)], []
  )


def _flat(weights):
  return np.concatenate([np.asarray(w, np.float64).reshape(-1) for w in weights])


def _client_config(lr, epochs=1, optimizer='sgd', momentum=0.0, max_epochs=None, weighting=None):
  return algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig(optimizer, lr, momentum=momentum),
    epochs=epochs,
    batch_size=BATCH,
    max_epochs=max_epochs,
    weighting=weighting or algorithms.base.EXAMPLE_WEIGHTING,
  )


def _round_seed(round_num, k):
  return seeds.client_seed(1, round_num, k, 100)


def _run(algorithm, clients, rounds, engine='inprocess', theta0=THETA0):
  """The models after rounds 1..R (flat) and each round's metrics."""
  eng = (
    engines.InProcessEngine(algorithm) if engine == 'inprocess' else engines.TffEngine(algorithm)
  )
  state = eng.initialize(_initial_weights(theta0))
  thetas, rows = [], []
  for r in range(1, rounds + 1):
    round_clients = [
      engine_base.RoundClient(f'c{k}', c, _round_seed(r, k), None) for k, c in enumerate(clients)
    ]
    result = eng.next(state, round_clients)
    state = result.state
    thetas.append(_flat(eng.model_weights(state).trainable))
    rows.append(result.metrics)
  return thetas, rows


def _ref_clients(clients):
  return [(c['x'], c['y'][:, 0]) for c in clients]


def _assert_trajectory(ours, expected, rtol=RTOL):
  assert len(ours) == len(expected)
  for r, (a, b) in enumerate(zip(ours, expected), start=1):
    scale = np.abs(b).max()
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f'round {r}')


# -- AdaFedAdam. ----------------------------------------------------------------------------


def _adafedadam(lr, epochs=2, server=None, max_epochs=None, optimizer='sgd', **hparams):
  return algorithms.build_adafedadam(
    _model_fn,
    _client_config(lr, epochs, optimizer=optimizer, max_epochs=max_epochs),
    server or optimizers.build_adaadam(0.05),
    adafedadam=algorithms.AdaFedAdamHParams(**hparams),
  )


@pytest.mark.parametrize(
  'alpha,weighting,lr_from,epochs',
  [(1.0, 'paper', 0, 2), (2.5, 'paper', 0, 3), (1.0, 'loss', 0, 2), (0.5, 'paper', 3, 2)],
)
def test_adafedadam_matches_reference(alpha, weighting, lr_from, epochs):
  """6 rounds, 4 clients: the model after every round equals Algorithms 1-2 in float64."""
  clients, lr, eta = _clients(), 0.02, 0.05
  server = optimizers.build_adaadam(eta, certainty_lr_from_step=lr_from)
  alg = _adafedadam(lr, epochs, server, alpha=alpha, weighting=weighting)
  ours, rows = _run(alg, clients, 6)
  expected = ref.adafedadam_train(
    _ref_clients(clients),
    THETA0,
    6,
    epochs,
    lr,
    eta=eta,
    alpha=alpha,
    weight_mode=weighting,
    lr_certainty_from_step=lr_from,
  )
  _assert_trajectory(ours, expected['theta'])
  # The inputs tell the variants apart: certainties and loss ratios vary over clients/rounds.
  c_k = np.array(expected['C_k'])
  assert c_k.std() > 0.05 and np.ptp(np.array(expected['I'])) > 0.05
  for row, cs in zip(rows, expected['C_k']):
    assert row['client_certainty_mean'] == pytest.approx(np.mean(cs), rel=1e-4)
    assert row['client_certainty_min'] == pytest.approx(np.min(cs), rel=1e-4)
    assert row['client_invalid_max'] == 0.0


def test_adafedadam_alpha_changes_the_trajectory():
  """The reference itself tells alpha = 0 and 2 apart on these clients (the tests can fail)."""
  clients = _ref_clients(_clients())
  a = ref.adafedadam_train(clients, THETA0, 4, 2, 0.02, eta=0.05, alpha=0.0)['theta'][-1]
  b = ref.adafedadam_train(clients, THETA0, 4, 2, 0.02, eta=0.05, alpha=2.0)['theta'][-1]
  assert np.abs(a - b).max() > 1e-3


def test_adafedadam_with_resource_heterogeneity_matches_reference():
  """Epochs drawn per (round, client) from U{1..3}: the reference gets the same draws."""
  clients, lr, eta = _clients(), 0.02, 0.05
  alg = _adafedadam(lr, 1, optimizers.build_adaadam(eta), max_epochs=3)
  ours, _ = _run(alg, clients, 5)
  draws = [
    [int(seeds.client_epochs(_round_seed(r, k), 1, 3)) for k in range(len(clients))]
    for r in range(1, 6)
  ]
  assert {e for row in draws for e in row} == {1, 2, 3}
  expected = ref.adafedadam_train(
    _ref_clients(clients), THETA0, 5, 1, lr, eta=eta, epochs_per_client=draws
  )
  _assert_trajectory(ours, expected['theta'])


def test_one_local_step_with_alpha_zero_is_adam():
  """One full-batch SGD step per client: eta'_k = eta_k, so C_k = 1 and U_k = grad F_k(x_t);
  with alpha = 0 the pseudo-gradient is the example-weighted full gradient and AdaFedAdam is
  bias-corrected Adam on it (Ju et al. Sec. 5.2: 'identical to minibatch Adam')."""
  clients, eta = _clients(), 0.05
  ours, rows = _run(_adafedadam(0.01, 1, optimizers.build_adaadam(eta), alpha=0.0), clients, 6)
  for row in rows:
    assert row['client_certainty_min'] == pytest.approx(1.0, abs=1e-5)
    assert row['client_certainty_max'] == pytest.approx(1.0, abs=1e-5)
  data = _ref_clients(clients)
  n = np.array([len(y) for _, y in data], np.float64)
  theta, state, expected = THETA0.copy(), ref.adam_init(P + 1), []
  for t in range(6):
    g = sum(nk * ref.mse_grad(x, y, theta) for nk, (x, y) in zip(n, data)) / n.sum()
    state, theta = ref.adam_bias_corrected_step(state, theta, g, eta, 0.9, 0.999, 1e-8, t)
    expected.append(theta)
  _assert_trajectory(ours, expected)


def test_adaadam_with_certainty_one_is_bias_corrected_adam():
  """AdaAdam alone, C = 1 (its default): c_{t,m} = beta_1^t, i.e. Kingma & Ba's Adam, and
  within the eps placement of TFF's `build_adam` (our published FedAdam: eps added to the
  uncorrected sqrt(v), i.e. eps / sqrt(1 - beta_2^t) in Kingma-Ba terms)."""
  rng = np.random.default_rng(3)
  x = rng.normal(size=5)
  grads = [rng.normal(size=5) * (1 + t) for t in range(10)]
  ada = optimizers.build_adaadam(0.01, epsilon=1e-8)
  keras_style = optimizers.build_fedadam(0.01, tau=1e-8)
  spec = tf.TensorSpec([5], tf.float32)
  s1, s2 = ada.initialize((spec,)), keras_style.initialize((spec,))
  w1 = w2 = (tf.constant(x, tf.float32),)
  ref_state, ref_x = ref.adam_init(5), x.copy()
  for t, g in enumerate(grads):
    g32 = (tf.constant(g, tf.float32),)
    s1, w1 = ada.next(s1, w1, g32)
    s2, w2 = keras_style.next(s2, w2, g32)
    ref_state, ref_x = ref.adam_bias_corrected_step(ref_state, ref_x, g, 0.01, 0.9, 0.999, 1e-8, t)
    np.testing.assert_allclose(w1[0].numpy(), ref_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w1[0].numpy(), w2[0].numpy(), rtol=1e-5, atol=1e-6)


def test_adaadam_with_varying_certainty_matches_reference():
  rng = np.random.default_rng(4)
  x = rng.normal(size=4)
  ada = optimizers.build_adaadam(0.02, beta_1=0.8, beta_2=0.99, epsilon=1e-6)
  state, w = ada.initialize((tf.TensorSpec([4], tf.float32),)), (tf.constant(x, tf.float32),)
  ref_state, ref_x = ref.adaadam_init(4), x.copy()
  for t in range(8):
    g, c = rng.normal(size=4), 0.3 + 2.0 * rng.random()
    state = ada.set_hparams(state, {'certainty': c})
    state, w = ada.next(state, w, (tf.constant(g, tf.float32),))
    ref_state, ref_x = ref.adaadam_step(ref_state, ref_x, g, c, 0.02, 0.8, 0.99, 1e-6, t)
    np.testing.assert_allclose(w[0].numpy(), ref_x, rtol=1e-5, atol=1e-6)


# -- The certainty-weighted mean, both faces. ------------------------------------------------


def _values(rng, k):
  return [
    collections.OrderedDict(
      update=(rng.normal(size=3).astype(np.float32), rng.normal(size=2).astype(np.float32)),
      certainty=np.float32(rng.normal() + 1.5),
      loss_ratio=np.float32(0.2 + rng.random()),
    )
    for _ in range(k)
  ]


def _fold(aggregation, values, weights):
  specs = tf.nest.map_structure(lambda v: tf.TensorSpec(np.shape(v), tf.float32), values[0])
  state = aggregation.initialize(specs)
  acc = aggregation.zero(specs, state)
  for v, w in zip(values, weights):
    acc = aggregation.accumulate(acc, tf.nest.map_structure(tf.constant, v), w)
  return aggregation.report(acc, state)[0]


@pytest.mark.parametrize('alpha', [0.0, 1.0, 2.5])
def test_certainty_weighted_mean_both_faces_match_reference(alpha):
  rng = np.random.default_rng(int(alpha * 10))
  values = _values(rng, 5)
  weights = [3.0, 0.0, 7.0, 1.0, 12.0]
  flat_u = [np.concatenate(v['update']) for v in values]
  g, c = ref.certainty_weighted_mean(
    flat_u,
    [float(v['certainty']) for v in values],
    [float(v['loss_ratio']) for v in values],
    weights,
    alpha,
  )
  folded = _fold(aggregators.certainty_weighted_mean(alpha), values, weights)
  np.testing.assert_allclose(_flat(folded['update']), g, rtol=1e-5)
  assert float(folded['certainty']) == pytest.approx(c, rel=1e-5)
  value_type = tff.StructWithPythonType(
    [
      (
        'update',
        tff.StructWithPythonType(
          [tff.TensorType(np.float32, [3]), tff.TensorType(np.float32, [2])], tuple
        ),
      ),
      ('certainty', np.float32),
      ('loss_ratio', np.float32),
    ],
    collections.OrderedDict,
  )
  process = aggregators.CertaintyWeightedMeanFactory(alpha).create(
    value_type, tff.TensorType(np.float32)
  )
  out = process.next(process.initialize(), values, [np.float32(w) for w in weights])
  np.testing.assert_allclose(_flat(out.result['update']), g, rtol=1e-5)
  assert float(out.result['certainty']) == pytest.approx(c, rel=1e-5)


def test_alpha_zero_or_equal_losses_is_the_weighted_mean_of_normalised_updates():
  """alpha = 0 (any losses), or equal loss ratios (any alpha): g = sum n_k U_k / sum n_k."""
  rng = np.random.default_rng(9)
  values = _values(rng, 4)
  weights = [5.0, 2.0, 9.0, 4.0]
  expected = sum(w * np.concatenate(v['update']) for w, v in zip(weights, values)) / sum(weights)
  g0 = _fold(aggregators.certainty_weighted_mean(0.0), values, weights)['update']
  np.testing.assert_allclose(_flat(g0), expected, rtol=1e-5)
  for v in values:
    v['loss_ratio'] = np.float32(0.7)
  g3 = _fold(aggregators.certainty_weighted_mean(3.0), values, weights)['update']
  np.testing.assert_allclose(_flat(g3), expected, rtol=1e-5)


@pytest.mark.parametrize(
  'factory,expected',
  [
    (
      aggregators.CertaintyWeightedMeanFactory(),
      'OrderedDict(update=U_k, certainty=C_k, loss_ratio=I_k)',
    ),
    (aggregators.NormalizedMeanFactory(), 'OrderedDict(update=d_i, a=a_i)'),
  ],
)
def test_a_model_shaped_update_is_refused_in_one_line_naming_the_expected_value(factory, expected):
  """In TFF's own FedAvg (a model-shaped client update) our factories say what they aggregate
  instead of TFF's `AttributeError: The Struct ... does not have named field "update"`."""
  with pytest.raises(TypeError) as e:
    tff.learning.algorithms.build_weighted_fed_avg(
      _model_fn, tff.learning.optimizers.build_sgdm(0.1), model_aggregator=factory
    )
  message = str(e.value)
  assert '\n' not in message
  assert f'{type(factory).__name__} aggregates a client value {expected}' in message, message
  assert 'tff.aggregators.MeanFactory' in message


@pytest.mark.parametrize('alpha', [-1.0, float('inf'), float('nan'), True])
def test_certainty_weighted_mean_rejects_bad_alpha(alpha):
  with pytest.raises(ValueError, match='alpha must be a finite number >= 0'):
    aggregators.CertaintyWeightedMeanFactory(alpha)


# -- Degenerate clients and C <= 0. ----------------------------------------------------------


def _client_out(alg, data, theta0=THETA0, lr=0.02, x0=None):
  model = _model_fn()
  weights = _initial_weights(theta0)
  weights = tff.learning.models.ModelWeights([tf.constant(w) for w in weights.trainable], [])
  x0 = weights.trainable if x0 is None else _initial_weights(x0).trainable
  features = collections.OrderedDict((k, tf.constant(v)) for k, v in data.items())
  return alg.client_update(
    model, weights, features, tf.constant([1, 2], tf.int64), tf.constant(lr), tuple(x0), ()
  )


def test_zero_gradient_client_is_sent_with_weight_zero():
  """A client at its own optimum: grad F_k(x_t) = 0 and Delta_k = 0, so eta'_k, U_k and C_k
  are undefined: it is sent with weight 0 and zeros (counted in `invalid`), never NaN."""
  x = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
  w = THETA0[:P].astype(np.float32)
  data = collections.OrderedDict(x=x, y=(x @ w + THETA0[P])[:, None].astype(np.float32))
  out = _client_out(_adafedadam(0.02), data)
  assert float(out.stats['gradient_norm']) == 0.0
  assert float(out.weight) == 0.0 and float(out.stats['invalid']) == 1.0
  assert not np.any(_flat(out.update['update'])) and float(out.update['certainty']) == 0.0
  assert float(out.update['loss_ratio']) == 1.0


def test_client_without_examples_is_sent_with_weight_zero():
  empty = collections.OrderedDict(x=np.zeros((0, P), np.float32), y=np.zeros((0, 1), np.float32))
  out = _client_out(_adafedadam(0.02), empty)
  assert float(out.weight) == 0.0 and np.all(np.isfinite(_flat(out.update['update'])))


def test_client_quantities_match_reference():
  data = _clients()[1]
  x0 = THETA0 + 0.3
  out = _client_out(_adafedadam(0.02, epochs=3), data, x0=x0)
  xr, yr = data['x'], data['y'][:, 0]
  x_k = ref.local_sgd(xr, yr, THETA0, 0.02, 3)
  q = ref.adafedadam_client(
    x_k - THETA0,
    ref.mse_grad(xr, yr, THETA0),
    0.02,
    ref.mse_loss(xr, yr, THETA0),
    ref.mse_loss(xr, yr, x0),
  )
  np.testing.assert_allclose(_flat(out.update['update']), q['U'], rtol=1e-4)
  assert float(out.update['certainty']) == pytest.approx(q['C'], rel=1e-4)
  assert float(out.update['loss_ratio']) == pytest.approx(q['I'], rel=1e-4)
  assert float(out.stats['update_scale']) == pytest.approx(q['eta_prime'], rel=1e-4)


def _aggregate(c, update=(0.5, -0.25)):
  return collections.OrderedDict(
    update=(tf.constant(update[:1], tf.float32), tf.constant(update[1:], tf.float32)),
    certainty=tf.constant(c, tf.float32),
  )


def _server_state(alg):
  specs = (tf.TensorSpec([1], tf.float32), tf.TensorSpec([1], tf.float32))
  return alg.server_optimizer.initialize(specs), (tf.constant([1.0]), tf.constant([2.0]))


def _assert_same_state(a, b):
  """Equal leaf by leaf, as the float32 / int32 tensors the engines keep (a fresh state holds
  Python numbers)."""
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
    np.testing.assert_array_equal(tf.convert_to_tensor(x).numpy(), tf.convert_to_tensor(y).numpy())


@pytest.mark.parametrize('lr_from', [0, 6])
@pytest.mark.parametrize('first_step', [True, False])
@pytest.mark.parametrize('c', [0.0, -0.7])
def test_non_positive_certainty_makes_no_step_by_default(lr_from, first_step, c):
  """C <= 0: no server step; the model and AdaAdam's whole state (m, v, running products,
  step count) stay as they were, also on the very first step (where C = 0 taken literally is
  0/0 in the bias correction) and with the delayed certainty step size."""
  alg = _adafedadam(0.02, server=optimizers.build_adaadam(0.1, certainty_lr_from_step=lr_from))
  state, x = _server_state(alg)
  if not first_step:
    state, x, bad = alg.server_update(state, x, _aggregate(2.0))
    assert int(bad) == 0 and float(x[0][0]) != 1.0
  new_state, new_x, bad = alg.server_update(state, x, _aggregate(c))
  assert int(bad) == 0
  _assert_same_state(new_x, x)
  _assert_same_state(new_state, state)


def test_round_of_degenerate_clients_leaves_the_model():
  """Every client at its own optimum (gradient 0): all weights 0, g = 0, C = 0: no step, no
  NaN, and the round is not a divergence."""
  rng = np.random.default_rng(2)
  w = THETA0[:P]
  clients = []
  for n in (5, 9):
    x = rng.normal(size=(n, P)).astype(np.float32)
    y = (x.astype(np.float64) @ w + THETA0[P]).astype(np.float32)
    clients.append(collections.OrderedDict(x=x, y=y[:, None]))
  alg = _adafedadam(0.02)
  thetas, rows = _run(alg, clients, 2)
  for theta, row in zip(thetas, rows):
    assert row['client_invalid_min'] == 1.0 and row['train_update_non_finite'] == 0
    np.testing.assert_allclose(theta, THETA0.astype(np.float32), rtol=0, atol=0)


def test_tiny_positive_certainty_on_a_first_step_is_rejected():
  """C = 1e-9 > 0 on a first step: beta^C rounds to 1 in float32, 1 - c_m = 0 in the bias
  correction, the step is NaN: rejected as a non-finite update (model and state kept)."""
  alg = _adafedadam(0.02, server=optimizers.build_adaadam(0.1))
  state, x = _server_state(alg)
  new_state, new_x, bad = alg.server_update(state, x, _aggregate(1e-9))
  assert int(bad) == 1
  _assert_same_state(new_x, x)
  _assert_same_state(new_state, state)


def test_certainty_floor_none_applies_negative_certainty_and_rejects_non_finite():
  """The authors' code: C < 0 is applied (beta^C > 1); a NaN it produces is rejected."""
  alg = _adafedadam(0.02, server=optimizers.build_adaadam(0.1), certainty_floor='none')
  state, x = _server_state(alg)
  _, x_neg, bad = alg.server_update(state, x, _aggregate(-0.5))
  _, x_pos, _ = alg.server_update(state, x, _aggregate(0.5))
  # First step: beta^C > 1 makes m, v and 1 - c both negative: m_hat, v_hat > 0, and
  # eta_t = C eta < 0 steps uphill, against the direction C = 0.5 steps.
  assert int(bad) == 0
  assert (float(x_neg[0][0]) - 1.0) * (float(x_pos[0][0]) - 1.0) < 0
  _, x_nan, bad = alg.server_update(state, x, _aggregate(float('nan')))
  assert int(bad) == 1 and float(x_nan[0][0]) == 1.0


def test_adafedadam_needs_adaadam():
  with pytest.raises(ValueError, match='needs the AdaAdam server optimizer'):
    _adafedadam(0.02, server=optimizers.build_fedadam(0.01))


# -- FedNova. --------------------------------------------------------------------------------


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_fednova_matches_reference_with_heterogeneous_steps(momentum):
  clients, lr = _clients(), 0.02
  optimizer = 'sgdm' if momentum else 'sgd'
  alg = algorithms.build_fednova(
    _model_fn,
    _client_config(lr, 1, optimizer=optimizer, momentum=momentum, max_epochs=4),
    optimizers.build_fedavg_sgd(1.0),
  )
  ours, rows = _run(alg, clients, 5)
  draws = [
    [int(seeds.client_epochs(_round_seed(r, k), 1, 4)) for k in range(len(clients))]
    for r in range(1, 6)
  ]
  assert len({e for row in draws for e in row}) > 1
  expected = ref.fednova_train(
    _ref_clients(clients), THETA0, 5, lr, momentum=momentum, epochs_per_client=draws
  )
  _assert_trajectory(ours, expected)
  fedavg = ref.fedavg_train(_ref_clients(clients), THETA0, 5, 2, lr)
  assert np.abs(expected[-1] - fedavg[-1]).max() > 1e-3  # heterogeneous steps: not FedAvg
  for row, taus in zip(rows, draws):
    assert row['client_steps_norm_max'] == pytest.approx(
      ref.fednova_a(max(taus), momentum), rel=1e-5
    )


@pytest.mark.parametrize('momentum', [0.0, 0.9])
def test_fednova_with_equal_steps_is_fedavg(momentum):
  clients, lr = _clients(), 0.02
  optimizer = 'sgdm' if momentum else 'sgd'
  config = _client_config(lr, 3, optimizer=optimizer, momentum=momentum)
  server = optimizers.build_fedavg_sgd(1.0)
  nova, _ = _run(algorithms.build_fednova(_model_fn, config, server), clients, 4)
  fedavg, _ = _run(algorithms.build_fedopt(_model_fn, config, server), clients, 4)
  _assert_trajectory(nova, fedavg, rtol=1e-5)


def test_fednova_refuses_adaptive_client_optimizers():
  with pytest.raises(ValueError, match="defined for sgd, sgdm; got client optimizer 'adam'"):
    algorithms.build_fednova(
      _model_fn, _client_config(0.01, optimizer='adam'), optimizers.build_fedavg_sgd(1.0)
    )


# -- q-FedAvg. -------------------------------------------------------------------------------


@pytest.mark.parametrize('q', [0.5, 1.0, 2.0])
def test_qfedavg_matches_reference(q):
  clients, lr = _clients(), 0.02
  alg = algorithms.build_qfedavg(
    _model_fn,
    _client_config(lr, 2),
    optimizers.build_fedavg_sgd(1.0),
    qfedavg=algorithms.QFedAvgHParams(q=q),
  )
  ours, _ = _run(alg, clients, 5)
  expected = ref.qfedavg_train(_ref_clients(clients), THETA0, 5, 2, lr, q)
  _assert_trajectory(ours, expected)


def test_qfedavg_with_q_zero_is_uniform_fedavg():
  clients, lr = _clients(), 0.02
  server = optimizers.build_fedavg_sgd(1.0)
  q0 = algorithms.build_qfedavg(
    _model_fn, _client_config(lr, 2), server, qfedavg=algorithms.QFedAvgHParams(q=0.0)
  )
  uniform = algorithms.build_fedopt(_model_fn, _client_config(lr, 2, weighting='uniform'), server)
  ours, _ = _run(q0, clients, 4)
  fedavg, _ = _run(uniform, clients, 4)
  _assert_trajectory(ours, fedavg, rtol=1e-5)
  q1, _ = _run(
    algorithms.build_qfedavg(
      _model_fn, _client_config(lr, 2), server, qfedavg=algorithms.QFedAvgHParams(q=1.0)
    ),
    clients,
    4,
  )
  assert np.abs(q1[-1] - fedavg[-1]).max() > 1e-3


# -- FedProx. --------------------------------------------------------------------------------


def _quadratic(client):
  """MSE of a linear model is 0.5 (x - c)^T A (x - c) + const, x = (W, b):
  A = (2/n) X~^T X~ with X~ = [X, 1], c = the least-squares solution."""
  xt = np.concatenate([client['x'], np.ones((len(client['x']), 1), np.float32)], axis=1)
  xt = xt.astype(np.float64)
  a = 2.0 / len(xt) * xt.T @ xt
  c = np.linalg.lstsq(xt, client['y'][:, 0].astype(np.float64), rcond=None)[0]
  return a, c


def test_fedprox_matches_the_closed_form_and_tff_has_the_sign_flipped():
  """One client, K = 8 full-batch SGD steps, server SGD 1: x_{t+1} = x_K, which has a closed
  form (tests/reference/fair_numpy.py). Ours: the proximal gradient + mu (x - x_t). TFF 0.87's
  build_weighted_fed_prox: the closed form with the sign of mu flipped, and not ours."""
  client, lr, mu, k = _clients()[1], 0.05, 0.5, 8
  a, c = _quadratic(client)
  right = ref.fedprox_quadratic_closed_form(a, c, THETA0, mu, lr, k, sign=+1)
  flipped = ref.fedprox_quadratic_closed_form(a, c, THETA0, mu, lr, k, sign=-1)
  assert np.abs(right - flipped).max() > 1e-2
  alg = algorithms.build_fedprox(
    _model_fn,
    _client_config(lr, k),
    optimizers.build_fedavg_sgd(1.0),
    fedprox=algorithms.FedProxHParams(mu=mu),
  )
  ours, _ = _run(alg, [client], 1)
  np.testing.assert_allclose(ours[0], right, rtol=1e-4, atol=1e-5)

  process = tff.learning.algorithms.build_weighted_fed_prox(
    _model_fn,
    proximal_strength=mu,
    client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
    server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
  )
  state = process.set_model_weights(process.initialize(), _initial_weights())
  data = tf.data.Dataset.from_tensor_slices(client).batch(BATCH).repeat(k)
  state = process.next(state, [data]).state
  theirs = _flat(process.get_model_weights(state).trainable)
  np.testing.assert_allclose(theirs, flipped, rtol=1e-4, atol=1e-5)
  assert np.abs(theirs - right).max() > 1e-2


def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit():
  clients, config = _clients(), _client_config(0.02, 2)
  server = optimizers.build_fedavg_sgd(1.0)
  prox = algorithms.build_fedprox(
    _model_fn, config, server, fedprox=algorithms.FedProxHParams(mu=0.0)
  )
  ours, _ = _run(prox, clients, 3)
  fedavg, _ = _run(algorithms.build_fedopt(_model_fn, config, server), clients, 3)
  for a, b in zip(ours, fedavg):
    np.testing.assert_array_equal(a, b)


def test_fedprox_matches_reference_over_rounds():
  clients, lr, mu = _clients(), 0.02, 0.1
  alg = algorithms.build_fedprox(
    _model_fn,
    _client_config(lr, 3),
    optimizers.build_fedavg_sgd(1.0),
    fedprox=algorithms.FedProxHParams(mu=mu),
  )
  ours, _ = _run(alg, clients, 4)
  data = _ref_clients(clients)
  n = np.array([len(y) for _, y in data], np.float64)
  theta, expected = THETA0.copy(), []
  for _ in range(4):
    locals_ = [ref.local_sgd(x, y, theta, lr, 3, mu=mu, anchor=theta) for x, y in data]
    theta = sum(nk * xk for nk, xk in zip(n, locals_)) / n.sum()
    expected.append(theta)
  _assert_trajectory(ours, expected)


@pytest.mark.parametrize(
  'build,message',
  [
    (lambda: algorithms.FedProxHParams(mu=-0.1), 'FedProx mu=-0.1 is invalid'),
    (lambda: algorithms.QFedAvgHParams(q=-1.0), 'q-FedAvg q=-1.0 is invalid'),
    (lambda: algorithms.AdaFedAdamHParams(alpha=-1.0), 'fairness alpha=-1.0 is invalid'),
    (lambda: algorithms.AdaFedAdamHParams(weighting='size'), 'unknown AdaFedAdam weighting'),
    (lambda: optimizers.build_adaadam(0.0), 'learning_rate=0.0 is invalid'),
    (lambda: optimizers.build_adaadam(epsilon=-1e-8), 'epsilon=-1e-08 is invalid'),
    (lambda: optimizers.build_adaadam(beta_1=1.0), r'beta_1 must be in \[0, 1\)'),
  ],
)
def test_bad_hyperparameters(build, message):
  with pytest.raises(ValueError, match=message):
    build()
