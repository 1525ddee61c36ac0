"""Client optimizers against the independent float64 NumPy references (Kim et al. 2024 Sec. 4).

tests/reference/client_optimizers_numpy.py was written from the papers' equations without
reading `tff_adaptive`. The library runs in float32 on the same problems: a logistic regression
with a different minibatch every step (non-constant curvature) and f(x) = L/2 ||x||^2 (closed
forms). Rules that need more than a gradient (SPS, Delta-SGD 'same_batch') run as local steps
on a model whose loss and gradient are the reference problem's (`_ProblemModel`).
"""

import os
import types

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import client_optimizers_numpy as ref
from tff_adaptive import algorithms
from tff_adaptive import optimizers
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import delta_sgd
from tff_adaptive.optimizers import sps

RTOL = 1e-4  # float32 vs float64 after up to 30 steps
ATOL = 1e-6
# Step sizes fall to ~1e-5 on the logistic problem, where ||x_k - x_{k-1}|| is a difference of
# float32 numbers of size ~1: its relative error is ~1e-7 / 1e-5.
ETA_ATOL = 1e-7
SEPARATION = 1e-3  # two rules count as different when some coordinate differs by more


class _ProblemModel:
  """Just enough of a VariableModel for `local_loop.loss_and_gradients`: the trainable
  variables hold x (float32) and the loss of minibatch k (the batch is {'k': [k]}) and its
  gradient are the reference problem's, evaluated in float64."""

  def __init__(self, x0, loss_fn, grad_fn):
    self.trainable_variables = [tf.Variable(np.asarray(a, np.float32)) for a in x0]
    self.local_variables = []
    self._loss_fn, self._grad_fn = loss_fn, grad_fn

  def forward_pass(self, batch, training=True):
    del training
    k = batch['k'][0]
    n = len(self.trainable_variables)

    def as64(xs):
      return [np.asarray(x, np.float64) for x in xs]

    @tf.custom_gradient
    def loss(*xs):
      value = tf.py_function(
        lambda k, *xs: np.float32(self._loss_fn(as64(xs), int(k))), [k, *xs], tf.float32
      )

      def grad(dy):
        gs = tf.py_function(
          lambda k, *xs: [np.float32(g) for g in self._grad_fn(as64(xs), int(k))],
          [k, *xs],
          [tf.float32] * n,
        )
        return [dy * tf.reshape(g, x.shape) for g, x in zip(gs, xs)]

      return value, grad

    return types.SimpleNamespace(loss=loss(*[v.read_value() for v in self.trainable_variables]))

  def weights(self):
    return [v.numpy() for v in self.trainable_variables]


def _run_local_step(local_step, model, num_steps):
  """Steps k = 1..K on minibatch k; returns (iterates [x_0..x_K], states after each step)."""
  xs, states = [model.weights()], []
  state = local_step.init(model)
  for k in range(1, num_steps + 1):
    batch = {'k': tf.constant([k], tf.int64)}
    state = local_step.apply(model, batch, tf.constant([0, k], tf.int64), state)
    xs.append(model.weights())
    states.append(state)
  return xs, states


def _run_optimizer(optimizer, x0, grad_fn, num_steps):
  """x_k = optimizer.next(x_{k-1}, g(x_{k-1}; minibatch k)); returns (iterates, states)."""
  x = [tf.constant(np.asarray(a, np.float32)) for a in x0]
  state = optimizer.initialize([tf.TensorSpec(a.shape, tf.float32) for a in x])
  xs, states = [[a.numpy() for a in x]], []
  for k in range(1, num_steps + 1):
    g = [tf.constant(np.float32(a)) for a in grad_fn([a.numpy().astype(np.float64) for a in x], k)]
    state, x = optimizer.next(state, x, g)
    xs.append([a.numpy() for a in x])
    states.append(state)
  return xs, states


def _assert_iterates(ours, theirs, rtol=RTOL, atol=ATOL):
  assert len(ours) == len(theirs)
  for k, (a, b) in enumerate(zip(ours, theirs)):
    for u, v in zip(a, b):
      np.testing.assert_allclose(u, v, rtol=rtol, atol=atol, err_msg=f'iterate {k}')


def _max_difference(a, b):
  return max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)))) for u, v in zip(a[-1], b[-1]))


# -- Delta-SGD ----------------------------------------------------------------------------------

