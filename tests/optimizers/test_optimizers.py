"""Tests of tff_adaptive.optimizers (Reddi et al. 2021, "Adaptive Federated Optimization").

The library's float32 results are compared with the float64 NumPy references in
tests/reference/fedopt_numpy.py, written independently from Algorithm 2 and App. B/D.
Every comparison that should discriminate between variants asserts both that the result
matches its own reference (RTOL/ATOL) and that it is farther than SEPARATION, which is 100
times the tolerance at |x| ~ 1, from the competing variant's reference.
"""

import collections
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import fedopt_numpy as ref
from tff_adaptive import optimizers

# float32 (library) vs float64 (reference) after a handful of steps.
RTOL = 1e-5
ATOL = 1e-6
# Two results count as "clearly different" when some entry differs by more than this.
SEPARATION = 1e-3

# A nest of a [3, 2] matrix and a [2] vector. Entries of the pseudo-gradients have scales from
# 3e-3 to 2, so that for some entries sqrt(v_t) is below or near tau and for others far above.
X0 = [
  np.array([[0.5, -1.0], [2.0, 0.1], [-0.3, 0.0]], np.float32),
  np.array([1.5, -0.7], np.float32),
]
SCALES = [
  np.array([[1.0, 0.3], [0.05, 0.01], [0.003, 0.5]]),
  np.array([0.02, 2.0]),
]
NUM_STEPS = 6
ADAPTIVE_RULES = ('adagrad', 'adam', 'yogi')
VARIANTS = ('published', 'algorithm2')
BUILDERS = {
  'adagrad': optimizers.build_fedadagrad,
  'adam': optimizers.build_fedadam,
  'yogi': optimizers.build_fedyogi,
}


def _pseudo_gradients(seed, scale=1.0, num_steps=NUM_STEPS):
  """A different, mixed-sign pseudo-gradient every step (float32, as the server sees it)."""
  rng = np.random.default_rng(seed)
  return [
    [(scale * s * rng.normal(size=s.shape)).astype(np.float32) for s in SCALES]
    for _ in range(num_steps)
  ]


def _run(optimizer, grads, x0=X0):
  """Runs optimizer.next eagerly over grads; returns the final state and [x_1, ..., x_T]."""
  specs = [tf.TensorSpec(a.shape, tf.float32) for a in x0]
  state = optimizer.initialize(specs)
  weights = [tf.constant(a) for a in x0]
  iterates = []
  for g in grads:
    state, weights = optimizer.next(state, weights, [tf.constant(gi) for gi in g])
    iterates.append([np.asarray(w) for w in weights])
  return state, iterates


def _assert_iterates_close(actual, expected, rtol=RTOL, atol=ATOL):
  assert len(actual) == len(expected)
  for step, (a_step, e_step) in enumerate(zip(actual, expected)):
    for a, e in zip(a_step, e_step):
      np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f'step {step}')


def _max_diff(a_iterates, b_iterates):
  return max(
    float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
    for a_step, b_step in zip(a_iterates, b_iterates)
    for a, b in zip(a_step, b_step)
  )


def _other(variant):
  return 'algorithm2' if variant == 'published' else 'published'


# ---------------------------------------------------------------------------------------
# 1. Each adaptive optimizer and variant against the independent reference.
# ---------------------------------------------------------------------------------------

# The paper's defaults except tau = 0.05, so that tau^2 (Algorithm 2's v_{-1}) is not
# negligible next to the small entries' g^2, and TFF's default epsilons (1e-7, 1e-3) are far.
LR = 0.1
TAU = 0.05


def _tff_default(rule, learning_rate):
  return {
    'adagrad': tff.learning.optimizers.build_adagrad,
    'adam': tff.learning.optimizers.build_adam,
    'yogi': tff.learning.optimizers.build_yogi,
  }[rule](learning_rate)


@pytest.mark.parametrize('variant', VARIANTS)
@pytest.mark.parametrize('rule', ADAPTIVE_RULES)
def test_adaptive_matches_own_variant_reference_and_not_the_others(rule, variant):
  grads = _pseudo_gradients(seed=11)
  _, ours = _run(BUILDERS[rule](LR, tau=TAU, variant=variant), grads)

  expected = ref.fedopt(X0, grads, rule, variant, LR, TAU)
  _assert_iterates_close(ours, expected)

  competing = ref.fedopt(X0, grads, rule, _other(variant), LR, TAU)
  assert _max_diff(ours, competing) > SEPARATION
  _, tff_default = _run(_tff_default(rule, LR), grads)
  assert _max_diff(ours, tff_default) > SEPARATION


