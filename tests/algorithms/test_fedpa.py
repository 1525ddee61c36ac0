"""FedPA (Al-Shedivat et al. 2021) against the independent float64 NumPy reference.

tests/reference/fedpa_numpy.py was written from the paper's equations without reading
`tff_adaptive`: the shrinkage covariance, the dense solve, its own App. C dynamic program and
IASG on a linear regression. Checked here: the DP against `np.linalg.solve` (float64 1e-8,
float32 1e-4), sample by sample; the reductions (l = 1, Sigma = I); the client update against
IASG + solve; FedPA before its server burn-in equals FedAvg on both engines; the client work as
a `tff.learning.templates.ClientWorkProcess` in a user's own composition; bad values.
"""

import collections
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import fedpa_numpy as ref
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import runtime
from tff_adaptive.algorithms import fedpa_math
from tff_adaptive.core import seeds


def _split(vector, sizes=(0.3, 0.5)):
  """A d-vector (or [l, d] samples) as a nest of three leaves of different shapes."""
  d = vector.shape[-1]
  a, b = int(d * sizes[0]), int(d * sizes[1])
  lead = vector.shape[:-1]
  return (
    vector[..., :a],
    vector[..., a : a + b].reshape(lead + (b, 1)),
    vector[..., a + b :],
  )


def _flat(nest):
  return np.concatenate([np.asarray(x).reshape(-1) for x in nest])


def _problem(rng, d, l):
  """x0 and l samples with per-coordinate scales spread over two decades (a non-trivial S)."""
  x0 = rng.normal(size=d)
  scales = np.exp(rng.uniform(np.log(0.05), np.log(5.0), size=d))
  samples = 0.3 + rng.normal(size=(l, d)) * scales
  return x0, samples


@pytest.mark.parametrize('d', [1, 7, 200])
@pytest.mark.parametrize('l', [1, 2, 5, 10])
@pytest.mark.parametrize('rho', [0.01, 0.1, 0.5, 1.0])
def test_dp_equals_solve_float64(d, l, rho):
  rng = np.random.default_rng(d * 100 + l)
  x0, samples = _problem(rng, d, l)
  expected = ref.posterior_delta_solve(x0, samples, rho)
  ours = _flat(fedpa_math.posterior_delta(_split(x0), _split(samples), rho))
  np.testing.assert_allclose(ours, expected, rtol=1e-8, atol=1e-8 * np.abs(expected).max())
  exact = _flat(fedpa_math.posterior_delta_exact(_split(x0), _split(samples), rho))
  np.testing.assert_allclose(exact, expected, rtol=1e-8, atol=1e-8 * np.abs(expected).max())
  if l > 1 and rho < 1.0:  # Sigma != I: the delta is not FedAvg-like x0 - mean
    assert np.abs(expected - (x0 - samples.mean(0))).max() > 1e-3 * np.abs(expected).max()


@pytest.mark.parametrize('l', [2, 5, 10])
@pytest.mark.parametrize('rho', [0.01, 0.1, 0.5, 1.0])
def test_dp_equals_solve_float32(l, rho):
  rng = np.random.default_rng(l)
  x0, samples = _problem(rng, 200, l)
  expected = ref.posterior_delta_solve(x0, samples, rho)
  ours = fedpa_math.posterior_delta(
    _split(x0.astype(np.float32)), _split(samples.astype(np.float32)), rho
  )
  assert all(x.dtype == tf.float32 for x in ours)
  np.testing.assert_allclose(_flat(ours), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize('shrinkage', [0.01, 0.1, 0.5, 1.0])
def test_convex_form_equals_solve(shrinkage):
  """Sigma = s I + (1 - s) S through the DP's rho = (1/s - 1)/(l - 1)."""
  rng = np.random.default_rng(3)
  l = 6
  x0, samples = _problem(rng, 40, l)
  rho = fedpa_math.paper_rho(shrinkage, l, fedpa_math.CONVEX)
  assert rho == pytest.approx(ref.convex_to_paper_rho(shrinkage, l), rel=1e-12)
  ours = _flat(fedpa_math.posterior_delta(_split(x0), _split(samples), rho))
  expected = ref.posterior_delta_solve(x0, samples, shrinkage, form='convex')
  np.testing.assert_allclose(ours, expected, rtol=1e-8, atol=1e-10)


def test_dp_is_updatable_sample_by_sample():
  """After t samples the state gives Sigma_t^-1 (x0 - xbar_t) with rho_t, for every t."""
  rng = np.random.default_rng(4)
  x0, samples = _problem(rng, 30, 8)
  rho = 0.2
  state = fedpa_math.dp_init(_split(x0), 8)
  for t in range(1, 9):
    state = fedpa_math.dp_update(state, _split(samples[t - 1]), rho)
    ours = _flat(fedpa_math.dp_delta(state, rho))
    expected = ref.posterior_delta_solve(x0, samples[:t], rho)
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-10)
    assert int(state.count) == t