VARIANTS = [
  dict(gradient='paper', first_step='paper', zero_rule='paper', eps=0.0),
  dict(gradient='same_batch', first_step='paper', zero_rule='paper', eps=0.0),
  dict(gradient='paper', first_step='grown', zero_rule='paper', eps=0.0),
  dict(gradient='paper', first_step='paper', zero_rule='grow', eps=1e-8),
  dict(gradient='same_batch', first_step='grown', zero_rule='grow', eps=1e-8),  # authors' code
]


@pytest.mark.parametrize('seed', [0, 3])
@pytest.mark.parametrize('variant', VARIANTS, ids=lambda v: '-'.join(map(str, v.values())))
def test_delta_sgd_local_step_matches_reference(variant, seed):
  steps = 30
  loss_fn, grad_fn, x0 = ref.logistic_problem(seed, steps)
  expected = ref.delta_sgd(x0, grad_fn, steps, **variant)
  hparams = optimizers.DeltaSGDHParams(**variant)
  model = _ProblemModel(x0, loss_fn, grad_fn)
  xs, states = _run_local_step(delta_sgd.delta_sgd_step(hparams), model, steps)
  _assert_iterates(xs, expected['x'])
  np.testing.assert_allclose(
    [s[delta_sgd.ETA] for s in states], expected['eta'], rtol=RTOL, atol=ETA_ATOL
  )
  # The min picks each branch at least once on this problem, and so do we.
  picked = float(states[-1][delta_sgd.CURVATURE_STEPS])
  assert picked == expected['branch'].count('curvature')
  assert 1 <= picked <= steps - 2
  stats = delta_sgd.statistics(states[-1])
  np.testing.assert_allclose(float(stats['step_size']), np.mean(expected['eta']), rtol=RTOL)


def test_delta_sgd_optimizer_matches_reference_and_its_local_step():
  """The TFF-optimizer face (gradient='paper') is the same rule as the local step."""
  steps = 30
  loss_fn, grad_fn, x0 = ref.logistic_problem(1, steps)
  expected = ref.delta_sgd(x0, grad_fn, steps)
  xs, states = _run_optimizer(optimizers.build_delta_sgd(), x0, grad_fn, steps)
  _assert_iterates(xs, expected['x'])
  np.testing.assert_allclose(
    [s[delta_sgd.ETA] for s in states], expected['eta'], rtol=RTOL, atol=ETA_ATOL
  )
  assert 'curvature' in expected['branch'] and 'growth' in expected['branch']


def test_delta_sgd_variants_are_told_apart():
  """Each code behaviour changes the iterates on this problem (so the tests above discriminate)."""
  steps = 30
  _, grad_fn, x0 = ref.logistic_problem(0, steps)
  paper = ref.delta_sgd(x0, grad_fn, steps)['x']
  for variant in VARIANTS[1:3]:
    assert _max_difference(ref.delta_sgd(x0, grad_fn, steps, **variant)['x'], paper) > SEPARATION


def test_delta_sgd_authors_code_variant_is_the_authors_code():
  steps = 30
  loss_fn, grad_fn, x0 = ref.logistic_problem(2, steps)
  expected = ref.delta_sgd_authors_code(x0, grad_fn, steps, amplifier=0.1)
  hparams = optimizers.DeltaSGDHParams(**VARIANTS[-1])
  model = _ProblemModel(x0, loss_fn, grad_fn)
  xs, states = _run_local_step(delta_sgd.delta_sgd_step(hparams), model, steps)
  _assert_iterates(xs, expected['x'])
  np.testing.assert_allclose(
    [s[delta_sgd.ETA] for s in states], expected['eta'], rtol=RTOL, atol=ETA_ATOL
  )