# Non-default beta_1, beta_2, tau and v_{-1}.
CUSTOM = dict(beta_1=0.5, beta_2=0.9, tau=0.02, v0=0.01)
ADAGRAD_CUSTOM = dict(beta_1=0.3, tau=0.02, v0=0.01)
# Each hyperparameter's default, to show it is honoured (not silently replaced).
DEFAULTS = dict(beta_1=None, beta_2=0.999, tau=1e-3, v0=None)


@pytest.mark.parametrize('variant', VARIANTS)
@pytest.mark.parametrize('rule', ADAPTIVE_RULES)
def test_adaptive_custom_hyperparameters_and_initial_accumulator(rule, variant):
  grads = _pseudo_gradients(seed=12)
  hp = ADAGRAD_CUSTOM if rule == 'adagrad' else CUSTOM
  kwargs = {'initial_accumulator_value' if k == 'v0' else k: v for k, v in hp.items()}
  _, ours = _run(BUILDERS[rule](LR, variant=variant, **kwargs), grads)

  expected = ref.fedopt(X0, grads, rule, variant, LR, **hp)
  _assert_iterates_close(ours, expected)

  for name in hp:
    reset = dict(hp, **{name: DEFAULTS[name]})
    assert _max_diff(ours, ref.fedopt(X0, grads, rule, variant, LR, **reset)) > SEPARATION, name
  if rule == 'adagrad':
    # With v_{-1} given, the FedAdagrad variants coincide (neither is bias-corrected).
    _assert_iterates_close(ours, ref.fedopt(X0, grads, rule, _other(variant), LR, **hp))
  else:
    # With v_{-1} given, the variants differ only in the bias correction.
    competing = ref.fedopt(X0, grads, rule, _other(variant), LR, **hp)
    assert _max_diff(ours, competing) > SEPARATION


# ---------------------------------------------------------------------------------------
# 2. The published variants against TFF's built-ins.
# ---------------------------------------------------------------------------------------


def test_published_fedadagrad_differs_from_tff_build_adagrad():
  grads = _pseudo_gradients(seed=21)
  _, ours = _run(optimizers.build_fedadagrad(LR, tau=TAU), grads)
  _assert_iterates_close(ours, ref.fedopt(X0, grads, 'adagrad', 'published', LR, TAU))

  # TFF's Adagrad: v starts at 0.1, x -= lr g / sqrt(v + epsilon) (epsilon inside the sqrt).
  _, tff_default = _run(tff.learning.optimizers.build_adagrad(LR), grads)
  _assert_iterates_close(tff_default, ref.tff_adagrad(X0, grads, LR, 0.1, 1e-7))
  assert _max_diff(ours, tff_default) > SEPARATION

  # Even with v starting at 0 and epsilon = tau, epsilon inside the sqrt is another method.
  _, tff_matched = _run(
    tff.learning.optimizers.build_adagrad(LR, initial_preconditioner_value=0.0, epsilon=TAU), grads
  )
  _assert_iterates_close(tff_matched, ref.tff_adagrad(X0, grads, LR, 0.0, TAU))
  assert _max_diff(ours, tff_matched) > SEPARATION


def test_published_fedyogi_is_tff_yogi_with_zero_initial_preconditioner():
  # Small tau and small pseudo-gradients (scales 3e-5..2e-2): sqrt(1e-6) = 1e-3 dominates
  # sqrt(v_t) + tau, so TFF's default initial value 1e-6 changes the steps a lot.
  lr, tau = 0.01, 1e-4
  grads = _pseudo_gradients(seed=22, scale=0.01)
  _, ours = _run(optimizers.build_fedyogi(lr, tau=tau), grads)
  _assert_iterates_close(ours, ref.fedopt(X0, grads, 'yogi', 'published', lr, tau))

  _, tff_zero = _run(
    tff.learning.optimizers.build_yogi(lr, epsilon=tau, initial_preconditioner_value=0.0), grads
  )
  _assert_iterates_close(ours, tff_zero, rtol=1e-6, atol=1e-7)

  _, tff_default_v0 = _run(tff.learning.optimizers.build_yogi(lr, epsilon=tau), grads)
  _assert_iterates_close(
    tff_default_v0, ref.fedopt(X0, grads, 'yogi', 'published', lr, tau, v0=1e-6)
  )
  assert _max_diff(ours, tff_default_v0) > SEPARATION
  # Our own implementation (used when v_{-1} > 0) reproduces TFF's default start of 1e-6.
  _, ours_v0 = _run(optimizers.build_fedyogi(lr, tau=tau, initial_accumulator_value=1e-6), grads)
  _assert_iterates_close(ours_v0, tff_default_v0)


