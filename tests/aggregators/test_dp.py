"""User-level DP (`aggregators.dp_mean`, --dp): clip, sum, noise, then the server optimizer.

Held to NumPy written from the equations of McMahan et al. 2018 (clip to C, noise z C on the
sum, divide by m) and Andrew et al. 2021 (the geometric clip update), over several rounds; both
faces (the TFF factory, the in-process fold) and both engines to each other, with noise; the
order (the server optimizer steps on the noised mean). The noise's law, measured for every
mechanism against the accountant's inputs: tests/aggregators/test_dp_noise.py.
"""

import collections
import dataclasses

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import differential_privacy

from tests.reference import fedopt_numpy
from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.aggregators import dp
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.core import dp_noise
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.optimizers import fedopt_math
from tff_adaptive.privacy import config as privacy_config

# -- NumPy references. ----------------------------------------------------------------------


def clip_numpy(update, clip):
  """u min(1, C / ||u||), ||u|| the global L2 norm over the nest's leaves."""
  norm = np.sqrt(sum(float(np.sum(np.square(leaf, dtype=np.float64))) for leaf in update))
  scale = min(1.0, clip / norm) if norm > 0 else 1.0
  return [np.asarray(leaf, np.float64) * scale for leaf in update], norm


def clipped_mean_numpy(updates, clip, m):
  """sum_i clip(u_i) / m."""
  clipped = [clip_numpy(u, clip)[0] for u in updates]
  return [sum(c[j] for c in clipped) / m for j in range(len(updates[0]))]


def adaptive_clips_numpy(norms_by_round, clip, target, lr):
  """C_t of Andrew et al. Algorithm 1 without noise: b = mean [||u_i|| <= C_t],
  C_{t+1} = C_t exp(-lr (b - target)); returns [C_1, C_2, ...] (after each round)."""
  clips = []
  for norms in norms_by_round:
    b = np.mean([n <= clip for n in norms])
    clip = clip * np.exp(-lr * (b - target))
    clips.append(clip)
  return clips


# -- Helpers. ---------------------------------------------------------------------------------

SPECS = (tf.TensorSpec([3], tf.float32), tf.TensorSpec([2, 2], tf.float32))


def _updates(rng, k, scales):
  return [
    (
      (rng.normal(size=3) * s).astype(np.float32),
      (rng.normal(size=(2, 2)) * s).astype(np.float32),
    )
    for s in scales[:k]
  ]


def _fold_rounds(aggregation, rounds, specs=SPECS):
  """Runs the fold over rounds of client updates; [(result, measurements)] per round."""
  state = aggregation.initialize(specs)
  out = []
  for updates in rounds:
    acc = aggregation.zero(specs, state)
    for u in updates:
      acc = aggregation.accumulate(acc, tf.nest.map_structure(tf.constant, u), 1.0)
    result, state, measurements = aggregation.report(acc, state)
    out.append((tf.nest.map_structure(np.asarray, result), measurements))
  return out


def _factory_rounds(aggregation, rounds, specs=SPECS):
  """Runs the TFF face (weights given and ignored) over the same rounds."""
  process = aggregation.factory().create(
    tff.types.tensorflow_to_type(specs), tff.TensorType(np.float32)
  )
  state = process.initialize()
  out = []
  for updates in rounds:
    output = process.next(state, updates, [float(i + 1) for i in range(len(updates))])
    state = output.state
    out.append((output.result, output.measurements))
  return out


def _flat(nest):
  return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in tf.nest.flatten(nest)])


# -- The mechanism. ---------------------------------------------------------------------------


def test_the_mechanism_names_agree():
  assert tuple(privacy_config.DP_MECHANISMS)[1:-1] == dp.MECHANISMS
  assert tuple(privacy_config.DP_MECHANISMS)[-1] == privacy_config.DISTRIBUTED_SKELLAM
  assert privacy_config.DP_MECHANISMS.names[0] == privacy_config.NO_DP


