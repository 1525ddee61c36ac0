"""User-level differentially private mean of client updates (DP-FedAvg's aggregation).

McMahan, Ramage, Talwar, Zhang. "Learning Differentially Private Recurrent Language Models."
ICLR 2018 (DP-FedAvg, fixed clipping); Andrew, Thakkar, McMahan, Ramaswamy. "Differentially
Private Learning with Adaptive Clipping." NeurIPS 2021 (the clip as a private quantile).
Round t, the m sampled clients' updates u_i (TFF's sign, x_t - x_i)::

    clip(u_i) = u_i min(1, C_t / ||u_i||_2)              # global L2 norm over the whole nest
    g_t = (sum_i clip(u_i) + N(0, (z_v C_t)^2 I)) / m      # m: the clients per round, fixed
    x_{t+1} = ServerOpt(x_t, g_t)                         # post-processing: costs no privacy

One client changes sum_i clip(u_i) by at most C_t in L2 norm (added or removed), so the sum is
the Gaussian mechanism with noise multiplier z_v; dividing by the fixed m and everything the
server optimizer does with g_t is post-processing. The weights w_i are not read: a weight that
depends on a client's data (its example count n_i) would raise the sensitivity.

* 'gaussian_fixed': C_t = C, z_v = z.
* 'gaussian_adaptive': C_t follows the geometric update of Andrew et al. (Algorithm 1) towards
  the target quantile gamma of the clients' update norms,
      b_t = (sum_i ([||u_i|| <= C_t] - 1/2) + N(0, sigma_b^2)) / m + 1/2,   clipped to [0, 1]
      C_{t+1} = C_t exp(-eta_C (b_t - gamma)),
  and the count query spends part of the budget: z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2) (the count
  has sensitivity 1/2), so that the two Gaussian mechanisms compose to one of noise multiplier
  z (RDP of Gaussians adds: 1/z^2 = 1/z_v^2 + 1/(2 sigma_b)^2). sigma_b = m / 20 by default,
  which needs z < 2 sigma_b = m / 10.
* 'tree': DP-FTRL's noise (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu, "Practical and
  Private (Deep) Learning without Sampling or Shuffling", ICML 2021). Clip as above (C_t = C);
  the running sum S_t = sum_{s <= t} sum_i clip(u_i^s) is released through a binary tree whose
  every node gets N(0, (z C)^2 I), and round t's result is the difference of two releases,
      g_t = (sum_i clip(u_i) + N~_t - N~_{t-1}) / m,
  N~_t the tree's noise on S_t (the sum of the O(log t) nodes that cover 1..t; with
  `efficient=True`, Honaker's minimum-variance estimate from all nodes). A server SGD step on
  g_t then follows the noised prefix sums: x_t = x_0 - eta (S_t + N~_t) / m (for a constant
  eta), noise whose variance grows like log t instead of t. Restarted (N~ = 0 again) every
  `restart_rounds` rounds. One client taking part at most once per tree touches the
  ceil(log2(R + 1)) nodes on its leaf's path, R rounds per tree: RDP alpha ceil(log2(R + 1)) /
  (2 z^2) per tree, under replacing a client's clipped update by zero, a null client
  (`privacy.accounting.TreeRounds`; the trainer samples clients in epochs of R rounds,
  `loop.sampling` method 'epoch', and restarts every epoch).

The queries are TensorFlow Privacy's (`GaussianSumQuery`, `QuantileAdaptiveClipSumQuery`,
`NormalizedQuery`) and the TFF face is `tff.aggregators.DifferentiallyPrivateFactory` over them,
exactly what `DifferentiallyPrivateFactory.gaussian_fixed` / `gaussian_adaptive` build, with one
change: TensorFlow Privacy draws its noise from an unseeded generator, so a rerun or a resumed
run would add other noise. Here the noise of round t is `tf.random.stateless_normal` seeded by
(noise_seed, t, leaf), t counted in the query's state: the run is a function of its seed, a
resume continues exactly, and both engines add the same noise. The tree's noise is TensorFlow
Privacy's `GaussianNoiseGenerator` (stateless, its seeds in the query's state) seeded by a hash
of noise_seed (its streams for seeds s and s + 1 would otherwise overlap), the query
`TreeResidualSumQuery` (`RestartQuery` for the restarts), as TFF's
`DifferentiallyPrivateFactory.tree_aggregation` builds it, built for the update's specs when
TFF creates the process.
"""

