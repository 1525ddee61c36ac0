"""Privacy as delivered: the noise every DP mechanism adds, measured, against what the accountant
assumes.

The clients' updates are known, so each round's noise is the released mean times m minus the
sum of the clipped updates (the clip written in NumPy from McMahan et al. 2018). Its standard
deviation per coordinate is held to two numbers: the one the accountant reads
(`UpdateAggregation.privacy`, the `DeliveredNoise` the queries were built from) and the one the
paper's equations give from the flags (NumPy here: z C; the adaptive clip's
z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2) with sigma_b = m / 20; the tree's node z C; the Skellam
shares' sum (z C)^2). A wrong noise level fails one of the two; a descriptor that drifted from
the noise fails the first.

Tolerances: the sample std of N independent draws has relative standard error 1 / sqrt(2N);
each check allows about 4 of those (stated beside it). Streams that must be independent (the
adaptive clip's value and count, leaves, rounds, clients, runs of other seeds, a resume) are
held to correlations below 4 / sqrt(N) for N paired draws (5 where the maximum over many pairs
is taken).
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import differential_privacy

from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.core import dp_noise
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import client as client_optimizers
from tff_adaptive.privacy import accounting

# -- NumPy: the clip and the papers' noise levels. ----------------------------------------------


def clip_numpy(update, clip):
  """u min(1, C / ||u||), the global L2 norm over the nest's leaves."""
  flat = np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in update])
  norm = np.linalg.norm(flat)
  return flat * (min(1.0, clip / norm) if norm > 0 else 1.0), norm


def adaptive_value_noise_multiplier(z, m):
  """Andrew et al. 2021 / TFF: sigma_b = m / 20, z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2)."""
  sigma_b = m / 20
  return (z**-2 - (2 * sigma_b) ** -2) ** -0.5, sigma_b


def _flat(nest):
  return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in tf.nest.flatten(nest)])


def _std_close(draws, expected, rel):
  draws = np.ravel(draws)
  assert abs(np.mean(draws)) < 5 * expected / np.sqrt(draws.size)
  assert np.std(draws) == pytest.approx(expected, rel=rel)


def _event_leaves(event):
  """A DP event as (type names, numbers): TFF records its numbers in float32."""
  names, numbers = [], []

  def walk(node):
    if hasattr(node, 'to_named_tuple'):
      node = node.to_named_tuple()
    if isinstance(node, tuple) and hasattr(node, '_fields'):
      names.append(type(node).__name__)
      for value in node:
        walk(value)
    elif isinstance(node, (list, tuple)):
      for value in node:
        walk(value)
    elif isinstance(node, (str, bytes)):
      names.append(node)
    else:
      numbers.append(float(node))

  walk(event)
  return names, numbers


def assert_same_event(recorded, expected):
  (names, numbers), (want_names, want_numbers) = _event_leaves(recorded), _event_leaves(expected)
  assert names == want_names
  assert numbers == pytest.approx(want_numbers, rel=1e-6)


def _max_abs_corr(a, b):
  """max_j |corr(a, b[:, j])| over the columns of b (a: one series)."""
  a = (a - a.mean()) / a.std()
  b = (b - b.mean(axis=0)) / b.std(axis=0)
  return float(np.max(np.abs(a @ b / len(a))))


class Fold:
  """An aggregation's fold (the in-process and vectorised engines' form), compiled, round by round."""

  def __init__(self, aggregation, specs, state=None):
    self.aggregation = aggregation
    self.specs = specs
    self.state = aggregation.initialize(specs) if state is None else state
    self._zero = tf.function(lambda state: aggregation.zero(specs, state))
    self._accumulate = tf.function(lambda acc, u: aggregation.accumulate(acc, u, 1.0))
    self._report = tf.function(aggregation.report)

  def round(self, updates):
    acc = self._zero(self.state)
    for u in updates:
      acc = self._accumulate(acc, tuple(tf.constant(a) for a in u))
    result, self.state, measurements = self._report(acc, self.state)
    return _flat(result), measurements