@pytest.mark.parametrize(
  'mechanism,kwargs', [('gaussian_fixed', {}), ('tree', {'restart_rounds': 1})]
)
def test_fixed_clip_without_noise_is_the_clipped_mean_over_rounds(mechanism, kwargs):
  rng = np.random.default_rng(0)
  clip, m = 1.5, 4
  # Norms well above and below C in every round, and a round of 3 clients (m stays 4).
  rounds = [_updates(rng, 4, [0.1, 2.0, 0.5, 5.0]), _updates(rng, 3, [3.0, 0.2, 1.0])]
  aggregation = aggregators.dp_mean(mechanism, 0.0, m, clip, **kwargs)
  for faces in (_fold_rounds(aggregation, rounds), _factory_rounds(aggregation, rounds)):
    for (result, _), updates in zip(faces, rounds):
      expected = clipped_mean_numpy(updates, clip, m)
      np.testing.assert_allclose(_flat(result), _flat(expected), rtol=1e-6, atol=1e-7)
  norms = [clip_numpy(u, clip)[1] for u in rounds[0]]
  assert min(norms) < clip < max(norms)  # the inputs tell clipped from unclipped


def test_a_non_finite_update_counts_as_zeros():
  rng = np.random.default_rng(1)
  updates = _updates(rng, 3, [0.5, 2.0, 1.0])
  broken = list(updates)
  broken[1] = (np.full(3, np.nan, np.float32), updates[1][1])
  zeroed = list(updates)
  zeroed[1] = tuple(np.zeros_like(a) for a in updates[1])
  for mechanism in dp.MECHANISMS:
    aggregation = aggregators.dp_mean(mechanism, 0.3, 3, 1.0, noise_seed=3)
    for faces in (_fold_rounds, _factory_rounds):
      got, want = faces(aggregation, [broken]), faces(aggregation, [zeroed])
      np.testing.assert_array_equal(_flat(got[0][0]), _flat(want[0][0]))
      assert np.all(np.isfinite(_flat(got[0][0])))


# The noise's law, stream by stream, for every mechanism: tests/aggregators/test_dp_noise.py.


def test_adaptive_clip_follows_the_geometric_update_and_reaches_the_target_quantile():
  # Without noise (z = 0 sets sigma_b = 0) the clip is deterministic: Andrew et al. exactly.
  norms = np.arange(1.0, 11.0)  # ten clients with update norms 1..10, the same every round
  target, lr, clip0 = 0.3, 0.2, 0.5
  rounds = [[(np.array([n, 0, 0], np.float32), np.zeros((2, 2), np.float32)) for n in norms]] * 60
  aggregation = aggregators.dp_mean(
    'gaussian_adaptive', 0.0, 10, clip0, target_quantile=target, clip_learning_rate=lr
  )
  fold = _fold_rounds(aggregation, rounds)
  clips = [float(m['dp_query_metrics']['clip']) for _, m in fold]
  expected = adaptive_clips_numpy([norms] * 60, clip0, target, lr)
  np.testing.assert_allclose(clips, expected, rtol=1e-5)
  factory = _factory_rounds(aggregation, rounds[:4])
  np.testing.assert_allclose(
    [float(m['dp_query_metrics']['clip']) for _, m in factory], expected[:4], rtol=1e-6
  )
  # Each round's result is the mean clipped with the clip of that round (C_{t-1}).
  for (result, _), clip in zip(fold[:3], [clip0, *expected[:2]]):
    expected_mean = clipped_mean_numpy(rounds[0], clip, 10)
    np.testing.assert_allclose(_flat(result), _flat(expected_mean), rtol=1e-5)
  # It settles where the unclipped fraction crosses 0.3: between the 3rd and 4th norms.
  assert all(3.0 / np.exp(lr) < c < 4.0 * np.exp(lr) for c in clips[-20:]), clips[-20:]


@pytest.mark.parametrize('z,m', [(0.5, 10), (1.0, 50), (0.99, 10)])
def test_adaptive_noise_split_composes_to_the_total_noise_multiplier(z, m):
  value_z, count_stddev = differential_privacy.adaptive_clip_noise_params(z, m, None)
  assert count_stddev == privacy_config.adaptive_count_stddev(m, None)
  assert dp_noise.split_noise_multiplier(z, count_stddev) == pytest.approx(value_z, rel=1e-12)
  # The count has sensitivity 1/2: its noise multiplier is 2 sigma_b. RDP adds up.
  composed = dp_accounting.ComposedDpEvent(
    [dp_accounting.GaussianDpEvent(value_z), dp_accounting.GaussianDpEvent(2 * count_stddev)]
  )
  eps = []
  for event in (composed, dp_accounting.GaussianDpEvent(z)):
    account = dp_accounting.rdp.RdpAccountant()
    account.compose(event, 100)
    eps.append(account.get_epsilon(1e-5))
  assert eps[0] == pytest.approx(eps[1], rel=1e-9)
  assert value_z > z  # the update gets more noise than z to pay for the count