import collections
import hashlib

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
from tensorflow_privacy.privacy.dp_query import quantile_estimator_query
from tensorflow_privacy.privacy.dp_query import restart_query
from tensorflow_privacy.privacy.dp_query import tree_aggregation

from tff_adaptive.aggregators.update_aggregation import UpdateAggregation
from tff_adaptive.core import validation
from tff_adaptive.core.dp_noise import DeliveredNoise

MECHANISMS = ('gaussian_fixed', 'gaussian_adaptive', 'tree')  # central DP (ddp: distributed)

# The seeds of the value noise and of the adaptive clip's count noise, from one noise_seed.
_VALUE_STREAM = 0
_COUNT_STREAM = 1


def _finite_or_zeros(leaves):
  """The leaves, or zeros of their shapes where any value of any leaf is not finite."""
  finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in leaves])
  return [tf.where(finite, v, tf.zeros_like(v)) for v in leaves]


class _SeededGaussianSumQuery(tfp.GaussianSumQuery):
  """`GaussianSumQuery` whose noise is a function of (seed, round, leaf).

  Global state: (l2_norm_clip, stddev, seed int64[2], round int32); `get_noised_result` adds
  N(0, stddev^2) to every leaf with `stateless_normal` seeded by fold_in(fold_in(seed, round),
  leaf index) and counts the round. A record with a non-finite value is clipped as zeros.
  """

  _GlobalState = collections.namedtuple('_GlobalState', ['l2_norm_clip', 'stddev', 'seed', 'round'])

  def __init__(self, l2_norm_clip, stddev, seed):
    super().__init__(l2_norm_clip, stddev)
    self._seed = tuple(int(s) for s in seed)

  def preprocess_record_impl(self, params, record):
    # A record with a non-finite value counts as zeros (as TFF's client work zeroes such an
    # update): clipping NaN gives NaN, and one client would then decide the round's release.
    record = tf.nest.pack_sequence_as(record, _finite_or_zeros(tf.nest.flatten(record)))
    return super().preprocess_record_impl(params, record)

  def make_global_state(self, l2_norm_clip, stddev, seed=None, round_num=None):
    return self._GlobalState(
      tf.cast(l2_norm_clip, tf.float32),
      tf.cast(stddev, tf.float32),
      tf.constant(self._seed, tf.int64) if seed is None else seed,
      tf.constant(0, tf.int32) if round_num is None else round_num,
    )

  def get_noised_result(self, sample_state, global_state):
    round_seed = tf.random.experimental.stateless_fold_in(
      global_state.seed, tf.cast(global_state.round, tf.int64)
    )
    leaves = tf.nest.flatten(sample_state)
    noised = [
      v
      + tf.random.stateless_normal(
        tf.shape(v),
        seed=tf.random.experimental.stateless_fold_in(round_seed, j),
        stddev=global_state.stddev,
        dtype=v.dtype,
      )
      for j, v in enumerate(leaves)
    ]
    result = tf.nest.pack_sequence_as(sample_state, noised)
    event = dp_accounting.GaussianDpEvent(global_state.stddev / global_state.l2_norm_clip)
    return result, global_state._replace(round=global_state.round + 1), event


class _SeededQuantileEstimatorQuery(quantile_estimator_query.QuantileEstimatorQuery):
  """`QuantileEstimatorQuery` whose below-estimate count is noised by the seeded query."""

  def __init__(self, *args, seed, **kwargs):
    self._noise_seed = seed  # read by _construct_below_estimate_query, which __init__ calls
    super().__init__(*args, **kwargs)

  def _construct_below_estimate_query(self, below_estimate_stddev, expected_num_records):
    # As TensorFlow Privacy's: the shifted indicators [norm <= C] - 1/2 have sensitivity 1/2.
    return tfp.NormalizedQuery(
      _SeededGaussianSumQuery(0.5, below_estimate_stddev, self._noise_seed),
      denominator=expected_num_records,
    )