def _factory_rounds(aggregation, specs, rounds):
  """The TFF face (`DifferentiallyPrivateFactory` in TFF's runtime) over `rounds`: the results,
  and the DP event TFF records in its state after each round."""
  process = aggregation.factory().create(
    tff.types.tensorflow_to_type(specs), tff.TensorType(np.float32)
  )
  state = process.initialize()
  out = []
  for updates in rounds:
    output = process.next(state, updates, [1.0] * len(updates))
    state = output.state
    out.append((_flat(output.result), differential_privacy.extract_dp_event_from_state(state)))
  return out


def _clients(rng, m, sizes, scales):
  """m updates of leaves `sizes`, the i-th of global norm about scales[i]."""
  d = sum(int(np.prod(s)) for s in sizes)
  return [
    tuple((rng.normal(size=s) * scales[i] / np.sqrt(d)).astype(np.float32) for s in sizes)
    for i in range(m)
  ]


# -- Gaussian, fixed clip. ------------------------------------------------------------------------


def test_fixed_clip_adds_z_c_on_the_sum_on_both_faces():
  z, clip, m, n, rounds = 0.7, 0.5, 4, 20_000, 5
  sizes = [(n,), (3, 4)]
  specs = tuple(tf.TensorSpec(s, tf.float32) for s in sizes)
  rng = np.random.default_rng(0)
  by_round = [_clients(rng, m, sizes, [0.1, 0.3, 2.0, 5.0]) for _ in range(rounds)]
  aggregation = aggregators.dp_mean('gaussian_fixed', z, m, clip, noise_seed=5)
  noise = aggregation.privacy
  assert (noise.value_noise_multiplier, noise.sum_stddev()) == (z, z * clip)
  fold = Fold(aggregation, specs)
  draws = []
  for updates in by_round:
    result, _ = fold.round(updates)
    draws.append(m * result - sum(clip_numpy(u, clip)[0] for u in updates))
  draws = np.array(draws)
  # 100,060 draws: the std's standard error is 0.22%; held to 1%. Against the accountant's
  # std and the paper's z C (the same number, from two sources).
  _std_close(draws, noise.sum_stddev(), rel=0.01)
  _std_close(draws, z * clip, rel=0.01)
  # A fresh draw every round.
  corr = np.corrcoef(draws[:, :n])
  assert np.max(np.abs(corr - np.eye(rounds))) < 4 / np.sqrt(n)
  # And for every leaf: two leaves of one shape draw apart (the leaf index is in the seed).
  pair_specs = (tf.TensorSpec([n], tf.float32),) * 2
  pair = Fold(aggregators.dp_mean('gaussian_fixed', z, m, clip), pair_specs)
  result, _ = pair.round([(np.zeros(n, np.float32),) * 2] * m)
  assert abs(np.corrcoef(result[:n], result[n:])[0, 1]) < 4 / np.sqrt(n)
  # The TFF face adds the same noise, and records the event the accountant composes.
  factory = _factory_rounds(aggregation, specs, by_round[:2])
  for (result, event), updates, expected in zip(factory, by_round, draws):
    got = m * result - sum(clip_numpy(u, clip)[0] for u in updates)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert_same_event(event, noise.round_event())
    assert float(event.noise_multiplier) == pytest.approx(z, rel=1e-6)


def test_runs_of_other_seeds_draw_independent_noise():
  # The cells of a sweep over seeds; the same seed draws the same noise (a rerun).
  n, m = 40_000, 4
  specs = (tf.TensorSpec([n], tf.float32),)
  zeros = [(np.zeros(n, np.float32),)] * m

  def noise(mechanism, seed, **kwargs):
    fold = Fold(aggregators.dp_mean(mechanism, 0.5, m, 1.0, noise_seed=seed, **kwargs), specs)
    return np.array([fold.round(zeros)[0] for _ in range(3)])

  for mechanism, kwargs in [('gaussian_fixed', {}), ('tree', {'restart_rounds': 2})]:
    a, b = noise(mechanism, 1, **kwargs), noise(mechanism, 2, **kwargs)
    np.testing.assert_array_equal(a, noise(mechanism, 1, **kwargs))
    assert max(abs(np.corrcoef(x, y)[0, 1]) for x in a for y in b) < 4 / np.sqrt(n)


# -- Gaussian, adaptive clip (Andrew et al. 2021). ------------------------------------------------

ADAPTIVE = dict(z=0.8, m=10, clip=1.0, target=0.5, lr=0.2)