def test_published_fedadam_is_tff_adam_with_epsilon_tau():
  grads = _pseudo_gradients(seed=23)
  _, ours = _run(optimizers.build_fedadam(LR, tau=TAU), grads)
  _, tff_adam = _run(tff.learning.optimizers.build_adam(LR, epsilon=TAU), grads)
  _assert_iterates_close(ours, tff_adam, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------
# 3. Reductions.
# ---------------------------------------------------------------------------------------


def test_fedavgm_with_zero_momentum_is_server_sgd():
  grads = _pseudo_gradients(seed=31, num_steps=5)
  lr = 0.7
  _, sgd = _run(optimizers.build_fedavg_sgd(lr), grads)
  _, avgm0 = _run(optimizers.build_fedavgm(lr, momentum=0.0), grads)
  _assert_iterates_close(avgm0, sgd, rtol=1e-7, atol=0.0)
  _assert_iterates_close(sgd, ref.server_sgdm(X0, grads, lr, 0.0))

  # ... and momentum is not ignored when non-zero: u = 0.9 u + g, x -= lr u.
  _, avgm = _run(optimizers.build_fedavgm(lr, momentum=0.9), grads)
  _assert_iterates_close(avgm, ref.server_sgdm(X0, grads, lr, 0.9))
  assert _max_diff(avgm, sgd) > SEPARATION


def test_server_sgd_with_unit_learning_rate_is_model_averaging():
  # x_1 = x_0 - 1 * g_0 = mean of the clients' trained weights, bit for bit in float32.
  grads = _pseudo_gradients(seed=32, num_steps=1)
  _, (x1,) = _run(optimizers.build_fedavg_sgd(1.0), grads)
  for x, x0, g in zip(x1, X0, grads[0]):
    np.testing.assert_array_equal(x, x0 - g)


def test_published_adam_and_yogi_take_the_same_first_step():
  # Published variant, v_{-1} = 0, m_{-1} = 0, same eta_1 = eta sqrt(1 - b2) / (1 - b1):
  #   m_1 = (1 - b1) g_1 for both;
  #   Adam: v_1 = b2 * 0 + (1 - b2) g_1^2 = (1 - b2) g_1^2;
  #   Yogi: v_1 = 0 - (1 - b2) g_1^2 sign(0 - g_1^2) = (1 - b2) g_1^2 wherever g_1^2 > 0
  #         (sign(-g^2) = -1); where g_1 = 0 both give v_1 = 0 and m_1 = 0, so no step.
  # Hence x_1 agrees. At step 2, Adam's v_2 = b2 v_1 + (1 - b2) g_2^2 while Yogi's
  # v_2 = v_1 + (1 - b2) g_2^2 sign(g_2^2 - v_1), which differ, so x_2 does too.
  grads = _pseudo_gradients(seed=33, num_steps=2)
  _, adam = _run(optimizers.build_fedadam(LR, tau=TAU, beta_2=0.9), grads)
  _, yogi = _run(optimizers.build_fedyogi(LR, tau=TAU, beta_2=0.9), grads)
  _assert_iterates_close(yogi[:1], adam[:1], rtol=1e-6, atol=1e-7)
  assert _max_diff(yogi[1:], adam[1:]) > SEPARATION


@pytest.mark.parametrize('variant', VARIANTS)
def test_fedadagrad_without_momentum_has_first_moment_equal_to_pseudo_gradient(variant):
  # beta_1 = 0: m_t = 0 * m_{t-1} + 1 * g_t = g_t exactly; v_t = v_{-1} + sum_{s<=t} g_s^2.
  grads = _pseudo_gradients(seed=34, num_steps=4)
  opt = optimizers.build_fedadagrad(LR, tau=TAU, beta_1=0.0, variant=variant)
  v0 = 0.0 if variant == 'published' else TAU**2
  state = opt.initialize([tf.TensorSpec(a.shape, tf.float32) for a in X0])
  weights = [tf.constant(a) for a in X0]
  sum_sq = [np.full(a.shape, v0) for a in X0]
  for g in grads:
    state, weights = opt.next(state, weights, [tf.constant(gi) for gi in g])
    for m, gi in zip(state['m'], g):
      np.testing.assert_array_equal(np.asarray(m), gi)
    sum_sq = [s + gi.astype(np.float64) ** 2 for s, gi in zip(sum_sq, g)]
    for v, s in zip(state['v'], sum_sq):
      np.testing.assert_allclose(np.asarray(v), s, rtol=RTOL, atol=1e-9)


# ---------------------------------------------------------------------------------------
# 4. Structure: state, hparams, schedules, argument validation, registry.
# ---------------------------------------------------------------------------------------


def _all_configs():
  configs = [
    optimizers.ServerOptimizerConfig(name='sgd', learning_rate=0.5),
    optimizers.ServerOptimizerConfig(name='sgdm', learning_rate=0.5),
  ]
  for rule in ADAPTIVE_RULES:
    for variant in VARIANTS:
      configs.append(
        optimizers.ServerOptimizerConfig(name=rule, learning_rate=LR, tau=TAU, variant=variant)
      )
  return configs


ALL_CONFIGS = _all_configs()
CONFIG_IDS = [f'{c.name}-{c.variant}' for c in ALL_CONFIGS]


@pytest.mark.parametrize('config', ALL_CONFIGS, ids=CONFIG_IDS)
def test_state_holds_learning_rate_under_standard_key(config):
  opt = optimizers.build_server_optimizer(config)
  state = opt.initialize([tf.TensorSpec(a.shape, tf.float32) for a in X0])
  assert tff.learning.optimizers.LEARNING_RATE_KEY == 'learning_rate'
  assert 'learning_rate' in state
  assert float(state['learning_rate']) == pytest.approx(config.learning_rate)
  assert float(opt.get_hparams(state)['learning_rate']) == pytest.approx(config.learning_rate)


@pytest.mark.parametrize('rule', ADAPTIVE_RULES)
def test_hparams_round_trip_and_learning_rate_scales_next_step(rule):
  opt = BUILDERS[rule](LR, tau=TAU, variant='algorithm2')
  # The non-TFF implementation (TFF's own optimizers have their own tests).
  assert isinstance(opt, optimizers.server._AdaptiveServerOptimizer)  # pylint: disable=protected-access
  grads = _pseudo_gradients(seed=41, num_steps=3)
  state, _ = _run(opt, grads[:2])
  x = [tf.constant(a) for a in X0]

  hparams = opt.get_hparams(state)
  assert list(hparams) == ['learning_rate', 'beta_1', 'beta_2', 'epsilon']
  same = opt.set_hparams(state, hparams)
  assert list(same) == list(state)
  tf.nest.map_structure(np.testing.assert_array_equal, same, state)

  # The step -eta m/(sqrt(v)+tau) is linear in eta and m, v do not depend on eta, so
  # tripling the learning rate triples the next step.
  g = [tf.constant(gi) for gi in grads[2]]
  _, x_a = opt.next(state, x, g)
  tripled = opt.set_hparams(state, collections.OrderedDict(learning_rate=3 * LR))
  assert float(opt.get_hparams(tripled)['learning_rate']) == pytest.approx(3 * LR)
  new_state, x_b = opt.next(tripled, x, g)
  assert float(new_state['learning_rate']) == pytest.approx(3 * LR)
  for a, b, x0 in zip(x_a, x_b, X0):
    step_a = np.asarray(a, np.float64) - x0
    step_b = np.asarray(b, np.float64) - x0
    assert np.max(np.abs(step_a)) > SEPARATION
    np.testing.assert_allclose(step_b, 3 * step_a, rtol=1e-4, atol=1e-7)

  with pytest.raises(KeyError, match='momentum'):
    opt.set_hparams(state, {'momentum': 0.5})


@pytest.mark.parametrize('variant', VARIANTS)
@pytest.mark.parametrize('rule', ADAPTIVE_RULES)
def test_schedule_learning_rate_uses_schedule_k_at_step_k(rule, variant):
  # eta_k = 0.2 * 0.5^k for the k-th call of next (k = 0, 1, ...).
  schedule = lambda k: 0.2 * tf.pow(0.5, tf.cast(k, tf.float32))
  rates = [0.2 * 0.5**k for k in range(NUM_STEPS)]
  grads = _pseudo_gradients(seed=42)
  opt = tff.learning.optimizers.schedule_learning_rate(
    BUILDERS[rule](LR, tau=TAU, variant=variant), schedule
  )
  state, ours = _run(opt, grads)
  assert float(state['optimizer']['learning_rate']) == pytest.approx(0.2 * 0.5**NUM_STEPS)
  _assert_iterates_close(ours, ref.fedopt(X0, grads, rule, variant, rates, TAU))
  # Not the unscheduled learning rate, nor the schedule shifted by one step.
  assert _max_diff(ours, ref.fedopt(X0, grads, rule, variant, LR, TAU)) > SEPARATION
  assert _max_diff(ours, ref.fedopt(X0, grads, rule, variant, rates[1:] + [0.0], TAU)) > (
    SEPARATION
  )


_INVALID_ADAPTIVE_ARGS = [
  ('learning_rate', dict(learning_rate=0.0)),
  ('learning_rate', dict(learning_rate=-0.1)),
  ('tau', dict(tau=0.0)),
  ('tau', dict(tau=-1e-3)),
  ('beta_1', dict(beta_1=1.0)),
  ('beta_1', dict(beta_1=-0.1)),
  ('beta_2', dict(beta_2=-0.1)),
  ('beta_2', dict(beta_2=1.0)),
  ('variant', dict(variant='foo')),
  ('initial_accumulator_value', dict(initial_accumulator_value=-1.0)),
]


# build_fedadagrad has no beta_2.
INVALID_ADAPTIVE_ARGS = [
  (rule, name, kwargs)
  for rule in ADAPTIVE_RULES
  for name, kwargs in _INVALID_ADAPTIVE_ARGS
  if not (rule == 'adagrad' and name == 'beta_2')
]


@pytest.mark.parametrize(
  'rule,name,kwargs',
  INVALID_ADAPTIVE_ARGS,
  ids=[f'{r}-{n}={list(k.values())[0]}' for r, n, k in INVALID_ADAPTIVE_ARGS],
)
def test_invalid_adaptive_arguments_raise_value_error_naming_them(rule, name, kwargs):
  args = dict(learning_rate=LR, **kwargs) if 'learning_rate' not in kwargs else kwargs
  with pytest.raises(ValueError, match=name) as info:
    BUILDERS[rule](**args)
  assert str(kwargs[name]) in str(info.value)  # The message shows the bad value too.


@pytest.mark.parametrize(
  'builder,kwargs,name',
  [
    (optimizers.build_fedavg_sgd, dict(learning_rate=0.0), 'learning_rate'),
    (optimizers.build_fedavgm, dict(learning_rate=-1.0), 'learning_rate'),
    (optimizers.build_fedavgm, dict(momentum=1.0), 'momentum'),
    (optimizers.build_fedavgm, dict(momentum=-0.5), 'momentum'),
  ],
)
def test_invalid_sgd_arguments_raise_value_error_naming_them(builder, kwargs, name):
  with pytest.raises(ValueError, match=name):
    builder(**kwargs)


def test_unknown_server_optimizer_name_lists_valid_names():
  with pytest.raises(ValueError, match="'nope'") as info:
    optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig(name='nope'))
  for valid in ('sgd', 'sgdm', 'adagrad', 'adam', 'yogi'):
    assert valid in str(info.value)