class _SeededAdaptiveClipSumQuery(tfp.QuantileAdaptiveClipSumQuery):
  """`QuantileAdaptiveClipSumQuery` (geometric update) with seeded value and count noise."""

  def __init__(
    self,
    initial_l2_norm_clip,
    noise_multiplier,
    target_unclipped_quantile,
    learning_rate,
    clipped_count_stddev,
    expected_num_records,
    seed,
  ):
    super().__init__(
      initial_l2_norm_clip,
      noise_multiplier,
      target_unclipped_quantile,
      learning_rate,
      clipped_count_stddev,
      expected_num_records,
      geometric_update=True,
    )
    self._sum_query = _SeededGaussianSumQuery(
      initial_l2_norm_clip, noise_multiplier * initial_l2_norm_clip, (seed, _VALUE_STREAM)
    )
    self._quantile_estimator_query = _SeededQuantileEstimatorQuery(
      initial_l2_norm_clip,
      target_unclipped_quantile,
      learning_rate,
      clipped_count_stddev,
      expected_num_records,
      True,
      seed=(seed, _COUNT_STREAM),
    )

  def get_noised_result(self, sample_state, global_state):
    result, new_state, event = super().get_noised_result(sample_state, global_state)
    # The parent rebuilds the sum query's state from the new clip alone: keep its seed and
    # count its round.
    old = global_state.sum_state
    sum_state = new_state.sum_state._replace(seed=old.seed, round=old.round + 1)
    return result, new_state._replace(sum_state=sum_state), event


class _TreeResidualSumQuery(tfp.TreeResidualSumQuery):
  """TensorFlow Privacy's DP-FTRL query; its clip is fixed, so it reports no metrics."""

  def derive_metrics(self, global_state):
    del global_state
    return collections.OrderedDict()


def _clip_finite(record_as_list, clip):
  """The tree query's clip: a record with a non-finite value counts as zeros, as above."""
  clipped, _ = tf.clip_by_global_norm(_finite_or_zeros(record_as_list), clip)
  return clipped


def _tree_seed(noise_seed: int) -> int:
  """The tree noise generator's seed for a run's noise_seed, in [0, 2^62).

  `GaussianNoiseGenerator` seeds node k's leaf j with s + k L + j (L leaves): seeds s and s + 1
  would draw the same noise one leaf apart. A hash of the seed puts runs' streams far apart.
  """
  digest = hashlib.sha256(f'tff_adaptive.dp.tree/{noise_seed}'.encode()).digest()
  return int.from_bytes(digest[:8], 'little') >> 2


def build_tree_query(
  noise_multiplier: float,
  clients_per_round: int,
  clip: float,
  specs,
  *,
  restart_rounds: int | None = None,
  efficient: bool = True,
  noise_seed: int = 0,
) -> tfp.DPQuery:
  """DP-FTRL's mean query for updates of `specs` (module docstring, 'tree').

  NormalizedQuery(TreeResidualSumQuery, denominator=m), in a `RestartQuery` that restarts the
  tree every `restart_rounds` rounds (None: one tree for the whole run, as TFF's
  `DifferentiallyPrivateFactory.tree_aggregation`).
  """
  noise = _tree_noise(noise_multiplier, clients_per_round, clip, restart_rounds)
  return _tree_query(noise, specs, efficient=efficient, noise_seed=noise_seed)


def _tree_noise(noise_multiplier, clients_per_round, clip, restart_rounds) -> DeliveredNoise:
  validation.check_nonnegative('noise_multiplier', noise_multiplier)
  validation.check_int('clients_per_round', clients_per_round, 1)
  validation.check_positive('clip', clip)
  if restart_rounds is not None:
    validation.check_int('restart_rounds', restart_rounds, 1)
  return DeliveredNoise.for_mechanism(
    'tree', noise_multiplier, clients_per_round, clip, restart_rounds=restart_rounds
  )


def _tree_query(noise: DeliveredNoise, specs, *, efficient: bool, noise_seed: int) -> tfp.DPQuery:
  """The tree query that adds `noise` (its node std z C, its restarts)."""
  validation.check_int('noise_seed', noise_seed, 0)
  generator = tree_aggregation.GaussianNoiseGenerator(
    noise_std=noise.sum_stddev(), specs=specs, seed=_tree_seed(noise_seed)
  )
  query = _TreeResidualSumQuery(
    record_specs=specs,
    noise_generator=generator,
    clip_fn=_clip_finite,
    clip_value=noise.clip,
    use_efficient=efficient,
  )
  if noise.restart_rounds is not None:
    query = restart_query.RestartQuery(
      query, restart_query.PeriodicRoundRestartIndicator(noise.restart_rounds)
    )
  return tfp.NormalizedQuery(query, denominator=float(noise.clients_per_round))