@pytest.fixture(scope='module')
def adaptive_run():
  """800 rounds of the adaptive clip's fold with m = 10 known updates: 5 of norm ~1e-3 and 5 of
  ~1e3, so the 5 below the clip never change (C stays within a factor of 3 of 1) and the clip's
  noised count b_t = 1/2 + noise_b / m can be read back from C_t / C_{t-1}."""
  p = ADAPTIVE
  n, rounds = 1000, 800
  sizes = [(n,), (2, 3)]
  specs = tuple(tf.TensorSpec(s, tf.float32) for s in sizes)
  aggregation = aggregators.dp_mean(
    'gaussian_adaptive',
    p['z'],
    p['m'],
    p['clip'],
    target_quantile=p['target'],
    clip_learning_rate=p['lr'],
    noise_seed=4,
  )
  rng = np.random.default_rng(3)
  fold = Fold(aggregation, specs)
  scales = [1e-3] * 5 + [1e3] * 5
  clips, values, counts, by_round = [p['clip']], [], [], []
  for t in range(rounds):
    updates = _clients(rng, p['m'], sizes, scales)
    result, measurements = fold.round(updates)
    clip = clips[-1]  # round t clips (and noises) with C_{t-1}
    clipped = [clip_numpy(u, clip) for u in updates]
    below = sum(norm <= clip for _, norm in clipped)
    new_clip = float(measurements['dp_query_metrics']['clip'])
    # C_t = C_{t-1} exp(-lr (b_t - target)), b_t = (below - m/2 + noise_b) / m + 1/2.
    b = p['target'] - np.log(new_clip / clip) / p['lr']
    counts.append(p['m'] * (b - 0.5) - (below - p['m'] / 2))
    values.append((p['m'] * result - sum(c for c, _ in clipped)) / clip)
    clips.append(new_clip)
    if t < 3:
      by_round.append(updates)
  assert 1 / 3 < min(clips) and max(clips) < 3
  return dict(
    aggregation=aggregation,
    specs=specs,
    values=np.array(values),
    counts=np.array(counts),
    clips=clips,
    by_round=by_round,
    fold=fold,
  )


def test_adaptive_clip_value_noise_is_z_v_times_the_rounds_clip(adaptive_run):
  p = ADAPTIVE
  noise = adaptive_run['aggregation'].privacy
  z_v, sigma_b = adaptive_value_noise_multiplier(p['z'], p['m'])
  assert z_v > 1.3 * p['z']  # z_v and z told apart by far more than the tolerance
  assert (noise.value_noise_multiplier, noise.count_noise_stddev) == (
    pytest.approx(z_v, rel=1e-12),
    pytest.approx(sigma_b, rel=1e-12),
  )
  # 804,800 draws of noise / C_{t-1}: standard error 0.08%; held to 0.5%.
  _std_close(adaptive_run['values'], noise.value_noise_multiplier, rel=0.005)
  _std_close(adaptive_run['values'], z_v, rel=0.005)
  values = adaptive_run['values'][:20]
  corr = np.corrcoef(values[:-1], values[1:])[: len(values) - 1, len(values) - 1 :]
  assert np.max(np.abs(np.diag(corr))) < 5 / np.sqrt(values.shape[1])  # afresh every round


def test_adaptive_clip_count_noise_is_sigma_b_and_independent_of_the_value_noise(adaptive_run):
  p = ADAPTIVE
  noise = adaptive_run['aggregation'].privacy
  counts, values = adaptive_run['counts'], adaptive_run['values']
  _, sigma_b = adaptive_value_noise_multiplier(p['z'], p['m'])
  # 800 draws: standard error 2.5%; held to 10%.
  _std_close(counts, noise.count_noise_stddev, rel=0.1)
  _std_close(counts, sigma_b, rel=0.1)
  # Independent streams: the count's draw against every coordinate's value draw of the same
  # round (1006 pairs of 800-round series: 5 / sqrt(800) = 0.18), and of the next round.
  limit = 5 / np.sqrt(len(counts))
  assert _max_abs_corr(counts, values) < limit
  assert _max_abs_corr(counts[:-1], values[1:]) < limit
  assert abs(np.corrcoef(counts[:-1], counts[1:])[0, 1]) < 4 / np.sqrt(len(counts))
  # One round's event as TensorFlow Privacy's query emits it on the TFF face: the value's
  # Gaussian(z_v) and the count's Gaussian(2 sigma_b), which is what the accountant composes.
  factory = _factory_rounds(
    adaptive_run['aggregation'], adaptive_run['specs'], adaptive_run['by_round']
  )
  clips = adaptive_run['clips']
  for (result, event), updates, expected, clip in zip(
    factory, adaptive_run['by_round'], values, clips
  ):
    got = (p['m'] * result - sum(clip_numpy(u, clip)[0] for u in updates)) / clip
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert_same_event(event, noise.round_event())


