"""Quantised uploads (`aggregators.quantized_mean`, --compression=uniform).

Held to NumPy written from Suresh et al. 2017 (the grid, the unbiased stochastic rounding, the
bits sent), both faces (TFF's MeanFactory over EncodedSumFactory, the in-process fold) to each
other, and the two engines to each other within the quantisation's own error.
"""

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_model_optimization.python.core.internal import tensor_encoding as te

from tff_adaptive import aggregators
from tff_adaptive import algorithms
from tff_adaptive import engines
from tff_adaptive import optimizers
from tff_adaptive import tasks
from tff_adaptive.aggregators import compression
from tff_adaptive.aggregators import config as aggregator_config
from tff_adaptive.algorithms import config as algorithm_config
from tff_adaptive.core import seeds
from tff_adaptive.optimizers import client as client_optimizers


def grid_numpy(t, bits):
  """The 2^b points between min t and max t that Suresh et al.'s quantiser sends."""
  return np.linspace(np.min(t), np.max(t), 2**bits, dtype=np.float64)


def bits_numpy(sizes, bits):
  """Bits of one upload: per tensor ceil(n b / 28) int32 words + min and max, and the weight."""
  return 32 + sum(32 * math.ceil(n * bits / 28) + 64 if n > 1 else 32 * n for n in sizes)


def _roundtrip(t, bits):
  spec = tf.TensorSpec(t.shape, tf.float32)
  encoder = te.encoders.as_simple_encoder(compression._quantization_encoder(bits), spec)  # noqa: SLF001
  encoded, _ = encoder.encode(tf.constant(t), encoder.initial_state())
  return encoded, np.asarray(encoder.decode(encoded), np.float64)


@pytest.mark.parametrize('bits', [2, 4, 8])
def test_values_land_on_the_neighbouring_grid_points_unbiased(bits):
  rng = np.random.default_rng(bits)
  t = rng.normal(size=100_000).astype(np.float32)
  _, decoded = _roundtrip(t, bits)
  grid = grid_numpy(t, bits)
  step = grid[1] - grid[0]
  index = (decoded - grid[0]) / step
  np.testing.assert_allclose(index, np.round(index), atol=1e-3)  # on the grid
  low = grid[0] + np.floor((t - grid[0]) / step) * step
  assert np.all(
    (np.abs(decoded - low) < 1e-4 * step) | (np.abs(decoded - low - step) < 1e-4 * step)
  )
  # Rounded up with probability (t - low) / step: the mean error is 0 within 4 standard errors.
  error = decoded - t
  assert abs(np.mean(error)) < 4 * np.std(error) / np.sqrt(t.size)
  frac = (t - low) / step
  up = decoded > low + step / 2
  for lo, hi in ((0.1, 0.2), (0.45, 0.55), (0.8, 0.9)):
    inside = (frac > lo) & (frac < hi)
    assert np.mean(up[inside]) == pytest.approx((lo + hi) / 2, abs=0.02)
  assert np.min(decoded) == pytest.approx(np.min(t)) and np.max(decoded) == pytest.approx(np.max(t))


@pytest.mark.parametrize('bits', [1, 4, 8, 16])
def test_bits_per_client_counts_what_the_encoder_sends(bits):
  sizes = [784 * 10, 10, 3, 1]
  specs = [tf.TensorSpec([n], tf.float32) for n in sizes]
  assert compression.bits_per_client(specs, bits) == bits_numpy(sizes, bits)
  sent = 32  # the weight
  for spec in specs:
    if spec.shape.num_elements() == 1:
      sent += 32
      continue
    encoded, _ = _roundtrip(np.linspace(-1, 1, spec.shape[0]).astype(np.float32), bits)
    sent += sum(32 * int(np.prod(v.shape)) for v in tf.nest.flatten(encoded))
  assert compression.bits_per_client(specs, bits) == sent
  # The threshold leaves small tensors as float32, as TFF's compression_aggregator does.
  assert compression.bits_per_client(specs, bits, threshold=20_000) == 32 * (1 + sum(sizes))


def test_both_faces_send_the_same_bits_and_agree():
  rng = np.random.default_rng(0)
  specs = (tf.TensorSpec([50], tf.float32), tf.TensorSpec([3, 4], tf.float32))
  values = [tuple(rng.normal(size=s.shape).astype(np.float32) for s in specs) for _ in range(4)]
  weights = [1.0, 0.0, 2.5, 3.0]
  aggregation = aggregators.quantized_mean(4)
  acc = aggregation.zero(specs, ())
  for v, w in zip(values, weights):
    acc = aggregation.accumulate(acc, tf.nest.map_structure(tf.constant, v), w)
  folded, _, measurements = aggregation.report(acc, ())
  process = aggregation.factory().create(
    tff.types.tensorflow_to_type(specs), tff.TensorType(np.float32)
  )
  output = process.next(process.initialize(), values, weights)
  for a, b in zip(folded, output.result):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-6, atol=1e-6)
  bits = bits_numpy([50, 12], 4)
  assert int(measurements['compression_bits_per_client']) == bits
  assert output.measurements['compression_bits_per_client'] == bits
  # The mean of w_i u_i, each within one grid step of its own range (Suresh et al.).
  exact = [sum(w * v[j] for v, w in zip(values, weights)) / sum(weights) for j in range(2)]
  for j in range(2):
    steps = [(np.ptp(w * v[j]) / 15) for v, w in zip(values, weights)]
    assert np.max(np.abs(np.asarray(folded[j]) - exact[j])) <= sum(
      w_step for w_step in steps
    ) / sum(weights)
  again = aggregation.report(
    aggregation.accumulate(
      aggregation.zero(specs, ()), tf.nest.map_structure(tf.constant, values[0]), 1.0
    ),
    (),
  )[0]
  once = aggregation.report(
    aggregation.accumulate(
      aggregation.zero(specs, ()), tf.nest.map_structure(tf.constant, values[0]), 1.0
    ),
    (),
  )[0]
  for a, b in zip(again, once):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # seeded: the same rounding