@pytest.mark.parametrize('gamma', [2.0, 1.0])
def test_delta_sgd_curvature_on_a_quadratic_is_gamma_over_2L(gamma):
  """f = L/2 ||x||^2: g(x_k) - g(x_{k-1}) = L (x_k - x_{k-1}), so the curvature candidate is
  gamma ||dx|| / (2 L ||dx||) = gamma / (2L), i.e. exactly 1/L at gamma = 2."""
  big_l = 4.0
  _, grad_fn = ref.quadratic(big_l, 3)
  x0 = [np.array([1.0, -2.0, 0.5])]
  hparams = optimizers.DeltaSGDHParams(gamma=gamma, eta_0=0.01)
  xs, states = _run_optimizer(optimizers.build_delta_sgd(hparams), x0, grad_fn, 6)
  for s in states[1:]:  # from step 2 on
    np.testing.assert_allclose(float(s[delta_sgd.CURVATURE]), gamma / (2 * big_l), rtol=1e-6)
  # eta_0 = 0.01 is small: the growth candidate wins first, so the first steps follow
  # eta_k = sqrt(1 + delta theta_{k-1}) eta_{k-1}; once it exceeds gamma/(2L) the curvature
  # candidate does (both branches are visited).
  etas = [float(s[delta_sgd.ETA]) for s in states]
  np.testing.assert_allclose(etas[1], 0.01 * np.sqrt(1.1), rtol=1e-6)
  expected = ref.delta_sgd(x0, grad_fn, 6, eta0=0.01, gamma=gamma)
  np.testing.assert_allclose(etas, expected['eta'], rtol=1e-6)


def test_delta_sgd_curvature_branch_on_the_quadratic():
  big_l = 4.0
  _, grad_fn = ref.quadratic(big_l, 3)
  x0 = [np.array([1.0, -2.0, 0.5])]
  xs, states = _run_optimizer(optimizers.build_delta_sgd(), x0, grad_fn, 2)
  # eta_0 = 0.2 < 1/L: step 2's candidates are 1/L = 0.25 and sqrt(1.1) 0.2 = 0.2098.
  np.testing.assert_allclose(float(states[1][delta_sgd.ETA]), 0.2 * np.sqrt(1.1), rtol=1e-6)
  xs, states = _run_optimizer(
    optimizers.build_delta_sgd(optimizers.DeltaSGDHParams(eta_0=0.24, delta=1.0)), x0, grad_fn, 2
  )
  # Now sqrt(2) 0.24 = 0.339 > 1/L: the curvature candidate, exactly 1/L.
  np.testing.assert_allclose(float(states[1][delta_sgd.ETA]), 1 / big_l, rtol=1e-6)
  assert float(states[1][delta_sgd.CURVATURE_STEPS]) == 1


@pytest.mark.parametrize('zero_rule', ['paper', 'grow'])
def test_delta_sgd_zero_gradient_difference_gives_no_nan(zero_rule):
  """A linear loss has a constant gradient: ||dg|| = 0 at every step, so the curvature
  candidate is unbounded and the step grows by sqrt(1 + delta theta) each step."""
  a = [np.array([0.5, -1.0]), np.array([2.0])]
  grad_fn = lambda x, k: [np.array(v) for v in a]
  x0 = [np.zeros(2), np.zeros(1)]
  hparams = optimizers.DeltaSGDHParams(zero_rule=zero_rule)
  xs, states = _run_optimizer(optimizers.build_delta_sgd(hparams), x0, grad_fn, 6)
  expected = ref.delta_sgd(x0, grad_fn, 6, zero_rule=zero_rule)
  etas = [float(s[delta_sgd.ETA]) for s in states]
  assert np.all(np.isfinite(etas)) and np.all(np.isfinite(np.concatenate(xs[-1])))
  np.testing.assert_allclose(etas, expected['eta'], rtol=1e-6)
  assert etas[2] > etas[1] > etas[0] == pytest.approx(0.2)
  _assert_iterates(xs, expected['x'], rtol=1e-6)


def test_delta_sgd_zero_rules_differ_when_the_first_gradient_is_zero():
  """g(x_0) = 0 on minibatch 1: step 1 does not move, so at step 2 ||dx|| = 0 < ||dg||. The
  paper's rule gives eta = gamma 0 / (2 ||dg||) = 0 (the client stops for the round); the
  authors' code ('grow') takes the growth term."""
  _, grad_fn, x0 = ref.logistic_problem(0, 6)
  zero_first = lambda x, k: [np.zeros_like(a) for a in x] if k == 1 else grad_fn(x, k)
  for zero_rule in ('paper', 'grow'):
    hparams = optimizers.DeltaSGDHParams(zero_rule=zero_rule)
    xs, states = _run_optimizer(optimizers.build_delta_sgd(hparams), x0, zero_first, 6)
    expected = ref.delta_sgd(x0, zero_first, 6, zero_rule=zero_rule)
    etas = [float(s[delta_sgd.ETA]) for s in states]
    np.testing.assert_allclose(etas, expected['eta'], rtol=1e-6)
    _assert_iterates(xs, expected['x'])
    assert np.all(np.isfinite(etas)) and np.all(np.isfinite(np.concatenate(xs[-1])))
    if zero_rule == 'paper':
      assert etas[1:] == [0.0] * 5 and float(states[-1][delta_sgd.THETA]) == 0.0
    else:
      assert etas[1] == pytest.approx(0.2 * np.sqrt(1.1)) and min(etas[1:]) > 0