@pytest.mark.parametrize('z,m', [(1.0, 10), (1.5, 10), (5.0, 50)])
def test_the_flag_time_check_refuses_what_tff_refuses(z, m):
  config = privacy_config.DPConfig('gaussian_adaptive', noise_multiplier=z)
  with pytest.raises(ValueError, match='too low'):
    differential_privacy.adaptive_clip_noise_params(z, m, None)
  with pytest.raises(ValueError, match=f'noise_multiplier={z:g} is too large'):
    config.check_clients_per_round(m)


@pytest.mark.parametrize(
  'kwargs,message',
  [
    (dict(noise_multiplier=-1.0), 'noise_multiplier=-1.0 is invalid'),
    (dict(clip=0.0), 'clip=0.0 is invalid'),
    (dict(target_quantile=1.0), 'target_quantile=1.0 is invalid; expected (0, 1)'),
    (dict(delta=0.0), 'delta=0.0 is invalid; expected (0, 1)'),
    (dict(mechanism='laplace'), "mechanism='laplace' is invalid; valid choices: none, "),
  ],
)
def test_bad_settings_are_named(kwargs, message):
  with pytest.raises(ValueError) as e:
    privacy_config.DPConfig(**{'mechanism': 'gaussian_fixed', **kwargs})
  assert message in str(e.value)
  assert '\n' not in str(e.value)


# -- Algorithms and engines. ------------------------------------------------------------------

CLIENTS = 20


@pytest.fixture(scope='module')
def synthetic():
  return tasks.build_task(tasks.TaskConfig('synthetic', seed=3, num_clients=CLIENTS))


def _client_config(epochs=1):
  return algorithms.ClientTrainingConfig(
    client_optimizers.ClientOptimizerConfig('sgd', 0.1), epochs=epochs, batch_size=10
  )


def _build(name, task, server, aggregation, **hparams):
  return algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      _client_config(epochs=3 if name == 'fedpa' else 1),
      server,
      1.0,
      optimizers.ScheduleConfig(),
      num_clients=CLIENTS,
      aggregation=aggregation,
      **hparams,
    ),
  )


def _rounds(engine_name, algorithm, task, ids_by_round, seed=1):
  """Runs rounds on an engine; returns the model's trainable weights before and after each."""
  engine = engines.build_engine(
    engine_name, algorithm, engines.EngineOptions(clients_per_round=len(ids_by_round[0]))
  )
  weights = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  state = engine.initialize(weights)
  index = {cid: i for i, cid in enumerate(task.client_ids)}
  models = [engine.model_weights(state).trainable]
  for round_num, ids in enumerate(ids_by_round, start=1):
    clients = [
      engines.RoundClient(
        cid, task.train_clients[cid], seeds.client_seed(seed, round_num, index[cid], CLIENTS)
      )
      for cid in ids
    ]
    result = engine.next(state, clients)
    state = result.state
    models.append(engine.model_weights(state).trainable)
  return models, result.metrics


@pytest.mark.parametrize('name', sorted(algorithm_config.DP_REFUSALS))
def test_algorithms_that_cannot_be_privatised_refuse_in_one_line(synthetic, name):
  server = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))
  aggregation = aggregators.dp_mean('gaussian_fixed', 1.0, 5, 1.0)
  with pytest.raises(ValueError) as e:
    _build(name, synthetic, server if name != 'adafedadam' else None, aggregation)
  assert str(e.value) == f'build_{name}: {algorithm_config.dp_refusal(name)}'
  assert set(algorithm_config.DP_REFUSALS) < set(algorithm_config.ALGORITHMS)


SUPPORTED = [
  ('fedopt', {}),
  ('fedprox', {'fedprox': algorithm_config.FedProxHParams(mu=0.1)}),
  ('fedpa', {'fedpa': algorithm_config.FedPAHParams(burnin_rounds=0, burnin_epochs=1)}),
]


@pytest.mark.parametrize('engine_name', ['tff', 'inprocess'])
@pytest.mark.parametrize('name,hparams', SUPPORTED, ids=[n for n, _ in SUPPORTED])
def test_clipping_bounds_a_clients_contribution(synthetic, engine_name, name, hparams):
  # One client, no noise, server SGD at rate 1: x_0 - x_1 is that client's clipped update.
  clip = 0.02
  server = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))
  aggregation = aggregators.dp_mean('gaussian_fixed', 0.0, 1, clip)
  algorithm = _build(name, synthetic, server, aggregation, **hparams)
  models, _ = _rounds(engine_name, algorithm, synthetic, [[synthetic.client_ids[0]]])
  moved = np.sqrt(np.sum((_flat(models[0]) - _flat(models[1])) ** 2))
  assert moved == pytest.approx(clip, rel=1e-5)  # its update was longer than C