def test_reductions():
  rng = np.random.default_rng(5)
  x0, samples = _problem(rng, 20, 5)
  one = _flat(fedpa_math.posterior_delta(_split(x0), _split(samples[:1]), 0.3))
  np.testing.assert_allclose(one, x0 - samples[0], rtol=1e-12, atol=1e-12)  # l = 1
  identity = _flat(fedpa_math.posterior_delta(_split(x0), _split(samples), 0.0))  # rho = 0
  np.testing.assert_allclose(identity, x0 - samples.mean(0), rtol=1e-12, atol=1e-12)
  rho = fedpa_math.paper_rho(1.0, 5, fedpa_math.CONVEX)  # convex s = 1: Sigma = I
  identity = _flat(fedpa_math.posterior_delta(_split(x0), _split(samples), rho))
  np.testing.assert_allclose(identity, x0 - samples.mean(0), rtol=1e-12, atol=1e-12)


def test_dp_never_forms_a_d_by_d_matrix():
  """The DP's state is O(l d): the v_k slots, the mean, Delta~ and l - 1 scalars."""
  d, l = 1000, 6
  state = fedpa_math.dp_init((tf.zeros([d]),), l)
  sizes = [int(np.prod(t.shape)) for t in tf.nest.flatten(state)]
  assert sum(sizes) == (l - 1) * d + 2 * d + (l - 1) + 1


# -- The client update. ---------------------------------------------------------------------


def _linear_model_fn(p):
  def model_fn():
    keras = tf.keras.Sequential([tf.keras.layers.Input([p]), tf.keras.layers.Dense(1)])
    return tff.learning.models.from_keras_model(
      keras,
      loss=tf.keras.losses.MeanSquaredError(),
      input_spec=collections.OrderedDict(
        x=tf.TensorSpec([None, p], tf.float32), y=tf.TensorSpec([None, 1], tf.float32)
      ),
    )

  return model_fn


def _regression_client(rng, n, p):
  x = rng.normal(size=(n, p)) * np.linspace(0.3, 2.0, p)
  y = x @ rng.normal(size=p) + 0.5 + 0.3 * rng.normal(size=n)
  return collections.OrderedDict(x=x.astype(np.float32), y=y[:, None].astype(np.float32))


@pytest.mark.parametrize(
  'optimizer,burnin_epochs,epochs,rho,batch',
  [('sgd', 1, 5, 0.1, 7), ('sgdm', 2, 6, 0.5, 5), ('sgd', 0, 3, 0.01, 40)],
)
def test_client_update_equals_iasg_then_solve(optimizer, burnin_epochs, epochs, rho, batch):
  """One client: IASG samples (per-epoch iterate means after the burn-in epochs), then
  Sigma_hat^-1 (x_t - mu_hat), against the NumPy IASG on the same minibatch order."""
  rng = np.random.default_rng(6)
  p, n, lr = 4, 33, 0.05
  data = _regression_client(rng, n, p)
  model_fn = _linear_model_fn(p)
  model = model_fn()
  kernel = rng.normal(size=(p, 1)).astype(np.float32)
  bias = np.array([0.2], np.float32)
  weights = tff.learning.models.ModelWeights([tf.constant(kernel), tf.constant(bias)], [])
  algorithm = algorithms.build_fedpa(
    model_fn,
    algorithms.ClientTrainingConfig(
      optimizers.ClientOptimizerConfig(optimizer, lr, momentum=0.9), epochs=epochs, batch_size=batch
    ),
    optimizers.build_fedavg_sgd(1.0),
    fedpa=algorithms.FedPAHParams(burnin_epochs=burnin_epochs, shrinkage=rho),
  )
  seed = tf.constant([3, 11], tf.int64)
  features = collections.OrderedDict((k, tf.constant(v)) for k, v in data.items())
  out = tf.function(
    lambda: algorithm.client_update(
      model, weights, features, seed, tf.constant(lr), tf.constant(True), ()
    )
  )()
  perms = seeds.epoch_permutations(n, epochs, seed).numpy()
  x0 = np.concatenate([kernel.reshape(-1), bias])
  momentum = 0.9 if optimizer == 'sgdm' else 0.0
  args = (x0, data['x'], data['y'], perms, batch, lr)
  expected = ref.fedpa_client_delta(*args, burnin_epochs, rho, momentum=momentum)
  fedavg = ref.fedavg_client_delta(*args, momentum=momentum)
  ours = _flat(out.update)
  np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
  assert np.abs(expected - fedavg).max() > 0.05 * np.abs(fedavg).max()  # tells them apart
  assert float(out.weight) == n
  correction = np.linalg.norm(expected - fedavg) / np.linalg.norm(fedavg)
  assert float(out.stats['delta_correction']) == pytest.approx(correction, rel=1e-3)
  assert float(out.stats['delta_non_finite']) == 0.0
  # In a burn-in round the same client sends FedAvg's x_t - x_K.
  burnin = algorithm.client_update(
    model, weights, features, seed, tf.constant(lr), tf.constant(False), ()
  )
  np.testing.assert_allclose(_flat(burnin.update), fedavg, rtol=1e-4, atol=1e-6)
  assert float(burnin.stats['delta_correction']) == 0.0