def test_delta_sgd_zero_gradient_everywhere_gives_no_nan():
  grad_fn = lambda x, k: [np.zeros(2)]
  xs, states = _run_optimizer(optimizers.build_delta_sgd(), [np.ones(2)], grad_fn, 5)
  etas = [float(s[delta_sgd.ETA]) for s in states]
  np.testing.assert_allclose(etas, ref.delta_sgd([np.ones(2)], grad_fn, 5)['eta'], rtol=1e-6)
  np.testing.assert_array_equal(xs[-1][0], np.ones(2, np.float32))


def test_delta_sgd_same_batch_takes_two_gradients_per_step():
  steps = 5
  loss_fn, grad_fn, x0 = ref.logistic_problem(0, steps)
  calls = []

  def counting(x, k):
    calls.append(k)
    return grad_fn(x, k)

  model = _ProblemModel(x0, loss_fn, counting)
  hparams = optimizers.DeltaSGDHParams(gradient='same_batch')
  _run_local_step(delta_sgd.delta_sgd_step(hparams), model, steps)
  assert calls == [k for k in range(1, steps + 1) for _ in range(2)]
  calls.clear()
  model = _ProblemModel(x0, loss_fn, counting)
  _run_local_step(delta_sgd.delta_sgd_step(optimizers.DeltaSGDHParams()), model, steps)
  assert calls == list(range(1, steps + 1))


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (dict(eta_0=0.0), 'eta_0 must be > 0'),
    (dict(eta_0=-1.0), 'eta_0 must be > 0'),
    (dict(gamma=0.0), 'gamma must be > 0'),
    (dict(theta_0=-0.5), 'theta_0 must be > 0'),
    (dict(delta=-0.1), 'delta must be >= 0'),
    (dict(gradient='other'), "gradient 'other' is unknown; valid choices: paper, same_batch"),
  ],
)
def test_delta_sgd_bad_hyperparameters(kwargs, message):
  with pytest.raises(ValueError, match=message):
    optimizers.DeltaSGDHParams(**kwargs)


# -- SPS -----------------------------------------------------------------------------------------


@pytest.mark.parametrize('mode', ['smooth_iter', 'constant'])
def test_sps_matches_reference(mode):
  steps = 8
  loss_fn, grad_fn, x0 = ref.logistic_problem(4, steps)
  expected = ref.sps(x0, grad_fn, loss_fn, steps, mode=mode)
  model = _ProblemModel(x0, loss_fn, grad_fn)
  xs, states = _run_local_step(sps.sps_step(optimizers.SPSHParams(mode=mode)), model, steps)
  # Uncapped ('constant'), the Polyak steps here reach 21 (vs 0.41 capped), which amplifies
  # float32 rounding 10-fold.
  rtol = RTOL if mode == 'smooth_iter' else 10 * RTOL
  _assert_iterates(xs, expected['x'], rtol=rtol)
  np.testing.assert_allclose([s[sps.ETA] for s in states], expected['eta'], rtol=rtol)
  other = ref.sps(
    x0, grad_fn, loss_fn, steps, mode={'smooth_iter': 'constant'}.get(mode, 'smooth_iter')
  )
  assert _max_difference(xs, other['x']) > SEPARATION


def test_sps_small_gradient_rule_of_smooth_iter():
  """The official smooth_iter takes a zero step when ||g|| < 1e-8, and caps the next step's
  growth from that zero."""
  steps = 4
  loss_fn, grad_fn, x0 = ref.logistic_problem(4, steps)
  tiny = lambda x, k: [1e-10 * g for g in grad_fn(x, k)] if k == 2 else grad_fn(x, k)
  expected = ref.sps(x0, tiny, loss_fn, steps, grad_norm_tol=1e-8)
  model = _ProblemModel(x0, loss_fn, tiny)
  xs, states = _run_local_step(sps.sps_step(), model, steps)
  etas = [float(s[sps.ETA]) for s in states]
  np.testing.assert_allclose(etas, expected['eta'], rtol=RTOL)
  assert etas[1:] == [0.0] * 3
  _assert_iterates(xs, expected['x'])