def test_config_invalid_hyperparameter_raises_through_registry():
  with pytest.raises(ValueError, match='tau'):
    optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig(name='adam', tau=0.0))


# ---------------------------------------------------------------------------------------
# 5. One convergence problem for every optimizer (checks the sign convention).
# ---------------------------------------------------------------------------------------

# f(x) = 0.5 * sum_j a_j (x_j - c_j)^2, condition number 100, exact gradient a * (x - c) as
# the pseudo-gradient; from x = 0, f = 0.5 * (1*1 + 3*4 + 10*0.25 + 30*9 + 100*1) = 192.75.
QUAD_A = np.array([1.0, 3.0, 10.0, 30.0, 100.0])
QUAD_C = np.array([1.0, -2.0, 0.5, 3.0, -1.0])
QUAD_START_LOSS = 192.75
QUAD_STEPS = 300
# 5 orders of magnitude below the start; a wrong sign diverges. Measured final losses:
# sgd 5.8e-5, adagrad 2.7e-7, sgdm/adam/yogi < 1e-11.
QUAD_THRESHOLD = 1e-3
CONVERGENCE_CASES = {
  # SGD: lr < 2 / a_max = 0.02; slowest mode contracts by (1 - 0.015)^300 ~ 1e-2.
  'sgd': lambda: optimizers.build_fedavg_sgd(0.015),
  'sgdm': lambda: optimizers.build_fedavgm(0.003, momentum=0.9),
  'adagrad-published': lambda: optimizers.build_fedadagrad(0.3, variant='published'),
  'adagrad-algorithm2': lambda: optimizers.build_fedadagrad(0.3, variant='algorithm2'),
  'adam-published': lambda: optimizers.build_fedadam(0.1, variant='published'),
  'adam-algorithm2': lambda: optimizers.build_fedadam(0.1, variant='algorithm2'),
  'yogi-published': lambda: optimizers.build_fedyogi(0.1, variant='published'),
  'yogi-algorithm2': lambda: optimizers.build_fedyogi(0.1, variant='algorithm2'),
}