def _client_update(algorithm, model, data, lr=0.05):
  weights = tff.learning.models.ModelWeights.from_model(model)
  weights = tff.learning.models.ModelWeights(
    [tf.constant(w) for w in weights.trainable], [tf.constant(w) for w in weights.non_trainable]
  )
  features = collections.OrderedDict((k, tf.constant(v)) for k, v in data.items())
  return algorithm.client_update(
    model, weights, features, tf.constant([1, 2], tf.int64), tf.constant(lr), True, ()
  )


def _fedpa(model_fn, epochs=3, batch=10, lr=0.05, **hparams):
  return algorithms.build_fedpa(
    model_fn,
    algorithms.ClientTrainingConfig(
      optimizers.ClientOptimizerConfig('sgd', lr), epochs=epochs, batch_size=batch
    ),
    optimizers.build_fedavg_sgd(1.0),
    fedpa=algorithms.FedPAHParams(**hparams),
  )


def test_small_clients_still_give_every_sample():
  """A client with fewer examples than a batch takes one step per epoch: its samples are its
  iterates, l = E - burn-in of them, and its delta is finite. One without examples sends 0
  with weight 0."""
  rng = np.random.default_rng(7)
  model_fn = _linear_model_fn(3)
  algorithm = _fedpa(model_fn, epochs=4, batch=10, shrinkage=0.5)
  one = _regression_client(rng, 1, 3)
  out = _client_update(algorithm, model_fn(), one)
  assert float(out.stats['local_steps']) == 4.0
  assert np.all(np.isfinite(_flat(out.update))) and float(out.weight) == 1.0
  empty = collections.OrderedDict(x=np.zeros((0, 3), np.float32), y=np.zeros((0, 1), np.float32))
  out = _client_update(algorithm, model_fn(), empty)
  assert float(out.weight) == 0.0 and not np.any(_flat(out.update))


def test_non_finite_delta_is_dropped():
  """A client whose training overflows sends zeros with weight 0 (counted), never NaN."""
  rng = np.random.default_rng(8)
  model_fn = _linear_model_fn(3)
  algorithm = _fedpa(model_fn, lr=1e30)
  out = _client_update(algorithm, model_fn(), _regression_client(rng, 30, 3), lr=1e30)
  assert float(out.stats['delta_non_finite']) == 1.0
  assert float(out.weight) == 0.0
  assert not np.any(_flat(out.update))


@pytest.mark.parametrize(
  'hparams,message',
  [
    (dict(shrinkage=-0.1), 'rho must be >= 0'),
    (dict(shrinkage=0.0, shrinkage_form='convex'), r'must be in \(0, 1\]'),
    (dict(shrinkage=1.5, shrinkage_form='convex'), r'must be in \(0, 1\]'),
    (dict(shrinkage_form='ledoit'), "unknown FedPA shrinkage form 'ledoit'"),
    (dict(solver='cholesky'), "unknown FedPA solver 'cholesky'"),
    (dict(burnin_rounds=-1), 'burnin_rounds=-1 is invalid'),
  ],
)
def test_bad_hyperparameters(hparams, message):
  with pytest.raises(ValueError, match=message):
    algorithms.FedPAHParams(**hparams)


def test_exact_solver_refuses_a_big_model():
  with pytest.raises(ValueError, match=r"solver 'exact' forms a d x d matrix .* d = 20,002"):
    _fedpa(_linear_model_fn(20_001), solver='exact')
  _fedpa(_linear_model_fn(100), solver='exact')  # small: fine


def test_no_sample_left_is_an_error():
  with pytest.raises(ValueError, match=r'client epochs \(2\) must exceed fedpa burnin_epochs'):
    _fedpa(_linear_model_fn(2), epochs=2, burnin_epochs=2)


# -- Rounds on both engines. ----------------------------------------------------------------


def _clients(rng, count=4, p=4):
  return [_regression_client(rng, int(n), p) for n in rng.integers(12, 40, size=count)]


