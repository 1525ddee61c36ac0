"""Distributed DP (`aggregators.ddp_mean`, TFF's DistributedDpSumFactory with distributed Skellam
noise under simulated secure aggregation) and its accounting (`core.skellam`,
`privacy.accounting.SkellamRounds`), against NumPy references of the equations."""

import math

import dp_accounting
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive.aggregators import ddp
from tff_adaptive.core import skellam
from tff_adaptive.privacy import accounting

K = 3.89059188641312  # sqrt(2) erfc^-1(1e-4): Phi^-1(1 - 0.5e-4)


def _clients(m, d, seed, scale=1.0):
  """m distinct client vectors of d values, norms from ~0.3 to ~3 times `scale`."""
  rng = np.random.default_rng(seed)
  return [
    (rng.normal(size=d) * scale * (0.3 + i) / np.sqrt(d)).astype(np.float32) for i in range(m)
  ]


def _sum_process(z, m, clip, bits, d, noise_seed=0):
  factory = ddp.ddp_sum_factory(z, m, clip, bits, noise_seed=noise_seed)
  return factory.create(tff.TensorType(np.float32, [d]))


def _one_round(process, values):
  out = process.next(process.initialize(), values)
  return np.asarray(out.result), out.measurements


def _clipped_sum(values, clip):
  return sum(v * min(1.0, clip / np.linalg.norm(v)) for v in values)


# --------------------------------------------------------------------------- the parameters


def _reference(z, clip, m, d, bits):
  """(d', s, mu, Delta_2, Delta_1) by the equations of core/skellam.py's docstring, in NumPy."""
  padded = int(2 ** np.ceil(np.log2(d)))
  s = np.sqrt(2.0 ** (2 * bits) - m * K**2) / (
    2 * K * np.sqrt(clip**2 * m**2 / padded + (z * clip) ** 2)
  )
  s = min(s, 1e6)
  l2 = s * clip + np.sqrt(padded) + 1e-5 * s
  return padded, s, (s * z * clip) ** 2, l2, float(np.ceil(l2 * min(np.sqrt(padded), l2)))


def test_the_parameters_are_the_ones_tff_runs_with():
  """One round of TFF's factory: the scale, Delta_2 and local noise std it reports are
  `SkellamParameters`' (and the NumPy reference's) for z, C, m, d, B that tell them apart."""
  z, clip, m, d, bits = 1.3, 0.5, 3, 100, 16
  _, measurements = _one_round(_sum_process(z, m, clip, bits, d), _clients(m, d, 0))
  p = skellam.SkellamParameters(z, clip, m, d, bits)
  padded, s, mu, l2, l1 = _reference(z, clip, m, d, bits)
  assert p.padded_dim == padded == 128 == int(measurements['padded_dim'])
  assert p.scale == pytest.approx(s, rel=1e-12)
  assert p.variance == pytest.approx(mu, rel=1e-12)
  assert (p.l2_sensitivity, p.l1_sensitivity) == (pytest.approx(l2, rel=1e-12), l1)
  assert float(measurements['scale_factor']) == pytest.approx(p.scale, rel=1e-6)
  assert float(measurements['scaled_inflated_l2']) == pytest.approx(p.l2_sensitivity, rel=1e-6)
  assert float(measurements['scaled_local_stddev']) == pytest.approx(p.local_stddev, rel=1e-6)
  assert int(measurements['actual_num_clients']) == m
  # Fewer bits: a smaller scale, so rounding inflates the sensitivity more (Delta_2 / (s C)).
  coarse = skellam.SkellamParameters(z, clip, m, d, 8)
  assert coarse.scale == pytest.approx(p.scale / 2**8, rel=1e-3)
  assert coarse.l2_sensitivity / (coarse.scale * clip) > 1.2 > p.l2_sensitivity / (p.scale * clip)


