"""DoG and L-DoG (Ivgi et al. 2023) against the independent float64 NumPy reference.

tests/reference/dog_numpy.py was written from the paper's formula and the authors' package
without reading `tff_adaptive` (its self-check holds it to a transcription of the package's
torch step). Here the library's float32 optimizer takes 25 steps on a three-tensor noisy
quadratic whose tensors have different curvatures (so DoG's one step size and L-DoG's three
differ), in each of the options (the package's defaults, the paper's eps = 0 with a larger
r_eps, the package's init_eta); then the closed forms of the first two steps, the reductions,
the zero-gradient guard, the stacked form of the vectorised engine against one client at a time,
and DoG as a client optimizer of TFF's own FedAvg.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests.reference import dog_numpy as ref
from tff_adaptive import optimizers
from tff_adaptive.engines import stacked_steps
from tff_adaptive.optimizers import dog
from tff_adaptive.optimizers.config import DoGHParams

SHAPES = [(5, 3), (3,), (4,)]
SCALES = [1.0, 8.0, 0.25]  # per-tensor curvatures: L-DoG's step sizes differ from DoG's
STEPS = 25
RTOL = 2e-5  # float32 vs float64 after 25 steps, relative to the distance moved
ATOL = 1e-9  # the float32 rounding of x_0's 22 coordinates (of size ~1e-3)


def _problem(seed=0):
  rng = np.random.default_rng(seed)
  x_star = [rng.normal(size=s) for s in SHAPES]
  # x_0 near 0 (as a network's small initial weights): float32 resolves the package's first
  # steps (~1e-6) to ~1e-4 of their length; around coordinates of size 1 it would not.
  x0 = [(1e-3 * rng.normal(size=s)).astype(np.float32).astype(np.float64) for s in SHAPES]

  def grad_fn(x, k):  # a different "minibatch" every step: a k-dependent perturbation
    return [s * (a - b) + 0.05 * np.sin(k * (a + 1)) for s, a, b in zip(SCALES, x, x_star)]

  return x0, grad_fn


def _run(optimizer, x0, grad_fn, steps=STEPS):
  """x_k = optimizer.next(x_{k-1}, g(x_{k-1}; k)) in float32; returns (iterates, last state)."""
  x = [tf.constant(np.asarray(a, np.float32)) for a in x0]
  state = optimizer.initialize([tf.TensorSpec(a.shape, tf.float32) for a in x])
  xs = [[a.numpy() for a in x]]
  for k in range(1, steps + 1):
    g = [tf.constant(np.float32(a)) for a in grad_fn([a.numpy().astype(np.float64) for a in x], k)]
    state, x = optimizer.next(state, x, g)
    xs.append([a.numpy() for a in x])
  return xs, state


def _distance(a, b):
  return float(np.sqrt(sum(np.sum((np.asarray(u, np.float64) - v) ** 2) for u, v in zip(a, b))))


OPTIONS = {
  'package': DoGHParams(),
  'paper-eps0-reps1e-2': DoGHParams(reps_rel=1e-2, eps=0.0),
  'init_eta': DoGHParams(init_eta=1e-3),
}


@pytest.mark.parametrize('layerwise', [False, True], ids=['dog', 'ldog'])
@pytest.mark.parametrize('option', list(OPTIONS))
def test_iterates_match_the_reference(layerwise, option):
  hparams = OPTIONS[option]
  x0, grad_fn = _problem()
  want = ref.dog_client(
    x0,
    grad_fn,
    STEPS,
    gamma=None,
    layerwise=layerwise,
    reps_rel=hparams.reps_rel,
    eps=hparams.eps,
    init_eta=hparams.init_eta,
  )
  build = dog.build_ldog if layerwise else dog.build_dog
  got, state = _run(build(hparams), x0, grad_fn)
  moved = _distance(want['x'][-1], x0)
  assert moved > 1e-4  # it moved (700x its first step), so the comparison is about something
  for k, (ours, theirs) in enumerate(zip(got, want['x'])):
    assert _distance(ours, theirs) <= RTOL * _distance(theirs, x0) + ATOL, f'iterate {k}'
  # The state after the last step: rbar and G as the reference keeps them.
  rbar = np.asarray(want['rbar'][-1], np.float64)
  big_g = np.asarray(want['G'][-1], np.float64)
  np.testing.assert_allclose(np.asarray(state[dog.RBAR]), rbar, rtol=1e-4)
  np.testing.assert_allclose(np.asarray(state[dog.G]), big_g, rtol=1e-4)
  stats = dog.statistics(state)
  # The mean step size over the steps (and over the tensors for L-DoG).
  np.testing.assert_allclose(float(stats['step_size']), np.mean(want['eta']), rtol=1e-4)
  np.testing.assert_allclose(float(stats['distance']), np.mean(rbar), rtol=1e-4)


def test_the_options_and_rules_are_told_apart():
  """Each option and rule changes the iterates by far more than the tolerance above."""
  x0, grad_fn = _problem()
  finals = {
    (name, layerwise): _run((dog.build_ldog if layerwise else dog.build_dog)(h), x0, grad_fn)[0][-1]
    for name, h in OPTIONS.items()
    for layerwise in (False, True)
  }
  keys = list(finals)
  for i, a in enumerate(keys):
    for b in keys[i + 1 :]:
      assert _distance(finals[a], finals[b]) > 1e-5, (a, b)  # 100x the tolerance above


def test_first_two_steps_closed_form():
  """eta_0 = r_eps / ||g_0||, so x_1 is r_eps from x_0 (eps = 0); rbar_1 = max(r_eps, ||x_1 -
  x_0||) = r_eps and G_1 = ||g_0||^2 + ||g_1||^2."""
  x0, grad_fn = _problem(3)
  hparams = DoGHParams(reps_rel=1e-3, eps=0.0)
  xs, _ = _run(dog.build_dog(hparams), x0, grad_fn, steps=1)
  r_eps = 1e-3 * (1.0 + np.sqrt(sum(np.sum(np.float32(a).astype(np.float64) ** 2) for a in x0)))
  assert _distance(xs[1], x0) == pytest.approx(r_eps, rel=1e-5)
  xs2, state = _run(dog.build_dog(hparams), x0, grad_fn, steps=2)
  g0 = grad_fn([np.asarray(a, np.float64) for a in xs2[0]], 1)
  g1 = grad_fn([np.asarray(a, np.float64) for a in xs2[1]], 2)
  big_g = sum(np.sum(g**2) for g in g0) + sum(np.sum(g**2) for g in g1)
  assert float(state[dog.G]) == pytest.approx(big_g, rel=1e-5)
  assert float(state[dog.RBAR]) == pytest.approx(r_eps, rel=1e-5)
  assert float(state[dog.ETA]) == pytest.approx(r_eps / np.sqrt(big_g), rel=1e-5)


def test_ldog_on_a_one_tensor_model_is_dog():
  rng = np.random.default_rng(2)
  x0 = [rng.normal(size=(6, 2))]
  grad_fn = lambda x, k: [3.0 * x[0] + 0.1 * np.cos(k * x[0])]
  a, _ = _run(dog.build_dog(DoGHParams(reps_rel=1e-2)), x0, grad_fn)
  b, _ = _run(dog.build_ldog(DoGHParams(reps_rel=1e-2)), x0, grad_fn)
  assert _distance(a[-1], x0) > 1e-2
  for u, v in zip(a, b):
    np.testing.assert_array_equal(u[0], v[0])


def test_a_zero_first_gradient_with_eps_0_takes_no_step_instead_of_nan():
  x0 = [np.ones((2, 2))]
  grads = iter([[np.zeros((2, 2))], [np.ones((2, 2))]])
  xs, state = _run(dog.build_dog(DoGHParams(eps=0.0)), x0, lambda x, k: next(grads), steps=2)
  np.testing.assert_array_equal(xs[1][0], x0[0])  # no step on G_0 = 0
  assert np.all(np.isfinite(xs[2][0])) and not np.array_equal(xs[2][0], x0[0])
  assert float(state[dog.STEP]) == 2


@pytest.mark.parametrize('layerwise', [False, True], ids=['dog', 'ldog'])
def test_the_stacked_form_steps_each_client_as_alone(layerwise):
  """K = 3 clients stacked (engine vectorised), each from its own x_0 with its own gradients;
  client 2 stops after 4 steps (inactive): each client's iterates are the ones it takes alone."""
  hparams = DoGHParams(reps_rel=1e-2)
  optimizer = (dog.build_ldog if layerwise else dog.build_dog)(hparams)
  problems = [_problem(seed) for seed in range(3)]
  stepper = stacked_steps.dog_steps(None, types_rule(optimizer))
  specs = [tf.TensorSpec(s, tf.float32) for s in SHAPES]
  params = tuple(tf.constant(np.stack([p[0][i] for p in problems]), tf.float32) for i in range(3))
  state = stepper.init(params, specs, tf.constant(1.0), 3)
  steps = [12, 12, 4]
  for k in range(1, 13):
    grads = tuple(
      tf.constant(
        np.stack(
          [
            p[1]([np.asarray(t[c], np.float64) for t in params], k)[i]
            for c, p in enumerate(problems)
          ]
        ),
        tf.float32,
      )
      for i in range(3)
    )
    active = tf.constant([k <= s for s in steps])
    state, params = stepper.step(state, params, grads, None, None, active)
  stats = stepper.statistics(state)
  for c, (x0, grad_fn) in enumerate(problems):
    alone, alone_state = _run(optimizer, x0, grad_fn, steps=steps[c])
    np.testing.assert_allclose([t[c] for t in params][0], alone[-1][0], rtol=1e-5, atol=1e-6)
    for i in range(3):
      np.testing.assert_allclose(params[i][c], alone[-1][i], rtol=1e-5, atol=1e-6)
    alone_stats = dog.statistics(alone_state)
    for key, value in alone_stats.items():
      assert float(stats[key][c]) == pytest.approx(float(value), rel=1e-5), key