def test_both_engines_add_the_same_noise_and_the_server_steps_on_the_noised_mean(synthetic):
  ids = [synthetic.client_ids[i : i + 5] for i in (0, 5, 10)]
  z, clip, m = 0.8, 0.05, 5
  sgd = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))

  def run(engine_name, server, noise):
    aggregation = aggregators.dp_mean('gaussian_fixed', noise, m, clip, noise_seed=9)
    return _rounds(engine_name, _build('fedopt', synthetic, server, aggregation), synthetic, ids)

  noised, _ = run('inprocess', sgd, z)
  noised_tff, _ = run('tff', sgd, z)
  for a, b in zip(noised, noised_tff):
    np.testing.assert_allclose(_flat(a), _flat(b), rtol=1e-5, atol=1e-7)
  # Round 1 from the same x_0: g with noise minus g without is the noise, std z C / m.
  clean, _ = run('inprocess', sgd, 0.0)
  g_noised = _flat(noised[0]) - _flat(noised[1])
  g_clean = _flat(clean[0]) - _flat(clean[1])
  noise = g_noised - g_clean
  assert np.std(noise) == pytest.approx(z * clip / m, rel=0.1)  # 610 draws: ~3% error
  assert np.sqrt(np.sum(g_clean**2)) <= clip + 1e-6  # the mean of updates clipped to C
  # FedAdam's first step is Adam's on the noised mean, not Adam's step on the clean one plus noise.
  adam = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('adam', 0.01, tau=1e-3))
  adam_models, _ = run('inprocess', adam, z)
  x0 = [np.asarray(a) for a in noised[0]]
  g = [np.asarray(a) - np.asarray(b) for a, b in zip(noised[0], noised[1])]
  expected = fedopt_numpy.adaptive_server(x0, [g], 'adam', 0.01, 0.9, 0.999, 1e-3, 0.0, True)[0]
  np.testing.assert_allclose(_flat(adam_models[1]), _flat(expected), rtol=1e-5, atol=1e-7)


def test_both_engines_add_the_same_tree_noise_across_a_restart(synthetic):
  ids = [synthetic.client_ids[i : i + 5] for i in (0, 5, 10)]
  server = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))
  runs = {}
  for engine_name in ('tff', 'inprocess'):
    aggregation = aggregators.dp_mean('tree', 0.8, 5, 0.05, restart_rounds=2, noise_seed=9)
    algorithm = _build('fedopt', synthetic, server, aggregation)
    runs[engine_name], _ = _rounds(engine_name, algorithm, synthetic, ids)
  for a, b in zip(runs['tff'], runs['inprocess']):
    np.testing.assert_allclose(_flat(a), _flat(b), rtol=1e-5, atol=1e-7)
  # Noised: each round moved the model by more than the clip allows without noise.
  steps = [
    np.sqrt(np.sum((_flat(a) - _flat(b)) ** 2)) for a, b in zip(runs['tff'], runs['tff'][1:])
  ]
  assert min(steps) > 0.05, steps


def test_adaptive_clip_is_reported_by_both_engines(synthetic):
  ids = [synthetic.client_ids[i : i + 10] for i in (0, 10)]
  server = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))
  rows = []
  for engine_name in ('tff', 'inprocess'):
    aggregation = aggregators.dp_mean('gaussian_adaptive', 0.5, 10, 0.05, noise_seed=2)
    algorithm = _build('fedopt', synthetic, server, aggregation)
    models, metrics = _rounds(engine_name, algorithm, synthetic, ids)
    rows.append((models, metrics))
  (tff_models, tff_metrics), (in_models, in_metrics) = rows
  assert tff_metrics['dp_clip'] == pytest.approx(in_metrics['dp_clip'], rel=1e-6)
  assert tff_metrics['dp_clip'] != pytest.approx(0.05)  # it adapted
  np.testing.assert_allclose(_flat(tff_models[-1]), _flat(in_models[-1]), rtol=1e-5, atol=1e-7)
  assert set(collections.Counter(tff_metrics)) == set(in_metrics)


# -- The noise-aware adaptive server. -----------------------------------------------------------


