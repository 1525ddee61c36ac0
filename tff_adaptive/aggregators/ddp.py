"""Distributed differential privacy: the distributed Skellam mechanism under secure aggregation.

Agarwal, Kairouz, Liu. "The Skellam Mechanism for Differentially Private Federated Learning."
NeurIPS 2021; the pipeline is that of Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian
Mechanism for Federated Learning with Secure Aggregation", ICML 2021. The TFF face is TFF's own
`tff.aggregators.DistributedDpSumFactory` (mechanism 'distributed_skellam', Hadamard rotation,
a fixed clip) under `UnweightedMeanFactory` with a secure count, which is what
`tff.learning.ddp_secure_aggregator` builds, less its adaptive clip and adaptive zeroing (the
zeroing's norm estimate is released without noise, outside the accounting). Round t, the m
sampled clients' updates u_i flattened to d values and zero-padded to d' = 2^ceil(log2 d),
B bits::

    v_i = H D_t u_i / sqrt(d')                  # randomised Hadamard rotation, ||v_i|| = ||u_i||
    c_i = v_i min(1, C / ||v_i||)               # clip
    q_i = R(s c_i)                              # scale by s, unbiased randomised rounding to Z^d'
    y_i = q_i + Sk(mu / m)                      # each client adds its share of Skellam noise
    Y = sum_i y_i  (mod 2^B, centred)           # secure aggregation: the server sees only Y
    g_t = D_t H^T (Y / s) / (sqrt(d') m)        # unscaled, rotated back, over the m clients

Sk(mu) = Poisson(mu / 2) - Poisson(mu / 2) has variance mu and is closed under sums, so the m
shares add up to Sk(mu), mu = (s z C)^2: noise of standard deviation z C on the sum in the
updates' units, like the Gaussian mechanism's, but on integers that secure aggregation can add
modulo 2^B. The scale s is TFF's (`_heuristic_scale_factor`; `core.skellam`): the largest at
which k standard deviations of the aggregate fit in B bits, k = sqrt(2) erfc^-1(1e-4) (a
modular wrap-around in 1e4 coordinates), capped at 1e6,

    s = sqrt(2^(2B) - m k^2) / (2 k sqrt(C^2 m^2 / d' + (z C)^2)).

Privacy: one client's clipped update replaced by zero (a null client) moves the integer sum by
q_i, and randomised rounding moves each coordinate by less than 1, so (TFF's bounds, with its
1e-5 leeway)

    Delta_2 = s (C + sqrt(d') / s + 1e-5),   Delta_1 = ceil(Delta_2 min(sqrt(d'), Delta_2))

(integer vectors have L1 <= L2^2), and the Skellam mechanism's RDP bound (Agarwal et al.) is

    eps(alpha) = alpha Delta_2^2 / (2 mu) + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2),
                                               3 Delta_1 / (2 mu)),

the Gaussian's alpha Delta_2^2 / (2 mu) plus a term that vanishes as mu grows
(`core.skellam.SkellamParameters`, `privacy.accounting.SkellamRounds`). Everything after the
noise (the secure sum, the division by m, the server optimizer) is post-processing.

Secure aggregation is simulated: TFF's secure-sum intrinsics run as their TensorFlow bodies
(`tff.backends.test.replace_secure_intrinsics_with_bodies`, as TFF's test contexts do; the
runtime's contexts compile them so), the same modular arithmetic in the clear. There is no fold:
the in-process engines refuse this aggregation (`UpdateAggregation.tff_only`).

Seeded randomness, the one change to TFF's parts: TFF and TensorFlow Privacy seed the rotation's
signs, the randomised rounding and each client's Skellam share with the clock (`tf.timestamp`),
so a run would not be a function of its seed, a resume would not continue exactly, and two
clients processed in the same microsecond would draw the same Skellam share (correlated noise:
the sum's variance would not be mu). Here, while TFF builds the process, the rotation's initial
seed is a hash of noise_seed (its per-round counter is TFF's), and the rounding and the Skellam
share of a client are drawn from stateless generators seeded by (that hash, a fingerprint of the
client's value): deterministic, and distinct between clients whose updates differ in any bit
(two clients with bit-identical updates, e.g. both without data, would share their draws).
"""

import contextlib
import hashlib
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import distributed_dp
from tensorflow_federated.python.aggregators import rotation
import tensorflow_privacy as tfp

from tff_adaptive.aggregators.update_aggregation import UpdateAggregation
from tff_adaptive.core import skellam
from tff_adaptive.core import validation
from tff_adaptive.core.dp_noise import DeliveredNoise