def _specs_of(values):
  return tf.nest.map_structure(lambda v: tf.TensorSpec(v.shape, v.dtype), values)


class _TreeFactory(tff.aggregators.UnweightedAggregationFactory):
  """`DifferentiallyPrivateFactory` over `build_tree_query` for the value type it is given (the
  tree's noise has the updates' shapes, known when TFF creates the process)."""

  def __init__(self, build_query):
    self._build_query = build_query

  def create(self, value_type):
    query = self._build_query(tff.types.type_to_tf_tensor_specs(value_type))
    return tff.aggregators.DifferentiallyPrivateFactory(query).create(value_type)


def build_dp_query(
  mechanism: str,
  noise_multiplier: float,
  clients_per_round: int,
  clip: float,
  *,
  target_quantile: float = 0.5,
  clip_learning_rate: float = 0.2,
  clipped_count_stddev: float | None = None,
  noise_seed: int = 0,
) -> tfp.DPQuery:
  """The mean query of `mechanism`: NormalizedQuery(sum query, denominator=clients_per_round)."""
  noise = _gaussian_noise(
    mechanism, noise_multiplier, clients_per_round, clip, clipped_count_stddev
  )
  return _gaussian_query(
    noise,
    target_quantile=target_quantile,
    clip_learning_rate=clip_learning_rate,
    noise_seed=noise_seed,
  )


def _gaussian_noise(
  mechanism, noise_multiplier, clients_per_round, clip, clipped_count_stddev
) -> DeliveredNoise:
  if mechanism not in MECHANISMS:
    raise ValueError(f'mechanism={mechanism!r} is invalid; valid choices: {", ".join(MECHANISMS)}')
  if mechanism == 'tree':
    raise ValueError("mechanism='tree' needs the updates' specs: use build_tree_query")
  validation.check_nonnegative('noise_multiplier', noise_multiplier)
  validation.check_int('clients_per_round', clients_per_round, 1)
  validation.check_positive('clip', clip)
  return DeliveredNoise.for_mechanism(
    mechanism, noise_multiplier, clients_per_round, clip, clipped_count_stddev=clipped_count_stddev
  )


def _gaussian_query(
  noise: DeliveredNoise, *, target_quantile: float, clip_learning_rate: float, noise_seed: int
) -> tfp.DPQuery:
  """The query that adds `noise`: value noise z_v C_t on the sum, the count's sigma_b."""
  validation.check_int('noise_seed', noise_seed, 0)
  if noise.mechanism == 'gaussian_fixed':
    query = _SeededGaussianSumQuery(noise.clip, noise.sum_stddev(), (noise_seed, _VALUE_STREAM))
  else:
    if not 0 < target_quantile < 1:
      raise ValueError(f'target_quantile must be in (0, 1), got {target_quantile}')
    validation.check_nonnegative('clip_learning_rate', clip_learning_rate)
    query = _SeededAdaptiveClipSumQuery(
      noise.clip,
      noise.value_noise_multiplier,
      target_quantile,
      clip_learning_rate,
      noise.count_noise_stddev,
      float(noise.clients_per_round),
      noise_seed,
    )
  return tfp.NormalizedQuery(query, denominator=float(noise.clients_per_round))


def _tree_parts(noise_multiplier, clients_per_round, clip, kwargs):
  """(noise, specs -> query, TFF factory builder) of the tree mechanism."""
  kwargs = dict(kwargs)
  tree_kwargs = {k: kwargs.pop(k) for k in ('efficient', 'noise_seed') if k in kwargs}
  noise = _tree_noise(noise_multiplier, clients_per_round, clip, kwargs.pop('restart_rounds', None))
  if kwargs:
    raise TypeError(f'dp_mean(tree): unexpected arguments {sorted(kwargs)}')

  def query_for(specs):
    return _tree_query(
      noise,
      specs,
      efficient=tree_kwargs.get('efficient', True),
      noise_seed=tree_kwargs.get('noise_seed', 0),
    )

  query_for(())  # checks the arguments now
  return noise, query_for, lambda: _TreeFactory(query_for)