def test_rdp_is_the_papers_bound_and_tends_to_the_gaussians():
  z, clip, m, d, bits = 0.9, 1.0, 10, 1000, 12
  p = skellam.SkellamParameters(z, clip, m, d, bits)
  _, _, mu, l2, l1 = _reference(z, clip, m, d, bits)
  for alpha in (2, 3, 17, 256):
    bound = alpha * l2**2 / (2 * mu) + min(
      ((2 * alpha - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu)
    )
    assert p.rdp(alpha) == pytest.approx(bound, rel=1e-12)
    gaussian = alpha / (2 * z**2)
    assert p.rdp(alpha) > gaussian * (l2 / (p.scale * clip)) ** 2 >= gaussian
  assert skellam.SkellamParameters(0.0, clip, m, d, bits).rdp(2) == math.inf
  # 22 bits: s ~ 5e5, Delta_2 = s C (1 + 7e-5): T rounds cost what T Gaussian rounds of the
  # same z cost (dp_accounting, the same orders), to the inflation.
  fine = skellam.SkellamParameters(z, clip, m, d, 22)
  rounds = 50
  delta = 1e-5
  ours = accounting.epsilon(accounting.SkellamRounds(fine, rounds), delta)
  gaussian = dp_accounting.rdp.RdpAccountant(list(accounting.SKELLAM_ORDERS))
  gaussian.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds))
  reference = gaussian.get_epsilon(delta)
  assert reference < ours < reference * 1.001
  # By round: T times one round's RDP.
  by_round = accounting.SkellamEpsilonByRound(p, delta)
  for t in (1, 7):
    expected = accounting.epsilon(accounting.SkellamRounds(p, t), delta)
    assert by_round.epsilon(t) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
  'kwargs,message',
  [
    ({'bits': 23}, 'bits=23 is invalid; expected an integer in [1, 22]'),
    ({'bits': 3, 'clients_per_round': 10}, 'bits=3 is too few for 10 clients per round'),
    ({'clip': 0.0}, 'clip'),
    ({'noise_multiplier': -1.0}, 'noise_multiplier'),
  ],
)
def test_bad_arguments_are_named(kwargs, message):
  args = {'noise_multiplier': 1.0, 'clients_per_round': 5, 'clip': 1.0, 'bits': 16, **kwargs}
  with pytest.raises(ValueError, match=message.replace('[', r'\[').replace(']', r'\]')):
    ddp.ddp_mean(**args)


# ------------------------------------------------------------------------- the mechanism


def test_without_noise_the_sum_is_the_clipped_sum_to_the_rounding():
  """z = 0: the rotated, clipped, rounded sum, rotated back, is the clipped sum to within the
  rounding: each of the d' coordinates of each client moves by less than 1 / s."""
  m, d, clip = 4, 300, 0.8
  values = _clients(m, d, 1)
  result, _ = _one_round(_sum_process(0.0, m, clip, 20, d), values)
  expected = _clipped_sum(values, clip)
  assert sum(np.linalg.norm(v) > clip for v in values) >= 2  # the clip binds
  p = skellam.SkellamParameters(0.0, clip, m, d, 20)
  error = np.linalg.norm(result - expected)
  assert 0 < error <= m * np.sqrt(p.padded_dim) / p.scale
  assert np.linalg.norm(result - sum(values)) > 100 * error  # not the unclipped sum


def test_the_noise_has_std_z_c_on_the_sum_and_the_clients_shares_are_independent():
  """z = 2, C = 0.1, m = 3: the sum's noise per coordinate has std z C (the m shares of
  variance (z C)^2 / m each); shares drawn alike (TF Privacy's clock seed within one
  microsecond) would give sqrt(m) z C."""
  z, clip, m, d = 2.0, 0.1, 3, 8192
  values = _clients(m, d, 2)
  result, _ = _one_round(_sum_process(z, m, clip, 20, d), values)
  noise = result - _clipped_sum(values, clip)
  assert abs(noise.mean()) < 4 * z * clip / np.sqrt(d)
  # The std's estimate over 8192 coordinates has relative standard error ~0.8%.
  assert noise.std() == pytest.approx(z * clip, rel=0.04)


def test_the_draws_are_a_function_of_the_seed():
  m, d = 3, 64
  values = _clients(m, d, 3)
  first, _ = _one_round(_sum_process(1.0, m, 1.0, 16, d, noise_seed=7), values)
  again, _ = _one_round(_sum_process(1.0, m, 1.0, 16, d, noise_seed=7), values)
  other, _ = _one_round(_sum_process(1.0, m, 1.0, 16, d, noise_seed=8), values)
  np.testing.assert_array_equal(first, again)
  assert np.abs(first - other).max() > 0.1


def test_the_mean_divides_by_the_clients_and_ignores_the_weights():
  """`ddp_mean`'s TFF face: the same sum over m, whatever the weights (z = 0, 20 bits)."""
  m, d, clip = 3, 50, 10.0
  values = _clients(m, d, 4)
  aggregation = aggregators.ddp_mean(0.0, m, clip, 20, noise_seed=1)
  assert aggregation.differentially_private and aggregation.tff_only
  process = aggregation.factory().create(
    tff.TensorType(np.float32, [d]), tff.TensorType(np.float32)
  )
  state = process.initialize()
  out = process.next(state, values, [1.0, 5.0, 100.0])
  np.testing.assert_allclose(out.result, sum(values) / m, atol=1e-4)


def test_the_in_process_engines_refuse_it_in_one_line():
  def model_fn():
    raise AssertionError('the engine refuses before it builds the model')

  algorithm = algorithms.build_fedopt(
    model_fn,
    algorithms.ClientTrainingConfig(optimizers.ClientOptimizerConfig('sgd', 0.1)),
    optimizers.build_fedavg_sgd(1.0),
    aggregation=aggregators.ddp_mean(1.0, 5, 1.0, 16),
  )
  with pytest.raises(ValueError, match='runs on engine tff only: secure aggregation is a TFF'):
    engines.InProcessEngine(algorithm)