_ROTATION = 'hd'
_ROUNDING_STREAM = 1
_NOISE_STREAM = 2


def _stream_seed(noise_seed: int, stream: int = 0) -> int:
  """An int64 seed for a run's noise_seed and a stream: a hash, so that runs' streams lie far
  apart."""
  digest = hashlib.sha256(f'tff_adaptive.ddp/{noise_seed}/{stream}'.encode()).digest()
  return int.from_bytes(digest[:8], 'little') >> 2


def _fingerprint(value) -> tf.Tensor:
  """An int64 fingerprint of a tensor's bytes."""
  data = tf.reshape(tf.bitcast(value, tf.uint8), [1, -1])
  return tf.bitcast(tf.fingerprint(data)[0], tf.int64)


def _value_seed(run_seed: int, value, stream: int) -> tf.Tensor:
  """[2] int64 seed of a stateless generator: (run seed, stream), and `value`'s fingerprint."""
  return tf.stack([tf.constant(_stream_seed(run_seed, stream), tf.int64), _fingerprint(value)])


class _SeededSkellamSumQuery(tfp.DistributedSkellamSumQuery):
  """TensorFlow Privacy's query; a client's share is seeded by its value (module docstring)."""

  def __init__(self, l1_norm_bound, l2_norm_bound, local_stddev, *, run_seed: int):
    super().__init__(l1_norm_bound, l2_norm_bound, local_stddev)
    self._run_seed = run_seed

  def add_noise_to_sample(self, local_stddev, record):
    lam = 0.5 * tf.cast(local_stddev, tf.float64) ** 2
    leaves = tf.nest.flatten(record)
    flat = tf.concat([tf.reshape(v, [-1]) for v in leaves], 0)
    seed = _value_seed(self._run_seed, flat, _NOISE_STREAM)
    noised = []
    for j, v in enumerate(leaves):
      poissons = tf.random.stateless_poisson(
        tf.concat([tf.shape(v), [2]], axis=0),
        seed=tf.random.experimental.stateless_fold_in(seed, j),
        lam=[lam, lam],
        dtype=tf.int64,
      )
      noised.append(v + tf.cast(poissons[..., 0] - poissons[..., 1], v.dtype))
    return tf.nest.pack_sequence_as(record, noised)


@contextlib.contextmanager
def _seeded_tff_randomness(run_seed: int):
  """While TFF builds the process: its clock-seeded draws seeded from `run_seed` (module
  docstring). The three names are read when `DistributedDpSumFactory.create` builds and traces
  its computations, so what they are inside this block is what the process runs."""

  def init_global_seed():
    return tf.constant([run_seed, 0], tf.int64)

  def discretize_struct(struct, scale, stochastic, beta, prior_norm_bound):
    # TFF's `_discretize_struct`, the rounding's seed given (TFF's is tf.timestamp()).
    def discretize_tensor(x):
      scaled_x = tf.cast(x, tf.float32) * scale
      if not stochastic:
        return tf.cast(tf.round(scaled_x), discretization.OUTPUT_TF_TYPE)
      # One int64 seed (TFF draws with [seed, try]): the two halves of `_value_seed` xored.
      seed = tf.bitwise.bitwise_xor(*tf.unstack(_value_seed(run_seed, scaled_x, _ROUNDING_STREAM)))
      rounded = discretization._stochastic_rounding(  # noqa: SLF001  (TFF's own rounding, reseeded)
        scaled_x, prior_norm_bound * scale, scale, beta, seed=seed
      )
      return tf.cast(rounded, discretization.OUTPUT_TF_TYPE)

    return tf.nest.map_structure(discretize_tensor, struct)

  def skellam_query(l1_norm_bound, l2_norm_bound, local_stddev):
    return _SeededSkellamSumQuery(l1_norm_bound, l2_norm_bound, local_stddev, run_seed=run_seed)

  patches = [
    (rotation, '_init_global_seed', init_global_seed),
    (discretization, '_discretize_struct', discretize_struct),
    (distributed_dp.tfp, 'DistributedSkellamSumQuery', skellam_query),
  ]
  saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
  try:
    for module, name, value in patches:
      setattr(module, name, value)
    yield
  finally:
    for module, name, value in saved:
      setattr(module, name, value)


class _SeededDistributedDpSumFactory(distributed_dp.DistributedDpSumFactory):
  """TFF's factory, its process built with seeded randomness (module docstring)."""

  def __init__(self, *args, run_seed: int, **kwargs):
    super().__init__(*args, **kwargs)
    self._run_seed = run_seed

  def create(self, value_type):
    with _seeded_tff_randomness(self._run_seed):
      return super().create(value_type)