def _gaussian_parts(mechanism, noise_multiplier, clients_per_round, clip, kwargs):
  """(noise, specs -> query, TFF factory builder) of the Gaussian mechanisms."""
  kwargs = dict(kwargs)
  clipped_count_stddev = kwargs.pop('clipped_count_stddev', None)
  noise = _gaussian_noise(
    mechanism, noise_multiplier, clients_per_round, clip, clipped_count_stddev
  )
  query = _gaussian_query(
    noise,
    target_quantile=kwargs.pop('target_quantile', 0.5),
    clip_learning_rate=kwargs.pop('clip_learning_rate', 0.2),
    noise_seed=kwargs.pop('noise_seed', 0),
  )
  if kwargs:
    raise TypeError(f'dp_mean({mechanism}): unexpected arguments {sorted(kwargs)}')
  return noise, lambda specs: query, lambda: tff.aggregators.DifferentiallyPrivateFactory(query)


def _fold(query_for):
  """(zero, accumulate, report, initialize) of the in-process fold of a query (specs -> query):
  the same clip, sum and noise as the TFF face."""

  def initialize(specs):
    return query_for(specs).initial_global_state()

  def zero(specs, state):
    query = query_for(specs)
    return (query.derive_sample_params(state), query.initial_sample_state(specs))

  def accumulate(acc, value, weight):
    del weight
    params, sample = acc
    return (params, query_for(_specs_of(sample)).accumulate_record(params, sample, value))

  def report(acc, state):
    _, sample = acc
    query = query_for(_specs_of(sample))
    result, new_state, _ = query.get_noised_result(sample, state)
    measurements = collections.OrderedDict(dp_query_metrics=query.derive_metrics(new_state), dp=())
    return result, new_state, measurements

  return zero, accumulate, report, initialize


def dp_mean(
  mechanism: str,
  noise_multiplier: float,
  clients_per_round: int,
  clip: float,
  **kwargs,
) -> UpdateAggregation:
  """The DP mean of client updates as an `UpdateAggregation` (module docstring).

  Args:
    mechanism: 'gaussian_fixed' (clip C), 'gaussian_adaptive' (initial clip C, adapted to
      the `target_quantile` of the update norms at `clip_learning_rate`) or 'tree' (clip C,
      DP-FTRL's tree noise, restarted every `restart_rounds` rounds).
    noise_multiplier: z >= 0 (0: clipping without noise, not private).
    clients_per_round: m, the denominator (the trainer samples exactly m clients a round).
    clip: C > 0.
    **kwargs: `target_quantile`, `clip_learning_rate`, `clipped_count_stddev` (adaptive),
      `restart_rounds` and `efficient` (tree: `build_tree_query`) and `noise_seed` (the run's
      seed: the noise is a function of it and the round).

  Returns:
    An `UpdateAggregation` that does not read the weights. Its TFF face is
    `tff.aggregators.DifferentiallyPrivateFactory(query)` wrapped by
    `tff.aggregators.as_weighted_aggregator` (as TFF's `build_unweighted_fed_avg` wraps its
    aggregator; `build_dp_query` gives the query for other compositions); pass the
    aggregation to an algorithm builder, `algorithms.build_fedopt(..., aggregation=...)`. Its
    fold runs the same query's clip, sum and noise in the in-process engine.
  """
  if mechanism == 'tree':
    noise, query_for, make_factory = _tree_parts(noise_multiplier, clients_per_round, clip, kwargs)
  else:
    noise, query_for, make_factory = _gaussian_parts(
      mechanism, noise_multiplier, clients_per_round, clip, kwargs
    )
  restart = noise.restart_rounds
  restarted = f', restarted every {restart} rounds' if restart else ''
  zero, accumulate, report, initialize = _fold(query_for)
  return UpdateAggregation(
    f'dp_mean({mechanism}, z={noise_multiplier:g}, C={clip:g}, m={clients_per_round}{restarted})',
    lambda: tff.aggregators.as_weighted_aggregator(make_factory()),
    zero,
    accumulate,
    report,
    initialize=initialize,
    privacy=noise,
  )