def types_rule(optimizer):
  return optimizers.ClientRule(lambda lr, transform: None, dog.statistics, optimizer)


def test_dog_is_a_client_optimizer_of_tffs_own_fed_avg():
  """`build_dog()` drops into `tff.learning.algorithms.build_weighted_fed_avg` as is; its state
  starts afresh for every client (x_0 = the broadcast model), so the loss falls."""

  def model_fn():
    keras_model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(4,))])
    return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32)),
    )

  process = tff.learning.algorithms.build_weighted_fed_avg(
    model_fn,
    client_optimizer_fn=dog.build_dog(DoGHParams(reps_rel=1e-2)),
    server_optimizer_fn=optimizers.build_fedavg_sgd(1.0),
  )
  rng = np.random.default_rng(0)
  w = rng.normal(size=(4, 3))
  data = []
  for _ in range(3):
    x = rng.normal(size=(32, 4)).astype(np.float32)
    data.append(
      tf.data.Dataset.from_tensor_slices((x, np.argmax(x @ w, 1).astype(np.int32))).batch(4)
    )
  state = process.initialize()
  losses = []
  for _ in range(4):
    output = process.next(state, data)
    state = output.state
    losses.append(output.metrics['client_work']['train']['loss'])
  assert np.all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize(
  'kwargs, message',
  [
    (dict(reps_rel=0.0), r'dog reps_rel=0.0 is invalid; expected a finite number > 0'),
    (dict(eps=-1.0), r'dog eps=-1.0 is invalid; expected a finite number >= 0'),
    (dict(init_eta=0.0), r'dog init_eta=0.0 is invalid; expected a finite number > 0'),
  ],
)
def test_bad_hyperparameters(kwargs, message):
  with pytest.raises(ValueError, match=message):
    DoGHParams(**kwargs)