def test_more_bits_err_less():
  rng = np.random.default_rng(3)
  t = rng.normal(size=5000).astype(np.float32)
  errors = [np.sqrt(np.mean((_roundtrip(t, b)[1] - t) ** 2)) for b in (2, 4, 8, 16)]
  assert errors == sorted(errors, reverse=True) and errors[-1] < 1e-4


CLIENTS = 20


@pytest.fixture(scope='module')
def synthetic():
  return tasks.build_task(tasks.TaskConfig('synthetic', seed=3, num_clients=CLIENTS))


def _fedopt(task, aggregation, name='fedopt'):
  server = optimizers.build_server_optimizer(optimizers.ServerOptimizerConfig('sgd', 1.0))
  return algorithms.build_algorithm(
    name,
    algorithms.AlgorithmInputs(
      lambda: task.model_fn(1),
      algorithms.ClientTrainingConfig(
        client_optimizers.ClientOptimizerConfig('sgd', 0.1), batch_size=10
      ),
      server,
      1.0,
      optimizers.ScheduleConfig(),
      num_clients=CLIENTS,
      aggregation=aggregation,
    ),
  )


def _round(engine_name, algorithm, task, ids):
  engine = engines.build_engine(engine_name, algorithm, engines.EngineOptions(len(ids)))
  state = engine.initialize(tff.learning.models.ModelWeights.from_model(task.keras_model_fn(1)))
  index = {cid: i for i, cid in enumerate(task.client_ids)}
  clients = [
    engines.RoundClient(cid, task.train_clients[cid], seeds.client_seed(1, 1, index[cid], CLIENTS))
    for cid in ids
  ]
  x0 = np.concatenate([np.ravel(w) for w in engine.model_weights(state).trainable])
  result = engine.next(state, clients)
  x1 = np.concatenate([np.ravel(w) for w in engine.model_weights(result.state).trainable])
  return x0 - x1, result.metrics


def test_engines_agree_within_the_quantisation_error(synthetic):
  ids = synthetic.client_ids[:5]
  exact, _ = _round('inprocess', _fedopt(synthetic, None), synthetic, ids)
  # Each client alone (server SGD at rate 1): its update u_i, to bound the quantisation error.
  updates = [_round('inprocess', _fedopt(synthetic, None), synthetic, [cid])[0] for cid in ids]
  weights = [len(synthetic.train_clients[cid]['y']) for cid in ids]
  split = 600  # the softmax regression's kernel (60 x 10), then its bias (10)
  bound = np.zeros_like(exact)
  for u, w in zip(updates, weights):
    for part in (slice(0, split), slice(split, None)):
      bound[part] += np.ptp(w * u[part]) / 255  # one 8-bit step of the tensor w_i u_i
  bound /= sum(weights)
  sent = {}
  for engine_name in ('tff', 'inprocess'):
    aggregation = aggregators.quantized_mean(8)
    g, metrics = _round(engine_name, _fedopt(synthetic, aggregation), synthetic, ids)
    sent[engine_name] = g
    assert metrics['compression_bits_per_client'] == bits_numpy([600, 10], 8)
    assert np.all(np.abs(g - exact) <= bound * (1 + 1e-4) + 1e-7)
    assert np.max(np.abs(g - exact)) > 0  # it was quantised
  # A last-bit difference between the engines' updates reseeds a client's rounding (the seed is
  # a hash of the tensor), so the engines agree to that error, not bit for bit.
  assert np.all(np.abs(sent['tff'] - sent['inprocess']) <= 2 * bound * (1 + 1e-4) + 1e-7)


@pytest.mark.parametrize('name', sorted(algorithm_config.COMPRESSION_REFUSALS))
def test_algorithms_that_cannot_compress_refuse_in_one_line(synthetic, name):
  with pytest.raises(ValueError) as e:
    _fedopt(synthetic, aggregators.quantized_mean(8), name)
  assert str(e.value) == f'build_{name}: {algorithm_config.compression_refusal(name)}'


@pytest.mark.parametrize(
  'kwargs,message',
  [
    ({'bits': 0}, 'bits=0 is invalid; expected an integer in [1, 16]'),
    ({'threshold': -1}, 'threshold=-1 is invalid; expected an integer >= 0'),
    ({'name': 'topk'}, "unknown compression 'topk'; valid choices: none, uniform"),
  ],
)
def test_bad_compression_settings_are_named(kwargs, message):
  with pytest.raises(ValueError) as e:
    aggregator_config.CompressionConfig(**{'name': 'uniform', **kwargs})
  assert message in str(e.value)