def test_sps_step_cap_of_constant_mode():
  steps = 6
  loss_fn, grad_fn, x0 = ref.logistic_problem(4, steps)
  expected = ref.sps(x0, grad_fn, loss_fn, steps, mode='constant', eta_max=0.5)
  model = _ProblemModel(x0, loss_fn, grad_fn)
  hparams = optimizers.SPSHParams(mode='constant', eta_max=0.5)
  xs, states = _run_local_step(sps.sps_step(hparams), model, steps)
  _assert_iterates(xs, expected['x'])
  assert max(float(s[sps.ETA]) for s in states) == pytest.approx(0.5)


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (dict(c=0.0), 'c must be > 0'),
    (dict(c=-1.0), 'c must be > 0'),
    (dict(mode='x'), 'mode'),
    (dict(eta_max=0.5), "eta_max caps mode 'constant' only"),
  ],
)
def test_sps_bad_hyperparameters(kwargs, message):
  with pytest.raises(ValueError, match=message):
    optimizers.SPSHParams(**kwargs)


# -- Adam, Adagrad, SGD(M) ----------------------------------------------------------------------


def _config(name, **kwargs):
  return optimizers.ClientOptimizerConfig(name=name, **kwargs)


@pytest.mark.parametrize(
  'config, reference',
  [
    (_config('sgd', learning_rate=0.3), lambda x0, g, k: ref.sgd(x0, g, k, 0.3)),
    (
      _config('sgdm', learning_rate=0.1, momentum=0.9),
      lambda x0, g, k: ref.sgdm(x0, g, k, 0.1, 0.9),
    ),
    (_config('adam', learning_rate=0.01), lambda x0, g, k: ref.adam_keras(x0, g, k, 0.01)),
    (
      _config('adam', learning_rate=0.01, beta_1=0.5, beta_2=0.9, epsilon=1e-3),
      lambda x0, g, k: ref.adam_keras(x0, g, k, 0.01, beta_1=0.5, beta_2=0.9, eps=1e-3),
    ),
    (_config('adagrad', learning_rate=0.05), lambda x0, g, k: ref.adagrad_torch(x0, g, k, 0.05)),
  ],
  ids=['sgd', 'sgdm', 'adam', 'adam-hparams', 'adagrad'],
)
def test_gradient_optimizers_match_reference(config, reference):
  steps = 8
  _, grad_fn, x0 = ref.logistic_problem(5, steps)
  xs, _ = _run_optimizer(optimizers.build_client_optimizer(config), x0, grad_fn, steps)
  _assert_iterates(xs, reference(x0, grad_fn, steps)['x'])


def test_adam_is_within_float_noise_of_pytorch_adam():
  """Keras/TFF Adam vs PyTorch's (eps on sqrt(v) vs on sqrt(v_hat)): below 1e-6 here."""
  steps = 8
  _, grad_fn, x0 = ref.logistic_problem(5, steps)
  xs, _ = _run_optimizer(
    optimizers.build_client_optimizer(_config('adam', learning_rate=0.01)), x0, grad_fn, steps
  )
  assert _max_difference(xs, ref.adam_torch(x0, grad_fn, steps, 0.01)['x']) < 1e-6


def test_adagrad_differs_from_tffs_builtin():
  """TFF's build_adagrad (eps inside the sqrt, accumulator from 0.1) is not PyTorch's."""
  steps = 8
  _, grad_fn, x0 = ref.logistic_problem(5, steps)
  ours, _ = _run_optimizer(
    optimizers.build_client_optimizer(_config('adagrad', learning_rate=0.05)), x0, grad_fn, steps
  )
  tffs, _ = _run_optimizer(tff.learning.optimizers.build_adagrad(0.05), x0, grad_fn, steps)
  assert _max_difference(ours, tffs) > SEPARATION


def test_rules_needing_more_than_gradients_are_not_tff_optimizers():
  with pytest.raises(ValueError, match="'sps' needs more than a gradient"):
    optimizers.build_client_optimizer(_config('sps'))
  same_batch = optimizers.DeltaSGDHParams(gradient='same_batch')
  with pytest.raises(ValueError, match="'delta_sgd' needs more than a gradient"):
    optimizers.build_client_optimizer(_config('delta_sgd', delta_sgd=same_batch))
  assert isinstance(
    optimizers.build_client_optimizer(_config('delta_sgd')), tff.learning.optimizers.Optimizer
  )