def test_the_adaptive_pair_is_accounted_as_the_total_z():
  """The accountant composes the delivered pair (z_v, 2 sigma_b) into z_eff; the split makes
  z_eff the z asked for, and a pair under-noised on the value would cost more epsilon."""
  p = ADAPTIVE
  noise = aggregators.dp_mean('gaussian_adaptive', p['z'], p['m'], p['clip']).privacy
  assert noise.effective_noise_multiplier == pytest.approx(p['z'], rel=1e-12)
  n, delta, rounds = 100, 1e-5, 50
  ours = accounting.for_noise(noise, n, delta).epsilon(rounds)
  reference = accounting.epsilon(
    accounting.GaussianRounds(p['z'], rounds, p['m'], n, 'fixed_size'), delta
  )
  assert ours == pytest.approx(reference, rel=1e-9)
  under = dp_noise.DeliveredNoise(**{**vars(noise), 'value_noise_multiplier': p['z']})
  assert accounting.for_noise(under, n, delta).epsilon(rounds) > 1.1 * ours


# -- DP-FTRL's tree (Kairouz et al. 2021). --------------------------------------------------------

# Variance of the tree's noise on the running sum S_t of rounds t = 1..4 of one tree, in units of
# the node variance (z C)^2 (module `aggregators.dp`, 'tree'): the plain tree covers 1..t with
# popcount(t) nodes: 1, 1, 2, 1; the efficient tree (Honaker 2015) estimates a complete subtree
# of height h from its node and its children's estimates at inverse-variance weights,
# v_h = 1 / (1 + 1 / (2 v_{h-1})), v_0 = 1: v_1 = 2/3, v_2 = 4/7; S_3 = [1, 2] + leaf 3: 5/3.
TREE_PREFIX_VARIANCES = {False: [1, 1, 2, 1], True: [1, 2 / 3, 5 / 3, 4 / 7]}


@pytest.mark.parametrize('efficient', [False, True])
def test_tree_nodes_add_z_c_and_restart_independently(efficient):
  z, clip, m, n, restart = 0.7, 0.5, 4, 40_000, 4
  sizes = [(n,)]
  specs = (tf.TensorSpec([n], tf.float32),)
  rng = np.random.default_rng(1)
  by_round = [_clients(rng, m, sizes, [0.1, 0.4, 2.0, 3.0]) for _ in range(7)]
  aggregation = aggregators.dp_mean(
    'tree', z, m, clip, restart_rounds=restart, efficient=efficient, noise_seed=5
  )
  noise = aggregation.privacy
  assert (noise.sum_stddev(), noise.restart_rounds) == (z * clip, restart)
  fold = Fold(aggregation, specs)
  draws = np.array(
    [
      m * fold.round(updates)[0] - sum(clip_numpy(u, clip)[0] for u in updates)
      for updates in by_round
    ]
  )
  # Round t releases N~_t - N~_{t-1}: the running sum of the draws is the tree's noise on S_t.
  # A variance over 40,000 draws: standard error 0.7%; held to 3%.
  running = np.cumsum(draws, axis=0)
  expected = np.array(TREE_PREFIX_VARIANCES[efficient])
  for unit in (noise.sum_stddev() ** 2, (z * clip) ** 2):
    np.testing.assert_allclose(np.var(running[:4], axis=1) / unit, expected, rtol=0.03)
    # Restarted after round 4: rounds 5-7 sum from a new tree (N~ = 0 at its start).
    fresh = running[4:] - running[3]
    np.testing.assert_allclose(np.var(fresh, axis=1) / unit, expected[:3], rtol=0.03)
  assert max(abs(np.corrcoef(f, running[3])[0, 1]) for f in fresh) < 4 / np.sqrt(n)
  factory = _factory_rounds(aggregation, specs, by_round[:5])  # across the restart
  for (result, _), updates, expected_draw in zip(factory, by_round, draws):
    got = m * result - sum(clip_numpy(u, clip)[0] for u in updates)
    np.testing.assert_allclose(got, expected_draw, rtol=1e-5, atol=1e-5)
  # The accountant's tree: the node's noise multiplier and the restarts, from the same object.
  by_round_eps = accounting.for_noise(noise, 100, 1e-5)
  assert by_round_eps.epsilon(9) == pytest.approx(
    accounting.epsilon(accounting.TreeRounds(z, 9, restart), 1e-5), rel=1e-12
  )