def _quadratic_loss(x):
  return 0.5 * float(np.sum(QUAD_A * (np.asarray(x, np.float64) - QUAD_C) ** 2))


@pytest.mark.parametrize('name', list(CONVERGENCE_CASES))
def test_every_optimizer_minimises_the_shared_quadratic(name):
  opt = CONVERGENCE_CASES[name]()
  a = tf.constant(QUAD_A, tf.float32)
  c = tf.constant(QUAD_C, tf.float32)
  x = tf.zeros([5], tf.float32)
  assert _quadratic_loss(x) == pytest.approx(QUAD_START_LOSS)
  state = opt.initialize(tf.TensorSpec([5], tf.float32))
  next_fn = tf.function(opt.next)
  for _ in range(QUAD_STEPS):
    state, x = next_fn(state, x, a * (x - c))
  assert _quadratic_loss(x) < QUAD_THRESHOLD


# ---------------------------------------------------------------------------------------
# Tracing inside TFF.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize('config', ALL_CONFIGS, ids=CONFIG_IDS)
def test_optimizer_traces_as_tff_computation(config):
  opt = optimizers.build_server_optimizer(config)
  specs = [tf.TensorSpec(a.shape, tf.float32) for a in X0]
  weights_type = tff.types.tensorflow_to_type(specs)

  @tff.tensorflow.computation
  def initialize_fn():
    return opt.initialize(specs)

  @tff.tensorflow.computation(initialize_fn.type_signature.result, weights_type, weights_type)
  def next_fn(state, weights, gradients):
    return opt.next(state, weights, gradients)

  grads = _pseudo_gradients(seed=51, num_steps=3)
  state, weights = initialize_fn(), list(X0)
  traced = []
  for g in grads:
    state, weights = next_fn(state, weights, g)
    traced.append([np.asarray(w) for w in weights])
  _, eager = _run(opt, grads)
  _assert_iterates_close(traced, eager, rtol=1e-6, atol=1e-7)
  assert _max_diff(traced, [X0] * 3) > SEPARATION


def test_algorithm2_rejects_initial_accumulator_below_tau_squared():
  # Algorithm 2, line 1: v_{-1} >= tau^2.
  with pytest.raises(ValueError, match='initial_accumulator_value'):
    optimizers.build_fedadam(0.1, tau=0.1, initial_accumulator_value=1e-4, variant='algorithm2')
  optimizers.build_fedadam(0.1, tau=0.1, initial_accumulator_value=1e-2, variant='algorithm2')


@pytest.mark.parametrize('variant', ['published', 'algorithm2'])
@pytest.mark.parametrize('rule', ['adagrad', 'adam', 'yogi'])
def test_tau_is_settable_under_the_same_hparam_key_for_every_class(rule, variant):
  opt = optimizers.build_server_optimizer(
    optimizers.ServerOptimizerConfig(name=rule, learning_rate=0.1, tau=0.01, variant=variant)
  )
  state = opt.initialize(tf.TensorSpec([2], tf.float32))
  hparams = opt.get_hparams(state)
  assert float(hparams['epsilon']) == pytest.approx(0.01)
  hparams['epsilon'] = 0.5
  assert float(opt.get_hparams(opt.set_hparams(state, hparams))['epsilon']) == 0.5