def test_unknown_client_optimizer():
  with pytest.raises(ValueError, match="unknown client optimizer 'lamb'; valid choices: sgd, sgdm"):
    _config('lamb')


def test_delta_sgd_in_tffs_own_fed_avg():
  """Delta-SGD (paper rule) is a client optimizer of TFF's build_weighted_fed_avg as is."""

  def model_fn():
    keras_model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32)),
    )

  process = tff.learning.algorithms.build_weighted_fed_avg(
    model_fn,
    client_optimizer_fn=optimizers.build_delta_sgd(),
    server_optimizer_fn=optimizers.build_fedavg_sgd(1.0),
  )
  rng = np.random.default_rng(0)
  data = [
    tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 3, 16).astype(np.int32))
    ).batch(4)
    for _ in range(2)
  ]
  state = process.initialize()
  losses = []
  for _ in range(3):
    output = process.next(state, data)
    state = output.state
    losses.append(output.metrics['client_work']['train']['loss'])
  assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.parametrize('name', ['delta_sgd', 'sps'])
def test_scaffold_control_variate_with_adaptive_steps(name):
  """Under SCAFFOLD, c_i+ = c_i - c + (x_t - y) / (sum of the steps taken): the step-weighted
  mean of the corrected gradients (K eta_l for SGD), checked against the NumPy rule run on
  the corrected gradient g - c_i + c in the order the local loop visits the minibatches."""
  steps = 6
  loss_fn, grad_fn, x0 = ref.logistic_problem(7, steps)
  c = [np.full(a.shape, 0.03) for a in x0]
  c_i = [np.linspace(-0.05, 0.05, a.size).reshape(a.shape) for a in x0]
  seed = np.array([1, 5], np.int64)
  perm = seeds.epoch_permutations(steps, 1, tf.constant(seed)).numpy()[0]
  corrected = lambda x, k: [
    g + ci - cc for g, ci, cc in zip(grad_fn(x, int(perm[k - 1]) + 1), c, c_i)
  ]
  if name == 'delta_sgd':
    expected = ref.delta_sgd(x0, corrected, steps)
  else:
    loss_k = lambda x, k: loss_fn(x, int(perm[k - 1]) + 1)
    expected = ref.sps(x0, corrected, loss_k, steps, grad_norm_tol=1e-8)
  model = _ProblemModel(x0, loss_fn, grad_fn)
  model.non_trainable_variables = []
  algorithm = algorithms.build_scaffold(
    lambda: model,
    algorithms.ClientTrainingConfig(_config(name), batch_size=1),
    optimizers.build_fedavg_sgd(1.0),
    num_clients=10,
  )
  output = algorithm.client_update(
    model,
    tff.learning.models.ModelWeights([tf.constant(a, tf.float32) for a in x0], []),
    {'k': tf.constant(np.arange(1, steps + 1), tf.int64)},
    tf.constant(seed),
    tf.constant(2.0),  # eta_l: unused by these rules, and far from their mean step
    tuple(tf.constant(a, tf.float32) for a in c),
    tuple(tf.constant(a, tf.float32) for a in c_i),
  )
  y = expected['x'][-1]
  total_step = sum(expected['eta'])
  for ours, x, yy, ci, cc in zip(output.state, x0, y, c_i, c):
    np.testing.assert_allclose(ours.numpy(), ci - cc + (x - yy) / total_step, rtol=1e-4, atol=1e-6)
  for u, x, yy in zip(output.update, x0, y):
    np.testing.assert_allclose(u.numpy(), x - yy, rtol=1e-4, atol=1e-6)
  assert float(output.stats['step_size']) == pytest.approx(total_step / steps, rel=1e-4)
  assert abs(total_step / steps - 2.0) > 0.5  # so K eta_l in place of the sum would fail


def test_scaffold_refuses_preconditioned_client_optimizers():
  with pytest.raises(ValueError, match="client optimizer 'adagrad' preconditions per coordinate"):
    algorithms.build_scaffold(
      lambda: None,
      algorithms.ClientTrainingConfig(_config('adagrad', learning_rate=0.1)),
      optimizers.build_fedavg_sgd(1.0),
      num_clients=10,
    )