@pytest.mark.parametrize('variant', ['published', 'algorithm2'])
@pytest.mark.parametrize('rule', ['adagrad', 'adam', 'yogi'])
def test_noise_aware_server_matches_numpy(rule, variant):
  rng = np.random.default_rng(11)
  sigma2, lr, tau, steps = 0.04, 0.05, 1e-2, 6
  x0 = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=5).astype(np.float32)]
  # Coordinates far below and far above the noise's std 0.2, so the clamp acts on some.
  scales = [np.where(rng.random(a.shape) < 0.5, 0.01, 1.0) for a in x0]
  grads = [
    [(rng.normal(size=a.shape) * s).astype(np.float32) for a, s in zip(x0, scales)]
    for _ in range(steps)
  ]
  config = optimizers.ServerOptimizerConfig(
    rule, learning_rate=lr, tau=tau, variant=variant, noise_variance=sigma2
  )
  beta_1 = 0.0 if rule == 'adagrad' else 0.9
  v0 = 0.0 if variant == 'published' else tau**2
  bias_correction = variant == 'published' and rule != 'adagrad'

  def run(cfg):
    optimizer = optimizers.build_server_optimizer(cfg)
    specs = [tf.TensorSpec(a.shape, tf.float32) for a in x0]
    state, x = optimizer.initialize(specs), [tf.constant(a) for a in x0]
    out = []
    for g in grads:
      state, x = optimizer.next(state, x, [tf.constant(a) for a in g])
      out.append([np.asarray(a) for a in x])
    return out

  aware = run(config)
  expected = fedopt_numpy.adaptive_server(
    x0, grads, rule, lr, beta_1, 0.999, tau, v0, bias_correction, noise_variance=sigma2
  )
  for got, want in zip(aware, expected):
    # Near the clamp sqrt(v_t) is ill-conditioned (d sqrt(v) = dv / 2 sqrt(v)): float32 v_t of a
    # clamped coordinate moves x by up to ~5e-6 against float64 over 6 steps (weights O(1)).
    np.testing.assert_allclose(_flat(got), _flat(want), rtol=2e-5, atol=2e-5)
  plain = run(dataclasses.replace(config, noise_variance=0.0))
  reference = fedopt_numpy.adaptive_server(
    x0, grads, rule, lr, beta_1, 0.999, tau, v0, bias_correction
  )
  np.testing.assert_allclose(_flat(plain[-1]), _flat(reference[-1]), rtol=2e-5, atol=2e-5)
  assert np.max(np.abs(_flat(plain[-1]) - _flat(aware[-1]))) > 1e-3  # the variants differ


@pytest.mark.parametrize('rule', ['adagrad', 'adam', 'yogi'])
def test_on_pure_noise_the_noise_aware_second_moment_stays_small(rule):
  # g_t = n_t ~ N(0, sigma^2): the plain v_t estimates sigma^2 (adam, yogi) or grows like
  # t sigma^2 (adagrad); the noise-aware one estimates 0 (adagrad: a walk reflected at 0, ~sqrt(t)).
  rng = np.random.default_rng(4)
  sigma2, steps, n = 0.04, 300, 2000
  v = {'plain': np.zeros(n), 'aware': np.zeros(n)}
  for _ in range(steps):
    g = tf.constant(rng.normal(size=n) * np.sqrt(sigma2), tf.float32)
    if rule == 'adagrad':
      v['plain'] = fedopt_math.adagrad_second_moment(v['plain'], g).numpy()
    elif rule == 'adam':
      v['plain'] = fedopt_math.adam_second_moment(v['plain'], g, 0.99).numpy()
    else:
      v['plain'] = fedopt_math.yogi_second_moment(v['plain'], g, 0.99).numpy()
    v['aware'] = fedopt_math.noise_aware_second_moment(rule, v['aware'], g, 0.99, sigma2).numpy()
  if rule == 'adagrad':
    assert np.mean(v['plain']) == pytest.approx(steps * sigma2, rel=0.05)
    assert np.mean(v['aware']) < 0.1 * np.mean(v['plain'])
  elif rule == 'adam':
    assert np.mean(v['plain']) == pytest.approx(sigma2, rel=0.25)
    assert np.mean(v['aware']) < 0.25 * sigma2
  else:  # Yogi settles where E[g^2 sign(g^2 - v)] = 0: ~1.7 sigma^2 for g^2 ~ sigma^2 chi2(1)
    assert np.mean(v['plain']) > sigma2
    assert np.mean(v['aware']) < 0.25 * sigma2