# -- Resumes. -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
  'mechanism,kwargs',
  [('gaussian_fixed', {}), ('gaussian_adaptive', {}), ('tree', {'restart_rounds': 3})],
)
def test_a_resumed_fold_continues_the_stream(mechanism, kwargs):
  """The query's state (round counters, seeds, the clip, the tree) saved as a checkpoint holds
  it and restored into a new aggregation: the rounds after are the uninterrupted run's, not a
  replay of the first rounds."""
  n, m = 20_000, 10
  specs = (tf.TensorSpec([n], tf.float32),)
  rng = np.random.default_rng(2)
  by_round = [_clients(rng, m, [(n,)], np.linspace(0.05, 2, m)) for _ in range(6)]

  def build():
    return aggregators.dp_mean(mechanism, 0.6, m, 0.5, noise_seed=3, **kwargs)

  whole = Fold(build(), specs)
  expected = [whole.round(u)[0] for u in by_round]
  first = Fold(build(), specs)
  for u in by_round[:4]:
    first.round(u)
  saved = tf.nest.map_structure(lambda v: np.asarray(v), first.state)  # a checkpoint
  resumed = Fold(build(), specs, state=tf.nest.map_structure(tf.constant, saved))
  again = [resumed.round(u)[0] for u in by_round[4:]]
  np.testing.assert_allclose(again, expected[4:], rtol=1e-6, atol=1e-7)
  # Not the first rounds' noise again (a counter not restored would replay it).
  noise = [m * r - sum(clip_numpy(u, 0.5)[0] for u in us) for r, us in zip(expected, by_round)]
  if mechanism != 'gaussian_adaptive':  # its clip moves: the clip of a replay would differ too
    assert max(abs(np.corrcoef(noise[i], noise[j])[0, 1]) for i in (4, 5) for j in (0, 1)) < 0.03


# -- Distributed Skellam (Agarwal et al. 2021). ---------------------------------------------------


def test_skellam_shares_add_up_to_the_accounted_variance_every_round():
  """m clients with distinct updates add their Skellam shares under (simulated) secure
  aggregation: the sum's noise has the variance mu / s^2 = (z C)^2 the accountant's
  `SkellamParameters` assume (shares drawn alike would give m times it), afresh every round
  although the clients send the same updates."""
  z, clip, m, d, bits, rounds = 1.5, 0.2, 5, 3000, 20, 4
  noise = aggregators.ddp_mean(z, m, clip, bits, noise_seed=6).privacy
  parameters = noise.skellam_parameters(d)
  rng = np.random.default_rng(4)
  updates = [u[0] for u in _clients(rng, m, [(d,)], [0.05, 0.1, 0.3, 0.5, 1.0])]
  process = (
    aggregators.ddp_mean(z, m, clip, bits, noise_seed=6)
    .factory()
    .create(tff.TensorType(np.float32, [d]), tff.TensorType(np.float32))
  )
  state = process.initialize()
  draws = []
  clipped = sum(clip_numpy((u,), clip)[0] for u in updates)
  for _ in range(rounds):
    output = process.next(state, updates, [1.0] * m)
    state = output.state
    draws.append(m * np.asarray(output.result, np.float64) - clipped)
    measured = output.measurements['mean_value']
  draws = np.array(draws)
  assert float(measured['scale_factor']) == pytest.approx(parameters.scale, rel=1e-6)
  assert float(measured['scaled_local_stddev']) == pytest.approx(parameters.local_stddev, rel=1e-6)
  # 12,000 draws: the std's standard error 0.65%; held to 3% (rounding adds < 1e-5 of it).
  _std_close(draws, np.sqrt(parameters.variance) / parameters.scale, rel=0.03)
  _std_close(draws, z * clip, rel=0.03)
  corr = np.corrcoef(draws)
  assert np.max(np.abs(corr - np.eye(rounds))) < 4 / np.sqrt(d)