def _run(engine, clients, rounds):
  state = engine.initialize(_INITIAL)
  rows = []
  for r in range(1, rounds + 1):
    result = engine.next(
      state,
      [
        engines.RoundClient(str(i), c, seeds.client_seed(0, r, i, len(clients)))
        for i, c in enumerate(clients)
      ],
    )
    state = result.state
    rows.append(dict(result.metrics))
  return rows, engine.model_weights(state).trainable


tf.keras.utils.set_random_seed(0)
_INITIAL = tff.learning.models.ModelWeights(
  *[
    [v.numpy() for v in vs]
    for vs in tff.learning.models.ModelWeights.from_model(_linear_model_fn(4)())
  ]
)


def _fedopt(model_fn, epochs=3, batch=10, lr=0.05):
  return algorithms.build_fedopt(
    model_fn,
    algorithms.ClientTrainingConfig(
      optimizers.ClientOptimizerConfig('sgd', lr), epochs=epochs, batch_size=batch
    ),
    optimizers.build_fedavg_sgd(1.0),
  )


def test_before_server_burnin_fedpa_is_fedavg_on_both_engines():
  """Rounds t < burnin_rounds: the same model and metrics as FedAvg, bit for bit; after the
  burn-in the two part ways; the TFF engine agrees with the in-process one."""
  rng = np.random.default_rng(9)
  clients = _clients(rng)
  model_fn = _linear_model_fn(4)
  fedpa = _fedpa(model_fn, burnin_rounds=3, shrinkage=0.1)
  fedavg = _fedopt(model_fn)
  pa_rows, pa_weights = _run(engines.InProcessEngine(fedpa), clients, 3)
  avg_rows, avg_weights = _run(engines.InProcessEngine(fedavg), clients, 3)
  for a, b in zip(pa_weights, avg_weights):
    np.testing.assert_array_equal(a, b)
  for pa, avg in zip(pa_rows, avg_rows):
    assert pa['train_loss'] == avg['train_loss']
    assert pa['client_delta_correction_max'] == 0.0
  pa_rows, _ = _run(engines.InProcessEngine(fedpa), clients, 5)
  avg_rows, _ = _run(engines.InProcessEngine(fedavg), clients, 5)
  assert pa_rows[3]['client_delta_correction_mean'] > 0.01
  assert abs(pa_rows[4]['train_loss'] - avg_rows[4]['train_loss']) > 1e-4
  with runtime.local_execution():
    tff_rows, tff_weights = _run(engines.TffEngine(fedpa), clients, 5)
  _, inprocess_weights = _run(engines.InProcessEngine(fedpa), clients, 5)
  for a, b in zip(tff_rows, pa_rows):
    for key in a:
      assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key
  for a, b in zip(tff_weights, inprocess_weights):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_client_work_process_in_a_users_own_composition():
  """FedPA's `engines.build_client_work` composed with TFF's own distributor, MeanFactory and an
  SGDM finalizer equals the trainer's FedPA (TFF engine) with the same server optimizer."""
  rng = np.random.default_rng(10)
  clients = _clients(rng, count=3)
  model_fn = _linear_model_fn(4)
  client = algorithms.ClientTrainingConfig(
    optimizers.ClientOptimizerConfig('sgd', 0.05), epochs=3, batch_size=10
  )
  hparams = algorithms.FedPAHParams(burnin_rounds=1, shrinkage=0.1)
  server = tff.learning.optimizers.build_sgdm(0.5, momentum=0.9)
  with runtime.local_execution():
    client_work = engines.build_client_work(
      algorithms.build_fedpa(model_fn, client, server, fedpa=hparams)
    )
    assert isinstance(client_work, tff.learning.templates.ClientWorkProcess)
    weights_type = tff.learning.models.weights_type_from_model(model_fn)

    @tff.tensorflow.computation
    def initial_weights():
      return tff.learning.models.ModelWeights(
        [tf.constant(w) for w in _INITIAL.trainable],
        [tf.constant(w) for w in _INITIAL.non_trainable],
      )

    process = tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      tff.aggregators.MeanFactory().create(weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(server, weights_type),
    )
    state = process.initialize()
    for r in range(1, 4):
      data = [
        tf.data.Dataset.from_tensors(
          collections.OrderedDict(c, seed=seeds.client_seed(0, r, i, len(clients)))
        )
        for i, c in enumerate(clients)
      ]
      output = process.next(state, data)
      state = output.state
    ours = process.get_model_weights(state).trainable
    stats = output.metrics['client_work']['client_stats']
    assert stats['delta_correction_mean'] > 0.01
    _, expected = _run(
      engines.TffEngine(algorithms.build_fedpa(model_fn, client, server, fedpa=hparams)),
      clients,
      3,
    )
  for a, b in zip(ours, expected):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