def _allow_deep_protos() -> None:
  """Lets this process build TFF computations nested deeper than 100 levels.

  The factory nests seven aggregators (concat, rotation, clip, discretisation, DP, two modular
  clips over the secure sum); under a learning process TFF's building blocks then nest deeper
  than the 100 levels that protobuf's upb implementation parses by default, and TFF fails with
  "DecodeError: Error parsing message" while it serialises them. upb lifts the limit (and the
  64 MB size limit) with `SetAllowOversizeProtos`, for the whole process.
  """
  from google.protobuf.internal import api_implementation  # pylint: disable=g-import-not-at-top

  if api_implementation.Type() == 'upb':
    from google._upb import _message  # pylint: disable=g-import-not-at-top

    _message.SetAllowOversizeProtos(True)


def ddp_sum_factory(
  noise_multiplier: float, clients_per_round: int, clip: float, bits: int = 20, noise_seed: int = 0
) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's `DistributedDpSumFactory` (distributed Skellam, Hadamard rotation, fixed clip C),
  its draws seeded by `noise_seed` (module docstring): the noisy sum of the clients' values."""
  noise = DeliveredNoise.for_mechanism(
    'distributed_skellam', noise_multiplier, clients_per_round, clip, bits=bits
  )
  return _sum_factory(noise, noise_seed)


def _sum_factory(noise: DeliveredNoise, noise_seed: int):
  """The factory that adds `noise` (its z, C, m and B)."""
  validation.check_int('noise_seed', noise_seed, 0)
  _allow_deep_protos()
  return _SeededDistributedDpSumFactory(
    noise_multiplier=noise.noise_multiplier,
    expected_clients_per_round=noise.clients_per_round,
    bits=noise.bits,
    l2_clip=noise.clip,
    modclip_prob=skellam.MODCLIP_PROBABILITY,
    mechanism='distributed_skellam',
    rotation_type=_ROTATION,
    auto_l2_clip=False,
    run_seed=_stream_seed(noise_seed),
  )


def _no_fold(*args: Any) -> Any:
  del args
  raise ValueError(f'ddp_mean runs on engine tff only: {TFF_ONLY}')


TFF_ONLY = (
  "secure aggregation is a TFF intrinsic (federated_secure_sum), which only TFF's runtime computes"
)


def ddp_mean(
  noise_multiplier: float,
  clients_per_round: int,
  clip: float,
  bits: int = 20,
  noise_seed: int = 0,
) -> UpdateAggregation:
  """The distributed-DP mean of client updates as an `UpdateAggregation` (module docstring).

  Args:
    noise_multiplier: z >= 0: the m Skellam shares add up to noise of std z C on the sum
      (0: clipping and quantisation without noise, not private).
    clients_per_round: m: each client adds 1/m of the noise variance (the trainer samples exactly
      m clients a round).
    clip: C > 0, the L2 clip of an update.
    bits: B, 1..22: secure aggregation's modulus 2^B (TFF's `ddp_secure_aggregator` default:
      20). Fewer bits, smaller scale s, more rounding and a larger Delta_2 / (s C).
    noise_seed: the run's seed: the rotation, rounding and noise are a function of it.

  Returns:
    An `UpdateAggregation` for engine 'tff' only (`tff_only`), which does not read the weights:
    `tff.aggregators.UnweightedMeanFactory(ddp_sum_factory(...), SecureSumFactory count)`
    wrapped by `tff.aggregators.as_weighted_aggregator`; its measurements are TFF's (the scale,
    Delta_2, the local noise std, the padded dimension: `mean_value`, and the secure count's
    `mean_count`), written as ddp_* and ddp_count_* columns (`engines.base.flat_metrics`).
  """
  noise = DeliveredNoise.for_mechanism(
    'distributed_skellam', noise_multiplier, clients_per_round, clip, bits=bits
  )
  factory = _sum_factory(noise, noise_seed)

  def make_factory():
    mean = tff.aggregators.UnweightedMeanFactory(
      value_sum_factory=factory,
      count_sum_factory=tff.aggregators.SecureSumFactory(
        upper_bound_threshold=1, lower_bound_threshold=0
      ),
    )
    return tff.aggregators.as_weighted_aggregator(mean)

  return UpdateAggregation(
    f'ddp_mean(distributed_skellam, z={noise_multiplier:g}, C={clip:g}, m={clients_per_round}, '
    f'B={bits})',
    make_factory,
    _no_fold,
    _no_fold,
    _no_fold,
    privacy=noise,
    tff_only=TFF_ONLY,
  )


__all__ = ['TFF_ONLY', 'ddp_mean', 'ddp_sum_factory']