# -- The engines. ---------------------------------------------------------------------------------

CLIENTS = 20


@pytest.fixture(scope='module')
def synthetic():
  return tasks.build_task(tasks.TaskConfig('synthetic', seed=3, num_clients=CLIENTS))


def _engine_noise(engine_name, task, aggregation, rounds, m):
  """What the server's SGD at rate 1 moved the model by each round, times m: the aggregate's
  noise, the clients' updates being 1e-30 of a gradient (clipped to nothing)."""
  client = algorithms.ClientTrainingConfig(
    client_optimizers.ClientOptimizerConfig('sgd', 1e-30), epochs=1, batch_size=10
  )
  algorithm = algorithms.build_fedopt(
    lambda: task.model_fn(1), client, optimizers.build_fedavg_sgd(1.0), aggregation=aggregation
  )
  engine = engines.build_engine(engine_name, algorithm, engines.EngineOptions(clients_per_round=m))
  weights = tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1))
  state = engine.initialize(weights)
  index = {cid: i for i, cid in enumerate(task.client_ids)}
  models = [_flat(engine.model_weights(state).trainable)]
  for round_num in range(1, rounds + 1):
    ids = task.client_ids[(round_num * m) % CLIENTS :][:m]
    clients = [
      engines.RoundClient(
        cid, task.train_clients[cid], seeds.client_seed(1, round_num, index[cid], CLIENTS)
      )
      for cid in ids
    ]
    state = engine.next(state, clients).state
    models.append(_flat(engine.model_weights(state).trainable))
  return m * (np.array(models[:-1]) - np.array(models[1:]))


@pytest.mark.parametrize(
  'mechanism,kwargs',
  [('gaussian_fixed', {}), ('gaussian_adaptive', {}), ('tree', {'restart_rounds': 2})],
)
def test_every_engine_delivers_the_measured_noise(synthetic, mechanism, kwargs):
  """The TFF, in-process and vectorised engines add the fold's noise (measured above on many
  coordinates) to the aggregate, bit for bit up to float rounding, and its std on the model's
  610 coordinates x 4 rounds is the accountant's (standard error 1.1%; held to 6%; the tree's
  running sums by `TREE_PREFIX_VARIANCES`, the adaptive clip's C_t 1 here: the updates are 0)."""
  m, rounds, clip = 5, 4, 0.05
  z = 0.4 if mechanism == 'gaussian_adaptive' else 0.8  # the adaptive split needs z < m / 10

  def build():
    return aggregators.dp_mean(mechanism, z, m, clip, noise_seed=9, **kwargs)

  specs = tuple(
    tf.TensorSpec(w.shape, w.dtype) for w in synthetic.keras_model_fn(1).trainable_weights
  )
  fold = Fold(build(), specs)
  zeros = [tuple(np.zeros(s.shape, np.float32) for s in specs)] * m
  expected, clips = [], [clip]
  for _ in range(rounds):
    result, measurements = fold.round(zeros)
    expected.append(m * result)
    clips.append(float(measurements['dp_query_metrics'].get('clip', clip)))
  expected = np.array(expected)
  noise = build().privacy
  for engine_name in ('inprocess', 'vectorised', 'tff'):
    got = _engine_noise(engine_name, synthetic, build(), rounds, m)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * noise.sum_stddev())
  if mechanism == 'tree':
    running = np.cumsum(expected, axis=0)
    np.testing.assert_allclose(
      np.var(running[:2], axis=1) / noise.sum_stddev() ** 2,
      TREE_PREFIX_VARIANCES[True][:2],
      rtol=0.25,  # 610 draws each: standard error 5.7%
    )
  else:  # each round's noise over that round's clip C_{t-1} (the adaptive clip shrinks here)
    _std_close(expected / np.array(clips[:-1])[:, None], noise.value_noise_multiplier, rel=0.06)
